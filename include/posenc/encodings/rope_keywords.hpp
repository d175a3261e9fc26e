#pragma once
/// \file
/// RoPE's requests read by keyword (posenc/keywords.hpp), with the rules the command
/// checks between its options: the ROPE OPTIONS, the positions and the ways of applying of
/// a keyword caller (the Python package's rope, table(kind="rope") and attention(rope=True)).

#include <string>

#include "posenc/declare.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/keywords.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// RopeParams from the ROPE OPTIONS given (RopeParams' fields, arith, hf_config,
/// hf_version, layer_type, layer), a HF config completing them as the command does;
/// `head_dim` > 0 sets the head dimension (Q's); `c` is the caller as the arithmetic's
/// rules see it (the precision too).
RopeParams rope_params_by_keyword(const Keywords& k, int head_dim, const Caller& c);

/// start, the position tensors and the coordinate grid (`grid`: its text; the caller's
/// coords are the key grid), checked as the command checks them (check_positions).
Positions positions_by_keyword(const Keywords& k);

/// The ways of applying; `pos`: the positions' keywords, where the cos/sin tables are.
RopeApplyOptions apply_by_keyword(const Keywords& k, const Keywords* pos = nullptr);

/// What rotating one tensor takes: its variant, its positions, the ways of applying.
struct RopeRotation {
  RopeFreqs freqs;
  Positions pos;
  RopeApplyOptions apply;
};

/// The rotation of a tensor of `shape` (axes `axes`, named `what` in messages) that the
/// keywords give: the ROPE OPTIONS (`rope`), the positions with the caller's cos/sin
/// tables (`pos`) and the ways of applying (`apply`), with the rules `posenc rope` checks
/// between them (cos/sin tables replace the frequency options and take the exact
/// arithmetic only; the caller's coords are the key grid) and the defaults the ways of
/// applying set (with_apply_defaults), the head dimension axis d's (rope_freqs_for).
RopeRotation rope_by_keyword(const Keywords& rope, const Keywords& pos, const Keywords& apply,
                             const Shape& shape, const Axes& axes, const std::string& what);

}  // namespace posenc
