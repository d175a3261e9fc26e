#pragma once
/// \file
/// The declared parameters of `posenc rope-ids` and posenc.rope_ids (declare.hpp): the
/// family, the media token ids and the timing numbers of RopeIdsRequest, each given or
/// else the config's. Their ranges, and which family reads which, are
/// resolve_rope_ids_rules' (they depend on the family and the config); the layout, the
/// token tensors and the config's path are bound by each front end.

#include "posenc/declare.hpp"
#include "posenc/encodings/rope_ids.hpp"

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

}  // namespace posenc
