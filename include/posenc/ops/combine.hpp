#pragma once
/// \file
/// Split-KV combine: partial attention outputs computed over disjoint sets of keys, each
/// with its log-sum-exp, merged into the output over all keys, as flash-attn's
/// `flash_attn_combine` and FlashInfer's `merge_state` define it.

#include <cstdint>
#include <optional>

#include "posenc/declare.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// How the axes of lse_partial follow those of out_partial.
enum class LseLayout : std::uint8_t {
  /// out_partial's axes without the last (d): out [splits, b, s, h, d] with lse
  /// [splits, b, s, h], as flash_attn_combine takes them.
  sh,
  /// The same with lse's last two axes swapped: lse [splits, b, h, s], the layout of
  /// flash-attn's softmax_lse [b, h, s] and of posenc attention's lse, stacked.
  hs,
};

/// The options of combine().
struct CombineOptions {
  /// The split axis of out_partial and lse_partial (negative counts from the end of
  /// out_partial, as numpy). Not out_partial's last axis (d); with LseLayout::hs, none
  /// of the two axes before it either.
  std::int64_t axis = 0;
  LseLayout lse_layout = LseLayout::sh;  ///< how lse_partial's axes follow out_partial's
  std::optional<DType> dtype;  ///< type of the output (default: out_partial's); float only
};

/// The names of the lse layouts, as the option and the keyword take them.
inline const Names<LseLayout>& lse_layout_names() {
  static const Names<LseLayout> names{{"sh", LseLayout::sh}, {"hs", LseLayout::hs}};
  return names;
}

/// The names of the output types: same (none: out_partial's) and the float dtypes.
inline const Names<std::optional<DType>>& combine_dtype_names() {
  static const Names<std::optional<DType>> names{
      {"same", std::nullopt},    {"f64", DType::f64},     {"f32", DType::f32},
      {"f16", DType::f16},       {"bf16", DType::bf16},   {"float64", DType::f64},
      {"float32", DType::f32},   {"float16", DType::f16}, {"bfloat16", DType::bf16}};
  return names;
}

/// The split axis, the lse layout and the output type, declared once (declare.hpp):
/// `posenc combine --axis --lse-layout --dtype`, posenc.combine(axis=, lse_layout=, dtype=).
template <class V>
void declare(V& v, CombineOptions& o) {
  v(field("axis",
          "the split axis of both inputs (default 0; negative counts from the end of "
          "OUT_PARTIAL)"),
    o.axis);
  v(field("lse_layout",
          "sh: LSE_PARTIAL has OUT_PARTIAL's axes without d ([splits, b, s, h], "
          "flash_attn_combine's; default); hs: its last two swapped ([splits, b, h, s], "
          "flash-attn's softmax_lse and posenc attention's lse, stacked)"),
    choice(o.lse_layout, lse_layout_names()));
  v(field("dtype", "output type: same (OUT_PARTIAL's, default), f64, f32, f16, bf16"),
    choice(o.dtype, combine_dtype_names()));
}

/// The merged output and its log-sum-exp.
struct CombineResult {
  Tensor out;  ///< out_partial's shape without the split axis, in CombineOptions::dtype
  /// lse_partial's shape without the split axis: f64 when the output is f64, else f32
  /// (as attention's lse and flash-attn's softmax_lse).
  Tensor lse;
};

/// Merges the splits: per position, lse = log(sum_i exp(lse_i)) and
/// out = sum_i exp(lse_i - lse) * out_i, in float64 from the inputs' exact values and
/// rounded once to the output types. A split whose lse is -inf (it saw no key)
/// contributes nothing, and its out values are not read (they may be NaN); a position
/// where every split is -inf gets out 0 and lse -inf. Both inputs are any float dtype.
///
/// Throws UsageError for an axis outside out_partial or naming its last axis (`axis: ...`);
/// InputError, naming `out_partial` or `lse_partial`, for a rank below 2, non-float
/// dtypes, shapes that do not correspond (lse_partial must be out_partial's shape
/// without d, arranged as `lse_layout` says), an lse that is NaN or +inf, and a NaN or
/// infinite out value in a split that contributes.
CombineResult combine(const Tensor& out_partial, const Tensor& lse_partial,
                      const CombineOptions& opt = {});

}  // namespace posenc
