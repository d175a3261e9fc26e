// Framework arithmetic for RoPE: which framework supports what, and the per-position
// values each one forms (see include/posenc/encodings/arith.hpp).
#pragma GCC optimize("fp-contract=off")

#include "posenc/encodings/arith.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "encodings/rope_framework.hpp"
#include "encodings/torch_cpu.hpp"
#include "posenc/error.hpp"

namespace posenc {

Arith parse_arith(const std::string& s) {
  if (s == "exact") return Arith::exact;
  if (s == "hf") return Arith::hf;
  if (s == "meta") return Arith::meta;
  if (s == "ggml") return Arith::ggml;
  throw UsageError(
      fmt::format("--arith: unknown arithmetic '{}' (expected exact, hf, meta or ggml)", s));
}

std::string arith_name(Arith a) {
  switch (a) {
    case Arith::exact:
      return "exact";
    case Arith::hf:
      return "hf";
    case Arith::meta:
      return "meta";
    case Arith::ggml:
      return "ggml";
  }
  return "?";
}

namespace {

using framework_detail::attr_number;

// Meta's reference code: default frequencies, or llama3's apply_scaling (Llama 3.1),
// in the complex (interleaved) pair layout, without an attention factor.
void meta_setup(const RopeParams& p, const RopeFreqs& exact, FrameworkRope& f) {
  if (p.scaling != RopeScaling::none && p.scaling != RopeScaling::llama3) {
    throw UsageError(
        fmt::format("--arith meta: Meta's llama code has no {} scaling (only none and llama3)",
                    rope_scaling_name(p.scaling)));
  }
  if (p.style != RopeStyle::gptj) {
    throw UsageError("--arith meta: Meta's complex form pairs dims (2i, 2i+1); use --style gptj");
  }
  if (exact.attention_factor != 1.0) {
    throw UsageError(fmt::format("--arith meta: Meta's llama code has no attention factor (got {})",
                                 exact.attention_factor));
  }
  const int r = exact.rotary_dim;
  f.inv_freq = framework_detail::hf_default_inv_freq(p.base, r, r / 2);
  if (p.scaling == RopeScaling::llama3) {
    const Attrs& a = exact.attrs;
    framework_detail::hf_llama3_scale(
        f.inv_freq, attr_number(a, "factor"), attr_number(a, "original_max_position_embeddings"),
        attr_number(a, "low_freq_factor"), attr_number(a, "high_freq_factor"));
  }
}

}  // namespace

FrameworkRope framework_rope(const RopeParams& p, const RopeFreqs& exact) {
  FrameworkRope f;
  f.arith = p.arith;
  f.style = exact.style;
  f.head_dim = exact.head_dim;
  f.rotary_dim = exact.rotary_dim;
  switch (p.arith) {
    case Arith::hf:
      torch_cpu::require("--arith hf");
      f.inv_freq = framework_detail::hf_inv_freq(p, exact);
      f.attention_scaling = static_cast<float>(exact.attention_factor);
      f.hf_rotation = p.hf_rotation;
      break;
    case Arith::meta:
      torch_cpu::require("--arith meta");
      meta_setup(p, exact, f);
      break;
    case Arith::ggml:
      framework_detail::ggml_setup(p, exact, f);
      break;
    case Arith::exact:
      throw UsageError("framework_rope: --arith exact has no framework");
  }
  return f;
}

void attach_framework(const RopeParams& p, RopeFreqs& f) {
  auto fw = std::make_shared<FrameworkRope>(framework_rope(p, f));
  Attrs& a = f.attrs;
  a.push_back({"arith", arith_name(p.arith)});
  if (!fw->inv_freq.empty()) f.inv_freq.assign(fw->inv_freq.begin(), fw->inv_freq.end());
  if (p.arith == Arith::ggml) {
    a.push_back({"ggml_freq_base", static_cast<double>(fw->freq_base)});
    a.push_back({"ggml_freq_scale", static_cast<double>(fw->freq_scale)});
    a.push_back({"ggml_ext_factor", static_cast<double>(fw->ext_factor)});
    a.push_back({"ggml_attn_factor", static_cast<double>(fw->attn_factor)});
    a.push_back({"ggml_theta_scale", static_cast<double>(fw->theta_scale)});
    if (!fw->freq_factors.empty()) {
      a.push_back({"ggml_freq_factors",
                   std::vector<double>(fw->freq_factors.begin(), fw->freq_factors.end())});
    }
  }
  f.framework = std::move(fw);
}

void framework_rope_row(const FrameworkRope& f, std::int64_t position, bool inverse, float* angle,
                        float* cos, float* sin) {
  if (f.arith == Arith::ggml) {
    framework_detail::ggml_row(f, position, inverse, angle, cos, sin);
    return;
  }
  // hf and meta: freqs = inv_freq x position_ids in float32, one product per element.
  const std::size_t n = f.inv_freq.size();
  const float pos = static_cast<float>(position);
  for (std::size_t j = 0; j < n; ++j) angle[j] = pos * f.inv_freq[j];
  framework_trig(f, angle, n, inverse, cos, sin);
}

void framework_trig(const FrameworkRope& f, const float* angle, std::size_t n, bool inverse,
                    float* cos, float* sin) {
  if (f.arith == Arith::hf && n % 8 != 0) {
    // HF's tensors hold each row twice (cat((freqs, freqs))): over the doubled row the
    // vectors are torch's wherever a row starts one (R a multiple of 8).
    std::vector<float> a2(2 * n), c2(2 * n), s2(2 * n);
    std::copy(angle, angle + n, a2.begin());
    std::copy(angle, angle + n, a2.begin() + static_cast<std::ptrdiff_t>(n));
    torch_cpu::cos(a2.data(), c2.data(), 2 * n);
    torch_cpu::sin(a2.data(), s2.data(), 2 * n);
    std::copy(c2.begin(), c2.begin() + static_cast<std::ptrdiff_t>(n), cos);
    std::copy(s2.begin(), s2.begin() + static_cast<std::ptrdiff_t>(n), sin);
  } else if (f.arith == Arith::hf) {
    torch_cpu::cos(angle, cos, n);
    torch_cpu::sin(angle, sin, n);
  }
  if (f.arith == Arith::hf) {
    for (std::size_t j = 0; j < n; ++j) {
      cos[j] = cos[j] * f.attention_scaling;
      sin[j] = sin[j] * f.attention_scaling;
    }
  } else {
    // torch.polar(ones, freqs): 1 * std::cos, 1 * std::sin on floats (glibc).
    for (std::size_t j = 0; j < n; ++j) {
      cos[j] = cosf(angle[j]);
      sin[j] = sinf(angle[j]);
    }
  }
  if (inverse) {
    for (std::size_t j = 0; j < n; ++j) sin[j] = -sin[j];
  }
}

}  // namespace posenc
