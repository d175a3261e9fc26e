#pragma once
/// \file
/// The relative-position buckets of LayoutLMv2 / LayoutLMv3 / LayoutXLM (Xu et al.
/// 2021, Huang et al. 2022; HF `LayoutLMv2Encoder._calculate_1d_position_embeddings`,
/// `_calculate_2d_position_embeddings`, LayoutLMv3's `_cal_1d_pos_emb`,
/// `_cal_2d_pos_emb`), for `posenc table layoutlm-bucket`.
///
/// For the coordinates c of a row's tokens (1-D: position_ids; 2-D: the bounding boxes'
/// left edge x = bbox[..., 0] or bottom edge y = bbox[..., 3]), the pair (i, j) takes
/// the bucket relative_position_bucket(c_j - c_i) with T5's bidirectional buckets
/// (`t5_bucket`, bias.hpp). A learned `nn.Linear(bins, heads)` weight W [heads, bins]
/// gathers the bias W.t()[bucket].permute(0, 3, 1, 2), [b, heads, s, s]; the 2-D bias is
/// that of x plus that of y, each with its own weight.

#include <cstdint>
#include <optional>
#include <string>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// Which coordinate the buckets are of.
enum class LayoutAxis {
  positions,  ///< 1-D token positions (rel_pos_bins, max_rel_pos: 32, 128)
  x,          ///< bbox[..., 0] (rel_2d_pos_bins, max_rel_2d_pos: 64, 256)
  y,          ///< bbox[..., 3]
  xy          ///< the bias of x plus the bias of y (needs both weights)
};
/// 1d | x | y | xy (UsageError naming "axis").
LayoutAxis parse_layout_axis(const std::string& s);

/// The largest |coordinate| accepted (differences stay exact in float and int64).
constexpr std::int64_t kMaxLayoutCoordinate = std::int64_t{1} << 40;
/// The largest sequence length accepted (an s x s matrix per row).
constexpr std::int64_t kMaxLayoutBucketTokens = std::int64_t{1} << 16;

/// `posenc table layoutlm-bucket`: --seq-len or --position-ids, --bbox, --axis,
/// --buckets, --max-distance, --bias-table.
struct LayoutBucketRequest {
  LayoutAxis axis = LayoutAxis::positions;  ///< which coordinate
  /// Positions [b, s] (axis positions; HF position_ids); without them, 0 .. seq_len-1.
  std::optional<xt::xarray<std::int64_t>> position_ids;
  std::optional<std::int64_t> seq_len;  ///< s of the default positions, [1, s]
  /// Boxes [b, s, 4] (x0, y0, x1, y1) for the axes x, y, xy.
  std::optional<xt::xarray<std::int64_t>> bbox;
  /// HF num_buckets (rel_pos_bins / rel_2d_pos_bins); default 32 for positions, 64 for
  /// boxes. At least 4 (bidirectional).
  std::optional<int> buckets;
  /// HF max_distance (max_rel_pos / max_rel_2d_pos); default 128 for positions, 256 for
  /// boxes. Above buckets / 4, at most 2^24.
  std::optional<std::int64_t> max_distance;
  /// The learned weight [heads, buckets] (rel_pos_bias, or rel_pos_x_bias for x and xy):
  /// the table is then the bias [b, heads, s, s] instead of the buckets [b, s, s].
  std::optional<xt::xarray<double>> bias_table;
  /// rel_pos_y_bias [heads, buckets], for xy only.
  std::optional<xt::xarray<double>> bias_table_y;
};

/// The buckets [b, s, s] (integers, 0 .. buckets-1) or the bias [b, heads, s, s].
/// UsageError for bad parameters or combinations, InputError (naming position_ids, bbox,
/// bias_table) for inputs of the wrong shape, out-of-range coordinates or non-finite
/// weights.
Table layout_bucket_table(const LayoutBucketRequest& r);

/// UDOP's relative biases (Tang et al. 2023; HF `RelativePositionBias1D`,
/// `RelativePositionBiasHorizontal`, `RelativePositionBiasVertical`,
/// `RelativePositionBiasAggregated`): for positions p of the tokens (1-D: 0 .. s-1;
/// horizontal: the boxes' centres (x0 + x1) / 2; vertical: (y0 + y1) / 2), the pair
/// (i, j) takes T5's bidirectional bucket of trunc((p_j - p_i) * scaling_factor); an
/// nn.Embedding weight [buckets, heads] gathers the bias [b, heads, s, s]; the aggregated
/// bias sums the three in HF's order (vertical + (horizontal + 1-D)).
enum class UdopAxis { positions, horizontal, vertical, all };
/// 1d | horizontal | vertical | all (UsageError naming "axis").
UdopAxis parse_udop_axis(const std::string& s);

/// `posenc table udop-bucket`: --seq-len or --bbox, --axis, --buckets, --max-distance,
/// --scaling-factor, --bias-table.
struct UdopBucketRequest {
  UdopAxis axis = UdopAxis::positions;  ///< which bias
  std::optional<std::int64_t> seq_len;  ///< s of axis 1d without boxes
  /// Boxes [b, s, 4] (x0, y0, x1, y1; UDOP's normalised coordinates) for horizontal,
  /// vertical and all.
  std::optional<xt::xarray<double>> bbox;
  /// The boxes were float32: centres and products in float32, as HF computes them.
  bool bbox_f32 = false;
  int buckets = 32;                           ///< HF relative_attention_num_buckets
  std::optional<std::int64_t> max_distance;   ///< default 128 (1d), 100 (boxes); not with all
  std::optional<double> scaling_factor;       ///< default 1 (1d), 100 (boxes); not with all
  /// The learned weights [buckets, heads] (relative_attention_bias.weight): one, or
  /// three for all (1d, horizontal, vertical); the table is then the bias.
  std::vector<xt::xarray<double>> bias_tables;
};

/// The buckets [b, s, s] (integers; [1, s, s] for 1d) or the bias [b, heads, s, s].
/// UsageError for bad parameters, InputError for boxes or weights of the wrong shape,
/// non-finite or beyond +-2^40.
Table udop_bucket_table(const UdopBucketRequest& r);

}  // namespace posenc
