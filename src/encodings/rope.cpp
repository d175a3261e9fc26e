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

#include "posenc/error.hpp"

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

std::int64_t require_l0(const RopeParams& p, const char* scaling) {
  if (p.original_max_pos) return *p.original_max_pos;
  if (p.max_pos) return *p.max_pos;
  usage(fmt::format("--scaling {}: needs --original-max-pos (or --max-pos)", scaling));
}

}  // namespace

RopeStyle parse_rope_style(const std::string& s) {
  if (s == "neox" || s == "half") return RopeStyle::neox;
  if (s == "gptj" || s == "interleaved") return RopeStyle::gptj;
  usage(fmt::format("--style: unknown style '{}' (expected neox, half, gptj or interleaved)", s));
}

RopeScaling parse_rope_scaling(const std::string& s) {
  if (s == "none" || s == "default") return RopeScaling::none;
  if (s == "linear") return RopeScaling::linear;
  if (s == "dynamic") return RopeScaling::dynamic;
  if (s == "yarn") return RopeScaling::yarn;
  if (s == "longrope" || s == "su") return RopeScaling::longrope;
  if (s == "llama3") return RopeScaling::llama3;
  if (s == "proportional") return RopeScaling::proportional;
  usage(fmt::format("--scaling: unknown scaling '{}' (expected none, linear, dynamic, yarn, "
                    "longrope, llama3 or proportional)",
                    s));
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

RopeFreqs compute_rope_freqs(const RopeParams& p) {
  if (p.head_dim <= 0)
    usage(fmt::format("--dim: head dimension must be positive, got {}", p.head_dim));
  if (!(p.base > 0.0) || !std::isfinite(p.base)) {
    usage(fmt::format("--base: must be a positive number, got {}", p.base));
  }
  int r = p.rotary_dim;
  if (r == 0) {
    if (!(p.partial > 0.0 && p.partial <= 1.0)) {
      usage(fmt::format("--partial: must be in (0, 1], got {}", p.partial));
    }
    // HF: int(head_dim * partial_rotary_factor), truncating.
    r = static_cast<int>(static_cast<double>(p.head_dim) * p.partial);
  }
  if (r > p.head_dim) {
    usage(fmt::format("--rotary-dim: rotary dimension {} exceeds the head dimension {}", r,
                      p.head_dim));
  }
  // proportional: int(partial * D) // 2 frequencies spread over the whole head (HF v5
  // `rope_angles`), so the rotated width is D and only D must be even.
  const bool proportional = p.scaling == RopeScaling::proportional;
  const int angles = r / 2;
  if (proportional) {
    if (p.head_dim % 2 != 0 || angles <= 0) {
      usage(fmt::format("--scaling proportional: needs an even head dimension and a rotary "
                        "dimension of at least 2, got {} and {}",
                        p.head_dim, r));
    }
    r = p.head_dim;
  }
  if (r <= 0 || r % 2 != 0) {
    usage(fmt::format("--rotary-dim: rotary dimension must be positive and even, got {}", r));
  }
  const std::size_t half = static_cast<std::size_t>(r / 2);

  RopeFreqs f;
  f.style = p.style;
  f.head_dim = p.head_dim;
  f.rotary_dim = r;
  Attrs& a = f.attrs;
  a.push_back({"rope_style", rope_style_name(p.style)});
  a.push_back({"head_dim", static_cast<long long>(p.head_dim)});
  a.push_back({"rotary_dim", static_cast<long long>(r)});
  a.push_back({"rope_theta", p.base});
  a.push_back({"rope_type", rope_scaling_name(p.scaling)});

  auto need_factor = [&](const char* name) {
    if (!p.factor) usage(fmt::format("--scaling {}: needs --factor", name));
    if (!(*p.factor > 0.0) || !std::isfinite(*p.factor)) {
      usage(fmt::format("--factor: must be a positive number, got {}", *p.factor));
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
      double s = need_factor("dynamic");
      std::int64_t mp = p.max_pos ? *p.max_pos : p.original_max_pos ? *p.original_max_pos : 0;
      if (mp <= 0) usage("--scaling dynamic: needs --max-pos (max_position_embeddings)");
      if (r <= 2) usage("--scaling dynamic: needs a rotary dimension above 2");
      std::int64_t seq = std::max<std::int64_t>(p.seq_len, mp);
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
          factor_or_ratio("yarn", "--scaling yarn: needs --factor (or --max-pos and "
                                  "--original-max-pos)");
      // HF reads `rope_scaling.get("beta_fast") or 32`: unset, null and 0 all mean the
      // default. Negative or non-finite values would give NaN frequencies.
      auto beta = [](const std::optional<double>& v, double dflt, const char* name) {
        if (!v || *v == 0.0) return dflt;
        if (!(*v > 0.0) || !std::isfinite(*v)) {
          usage(fmt::format("--{}: must be a positive number (0 means the default {}), got {}",
                            name, dflt, *v));
        }
        return *v;
      };
      double beta_fast = beta(p.beta_fast, 32.0, "beta-fast");
      double beta_slow = beta(p.beta_slow, 1.0, "beta-slow");
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
          usage(fmt::format("--{}: expected {} values (rotary dim / 2), got {}", name, half,
                            v.size()));
        }
        for (double x : v) {
          if (!(x > 0.0) || !std::isfinite(x)) {
            usage(fmt::format("--{}: values must be positive numbers, got {}", name, x));
          }
        }
      };
      check_len(p.short_factor, "short-factor");
      check_len(p.long_factor, "long-factor");
      std::int64_t seq = p.seq_len;
      bool use_long = seq > l0;
      const std::vector<double>& ext = use_long ? p.long_factor : p.short_factor;
      if (ext.empty()) {
        usage(fmt::format("--scaling longrope: needs --{} (sequence length {} {} L0 = {})",
                          use_long ? "long-factor" : "short-factor", seq,
                          use_long ? ">" : "<=", l0));
      }
      double att = 1.0;
      if (p.attention_factor) {
        att = *p.attention_factor;
      } else {
        const double s = factor_or_ratio(
            "longrope",
            "--scaling longrope: needs --factor (or --max-pos and --original-max-pos, or "
            "--attention-factor)");
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
      if (!p.original_max_pos) usage("--scaling llama3: needs --original-max-pos");
      double l0 = static_cast<double>(*p.original_max_pos);
      double lff = p.low_freq_factor.value_or(1.0);
      double hff = p.high_freq_factor.value_or(4.0);
      if (!(lff > 0.0) || !(hff > 0.0) || lff == hff) {
        usage(fmt::format(
            "--low-freq-factor/--high-freq-factor: must be positive and different, got {} and {}",
            lff, hff));
      }
      double low_wl = l0 / lff, high_wl = l0 / hff;
      f.inv_freq = default_inv_freq(p.base, r);
      for (double& v : f.inv_freq) {
        double wavelen = 2.0 * kPi / v;
        if (wavelen > low_wl) {
          v = v / s;
        } else if (wavelen < high_wl) {
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
    usage(fmt::format("--attention-factor: must be a positive number, got {}", f.attention_factor));
  }
  a.push_back({"attention_factor", f.attention_factor});
  // Whatever the parameters, a NaN or infinite frequency never reaches a table.
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    if (!std::isfinite(f.inv_freq[i]) || f.inv_freq[i] < 0.0) {
      usage(fmt::format("--scaling {}: these parameters give inverse frequency {} for pair {} "
                        "(check --base, --factor and the scaling parameters)",
                        rope_scaling_name(p.scaling), f.inv_freq[i], i));
    }
  }
  return f;
}

// --- HF config.json ---------------------------------------------------------------

namespace {

using nlohmann::json;

bool kept(const std::vector<std::string>& keep, const char* name) {
  return std::find(keep.begin(), keep.end(), name) != keep.end();
}

}  // namespace

void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open the HF config", path));
  json cfg;
  try {
    cfg = json::parse(in);
  } catch (const json::exception& e) {
    std::string what = e.what();
    throw InputError(fmt::format("{}: not valid JSON ({})", path, what.substr(0, 120)));
  }
  if (!cfg.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));

  auto bad = [&](const std::string& key, const char* expected) -> InputError {
    return InputError(fmt::format("{}: '{}' must be {}", path, key, expected));
  };
  auto num = [&](const json& obj, const char* key) -> std::optional<double> {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) throw bad(key, "a number");
    return it->get<double>();
  };
  // Positive integers up to `max` (sizes must fit posenc's int, positions 2^53).
  auto integer = [&](const json& obj, const char* key,
                     double max = 9.0e15) -> std::optional<std::int64_t> {
    auto v = num(obj, key);
    if (!v) return std::nullopt;
    if (*v != std::floor(*v) || *v <= 0 || *v > max) {
      throw InputError(fmt::format("{}: '{}' must be a positive integer up to {:.0f}, got {}", path,
                                   key, max, *v));
    }
    return static_cast<std::int64_t>(*v);
  };
  constexpr double kMaxSize = std::numeric_limits<int>::max();
  auto list = [&](const json& obj, const char* key) -> std::optional<std::vector<double>> {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_array()) throw bad(key, "a list of numbers");
    std::vector<double> v;
    for (const auto& x : *it) {
      if (!x.is_number()) throw bad(key, "a list of numbers");
      v.push_back(x.get<double>());
    }
    return v;
  };

  // v5 moved everything into `rope_parameters`, possibly keyed by layer type.
  json rp = json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_object()) throw bad(key, "an object");
    rp = *it;
    if (rp.contains("full_attention") && rp["full_attention"].is_object()) {
      rp = rp["full_attention"];
    }
    break;
  }

  if (!kept(keep, "base")) {
    if (auto v = num(rp, "rope_theta"))
      p.base = *v;
    else if (auto w = num(cfg, "rope_theta"))
      p.base = *w;
  }
  if (!kept(keep, "partial")) {
    if (auto v = num(rp, "partial_rotary_factor"))
      p.partial = *v;
    else if (auto w = num(cfg, "partial_rotary_factor"))
      p.partial = *w;
  }
  if (!kept(keep, "head_dim")) {
    if (auto hd = integer(cfg, "head_dim", kMaxSize)) {
      p.head_dim = static_cast<int>(*hd);
    } else {
      auto hs = integer(cfg, "hidden_size");
      auto nh = integer(cfg, "num_attention_heads");
      if (hs && nh) {
        if (*hs % *nh != 0) {
          throw InputError(fmt::format(
              "{}: hidden_size {} is not a multiple of num_attention_heads {}", path, *hs, *nh));
        }
        if (*hs / *nh > kMaxSize) {
          throw InputError(fmt::format("{}: hidden_size / num_attention_heads = {} is too large "
                                       "for a head dimension",
                                       path, *hs / *nh));
        }
        p.head_dim = static_cast<int>(*hs / *nh);
      }
    }
  }
  if (!kept(keep, "max_pos")) {
    if (auto v = integer(cfg, "max_position_embeddings")) p.max_pos = *v;
  }
  if (!kept(keep, "original_max_pos")) {
    // Phi-3 keeps L0 at the top level, Llama-3 / YaRN configs inside rope_scaling.
    if (auto v = integer(rp, "original_max_position_embeddings"))
      p.original_max_pos = *v;
    else if (auto w = integer(cfg, "original_max_position_embeddings"))
      p.original_max_pos = *w;
  }

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = rp.find(key);
    if (it != rp.end() && !it->is_null()) {
      if (!it->is_string()) throw bad(key, "a string");
      type = it->get<std::string>();
      break;
    }
  }
  // Qwen2-VL's "mrope" is the default frequencies with sections.
  if (type == "mrope") type = "default";
  if (!kept(keep, "scaling")) {
    try {
      p.scaling = parse_rope_scaling(type);
    } catch (const UsageError&) {
      throw InputError(fmt::format(
          "{}: unsupported rope_type '{}' (supported: default, linear, dynamic, yarn, longrope, "
          "llama3, proportional)",
          path, type));
    }
  }
  auto set_num = [&](const char* name, const char* key, std::optional<double>& dst) {
    if (kept(keep, name)) return;
    if (auto v = num(rp, key)) dst = *v;
  };
  set_num("factor", "factor", p.factor);
  set_num("beta_fast", "beta_fast", p.beta_fast);
  set_num("beta_slow", "beta_slow", p.beta_slow);
  set_num("mscale", "mscale", p.mscale);
  set_num("mscale_all_dim", "mscale_all_dim", p.mscale_all_dim);
  set_num("attention_factor", "attention_factor", p.attention_factor);
  set_num("low_freq_factor", "low_freq_factor", p.low_freq_factor);
  set_num("high_freq_factor", "high_freq_factor", p.high_freq_factor);
  if (!kept(keep, "truncate")) {
    auto it = rp.find("truncate");
    if (it != rp.end() && !it->is_null()) {
      if (!it->is_boolean()) throw bad("truncate", "true or false");
      p.truncate = it->get<bool>();
    }
  }
  if (!kept(keep, "short_factor")) {
    if (auto v = list(rp, "short_factor")) p.short_factor = *v;
  }
  if (!kept(keep, "long_factor")) {
    if (auto v = list(rp, "long_factor")) p.long_factor = *v;
  }
}

}  // namespace posenc
