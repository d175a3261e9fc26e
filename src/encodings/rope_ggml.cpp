// ggml's CPU rope (ggml-cpu/ops.cpp: ggml_rope_cache_init, rope_yarn, rope_yarn_ramp;
// ggml.c: ggml_rope_yarn_corr_dims) and the parameters llama.cpp hands it for a HF
// config (convert_hf_to_gguf.py and llama.cpp's context setup).
//
// ggml is built with -O3 -march=native by default, and GCC then contracts a*b + c
// into fused multiply-adds where the source has them; the fmaf calls below are the
// ones GCC 12 emits for x86-64 with FMA (checked against ggml's code compiled that
// way, tests/reference/ggml_rope_ref.cpp). Everything else rounds per operation.
#pragma GCC optimize("fp-contract=off")

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "encodings/rope_framework.hpp"
#include "posenc/error.hpp"

namespace posenc::framework_detail {

namespace {

constexpr double kPi = 3.14159265358979323846;

// ggml_rope_yarn_corr_dim, all float.
float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         logf(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(kPi))) /
         (2.0f * logf(base));
}

// convert_hf_to_gguf.py's rope_freqs for llama3 scaling: per frequency of the head
// dimension, float32 tensor operations on a 0-dim tensor.
std::vector<float> llama3_freq_factors(double base, int head_dim, double factor, double l0,
                                       double lff, double hff) {
  const std::vector<float> freqs = hf_default_inv_freq(base, head_dim, head_dim / 2);
  const float low_wl = static_cast<float>(l0 / lff);
  const float high_wl = static_cast<float>(l0 / hff);
  std::vector<float> out;
  for (float f : freqs) {
    const float wavelen = (1.0f / f) * static_cast<float>(2.0 * kPi);
    if (wavelen < high_wl) {
      out.push_back(1.0f);
    } else if (wavelen > low_wl) {
      out.push_back(static_cast<float>(factor));
    } else {
      const float smooth = ((1.0f / wavelen) * static_cast<float>(l0) - static_cast<float>(lff)) /
                           static_cast<float>(hff - lff);
      out.push_back(1.0f / ((1.0f - smooth) / static_cast<float>(factor) + smooth));
    }
  }
  return out;
}

// rope_yarn_ramp
float yarn_ramp(float low, float high, std::int64_t i0) {
  const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

void ggml_setup(const RopeParams& p, const RopeFreqs& exact, FrameworkRope& g) {
  const Attrs& a = exact.attrs;
  const int n_dims = exact.rotary_dim;
  g.freq_base = static_cast<float>(p.base);
  g.theta_scale = powf(g.freq_base, -2.0f / static_cast<float>(n_dims));
  g.attn_factor = static_cast<float>(exact.attention_factor);
  switch (p.scaling) {
    case RopeScaling::none:
      break;
    case RopeScaling::linear:
      g.freq_scale = 1.0f / static_cast<float>(attr_number(a, "factor"));
      break;
    case RopeScaling::yarn: {
      if (!p.truncate) {
        throw UsageError(
            "--arith ggml: ggml's YaRN always rounds its correction range outward (floor, ceil); "
            "--no-truncate has no ggml form");
      }
      const double s = attr_number(a, "factor");
      g.freq_scale = 1.0f / static_cast<float>(s);
      g.ext_factor = 1.0f;
      g.n_ctx_orig = static_cast<int>(attr_number(a, "original_max_position_embeddings"));
      g.beta_fast = static_cast<float>(attr_number(a, "beta_fast"));
      g.beta_slow = static_cast<float>(attr_number(a, "beta_slow"));
      // ggml multiplies by its own YaRN magnitude 1 + 0.1 ln(1 / freq_scale); an
      // attention factor other than HF's default is passed as the ratio to it.
      const double own = s <= 1.0 ? 1.0 : 0.1 * std::log(s) + 1.0;
      g.attn_factor =
          exact.attention_factor == own ? 1.0f : static_cast<float>(exact.attention_factor / own);
      break;
    }
    case RopeScaling::longrope: {
      const bool use_long =
          attr_number(a, "seq_len") > attr_number(a, "original_max_position_embeddings");
      for (double v : use_long ? p.long_factor : p.short_factor) {
        g.freq_factors.push_back(static_cast<float>(v));
      }
      break;
    }
    case RopeScaling::llama3:
      g.freq_factors = llama3_freq_factors(p.base, exact.head_dim, attr_number(a, "factor"),
                                           attr_number(a, "original_max_position_embeddings"),
                                           attr_number(a, "low_freq_factor"),
                                           attr_number(a, "high_freq_factor"));
      break;
    case RopeScaling::dynamic:
    case RopeScaling::proportional:
      throw UsageError(
          fmt::format("--arith ggml: ggml's rope has no {} scaling", rope_scaling_name(p.scaling)));
  }
  if (!g.freq_factors.empty() && g.freq_factors.size() < static_cast<std::size_t>(n_dims / 2)) {
    throw UsageError(fmt::format("--arith ggml: {} frequency factors for {} pairs",
                                 g.freq_factors.size(), n_dims / 2));
  }
  // ggml_rope_yarn_corr_dims
  const float start = floorf(corr_dim(n_dims, g.n_ctx_orig, g.beta_fast, g.freq_base));
  const float end = ceilf(corr_dim(n_dims, g.n_ctx_orig, g.beta_slow, g.freq_base));
  g.corr_dims[0] = std::max(0.0f, start);
  g.corr_dims[1] = std::min(static_cast<float>(n_dims - 1), end);
}

void ggml_row(const FrameworkRope& g, std::int64_t position, bool inverse, float* angle, float* cos,
              float* sin) {
  if (position > std::numeric_limits<std::int32_t>::max()) {
    throw InputError(
        fmt::format("--arith ggml: position {} does not fit ggml's int32 positions", position));
  }
  const float sin_sign = inverse ? -1.0f : 1.0f;
  float theta = static_cast<float>(position);
  const std::size_t pairs = static_cast<std::size_t>(g.rotary_dim / 2);
  for (std::size_t j = 0; j < pairs; ++j) {
    const float ff = g.freq_factors.empty() ? 1.0f : g.freq_factors[j];
    // rope_yarn
    const float theta_extrap = theta / ff;
    const float theta_interp = g.freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = g.attn_factor;
    if (g.ext_factor != 0.0f) {
      const float ramp_mix =
          yarn_ramp(g.corr_dims[0], g.corr_dims[1], static_cast<std::int64_t>(2 * j)) *
          g.ext_factor;
      th = std::fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix);
      mscale *= std::fma(0.1f, logf(1.0f / g.freq_scale), 1.0f);
    }
    angle[j] = th;
    cos[j] = cosf(th) * mscale;
    sin[j] = sinf(th) * mscale * sin_sign;
    theta *= g.theta_scale;
  }
}

}  // namespace posenc::framework_detail
