// `posenc rope-ids`: the [3, s] M-RoPE position ids (rows t, h, w) of a multimodal prompt,
// as HF transformers v5's get_rope_index computes them, from a layout SPEC. The options
// fill the library's PromptLayout and RopeIdsRules (encodings/rope_ids.hpp).

#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

struct RopeIdsOptions {
  std::string family;
  std::string layout;
  std::string hf_config;
  long long spatial_merge_size = 0;
  double tokens_per_second = 0;
  double position_id_per_seconds = 0;
  OutputOptions out;
};

// The rules: the options given, else the config's keys, else HF's class defaults.
RopeIdsRules rules_of(const RopeIdsOptions& o, CLI::App* sub) {
  RopeIdsConfig cfg;
  if (!o.hf_config.empty()) cfg = read_rope_ids_config(o.hf_config);
  RopeIdsRules r;
  if (!o.family.empty()) {
    r.family = parse_rope_ids_family(o.family, "--family");
  } else if (!cfg.model_type.empty()) {
    try {
      r.family = parse_rope_ids_family(cfg.model_type, "model_type");
    } catch (const UsageError&) {
      throw InputError(fmt::format("{}: model_type '{}' is not a family rope-ids knows; give "
                                   "--family",
                                   o.hf_config, cfg.model_type));
    }
  } else {
    throw UsageError("--family: required (or give --hf-config with a model_type)");
  }
  if (sub->count("--spatial-merge-size") > 0) {
    if (o.spatial_merge_size < 1 || o.spatial_merge_size > kMaxLayoutTokens) {
      throw UsageError(fmt::format("--spatial-merge-size: must be 1 to {}, got {}",
                                   kMaxLayoutTokens, o.spatial_merge_size));
    }
    r.spatial_merge_size = o.spatial_merge_size;
  } else if (cfg.spatial_merge_size > 0) {
    r.spatial_merge_size = cfg.spatial_merge_size;
  }
  const bool tps_given = sub->count("--tokens-per-second") > 0;
  const bool pips_given = sub->count("--position-id-per-seconds") > 0;
  if (tps_given && r.family != RopeIdsFamily::qwen2_5_vl) {
    throw UsageError("--tokens-per-second: only qwen2.5-vl scales video time by it");
  }
  if (pips_given && r.family != RopeIdsFamily::qwen2_5_omni) {
    throw UsageError("--position-id-per-seconds: only qwen2.5-omni reads it");
  }
  if (tps_given) {
    if (!(o.tokens_per_second > 0) || o.tokens_per_second >= 9007199254740992.0) {
      throw UsageError("--tokens-per-second: must be above 0 and below 2^53");
    }
    r.tokens_per_second = o.tokens_per_second;
  } else if (cfg.tokens_per_second > 0) {
    r.tokens_per_second = cfg.tokens_per_second;
  } else if (!o.hf_config.empty()) {
    r.tokens_per_second = 4;  // Qwen2_5_VLVisionConfig's default, for a config without the key
  }
  if (pips_given) {
    if (!(o.position_id_per_seconds > 0) || o.position_id_per_seconds >= 9007199254740992.0) {
      throw UsageError("--position-id-per-seconds: must be above 0 and below 2^53");
    }
    r.position_id_per_seconds = o.position_id_per_seconds;
  } else if (cfg.position_id_per_seconds > 0) {
    r.position_id_per_seconds = cfg.position_id_per_seconds;
  }
  return r;
}

void run_rope_ids(const RopeIdsOptions& o, CLI::App* sub) {
  const PromptLayout layout = parse_prompt_layout(o.layout, "--layout");
  const TensorRef ref = parse_ref(o.out.outputs.at(0), o.out.to, "/position_ids");
  const RopeIdsRules rules = rules_of(o, sub);
  const RopeIds ids = rope_ids(layout, rules);
  Attrs attrs = {
      {"family", std::string(rope_ids_family_name(rules.family))},
      {"layout", prompt_layout_text(layout)},
      {"spatial_merge_size", static_cast<long long>(rules.spatial_merge_size)},
      {"mrope_position_delta", static_cast<long long>(ids.delta)},
      {"hf_rules", std::string("transformers v5 get_rope_index (get_mrope_index)")},
  };
  if (rules.family == RopeIdsFamily::qwen2_5_vl && rules.tokens_per_second > 0) {
    attrs.push_back({"tokens_per_second", rules.tokens_per_second});
  }
  if (rules.family == RopeIdsFamily::qwen2_5_omni) {
    attrs.push_back({"position_id_per_seconds", rules.position_id_per_seconds});
  }
  verbose(fmt::format("{}: position ids {} i64, mrope_position_delta {}", ref.text,
                      shape_str(ids.ids.shape()), ids.delta));
  verbose_attrs(attrs);
  write_tensor(ref, ids.ids, attrs, o.out.write_options());
}

}  // namespace

void register_rope_ids(CLI::App& app) {
  auto opt = std::make_shared<RopeIdsOptions>();
  auto* sub = app.add_subcommand(
      "rope-ids",
      "multimodal RoPE position ids [3, s] (rows t, h, w) of a prompt layout, as HF transformers "
      "v5's get_rope_index computes them, for posenc rope --mrope-section ... --position-ids. "
      "The layout is a comma list of text:N, image:TxHxW, video:TxHxW[@SECONDS][/GAP] and "
      "audio:N (grids in patches, before the spatial merge); see posenc help rope-ids");
  sub->add_option("--family", opt->family,
                  "qwen2-vl | qwen2.5-vl | qwen3-vl | qwen2.5-omni | glm4v (default: the "
                  "--hf-config model_type)");
  sub->add_option("--layout", opt->layout,
                  "the prompt: e.g. text:5,image:1x4x6,text:3,video:2x4x4@2.0,text:1")
      ->required();
  sub->add_option("--hf-config", opt->hf_config,
                  "HF config.json: model_type, vision_config.spatial_merge_size and "
                  "tokens_per_second, position_id_per_seconds (options given win)");
  sub->add_option("--spatial-merge-size", opt->spatial_merge_size,
                  "patches merged per side into one token (default 2)");
  sub->add_option("--tokens-per-second", opt->tokens_per_second,
                  "qwen2.5-vl: video time ids per second (vision_config.tokens_per_second; the "
                  "released checkpoints say 2, HF's class default is 4)");
  sub->add_option("--position-id-per-seconds", opt->position_id_per_seconds,
                  "qwen2.5-omni: time ids per second of media (default 25)");
  add_output_options(sub, opt->out, /*multiple=*/false, /*required=*/true,
                     "output reference for the [3, s] int64 ids (x.npy, x.h5:/d (default "
                     "/position_ids), x.csv, x.json, - for stdout)");
  sub->callback([opt, sub] { run_rope_ids(*opt, sub); });
}

}  // namespace posenc::cli
