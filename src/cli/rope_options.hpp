#pragma once
// ROPE OPTIONS of CLI.md, shared by `table rope`, `rope` and `attention --rope`:
// one binder, one conversion to RopeParams, so the three commands cannot drift.

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/declared_options.hpp"

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc::cli {

/// The HF config fields (--hf-config, --hf-version, --layer-type, --layer) are declared
/// with HfConfigChoice (posenc/encodings/rope_fields.hpp).
struct RopeCliOptions : HfConfigChoice {
  /// --style: a name of fields::rope_styles(), or tiled (`posenc rope`); bound by hand.
  std::string style = "neox";
  RopeParams params;  ///< the declared ROPE OPTIONS (posenc/encodings/rope_fields.hpp)
  /// --start and the declared tensors of positions (--position-ids, --cu-seqlens; `posenc
  /// rope` binds its --angles and --seqlen-offsets here too), read by rope_positions.
  Positions where;
  /// The files of the declared tensors of positions, shared by the copies of the options.
  std::shared_ptr<ArrayFiles> files = std::make_shared<ArrayFiles>();
  /// --inverse and --precision (declared with RopeApplyOptions); `posenc rope` binds its
  /// own ways of applying here too.
  RopeApplyOptions apply;
  ArithChoice arith;  ///< --arith (declared, posenc/encodings/rope_fields.hpp)
  CLI::App* app = nullptr;  ///< to ask which options were given explicitly
};

/// Binds every ROPE OPTION of CLI.md to `o` on `sub`.
void add_rope_options(CLI::App* sub, RopeCliOptions& o);

/// Builds RopeParams (applying --hf-config first, explicit flags winning) for a head
/// dimension `head_dim`. Throws UsageError for bad values.
RopeParams rope_params(const RopeCliOptions& o, int head_dim);

/// The layers --layer-type / --layer select, and the check of --layer (UsageError
/// without --hf-config or below 0).
HfLayer hf_layer(const RopeCliOptions& o);
void check_layer_option(const RopeCliOptions& o);

/// Positions from --start, --position-ids and the declared tensors of positions (reading
/// the referenced tensors), checked by check_positions. With `real_coords`, a float
/// --position-ids tensor gives real coordinates (Positions::coords); otherwise it must hold
/// integers.
Positions rope_positions(RopeCliOptions& o, bool real_coords = false);

/// The last of `count` (>= 1) consecutive positions from `start` (0 <= start <= 2^53);
/// UsageError when it is beyond kMaxPosition.
std::int64_t last_position(std::int64_t start, std::int64_t count);

Precision rope_precision(const RopeCliOptions& o);

/// --arith, checked against --precision (check_given of ArithChoice).
Arith rope_arith(const RopeCliOptions& o);

}  // namespace posenc::cli
