#pragma once
/// \file
/// Relative positions of Transformer-XL / XLNet, Funnel and DeBERTa, and their tables for
/// `posenc table xl-relative`, `funnel-relative` and `deberta-bucket`.
///
/// - Transformer-XL (Dai et al. 2019) and XLNet (Yang et al. 2019) embed the distance
///   between a query and a key with a sinusoidal table R (HF `PositionalEmbedding` /
///   `XLNetModel.relative_positional_encoding`): row c holds
///   [sin(p_c w_0..w_{D/2-1}) | cos(...)], w_i = 1/base^(2i/D), for the relative
///   positions p_c of `pos_seq`, clamped to [-clamp_len, clamp_len] when clamp_len > 0.
/// - DeBERTa-v2/v3 (He et al. 2021) index relative embeddings by the bucketed distance
///   q - k (HF `build_relative_position` with `make_log_bucket_position`).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// The relative positions `pos_seq` of a Transformer-XL or XLNet layer.
enum class XlForm {
  transfo_xl,  ///< klen - 1 down to 0: klen rows (HF TransfoXL)
  xlnet_bi,    ///< klen down to -qlen + 1: klen + qlen rows (XLNet attn_type "bi")
  xlnet_uni    ///< klen down to 0: klen + 1 rows (XLNet attn_type "uni")
};
/// transfo-xl | xlnet-bi | xlnet-uni (UsageError naming "form").
XlForm parse_xl_form(const std::string& s);
/// "transfo-xl", "xlnet-bi" or "xlnet-uni".
std::string xl_form_name(XlForm f);

/// Rows of R (rlen) for the form and lengths.
std::int64_t xl_relative_rows(XlForm f, std::int64_t q_len, std::int64_t k_len);

/// The relative position of row c of R (before clamping): k_len - 1 - c for
/// Transformer-XL, k_len - c for XLNet.
std::int64_t xl_relative_position(XlForm f, std::int64_t k_len, std::int64_t c);

/// `posenc table xl-relative`: --q-len, --k-len, --dim, --base, --form, --clamp-len.
struct XlRelativeRequest {
  std::optional<std::int64_t> q_len;  ///< Q; unset: k_len (either gives the other)
  std::optional<std::int64_t> k_len;  ///< K (memory plus current tokens); unset: q_len
  int dim = 0;                        ///< D (d_model), even
  double base = 10000.0;              ///< frequencies 1 / base^(2i/D)
  XlForm form = XlForm::transfo_xl;   ///< which rows R holds
  std::int64_t clamp_len = 0;         ///< > 0 clamps positions to [-clamp_len, clamp_len]; >= 0
};
/// The sinusoidal relative table R [rlen, D] (before the layer's projection W_r).
Table xl_relative_table(const XlRelativeRequest& r);

/// `posenc table funnel-relative`: the position embeddings of HF Funnel Transformer's
/// relative_shift attention (FunnelAttentionStructure.get_position_embeds), one entry
/// of its per-block list. The token positions start as 0 .. seq_len - 1 and are pooled
/// once per block after the first (stride_pool_pos: every second position, and with
/// separate_cls the <cls> token kept apart at 1 - 2^block, its last position dropped
/// first with truncate_seq). Block b's relative positions (relative_pos) run from
/// p_q[0] - p_k[0] + shift n_q stride down to p_q[0] - p_k[-1] in steps of stride, with
/// queries p_q pooled b times; shift 1: keys pooled alike, stride 2^b; shift 2 (b >= 1,
/// the block's first layer pooling its queries only): keys pooled b - 1 times, stride
/// 2^(b-1). Row c holds [sin(p_c w) | cos(p_c w)], w_i = 1 / base^(2i/D).
struct FunnelRelativeRequest {
  std::int64_t seq_len = 0;   ///< L, the model's input length, >= 1
  int dim = 0;                ///< D (d_model), even
  std::int64_t block = 0;     ///< block index b, 0 .. 62
  int shift = 1;              ///< 1 or 2 (HF position_embeds[b][shift - 1])
  bool separate_cls = false;  ///< HF separate_cls
  bool truncate_seq = false;  ///< HF truncate_seq (with separate_cls)
  double base = 10000.0;      ///< HF uses 10000
};

/// The block's relative positions (rows of the table) and the query and key lengths
/// its attention has (n_q, n_k; rows = n_k + shift n_q). Throws UsageError for bad
/// parameters and for positions beyond HF's range [-2 L, 2 L) (where HF's gather
/// fails).
struct FunnelPositions {
  std::vector<std::int64_t> relative;
  std::int64_t q_len = 0, k_len = 0;
};
FunnelPositions funnel_relative_positions(const FunnelRelativeRequest& r);

/// The table [rows, D] (before the layer's projection r_kernel).
Table funnel_relative_table(const FunnelRelativeRequest& r);

/// The four tables of HF Funnel's factorized attention (get_position_embeds with
/// attention_type "factorized"): over token positions p, with s = sin(p w), c = cos(p w),
/// w_i = 1 / base^(2i/D) (i < D/2): phi = [s | s], pi = [c | c] (the queries' side),
/// psi = [c | s], omega = [-s | c] (the keys' side).
enum class FunnelFactor { phi, pi, psi, omega };
/// phi | pi | psi | omega (UsageError naming "emit").
FunnelFactor parse_funnel_factor(const std::string& s);
/// "phi", "pi", "psi" or "omega".
std::string funnel_factor_name(FunnelFactor f);
/// The four tables, in HF's order.
inline const std::vector<FunnelFactor> kFunnelFactors{FunnelFactor::phi, FunnelFactor::pi,
                                                      FunnelFactor::psi, FunnelFactor::omega};

/// `posenc table funnel-factorized`: the positions 0 .. seq_len - 1 pooled as HF's
/// stride_pool pools the tables' rows (every second row; with separate_cls the first row
/// repeated in front first, and with truncate_seq the last pooled row dropped), `block`
/// times for phi and pi and `key_block` times for psi and omega.
struct FunnelFactorizedRequest {
  std::int64_t seq_len = 0;              ///< L, the model's input length, >= 1
  int dim = 0;                           ///< D (d_model), even
  std::int64_t block = 0;                ///< poolings of the queries' rows, 0 .. 62
  std::optional<std::int64_t> key_block;  ///< poolings of the keys' rows; unset: block
  bool separate_cls = false;             ///< HF separate_cls
  bool truncate_seq = false;             ///< HF truncate_seq (with separate_cls)
  double base = 10000.0;                 ///< HF uses 10000
  FunnelFactor emit = FunnelFactor::phi;  ///< which table
  /// The tables a front end writes (`--emit phi,psi`), each computed with `emit` set to it.
  std::vector<FunnelFactor> emits = kFunnelFactors;
};
/// The table [rows, D] (rows: the positions left after the poolings).
Table funnel_factorized_table(const FunnelFactorizedRequest& r);

/// DeBERTa-v2's `make_log_bucket_position` of one relative position q - k, including
/// its float32 arithmetic (logf, float division and ceil) so that every bucket matches
/// HF's: |rel| <= bucket_size / 2 stays as it is, larger distances share logarithmic
/// buckets up to max_position. The result is not clamped.
std::int64_t deberta_log_bucket(std::int64_t rel, int bucket_size, int max_position);

/// HF `build_relative_position(q, k, bucket_size, max_position)` at (i, j): i - j,
/// bucketed when bucket_size > 0.
std::int64_t deberta_relative_position(std::int64_t i, std::int64_t j, int bucket_size,
                                       int max_position);

/// Throws UsageError unless (position_buckets, max_relative_positions) is usable:
/// max_relative_positions >= 1 and, with buckets (position_buckets > 0), position_buckets
/// >= 2 and max_relative_positions - 1 > position_buckets / 2 (HF's log scale divides
/// by log((max - 1) / mid)).
void check_deberta_buckets(int position_buckets, int max_relative_positions);

/// `posenc table deberta-bucket`: --q-len, --k-len, --position-buckets,
/// --max-relative-positions.
struct DebertaBucketRequest {
  std::optional<std::int64_t> q_len;  ///< Q; unset: k_len (either gives the other)
  std::optional<std::int64_t> k_len;  ///< K; unset: q_len
  int position_buckets = 256;         ///< <= 0: no buckets (plain i - j)
  int max_relative_positions = 512;   ///< HF: max_position_embeddings when < 1
};
/// The relative-position matrix [Q, K] of HF `build_relative_position` (integers,
/// negative for keys after the query).
Table deberta_bucket_table(const DebertaBucketRequest& r);

}  // namespace posenc
