// LongT5's transient-global index maps (encodings/longt5_global.hpp).

#include "posenc/encodings/longt5_global.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

void longt5_global_block_ids(const std::uint8_t* valid, std::size_t s, std::int64_t block_size,
                             std::int32_t* ids, std::uint8_t* segments) {
  // HF: fixed = cumsum(ones / G) - ones / G in float32 (torch's CPU cumsum adds in
  // double and rounds each sum to float32), then floor(1 + fixed - 1.0) in float32.
  // For G 25 token 425 lands in block 16, not floor(425 / 25) = 17.
  const float c = 1.0f / static_cast<float>(block_size);
  const auto g = static_cast<std::size_t>(block_size);
  std::int64_t full = 0;
  for (std::size_t i = 0; i < s; ++i) {
    std::int32_t id = -1;
    if (valid[i]) {
      const auto cum = static_cast<float>(static_cast<double>(c) * static_cast<double>(i + 1));
      const float fixed = cum - c;
      const float x = (1.0f + fixed) - 1.0f;
      id = static_cast<std::int32_t>(std::max(-1.0f, std::floor(x)));
    }
    ids[i] = id;
    if (i % g == g - 1 && id >= 0) ++full;  // the ends of full blocks
  }
  // Orphans (the tokens after the last full block) join the last full block.
  const auto last = static_cast<std::int32_t>(full - 1);
  std::int32_t top = -1;
  for (std::size_t i = 0; i < s; ++i) {
    ids[i] = std::min(ids[i], last);
    top = std::max(top, ids[i]);
  }
  for (std::size_t k = 0; k < s / g; ++k) segments[k] = static_cast<std::int64_t>(k) <= top;
}

void longt5_global_check(const LongT5GlobalRequest& r, bool has_mask) {
  validate(r);  // the declared ranges (table_fields.hpp)
  if (r.global_block_size < 1 || r.global_block_size > (std::int64_t{1} << 31)) {
    throw UsageError(fmt::format("global_block_size {}: must be from 1 to 2^31",
                                 r.global_block_size));
  }
  if (has_mask == r.seq_len.has_value()) {
    throw UsageError("attention_mask/seq_len: give one (the mask, or a row of seq_len tokens)");
  }
  if (r.seq_len && (*r.seq_len < 1 || *r.seq_len > kMaxLongT5Tokens)) {
    throw UsageError(fmt::format("seq_len {}: must be from 1 to 2^24", *r.seq_len));
  }
}

Table longt5_global_table(const LongT5GlobalRequest& r) {
  longt5_global_check(r, r.attention_mask.has_value());
  std::size_t b = 1, s = 0;
  if (r.attention_mask) {
    const auto& m = *r.attention_mask;
    if (m.dimension() != 2 || m.shape(1) == 0) {
      throw InputError(fmt::format("attention_mask: expected [b, s] of 0 and 1, got shape ({})",
                                   fmt::join(m.shape(), ", ")));
    }
    if (m.shape(1) > static_cast<std::size_t>(kMaxLongT5Tokens)) {
      throw InputError(fmt::format("attention_mask: {} tokens per row; at most 2^24", m.shape(1)));
    }
    b = m.shape(0), s = m.shape(1);
    for (std::size_t e = 0; e < m.size(); ++e) {
      if (m.data()[e] != 0 && m.data()[e] != 1) {
        throw InputError(fmt::format("attention_mask: value {} at (b {}, s {}); HF's masks "
                                     "hold 0 (padding) and 1 (token)",
                                     m.data()[e], e / s, e % s));
      }
    }
  } else {
    s = static_cast<std::size_t>(*r.seq_len);
  }
  const std::size_t n = s / static_cast<std::size_t>(r.global_block_size);
  if (n == 0 && r.emit != LongT5GlobalMap::block_ids) {
    throw UsageError(fmt::format(
        "global_block_size {}: longer than the rows ({} tokens): no global block to map",
        r.global_block_size, s));
  }
  struct Maps {
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> seg;
  };
  auto maps = std::make_shared<Maps>();
  maps->ids.resize(b * s);
  maps->seg.resize(b * n);
  std::vector<std::uint8_t> valid(s, 1);
  for (std::size_t row = 0; row < b; ++row) {
    if (r.attention_mask) {
      for (std::size_t i = 0; i < s; ++i) valid[i] = (*r.attention_mask)(row, i) != 0;
    }
    longt5_global_block_ids(valid.data(), s, r.global_block_size, maps->ids.data() + row * s,
                            maps->seg.data() + row * n);
  }
  Table t;
  t.integral = true;
  t.attrs = {{"kind", std::string("longt5-global")},
             {"global_block_size", static_cast<long long>(r.global_block_size)},
             {"global_blocks", static_cast<long long>(n)}};
  switch (r.emit) {
    case LongT5GlobalMap::block_ids:
      t.dataset = "/longt5_block_ids";
      t.attrs.push_back({"map", std::string("block-ids")});
      t.min_value = -1;
      t.max_value = static_cast<std::int64_t>(n) - 1;
      t.spec.shape = {b, s};
      t.spec.line = [maps, s](std::size_t line, double* out) {
        for (std::size_t i = 0; i < s; ++i) out[i] = maps->ids[line * s + i];
      };
      break;
    case LongT5GlobalMap::segment_ids:
      t.dataset = "/longt5_segment_ids";
      t.attrs.push_back({"map", std::string("segment-ids")});
      t.max_value = 1;
      t.spec.shape = {b, n};
      t.spec.line = [maps, n](std::size_t line, double* out) {
        for (std::size_t k = 0; k < n; ++k) out[k] = maps->seg[line * n + k];
      };
      break;
    case LongT5GlobalMap::side_positions:
      t.dataset = "/longt5_side_positions";
      t.attrs.push_back({"map", std::string("side-positions")});
      t.min_value = 1 - static_cast<std::int64_t>(n);
      t.max_value = static_cast<std::int64_t>(n);
      t.spec.shape = {b, s, n};
      t.spec.line = [maps, n](std::size_t line, double* out) {
        const std::int32_t id = maps->ids[line];  // line = row * s + i
        for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<double>(k) - id;
      };
      break;
  }
  return t;
}

}  // namespace posenc
