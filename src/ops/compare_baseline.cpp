// flash-attn's verdict rule. The arithmetic is torch's on the tensors' own dtypes (FA's
// test computes `out_ref + 0.3 - 0.3 - out_ref` and `out - out_ref` on bf16 or fp16
// tensors), so that a borderline kernel gets the verdict FA's test gives it: torch
// computes an f16/bf16 operation in float32 with a Python scalar taken as a float, and
// rounds the result to the tensor's type.

#include "posenc/ops/compare_baseline.hpp"

#include <fmt/core.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "posenc/error.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/compare_fields.hpp"

namespace posenc {

namespace {

// x (a float32 result) rounded to `t` as torch stores it.
double to_type(float x, DType t) {
  switch (t) {
    case DType::f16:
      return half_to_float(float_to_half(x));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(x));
    default:
      return x;
  }
}

// a - b in `t`, a and b values of types no wider than t.
double sub_in(double a, double b, DType t) {
  if (t == DType::f64) return a - b;
  return to_type(static_cast<float>(a) - static_cast<float>(b), t);
}

void check_float(const Tensor& t, const std::string& name) {
  if (!is_float(t.dtype())) {
    throw InputError(
        fmt::format("{}: expected a float dtype, got {}", name, dtype_name(t.dtype())));
  }
}

int width(DType t) { return t == DType::f64 ? 3 : t == DType::f32 ? 2 : 1; }

}  // namespace

DType torch_promote(DType a, DType b) {
  if (a == b) return a;
  if (width(a) != width(b)) return width(a) > width(b) ? a : b;
  return DType::f32;  // f16 with bf16
}

double fa_atol(const Tensor& ref) {
  check_float(ref, "ref");
  const DType t = ref.dtype();
  const Tensor r = cast(ref, DType::f64);
  const double* p = r.data<double>();
  double worst = 0;
  for (std::size_t i = 0; i < r.numel(); ++i) {
    double d = 0;
    if (t == DType::f64) {
      d = ((p[i] + 0.3) - 0.3) - p[i];
    } else {
      const float x = static_cast<float>(p[i]);
      const double up = to_type(x + 0.3f, t);
      const double down = to_type(static_cast<float>(up) - 0.3f, t);
      d = sub_in(down, p[i], t);
    }
    if (std::isnan(d)) return std::nan("");
    worst = std::max(worst, std::fabs(d));
  }
  return 2 * worst;
}

double torch_max_abs_diff(const Tensor& a, const Tensor& b, std::optional<std::size_t>* at) {
  const DType t = torch_promote(a.dtype(), b.dtype());
  const Tensor x = cast(a, DType::f64), y = cast(b, DType::f64);
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  double worst = 0;
  std::optional<std::size_t> where;
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const double d = std::fabs(sub_in(px[i], py[i], t));
    if (std::isnan(d)) {
      worst = d;
      where = i;
      break;
    }
    if (!where || d > worst) {
      worst = d;
      where = i;
    }
  }
  if (at) *at = where;
  return worst;
}

BaselineVerdict judge_against_baseline(const Tensor& kernel, const Tensor& ref,
                                       const Tensor& baseline, const BaselineRule& rule) {
  validate(rule);  // the declared ranges (compare_fields.hpp)
  check_float(kernel, rule.names[0]);
  check_float(ref, rule.names[1]);
  check_float(baseline, rule.names[2]);
  if (baseline.shape() != ref.shape()) {
    throw InputError(fmt::format("{}: has shape {}, the reference {}", rule.names[2],
                                 shape_str(baseline.shape()), shape_str(ref.shape())));
  }
  BaselineVerdict v;
  v.factor = rule.factor;
  v.ref_dtype = ref.dtype();
  v.atol_fa = !rule.atol;
  v.atol = rule.atol ? *rule.atol : fa_atol(ref);
  v.baseline_diff_type = torch_promote(baseline.dtype(), ref.dtype());
  v.baseline_error = torch_max_abs_diff(baseline, ref, &v.baseline_at);
  v.bound = v.factor * v.baseline_error + v.atol;
  v.kernel_diff_type = torch_promote(kernel.dtype(), ref.dtype());
  v.shapes_equal = kernel.shape() == ref.shape();
  if (v.shapes_equal) {
    v.kernel_error = torch_max_abs_diff(kernel, ref, &v.kernel_at);
  } else {
    v.kernel_error = std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

}  // namespace posenc
