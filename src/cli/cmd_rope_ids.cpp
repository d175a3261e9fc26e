// `posenc rope-ids`: the [3, s] M-RoPE position ids (rows t, h, w) of a multimodal prompt,
// as HF transformers v5's get_rope_index computes them, from a layout SPEC or from HF's own
// input_ids and grids ([3, b, s] for a batch). The options fill the library's PromptLayout
// or RopeIdsTokens and RopeIdsRules (encodings/rope_ids.hpp).

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/encodings/rope_ids_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

struct RopeIdsOptions {
  RopeIdsRequest request;  // the declared fields (rope_ids_fields.hpp) and --hf-config
  std::string layout;
  std::string input_ids;
  std::string image_grid_thw;
  std::string video_grid_thw;
  std::string second_per_grid_ts;
  std::string attention_mask;
  OutputOptions out;
};

void run_rope_ids(const RopeIdsOptions& o, CLI::App* sub) {
  check_prompt_given(command_line(sub));
  const bool by_layout = sub->count("--layout") > 0;
  const PromptLayout layout =
      by_layout ? parse_prompt_layout(o.layout, "--layout") : PromptLayout{};
  const TensorRef ref = parse_ref(o.out.outputs.at(0), o.out.to, "/position_ids");
  RopeIdsConfig cfg;
  const RopeIdsRequest& req = o.request;
  if (!req.hf_config.empty()) cfg = read_rope_ids_config(req.hf_config);
  const RopeIdsRules rules = resolve_rope_ids_rules(req, cfg);
  RopeIdsBatch ids;
  if (!by_layout) {  // HF's interface: input_ids and the tensors given, read whole
    const auto read = [](const std::string& ref) -> std::optional<Tensor> {
      if (ref.empty()) return std::nullopt;
      return read_tensor(ref);
    };
    ids = rope_ids_from_tensors({read_tensor(o.input_ids), read(o.attention_mask),
                                 read(o.image_grid_thw), read(o.video_grid_thw),
                                 read(o.second_per_grid_ts)},
                                req, cfg, rules);
  } else {
    RopeIds one = rope_ids(layout, rules);
    ids.ids = std::move(one.ids);
    ids.deltas.push_back(one.delta);
  }
  Attrs attrs = {
      {"family", std::string(rope_ids_family_name(rules.family))},
      {"spatial_merge_size", static_cast<long long>(rules.spatial_merge_size)},
      {"hf_rules", std::string("transformers v5 get_rope_index (get_mrope_index)")},
  };
  if (by_layout) attrs.push_back({"layout", prompt_layout_text(layout)});
  if (ids.ids.ndim() == 2) {
    attrs.push_back({"mrope_position_delta", static_cast<long long>(ids.deltas[0])});
  } else {
    attrs.push_back(
        {"mrope_position_deltas", std::vector<double>(ids.deltas.begin(), ids.deltas.end())});
  }
  if (rules.family == RopeIdsFamily::qwen2_5_vl && rules.tokens_per_second > 0) {
    attrs.push_back({"tokens_per_second", rules.tokens_per_second});
  }
  if (rules.family == RopeIdsFamily::qwen2_5_omni) {
    attrs.push_back({"position_id_per_seconds", rules.position_id_per_seconds});
    attrs.push_back({"seconds_per_chunk", rules.seconds_per_chunk});
  }
  verbose(fmt::format("{}: position ids {} i64, mrope_position_delta {}", ref.text,
                      shape_str(ids.ids.shape()), fmt::join(ids.deltas, ",")));
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
  add_declared_options(sub, opt->request, {"family"});
  sub->add_option("--layout", opt->layout,
                  "the prompt: e.g. text:5,image:1x4x6,text:3,video:2x4x4@2.0,text:1 (or "
                  "--input-ids)");
  sub->add_option("--input-ids", opt->input_ids,
                  "the prompt as HF takes it: token ids [s] or [b, s] (ids [3, b, s]), with "
                  "--image-grid-thw, --video-grid-thw and the media token ids (--hf-config)");
  sub->add_option("--image-grid-thw", opt->image_grid_thw, "[images, 3] grids (--input-ids)");
  sub->add_option("--video-grid-thw", opt->video_grid_thw, "[videos, 3] grids (--input-ids)");
  sub->add_option("--second-per-grid-ts", opt->second_per_grid_ts,
                  "[videos] seconds per temporal grid (--input-ids; qwen2.5-vl, qwen2.5-omni)");
  sub->add_option("--attention-mask", opt->attention_mask,
                  "1 for tokens, 0 for padding, the shape of --input-ids (HF's attention_mask)");
  add_declared_options(sub, opt->request,
                       {"image_token_id", "video_token_id", "audio_token_id",
                        "video_start_token_id", "video_end_token_id"});
  sub->add_option("--hf-config", opt->request.hf_config,
                  "HF config.json: model_type, vision_config.spatial_merge_size and "
                  "tokens_per_second, position_id_per_seconds (options given win)");
  add_declared_options(sub, opt->request,
                       {"spatial_merge_size", "tokens_per_second", "position_id_per_seconds",
                        "seconds_per_chunk"});
  add_output_options(sub, opt->out, /*multiple=*/false, /*required=*/true,
                     "output reference for the [3, s] int64 ids (x.npy, x.h5:/d (default "
                     "/position_ids), x.csv, x.json, - for stdout)");
  sub->callback([opt, sub] { run_rope_ids(*opt, sub); });
}

}  // namespace posenc::cli
