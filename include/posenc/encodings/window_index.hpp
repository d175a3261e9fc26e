#pragma once
/// \file
/// Relative position indices of windowed 2-D attention, and the learned biases they
/// gather, for `posenc table swin-index` and `posenc table beit-index`.
///
/// - Swin (Liu et al. 2021; HF `SwinSelfAttention`): for tokens i, j of an H x W
///   window in row-major order at (y, x), the index of the pair is
///   (y_i - y_j + H - 1) * (2W - 1) + (x_i - x_j + W - 1), one of (2H - 1)(2W - 1)
///   entries of the learned table `relative_position_bias_table` [entries, heads].
///   The bias added to the logits is table[index] permuted to [heads, HW, HW].
/// - BEiT / Data2Vec-vision (Bao et al. 2022; HF `BeitRelativePositionBias`) put a
///   class token first: (2H - 1)(2W - 1) + 3 entries, the last three for class to
///   token (row 0), token to class (column 0) and class to class ((0, 0)); the matrix
///   is [HW + 1, HW + 1].
/// - Swin-V2 (Liu et al. 2022; HF `Swinv2SelfAttention`) replaces the learned table by
///   an MLP of log-spaced coordinates: relative_coords_table [2H - 1, 2W - 1, 2] holds
///   sign(c) log2(1 + |c|) / log2(8) with c = 8 d / (P - 1) for each axis offset d, P
///   the pretrained window side (or the window's own side).
/// - LeViT (Graham et al. 2021; HF `LevitAttention`, `LevitAttentionSubsample`) index a
///   learned `attention_biases` [heads, offsets] by the offset (|dy|, |dx|) between a
///   query of the R_out x R_out grid (at stride s) and a key of the R x R grid, in the
///   order offsets first appear, which is |dy| * R + |dx|.

#include <cstdint>
#include <optional>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The largest window side accepted (windows of Swin are 7 to 24, BEiT's patch grids
/// and LeViT's resolutions a few dozen): 256 x 256 tokens make a matrix of 2^32 entries.
constexpr std::int64_t kMaxWindowSide = 256;

/// The windowed relative-index scheme: an H x W window, with or without BEiT's class
/// token.
struct WindowIndex {
  std::int64_t height = 0;   ///< window rows H
  std::int64_t width = 0;    ///< window columns W
  bool class_token = false;  ///< BEiT's class token first

  /// Tokens per side of the matrix: H * W, plus one with the class token.
  std::int64_t tokens() const { return height * width + (class_token ? 1 : 0); }
  /// Entries of the learned table (HF num_relative_distance): (2H - 1)(2W - 1), plus 3.
  std::int64_t entries() const {
    return (2 * height - 1) * (2 * width - 1) + (class_token ? 3 : 0);
  }
  /// The table entry of query token i and key token j (0 <= i, j < tokens()).
  std::int64_t index(std::int64_t i, std::int64_t j) const;
};

/// Throws UsageError ("window height: must be from 1 to 256, got 0") unless both sides are in
/// [1, kMaxWindowSide].
void check_window(std::int64_t height, std::int64_t width);

/// `posenc table swin-index` and `beit-index`: --window, --bias-table.
struct WindowIndexRequest {
  std::int64_t height = 0;   ///< window rows H, 1 to kMaxWindowSide (--window H W)
  std::int64_t width = 0;    ///< window columns W, 1 to kMaxWindowSide
  bool class_token = false;  ///< BEiT's class token and three extra entries (beit-index)
  /// A learned table [entries, heads] (HF relative_position_bias_table): the table is
  /// then the bias it gives, [heads, N, N], instead of the index matrix [N, N].
  std::optional<xt::xarray<double>> bias_table;
};

/// The index matrix [N, N] (integers, N = tokens()) or, with a bias table, the bias
/// [heads, N, N] as HF adds it to the logits (before its unsqueeze(0)). A bias table of
/// the wrong shape or with non-finite values is an InputError naming "bias_table".
Table window_index_table(const WindowIndexRequest& r);

/// `posenc table swinv2-coords`: --window, --pretrained-window.
struct SwinV2CoordsRequest {
  std::int64_t height = 0;  ///< window rows H (--window H W)
  std::int64_t width = 0;   ///< window columns W
  /// HF pretrained_window_size[0] (--pretrained-window): with pretrained_width, when
  /// either is not 0 (then both 2 to kMaxWindowSide), normalises the offsets instead of
  /// the window.
  std::int64_t pretrained_height = 0;
  std::int64_t pretrained_width = 0;  ///< HF pretrained_window_size[1]
  /// HF continuous_position_bias_mlp (--mlp W1 B1 W2): Linear(2, hidden) weight
  /// [hidden, 2] and bias [hidden], ReLU, Linear(hidden, heads, bias=False) weight
  /// [heads, hidden]. All three or none.
  std::optional<xt::xarray<double>> mlp_w1;
  std::optional<xt::xarray<double>> mlp_b1;  ///< the first layer's bias [hidden]
  std::optional<xt::xarray<double>> mlp_w2;  ///< the second layer's weight [heads, hidden]
};
/// Swin-V2's relative_coords_table [2H - 1, 2W - 1, 2] (HF's buffer without its leading
/// 1): (dy, dx) for offsets from -(side - 1) to side - 1, normalised and log-spaced. A
/// window side of 1 has only the offset 0 (HF skips the division there); a pretrained
/// side must be at least 2. With the MLP, the bias Swinv2SelfAttention adds to its
/// logits instead: 16 sigmoid(mlp(coords)) gathered by swin-index's
/// relative_position_index, [heads, HW, HW], in float64. Weights of other shapes or
/// with non-finite values are an InputError naming "mlp".
Table swinv2_coords_table(const SwinV2CoordsRequest& r);

/// `posenc table levit-index`: --resolution, --stride, --bias-table.
struct LevitIndexRequest {
  std::int64_t resolution = 0;  ///< R: keys on an R x R grid
  std::int64_t stride = 1;      ///< s > 1: queries subsampled, R_out = (R - 1) / s + 1
  /// A learned attention_biases [heads, R * R]: the table is then the bias
  /// attention_biases[:, attention_bias_idxs], [heads, R_out^2, R^2].
  std::optional<xt::xarray<double>> bias_table;
};

/// LeViT's attention_bias_idxs [R_out^2, R^2] (integers), or the bias of a learned table.
Table levit_index_table(const LevitIndexRequest& r);

}  // namespace posenc
