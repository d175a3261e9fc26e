// HF's own interface to the M-RoPE ids: input_ids (with attention_mask) and the
// processor's grids, read as the prompt layouts they describe (rope_ids.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "encodings/rope_ids_detail.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"

namespace posenc {

using namespace rope_ids_detail;  // NOLINT: this module's own constants

namespace {

using Kind = PromptSegment::Kind;

// The grids of one medium, [n, 3] positive integers, taken in order.
struct GridQueue {
  const char* what;  // "image_grid_thw"
  std::vector<std::array<std::int64_t, 3>> rows;
  std::size_t next = 0;
  std::int64_t frames_left = 0;  // split frames: frames of rows[next - 1] not yet used

  GridQueue(const char* name, const Tensor* t) : what(name) {
    if (t == nullptr) return;
    if (!is_integer(t->dtype()) || t->ndim() != 2 || t->shape()[1] != 3) {
      throw InputError(fmt::format("{}: expected an [n, 3] integer tensor, got {} {}", what,
                                   dtype_name(t->dtype()), shape_str(t->shape())));
    }
    for (std::size_t i = 0; i < t->shape()[0]; ++i) {
      std::array<std::int64_t, 3> r{};
      for (std::size_t a = 0; a < 3; ++a) {
        const double v = t->get(i * 3 + a);
        if (!(v >= 1 && v <= static_cast<double>(kMaxCount))) {
          throw InputError(fmt::format("{}: row {}: grid extents must be 1 to {}, got {}", what, i,
                                       kMaxCount, v));
        }
        r[a] = static_cast<std::int64_t>(v);
      }
      rows.push_back(r);
    }
  }
  const std::array<std::int64_t, 3>& take(const std::string& where) {
    if (next >= rows.size()) {
      throw InputError(
          fmt::format("{}: no {} row left for it ({} given)", where, what, rows.size()));
    }
    return rows[next++];
  }
};

// The token indices of row r that count: those whose attention_mask entry is 1 (all
// without a mask). The mask is checked by check_mask.
std::vector<std::size_t> kept_tokens(const RopeIdsTokens& in, std::size_t r, std::size_t len) {
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < len; ++i) {
    if (in.attention_mask == nullptr || in.attention_mask->get(r * len + i) != 0) kept.push_back(i);
  }
  return kept;
}

void check_mask(const RopeIdsTokens& in) {
  const Tensor* m = in.attention_mask;
  if (m == nullptr) return;
  if (m->shape() != in.input_ids.shape() || !(is_integer(m->dtype()) || m->dtype() == DType::b1)) {
    throw InputError(fmt::format(
        "attention_mask: expected {} integers or bools (the shape of "
        "input_ids), got {} {}",
        shape_str(in.input_ids.shape()), dtype_name(m->dtype()), shape_str(m->shape())));
  }
  for (std::size_t i = 0; i < m->numel(); ++i) {
    const double v = m->get(i);
    if (v != 0 && v != 1) {
      throw InputError(fmt::format("attention_mask: entry {} is {}; expected 0 or 1", i, v));
    }
  }
}

}  // namespace

namespace {

// What the prompt's tokens need besides the ids: the grids in order, the seconds.
struct Media {
  GridQueue images{"image_grid_thw", nullptr};
  GridQueue videos{"video_grid_thw", nullptr};
  std::vector<double> seconds;  // per video, when given
};

Media read_media(const RopeIdsTokens& in) {
  Media md{GridQueue("image_grid_thw", in.image_grid_thw),
           GridQueue("video_grid_thw", in.video_grid_thw),
           {}};
  if (in.second_per_grid_ts == nullptr) return md;
  const Tensor& t = *in.second_per_grid_ts;
  if (t.ndim() != 1 || t.shape()[0] != md.videos.rows.size()) {
    throw InputError(fmt::format("second_per_grid_ts: expected [{}] (one per video), got {}",
                                 md.videos.rows.size(), shape_str(t.shape())));
  }
  for (std::size_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (!(v >= kMinSeconds && v <= kMaxSeconds)) {
      throw InputError(
          fmt::format("second_per_grid_ts: entry {} must be 1e-6 to 1e6, got {}", i, v));
    }
    md.seconds.push_back(v);
  }
  return md;
}

// The medium of each of the tokens `idx` of row r: 0 text, 1 image, 2 video, 3 audio.
std::vector<std::uint8_t> token_kinds(const Tensor& ids, std::size_t r,
                                      const std::vector<std::size_t>& idx, const MediaTokenIds& tok,
                                      const FamilyRules& fr) {
  const std::size_t len = ids.shape().back();
  const std::int64_t* row = ids.data<std::int64_t>() + r * len;
  std::vector<std::uint8_t> kind(idx.size());
  bool in_video = false;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::int64_t id = row[idx[i]];
    std::uint8_t k = 0;
    if (fr.wrapped_video) {  // GLM-4V: image tokens between video start and end are frames
      if (id == tok.video_start) in_video = true;
      if (id == tok.video_end) in_video = false;
      if (id == tok.image) k = in_video ? 2 : 1;
    } else if (id == tok.image) {
      k = 1;
    } else if (id == tok.video) {
      k = 2;
    } else if (id == tok.audio && fr.audio) {
      k = 3;
    }
    kind[i] = k;
  }
  return kind;
}

// The segment of a run of n image or video tokens: the next grid (qwen3-vl, glm4v: the
// next frame of the current video), which must give n tokens.
PromptSegment vision_segment(bool video, std::int64_t n, Media& md, const FamilyRules& fr,
                             std::int64_t m, const std::string& where) {
  PromptSegment s;
  s.kind = video ? Kind::video : Kind::image;
  std::array<std::int64_t, 3> g{};
  GridQueue& q = video ? md.videos : md.images;
  if (video && fr.split_frames) {
    if (q.frames_left == 0) {
      g = q.take(where);
      q.frames_left = g[0];
    } else {
      g = q.rows[q.next - 1];
    }
    --q.frames_left;
    g[0] = 1;
  } else {
    g = q.take(where);
    if (video && fr.seconds && q.next <= md.seconds.size()) {
      s.seconds_per_grid = md.seconds[q.next - 1];
    }
  }
  s.t = g[0];
  s.h = g[1];
  s.w = g[2];
  if (g[1] % m != 0 || g[2] % m != 0) {
    throw InputError(
        fmt::format("{}: grid ({}, {}, {}): H and W must be multiples of the spatial merge size {}",
                    where, g[0], g[1], g[2], m));
  }
  const i128 want = static_cast<i128>(g[0]) * (g[1] / m) * (g[2] / m);
  if (want != n) {
    throw InputError(fmt::format("{}: {} {} tokens, but its grid ({}, {}, {}) gives {}", where, n,
                                 video ? "video" : "image", g[0], g[1], g[2],
                                 static_cast<long long>(std::min<i128>(want, kMaxCount))));
  }
  return s;
}

// Row r's layout: each maximal run of one medium's tokens a segment.
PromptLayout row_layout(const RopeIdsTokens& in, const Tensor& ids, std::size_t r, Media& md,
                        const RopeIdsRules& rules) {
  const FamilyRules fr = family_rules(rules.family);
  const std::vector<std::size_t> idx = kept_tokens(in, r, ids.shape().back());
  if (idx.empty()) throw InputError(fmt::format("attention_mask: row {} has no token", r));
  const std::vector<std::uint8_t> kind = token_kinds(ids, r, idx, in.tokens, fr);
  PromptLayout out;
  out.what = fmt::format("input_ids row {}", r);
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j < idx.size() && kind[j] == kind[i]) ++j;
    const auto n = static_cast<std::int64_t>(j - i);
    if (kind[i] == 1 || kind[i] == 2) {
      const std::string where =
          fmt::format("input_ids row {} tokens {} to {}", r, idx[i], idx[j - 1]);
      out.segments.push_back(
          vision_segment(kind[i] == 2, n, md, fr, rules.spatial_merge_size, where));
    } else {
      PromptSegment s;
      s.kind = kind[i] == 0 ? Kind::text : Kind::audio;
      s.tokens = n;
      out.segments.push_back(s);
    }
    i = j;
  }
  return out;
}

}  // namespace

std::vector<PromptLayout> layouts_from_tokens(const RopeIdsTokens& in, const RopeIdsRules& rules) {
  if (!is_integer(in.input_ids.dtype()) || in.input_ids.ndim() < 1 || in.input_ids.ndim() > 2) {
    throw InputError(fmt::format("input_ids: expected [s] or [b, s] integers, got {} {}",
                                 dtype_name(in.input_ids.dtype()),
                                 shape_str(in.input_ids.shape())));
  }
  const Tensor ids = in.input_ids.astype(DType::i64);  // exact, whatever the integer type
  const std::size_t rows = ids.ndim() == 2 ? ids.shape()[0] : 1;
  const std::size_t len = ids.shape().back();
  if (len == 0 || rows == 0) throw InputError("input_ids: empty");
  if (len > static_cast<std::size_t>(kMaxLayoutTokens)) {
    throw InputError(fmt::format("input_ids: more than {} tokens a row", kMaxLayoutTokens));
  }
  if (rules.spatial_merge_size < 1 || rules.spatial_merge_size > kMaxCount) {
    throw UsageError("spatial_merge_size: must be 1 to 2^31-1");
  }
  Media md = read_media(in);
  check_mask(in);
  if (in.tokens.image < 0 && in.tokens.video < 0 && in.tokens.audio < 0) {
    throw UsageError("input_ids: no media token id known (give --hf-config or the token ids)");
  }
  std::vector<PromptLayout> out;
  for (std::size_t r = 0; r < rows; ++r) out.push_back(row_layout(in, ids, r, md, rules));
  if (md.images.next != md.images.rows.size() || md.videos.next != md.videos.rows.size() ||
      md.videos.frames_left != 0) {
    throw InputError(fmt::format(
        "input_ids: {} of {} image grids and {} of {} video grids used{}", md.images.next,
        md.images.rows.size(), md.videos.next, md.videos.rows.size(),
        md.videos.frames_left != 0
            ? fmt::format(" ({} frames of the last video missing)", md.videos.frames_left)
            : std::string()));
  }
  return out;
}

RopeIdsBatch rope_ids_from_tokens(const RopeIdsTokens& in, const RopeIdsRules& rules) {
  const std::vector<PromptLayout> layouts = layouts_from_tokens(in, rules);
  const std::size_t rows = layouts.size();
  const std::size_t len = in.input_ids.shape().back();
  RopeIdsBatch b;
  b.ids =
      in.input_ids.ndim() == 2 ? Tensor(DType::i64, {3, rows, len}) : Tensor(DType::i64, {3, len});
  std::int64_t* out = b.ids.data<std::int64_t>();
  // Padded slots: HF's _mrope_place_positions fills 0 (Omni's layout 1); GLM-4V's
  // get_rope_index starts from torch.ones.
  const bool pad_one =
      rules.family == RopeIdsFamily::qwen2_5_omni || rules.family == RopeIdsFamily::glm4v;
  std::fill(out, out + b.ids.numel(), pad_one ? 1 : 0);
  for (std::size_t r = 0; r < rows; ++r) {
    RopeIds one;
    try {
      one = rope_ids(layouts[r], rules);
    } catch (const UsageError& e) {
      throw InputError(e.what());  // the layout's name is the row's
    }
    const std::vector<std::size_t> idx = kept_tokens(in, r, len);
    const std::int64_t* src = one.ids.data<std::int64_t>();
    for (std::size_t a = 0; a < 3; ++a) {
      for (std::size_t i = 0; i < idx.size(); ++i) {
        out[(a * rows + r) * len + idx[i]] = src[a * idx.size() + i];
      }
    }
    // GLM-4V subtracts the padded row's length, the others the unpadded one's.
    const auto padding = static_cast<std::int64_t>(len - idx.size());
    b.deltas.push_back(rules.family == RopeIdsFamily::glm4v ? one.delta - padding : one.delta);
  }
  return b;
}

}  // namespace posenc
