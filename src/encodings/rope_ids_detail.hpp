#pragma once
// What the parts of the rope_ids module share (rope_ids.cpp: layouts and ids;
// rope_ids_tokens.cpp: HF's input_ids; rope_ids_config.cpp: config.json): limits and the
// family's rules as data. Not a public header.

#include <cstdint>

#include "posenc/encodings/rope_ids.hpp"

namespace posenc::rope_ids_detail {

constexpr std::int64_t kMaxCount = (std::int64_t{1} << 31) - 1;  // counts and grid extents
__extension__ typedef __int128 i128;  // token counts of a grid, which cannot overflow it
constexpr double kMaxPosition = 9007199254740992.0;  // 2^53: ids stay exact in a double
constexpr double kMinSeconds = 1e-6;                 // seconds per grid
constexpr double kMaxSeconds = 1e6;

// The family as data: what differs between the layouts.
struct FamilyRules {
  bool advance_max_hw = true;  // v5 Qwen-VL: p += max(H, W)/m after a vision block; else max+1
  bool split_frames = false;   // qwen3-vl
  bool audio = false;          // qwen2.5-omni
  bool seconds = false;        // the family reads seconds per grid
  bool frame_gap = false;      // the family reads /GAP
  bool wrapped_video = false;  // glm4v: a video's start/end tokens are text around it
};

/// The rules of family `f`.
FamilyRules family_rules(RopeIdsFamily f);

}  // namespace posenc::rope_ids_detail
