// HF transformers' RoPE init functions (modeling_rope_utils.py, v5 forms) in the float32
// torch operations HF writes, in HF's order. Python scalars stay float64 until they
// meet a tensor, where torch casts them to float32; `x / scalar` is a float32 division
// and `scalar / x` is reciprocal(x) * scalar (torch's __rtruediv__). See torch_cpu.hpp
// for pow, cos and sin. Every operation below must round on its own: no contraction
// into fused multiply-adds, which torch's kernels do not use here.
#pragma GCC optimize("fp-contract=off")

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <variant>

#include "encodings/rope_framework.hpp"
#include "encodings/torch_cpu.hpp"
#include "posenc/error.hpp"

namespace posenc::framework_detail {

namespace {

constexpr double kPi = 3.14159265358979323846;

// torch.arange(0, 2n, 2).float() / dim: n exponents, a float32 division each.
std::vector<float> exponents(int dim, int n) {
  std::vector<float> e(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    e[static_cast<std::size_t>(i)] = static_cast<float>(2 * i) / static_cast<float>(dim);
  }
  return e;
}

// base ** (arange(0, 2n, 2).float() / dim) with base already float32.
std::vector<float> pos_freqs(float base, int dim, int n) {
  const std::vector<float> e = exponents(dim, n);
  std::vector<float> pw(e.size());
  torch_cpu::pow_scalar_base(base, e.data(), pw.data(), e.size());
  return pw;
}

// 1.0 / t: reciprocal(t) * 1.0, the product being exact.
void reciprocal(std::vector<float>& v) {
  for (float& x : v) x = 1.0f / x;
}

// _compute_dynamic_ntk_parameters. At init (and whenever max(position_ids) + 1 does
// not exceed max_position_embeddings) seq_len is the Python int
// max_position_embeddings and the new base is float64 arithmetic; once the positions
// grow past it, dynamic_rope_update passes seq_len = max(position_ids) + 1 as an int64
// tensor, and the base formula runs in float32 tensor operations.
float dynamic_base(double base, double factor, double mp, double seq, int dim) {
  const double expo = static_cast<double>(dim) / static_cast<double>(dim - 2);
  if (!(seq > mp)) {
    return static_cast<float>(base * std::pow(factor * mp / mp - (factor - 1.0), expo));
  }
  float t = static_cast<float>(seq) * static_cast<float>(factor);
  t = t / static_cast<float>(mp);
  t = t - static_cast<float>(factor - 1.0);
  // pow(tensor, float exponent) on a one-element tensor: the scalar path,
  // std::pow(float, double), in double and rounded.
  const float p = static_cast<float>(std::pow(static_cast<double>(t), expo));
  return static_cast<float>(base) * p;
}

// _compute_yarn_parameters from pos_freqs on.
std::vector<float> yarn(double base, int dim, double factor, double low, double high) {
  const int n = dim / 2;
  const std::vector<float> pf = pos_freqs(static_cast<float>(base), dim, n);
  const float s = static_cast<float>(factor);
  // linear_ramp_factor(low, high, dim // 2)
  const double hi = low == high ? high + 0.001 : high;
  const float lo32 = static_cast<float>(low);
  const float span = static_cast<float>(hi - low);
  std::vector<float> inv(pf.size());
  for (std::size_t i = 0; i < pf.size(); ++i) {
    const float extrapolation = 1.0f / pf[i];
    const float interpolation = 1.0f / (s * pf[i]);
    float ramp = (static_cast<float>(i) - lo32) / span;
    ramp = std::fmin(std::fmax(ramp, 0.0f), 1.0f);
    const float extrap_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrap_factor) + extrapolation * extrap_factor;
  }
  return inv;
}

// _compute_longrope_parameters: 1.0 / (ext_factors * base ** inv_freq_shape).
std::vector<float> longrope(double base, int dim, const std::vector<double>& ext) {
  std::vector<float> pw = pos_freqs(static_cast<float>(base), dim, dim / 2);
  for (std::size_t i = 0; i < pw.size(); ++i) pw[i] = static_cast<float>(ext[i]) * pw[i];
  reciprocal(pw);
  return pw;
}

// _compute_proportional_rope_parameters: `angles` frequencies over the head dim,
// zeros after them, all divided by factor.
std::vector<float> proportional(double base, int head_dim, int angles, double factor) {
  std::vector<float> inv = pos_freqs(static_cast<float>(base), head_dim, angles);
  reciprocal(inv);
  inv.resize(static_cast<std::size_t>(head_dim / 2), 0.0f);
  for (float& x : inv) x = x / static_cast<float>(factor);
  return inv;
}

}  // namespace

double attr_number(const Attrs& attrs, const char* name) {
  for (const Attr& a : attrs) {
    if (a.name != name) continue;
    if (const double* d = std::get_if<double>(&a.value)) return *d;
    if (const long long* i = std::get_if<long long>(&a.value)) return static_cast<double>(*i);
  }
  throw std::logic_error(fmt::format("RoPE reduction did not record '{}'", name));
}

std::vector<float> hf_default_inv_freq(double base, int dim, int n) {
  std::vector<float> inv = pos_freqs(static_cast<float>(base), dim, n);
  reciprocal(inv);
  return inv;
}

void hf_llama3_scale(std::vector<float>& inv, double factor, double l0, double low_freq_factor,
                     double high_freq_factor) {
  const float low_wl = static_cast<float>(l0 / low_freq_factor);
  const float high_wl = static_cast<float>(l0 / high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * kPi);
  const float s = static_cast<float>(factor);
  const float lff = static_cast<float>(low_freq_factor);
  const float span = static_cast<float>(high_freq_factor - low_freq_factor);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wl ? f / s : f;
    const float smooth = ((1.0f / wavelen) * static_cast<float>(l0) - lff) / span;
    const float smoothed = (1.0f - smooth) * scaled / s + smooth * scaled;
    const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
    f = medium ? smoothed : scaled;
  }
}

std::vector<float> hf_inv_freq(const RopeParams& p, const RopeFreqs& exact) {
  const int r = exact.rotary_dim;
  const Attrs& a = exact.attrs;
  switch (p.scaling) {
    case RopeScaling::none:
      return hf_default_inv_freq(p.base, r, r / 2);
    case RopeScaling::linear: {
      std::vector<float> inv = hf_default_inv_freq(p.base, r, r / 2);
      const float s = static_cast<float>(attr_number(a, "factor"));
      for (float& x : inv) x = x / s;
      return inv;
    }
    case RopeScaling::dynamic: {
      // HunYuanDenseV1RotaryEmbedding's alpha form: a Python float base, then the
      // default expression 1.0 / (base ** (arange(0, dim, 2).float() / dim)).
      if (p.alpha && attr_number(a, "seq_len") <= attr_number(a, "max_position_embeddings")) {
        return hf_default_inv_freq(attr_number(a, "dynamic_base"), r, r / 2);
      }
      const float b =
          dynamic_base(p.base, attr_number(a, "factor"), attr_number(a, "max_position_embeddings"),
                       attr_number(a, "seq_len"), r);
      std::vector<float> inv = pos_freqs(b, r, r / 2);
      reciprocal(inv);
      return inv;
    }
    case RopeScaling::yarn:
      return yarn(p.base, r, attr_number(a, "factor"), attr_number(a, "yarn_low"),
                  attr_number(a, "yarn_high"));
    case RopeScaling::longrope: {
      // The float64 reduction's rule: long factors once seq_len exceeds L0.
      const bool use_long =
          attr_number(a, "seq_len") > attr_number(a, "original_max_position_embeddings");
      return longrope(p.base, r, use_long ? p.long_factor : p.short_factor);
    }
    case RopeScaling::llama3: {
      std::vector<float> inv = hf_default_inv_freq(p.base, r, r / 2);
      hf_llama3_scale(inv, attr_number(a, "factor"),
                      attr_number(a, "original_max_position_embeddings"),
                      attr_number(a, "low_freq_factor"), attr_number(a, "high_freq_factor"));
      return inv;
    }
    case RopeScaling::proportional: {
      double factor = 1.0;
      for (const Attr& x : a) {
        if (x.name == "factor") factor = std::get<double>(x.value);
      }
      return proportional(p.base, exact.head_dim, static_cast<int>(attr_number(a, "rope_angles")),
                          factor);
    }
  }
  throw std::logic_error("hf_inv_freq: unknown scaling");
}

}  // namespace posenc::framework_detail
