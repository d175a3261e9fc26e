// The numbers rope-ids takes from a HF config.json (rope_ids.hpp, read_rope_ids_config).

#include <fmt/format.h>

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

}  // namespace posenc
