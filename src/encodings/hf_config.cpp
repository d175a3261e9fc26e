// HF model config.json reading: the RoPE parameters of a HF transformers config
// (`apply_hf_config`, declared in posenc/encodings/rope.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {

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
  auto integer = [&](const json& obj, const char* key) -> std::optional<std::int64_t> {
    auto v = num(obj, key);
    if (!v) return std::nullopt;
    if (*v != std::floor(*v) || *v <= 0 || *v > 9.0e15) throw bad(key, "a positive integer");
    return static_cast<std::int64_t>(*v);
  };
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
    if (auto hd = integer(cfg, "head_dim")) {
      p.head_dim = static_cast<int>(*hd);
    } else {
      auto hs = integer(cfg, "hidden_size");
      auto nh = integer(cfg, "num_attention_heads");
      if (hs && nh) {
        if (*hs % *nh != 0) {
          throw InputError(fmt::format(
              "{}: hidden_size {} is not a multiple of num_attention_heads {}", path, *hs, *nh));
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
