// M-RoPE position ids of a prompt layout, as transformers v5's get_mrope_index lays them
// out (modeling_rope_utils: _mrope_index_interleaved_runs for the Qwen-VL family,
// _mrope_index_audio_chunked for Qwen2.5-Omni), and as Glm4vModel.get_rope_index does.
// See rope_ids.hpp for the rules.

#include "posenc/encodings/rope_ids.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "encodings/rope_ids_detail.hpp"
#include "posenc/error.hpp"

namespace posenc {

using namespace rope_ids_detail;  // NOLINT: this module's own constants

namespace {

using Kind = PromptSegment::Kind;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::text:
      return "text";
    case Kind::image:
      return "image";
    case Kind::video:
      return "video";
    case Kind::audio:
      return "audio";
  }
  return "?";
}

// A decimal count in [lo, kMaxCount]: digits only.
std::int64_t parse_count(std::string_view s, std::int64_t lo, std::string_view what,
                         std::string_view seg, std::string_view field) {
  std::int64_t v = 0;
  const bool digits =
      !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (!digits || r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    if (digits) {
      throw UsageError(
          fmt::format("{}: segment '{}': {} {} is larger than {}", what, seg, field, s, kMaxCount));
    }
    throw UsageError(
        fmt::format("{}: segment '{}': {} '{}' is not a decimal integer", what, seg, field, s));
  }
  if (v < lo || v > kMaxCount) {
    throw UsageError(fmt::format("{}: segment '{}': {} must be {} to {}, got {}", what, seg, field,
                                 lo, kMaxCount, v));
  }
  return v;
}

double parse_seconds(std::string_view s, std::string_view what, std::string_view seg) {
  // digits[.digits] or .digits: no sign, exponent, inf or nan.
  const auto dot = s.find('.');
  auto all_digits = [](std::string_view x) {
    return std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const std::string_view ip = s.substr(0, dot);
  const std::string_view fp =
      dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  const bool ok = all_digits(ip) && all_digits(fp) && (ip.size() + fp.size() > 0) &&
                  (dot == std::string_view::npos || !fp.empty());
  double v = 0;
  if (ok) {
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) v = -1;
  }
  if (!ok || !(v >= kMinSeconds) || v > kMaxSeconds) {
    throw UsageError(fmt::format(
        "{}: segment '{}': seconds per grid '{}' must be a decimal number from 0.000001 to {}",
        what, seg, s, kMaxSeconds));
  }
  return v;
}

PromptSegment parse_segment(std::string_view seg, std::string_view what) {
  const auto colon = seg.find(':');
  if (colon == std::string_view::npos) {
    throw UsageError(fmt::format(
        "{}: segment '{}': expected KIND:VALUE (text:N, image:TxHxW, video:TxHxW[@S][/GAP], "
        "audio:N)",
        what, seg));
  }
  const std::string_view kind = seg.substr(0, colon);
  std::string_view value = seg.substr(colon + 1);
  PromptSegment s;
  if (kind == "text" || kind == "audio") {
    s.kind = kind == "text" ? Kind::text : Kind::audio;
    s.tokens = parse_count(value, 1, what, seg, "the token count");
    return s;
  }
  if (kind != "image" && kind != "video") {
    throw UsageError(fmt::format("{}: segment '{}': unknown kind '{}' (text, image, video, audio)",
                                 what, seg, kind));
  }
  s.kind = kind == "image" ? Kind::image : Kind::video;
  if (s.kind == Kind::video) {
    const auto plus = value.find("+audio:");
    if (plus != std::string_view::npos) {
      s.audio_tokens = parse_count(value.substr(plus + 7), 1, what, seg, "the audio token count");
      value = value.substr(0, plus);
    }
    const auto slash = value.find('/');
    if (slash != std::string_view::npos) {
      s.frame_gap = parse_count(value.substr(slash + 1), 0, what, seg, "the frame gap");
      value = value.substr(0, slash);
    }
    const auto at = value.find('@');
    if (at != std::string_view::npos) {
      s.seconds_per_grid = parse_seconds(value.substr(at + 1), what, seg);
      value = value.substr(0, at);
    }
  }
  std::int64_t* dims[3] = {&s.t, &s.h, &s.w};
  const char* names[3] = {"T", "H", "W"};
  for (int i = 0; i < 3; ++i) {
    const auto x = value.find('x');
    if ((i < 2) == (x == std::string_view::npos)) {
      throw UsageError(fmt::format("{}: segment '{}': expected the grid as TxHxW{}", what, seg,
                                   s.kind == Kind::video ? " (then @SECONDS, /GAP)" : ""));
    }
    *dims[i] = parse_count(value.substr(0, x), 1, what, seg, fmt::format("grid {}", names[i]));
    value = i < 2 ? value.substr(x + 1) : std::string_view();
  }
  return s;
}

// How a block's time ids grow with k: k * step in int64, or trunc(f32(k) * f32 step) as
// torch computes an int64 arange times a Python float.
struct TimeScale {
  bool f32 = false;
  std::int64_t step = 1;
  float fstep = 1;
  double at(std::int64_t k) const {  // exact for the ranges rope_ids admits
    if (!f32) return static_cast<double>(k) * static_cast<double>(step);
    const float prod = static_cast<float>(k) * fstep;
    return std::trunc(static_cast<double>(prod));
  }
  std::int64_t id(std::int64_t k) const {
    return f32 ? static_cast<std::int64_t>(std::trunc(static_cast<float>(k) * fstep)) : k * step;
  }
};

// A Python number as HF multiplies it: whole numbers stay int (int64 arithmetic),
// others are a float the tensor product rounds to float32.
TimeScale scale_of(double step) {
  TimeScale s;
  if (step == std::trunc(step) && step <= kMaxPosition) {
    s.step = static_cast<std::int64_t>(step);
  } else {
    s.f32 = true;
    s.fstep = static_cast<float>(step);
  }
  return s;
}

// One block of ids: text/audio (a run) or a vision grid after the merge.
struct Block {
  bool vision = false;
  std::int64_t n = 0;                // run length
  std::int64_t t = 0, h = 0, w = 0;  // merged grid
  TimeScale time;
  std::int64_t audio = 0;  // a video's own audio tokens (Omni's use_audio_in_video)
};

// The shortest fixed-point text (no exponent: the SPEC has none) that reads back as `v`.
std::string seconds_text(double v) {
  std::string t;
  for (int digits = 0; digits <= 40; ++digits) {
    t = fmt::format("{:.{}f}", v, digits);
    double back = 0;
    std::from_chars(t.data(), t.data() + t.size(), back);
    if (back == v) break;
  }
  return t;
}

std::string seg_text(const PromptSegment& s) {
  PromptLayout one;
  one.segments.push_back(s);
  return prompt_layout_text(one);
}

// What the family allows of media segment i and its neighbours (see rope_ids.hpp).
// `av`: the layout's videos carry their soundtrack (Omni's use_audio_in_video).
void check_media(const std::vector<PromptSegment>& segs, std::size_t i, const RopeIdsRules& rules,
                 bool av, const std::string& where) {
  const FamilyRules fr = family_rules(rules.family);
  const std::string_view fam = rope_ids_family_name(rules.family);
  const PromptSegment& s = segs[i];
  const bool with_audio = s.kind == Kind::video && s.audio_tokens > 0;
  if (s.kind == Kind::audio && !fr.audio) {
    throw UsageError(fmt::format("{}: {} has no audio input (only qwen2.5-omni)", where, fam));
  }
  if (with_audio && !fr.audio) {
    throw UsageError(
        fmt::format("{}: +audio (a video with its soundtrack) is for qwen2.5-omni only", where));
  }
  if (s.kind == Kind::video && with_audio != av) {
    throw UsageError(fmt::format(
        "{}: qwen2.5-omni's use_audio_in_video applies to every video: either all videos have "
        "+audio or none",
        where));
  }
  if (fr.audio && !with_audio) {
    // The text runs around the segment (consecutive text segments are one run). Its start
    // token ends the run before and its end token begins the run after; a run between two
    // media segments holds an end and a start token (a video with audio holds its own).
    std::int64_t before = 0, after = 0;
    std::size_t b = i;
    while (b > 0 && segs[b - 1].kind == Kind::text) before += segs[--b].tokens;
    for (std::size_t a = i + 1; a < segs.size() && segs[a].kind == Kind::text; ++a) {
      after += segs[a].tokens;
    }
    const std::int64_t need_before = b > 0 && segs[b - 1].audio_tokens == 0 ? 2 : 1;
    if (before < need_before || after < 1) {
      throw UsageError(fmt::format(
          "{}: {} opens and closes each {} with a start and an end token, which the text "
          "before and after it holds: put at least 1 text token on each side (2 between two "
          "media segments)",
          where, fam, kind_name(s.kind)));
    }
  }
  const bool text_around = i > 0 && segs[i - 1].kind == Kind::text && i + 1 < segs.size() &&
                           segs[i + 1].kind == Kind::text;
  if (fr.wrapped_video && s.kind == Kind::video && !text_around) {
    throw UsageError(fmt::format(
        "{}: glm4v marks a video by its start and end tokens, which the text before and after "
        "it holds: put at least 1 text token on each side",
        where));
  }
  if (!fr.audio && i > 0 && segs[i - 1].kind == s.kind) {
    throw UsageError(fmt::format(
        "{}: follows another {} with no text between; HF groups the tokens of both into one "
        "run with one grid (a prompt has vision start/end tokens between them: text:2)",
        where, kind_name(s.kind)));
  }
  if (s.kind == Kind::audio) return;
  if (s.h % rules.spatial_merge_size != 0 || s.w % rules.spatial_merge_size != 0) {
    throw UsageError(fmt::format("{}: grid H and W must be multiples of the spatial merge size {}",
                                 where, rules.spatial_merge_size));
  }
  if (s.seconds_per_grid > 0 && (s.kind != Kind::video || !fr.seconds)) {
    throw UsageError(fmt::format("{}: {} does not use seconds per grid (@SECONDS)", where, fam));
  }
  if (s.frame_gap >= 0 && !fr.frame_gap) {
    throw UsageError(
        fmt::format("{}: /GAP (text between frames) is for qwen3-vl and glm4v only", where));
  }
  if (fr.split_frames && s.kind == Kind::video && s.t > 1 && s.frame_gap < 1) {
    throw UsageError(fmt::format(
        "{}: {} lays a video out frame by frame with timestamp text between frames; give the "
        "text tokens between frames as video:TxHxW/GAP (GAP at least 1)",
        where, fam));
  }
}

// How the time ids of a vision segment grow (see rope_ids.hpp, time(k)).
TimeScale vision_time(const PromptSegment& s, const RopeIdsRules& rules, const std::string& where) {
  if (s.kind == Kind::image) {
    // Images step 1 per temporal grid; Omni scales them by position_id_per_seconds.
    return rules.family == RopeIdsFamily::qwen2_5_omni ? scale_of(rules.position_id_per_seconds)
                                                       : TimeScale{};
  }
  TimeScale time;
  if (rules.family == RopeIdsFamily::qwen2_5_vl) {
    if (!(rules.tokens_per_second > 0)) {
      throw UsageError(fmt::format(
          "{}: qwen2.5-vl videos need --tokens-per-second or --hf-config (vision_config."
          "tokens_per_second: HF's default is 4, the released checkpoints say 2)",
          where));
    }
    // tokens_per_second * int(second_per_grid_ts[i]), the tensor entry a float32.
    const double secs = s.seconds_per_grid > 0 ? s.seconds_per_grid : 1.0;
    const double whole = std::trunc(static_cast<double>(static_cast<float>(secs)));
    if (rules.tokens_per_second == std::trunc(rules.tokens_per_second)) {
      return scale_of(rules.tokens_per_second * whole);
    }
    time.f32 = true;  // a float tokens_per_second makes the interval a Python float
    time.fstep = static_cast<float>(rules.tokens_per_second * whole);
  } else if (rules.family == RopeIdsFamily::qwen2_5_omni) {
    if (!(s.seconds_per_grid > 0)) {
      throw UsageError(fmt::format(
          "{}: qwen2.5-omni videos need the seconds per grid: video:TxHxW@SECONDS", where));
    }
    // float(second_per_grid_ts[i]) * position_id_per_seconds: always a Python float.
    const double secs = static_cast<double>(static_cast<float>(s.seconds_per_grid));
    time.f32 = true;
    time.fstep = static_cast<float>(secs * rules.position_id_per_seconds);
  }
  return time;
}

// Tokens of a block (INT64_MAX when more than kMaxLayoutTokens).
std::int64_t block_tokens(const Block& b);

// The family's checks of the layout, and the blocks it expands to (at most
// kMaxLayoutTokens tokens, checked before a video is expanded frame by frame).
std::vector<Block> layout_blocks(const PromptLayout& layout, const RopeIdsRules& rules) {
  const FamilyRules fr = family_rules(rules.family);
  const std::int64_t m = rules.spatial_merge_size;
  if (m < 1 || m > kMaxCount) {
    throw UsageError(fmt::format("spatial_merge_size: must be 1 to {}, got {}", kMaxCount, m));
  }
  const auto& segs = layout.segments;
  if (segs.empty()) throw UsageError(layout.what + ": the layout has no segment");
  const bool av = std::any_of(segs.begin(), segs.end(), [](const PromptSegment& s) {
    return s.kind == Kind::video && s.audio_tokens > 0;
  });
  std::vector<Block> blocks;
  std::int64_t total = 0;
  auto add = [&](const Block& b, std::int64_t copies, std::int64_t gap) {
    // copies blocks b with runs of gap text tokens between them
    const i128 n =
        static_cast<i128>(block_tokens(b)) * copies + static_cast<i128>(gap) * (copies - 1);
    if (n > kMaxLayoutTokens - total) {
      throw UsageError(fmt::format("{}: more than {} tokens", layout.what, kMaxLayoutTokens));
    }
    total += static_cast<std::int64_t>(n);
    for (std::int64_t k = 0; k < copies; ++k) {
      if (k > 0) blocks.push_back({false, gap, 0, 0, 0, {}, 0});
      blocks.push_back(b);
    }
  };
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const PromptSegment& s = segs[i];
    if (s.kind == Kind::text) {
      add({false, s.tokens, 0, 0, 0, {}, 0}, 1, 0);
      continue;
    }
    const std::string where = fmt::format("{}: segment {} '{}'", layout.what, i + 1, seg_text(s));
    check_media(segs, i, rules, av, where);
    if (s.kind == Kind::audio) {
      add({false, s.tokens, 0, 0, 0, {}, 0}, 1, 0);
      continue;
    }
    Block b{true, 0, s.t, s.h / m, s.w / m, vision_time(s, rules, where), s.audio_tokens};
    if (fr.split_frames && s.kind == Kind::video) {
      b.t = 1;  // T frames of grid (1, H, W), GAP text tokens between them
      add(b, s.t, std::max<std::int64_t>(s.frame_gap, 0));
    } else {
      add(b, 1, 0);
    }
  }
  return blocks;
}

std::int64_t block_tokens(const Block& b) {
  if (!b.vision) return b.n;
  // Each factor is at most 2^31-1: t*h fits, the product is checked.
  std::int64_t hw = 0, n = 0;
  if (__builtin_mul_overflow(b.h, b.w, &hw) || __builtin_mul_overflow(hw, b.t, &n) ||
      n > kMaxLayoutTokens) {
    return std::numeric_limits<std::int64_t>::max();
  }
  return b.audio > 0 ? n + b.audio + 4 : n;  // with its two start and two end tokens
}

// HF's _mrope_temporal_chunks: [start, end) index ranges of a monotonic time row, a new
// chunk where the time from `origin` first reaches the next multiple of `per_chunk`.
std::vector<std::pair<std::int64_t, std::int64_t>> temporal_chunks(
    const std::vector<std::int64_t>& time, std::int64_t per_chunk, std::int64_t origin) {
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  std::int64_t chunk_start = 0, chunk_index = 1;
  const auto n = static_cast<std::int64_t>(time.size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (static_cast<i128>(time[i] - origin) >= static_cast<i128>(chunk_index) * per_chunk) {
      chunks.emplace_back(chunk_start, i);
      chunk_start = i;
      ++chunk_index;
    }
  }
  chunks.emplace_back(chunk_start, n);
  return chunks;
}

// Qwen2.5-Omni's use_audio_in_video span at `start` (the previous max id + 1): two start
// tokens there, the video's and the audio's ids from start + 1 cut into time chunks and
// emitted video chunk, audio chunk, ..., two end tokens at the last chunk's max id + 1.
// Writes the block's tokens from `at` and returns the largest id of its last block (the
// end tokens'), from which the next block starts.
std::int64_t interleave_audio_video(const Block& b, std::int64_t start, std::int64_t per_chunk,
                                    std::int64_t* const row[3], std::int64_t& at) {
  auto put = [&](std::int64_t t, std::int64_t h, std::int64_t w) {
    row[0][at] = t;
    row[1][at] = h;
    row[2][at] = w;
    ++at;
  };
  put(start, start, start);
  put(start, start, start);
  const std::int64_t q = start + 1;
  const std::int64_t n = b.t * b.h * b.w;
  std::vector<std::int64_t> vt(n), vh(n), vw(n), audio(b.audio);
  std::int64_t x = 0;
  for (std::int64_t k = 0; k < b.t; ++k) {
    for (std::int64_t i = 0; i < b.h; ++i) {
      for (std::int64_t j = 0; j < b.w; ++j, ++x) {
        vt[x] = q + b.time.id(k);
        vh[x] = q + i;
        vw[x] = q + j;
      }
    }
  }
  for (std::int64_t a = 0; a < b.audio; ++a) audio[a] = q + a;
  const auto video_chunks = temporal_chunks(vt, per_chunk, q);
  const auto audio_chunks = temporal_chunks(audio, per_chunk, q);
  std::int64_t last_max = -1;
  for (std::size_t c = 0; c < std::max(video_chunks.size(), audio_chunks.size()); ++c) {
    if (c < video_chunks.size()) {
      last_max = -1;
      for (std::int64_t y = video_chunks[c].first; y < video_chunks[c].second; ++y) {
        put(vt[y], vh[y], vw[y]);
        last_max = std::max({last_max, vt[y], vh[y], vw[y]});
      }
    }
    if (c < audio_chunks.size()) {
      last_max = -1;
      for (std::int64_t y = audio_chunks[c].first; y < audio_chunks[c].second; ++y) {
        put(audio[y], audio[y], audio[y]);
        last_max = std::max(last_max, audio[y]);
      }
    }
  }
  const std::int64_t eos = last_max + 1;
  put(eos, eos, eos);
  put(eos, eos, eos);
  return eos;
}

}  // namespace

namespace rope_ids_detail {

FamilyRules family_rules(RopeIdsFamily f) {
  FamilyRules r;
  switch (f) {
    case RopeIdsFamily::qwen2_vl:
      break;
    case RopeIdsFamily::qwen2_5_vl:
      r.seconds = true;
      break;
    case RopeIdsFamily::qwen3_vl:
      r.split_frames = true;
      r.frame_gap = true;
      break;
    case RopeIdsFamily::qwen2_5_omni:
      r.advance_max_hw = false;
      r.audio = true;
      r.seconds = true;
      break;
    case RopeIdsFamily::glm4v:
      r.advance_max_hw = false;
      r.split_frames = true;
      r.frame_gap = true;
      r.wrapped_video = true;
      break;
  }
  return r;
}

}  // namespace rope_ids_detail

std::string_view rope_ids_family_name(RopeIdsFamily f) noexcept {
  switch (f) {
    case RopeIdsFamily::qwen2_vl:
      return "qwen2-vl";
    case RopeIdsFamily::qwen2_5_vl:
      return "qwen2.5-vl";
    case RopeIdsFamily::qwen3_vl:
      return "qwen3-vl";
    case RopeIdsFamily::qwen2_5_omni:
      return "qwen2.5-omni";
    case RopeIdsFamily::glm4v:
      return "glm4v";
  }
  return "?";
}

RopeIdsFamily parse_rope_ids_family(std::string_view name, std::string_view what) {
  if (name == "qwen2-vl" || name == "qwen2_vl") return RopeIdsFamily::qwen2_vl;
  if (name == "qwen2.5-vl" || name == "qwen2_5_vl") return RopeIdsFamily::qwen2_5_vl;
  if (name == "qwen3-vl" || name == "qwen3_vl" || name == "qwen3_vl_moe") {
    return RopeIdsFamily::qwen3_vl;
  }
  if (name == "qwen2.5-omni" || name == "qwen2_5_omni" || name == "qwen2_5_omni_thinker") {
    return RopeIdsFamily::qwen2_5_omni;
  }
  if (name == "glm4v" || name == "glm4v_moe") return RopeIdsFamily::glm4v;
  throw UsageError(
      fmt::format("{}: unknown family '{}' (qwen2-vl, qwen2.5-vl, qwen3-vl, "
                  "qwen2.5-omni, glm4v)",
                  what, name));
}

PromptLayout parse_prompt_layout(std::string_view spec, std::string_view what) {
  PromptLayout out;
  out.what = std::string(what);
  if (spec.empty()) throw UsageError(fmt::format("{}: the layout is empty", what));
  std::size_t pos = 0;
  while (true) {
    const auto comma = spec.find(',', pos);
    const std::string_view seg =
        spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
    if (seg.empty()) throw UsageError(fmt::format("{}: empty segment in '{}'", what, spec));
    out.segments.push_back(parse_segment(seg, what));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string prompt_layout_text(const PromptLayout& layout) {
  std::string out;
  for (const PromptSegment& s : layout.segments) {
    if (!out.empty()) out += ',';
    out += kind_name(s.kind);
    out += ':';
    if (s.kind == Kind::text || s.kind == Kind::audio) {
      out += std::to_string(s.tokens);
      continue;
    }
    out += fmt::format("{}x{}x{}", s.t, s.h, s.w);
    if (s.seconds_per_grid > 0) out += "@" + seconds_text(s.seconds_per_grid);
    if (s.frame_gap >= 0) out += fmt::format("/{}", s.frame_gap);
    if (s.audio_tokens > 0) out += fmt::format("+audio:{}", s.audio_tokens);
  }
  return out;
}

RopeIds rope_ids(const PromptLayout& layout, const RopeIdsRules& rules) {
  if (!(rules.position_id_per_seconds > 0) || rules.position_id_per_seconds > kMaxPosition) {
    throw UsageError("position_id_per_seconds: must be above 0 and below 2^53");
  }
  if (!(rules.tokens_per_second >= 0) || rules.tokens_per_second > kMaxPosition) {
    throw UsageError("tokens_per_second: must be above 0 and below 2^53");
  }
  const std::vector<Block> blocks = layout_blocks(layout, rules);
  std::int64_t total = 0;
  for (const Block& b : blocks) {
    const std::int64_t n = block_tokens(b);
    if (n > kMaxLayoutTokens || total > kMaxLayoutTokens - n) {
      throw UsageError(fmt::format("{}: more than {} tokens", layout.what, kMaxLayoutTokens));
    }
    total += n;
  }
  const bool omni = !family_rules(rules.family).advance_max_hw;
  RopeIds r;
  r.tokens = total;
  r.ids = Tensor(DType::i64, {3, static_cast<std::size_t>(total)});
  std::int64_t* row[3];
  for (int a = 0; a < 3; ++a) row[a] = r.ids.data<std::int64_t>() + a * total;
  std::int64_t at = 0;       // next token
  std::int64_t pos = 0;      // the running position (Qwen-VL v5: current_pos)
  std::int64_t max_id = -1;  // the largest id of the last block (Omni: the next starts past it)
  std::int64_t top = -1;     // the largest id so far
  // Omni's int(position_id_per_seconds * seconds_per_chunk), a Python float made int.
  const double chunk = std::trunc(rules.position_id_per_seconds * rules.seconds_per_chunk);
  if (omni && !(chunk >= 1 && chunk < kMaxPosition)) {
    throw UsageError(
        "seconds_per_chunk: position_id_per_seconds * seconds_per_chunk must be 1 to 2^53");
  }
  const std::int64_t per_chunk = omni ? static_cast<std::int64_t>(chunk) : 1;
  for (const Block& b : blocks) {
    top = std::max(top, max_id);
    const std::int64_t start = omni ? max_id + 1 : pos;
    if (!b.vision) {
      if (static_cast<double>(start) + static_cast<double>(b.n) > kMaxPosition) {
        throw UsageError(layout.what + ": position ids reach 2^53");
      }
      for (std::int64_t k = 0; k < b.n; ++k) {
        row[0][at] = row[1][at] = row[2][at] = start + k;
        ++at;
      }
      max_id = std::max(max_id, start + b.n - 1);
      pos = start + b.n;
      continue;
    }
    // Time is monotonic in k: the block's largest id is at its last grid, row or column.
    // A video with audio has its audio ids and, after them, its end tokens too.
    const double last = std::max({b.time.at(b.t - 1), static_cast<double>(b.h - 1),
                                  static_cast<double>(b.w - 1), static_cast<double>(b.audio)}) +
                        (b.audio > 0 ? 2 : 0);
    if (static_cast<double>(start) + last >= kMaxPosition) {
      throw UsageError(layout.what + ": position ids reach 2^53");
    }
    if (b.audio > 0) {
      const std::int64_t from = at;
      max_id = interleave_audio_video(b, start, per_chunk, row, at);
      for (std::int64_t y = from; y < at; ++y)
        top = std::max({top, row[0][y], row[1][y], row[2][y]});
      continue;
    }
    for (std::int64_t k = 0; k < b.t; ++k) {
      const std::int64_t tk = start + b.time.id(k);
      for (std::int64_t i = 0; i < b.h; ++i) {
        for (std::int64_t j = 0; j < b.w; ++j) {
          row[0][at] = tk;
          row[1][at] = start + i;
          row[2][at] = start + j;
          ++at;
        }
      }
    }
    max_id = std::max(max_id, start + static_cast<std::int64_t>(last));
    pos = start + std::max(b.h, b.w);
  }
  top = std::max(top, max_id);
  r.delta = top + 1 - total;
  return r;
}

}  // namespace posenc
