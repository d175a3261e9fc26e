#pragma once
/// \file
/// The declared parameters of `posenc rope-ids` and posenc.rope_ids (declare.hpp): the
/// family, the media token ids and the timing numbers of RopeIdsRequest, each given or
/// else the config's. Their ranges, and which family reads which, are
/// resolve_rope_ids_rules' (they depend on the family and the config); the layout, the
/// token tensors and the config's path are bound by each front end.

#include <optional>
#include <string>
#include <utility>

#include "posenc/declare.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// The family and the media token ids (in --help order: the family first, the ids with
/// the token tensors) and the numbers after --hf-config.
template <class V>
void declare(V& v, RopeIdsRequest& r) {
  v(field("family",
          "qwen2-vl | qwen2.5-vl | qwen3-vl | qwen2.5-omni | glm4v (default: the "
          "--hf-config model_type)"),
    r.family);
  v(field("image_token_id", "image_token_id (--input-ids)"), r.token_ids[0]);
  v(field("video_token_id", "video_token_id (--input-ids)"), r.token_ids[1]);
  v(field("audio_token_id", "audio_token_id (--input-ids; qwen2.5-omni)"), r.token_ids[2]);
  v(field("video_start_token_id", "video_start_token_id (--input-ids; glm4v)"), r.token_ids[3]);
  v(field("video_end_token_id", "video_end_token_id (--input-ids; glm4v)"), r.token_ids[4]);
  v(field("spatial_merge_size", "patches merged per side into one token (default 2)"),
    r.spatial_merge_size);
  v(field("tokens_per_second",
          "qwen2.5-vl: video time ids per second (vision_config.tokens_per_second; the "
          "released checkpoints say 2, HF's class default is 4)"),
    r.tokens_per_second);
  v(field("position_id_per_seconds", "qwen2.5-omni: time ids per second of media (default 25)"),
    r.position_id_per_seconds);
  v(field("seconds_per_chunk", "qwen2.5-omni: seconds per chunk of a video+audio span (default 2)"),
    r.seconds_per_chunk);
}

/// The prompt given one way, checked before any tensor is read: as `layout` (a SPEC) or as
/// `input_ids` with the grids, the mask and the media token ids (which a layout does not
/// take); second_per_grid_ts needs video_grid_thw. UsageError in the caller's terms, one
/// message from every front end ("--image-grid-thw: goes with --input-ids, not --layout").
inline void check_prompt_given(const Caller& c) {
  const bool by_layout = c.gave("layout");
  if (by_layout == c.gave("input_ids")) {
    throw UsageError(c.term("layout") + ": give the prompt as " + c.term("layout") +
                     " SPEC or as " + c.term("input_ids") + " REF, one of the two");
  }
  if (by_layout) {
    for (const char* n : {"image_grid_thw", "video_grid_thw", "second_per_grid_ts",
                          "attention_mask", "image_token_id", "video_token_id", "audio_token_id",
                          "video_start_token_id", "video_end_token_id"}) {
      if (c.gave(n)) {
        throw UsageError(c.term(n) + ": goes with " + c.term("input_ids") + ", not " +
                         c.term("layout"));
      }
    }
  }
  if (c.gave("second_per_grid_ts") && !c.gave("video_grid_thw")) {
    throw UsageError(c.term("second_per_grid_ts") + ": needs " + c.term("video_grid_thw"));
  }
}

/// HF's interface: input_ids and the tensors given with it (none: not given).
struct RopeIdsTensors {
  Tensor input_ids;
  std::optional<Tensor> attention_mask, image_grid_thw, video_grid_thw, second_per_grid_ts;
};

/// The ids of HF's interface, the media token ids the request's, else the config's.
inline RopeIdsBatch rope_ids_from_tensors(RopeIdsTensors t, const RopeIdsRequest& req,
                                          const RopeIdsConfig& cfg, const RopeIdsRules& rules) {
  RopeIdsTokens in;
  in.input_ids = std::move(t.input_ids);
  const auto at = [](const std::optional<Tensor>& x) { return x ? &*x : nullptr; };
  in.image_grid_thw = at(t.image_grid_thw);
  in.video_grid_thw = at(t.video_grid_thw);
  in.second_per_grid_ts = at(t.second_per_grid_ts);
  in.attention_mask = at(t.attention_mask);
  in.tokens = resolve_media_token_ids(req, cfg, rules.family, in.video_grid_thw != nullptr);
  return rope_ids_from_tokens(in, rules);
}

}  // namespace posenc
