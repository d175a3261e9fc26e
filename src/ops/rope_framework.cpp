// The rotation of `--arith hf|meta|ggml` (see rope_framework.hpp). Each vector is
// widened to float64 (exact for every storage type), its pairs are combined with the
// framework's operations, rounding to the framework's types after each one, and the
// result (a value of the storage type) is written in the output dtype.
#pragma GCC optimize("fp-contract=off")

#include "ops/rope_framework.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "encodings/rope_framework.hpp"
#include "encodings/torch_cpu.hpp"
#include "posenc/error.hpp"

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
// except in the f32 normal (interleaved) loop, whose vector steps fuse and whose scalar
// rest (the last half % B pairs) multiplies and adds. B, the pairs of the smallest
// vector step, is GCC's choice for the machine (4 measured on AMD Zen 5, whose rest is
// scalar; 2 on an Intel Xeon that GCC tunes as Rocket Lake, which vectorises the rest
// by two pairs): the build measures it (cmake/ggml_pair_block.cpp).
#ifndef POSENC_GGML_PAIR_BLOCK
#error "POSENC_GGML_PAIR_BLOCK: set by CMakeLists.txt"
#endif
bool ggml_fused(DType t, RopeStyle style, std::size_t j, std::size_t half) {
  if (t != DType::f32 || style != RopeStyle::gptj) return true;
  return j < half - half % POSENC_GGML_PAIR_BLOCK;
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

namespace {

using framework_detail::attr_number;

// DINOv3's get_patches_center_coordinates in float32 (arange(0.5, n) / n, then
// 2 * c - 1) times float32(2 pi), for the token whose exact centre coordinate is x:
// x = (i + 0.5) / n * 2 - 1 gives back i. Prefix tokens sit at 0, which for an even n
// is no centre; they keep angle 0, as the odd grid's middle patch has it.
float dinov3_coordinate(double x, std::int64_t n) {
  const double t = (x + 1.0) / 2.0 * static_cast<double>(n) - 0.5;
  const double i = std::nearbyint(t);
  if (std::fabs(t - i) > 0.25) return 0.0f;
  float c = static_cast<float>(i + 0.5) / static_cast<float>(n);
  c = 2.0f * c - 1.0f;
  return static_cast<float>(kRopeTwoPi) * c;
}

// DINOv3ViTRopePositionEmbedding: 1 / base ** arange(0, 1, 4 / R) (float32). torch's
// arange forms each vector of 8 from the float32 start of the vector plus k * step in
// float64, blocks of 16 elements in vectors and the rest one by one.
std::vector<float> dinov3_inv_freq(double base, std::size_t r) {
  const std::size_t n = r / 4, vec = n - n % 16;
  const double step = 4.0 / static_cast<double>(r);
  std::vector<float> e(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = i < vec ? i % 8 : 0;
    const float start = static_cast<float>(step * static_cast<double>(i - k));
    e[i] = static_cast<float>(static_cast<double>(start) + step * static_cast<double>(k));
  }
  torch_cpu::pow_scalar_base(static_cast<float>(base), e.data(), y.data(), n);
  for (float& v : y) v = 1.0f / v;
  return y;
}

// Two axes of R/4 pairs each, axis 0 first: pair k of axis a takes v[stride * k], plus
// `odd` on axis 1 (Pixtral's even and odd frequencies).
void two_axes(FrameworkLayout& l, const std::vector<float>& v, std::size_t half,
              std::size_t stride, std::size_t odd) {
  const std::size_t q = half / 2;
  for (std::size_t j = 0; j < half; ++j) {
    const std::size_t a = j < q ? 0 : 1;
    l.axis.push_back(a);
    l.freq.push_back(v[stride * (j % q) + (a == 1 ? odd : 0)]);
  }
}

std::string attr_text(const Attrs& attrs, const char* name) {
  for (const Attr& a : attrs) {
    if (a.name != name) continue;
    if (const std::string* t = std::get_if<std::string>(&a.value)) return *t;
  }
  return "";
}

// The vision towers' rotary embeddings have one base and no scaling.
void require_plain_freqs(const FrameworkLayout& l, const RopeFreqs& f) {
  const std::string type = attr_text(f.attrs, "rope_type");
  if ((type != "none" && type != "default") || f.attention_factor != 1.0) {
    throw UsageError(fmt::format("--arith hf: {} has no RoPE scaling or attention factor "
                                 "(got rope_type {}, attention factor {})",
                                 l.model, type, f.attention_factor));
  }
}

}  // namespace

FrameworkLayout hf_framework_layout(const FrameworkRope& fw, const RopeFreqs& f,
                                    const RopeLayoutSpec& spec, const CoordGrid* grid) {
  const std::size_t half = fw.inv_freq.size(), r = 2 * half;
  const bool centres = grid != nullptr && grid->centres;
  const double theta = attr_number(f.attrs, "rope_theta");
  FrameworkLayout l;
  switch (spec.preset) {
    case RopeLayoutPreset::sections:
    case RopeLayoutPreset::interleaved: {
      // Qwen2VLRotaryEmbedding / Qwen3VLTextRotaryEmbedding: the text model's inv_freq
      // times each row of the [3, s] ids, the sections picked after cos and sin
      // (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni) or the angles interleaved before (Qwen3-VL).
      const bool il = spec.preset == RopeLayoutPreset::interleaved;
      l.model = il ? "Qwen3-VL's interleaved M-RoPE" : "Qwen2-VL's M-RoPE";
      for (int c : mrope_components(spec.sections, il, half)) {
        l.axis.push_back(static_cast<std::size_t>(c));
      }
      l.freq = fw.inv_freq;
      l.rotation = fw.hf_rotation;
      l.pick_after_trig = !il;
      break;
    }
    case RopeLayoutPreset::axial:
      if (centres) {
        // DINOv3: 2 pi * centre * inv_freq, cos and sin cast to the model dtype.
        l.model = "DINOv3's 2-D RoPE";
        two_axes(l, dinov3_inv_freq(theta, r), half, 1, 0);
        l.centres = grid->extent;
      } else {
        // Qwen2-VL's VisionRotaryEmbedding(head_dim / 2) on the (h, w) ids and
        // apply_rotary_pos_emb_vision, in float32 (also Qwen2.5-VL's and Qwen3-VL's).
        l.model = "Qwen2-VL's vision RoPE";
        two_axes(l, framework_detail::hf_default_inv_freq(theta, static_cast<int>(half),
                                                          static_cast<int>(half / 2)),
                 half, 1, 0);
        l.rotation = HfRotation::float32;
      }
      require_plain_freqs(l, f);
      break;
    case RopeLayoutPreset::even_odd:
      // PixtralRotaryEmbedding: outer(h, freqs[::2]), outer(w, freqs[1::2]).
      l.model = "Pixtral's 2-D RoPE";
      two_axes(l, framework_detail::hf_default_inv_freq(theta, static_cast<int>(r),
                                                        static_cast<int>(half)),
               half, 2, 1);
      require_plain_freqs(l, f);
      break;
    default:
      throw UsageError(fmt::format(
          "--arith hf: the {} layout is computed exactly only (posenc reproduces HF's "
          "float32 code for the sections, interleaved, axial and even-odd layouts)",
          rope_layout_preset_name(spec.preset)));
  }
  // HF scales frequencies only in DINOv3's code, by 2 pi on patch centres.
  if ((centres || spec.scale != 1.0) && !(!l.centres.empty() && spec.scale == kRopeTwoPi)) {
    throw UsageError(fmt::format(
        "--arith hf: the {} layout with {}: HF's code has patch centres and a frequency "
        "scale only as DINOv3's (--layout axial --coords centres:H,W --freq-scale 2pi)",
        rope_layout_preset_name(spec.preset),
        centres ? fmt::format("patch centres and the frequency scale {}", spec.scale)
                : fmt::format("the frequency scale {}", spec.scale)));
  }
  if (f.style != RopeStyle::neox) {
    throw UsageError(fmt::format("--arith hf: {} pairs dims (j, j + R/2) (rotate_half); use "
                                 "--style neox",
                                 l.model));
  }
  return l;
}

void framework_layout_row(const FrameworkRope& fw, const FrameworkLayout& l,
                          const double* coords, bool inverse, float* angle, float* cos,
                          float* sin) {
  const std::size_t n = l.freq.size();
  float c[kMaxRopeAxes] = {};
  std::size_t axes = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t a = l.axis[j];
    axes = std::max(axes, a + 1);
    c[a] = l.centres.empty() ? static_cast<float>(coords[a])
                             : dinov3_coordinate(coords[a], l.centres[a]);
  }
  for (std::size_t j = 0; j < n; ++j) angle[j] = c[l.axis[j]] * l.freq[j];
  if (!l.pick_after_trig) {
    framework_trig(fw, angle, n, inverse, cos, sin);
    return;
  }
  std::vector<float> row(n), rc(n), rs(n);
  for (std::size_t a = 0; a < axes; ++a) {
    for (std::size_t j = 0; j < n; ++j) row[j] = c[a] * l.freq[j];
    framework_trig(fw, row.data(), n, inverse, rc.data(), rs.data());
    for (std::size_t j = 0; j < n; ++j) {
      if (l.axis[j] != a) continue;
      cos[j] = rc[j];
      sin[j] = rs[j];
    }
  }
}

}  // namespace posenc::rope_detail
