#pragma once
/// \file
/// HF transformers model configs (config.json) read as transformers v5 reads them, for
/// one layer type. What is read:
/// - the text model's keys: those of `text_config` when the file has one (Gemma-3/4,
///   Llama-4, Qwen3-VL), else the top level;
/// - where a key is missing, the default of the model type's config class, for the
///   model types whose defaults change numbers (gemma2, gemma3_text, gemma3n_text, gemma4_text,
///   llama4_text, deepseek_v3, qwen2 family, olmo3, phimoe, ernie4_5, moonshine) and its
///   attribute_map (Moonshine's encoder head counts); other model types use the generic
///   defaults (rope_theta 10000, no sliding window);
/// - the layer types: `layer_types`, or the rule of the model type's config class
///   (Gemma-2 alternating, Gemma-3 `sliding_window_pattern`, Llama-4
///   `no_rope_layers`, Qwen2 `use_sliding_window` / `max_window_layers`, ...);
/// - per layer type: RoPE (`apply_hf_config` in rope.hpp), the sliding window, chunked
///   attention, NoPE layers and Llama-4's attention temperature tuning.
/// The man page has the table "HF config key -> posenc option" of every key read.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace posenc {

struct RopeParams;

/// The layers of a HF config a command follows: all layers of one layer type, or one
/// layer by index, which also decides the rules no layer type carries (SmolLM3's
/// no_rope_layers).
struct HfLayer {
  std::string type;                   ///< a layer_types value; "" = the default (below)
  std::optional<std::int64_t> index;  ///< one layer, 0-based; `type`, if given, must match
};

/// The transformers release whose rules read the config (`--hf-version`): RoPE
/// configs are read as that release reads them where the rules changed between
/// releases (see hf_rules_text). Releases 4.43 (the first with modeling_rope_utils)
/// and later are modelled.
struct HfVersion {
  int major = 5;  ///< 4 or 5
  int minor = 0;  ///< 43 and up for major 4
  /// Same release (the rules of two releases may still agree: same_hf_rules).
  bool operator==(const HfVersion& o) const { return major == o.major && minor == o.minor; }
};

/// "4.51", "4.51.3", "v4.51", "5", "5.0.0rc1", "4.57.0.dev0": the release (patch and
/// suffixes ignored). Throws UsageError for text that is no version, or a release
/// before 4.43 or after 5.x.
HfVersion parse_hf_version(const std::string& text);

/// The transformers_version a config.json records, when it records one this can read
/// (a release posenc models); nullopt otherwise. Throws InputError for an unreadable
/// or malformed config.
std::optional<HfVersion> hf_config_version(const std::string& path);

/// The rules a release applies where releases differ, one line each: the YaRN factor
/// and correction length, its attention factor and `truncate`, where L0 comes from for
/// llama3/YaRN/LongRoPE, and whether `rope_parameters` is read.
std::string hf_rules_text(const HfVersion& v);

/// True when `a` and `b` apply the same rules (the releases between which nothing
/// posenc reads changed).
bool same_hf_rules(const HfVersion& a, const HfVersion& b);

/// ALiBi as HF's ALiBi models add it.
enum class HfAlibi {
  none,
  bloom,   ///< bias slope * key position, added after the 1/sqrt(d) scale
  falcon,  ///< the same bias, added before the scale (`(q.k + bias) / sqrt(d)`)
};

/// The attention side of one layer type of a HF config. Unset optionals: the config
/// does not say (posenc's defaults apply).
struct HfAttentionConfig {
  std::string path;               ///< the config file, as the caller named it
  std::string model_type;         ///< the config's model_type (of its text_config)
  std::string layer_type;         ///< the layer type described
  std::optional<int> heads;       ///< num_attention_heads
  std::optional<int> kv_heads;    ///< num_key_value_heads (num_global_key_value_heads)
  std::optional<int> head_dim;    ///< of queries and keys (qk_nope + qk_rope for MLA)
  std::optional<int> v_head_dim;  ///< of values, where it differs (MLA v_head_dim)
  /// The score scale where it is not 1/sqrt(head_dim): query_pre_attn_scalar^-0.5
  /// (Gemma-2/3), 1.0 (Gemma-3n, Gemma-4), attention_multiplier (Granite), DeepSeek's
  /// qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2.
  std::optional<double> scale;
  /// HF's sliding_window W, for a sliding layer type: a query at position p sees keys
  /// at positions p - W < j <= p.
  std::optional<std::int64_t> sliding_window;
  std::optional<double> softcap;  ///< attn_logit_softcapping
  /// attention_chunk_size of a chunked layer type (Llama-4): keys in the query's chunk.
  std::optional<std::int64_t> chunk_size;
  std::optional<std::int64_t> layer_index;  ///< the layer described, when one was selected
  /// false for NoPE layers (Llama-4 no_rope_layers, Cohere-2, EXAONE-4 and AFMoE full
  /// layers, SmolLM3 no_rope_layers of a selected layer)
  bool rope = true;
  /// Llama-4 attn_temperature_tuning on NoPE layers: queries at position p scaled by
  /// 1 + attn_scale * log1p(floor((p + 1) / floor_scale)).
  std::optional<double> temperature_scale;
  std::optional<double> temperature_floor;  ///< floor_scale (temperature_scale: attn_scale)
  /// Ministral-3's rope_parameters llama_4_scaling_beta and the period it divides
  /// positions by (original_max_position_embeddings): queries at position p scaled by
  /// 1 + beta * log(1 + floor(p / period)).
  std::optional<double> llama4_scaling_beta;
  std::optional<std::int64_t> llama4_scaling_period;  ///< see llama4_scaling_beta
  HfAlibi alibi = HfAlibi::none;            ///< the layers' ALiBi (Falcon's alibi, BLOOM), if any
};

/// The layer types of the config's layers, in layer order (`layer_types`, or the
/// model type's rule; every layer "full_attention" when the config says nothing).
/// Throws InputError naming the file for unreadable or malformed configs.
std::vector<std::string> hf_layer_types(const std::string& path);

/// The attention parameters of `layer_type` ("" = "full_attention" when the config has
/// such layers, else its only layer type). Throws InputError naming the file for
/// unreadable or malformed configs, out-of-range values and layer types the config
/// does not have.
HfAttentionConfig read_hf_attention_config(const std::string& path,
                                           const std::string& layer_type = "");
/// The same for a layer selection: a layer index out of range, or whose type is not
/// `layer.type`, throws InputError naming the file.
HfAttentionConfig read_hf_attention_config(const std::string& path, const HfLayer& layer);

/// apply_hf_config (rope.hpp) for a layer selection; a selected layer without RoPE
/// throws InputError naming the file and the layer.
void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep,
                     const HfLayer& layer);
/// The same, read as transformers release `version` reads the config.
void apply_hf_config(const std::string& path, RopeParams& p, const std::vector<std::string>& keep,
                     const HfLayer& layer, const HfVersion& version);

}  // namespace posenc

namespace posenc {

/// RoPE parameters from values given explicitly and a HF config, as the commands' ROPE
/// OPTIONS combine them: `given` holds the explicit values and `names` the RopeParams
/// members set in it (the names of apply_hf_config's `keep`, plus original_max_pos,
/// max_pos, seq_len, rotary_last); `path` empty means no config. The config fills
/// what was not given; an explicit `partial` without `rotary_dim` lets the factor decide
/// R, and an explicit `attention_factor` also wins over PhiMoE's mscales. `given`'s
/// head_dim, when not 0, is kept. `version`: the transformers release whose rules read
/// the config (`--hf-version`).
RopeParams merge_hf_config(const RopeParams& given, const std::vector<std::string>& names,
                           const std::string& path, const HfLayer& layer = {},
                           const HfVersion& version = {});

}  // namespace posenc
