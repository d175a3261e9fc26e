// The rotation of `--arith hf|meta|ggml` (see rope_framework.hpp). Each vector is
// widened to float64 (exact for every storage type), its pairs are combined with the
// framework's operations, rounding to the framework's types after each one, and the
// result (a value of the storage type) is written in the output dtype.
#pragma GCC optimize("fp-contract=off")

#include "ops/rope_framework.hpp"

#include <cmath>
#include <vector>

namespace posenc::rope_detail {

namespace {

double load(DType t, const void* p, std::size_t i) {
  switch (t) {
    case DType::f16:
      return half_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::f32:
      return static_cast<const float*>(p)[i];
    default:
      return static_cast<const double*>(p)[i];
  }
}

void store(DType t, void* p, std::size_t i, double v) {
  switch (t) {
    case DType::f16:
      static_cast<std::uint16_t*>(p)[i] = double_to_half(v);
      break;
    case DType::bf16:
      static_cast<std::uint16_t*>(p)[i] = double_to_bf16(v);
      break;
    case DType::f32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      static_cast<double*>(p)[i] = v;
      break;
  }
}

// A float32 result stored in the framework's type (torch's and ggml's float -> bf16 /
// f16 conversions round to nearest even).
float round_to(DType t, float v) {
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::f16) return half_to_float(float_to_half(v));
  return v;
}

// HF: q * cos + rotate_half(q) * sin with cos and sin cast to q's dtype; bf16 and f16
// operations compute in float32 and round to the storage type each.
void hf_pair(DType t, double xa, double xb, float c, float s, double& ya, double& yb) {
  if (t == DType::f64) {
    const double cd = c, sd = s;
    ya = xa * cd + (-xb) * sd;
    yb = xb * cd + xa * sd;
    return;
  }
  const float cc = round_to(t, c), ss = round_to(t, s);
  const auto a = static_cast<float>(xa), b = static_cast<float>(xb);
  ya = round_to(t, round_to(t, a * cc) + round_to(t, (-b) * ss));
  yb = round_to(t, round_to(t, b * cc) + round_to(t, a * ss));
}

// ERNIE-4.5's: (q.float() * cos) + (rotate_half(q).float() * sin) in float32, rounded
// once to the type t; cos and sin in t first when `cast_trig` (then an f64 input's
// float32 values meet float64 cos and sin, and the products are float64).
void hf_float32_pair(DType t, double xa, double xb, float c, float s, bool cast_trig,
                     double& ya, double& yb) {
  const float cc = cast_trig ? round_to(t, c) : c, ss = cast_trig ? round_to(t, s) : s;
  const auto a = static_cast<float>(xa), b = static_cast<float>(xb);
  if (t == DType::f64 && cast_trig) {
    const double a64 = a, b64 = b, c64 = cc, s64 = ss;
    ya = a64 * c64 + (-b64) * s64;
    yb = b64 * c64 + a64 * s64;
    return;
  }
  const float pa = a * cc, qa = (-b) * ss, pb = b * cc, qb = a * ss;
  ya = round_to(t, pa + qa);
  yb = round_to(t, pb + qb);
}

// Meta's and ggml's pair rotation, (x0 cos - x1 sin, x0 sin + x1 cos) on the values
// as float32, then stored in the type t:
// - Meta: (x0 + i x1) * (cos + i sin) in complex64 on x.float(), then type_as(x); torch's
//   AVX2 complex multiply rounds the four products and adds, the scalar code for the
//   tail of its inner loop (pairs of elements there) fuses one product of each;
// - ggml: rotate_pairs as GCC contracts it, the first product fused.
void float_pair(DType t, double xa, double xb, float c, float s, bool fused, double& ya,
                double& yb) {
  const auto x0 = static_cast<float>(xa), x1 = static_cast<float>(xb);
  float y0, y1;
  if (fused) {
    y0 = std::fma(x0, c, -(x1 * s));
    y1 = std::fma(x0, s, x1 * c);
  } else {
    y0 = x0 * c - x1 * s;
    y1 = x0 * s + x1 * c;
  }
  ya = round_to(t, y0);
  yb = round_to(t, y1);
}

// Whether torch's complex multiply fuses at index q of an inner loop of `len` pairs:
// vectorized_loop takes blocks of 8 complex64 (two AVX2 vectors) with the plain
// products; GCC compiled the scalar loop over the rest two elements at a time with
// fused multiply-adds, and a last odd element without.
bool meta_fused(std::size_t q, std::size_t len) {
  const std::size_t vec = len - len % 8;
  if (q < vec) return false;
  const std::size_t rest = len % 8;
  return q - vec < rest - rest % 2;
}

// ggml's rotate_pairs as GCC 12 (-O3 -march=native) compiles it: every pair fuses,
// except in the f32 normal (interleaved) loop, which GCC vectorises four pairs at a
// time and whose scalar epilogue (the last half % 4 pairs) multiplies and adds.
bool ggml_fused(DType t, RopeStyle style, std::size_t j, std::size_t half) {
  if (t != DType::f32 || style != RopeStyle::gptj) return true;
  return j < half - half % 4;
}

}  // namespace

bool run_framework_kernel(const FrameworkKernelArgs& a) {
  const KernelArgs& k = *a.k;
  const FrameworkRope& f = *a.f;
  const std::size_t D = k.head_dim, R = k.rotary_dim, half = R / 2;
  const auto* table = static_cast<const float*>(k.table);
  const std::size_t total = k.n0 * k.n1 * k.n2;
  bool bad = false;
#pragma omp parallel reduction(|| : bad)
  {
    std::vector<double> x(D), y(D);
#pragma omp for schedule(static)
    for (std::ptrdiff_t v = 0; v < static_cast<std::ptrdiff_t>(total); ++v) {
      const auto u = static_cast<std::size_t>(v);
      const std::size_t i2 = u % k.n2, i1 = (u / k.n2) % k.n1, i0 = u / (k.n2 * k.n1);
      const std::ptrdiff_t off = static_cast<std::ptrdiff_t>(i0) * k.st0 +
                                 static_cast<std::ptrdiff_t>(i1) * k.st1 +
                                 static_cast<std::ptrdiff_t>(i2) * k.st2;
      const std::ptrdiff_t tok = static_cast<std::ptrdiff_t>(i0) * k.t0 +
                                 static_cast<std::ptrdiff_t>(i1) * k.t1 +
                                 static_cast<std::ptrdiff_t>(i2) * k.t2;
      const float* cs = table + static_cast<std::size_t>(k.rowidx[tok]) * R;
      for (std::size_t i = 0; i < D; ++i) {
        x[i] = load(a.in, k.src, static_cast<std::size_t>(off) + i);
        bad = bad || !std::isfinite(x[i]);
        y[i] = x[i];
      }
      std::size_t meta_off = 0;
      if (a.meta_s_axis >= 0) {
        const std::size_t idx[3] = {i0, i1, i2};
        meta_off = (a.meta_s0 + idx[a.meta_s_axis]) * half;
      }
      for (std::size_t j = 0; j < half; ++j) {
        const bool neox = f.style == RopeStyle::neox;
        const std::size_t ia = neox ? j : 2 * j, ib = neox ? j + half : 2 * j + 1;
        if (f.arith == Arith::hf) {
          if (f.hf_rotation == HfRotation::storage) {
            hf_pair(a.in, x[ia], x[ib], cs[j], cs[half + j], y[ia], y[ib]);
          } else {
            hf_float32_pair(a.in, x[ia], x[ib], cs[j], cs[half + j],
                            f.hf_rotation == HfRotation::float32_cast_trig, y[ia], y[ib]);
          }
          continue;
        }
        const bool fused = f.arith == Arith::meta ? meta_fused(meta_off + j, a.meta_row)
                                                  : ggml_fused(a.in, f.style, j, half);
        float_pair(a.in, x[ia], x[ib], cs[j], cs[half + j], fused, y[ia], y[ib]);
      }
      for (std::size_t i = 0; i < D; ++i)
        store(a.out, k.dst, static_cast<std::size_t>(off) + i, y[i]);
    }
  }
  return bad;
}

}  // namespace posenc::rope_detail
