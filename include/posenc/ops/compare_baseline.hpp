#pragma once
/// \file
/// flash-attn's verdict on a kernel: its error against the reference is held to a
/// multiple of the error of a baseline computed in the low precision (FA's "PyTorch
/// baseline", `attention_ref(..., upcast=False, reorder_ops=True)`), plus an absolute
/// slack from the reference's own rounding:
///
///     max|kernel - ref| <= factor * max|baseline - ref| + atol,
///     atol = 2 * max|ref + 0.3 - 0.3 - ref|   (in ref's dtype)
///
/// as hopper/test_flash_attn.py asserts (factor 2; 3 with soft-capping).

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// The rule's parameters.
struct BaselineRule {
  double factor = 2;  ///< how many times the baseline's error the kernel may make
  /// A fixed atol; unset: flash-attn's rule, fa_atol(ref).
  std::optional<double> atol;
  /// How messages name the kernel, the reference and the baseline (the command: their
  /// files; Python: its keywords a, b and baseline).
  std::array<std::string, 3> names{"kernel", "ref", "baseline"};
};

/// The verdict and the numbers behind it.
struct BaselineVerdict {
  double factor = 2;                       ///< the rule's factor
  double atol = 0;                         ///< the atol in force
  bool atol_fa = true;                     ///< atol from fa_atol(ref) (else given)
  DType ref_dtype = DType::f64;            ///< the type fa_atol computed in
  double kernel_error = 0;                 ///< max|kernel - ref| (NaN when any is NaN)
  std::optional<std::size_t> kernel_at;    ///< flat index of the first largest
  double baseline_error = 0;               ///< max|baseline - ref| (NaN when any is NaN)
  std::optional<std::size_t> baseline_at;  ///< flat index of the first largest
  DType kernel_diff_type = DType::f64;     ///< the type kernel - ref is computed in
  DType baseline_diff_type = DType::f64;   ///< the type baseline - ref is computed in
  double bound = 0;                        ///< factor * baseline_error + atol
  bool shapes_equal = true;                ///< kernel and ref have one shape
  /// The kernel passes: the shapes agree and kernel_error <= bound (false with NaN).
  bool pass() const { return shapes_equal && kernel_error <= bound; }
};

/// The verdict's numbers under the names both front ends give them (`posenc compare
/// --baseline --json`, posenc.compare's VerdictResult), in that order: `f(name, value)`
/// with a double, a string, or an index: the multi-index in `kernel` (error_index) or in
/// `ref` (baseline_error_index), nullopt when nothing was compared.
template <class F>
void for_each_verdict_number(const BaselineVerdict& v, const Shape& kernel, const Shape& ref,
                             F&& f) {
  using Index = std::optional<std::vector<std::size_t>>;
  const auto at = [](std::optional<std::size_t> flat, const Shape& shape) {
    return flat ? Index(unravel_index(*flat, shape)) : Index();
  };
  f("factor", v.factor);
  f("atol", v.atol);
  f("atol_rule", std::string(v.atol_fa ? "fa" : "given"));
  f("error", v.kernel_error);
  f("error_index", at(v.kernel_at, kernel));
  f("baseline_error", v.baseline_error);
  f("baseline_error_index", at(v.baseline_at, ref));
  f("bound", v.bound);
}

/// flash-attn's fwd_atol: 2 * max|ref + 0.3 - 0.3 - ref| with torch's arithmetic in
/// ref's dtype: for f16 and bf16 each operation is computed in float32 (0.3 as the
/// float 0.3f) and rounded to ref's dtype; f32 in float32; f64 in double. NaN when ref
/// holds a NaN, 0 for an empty ref. InputError ("ref: ...") for a non-float dtype.
double fa_atol(const Tensor& ref);

/// The type torch computes `a - b` in for tensors of types `a` and `b`: the same type,
/// the wider one, or f32 for f16 with bf16.
DType torch_promote(DType a, DType b);

/// max|a - b| as torch computes `(a - b).abs().max()`: the difference in
/// torch_promote(a, b) (f16 and bf16 via float32, then rounded), NaN when any
/// difference is NaN; `at` gets the flat index of the first largest (of the first NaN).
/// The shapes must agree.
double torch_max_abs_diff(const Tensor& a, const Tensor& b, std::optional<std::size_t>* at);

/// flash-attn's verdict on `kernel` against `ref`, with `baseline` the low-precision
/// computation of the same (see the file comment); the errors are computed as
/// torch_max_abs_diff does, so that the verdict is the one FA's test reaches on the same
/// tensors. A kernel whose shape differs from ref's fails (shapes_equal false, no error
/// computed). UsageError ("factor: ...", "atol: ...") for a negative or non-finite
/// factor or atol; InputError naming the tensor (by `rule.names`) for a non-float dtype
/// or a baseline whose shape differs from ref's.
BaselineVerdict judge_against_baseline(const Tensor& kernel, const Tensor& ref,
                                       const Tensor& baseline, const BaselineRule& rule = {});

}  // namespace posenc
