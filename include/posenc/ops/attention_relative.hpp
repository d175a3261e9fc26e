#pragma once
/// \file
/// Relative attention of Transformer-XL / XLNet and DeBERTa-v2/v3 as additive score
/// terms of `attention` (AttentionOptions::score_bias), following HF transformers
/// exactly. Q, K, V and every attention option are as in ops/attention.hpp; the
/// projected relative tensors are given, so any checkpoint's layer can be reproduced.
///
/// Transformer-XL (Dai et al. 2019; HF `RelPartialLearnableMultiHeadAttn`) and XLNet
/// (Yang et al. 2019; HF `XLNetRelativeAttention.rel_attn_core`):
///   score_ij = scale * ((q_i + u)·k_j + shift((q + v)·r)_ij + ef_ij)
/// with r the projected relative keys (rows for the relative positions of
/// encodings/relative_attention.hpp), u / v the per-head content / position biases
/// (r_w_bias, r_r_bias) and ef the optional XLNet segment term
/// (q_i + r_s_bias)·seg_embed[s_ij], s_ij = 1 when query i and key j are in different
/// segments. Keys include the memory (k_len = mlen + q_len, query i at mlen + i). The
/// shift is HF's, chosen by the rows of r: rlen = k_len is Transformer-XL's `_rel_shift`
/// (pad a zero column, reshape, drop a row), rlen > k_len is XLNet's `rel_shift_bnij`
/// (reshape, drop a row, keep k_len columns); entries that those reshapes take from the
/// next query's row (the masked future in Transformer-XL) are reproduced as HF has them.
///
/// Funnel Transformer (Dai et al. 2020; HF `FunnelRelMultiheadAttention`) is the same
/// family with its own data: its `relative_shift` positional term is the shift above
/// with `shift` s (HF `_relative_shift_gather`: score (i, j) reads column
/// s (q_len - i) + j of row i of (q + v)·r, past the row's end the next row's start, as
/// the reshape does; s = 2 when the queries are pooled and the keys are not, else 1,
/// which is XLNet's rel_shift_bnij), r the block's position embeddings projected by
/// `rel_kernel`; its `factorized` term replaces r by the tables phi, pi, psi, omega:
///   pos_ij = sum_D ((q_i + v)·W[D]) (phi[i, D] psi[j, D] + pi[i, D] omega[j, D]);
/// its token-type term takes the seg_embed row given per score by `segment_index` (HF
/// token_type_mat, 1 = same segment), and with `cls_mask` (HF separate_cls) query 0 and
/// key 0 get neither the positional nor the segment term.
///
/// DeBERTa-v2/v3 (He et al. 2021; HF `DisentangledSelfAttention`):
///   score_ij = (q_i·k_j + c2p_ij + p2c_ij) / sqrt(d (1 + terms))
///   c2p_ij = q_i·pos_key[clamp(rel(i, j) + span, 0, 2 span - 1)]
///   p2c_ij = k_j·pos_query[clamp(-rel(j, i) + span, 0, 2 span - 1)]
/// rel = deberta_relative_position (log buckets), span = position_buckets when > 0,
/// else max_relative_positions; query and key ids both start at 0 (HF
/// build_relative_position). The square root is taken in float32 as HF does. p2c needs
/// q_len == k_len (HF builds it from the keys alone).

#include <string>

#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"

namespace posenc {

/// Transformer-XL / XLNet tensors (see the file comment).
struct XlAttention {
  /// r: [rlen, hq, d], [rlen, b, hq, d] (HF XLNet's k_head_r) or, when Q has no h axis,
  /// [rlen, d]. Required.
  const Tensor* rel_keys = nullptr;
  const Tensor* content_bias = nullptr;   ///< u = r_w_bias [hq, d] ([d] without h); null = 0
  const Tensor* position_bias = nullptr;  ///< v = r_r_bias, as u; null = 0
  /// XLNet segment term: segment ids of the keys [k_len] or [b, k_len] (integers;
  /// query i has the id of key mlen + i; HF gives memory keys id 0), the embeddings
  /// seg_embed [2, hq, d] ([2, d] without h) and r_s_bias (as u; null = 0).
  const Tensor* segment_ids = nullptr;
  const Tensor* segment_embed = nullptr;  ///< seg_embed (see segment_ids)
  const Tensor* segment_bias = nullptr;   ///< r_s_bias (see segment_ids)
  /// Instead of segment_ids: the seg_embed row (0 or 1; bool or integers) of every
  /// score, [q_len, k_len] or [b, q_len, k_len] (HF Funnel's token_type_mat as it is,
  /// true = same segment = row 1; XLNet's would be 1 = different segments).
  const Tensor* segment_index = nullptr;
  /// 0: the shift chosen by the rows of r (see the file comment); s >= 1: HF Funnel's
  /// _relative_shift_gather with shift s, which needs rlen >= k_len + s.
  std::int64_t shift = 0;
  /// Projection of r: W [d_model, hq, d] (HF Funnel's r_kernel, XLNet's r); r (or the
  /// factorized tables) are then the unprojected embeddings [rlen, d_model] and
  /// r_head = r·W, in float64. Null: r is projected already.
  const Tensor* rel_kernel = nullptr;
  /// Funnel's factorized positional term (instead of rel_keys; needs rel_kernel): phi
  /// and pi [q_len, d_model], psi and omega [k_len, d_model] (HF get_position_embeds
  /// with attention_type "factorized", pooled as the block pools them).
  const Tensor* phi = nullptr;
  const Tensor* pi = nullptr;     ///< see phi
  const Tensor* psi = nullptr;    ///< see phi
  const Tensor* omega = nullptr;  ///< see phi
  /// HF Funnel's cls_mask (separate_cls): no positional or segment term for query 0
  /// and key 0 (the <cls> token; the content term stays).
  bool cls_mask = false;
};

/// DeBERTa-v2/v3 tensors: the projected relative embeddings [rows, hq, d] ([rows, d]
/// without h), rows >= 2 span (the first 2 span are used, as HF slices
/// rel_embeddings). pos_key gives the c2p term, pos_query the p2c term (HF pos_att_type).
struct DebertaAttention {
  const Tensor* pos_key = nullptr;    ///< projected keys of the relative embeddings (c2p)
  const Tensor* pos_query = nullptr;  ///< projected queries of them (p2c)
  int position_buckets = 256;         ///< <= 0: no buckets
  int max_relative_positions = 512;   ///< HF: max_position_embeddings when < 1
  /// HF pos_att_type as the caller gave it ("c2p", "p2c" or "c2p,p2c"); empty: the terms
  /// whose tensors are given. check_relative_given holds it to the tensors.
  std::string pos_att_type;
};

/// The additive terms [b, hq, sq, sk] (b, h as Q has them) in the arithmetic type of
/// attention for `opt` (f64 for f64 Q unless opt.precision says otherwise), already
/// multiplied by the scale (opt.scale, or the scheme's default). Throws InputError for
/// tensors of the wrong shape or dtype, UsageError for bad parameters.
Tensor xl_score_bias(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                     const XlAttention& xl);
/// The same for DeBERTa's c2p and p2c terms.
Tensor deberta_score_bias(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                          const DebertaAttention& deb);

/// The scale DeBERTa uses when opt.scale is 0: 1 / float32(sqrt(float32(d) * (1 +
/// terms))).
double deberta_default_scale(std::size_t d, int terms);

/// Attention with the Transformer-XL / XLNet terms (opt.score_bias must be null).
/// Memory: the terms are held as a [b, hq, sq, sk] tensor, counted against
/// opt.max_memory with the rest.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v, AttentionOptions opt,
                          const XlAttention& xl);
/// Attention with the DeBERTa terms; the default scale is deberta_default_scale.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v, AttentionOptions opt,
                          const DebertaAttention& deb);

/// Gradients of attention(q, k, v, opt, xl)'s output for the output gradient
/// `grad_output` (ops/attention_backward.hpp): the backward with the terms as a constant
/// additive term gives their gradient dS [b, hq, sq, sk]; with s = scale dS, each
/// score (i, j) that reads entry (row, c) of (q + v).r through the shift (row i, or
/// the next query's where HF's reshape takes it from there) gives s_ij r[c] to dq_row,
/// s_ij (q_row + v) to drel_keys[c] (per batch entry for a batched r) and s_ij r[c] to
/// dposition_bias; s_ij k_j goes to dcontent_bias and s_ij u to dk_j; the segment term
/// gives s_ij seg_embed[seg(i, j)] to dq_i and dsegment_bias, s_ij (q_i + r_s_bias)
/// to dsegment_embed[seg(i, j)]. Sums run over batch entries for per-head tensors;
/// with rel_kernel, drel_keys is the unprojected rows' (dr W^T) and drel_kernel = R^T dr.
/// Funnel's factorized term, pos_ij = sum_D qr_i[D] (phi_i[D] psi_j[D] + pi_i[D]
/// omega_j[D]) with qr_i = (q_i + v).W: row i's A = sum_j s_ij psi_j, C = sum_j s_ij
/// omega_j give dqr_i = phi_i A + pi_i C (to dq_i and dposition_bias through W, to
/// drel_kernel as dqr_i (q_i + v)), dphi_i = qr_i A, dpi_i = qr_i C, and dpsi_j, domega_j
/// the sums of s_ij qr_i phi_i, s_ij qr_i pi_i.
/// The terms' part of dq and dk is added to attention's in float64 before one rounding.
/// Computed in memory (no sinks, given forward or released K, V); the memory is
/// attention_backward_memory below, an InputError over opt.max_memory. UsageError for
/// a gradient switch without its tensor, qv, per_dim_scale, relative_proj and the
/// varlen form.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, const XlAttention& xl);
/// The same for DeBERTa's terms: dq_i += sum_j s_ij pos_key[c2p(i, j)], dk_j += sum_i
/// s_ij pos_query[p2c(i, j)], dpos_key[c] = sum of s_ij q_i over the pairs of c2p row c,
/// dpos_query[c] = sum of s_ij k_j over the pairs of p2c row c (rows past 2 span: 0).
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt,
                                  const DebertaAttention& deb);

/// Bytes the two backwards above would allocate (outputs and work, not the inputs).
std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt,
                                      const XlAttention& xl);
std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt,
                                      const DebertaAttention& deb);

}  // namespace posenc
