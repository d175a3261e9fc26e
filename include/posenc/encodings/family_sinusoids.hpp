#pragma once
/// \file
/// Sinusoidal absolute encodings of particular model families, as their HF code forms
/// them, for `posenc table detr-sine` and `posenc table fairseq-sinusoidal`.
///
/// - DETR (Carion et al. 2020; HF `DetrSinePositionEmbedding`, also Conditional/
///   Deformable DETR, Table Transformer): from a pixel mask [b, H, W] the cumulative
///   sums y (down the rows) and x (along the columns), optionally normalised to
///   y / (y_last + 1e-6) * scale; with dim_t[k] = T^(2 floor(k/2) / E), channel k of
///   each axis is sin(v / dim_t[k]) for even k and cos(v / dim_t[k]) for odd k; the
///   result [b, 2E, H, W] holds the y channels, then the x channels.
/// - fairseq (M2M-100, NLLB, XGLM, ... ; HF `*SinusoidalPositionalEmbedding.
///   get_embedding`): row p = [sin(p f_0..f_{h-1}) | cos(...)], f_i = exp(-i ln(10000) /
///   (h - 1)), h = D / 2, a zero column appended for odd D, the row padding_idx zero;
///   the positions of tokens are `create_position_ids_from_input_ids`: (cumsum of
///   ids != padding_idx + past) * mask + padding_idx, so padding tokens take the zero row.

#include <cstdint>
#include <optional>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The largest DETR feature-map side accepted.
constexpr std::int64_t kMaxDetrSide = 1 << 14;
/// The largest DETR embedding_dim and fairseq dim accepted.
constexpr int kMaxEmbeddingDim = 1 << 16;

/// `posenc table detr-sine`: --mask or --size, --embedding-dim, --temperature,
/// --no-normalize, --scale, --layout.
struct DetrSineRequest {
  /// The pixel mask [b, H, W] (1 = pixel, 0 = padding); without it, all ones of
  /// [1, height, width].
  std::optional<xt::xarray<double>> mask;
  std::int64_t height = 0;       ///< mask rows without a mask (--size H W)
  std::int64_t width = 0;        ///< mask columns without a mask
  int embedding_dim = 64;        ///< E, channels per axis (HF: d_model / 2), even
  double temperature = 10000.0;  ///< T of dim_t[k] = T^(2 floor(k/2) / E)
  /// DAB-DETR's temperature_width, the T of x's channels (temperature is then y's,
  /// temperature_height); unset: temperature for both.
  std::optional<double> temperature_width;
  /// Subtracted from the cumulative sums before they are normalised (Deformable DETR,
  /// Grounding-DINO: 0.5; --offset); needs normalize.
  double offset = 0.0;
  /// as DETR's build_position_encoding (the class: False); false is --no-normalize
  bool normalize = true;
  std::optional<double> scale;  ///< needs normalize; default 2 pi
  /// [b, H*W, 2E] (tokens in row-major order, as HF's refactored forward flattens it
  /// for the encoder) instead of [b, 2E, H, W] (--layout tokens).
  bool tokens = false;
};
/// HF DetrSinePositionEmbedding.forward: [b, 2E, H, W] (or [b, H*W, 2E]), computed in
/// float64.
Table detr_sine_table(const DetrSineRequest& r);

/// `posenc table rt-detr-sincos`: --size, --embedding-dim, --temperature.
struct RtDetrSincosRequest {
  std::int64_t height = 0;       ///< feature map rows H, 1 to kMaxDetrSide
  std::int64_t width = 0;        ///< feature map columns W, 1 to kMaxDetrSide
  int embedding_dim = 256;       ///< E (HF encoder_hidden_dim), a multiple of 4
  double temperature = 10000.0;  ///< T (HF positional_encoding_temperature)
};
/// HF RTDetrHybridEncoder.build_2d_sincos_position_embedding (also RT-DETRv2, D-FINE):
/// [1, H*W, E], tokens in row-major order, channels [sin(y w), cos(y w), sin(x w),
/// cos(x w)] with w_k = 1 / T^(k / (E/4)) and x, y the column and row indices; in
/// float64. (Releases before transformers 5 built it x-major with the x channels first,
/// which is this table of the transposed size W H.)
Table rt_detr_sincos_table(const RtDetrSincosRequest& r);

/// `posenc table fairseq-sinusoidal`: --positions or --input-ids, --dim, --padding-idx,
/// --past-length.
struct FairseqSinusoidalRequest {
  std::optional<std::int64_t> positions;    ///< rows 0 .. N-1 of the weights (without ids)
  int dim = 0;                              ///< D (embedding_dim) >= 4
  std::optional<std::int64_t> padding_idx;  ///< the zero row; required with input_ids
  /// Token ids [b, s]: the table is then the embedding of each token, [b, s, D].
  std::optional<xt::xarray<std::int64_t>> input_ids;
  std::int64_t past_length = 0;  ///< HF past_key_values_length, with input_ids
};
/// The weights [N, D] of get_embedding(N, D, padding_idx), or with input ids the
/// embeddings [b, s, D] that the module's forward returns for them.
Table fairseq_sinusoidal_table(const FairseqSinusoidalRequest& r);

}  // namespace posenc
