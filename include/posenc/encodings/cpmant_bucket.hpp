#pragma once
/// \file
/// CPM-Ant's segment-aware relative buckets (HF `CpmAntSegmentPositionEmbedding` in
/// models/cpmant/modeling_cpmant.py), for `posenc table cpmant-bucket`.
///
/// For query i and key j of a row with segments q_seg and k_seg: when q_seg[i] ==
/// k_seg[j], the bucket is `_position_bucket(j - i)` (T5's bidirectional buckets,
/// `t5_bucket` of bias.hpp, over the token indices: HF forms the offset from
/// arange(keylen) - arange(querylen), whatever positions it is given); otherwise it is
/// num_buckets + q_seg[i] * num_segments + k_seg[j]. A learned relative_attention_bias
/// T [num_segments^2 + num_buckets, heads] gives the bias F.embedding(bucket,
/// T).permute(0, 3, 1, 2), [b, heads, q, k].

#include <cstdint>
#include <optional>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The largest query or key length accepted (a q x k matrix per row).
constexpr std::int64_t kMaxCpmAntTokens = std::int64_t{1} << 16;
/// The most segment types accepted.
constexpr std::int64_t kMaxCpmAntSegments = std::int64_t{1} << 12;

/// `posenc table cpmant-bucket`: --segment-ids, --seq-len, --segments, --buckets,
/// --max-distance, --bias-table.
struct CpmAntBucketRequest {
  /// Query segments [b, q] (HF query_segment; the model passes its `segment` ids),
  /// each from 0 to segments - 1. Without them, seq_len tokens of segment 0, [1, s].
  std::optional<xt::xarray<std::int64_t>> segment_ids;
  /// Key segments [b, k] (HF key_segment), the b of segment_ids; default segment_ids
  /// (self-attention, as CpmAntModel calls it).
  std::optional<xt::xarray<std::int64_t>> key_segment_ids;
  /// s of one row of segment 0 (the position buckets alone), 1 to 2^16; not with
  /// segment_ids.
  std::optional<std::int64_t> seq_len;
  std::int64_t segments = 32;  ///< HF segment_types (num_segments), 1 to 4096
  int buckets = 512;           ///< HF position_bias_num_buckets, 4 to 2^20
  /// HF position_bias_max_distance, above buckets / 4, at most 2^24.
  std::int64_t max_distance = 2048;
  /// The learned relative_attention_bias [segments^2 + buckets, heads], finite: the
  /// table is then the bias [b, heads, q, k] instead of the buckets [b, q, k].
  std::optional<xt::xarray<double>> bias_table;
};

/// The parameter checks of cpmant_bucket_table that need no input file (UsageError):
/// the counts, and seq_len against segments given (`has_segment_ids`).
void cpmant_bucket_check(const CpmAntBucketRequest& r, bool has_segment_ids);

/// The buckets [b, q, k] (integers, 0 .. segments^2 + buckets - 1) or the bias
/// [b, heads, q, k]. UsageError for bad parameters or combinations, InputError (naming
/// segment_ids, key_segment_ids, bias_table) for inputs of the wrong shape, segments
/// out of range or non-finite weights.
Table cpmant_bucket_table(const CpmAntBucketRequest& r);

}  // namespace posenc
