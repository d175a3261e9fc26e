#pragma once
/// \file
/// LongT5's transient-global index maps (HF models/longt5/modeling_longt5.py), for
/// `posenc table longt5-global` and the side keys of `posenc attention --global-kv`.
///
/// With global_block_size G and an attention mask of s tokens, HF's
/// _make_global_fixed_block_ids gives each token its global block: floor(i / G)
/// computed in float32 (ones_like(mask) / G summed by cumsum, then floor(mask + fixed -
/// 1.0)), which for a G that is not a power of two puts some tokens in the block
/// before; -1 for padding; the tokens after the last full block join it. The n = s / G
/// global blocks are segments of the row (1) when their index is at most the largest
/// block id, else not (0); _make_side_relative_position_ids gives g - block(i) [s, n].

#include <cstddef>
#include <cstdint>
#include <optional>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The longest row accepted (HF's float32 i / G loses whole numbers beyond 2^24).
constexpr std::int64_t kMaxLongT5Tokens = std::int64_t{1} << 24;

/// HF's _make_global_fixed_block_ids for one row of s tokens (`valid[i]` non-zero: a
/// token, not padding): the block of each token into `ids` (-1 for padding) and, for
/// the s / G global blocks, 1 or 0 into `segments` (HF's global_segment_ids). G >= 1.
void longt5_global_block_ids(const std::uint8_t* valid, std::size_t s, std::int64_t block_size,
                             std::int32_t* ids, std::uint8_t* segments);

/// Which map `posenc table longt5-global` writes.
enum class LongT5GlobalMap {
  block_ids,      ///< [b, s]: HF's global_block_ids (block of each token, -1 padding)
  segment_ids,    ///< [b, n]: HF's global_segment_ids (1: a block of the row, 0: not)
  side_positions  ///< [b, s, n]: HF's side_relative_position, g - block(i)
};

/// `posenc table longt5-global`: --attention-mask, --seq-len, --global-block-size,
/// --emit.
struct LongT5GlobalRequest {
  /// HF's attention_mask [b, s] of 1 (token) and 0 (padding). Without it, seq_len
  /// tokens, [1, s].
  std::optional<xt::xarray<std::int64_t>> attention_mask;
  /// s of one row without padding, 1 to 2^24; not with attention_mask.
  std::optional<std::int64_t> seq_len;
  std::int64_t global_block_size = 16;  ///< HF's global_block_size G, 1 to 2^31
  LongT5GlobalMap emit = LongT5GlobalMap::block_ids;  ///< the map written
};

/// The parameter checks of longt5_global_table that need no input file (UsageError):
/// the block size, and one of seq_len and an attention mask (`has_mask`).
void longt5_global_check(const LongT5GlobalRequest& r, bool has_mask);

/// The map of `r.emit` (integers). UsageError for bad parameters or combinations,
/// InputError (naming attention_mask) for a mask that is not [b, s] of 0 and 1 or rows
/// longer than 2^24.
Table longt5_global_table(const LongT5GlobalRequest& r);

}  // namespace posenc
