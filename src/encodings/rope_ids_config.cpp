// The numbers rope-ids takes from a HF config.json (rope_ids.hpp, read_rope_ids_config).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "encodings/hf_config_file.hpp"
#include "encodings/rope_ids_detail.hpp"
#include "io/json_doc.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"

namespace posenc {

using namespace rope_ids_detail;  // NOLINT: this module's own constants

namespace {

using json_doc::Json;

const Json* member(const Json* obj, const char* key) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

double number(const std::string& path, const Json* v, const char* key) {
  if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()) ||
      v->get<double>() >= kMaxPosition) {
    throw InputError(fmt::format("{}: {} must be a number above 0 and below 2^53", path, key));
  }
  return v->get<double>();
}

}  // namespace

RopeIdsConfig read_rope_ids_config(const std::string& path) {
  json_doc::JsonDoc doc;
  read_hf_config_file(path, doc, 64);
  const Json* root = &doc.root;
  if (!root->is_object()) throw InputError(fmt::format("{}: expected a JSON object", path));
  RopeIdsConfig c;
  if (const Json* mt = member(root, "model_type"); mt != nullptr && mt->is_string()) {
    c.model_type = mt->get<std::string>();
  }
  // Qwen2.5-Omni keeps the thinker's keys under thinker_config.
  const Json* thinker = member(root, "thinker_config");
  const Json* vision = member(root, "vision_config");
  if (vision == nullptr) vision = member(thinker, "vision_config");
  if (const Json* v = member(vision, "spatial_merge_size"); v != nullptr) {
    if (!v->is_number_integer() || v->get<std::int64_t>() < 1 ||
        v->get<std::int64_t>() > kMaxCount) {
      throw InputError(fmt::format(
          "{}: vision_config.spatial_merge_size must be an integer 1 to {}", path, kMaxCount));
    }
    c.spatial_merge_size = v->get<std::int64_t>();
  }
  if (const Json* v = member(vision, "tokens_per_second"); v != nullptr) {
    c.tokens_per_second = number(path, v, "vision_config.tokens_per_second");
  }
  const Json* pips = member(root, "position_id_per_seconds");
  if (pips == nullptr) pips = member(thinker, "position_id_per_seconds");
  if (pips != nullptr) c.position_id_per_seconds = number(path, pips, "position_id_per_seconds");
  const Json* spc = member(root, "seconds_per_chunk");
  if (spc == nullptr) spc = member(thinker, "seconds_per_chunk");
  if (spc != nullptr) c.seconds_per_chunk = number(path, spc, "seconds_per_chunk");
  // Token ids: "_id" (Qwen-VL, GLM-4V) or "_index" (Qwen2.5-Omni's thinker).
  auto token = [&](const char* base, std::int64_t& dst) {
    for (const Json* obj : {root, thinker}) {
      for (const char* suffix : {"_id", "_index"}) {
        const std::string key = std::string(base) + suffix;
        const Json* v = member(obj, key.c_str());
        if (v == nullptr || v->is_null()) continue;
        if (!v->is_number_integer() || v->get<std::int64_t>() < 0) {
          throw InputError(fmt::format("{}: {} must be a non-negative integer", path, key));
        }
        dst = v->get<std::int64_t>();
        return;
      }
    }
  };
  token("image_token", c.tokens.image);
  token("video_token", c.tokens.video);
  token("audio_token", c.tokens.audio);
  token("video_start_token", c.tokens.video_start);
  token("video_end_token", c.tokens.video_end);
  return c;
}

std::string rope_ids_name(const RopeIdsRequest& req, std::string_view member) {
  if (!req.option_names) return std::string(member);
  std::string name = "--" + std::string(member);
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

RopeIdsRules resolve_rope_ids_rules(const RopeIdsRequest& req, const RopeIdsConfig& cfg) {
  auto name = [&req](std::string_view member) { return rope_ids_name(req, member); };
  RopeIdsRules r;
  if (req.family) {
    r.family = parse_rope_ids_family(*req.family, name("family"));
  } else if (!cfg.model_type.empty()) {
    try {
      r.family = parse_rope_ids_family(cfg.model_type, "model_type");
    } catch (const UsageError&) {
      throw InputError(fmt::format("{}: model_type '{}' is not a family rope-ids knows; give {}",
                                   req.hf_config, cfg.model_type, name("family")));
    }
  } else {
    throw UsageError(fmt::format("{}: required (or give {} with a model_type)", name("family"),
                                 name("hf_config")));
  }
  if (req.spatial_merge_size) {
    const std::int64_t m = *req.spatial_merge_size;
    if (m < 1 || m > kMaxLayoutTokens) {
      throw UsageError(fmt::format("{}: must be 1 to {}, got {}", name("spatial_merge_size"),
                                   kMaxLayoutTokens, m));
    }
    r.spatial_merge_size = m;
  } else if (cfg.spatial_merge_size > 0) {
    r.spatial_merge_size = cfg.spatial_merge_size;
  }
  // A number of seconds or a rate: given (only to the family that reads it), else the
  // config's, else `fallback`.
  auto rate = [&](std::string_view member, const std::optional<double>& given, double config,
                  RopeIdsFamily reader, const char* reads, double fallback) {
    if (given) {
      if (r.family != reader) {
        throw UsageError(fmt::format("{}: only {} {}", name(member),
                                     rope_ids_family_name(reader), reads));
      }
      if (!(*given > 0) || *given >= kMaxPosition) {
        throw UsageError(fmt::format("{}: must be above 0 and below 2^53", name(member)));
      }
      return *given;
    }
    return config > 0 ? config : fallback;
  };
  r.tokens_per_second =
      rate("tokens_per_second", req.tokens_per_second, cfg.tokens_per_second,
           RopeIdsFamily::qwen2_5_vl, "scales video time by it",
           // Qwen2_5_VLVisionConfig's default, for a config without the key
           req.hf_config.empty() ? r.tokens_per_second : 4);
  r.position_id_per_seconds =
      rate("position_id_per_seconds", req.position_id_per_seconds, cfg.position_id_per_seconds,
           RopeIdsFamily::qwen2_5_omni, "reads it", r.position_id_per_seconds);
  r.seconds_per_chunk = rate("seconds_per_chunk", req.seconds_per_chunk, cfg.seconds_per_chunk,
                             RopeIdsFamily::qwen2_5_omni, "reads it", r.seconds_per_chunk);
  return r;
}

MediaTokenIds resolve_media_token_ids(const RopeIdsRequest& req, const RopeIdsConfig& cfg,
                                      RopeIdsFamily family, bool has_videos) {
  static constexpr const char* kNames[] = {"image_token_id", "video_token_id", "audio_token_id",
                                           "video_start_token_id", "video_end_token_id"};
  MediaTokenIds ids = cfg.tokens;
  std::int64_t* slots[] = {&ids.image, &ids.video, &ids.audio, &ids.video_start,
                           &ids.video_end};
  for (int i = 0; i < 5; ++i) {
    if (!req.token_ids[i]) continue;
    if (*req.token_ids[i] < 0) {
      throw UsageError(fmt::format("{}: must not be negative, got {}",
                                   rope_ids_name(req, kNames[i]), *req.token_ids[i]));
    }
    *slots[i] = *req.token_ids[i];
  }
  if (family == RopeIdsFamily::glm4v && has_videos && (ids.video_start < 0 || ids.video_end < 0)) {
    throw UsageError(fmt::format(
        "{}: glm4v videos need the video start and end token ids (or {})",
        rope_ids_name(req, "video_start_token_id"), rope_ids_name(req, "hf_config")));
  }
  return ids;
}

}  // namespace posenc
