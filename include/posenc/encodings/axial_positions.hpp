#pragma once
/// \file
/// Reformer's axial position embeddings (Kitaev et al. 2020; HF
/// `AxialPositionEmbeddings` in models/reformer/modeling_reformer.py), for
/// `posenc table reformer-axial`.
///
/// For axial_pos_shape (n_1, ..., n_k) and per-axis weights W_a of shape
/// [1, .., n_a, .., 1, d_a] (the size of axis a at place a, ones elsewhere, as HF stores
/// them), each weight is broadcast over the grid n_1 x ... x n_k and the k of them are
/// concatenated along the features: row p = (i_1, ..., i_k) in row-major order is
/// [W_1[i_1] | ... | W_k[i_k]], of width hidden = d_1 + ... + d_k. In eval mode HF's
/// position_ids index the rows of that table (they must be below n_1 ... n_k).

#include <cstdint>
#include <optional>
#include <vector>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The most axes accepted.
constexpr std::size_t kMaxAxialAxes = 8;
/// The most rows (n_1 ... n_k) accepted.
constexpr std::int64_t kMaxAxialRows = std::int64_t{1} << 40;

/// `posenc table reformer-axial`: --axial-shape, --weights, --positions, --position-ids.
struct AxialPositionsRequest {
  /// HF axial_pos_shape (n_1, ..., n_k): 1 to 8 sides, each at least 1, their product
  /// at most 2^40.
  std::vector<std::int64_t> axial_shape;
  /// One weight per axis, W_a of shape [1, .., n_a, .., 1, d_a] (k + 1 dimensions: n_a
  /// at place a, ones at the other k - 1), finite, d_a >= 1; hidden = d_1 + ... + d_k.
  std::vector<xt::xarray<double>> weights;
  /// The rows 0 .. N-1 of the table ([N, hidden]); N at most n_1 ... n_k. Not with
  /// position_ids.
  std::optional<std::int64_t> positions;
  /// Positions [b, s], each from 0 to n_1 ... n_k - 1: the rows HF's eval-mode forward
  /// selects ([b, s, hidden]). Without positions or position_ids: the whole table.
  std::optional<xt::xarray<std::int64_t>> position_ids;
};

/// The rows n_1 ... n_k of the table; UsageError (naming axial_shape) for a bad shape.
std::int64_t axial_rows(const std::vector<std::int64_t>& axial_shape);

/// The table [n_1 ... n_k, hidden], its first N rows [N, hidden], or the rows of
/// position_ids [b, s, hidden] (float64 copies of the weights). UsageError for a bad
/// shape or count and for positions with position_ids; InputError (naming weights,
/// position_ids) for weights of the wrong shape, non-finite weights and positions out of
/// range.
Table axial_positions_table(const AxialPositionsRequest& r);

}  // namespace posenc
