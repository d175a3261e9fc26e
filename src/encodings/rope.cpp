// RoPE frequencies and context-extension scaling with HF transformers' formulas
// (`modeling_rope_utils.py`, see reference/rope-landscape.md §1.2), in float64.

#include "posenc/encodings/rope.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/printable.hpp"

namespace posenc {

// The exponent is formed as arange(0, d, 2) / d so that the Python references
// reproduce it bit for bit.
std::vector<double> default_inv_freq(double base, int dim) {
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    inv[static_cast<std::size_t>(i)] =
        1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return inv;
}

namespace {

constexpr double kPi = 3.14159265358979323846;

[[noreturn]] void usage(const std::string& msg) { throw UsageError(msg); }

// YaRN's get_mscale.
double yarn_mscale(double scale, double m = 1.0) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * m * std::log(scale) + 1.0;
}

double yarn_beta(const std::optional<double>& v, double fallback, const char* name) {
  if (!v || *v == 0.0) return fallback;
  if (!(*v > 0.0) || !std::isfinite(*v)) {
    usage(fmt::format("{}: must be a positive number (0 means {}), got {}", name, fallback, *v));
  }
  return *v;
}

std::int64_t require_l0(const RopeParams& p, const char* scaling) {
  if (p.original_max_pos) return *p.original_max_pos;
  if (p.max_pos) return *p.max_pos;
  p.sources.fail("scaling",
                 fmt::format("scaling {}: needs original_max_pos (or max_pos)", scaling));
}

// A NaN, infinite or negative inverse frequency: said as the base's when the plain
// frequency 1 / base^(2i/R) already overflows (a tiny rope_theta), else as the scaling's.
[[noreturn]] void bad_inv_freq(const RopeParams& p, int r, std::size_t i, double v) {
  const double e = static_cast<double>(2 * i) / static_cast<double>(r);
  if (!std::isfinite(1.0 / std::pow(p.base, e))) {
    p.sources.fail("base", fmt::format("base: {} is too small: 1 / base^({}/{}), the inverse "
                                       "frequency of pair {}, overflows",
                                       p.base, 2 * i, r, i));
  }
  p.sources.fail("scaling",
                 fmt::format("scaling {}: these parameters give inverse frequency {} for pair {} "
                             "(check base, factor and the scaling parameters)",
                             rope_scaling_name(p.scaling), v, i));
}

// Where the rotation sits in a head and which position feeds each pair.
void set_layout(const RopeParams& p, RopeFreqs& f) {
  Attrs& a = f.attrs;
  if (p.rotary_last) {
    if (p.scaling == RopeScaling::proportional) {
      usage("rotary_last: cannot be combined with scaling proportional");
    }
    f.rotary_offset = f.head_dim - f.rotary_dim;
    a.push_back({"rotary_offset", static_cast<long long>(f.rotary_offset)});
  }
  if (p.rope_interleave) {
    if (p.style != RopeStyle::neox) {
      usage(
          "rope_interleave: takes interleaved input pairs to the neox order; use it with "
          "style neox");
    }
    f.rope_interleave = true;
    a.push_back({"rope_interleave", 1LL});
  }
  if (!p.mrope_section.empty()) {
    f.mrope_section = p.mrope_section;
    f.mrope_interleaved = p.mrope_interleaved;
    std::vector<double> sec(p.mrope_section.begin(), p.mrope_section.end());
    a.push_back({"mrope_section", sec});
    a.push_back({"mrope_interleaved", static_cast<long long>(p.mrope_interleaved ? 1 : 0)});
  }
  if (p.layout.custom()) {
    if (!p.mrope_section.empty()) usage("layout: replaces mrope_section; give one of them");
    f.layout = p.layout;
    a.push_back({"rope_layout", rope_layout_preset_name(p.layout.preset)});
    if (!p.layout.sections.empty()) {
      a.push_back({"rope_layout_sections",
                   std::vector<double>(p.layout.sections.begin(), p.layout.sections.end())});
    }
  }
}

}  // namespace

// A name of `names` (the declared choices, rope_fields.hpp), or the error a keyword's
// bad name gets (KeywordReader), so the command line and Python say the same.
template <class E>
E parse_named(const Names<E>& names, const char* what, const std::string& s) {
  E e{};
  const auto c = choice(e, names);
  if (const E* v = c.find(s)) return *v;
  usage(fmt::format("{}: expected {}, got '{}'", what, c.listed(), printable(s)));
}

RopeStyle parse_rope_style(const std::string& s) {
  return parse_named(fields::rope_styles(), "style", s);
}

RopeScaling parse_rope_scaling(const std::string& s) {
  return parse_named(fields::rope_scalings(), "scaling", s);
}

std::string rope_style_name(RopeStyle s) { return s == RopeStyle::neox ? "neox" : "gptj"; }

std::string rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::none:
      return "none";
    case RopeScaling::linear:
      return "linear";
    case RopeScaling::dynamic:
      return "dynamic";
    case RopeScaling::yarn:
      return "yarn";
    case RopeScaling::longrope:
      return "longrope";
    case RopeScaling::llama3:
      return "llama3";
    case RopeScaling::proportional:
      return "proportional";
  }
  return "?";
}

std::vector<int> mrope_components(const std::vector<int>& sections, bool interleaved,
                                  std::size_t pairs) {
  if (sections.size() != 3) {
    usage(fmt::format("mrope_section: expected three sections t,h,w (got {})", sections.size()));
  }
  std::size_t sum = 0;
  for (int v : sections) {
    if (v < 0) usage("mrope_section: sections must be >= 0");
    sum += static_cast<std::size_t>(v);
  }
  if (sum != pairs) {
    usage(
        fmt::format("mrope_section: sections must sum to rotary_dim/2 = {} (got {})", pairs, sum));
  }
  std::vector<int> comp(pairs, 0);
  if (interleaved) {
    // Qwen3-VL apply_interleaved_mrope: T H W T H W ..., h and w only within 3 * section.
    for (std::size_t j = 0; j < pairs; ++j) {
      for (int c = 1; c <= 2; ++c) {
        const auto lim = 3 * static_cast<std::size_t>(sections[static_cast<std::size_t>(c)]);
        if (j % 3 == static_cast<std::size_t>(c) && j < lim) comp[j] = c;
      }
    }
    return comp;
  }
  std::size_t j = 0;
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < sections[static_cast<std::size_t>(c)]; ++k) comp[j++] = c;
  }
  return comp;
}

RopeFreqs compute_rope_freqs(const RopeParams& p) {
  validate(p, p.sources);
  // Far beyond any model's head, and small enough that the tables it sizes stay cheap.
  constexpr int kMaxHeadDim = 1 << 20;
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim) {
    p.sources.fail("head_dim", fmt::format("dim: head dimension must be from 1 to {}, got {}",
                                           kMaxHeadDim, p.head_dim));
  }
  if (!(p.base > 0.0) || !std::isfinite(p.base)) {
    p.sources.fail("base", fmt::format("base: must be a positive number, got {}", p.base));
  }
  int r = p.rotary_dim;
  if (r == 0) {
    if (!(p.partial > 0.0 && p.partial <= 1.0)) {
      p.sources.fail("partial", fmt::format("partial: must be in (0, 1], got {}", p.partial));
    }
    // HF: int(head_dim * partial_rotary_factor), truncating.
    r = static_cast<int>(static_cast<double>(p.head_dim) * p.partial);
  }
  // A rotary width from rotary_dim, else from partial.
  const char* const width = p.rotary_dim != 0 ? "rotary_dim" : "partial";
  if (r > p.head_dim) {
    p.sources.fail(width,
                   fmt::format("rotary_dim: rotary dimension {} exceeds the head dimension {}", r,
                               p.head_dim));
  }
  // proportional: int(partial * D) // 2 frequencies spread over the whole head (HF v5
  // `rope_angles`), so the rotated width is D and only D must be even.
  const bool proportional = p.scaling == RopeScaling::proportional;
  const int angles = r / 2;
  if (proportional) {
    if (p.head_dim % 2 != 0 || angles <= 0) {
      p.sources.fail(p.head_dim % 2 != 0 ? "head_dim" : width,
                     fmt::format("scaling proportional: needs an even head dimension and a rotary "
                                 "dimension of at least 2, got {} and {}",
                                 p.head_dim, r));
    }
    r = p.head_dim;
  }
  if (r % 2 != 0 && p.rotary_dim == 0 && p.partial == 1.0) {
    // Nothing narrowed the rotation: the head dimension itself is odd.
    const std::string fix =
        p.head_dim > 2
            ? fmt::format("; rotate an even part of it with rotary_dim (e.g. {})", p.head_dim - 1)
            : std::string();
    p.sources.fail("head_dim", fmt::format("dim: RoPE rotates pairs of dims and needs an even "
                                           "head dimension, got {}{}",
                                           p.head_dim, fix));
  }
  if (r <= 0 || r % 2 != 0) {
    p.sources.fail(
        width, fmt::format("rotary_dim: rotary dimension must be positive and even, got {}", r));
  }
  const std::size_t half = static_cast<std::size_t>(r / 2);

  RopeFreqs f;
  f.style = p.style;
  f.head_dim = p.head_dim;
  f.rotary_dim = r;
  f.sources = p.sources;
  Attrs& a = f.attrs;
  a.push_back({"rope_style", rope_style_name(p.style)});
  a.push_back({"head_dim", static_cast<long long>(p.head_dim)});
  a.push_back({"rotary_dim", static_cast<long long>(r)});
  a.push_back({"rope_theta", p.base});
  a.push_back({"rope_type", rope_scaling_name(p.scaling)});

  auto need_factor = [&](const char* name) {
    if (!p.factor) p.sources.fail("scaling", fmt::format("scaling {}: needs factor", name));
    if (!(*p.factor > 0.0) || !std::isfinite(*p.factor)) {
      usage(fmt::format("factor: must be a positive number, got {}", *p.factor));
    }
    a.push_back({"factor", *p.factor});
    return *p.factor;
  };

  // yarn and longrope: --factor, else HF's max_position_embeddings / L0.
  auto factor_or_ratio = [&](const char* name, const char* missing) -> double {
    if (p.factor) return need_factor(name);
    if (!p.max_pos || !p.original_max_pos) usage(missing);
    const double s = static_cast<double>(*p.max_pos) / static_cast<double>(*p.original_max_pos);
    a.push_back({"factor", s});
    return s;
  };

  switch (p.scaling) {
    case RopeScaling::none:
      f.inv_freq = default_inv_freq(p.base, r);
      break;

    case RopeScaling::linear: {
      double s = need_factor("linear");
      f.inv_freq = default_inv_freq(p.base, r);
      for (double& v : f.inv_freq) v /= s;
      break;
    }

    case RopeScaling::dynamic: {
      std::int64_t mp = p.max_pos ? *p.max_pos : p.original_max_pos ? *p.original_max_pos : 0;
      if (mp <= 0)
        p.sources.fail("scaling", "scaling dynamic: needs max_pos (max_position_embeddings)");
      if (r <= 2) usage("scaling dynamic: needs a rotary dimension above 2");
      std::int64_t seq = std::max<std::int64_t>(p.seq_len, mp);
      if (p.alpha && seq == mp) {
        // HunYuan's NTK-alpha: a fixed base while no position passes max_pos; beyond it
        // HF's dynamic_rope_update recomputes the plain dynamic frequencies below.
        if (!(*p.alpha > 0.0) || !std::isfinite(*p.alpha)) {
          usage(fmt::format("alpha: must be a positive number, got {}", *p.alpha));
        }
        const double base =
            p.base * std::pow(*p.alpha, static_cast<double>(r) / static_cast<double>(r - 2));
        f.inv_freq = default_inv_freq(base, r);
        a.push_back({"alpha", *p.alpha});
        a.push_back({"max_position_embeddings", static_cast<long long>(mp)});
        a.push_back({"seq_len", static_cast<long long>(seq)});
        a.push_back({"dynamic_base", base});
        break;
      }
      double s = need_factor("dynamic");
      double base =
          p.base * std::pow(s * static_cast<double>(seq) / static_cast<double>(mp) - (s - 1.0),
                            static_cast<double>(r) / static_cast<double>(r - 2));
      f.inv_freq = default_inv_freq(base, r);
      a.push_back({"max_position_embeddings", static_cast<long long>(mp)});
      a.push_back({"seq_len", static_cast<long long>(seq)});
      a.push_back({"dynamic_base", base});
      break;
    }

    case RopeScaling::yarn: {
      std::int64_t l0 = require_l0(p, "yarn");
      const double s =
          factor_or_ratio("yarn", "scaling yarn: needs factor (or max_pos and "
                                  "original_max_pos)");
      // HF: `get("beta_fast") or 32`, so 0 and null mean the defaults.
      const double beta_fast = yarn_beta(p.beta_fast, 32.0, "beta_fast");
      const double beta_slow = yarn_beta(p.beta_slow, 1.0, "beta_slow");
      double att;
      if (p.attention_factor) {
        att = *p.attention_factor;
      } else if (p.mscale && p.mscale_all_dim && *p.mscale != 0.0 && *p.mscale_all_dim != 0.0) {
        att = yarn_mscale(s, *p.mscale) / yarn_mscale(s, *p.mscale_all_dim);
      } else {
        att = yarn_mscale(s);
      }
      auto corr_dim = [&](double n_rot) {
        return static_cast<double>(r) * std::log(static_cast<double>(l0) / (n_rot * 2.0 * kPi)) /
               (2.0 * std::log(p.base));
      };
      double low = corr_dim(beta_fast), high = corr_dim(beta_slow);
      if (p.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(r - 1));
      double hi = (low == high) ? high + 0.001 : high;
      std::vector<double> extra = default_inv_freq(p.base, r);
      f.inv_freq.resize(half);
      for (std::size_t i = 0; i < half; ++i) {
        double ramp = std::clamp((static_cast<double>(i) - low) / (hi - low), 0.0, 1.0);
        double extrap_mask = 1.0 - ramp;
        double interp = extra[i] / s;
        f.inv_freq[i] = interp * (1.0 - extrap_mask) + extra[i] * extrap_mask;
      }
      f.attention_factor = att;
      a.push_back({"original_max_position_embeddings", static_cast<long long>(l0)});
      a.push_back({"beta_fast", beta_fast});
      a.push_back({"beta_slow", beta_slow});
      if (p.mscale) a.push_back({"mscale", *p.mscale});
      if (p.mscale_all_dim) a.push_back({"mscale_all_dim", *p.mscale_all_dim});
      a.push_back({"truncate", static_cast<long long>(p.truncate ? 1 : 0)});
      a.push_back({"yarn_low", low});
      a.push_back({"yarn_high", high});
      break;
    }

    case RopeScaling::longrope: {
      std::int64_t l0 = require_l0(p, "longrope");
      auto check_len = [&](const std::vector<double>& v, const char* name) {
        if (!v.empty() && v.size() != half) {
          p.sources.fail(name, fmt::format("{}: expected {} values (rotary dim / 2), got {}", name,
                                           half, v.size()));
        }
        for (double x : v) {
          if (!(x > 0.0) || !std::isfinite(x)) {
            p.sources.fail(name,
                           fmt::format("{}: values must be positive numbers, got {}", name, x));
          }
        }
      };
      check_len(p.short_factor, "short_factor");
      check_len(p.long_factor, "long_factor");
      std::int64_t seq = p.seq_len;
      bool use_long = seq > l0;
      const std::vector<double>& ext = use_long ? p.long_factor : p.short_factor;
      if (ext.empty()) {
        usage(fmt::format("scaling longrope: needs {}_factor (sequence length {} {} L0 = {})",
                          use_long ? "long" : "short", seq,
                          use_long ? ">" : "<=", l0));
      }
      double att = 1.0;
      const std::optional<double>& mscale = use_long ? p.long_mscale : p.short_mscale;
      if (mscale) {
        // PhimoeRotaryEmbedding.forward: the set's mscale replaces attention_scaling.
        if (!(*mscale > 0.0) || !std::isfinite(*mscale)) {
          usage(fmt::format("{}_mscale: must be a positive number, got {}",
                            use_long ? "long" : "short", *mscale));
        }
        att = *mscale;
        a.push_back({use_long ? "long_mscale" : "short_mscale", att});
      } else if (p.attention_factor) {
        att = *p.attention_factor;
      } else {
        const double s = factor_or_ratio(
            "longrope",
            "scaling longrope: needs factor (or max_pos and original_max_pos, or "
            "attention_factor)");
        att = s <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(s) / std::log(static_cast<double>(l0)));
      }
      f.inv_freq.resize(half);
      for (std::size_t i = 0; i < half; ++i) {
        double pw = std::pow(p.base, static_cast<double>(2 * i) / static_cast<double>(r));
        f.inv_freq[i] = 1.0 / (ext[i] * pw);
      }
      f.attention_factor = att;
      a.push_back({"original_max_position_embeddings", static_cast<long long>(l0)});
      a.push_back({"seq_len", static_cast<long long>(seq)});
      a.push_back({"longrope_factors", std::string(use_long ? "long" : "short")});
      a.push_back({use_long ? "long_factor" : "short_factor", ext});
      break;
    }

    case RopeScaling::proportional: {
      // HF v5 (Gemma-4 global layers): the exponent's denominator is the head dimension,
      // the pass-through pairs get frequency 0 (cos 1, sin 0), then all / factor.
      const double s = p.factor ? need_factor("proportional") : 1.0;
      f.inv_freq.assign(half, 0.0);
      const std::vector<double> inv = default_inv_freq(p.base, p.head_dim);
      for (int j = 0; j < angles; ++j) {
        f.inv_freq[static_cast<std::size_t>(j)] = inv[static_cast<std::size_t>(j)] / s;
      }
      a.push_back({"rope_angles", static_cast<long long>(angles)});
      break;
    }

    case RopeScaling::llama3: {
      double s = need_factor("llama3");
      double l0 = static_cast<double>(require_l0(p, "llama3"));
      double lff = p.low_freq_factor.value_or(1.0);
      double hff = p.high_freq_factor.value_or(4.0);
      // Equal factors (Llama-4: 1 and 1) leave no band to blend, as in HF.
      if (!(lff > 0.0) || !(hff >= lff) || !std::isfinite(hff)) {
        usage(fmt::format(
            "low_freq_factor/high_freq_factor: must be positive with low <= high, got {} and {}",
            lff, hff));
      }
      double low_wl = l0 / lff, high_wl = l0 / hff;
      f.inv_freq = default_inv_freq(p.base, r);
      for (double& v : f.inv_freq) {
        double wavelen = 2.0 * kPi / v;
        if (wavelen > low_wl) {
          v = v / s;
        } else if (wavelen < high_wl || lff == hff) {
          // high frequencies are kept
        } else {
          double smooth = (l0 / wavelen - lff) / (hff - lff);
          v = (1.0 - smooth) * v / s + smooth * v;
        }
      }
      a.push_back({"original_max_position_embeddings", static_cast<long long>(l0)});
      a.push_back({"low_freq_factor", lff});
      a.push_back({"high_freq_factor", hff});
      break;
    }
  }
  if (p.attention_factor && p.scaling != RopeScaling::yarn && p.scaling != RopeScaling::longrope) {
    // An explicit override applies to every variant (HF only reads it for yarn/longrope).
    f.attention_factor = *p.attention_factor;
  }
  if (!(f.attention_factor > 0.0) || !std::isfinite(f.attention_factor)) {
    usage(fmt::format("attention_factor: must be a positive number, got {}", f.attention_factor));
  }
  a.push_back({"attention_factor", f.attention_factor});
  set_layout(p, f);
  if (p.arith != Arith::exact) attach_framework(p, f);
  // Whatever the parameters, a NaN or infinite frequency never reaches a table.
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    if (!std::isfinite(f.inv_freq[i]) || f.inv_freq[i] < 0.0) bad_inv_freq(p, r, i, f.inv_freq[i]);
  }
  return f;
}

}  // namespace posenc
