// Fuzzes the layout SPEC of `posenc rope-ids` (parse_prompt_layout) and the ids computed
// from what it accepts. The first input byte picks the family, the second the spatial
// merge size (1 to 4) and a tokens_per_second; the rest is the SPEC text.
// Contract: parsing throws only UsageError; an accepted layout's canonical text parses
// back to the same text; rope_ids throws only UsageError, and for layouts of at most
// 2^16 tokens (larger ones are not computed here, to stay within the fuzzer's memory)
// gives [3, s] int64 ids in [0, 2^53), text-like rows where all three agree on a text
// segment's first token, and delta = max id + 1 - s.

#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"

namespace {

using posenc::fuzz::expect;

// The token count of a layout the harness computes itself (no overflow: 128 bits).
__extension__ typedef __int128 i128;
i128 tokens_of(const posenc::PromptLayout& l, std::int64_t m, bool frames) {
  i128 n = 0;
  for (const auto& s : l.segments) {
    if (s.kind == posenc::PromptSegment::Kind::text ||
        s.kind == posenc::PromptSegment::Kind::audio) {
      n += s.tokens;
      continue;
    }
    n += static_cast<i128>(s.t) * (s.h / m) * (s.w / m);
    if (s.audio_tokens > 0) n += s.audio_tokens + 4;
    if (frames && s.kind == posenc::PromptSegment::Kind::video && s.frame_gap > 0) {
      n += static_cast<i128>(s.t - 1) * s.frame_gap;
    }
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  posenc::RopeIdsRules rules;
  rules.family = static_cast<posenc::RopeIdsFamily>(data[0] % 5);
  rules.spatial_merge_size = 1 + (data[1] & 3);
  rules.tokens_per_second = (data[1] >> 2) % 3 == 0 ? 2.0 : (data[1] >> 2) % 3 == 1 ? 0.0 : 2.5;
  const std::string spec(reinterpret_cast<const char*>(data) + 2, size - 2);
  posenc::PromptLayout layout;
  try {
    layout = posenc::parse_prompt_layout(spec);
  } catch (const posenc::UsageError&) {
    return 0;
  }
  const std::string text = posenc::prompt_layout_text(layout);
  try {
    expect(posenc::prompt_layout_text(posenc::parse_prompt_layout(text)) == text,
           "canonical text does not read back: " + text);
  } catch (const posenc::UsageError& e) {
    posenc::fuzz::finding("canonical text refused: " + text + ": " + e.what());
  }
  const bool frames = rules.family == posenc::RopeIdsFamily::qwen3_vl ||
                      rules.family == posenc::RopeIdsFamily::glm4v;
  if (tokens_of(layout, rules.spatial_merge_size, frames) > (1 << 16)) return 0;
  posenc::RopeIds r;
  try {
    r = posenc::rope_ids(layout, rules);
  } catch (const posenc::UsageError&) {
    return 0;
  }
  const std::int64_t s = r.tokens;
  expect(r.ids.shape() == posenc::Shape{3, static_cast<std::size_t>(s)}, "ids shape");
  const std::int64_t* id = r.ids.data<std::int64_t>();
  std::int64_t mx = -1;
  for (std::int64_t i = 0; i < 3 * s; ++i) {
    expect(id[i] >= 0 && id[i] < (std::int64_t{1} << 53), "id out of range");
    mx = std::max(mx, id[i]);
  }
  expect(r.delta == mx + 1 - s, "delta is not max + 1 - s");
  std::int64_t at = 0;
  for (const auto& seg : layout.segments) {
    if (seg.kind == posenc::PromptSegment::Kind::image ||
        seg.kind == posenc::PromptSegment::Kind::video) {
      break;  // past the first vision block, the harness does not follow the layout
    }
    expect(id[at] == id[s + at] && id[at] == id[2 * s + at], "text rows differ");
    at += seg.tokens;
  }
  return 0;
}
