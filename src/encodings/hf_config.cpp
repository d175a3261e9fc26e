// HF model config.json reading, as transformers v5 reads a config: the text model's
// keys, the config class's defaults for the model types whose defaults change
// numbers, layer types, and per layer type the RoPE parameters (`apply_hf_config`,
// declared in posenc/encodings/rope.hpp) and the attention parameters
// (posenc/encodings/hf_config.hpp).

#include "posenc/encodings/hf_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "encodings/hf_config_file.hpp"
#include "io/json_doc.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"
#include "posenc/printable.hpp"

namespace posenc {

namespace {

// Head counts and dimensions a config may give: far beyond any model (the largest
// head dims are 256 to 576), small enough that the tables they size stay cheap.
constexpr double kMaxDim = 1 << 20;


using nlohmann::json;

const char* const kFull = "full_attention";
const char* const kSliding = "sliding_attention";
const char* const kChunked = "chunked_attention";

// The defaults of HF's config classes, for the keys posenc reads, where they differ
// from the generic ones (configuration_<model>.py).
// ERNIE-4.5-VL: the composite model's type, or its text config's.
bool ernie_vl(const std::string& model_type) {
  return model_type == "ernie4_5_vl_moe" || model_type == "ernie4_5_vl_moe_text";
}

// HunYuan-VL (HunyuanOCR): the composite model's type, or its text config's.
bool hunyuan_vl(const std::string& model_type) {
  return model_type == "hunyuan_vl" || model_type == "hunyuan_vl_text";
}

json class_defaults(const std::string& model_type) {
  if (model_type == "gemma2") {
    return {{"rope_theta", 10000.0},        {"head_dim", 256},
            {"query_pre_attn_scalar", 256}, {"attn_logit_softcapping", 50.0},
            {"sliding_window", 4096},       {"max_position_embeddings", 8192}};
  }
  if (model_type == "gemma3_text" || model_type == "gemma3") {
    return {{"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"head_dim", 256},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"sliding_window_pattern", 6},
            {"max_position_embeddings", 131072}};
  }
  if (model_type == "gemma3n_text") {  // Gemma3nTextConfig (default_theta global / local)
    return {{"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"head_dim", 256},
            {"sliding_window", 512},
            {"max_position_embeddings", 32768}};
  }
  if (model_type == "gemma4_text") {
    return {{"head_dim", 256},
            {"global_head_dim", 512},
            {"sliding_window", 512},
            {"max_position_embeddings", 131072},
            {"rope_parameters",
             {{kSliding, {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
              {kFull,
               {{"rope_type", "proportional"},
                {"partial_rotary_factor", 0.25},
                {"rope_theta", 1000000.0}}}}}};
  }
  if (model_type == "llama4_text") {
    return {{"rope_theta", 500000.0},
            {"attention_chunk_size", 8192},
            {"attn_temperature_tuning", true},
            {"floor_scale", 8192},
            {"attn_scale", 0.1},
            {"no_rope_layer_interval", 4}};
  }
  if (model_type == "deepseek_v3" || model_type == "kimi_k2") return {{"rope_interleave", true}};
  if (model_type == "phimoe") return {{"rope_theta", 1000000.0}};  // PhimoeConfig.default_theta
  if (model_type == "ernie4_5" || model_type == "ernie4_5_moe") return {{"rope_theta", 500000.0}};
  if (hunyuan_vl(model_type)) {  // HunYuanVLTextConfig
    return {{"hidden_size", 4096}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048}};
  }
  if (ernie_vl(model_type)) {  // Ernie4_5_VL_MoeTextConfig (default_theta 500000)
    return {{"rope_theta", 500000.0},
            {"hidden_size", 2560},
            {"num_attention_heads", 20},
            {"max_position_embeddings", 131072}};
  }
  if (model_type == "moonshine") {
    return {{"partial_rotary_factor", 0.9},
            {"max_position_embeddings", 512},
            {"hidden_size", 288},
            {"encoder_num_attention_heads", 8}};
  }
  if (model_type == "cohere2") return {{"sliding_window_pattern", 4}};
  if (model_type == "smollm3") {  // SmolLM3Config
    return {{"rope_theta", 2000000.0}, {"num_hidden_layers", 36}, {"no_rope_layer_interval", 4}};
  }
  if (model_type == "exaone4") {  // Exaone4Config
    return {
        {"sliding_window", 4096}, {"sliding_window_pattern", 4}, {"max_position_embeddings", 2048}};
  }
  if (model_type == "olmo3") {  // Olmo3Config
    return {{"rope_theta", 500000.0}, {"sliding_window", 4096}, {"max_position_embeddings", 2048}};
  }
  return json::object();
}

// The config key holding an attribute, where the config class's attribute_map names
// another (MoonshineConfig: the encoder's head and layer counts).
const char* attribute_alias(const std::string& model_type, const std::string& key) {
  // HunYuanVLTextConfig: legacy Tencent checkpoints' attention_head_dim.
  if (hunyuan_vl(model_type) && key == std::string("head_dim")) return "attention_head_dim";
  if (model_type == "moonshine") {
    if (key == "num_attention_heads") return "encoder_num_attention_heads";
    if (key == "num_key_value_heads") return "encoder_num_key_value_heads";
    if (key == "num_hidden_layers") return "encoder_num_hidden_layers";
  }
  return nullptr;
}

// Model types whose RoPE pairs (2i, 2i+1): Meta's complex form (Llama-4, DeepSeek-V2),
// the interleaved rotate_half of Cohere, and GLM's apply_rotary_pos_emb (the NeoX
// table's first half repeat_interleave'd), which Helium, ERNIE-4.5 and Moonshine copy.
bool gptj_pairs(const std::string& model_type) {
  static const std::set<std::string> kGptj = {"llama4_text",  "deepseek_v2", "cohere", "cohere2",
                                              "glm",          "glm4",        "helium", "ernie4_5",
                                              "ernie4_5_moe", "moonshine"};
  // ERNIE-4.5-VL's rotate_half_text pairs (2i, 2i+1) as well.
  if (ernie_vl(model_type)) return true;
  return kGptj.count(model_type) > 0;
}

constexpr int kMaxConfigDepth = 256;

// A config file: the text model's object plus its class defaults. The text model's
// object is referred to, never copied.
class Config {
 public:
  explicit Config(const std::string& path) : path_(path) {
    read_hf_config_file(path, doc_, kMaxConfigDepth);
    const json& root = doc_.root;
    if (!root.is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
    auto tc = root.find("text_config");
    text_ = (tc != root.end() && tc->is_object()) ? &*tc : &root;
    const json* mt = find("model_type");
    if (mt == nullptr) {
      auto top = root.find("model_type");
      mt = top != root.end() ? &*top : nullptr;
    }
    if (mt != nullptr && mt->is_string()) model_type_ = mt->get<std::string>();
    defaults_ = class_defaults(model_type_);
  }
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;

  const std::string& path() const { return path_; }
  const std::string& model_type() const { return model_type_; }

  /// The value of `key` in the text config, else the class default; null if neither.
  const json* find(const char* key) const {
    const char* alias = attribute_alias(model_type_, key);
    for (const json* obj : {text_, &defaults_}) {
      for (const char* k : {key, alias}) {
        if (k == nullptr) continue;
        auto it = obj->find(k);
        if (it != obj->end()) return &*it;
      }
    }
    return nullptr;
  }
  /// The value of `key` at the file's top level (outside text_config); null if absent.
  const json* find_top(const char* key) const {
    auto it = doc_.root.find(key);
    return it != doc_.root.end() ? &*it : nullptr;
  }
  /// True when `key` is given (not null).
  bool has(const char* key) const {
    const json* v = find(key);
    return v != nullptr && !v->is_null();
  }

  InputError bad(const std::string& key, const char* expected) const {
    return InputError(fmt::format("{}: '{}' must be {}", path_, key, expected));
  }

  /// `key`'s value `got` is out of range: said in the config's terms.
  InputError bad_value(const std::string& key, const char* expected, double got) const {
    return InputError(fmt::format("{}: '{}' must be {}, got {}", path_, key, expected, got));
  }
  /// A number > 0 (rope_theta, factor, ...), if given.
  std::optional<double> positive_real(const json& obj, const char* key) const {
    auto v = num(obj, key);
    if (v && !(*v > 0.0)) throw bad_value(key, "a positive number", *v);
    return v;
  }
  std::optional<double> positive_real(const char* key) const {
    auto v = num(key);
    if (v && !(*v > 0.0)) throw bad_value(key, "a positive number", *v);
    return v;
  }

  /// The number `v` (the value of `key`), if given.
  std::optional<double> number(const json* v, const char* key) const {
    if (v == nullptr || v->is_null()) return std::nullopt;
    if (!v->is_number() || !std::isfinite(v->get<double>())) throw bad(key, "a number");
    return v->get<double>();
  }
  std::optional<double> num(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return number(it == obj.end() ? nullptr : &*it, key);
  }
  std::optional<double> num(const char* key) const { return number(find(key), key); }
  /// A positive integer up to `max` (head counts and dims: int range).
  std::optional<std::int64_t> positive_number(const json* v, const char* key, double max) const {
    auto x = number(v, key);
    if (!x) return std::nullopt;
    if (*x != std::floor(*x) || *x <= 0 || *x > max) {
      throw bad(key, max == kMaxDim       ? "a positive integer up to 1048576"
                     : max <= INT_MAX      ? "a positive integer that fits an int"
                                           : "a positive integer");
    }
    return static_cast<std::int64_t>(*x);
  }
  std::optional<std::int64_t> positive(const json& obj, const char* key,
                                       double max = 9.0e15) const {
    auto it = obj.find(key);
    return positive_number(it == obj.end() ? nullptr : &*it, key, max);
  }
  std::optional<std::int64_t> positive(const char* key, double max = 9.0e15) const {
    return positive_number(find(key), key, max);
  }
  /// A whole number >= 0 (a layer index or count).
  std::optional<std::int64_t> count(const char* key) const {
    auto x = num(key);
    if (!x) return std::nullopt;
    if (*x != std::floor(*x) || *x < 0 || *x > 9.0e15) throw bad(key, "a whole number >= 0");
    return static_cast<std::int64_t>(*x);
  }
  /// A head count or dimension: a positive integer up to kMaxDim.
  std::optional<int> dim(const char* key) const {
    auto v = positive(key, static_cast<double>(kMaxDim));
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }
  /// HF treats these flags as Python truthiness (Llama-4 publishes 4 for true).
  bool truthy(const char* key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return false;
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_number()) return v->get<double>() != 0.0;
    throw bad(key, "true, false or a number");
  }
  std::optional<std::string> str(const json& obj, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw bad(key, "a string");
    return it->get<std::string>();
  }

 private:
  std::string path_;
  json_doc::JsonDoc doc_;
  const json* text_ = nullptr;  // into doc_
  json defaults_;
  std::string model_type_;
};

std::optional<int> heads_of(const Config& c) {
  if (c.has("num_attention_heads")) return c.dim("num_attention_heads");
  return c.dim("n_head");  // BLOOM, Falcon
}

// head_dim, else hidden_size / num_attention_heads (HF's getattr fallback).
std::optional<int> plain_head_dim(const Config& c) {
  if (auto hd = c.dim("head_dim")) return hd;
  auto hs = c.has("hidden_size") ? c.positive("hidden_size") : c.positive("n_embed");
  auto nh = heads_of(c);
  if (!hs || !nh) return std::nullopt;
  if (*hs % *nh != 0) {
    throw InputError(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                 c.path(), *hs, *nh));
  }
  if (*hs / *nh > kMaxDim) {
    throw InputError(fmt::format("{}: hidden_size / num_attention_heads = {} is too large for a "
                                 "head dimension",
                                 c.path(), *hs / *nh));
  }
  return static_cast<int>(*hs / *nh);
}

// SmolLM3Config.no_rope_layers of `n` layers: 1 rotates, 0 is NoPE; by default every
// no_rope_layer_interval-th layer is NoPE.
std::vector<bool> smollm3_rope_flags(const Config& c, std::int64_t n) {
  std::vector<bool> v;
  const json* nr = c.find("no_rope_layers");
  if (nr != nullptr && !nr->is_null()) {
    if (!nr->is_array()) throw c.bad("no_rope_layers", "a list of 0 and 1");
    for (const auto& x : *nr) {
      if (!x.is_number()) throw c.bad("no_rope_layers", "a list of 0 and 1");
      v.push_back(x.get<double>() != 0);
    }
    if (static_cast<std::int64_t>(v.size()) < n) {
      throw c.bad("no_rope_layers", "a list with a value for every layer (num_hidden_layers)");
    }
    return v;
  }
  const std::int64_t every = c.positive("no_rope_layer_interval").value_or(4);
  for (std::int64_t i = 0; i < n; ++i) v.push_back((i + 1) % every != 0);
  return v;
}

// Layer types by the rule of the model type's config class, `n` layers.
std::vector<std::string> derived_layer_types(const Config& c, std::optional<std::int64_t> n) {
  const std::string& mt = c.model_type();
  auto pattern = [&](std::int64_t every, bool last_full) {
    if (!n) return std::vector<std::string>{kSliding, kFull};
    std::vector<std::string> v;
    for (std::int64_t i = 0; i < *n; ++i) v.push_back((i + 1) % every != 0 ? kSliding : kFull);
    if (last_full && !v.empty()) v.back() = kFull;
    return v;
  };
  if (mt == "gemma2") return pattern(2, false);
  if (mt == "gemma3_text" || mt == "gemma3" || mt == "cohere2") {
    return pattern(c.positive("sliding_window_pattern").value_or(6), false);
  }
  if (mt == "gemma4_text") return pattern(6, true);
  if (mt == "gemma3n_text") return pattern(5, false);
  if (mt == "olmo3") return pattern(4, false);
  if (mt == "smollm3") {
    // SmolLM3Config: NoPE layers slide when use_sliding_window and sliding_window are set.
    const std::int64_t count = n.value_or(1);
    const std::vector<bool> rope = smollm3_rope_flags(c, count);
    const bool slide = c.truthy("use_sliding_window") && c.has("sliding_window");
    std::vector<std::string> v;
    for (std::int64_t i = 0; i < count; ++i) {
      v.push_back(slide && !rope[static_cast<std::size_t>(i)] ? kSliding : kFull);
    }
    return v;
  }
  if (mt == "afmoe") return pattern(c.positive("global_attn_every_n_layers").value_or(4), false);
  if (mt == "exaone4") {
    // Exaone4Config: without a sliding window every layer is full attention.
    if (!c.has("sliding_window")) {
      return std::vector<std::string>(static_cast<std::size_t>(n.value_or(1)), kFull);
    }
    return pattern(c.positive("sliding_window_pattern").value_or(4), false);
  }
  if (mt == "llama4_text") {
    const json* nr = c.find("no_rope_layers");
    std::vector<std::string> v;
    if (nr != nullptr && nr->is_array() && !nr->empty()) {
      for (const auto& x : *nr) {
        if (!x.is_number()) throw c.bad("no_rope_layers", "a list of 0 and 1");
        v.push_back(x.get<double>() != 0 ? kChunked : kFull);
      }
      return v;
    }
    const std::int64_t every = c.positive("no_rope_layer_interval").value_or(4);
    if (!n) return {kChunked, kFull};
    for (std::int64_t i = 0; i < *n; ++i) v.push_back((i + 1) % every != 0 ? kChunked : kFull);
    return v;
  }
  const bool qwen = mt.rfind("qwen2", 0) == 0 || mt.rfind("qwen3", 0) == 0;
  if (qwen) {
    if (!c.truthy("use_sliding_window") || !c.has("sliding_window")) {
      return std::vector<std::string>(static_cast<std::size_t>(n.value_or(1)), kFull);
    }
    // max_window_layers 0 is valid: every layer slides (HF's i >= max_window_layers).
    const std::int64_t from = c.count("max_window_layers").value_or(28);
    if (!n) return {kSliding, kFull};
    std::vector<std::string> v;
    for (std::int64_t i = 0; i < *n; ++i) v.push_back(i >= from ? kSliding : kFull);
    return v;
  }
  return std::vector<std::string>(static_cast<std::size_t>(n.value_or(1)),
                                  c.has("sliding_window") ? kSliding : kFull);
}

std::vector<std::string> layer_types_of(const Config& c) {
  const json* lt = c.find("layer_types");
  if (lt != nullptr && !lt->is_null()) {
    if (!lt->is_array() || lt->empty()) throw c.bad("layer_types", "a list of layer types");
    std::vector<std::string> v;
    for (const auto& x : *lt) {
      if (!x.is_string()) throw c.bad("layer_types", "a list of strings");
      v.push_back(x.get<std::string>());
    }
    // HF's layer_type_validation refuses a list of another length.
    const auto n = c.positive("num_hidden_layers", 1.0e7);
    if (n && static_cast<std::int64_t>(v.size()) != *n) {
      throw InputError(fmt::format(
          "{}: layer_types has {} entries but num_hidden_layers is {} (transformers refuses "
          "this config)",
          c.path(), v.size(), *n));
    }
    return v;
  }
  return derived_layer_types(c, c.positive("num_hidden_layers", 1.0e7));
}

std::string resolve_layer_type(const Config& c, const std::string& want,
                               const std::vector<std::string>& types) {
  const bool has_full = std::find(types.begin(), types.end(), kFull) != types.end();
  if (want.empty()) return has_full ? kFull : types.front();
  if (std::find(types.begin(), types.end(), want) != types.end()) return want;
  std::vector<std::string> distinct;
  for (const auto& t : types) {
    if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  }
  throw InputError(fmt::format("{}: layer_type '{}' is not a layer type of this config (it has {})",
                               c.path(), want, fmt::join(distinct, ", ")));
}

// The layer type of a selection: that of layer `index`, or `type` resolved.
std::string selected_type(const Config& c, const HfLayer& layer,
                          const std::vector<std::string>& types) {
  if (!layer.index) return resolve_layer_type(c, layer.type, types);
  const std::int64_t i = *layer.index;
  if (!c.has("layer_types") && !c.has("num_hidden_layers")) {
    throw InputError(
        fmt::format("{}: 'num_hidden_layers' is needed to select layer {}", c.path(), i));
  }
  if (i < 0 || i >= static_cast<std::int64_t>(types.size())) {
    throw InputError(fmt::format("{}: layer {} is out of range (the config has {} layers)",
                                 c.path(), i, types.size()));
  }
  const std::string& lt = types[static_cast<std::size_t>(i)];
  if (!layer.type.empty() && layer.type != lt) {
    throw InputError(
        fmt::format("{}: layer {} is a '{}' layer, not '{}'", c.path(), i, lt, layer.type));
  }
  return lt;
}

// Whether layers of type `lt` (or layer `index` of that type) apply RoPE, and why not.
std::optional<std::string> no_rope_reason(const Config& c, const std::string& lt,
                                          std::optional<std::int64_t> index = std::nullopt) {
  if (c.model_type() == "smollm3" && index) {
    // SmolLM3Attention: use_rope = config.no_rope_layers[layer_idx].
    const std::vector<bool> rope = smollm3_rope_flags(c, *index + 1);
    if (!rope[static_cast<std::size_t>(*index)]) return std::string("no_rope_layers");
  }
  if (c.model_type() == "llama4_text" && lt != kChunked) return std::string("no_rope_layers");
  if (c.model_type() == "cohere2" && lt != kSliding) {
    return std::string("Cohere-2 full-attention layers have no positional encoding");
  }
  if (c.model_type() == "exaone4" && lt != kSliding && c.has("sliding_window")) {
    // Exaone4Attention: `if self.sliding_window is None or self.is_sliding`.
    return std::string("EXAONE-4 models with a sliding window rotate only sliding layers");
  }
  if (c.model_type() == "afmoe" && lt != kSliding) {
    return std::string("AFMoE rotates only sliding-attention layers");  // AfmoeAttention
  }
  if (c.model_type() == "falcon" && c.truthy("alibi")) return std::string("alibi");
  if (c.model_type() == "bloom") return std::string("BLOOM uses ALiBi");
  return std::nullopt;
}

// The RoPE dict of layer type `lt` (rope_parameters, legacy rope_scaling, or the legacy
// per-layer keys), and whether the config keys RoPE by layer type. Refers into the
// config; a dict the config only implies is built in `made`.
const json& rope_dict(const Config& c, const std::string& lt, const std::vector<std::string>& types,
                      bool& keyed, json& made) {
  made = json::object();
  const json* raw = &made;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json* v = c.find(key);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_object()) throw c.bad(key, "an object");
    raw = v;
    break;
  }
  std::set<std::string> type_set(types.begin(), types.end());
  type_set.insert({kFull, kSliding, kChunked});
  keyed = !raw->empty();
  for (auto it = raw->begin(); it != raw->end(); ++it) {
    keyed = keyed && type_set.count(it.key()) > 0 && it.value().is_object();
  }
  if (keyed) {
    auto entry = raw->find(lt);
    if (entry == raw->end()) {
      throw InputError(
          fmt::format("{}: rope_parameters has no entry for layer type '{}'", c.path(), lt));
    }
    return *entry;
  }
  const std::string& mt = c.model_type();
  if ((mt == "gemma3_text" || mt == "gemma3" || mt == "gemma3n_text") && lt == kSliding) {
    // v5 Gemma3TextConfig, Gemma3nTextConfig: sliding layers use rope_local_base_freq,
    // unscaled.
    made = {{"rope_type", "default"},
            {"rope_theta", c.positive_real("rope_local_base_freq").value_or(10000.0)}};
    return made;
  }
  if (mt == "olmo3") {
    // Olmo3Config.convert_rope_params_to_dict builds a dict keyed by layer type: a legacy
    // rope_scaling updates full_attention only, which also takes the top-level
    // rope_theta (kwargs.pop); sliding_attention is default RoPE, and its
    // kwargs.pop("rope_theta", default_theta) finds the key already popped, so it gets
    // default_theta (500000) whatever the file says.
    keyed = true;
    if (lt == kSliding) {
      made = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
      return made;
    }
    return *raw;
  }
  if (mt.rfind("modernbert", 0) == 0) {
    const char* key = lt == kSliding ? "local_rope_theta" : "global_rope_theta";
    if (auto v = c.positive_real(key)) {
      made = {{"rope_type", "default"}, {"rope_theta", *v}};
      return made;
    }
  }
  return *raw;
}

bool kept(const std::vector<std::string>& keep, const char* name) {
  return std::find(keep.begin(), keep.end(), name) != keep.end();
}

// Records that field `param` of `p` holds the config's `key`: its range checks then
// name the file and key (RopeParams::sources).
void from_key(RopeParams& p, const Config& c, const char* param, const char* key) {
  p.sources.set(param, c.path(), key);
}

// head_dim, rotary_dim and where the rotation sits.
void apply_head_dims(const Config& c, const std::string& lt, RopeParams& p,
                     const std::vector<std::string>& keep) {
  std::optional<int> hd;
  std::optional<int> mla = c.dim("qk_rope_head_dim");
  if (mla) {
    hd = mla;  // HF DeepseekV3Config: head_dim = qk_rope_head_dim
  } else if (c.model_type() == "gemma4_text" && lt == kFull) {
    hd = c.dim("global_head_dim");
  } else {
    hd = plain_head_dim(c);
  }
  if (!kept(keep, "head_dim") && hd) {
    p.head_dim = *hd;
    const bool global = c.model_type() == "gemma4_text" && lt == kFull;
    from_key(p, c, "head_dim",
             mla                 ? "qk_rope_head_dim"
             : global            ? "global_head_dim"
             : c.has("head_dim") ? "head_dim"
                                 : "hidden_size / num_attention_heads");
  }
  if (kept(keep, "rotary_dim")) return;
  p.rotary_dim = 0;  // partial_rotary_factor decides
  if (mla) {
    p.rotary_dim = *mla;
    p.rotary_last = true;  // q = [q_nope | q_pe]
    from_key(p, c, "rotary_dim", "qk_rope_head_dim");
  }
}

// Where transformers releases read a RoPE config differently, as each release's
// modeling_rope_utils.py (and v5's RotaryEmbeddingConfigMixin) reads it.
enum class YarnForm {
  a,  // 4.43-4.50: the config's factor; correction range from max_position_embeddings;
      // attention factor 0.1 ln(factor) + 1, mscale keys unread
  b,  // 4.51-4.55: factor = max_position_embeddings / L0 whenever rope_scaling has L0
  c,  // 4.56-4.57 (PR #40320, "explicit factor > implicit factor"): the config's factor
  d,  // 5.x: the config's factor; the ratio only where the factor is null
};

struct Rules {
  YarnForm yarn = YarnForm::d;
  bool truncate_key = true;  // rope_scaling's truncate read (4.55, gpt-oss, and later)
  bool v5 = true;            // rope_parameters; the standardisation's L0 priorities
  bool operator==(const Rules& o) const {
    return yarn == o.yarn && truncate_key == o.truncate_key && v5 == o.v5;
  }
};

Rules rules_of(const HfVersion& v) {
  Rules r;
  r.v5 = v.major >= 5;
  r.truncate_key = r.v5 || v.minor >= 55;
  if (!r.v5) r.yarn = v.minor <= 50 ? YarnForm::a : v.minor <= 55 ? YarnForm::b : YarnForm::c;
  return r;
}

// original_max_position_embeddings as transformers 4.x reads it: llama3 and YaRN from
// rope_scaling (YaRN falling back to max_position_embeddings), LongRoPE from the top
// level only (hasattr(config, "original_max_position_embeddings")).
void apply_l0_4x(const Config& c, const json& rp, const std::string& type, RopeParams& p) {
  auto inner = c.positive(rp, "original_max_position_embeddings");
  auto top = c.positive("original_max_position_embeddings");
  std::optional<std::int64_t> l0 = inner;
  if (type == "longrope") l0 = top;
  if ((type == "yarn" || type == "longrope") && !l0) l0 = p.max_pos;
  if (l0) p.original_max_pos = *l0;
}

// The factor and attention factor rules of 4.x releases, after the keys are read.
void apply_4x_factors(const Config& c, const json& rp, const std::string& type, const Rules& r,
                      RopeParams& p, const std::vector<std::string>& keep) {
  if (r.v5) return;
  if (!r.truncate_key && !kept(keep, "truncate")) p.truncate = true;
  const auto max_pos = c.positive("max_position_embeddings");
  if (type == "longrope" && !kept(keep, "factor")) {
    // factor = max_position_embeddings / original_max_position_embeddings whenever the
    // config has the latter at its top level, whatever rope_scaling's factor says.
    auto top = c.positive("original_max_position_embeddings");
    if (top && max_pos) p.factor = static_cast<double>(*max_pos) / static_cast<double>(*top);
  }
  if (type != "yarn") return;
  if (r.yarn == YarnForm::b && !kept(keep, "factor")) {
    auto inner = c.positive(rp, "original_max_position_embeddings");
    if (inner && max_pos) p.factor = static_cast<double>(*max_pos) / static_cast<double>(*inner);
  }
  if (r.yarn == YarnForm::a) {
    if (!kept(keep, "original_max_pos") && max_pos) p.original_max_pos = *max_pos;
    if (!kept(keep, "attention_factor") && !p.attention_factor && p.factor) {
      p.attention_factor = 0.1 * std::log(*p.factor) + 1.0;
    }
  }
}

// original_max_position_embeddings with HF's standardisation priorities.
void apply_l0(const Config& c, const json& rp, bool keyed, const std::string& type, RopeParams& p) {
  auto inner = c.positive(rp, "original_max_position_embeddings");
  auto top = c.positive("original_max_position_embeddings");
  const bool scaled = type == "llama3" || type == "yarn" || type == "longrope";
  // HF's standardize_rope_params: for a global dict the top-level value (Phi-3) wins;
  // a dict keyed by layer type keeps its own; without one, L0 = max_position_embeddings.
  std::optional<std::int64_t> l0 = inner ? inner : top;
  if (keyed) {
    l0 = inner;
  } else if (scaled && top) {
    l0 = top;
  }
  if (scaled && !l0) l0 = p.max_pos;
  if (l0) p.original_max_pos = *l0;
}

void apply_mrope(const Config& c, const json& rp, RopeParams& p) {
  auto it = rp.find("mrope_section");
  if (it != rp.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != 3) throw c.bad("mrope_section", "a list of three counts");
    p.mrope_section.clear();
    for (const auto& x : *it) {
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
          x.get<std::int64_t>() > (1 << 20)) {
        throw c.bad("mrope_section", "a list of three counts");
      }
      p.mrope_section.push_back(static_cast<int>(x.get<std::int64_t>()));
    }
  }
  auto il = rp.find("mrope_interleaved");
  if (il != rp.end() && !il->is_null()) {
    if (!il->is_boolean()) throw c.bad("mrope_interleaved", "true or false");
    p.mrope_interleaved = il->get<bool>();
  }
}

// Ernie4_5_VL_MoeTextRotaryEmbedding: default RoPE only, and mrope_section (h, w, t;
// [22, 22, 20] when absent) drives its ernie-vl layout (rope_layout_ernie_vl), checked
// as its compute_default_rope_parameters and recomposition_to_3d need: h == w, the
// three summing to the rotary pairs. Sections the command line gives replace the
// layout (keep "mrope_section": posenc's M-RoPE sections); so does a layout it gives.
void apply_ernie_vl(const Config& c, const json& rp, const std::string& type, RopeParams& p,
                    const std::vector<std::string>& keep) {
  if (type != "default" && !kept(keep, "scaling")) {
    throw InputError(fmt::format("{}: ERNIE-4.5-VL requires the default rope type (got '{}')",
                                 c.path(), type));
  }
  if (kept(keep, "mrope_section") || kept(keep, "layout")) return;
  RopeParams sec;
  apply_mrope(c, rp, sec);
  if (sec.mrope_section.empty()) sec.mrope_section = {22, 22, 20};
  const std::vector<int>& v = sec.mrope_section;
  if (v[0] != v[1]) {
    throw InputError(fmt::format("{}: 'mrope_section' [{}, {}, {}]: ERNIE-4.5-VL pairs its h "
                                 "and w sections, which must be equal",
                                 c.path(), v[0], v[1], v[2]));
  }
  p.layout = RopeLayoutSpec{};
  p.layout.preset = RopeLayoutPreset::ernie_vl;
  p.layout.sections = v;
}

// The vision towers whose RoPE is a layout of their own, read from the tower's own config
// (model_type at the top level): Pixtral (PixtralRotaryEmbedding: even-odd), DINOv3
// (DINOv3ViTRopePositionEmbedding: axial, angles times 2 pi; theta from rope_theta) and
// V-JEPA2 (VJEPA2RopeAttention: three chunks, tiled pairing, base 10000, the rotary
// width 3 * 2 * ((D / 3) / 2)). The coordinates stay the caller's (--coords,
// --position-ids; DINOv3's prefix tokens are 1 + num_register_tokens). False for other
// model types.
bool apply_vision_tower(const Config& c, RopeParams& p, const std::vector<std::string>& keep) {
  const std::string& mt = c.model_type();
  if (mt != "pixtral" && mt != "dinov3_vit" && mt != "vjepa2") return false;
  if (kept(keep, "layout")) return true;
  p.layout = RopeLayoutSpec{};
  if (mt == "pixtral") {
    p.layout.preset = RopeLayoutPreset::even_odd;
  } else if (mt == "dinov3_vit") {
    p.layout.preset = RopeLayoutPreset::axial;
    p.layout.scale = kRopeTwoPi;
  } else {
    p.layout.preset = RopeLayoutPreset::chunks;
    p.layout.axes = 3;
    if (!kept(keep, "base")) p.base = 10000.0;
    if (!kept(keep, "rotary_dim") && !kept(keep, "partial")) {
      p.rotary_dim = rope_chunks_width(p.head_dim, 3);
    }
  }
  return true;
}

// HunYuanVLTextConfig: mrope_section, or the legacy xdrope_section (the same if both),
// half-head sizes of integral value, one per position-id row: the xdrope layout
// (rope_layout_xdrope). Absent, the model rotates as plain RoPE.
void apply_hunyuan_vl(const Config& c, const json& rp, RopeParams& p,
                      const std::vector<std::string>& keep) {
  if (kept(keep, "mrope_section") || kept(keep, "layout")) return;
  auto read = [&](const char* key, std::vector<int>& out) {
    auto it = rp.find(key);
    if (it == rp.end() || it->is_null()) return false;
    const std::string want = fmt::format("a list of 2 to {} integral counts", kMaxRopeAxes);
    if (!it->is_array() || it->size() < 2 || it->size() > kMaxRopeAxes) throw c.bad(key, want.c_str());
    for (const auto& x : *it) {
      if (!x.is_number()) throw c.bad(key, want.c_str());
      const double v = x.get<double>();
      if (!(v >= 0 && v <= (1 << 20)) || v != std::floor(v)) throw c.bad(key, want.c_str());
      out.push_back(static_cast<int>(v));
    }
    return true;
  };
  std::vector<int> sec, legacy;
  const bool has = read("mrope_section", sec);
  const bool has_legacy = read("xdrope_section", legacy);
  if (has && has_legacy && sec != legacy) {
    throw InputError(fmt::format("{}: 'mrope_section' and the legacy 'xdrope_section' differ",
                                 c.path()));
  }
  if (!has && !has_legacy) return;
  p.layout = RopeLayoutSpec{};
  p.layout.preset = RopeLayoutPreset::xdrope;
  p.layout.sections = has ? sec : legacy;
}

// The scaling parameters, each checked where the variant in `p.scaling` uses it (HF's
// rope_config_validation): a key that variant ignores is ignored here too.
void apply_scaling_keys(const Config& c, const json& rp, RopeParams& p,
                        const std::vector<std::string>& keep) {
  enum class Range { any, positive, zero_or_positive };
  auto set_num = [&](const char* key, std::optional<double>& dst, Range range) {
    if (kept(keep, key)) return;
    auto v = c.num(rp, key);
    if (!v) return;
    if (range == Range::positive && !(*v > 0.0)) throw c.bad_value(key, "a positive number", *v);
    if (range == Range::zero_or_positive && !(*v >= 0.0)) {
      throw c.bad_value(key, "a positive number (0 means the default)", *v);
    }
    dst = *v;
    from_key(p, c, key, key);
  };
  const RopeScaling type = p.scaling;
  const auto when = [](bool used, Range r) { return used ? r : Range::any; };
  set_num("factor", p.factor, when(type != RopeScaling::none, Range::positive));
  const Range beta = when(type == RopeScaling::yarn, Range::zero_or_positive);
  set_num("beta_fast", p.beta_fast, beta);
  set_num("beta_slow", p.beta_slow, beta);
  set_num("mscale", p.mscale, Range::any);
  set_num("mscale_all_dim", p.mscale_all_dim, Range::any);
  set_num("attention_factor", p.attention_factor, Range::positive);  // any variant
  const bool llama3 = type == RopeScaling::llama3;
  set_num("low_freq_factor", p.low_freq_factor, when(llama3, Range::positive));
  set_num("high_freq_factor", p.high_freq_factor, when(llama3, Range::positive));
  if (llama3 && !kept(keep, "low_freq_factor") && !kept(keep, "high_freq_factor")) {
    const double low = p.low_freq_factor.value_or(1.0), high = p.high_freq_factor.value_or(4.0);
    if (low > high) {
      throw InputError(fmt::format("{}: 'low_freq_factor' {} must not exceed 'high_freq_factor' {}",
                                   c.path(), low, high));
    }
  }
  if (!kept(keep, "truncate")) {
    auto it = rp.find("truncate");
    if (it != rp.end() && !it->is_null()) {
      if (!it->is_boolean()) throw c.bad("truncate", "true or false");
      p.truncate = it->get<bool>();
    }
  }
  auto list = [&](const char* key, std::vector<double>& dst) {
    if (kept(keep, key)) return;
    auto it = rp.find(key);
    if (it == rp.end() || it->is_null()) return;
    if (!it->is_array()) throw c.bad(key, "a list of numbers");
    dst.clear();
    for (const auto& x : *it) {
      if (!x.is_number()) throw c.bad(key, "a list of numbers");
      const double v = x.get<double>();
      if (type == RopeScaling::longrope && !(v > 0.0)) {
        throw c.bad_value(key, "a list of positive numbers", v);
      }
      dst.push_back(v);
    }
    from_key(p, c, key, key);
  };
  list("short_factor", p.short_factor);
  list("long_factor", p.long_factor);
}

// The rotary width the config itself implies must fit what it says about rotary pairs
// (mrope_section, longrope factor lists). Not checked where the command line set the
// rotary part: a mismatch is then the user's, said in the options' terms.
void check_rotary_pairs(const Config& c, const RopeParams& p,
                        const std::vector<std::string>& keep) {
  if (p.head_dim <= 0 || kept(keep, "rotary_dim") || kept(keep, "partial")) return;
  int r = p.rotary_dim;
  if (r == 0) {
    if (!(p.partial > 0.0 && p.partial <= 1.0)) return;  // checked as it is read
    r = static_cast<int>(static_cast<double>(p.head_dim) * p.partial);
    if (p.partial != 1.0 && p.scaling != RopeScaling::proportional && (r <= 0 || r % 2 != 0)) {
      throw InputError(
          fmt::format("{}: 'partial_rotary_factor' {} of head dimension {} gives "
                      "rotary dimension {}, which is not a positive even number",
                      c.path(), p.partial, p.head_dim, r));
    }
  }
  if (r > p.head_dim || r % 2 != 0) return;  // the head's own fault, said as such later
  const std::size_t pairs =
      static_cast<std::size_t>(p.scaling == RopeScaling::proportional ? p.head_dim / 2 : r / 2);
  const bool from_layout = p.layout.preset == RopeLayoutPreset::ernie_vl ||
                           p.layout.preset == RopeLayoutPreset::xdrope;
  const std::vector<int>& sections = from_layout ? p.layout.sections : p.mrope_section;
  if (!kept(keep, "mrope_section") && !sections.empty()) {
    std::size_t sum = 0;
    for (int v : sections) sum += static_cast<std::size_t>(v);
    if (sum != pairs) {
      throw InputError(
          fmt::format("{}: 'mrope_section' sums to {} frequency pairs, the rotary "
                      "dimension {} has {}",
                      c.path(), sum, 2 * pairs, pairs));
    }
  }
  if (p.scaling == RopeScaling::longrope) {
    const std::pair<const char*, const std::vector<double>*> lists[] = {
        {"short_factor", &p.short_factor}, {"long_factor", &p.long_factor}};
    for (const auto& [key, v] : lists) {
      if (!kept(keep, key) && !v->empty() && v->size() != pairs) {
        throw InputError(fmt::format("{}: '{}' has {} values, the rotary dimension {} needs {}",
                                     c.path(), key, v->size(), 2 * pairs, pairs));
      }
    }
  }
}

// The RoPE keys only one model family reads, with its config class's checks.
void apply_family_keys(const Config& c, const json& rp, const std::string& type, RopeParams& p,
                       const std::vector<std::string>& keep) {
  const std::string& mt = c.model_type();
  if (mt == "phimoe" && type != "default") {
    // PhimoeConfig.validate_rope requires both numbers; PhimoeRotaryEmbedding.forward
    // multiplies cos and sin by one of them instead of the attention factor.
    for (const char* key : {"short_mscale", "long_mscale"}) {
      auto v = c.num(rp, key);
      if (!v) throw c.bad(key, "a number (PhiMoE rope scaling needs short_mscale and long_mscale)");
      if (kept(keep, key)) continue;
      (key[0] == 's' ? p.short_mscale : p.long_mscale) = *v;
    }
  }
  if ((mt == "hunyuan_v1_dense" || mt == "hunyuan_v1_moe" || hunyuan_vl(mt)) && type == "dynamic" &&
      !kept(keep, "alpha")) {
    // HunYuanDenseV1RotaryEmbedding: `rope_parameters.get("alpha")` truthy selects the
    // NTK-alpha base.
    if (auto a = c.num(rp, "alpha"); a && *a != 0.0) p.alpha = *a;
  }
}

std::string rope_type_of(const Config& c, const json& rp) {
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto v = c.str(rp, key)) {
      type = *v;
      break;
    }
  }
  // HunYuanVLTextConfig.convert_rope_params_to_dict: the legacy "xdrope" is dynamic.
  if (type == "xdrope" && hunyuan_vl(c.model_type())) return "dynamic";
  // Qwen2-VL's "mrope" is the default frequencies with sections.
  return type == "mrope" ? "default" : type;
}

}  // namespace

std::vector<std::string> hf_layer_types(const std::string& path) {
  return layer_types_of(Config(path));
}

void read_hf_config_file(const std::string& path, json_doc::JsonDoc& doc, int max_depth) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open the HF config", path));
  std::string text;
  std::vector<char> buf(std::size_t{1} << 16);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    text.append(buf.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes) {
      throw InputError(fmt::format("{}: larger than {} MiB; a HF config is a few kilobytes", path,
                                   kMaxConfigBytes >> 20));
    }
  }
  if (in.bad()) throw InputError(fmt::format("{}: cannot read the HF config", path));
  try {
    json_doc::parse(text, doc, max_depth, [&path, max_depth]() {
      throw InputError(
          fmt::format("{}: nested deeper than {} levels; not a HF config", path, max_depth));
    });
  } catch (const json::exception& e) {
    std::string what = e.what();
    throw InputError(fmt::format("{}: not valid JSON ({})", path, what.substr(0, 120)));
  }
}

void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep,
                     const std::string& layer_type) {
  apply_hf_config(path, p, keep, HfLayer{layer_type, std::nullopt});
}

void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep,
                     const HfLayer& layer) {
  apply_hf_config(path, p, keep, layer, HfVersion{});
}

void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep,
                     const HfLayer& layer, const HfVersion& version) {
  const Rules rules = rules_of(version);
  const Config c(path);
  if (!rules.v5 && c.has("rope_parameters")) {
    throw InputError(fmt::format(
        "{}: 'rope_parameters' is transformers v5's key; release {}.{} reads only "
        "'rope_scaling' and 'rope_theta', and would build plain RoPE from this config",
        path, version.major, version.minor));
  }
  const std::vector<std::string> types = layer_types_of(c);
  std::string lt = selected_type(c, layer, types);
  if (layer.type.empty() && !layer.index && no_rope_reason(c, lt)) {
    // Unasked, take the first layer type that has RoPE (Llama-4: chunked_attention).
    for (const auto& t : types) {
      if (!no_rope_reason(c, t)) {
        lt = t;
        break;
      }
    }
  }
  if (auto why = no_rope_reason(c, lt, layer.index)) {
    if (layer.index) {
      throw InputError(
          fmt::format("{}: layer {} ('{}') has no RoPE ({})", path, *layer.index, lt, *why));
    }
    throw InputError(fmt::format("{}: layers of type '{}' have no RoPE ({})", path, lt, *why));
  }
  bool keyed = false;
  json made;
  const json& rp = rope_dict(c, lt, types, keyed, made);

  if (!kept(keep, "base")) {
    if (auto v = c.positive_real(rp, "rope_theta"))
      p.base = *v;
    else if (auto w = c.positive_real("rope_theta"))
      p.base = *w;
    from_key(p, c, "base", "rope_theta");
  }
  if (!kept(keep, "partial")) {
    // HF's standardisation assigns the top-level factor over the dict's.
    auto f = c.num("partial_rotary_factor");
    if (!f) f = c.num(rp, "partial_rotary_factor");
    if (f && !(*f > 0.0 && *f <= 1.0)) {
      throw c.bad_value("partial_rotary_factor", "in (0, 1]", *f);
    }
    if (f) {
      p.partial = *f;
      from_key(p, c, "partial", "partial_rotary_factor");
    }
  }
  apply_head_dims(c, lt, p, keep);
  if (!kept(keep, "max_pos")) {
    if (auto v = c.positive("max_position_embeddings")) {
      p.max_pos = *v;
      from_key(p, c, "max_pos", "max_position_embeddings");
    }
  }
  const std::string type = rope_type_of(c, rp);
  if (!kept(keep, "original_max_pos")) {
    if (rules.v5) {
      apply_l0(c, rp, keyed, type, p);
    } else {
      apply_l0_4x(c, rp, type, p);
    }
  }
  if (!kept(keep, "scaling")) {
    from_key(p, c, "scaling", "rope_type");
    try {
      p.scaling = parse_rope_scaling(type);
    } catch (const UsageError&) {
      throw InputError(fmt::format(
          "{}: unsupported rope_type '{}' (supported: default, linear, dynamic, yarn, longrope, "
          "llama3, proportional)",
          path, type));
    }
  }
  if (!kept(keep, "style") && gptj_pairs(c.model_type())) p.style = RopeStyle::gptj;
  // Ernie4_5's and Ernie4_5_MoE's apply_rotary_pos_emb: q.float() * cos +
  // rotate_half(q).float() * sin, then .to(original_dtype); the dense model's cos and
  // sin come cast to q's dtype, the MoE's stay float32.
  if (c.model_type() == "ernie4_5") p.hf_rotation = HfRotation::float32_cast_trig;
  if (c.model_type() == "ernie4_5_moe" || ernie_vl(c.model_type())) {
    p.hf_rotation = HfRotation::float32;
  }
  if (!kept(keep, "rope_interleave") && c.truthy("rope_interleave")) p.rope_interleave = true;
  if (ernie_vl(c.model_type())) {
    apply_ernie_vl(c, rp, type, p, keep);
  } else if (apply_vision_tower(c, p, keep)) {
  } else if (hunyuan_vl(c.model_type())) {
    apply_hunyuan_vl(c, rp, p, keep);
  } else if (!kept(keep, "mrope_section")) {
    apply_mrope(c, rp, p);
  }
  apply_scaling_keys(c, rp, p, keep);
  apply_4x_factors(c, rp, type, rules, p, keep);
  apply_family_keys(c, rp, type, p, keep);
  check_rotary_pairs(c, p, keep);
}

namespace {

// DeepSeek MLA: qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2 when scaled.
std::optional<double> mla_scale(const Config& c, int qk_head_dim,
                                const std::vector<std::string>& types) {
  bool keyed = false;
  json made;
  const json& rp = rope_dict(c, kFull, types, keyed, made);
  const std::string type = rope_type_of(c, rp);
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
  const double m_all = c.num(rp, "mscale_all_dim").value_or(0.0);
  const auto factor = c.num(rp, "factor");
  if (type != "default" && m_all != 0.0 && factor) {
    const double m = *factor <= 1.0 ? 1.0 : 0.1 * m_all * std::log(*factor) + 1.0;
    scale *= m * m;
    // Judged here as the config's key, not later as the scale option it becomes (0
    // would mean the default scale there).
    if (!(scale > 0) || !std::isfinite(scale)) {
      throw c.bad_value("mscale_all_dim", "a value giving a positive finite score scale", m_all);
    }
  }
  return scale;
}

void attention_dims(const Config& c, const std::string& lt, HfAttentionConfig& a,
                    const std::vector<std::string>& types) {
  a.heads = heads_of(c);
  a.kv_heads = c.has("num_key_value_heads") ? c.dim("num_key_value_heads") : a.heads;
  auto rope = c.dim("qk_rope_head_dim");
  auto nope = c.dim("qk_nope_head_dim");
  if (rope && nope) {
    a.head_dim = *rope + *nope;
    a.v_head_dim = c.dim("v_head_dim");
    a.scale = mla_scale(c, *a.head_dim, types);
    return;
  }
  if (c.model_type() == "gemma4_text" && lt == kFull) {
    a.head_dim = c.dim("global_head_dim");
    if (c.truthy("attention_k_eq_v") && c.has("num_global_key_value_heads")) {
      a.kv_heads = c.dim("num_global_key_value_heads");
    }
  } else {
    a.head_dim = plain_head_dim(c);
  }
  if (auto q = c.num("query_pre_attn_scalar")) {
    if (!(*q > 0)) throw c.bad("query_pre_attn_scalar", "a positive number");
    a.scale = 1.0 / std::sqrt(*q);
  }
  if (auto m = c.num("attention_multiplier")) {  // Granite
    // Judged here as the config's key, not later as the scale option it becomes.
    if (!(*m > 0)) throw c.bad_value("attention_multiplier", "a positive number", *m);
    a.scale = *m;
  }
  const std::string& mt = c.model_type();
  if (mt == "gemma3n_text" || mt == "gemma4_text") {
    // Gemma3nTextAttention, Gemma4TextAttention: self.scaling = 1.0 (q and k are
    // RMS-normalised instead), whatever query_pre_attn_scalar says.
    a.scale = 1.0;
  }
}


// Ministral3Attention scales every query by _get_llama_4_attn_scale(cache_position,
// rope_parameters["llama_4_scaling_beta"], rope_parameters["original_max_position_
// embeddings"]); HF fails on a config without them, so posenc refuses it.
void ministral3_scaling(const Config& c, HfAttentionConfig& a,
                        const std::vector<std::string>& types) {
  bool keyed = false;
  json made;
  const json& rp = rope_dict(c, a.layer_type, types, keyed, made);
  a.llama4_scaling_beta = c.num(rp, "llama_4_scaling_beta");
  a.llama4_scaling_period = c.positive(rp, "original_max_position_embeddings");
  if (!a.llama4_scaling_beta || !std::isfinite(*a.llama4_scaling_beta)) {
    throw c.bad("llama_4_scaling_beta", "a number (Ministral-3 scales its queries by it)");
  }
  if (!a.llama4_scaling_period) {
    throw c.bad("original_max_position_embeddings",
                "a positive count (Ministral-3 divides positions by it)");
  }
}

}  // namespace

HfAttentionConfig read_hf_attention_config(const std::string& path, const std::string& layer_type) {
  return read_hf_attention_config(path, HfLayer{layer_type, std::nullopt});
}

HfAttentionConfig read_hf_attention_config(const std::string& path, const HfLayer& layer) {
  const Config c(path);
  const std::vector<std::string> types = layer_types_of(c);
  HfAttentionConfig a;
  a.path = path;
  a.model_type = c.model_type();
  a.layer_type = selected_type(c, layer, types);
  a.layer_index = layer.index;
  attention_dims(c, a.layer_type, a, types);
  if (auto s = c.num("attn_logit_softcapping")) {
    if (!(*s > 0)) throw c.bad("attn_logit_softcapping", "a positive number");
    a.softcap = *s;
  }
  const bool windowed = c.model_type() != "smollm3" || c.truthy("use_sliding_window");
  if (a.layer_type == kSliding && windowed) a.sliding_window = c.positive("sliding_window");
  if (a.layer_type == kChunked) a.chunk_size = c.positive("attention_chunk_size");
  a.rope = !no_rope_reason(c, a.layer_type, layer.index);
  if (c.model_type() == "llama4_text" && !a.rope && c.truthy("attn_temperature_tuning")) {
    a.temperature_scale = c.num("attn_scale");
    a.temperature_floor = c.num("floor_scale");
    if (!a.temperature_floor || !(*a.temperature_floor > 0)) {
      throw c.bad("floor_scale", "a positive number");
    }
  }
  if (c.model_type() == "ministral3") ministral3_scaling(c, a, types);
  if (c.model_type() == "bloom") a.alibi = HfAlibi::bloom;
  if (c.model_type() == "falcon" && c.truthy("alibi")) a.alibi = HfAlibi::falcon;
  return a;
}

HfVersion parse_hf_version(const std::string& text) {
  // A release as PEP 440 spells transformers': 4.51, 4.51.3, 5.0.0rc1, 4.57.0.dev0.
  static const std::regex kRelease(
      R"(v?([0-9]{1,4})(?:\.([0-9]{1,4}))?(?:\.[0-9]{1,4})?(?:\.?(?:dev|rc|a|b|post)[0-9]{0,4})?)");
  std::smatch m;
  if (!std::regex_match(text, m, kRelease)) {
    throw UsageError(fmt::format("hf_version: '{}' is not a transformers release such as 4.51 "
                                 "or 5",
                                 printable(text)));
  }
  HfVersion v;
  v.major = std::stoi(m[1].str());
  v.minor = m[2].matched ? std::stoi(m[2].str()) : 0;
  if (v.major < 4 || (v.major == 4 && v.minor < 43) || v.major > 5) {
    throw UsageError(fmt::format(
        "hf_version: release {}.{} is not one posenc models (4.43, the first with "
        "modeling_rope_utils, to 5.x)",
        v.major, v.minor));
  }
  return v;
}

std::optional<HfVersion> hf_config_version(const std::string& path) {
  const Config c(path);
  const json* v = c.find("transformers_version");
  if (v == nullptr || !v->is_string()) {
    // A composite config records it at the top level, outside text_config.
    v = c.find_top("transformers_version");
  }
  if (v == nullptr || !v->is_string()) return std::nullopt;
  try {
    return parse_hf_version(v->get<std::string>());
  } catch (const UsageError&) {
    return std::nullopt;
  }
}

bool same_hf_rules(const HfVersion& a, const HfVersion& b) { return rules_of(a) == rules_of(b); }

std::string hf_rules_text(const HfVersion& v) {
  const Rules r = rules_of(v);
  std::string s = fmt::format("transformers {}.{} rules:", v.major, v.minor);
  if (r.v5) {
    s += "\n  config keys: rope_parameters (or legacy rope_scaling), per layer type";
    s += "\n  original_max_position_embeddings: the top-level value wins for llama3, yarn and "
         "longrope, else the dict's, else max_position_embeddings";
    s += "\n  longrope factor: the config's, else max_position_embeddings / L0";
  } else {
    s += "\n  config keys: rope_scaling and rope_theta (rope_parameters is not read)";
    s += "\n  original_max_position_embeddings: rope_scaling's for llama3 and yarn, the top "
         "level's for longrope, else max_position_embeddings";
    s += "\n  longrope factor: max_position_embeddings / the top-level "
         "original_max_position_embeddings when the config has one, else the config's";
  }
  switch (r.yarn) {
    case YarnForm::a:
      s += "\n  yarn factor: the config's; correction range from max_position_embeddings; "
           "attention factor 0.1 ln(factor) + 1 (mscale keys not read)";
      break;
    case YarnForm::b:
      s += "\n  yarn factor: max_position_embeddings / original_max_position_embeddings "
           "whenever rope_scaling has the latter, else the config's";
      break;
    case YarnForm::c:
      s += "\n  yarn factor: the config's (the ratio is not used)";
      break;
    case YarnForm::d:
      s += "\n  yarn factor: the config's, else max_position_embeddings / L0";
      break;
  }
  s += r.truncate_key ? "\n  yarn truncate: read from the config"
                      : "\n  yarn truncate: not read (the correction range is always rounded)";
  return s;
}

}  // namespace posenc
