#pragma once
/// \file
/// The tables of `posenc table` as library requests. A request (one struct per kind,
/// its members named as the command's options) is reduced to a `Table`: the TableSpec
/// (shape and a function computing each line in float64), the parameters to record
/// with it, and the default HDF5 dataset name. `write_table` (table.hpp) streams a
/// Table to any sink in bounded memory; `evaluate_table` computes it into an xtensor.
///
/// Errors name the request member involved ("positions: must be at least 1"), never a
/// command-line option.

#include <cstdint>
#include <optional>
#include <string>

#include <xtensor/xarray.hpp>

#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {

/// A table described, not yet computed.
struct Table {
  TableSpec spec;
  Attrs attrs;               ///< parameters used, recorded with the output
  std::string dataset;       ///< default HDF5 dataset name, e.g. "/rope_cos_sin"
  bool integral = false;     ///< the values are integers (index tables)
  std::int64_t max_value = 0;  ///< integral tables: the largest value held
  std::int64_t min_value = 0;  ///< integral tables: the smallest value held
};

/// The element type a table is written as by default: f32 for real tables, i64 for
/// index tables.
DType default_table_dtype(const Table& t);

/// Throws UsageError ("dtype: ...") unless `dtype` can hold the table: a float type for
/// real tables; for index tables an integer type holding `min_value` and `max_value`, or
/// f32/f64.
void check_table_dtype(const Table& t, DType dtype);

/// Computes the whole table in float64 (lines in parallel; the values do not depend on
/// the thread count). Memory: the whole table; stream large ones with write_table.
xt::xarray<double> evaluate_table(const Table& t);

// --- requests ---------------------------------------------------------------------

struct SinusoidalRequest {
  std::int64_t positions = 0;  ///< N >= 1
  int dim = 0;                 ///< D, even
  double base = 10000.0;
  std::int64_t start = 0;      ///< first position, >= 0
  SinusoidalLayout layout = SinusoidalLayout::interleaved;
};
/// Vaswani's table [N, D]: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i).
Table sinusoidal_table(const SinusoidalRequest& r);

/// What a RoPE table holds. cos_sin is [2, ..., W] (cos then sin); cos_sin_cache is
/// vLLM's [..., R] = cat(cos_half, sin_half).
enum class RopeEmit { inv_freq, angles, cos, sin, cos_sin, cos_sin_cache };
/// inv-freq | angles | cos | sin | cos-sin | cos-sin-cache (UsageError naming "emit").
RopeEmit parse_rope_emit(const std::string& s);
std::string rope_emit_name(RopeEmit e);

struct RopeTableRequest {
  /// The variant. `rope.seq_len` 0 means one past the largest position of the table.
  RopeParams rope;
  /// Number of positions N (start, start + 1, ...). Needed unless `where` holds ids or
  /// packed sequences (then it must match them when given) or emit is inv_freq.
  std::optional<std::int64_t> positions;
  /// start, explicit ids (any shape: the table gets that shape plus the line axis) or
  /// cu_seqlens (positions restart at each boundary). `start` cannot go with ids.
  Positions where;
  RopeEmit emit = RopeEmit::cos_sin;
  bool half = false;     ///< lines of R/2 (one per frequency, flash-attn) instead of R
  bool inverse = false;  ///< sin (and angles) negated: the table of R^T
  /// f32: float32 angles fp32(position) * fp32(inv_freq) rounded to fp32; cos/sin then
  /// evaluated exactly on those angles. (A framework's bits: `rope.arith`.)
  Precision precision = Precision::f64;
};
/// inv_freq [R/2]; angles, cos, sin [N, W]; cos_sin [2, N, W]; cos_sin_cache [N, R]
/// with W = R (full, in the style's pair layout) or R/2 (half). With ids of shape
/// [b, s] the table is [b, s, W] (and [2, b, s, W]).
Table rope_table(const RopeTableRequest& r);

struct Rope2dRequest {
  std::int64_t height = 0, width = 0;  ///< grid H x W, tokens in row-major order
  int dim = 0;                         ///< D, a multiple of 4
  double base = 100.0;
  bool y_first = false;  ///< the y block takes the first R/4 pairs
  RopeStyle style = RopeStyle::gptj;
  RopeEmit emit = RopeEmit::cos_sin;
  bool half = false;
};
/// Axial 2-D RoPE for an H x W grid: inv_freq [D/4], otherwise as rope_table with
/// H * W rows.
Table rope2d_table(const Rope2dRequest& r);

/// ALiBi tables: the slopes [H], or bias matrices [H, Q, K] (the causal forms hold -inf
/// above the diagonal: the bias including the causal mask).
enum class AlibiTable { slopes, causal, symmetric, fairseq, bottom_right };
AlibiTable parse_alibi_table(const std::string& s);  ///< slopes|causal|symmetric|fairseq|bottom-right
std::string alibi_table_name(AlibiTable v);
struct AlibiRequest {
  int heads = 0;
  std::optional<std::int64_t> q_len, k_len;  ///< either gives the other by default
  std::optional<AlibiTable> variant;         ///< default: slopes without lengths, causal with
  double max_bias = 8.0;
};
Table alibi_table(const AlibiRequest& r);

struct RelativeRequest {
  std::optional<std::int64_t> q_len, k_len;  ///< either gives the other by default
  std::int64_t max_distance = -1;            ///< M >= 0, required
  bool q_minus_k = false;                    ///< i - j instead of j - i
};
/// Shaw's clipped relative index clip(j - i, -M, M) + M, [Q, K].
Table relative_table(const RelativeRequest& r);

struct T5BucketRequest {
  std::optional<std::int64_t> q_len, k_len;  ///< either gives the other by default
  int buckets = 32;
  std::int64_t max_distance = 128;
  bool bidirectional = true;
};
/// HF T5's _relative_position_bucket of j - i, [Q, K].
Table t5_bucket_table(const T5BucketRequest& r);

}  // namespace posenc
