#pragma once
/// \file
/// The backward pass of attention: the gradients of a loss L with respect to Q, K and V
/// given dO = dL/d(output), as FlashAttention's backward kernels compute them, for
/// golden fixtures of their tests.
///
/// With P the probabilities of the forward (recomputed from its lse: P = exp(s - lse)),
/// dP = dO V^T, D = rowsum(dO o O) (FlashAttention's softmax_d) and dS = P o (dP - D):
///   dV = P^T dO, dq = scale dS' K, dk = scale dS'^T Q,
/// dS' being dS through the soft-cap (times 1 - tanh^2) and the query temperature. Grouped
/// K and V (GQA, MQA): dk and dv summed over the query heads of the group. A float mask
/// (or a float bias given as mask) has the gradient dS, summed over the axes it is
/// broadcast along (dbias). Sinks: dsinks[h] = -sum over b, i of exp(sink[h] - lse) D.
/// Rows with no visible key contribute nothing.
///
/// Arithmetic: float64 unless opt.precision asks for f32; each gradient rounded once to
/// the output dtype (opt.dtype, else Q's). Products by single-threaded BLAS on tiles of
/// sizes fixed by the shapes (never s x s); the work items are (batch, KV head), each
/// adding its tiles in a fixed order (dq over the key tiles, dk and dv over the group's
/// query heads and their query tiles), so results are the same bytes whatever the thread
/// count or --max-memory (which bounds the workers). Parallel over b * hk items.
///
/// Options honoured: scale, causal (both alignments), window, sliding_window, chunk_size,
/// key_lengths, cu_seqlens, FlashAttention's varlen cu_seqlens_q/cu_seqlens_k (each
/// sequence's backward on its own, rows packed; src/ops/attention_varlen.hpp), bool and float masks, ALiBi (every variant), soft-cap, sinks,
/// temperature and Llama-4 query scaling, T5 relative bias (and its table's gradient),
/// Shaw's relative_k and relative_v tables (every window; and their gradients), GQA/MQA, dv != d, any axes order, FlashAttention-3's qv (the backward of Q||qv over K||V,
/// the scale's default 1/sqrt(d + dv): dq and dqv are the two parts of the concatenated
/// query's gradient, dk the first part of the concatenated key's, and dv the sum of P^T dO
/// and its second part, added in float64 before the one rounding), Phi-4-multimodal
/// audio's clipped-distance bias (and its table's gradient), SAM / ViTDet's decomposed
/// relative positions (and the tables' gradients), Gemma-3n audio's per-dimension query
/// scale and projected relative keys (and their gradients; dk and dv to sinks, a given
/// forward and released K and V alike), WavLM's gate on the T5 term (and the gate's
/// gradients), LongT5's transient-global side keys (the side columns' part of dq and
/// the gradients of global_k, global_v and the global_bias table), a constant additive
/// score_bias (its gradient kept on request, dscore_bias: the Transformer-XL / XLNet /
/// Funnel and DeBERTa terms' backward, ops/attention_relative.hpp, is built on it).
/// Others (the fp8 descales, p_dtype, the FlashAttention baseline, --arith other than
/// exact, MaskedRows::nan) are a UsageError.

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// What attention_backward returns (tensors not asked for are empty).
struct AttentionGrads {
  Tensor dq;         ///< Q's shape
  Tensor dk;         ///< K's shape (summed over each group of query heads)
  Tensor dv;         ///< V's shape
  Tensor softmax_d;  ///< rowsum(dO o O), [b, hq, sq] as lse
  Tensor lse;        ///< the forward's lse the probabilities were recomputed from
  Tensor dbias;      ///< the float mask's shape, when asked for
  Tensor dsinks;     ///< the sinks' shape, when sinks are given
  Tensor dt5_bias;   ///< the T5 table's shape [buckets, hq], when asked for
  Tensor dqv;        ///< qv's shape (the output's), when opt.qv is given
  Tensor drelative_k;  ///< Shaw's key table's shape, when asked for
  Tensor drelative_v;  ///< Shaw's value table's shape, when asked for
  // The relative score terms' tensors (ops/attention_relative.hpp; their shapes, when
  // asked for): Transformer-XL / XLNet / Funnel's and DeBERTa's.
  Tensor drel_keys;        ///< rel_keys (r, or the unprojected rows with rel_kernel)
  Tensor dcontent_bias;    ///< content_bias (r_w_bias)
  Tensor dposition_bias;   ///< position_bias (r_r_bias)
  Tensor dsegment_embed;   ///< segment_embed (seg_embed)
  Tensor dsegment_bias;    ///< segment_bias (r_s_bias)
  Tensor drel_kernel;      ///< rel_kernel (W)
  Tensor dpos_key;         ///< DeBERTa's pos_key (rows past 2 span: 0)
  Tensor dpos_query;       ///< DeBERTa's pos_query, likewise
  Tensor dphi, dpi, dpsi, domega;  ///< Funnel's factorized tables, when asked for
  Tensor dclipped_bias;   ///< the clipped-distance table's shape [rows, hq], when asked for
  Tensor drel_pos_h;      ///< the decomposed rel_pos_h table's shape [L, d], when asked for
  Tensor drel_pos_w;      ///< the decomposed rel_pos_w table's shape [L, d], when asked for
  Tensor dper_dim_scale;  ///< per_dim_scale's shape [d], when asked for
  Tensor drelative_proj;  ///< relative_proj's shape [hq d, D], when asked for
  Tensor dgate_input;     ///< WavLM's gate input's shape, when the gate's are asked for
  Tensor dgate_weight;    ///< gate_weight's shape [8, E], likewise
  Tensor dgate_bias;      ///< gate_bias's shape [8], likewise
  Tensor dgate_const;     ///< gate_const's shape, likewise
  Tensor dglobal_k;       ///< global_k's shape, when the side keys' are asked for
  Tensor dglobal_v;       ///< global_v's shape, likewise
  Tensor dglobal_bias;    ///< global_bias's shape [buckets, hq], when asked for
  Attrs attrs;       ///< the forward's parameters

  /// The tensor named `name` (a gradient_fields() name, as the outputs are named);
  /// std::out_of_range for another name.
  Tensor& named(const std::string& name);
};

/// Options of the backward beyond the forward's.
struct AttentionBackwardOptions {
  /// Also the gradient of the float mask (opt.mask, a float tensor): dbias.
  bool dbias = false;
  /// Also the gradient of the T5 relative bias table (opt.t5_bias): dt5_bias, dS summed
  /// over the (batch, query, key) pairs of each bucket, per head.
  bool dt5_bias = false;
  /// Also the gradients of Shaw's relative tables (opt.relative_k, opt.relative_v):
  /// drelative_k[r] = scale sum of dS'_ij q_i over the pairs (i, j) of row r (per head
  /// for a per-head table, else over the heads and batch entries too), drelative_v[r] =
  /// sum of P_ij dO_i likewise; dq gains scale sum_j dS'_ij rk[r(i, j)].
  bool drelative_k = false;
  bool drelative_v = false;
  /// Also the gradients of the relative score terms' tensors (attention_backward with an
  /// XlAttention or a DebertaAttention, ops/attention_relative.hpp), one switch each.
  bool drel_keys = false, dcontent_bias = false, dposition_bias = false;
  bool dsegment_embed = false, dsegment_bias = false, drel_kernel = false;
  bool dpos_key = false, dpos_query = false;
  bool dfactorized = false;  ///< dphi, dpi, dpsi, domega (Funnel's factorized tables)
  /// With opt.score_bias (a constant additive term [b, hq, sq, sk], added after the
  /// temperature and before the soft-cap): receives its gradient, dS through the
  /// soft-cap, [b][hq][sq][sk] in float64 (zero where a score is masked). Null: not kept.
  std::vector<double>* dscore_bias = nullptr;
  /// Also the gradient of Phi-4-multimodal audio's clipped-distance table
  /// (opt.clipped_bias): dclipped_bias[row, h], dS summed over the (batch, query, key)
  /// pairs whose clipped distance takes the row, as dt5_bias by bucket.
  bool dclipped_bias = false;
  /// Also the gradients of the decomposed relative-position tables (opt.rel_pos_h,
  /// opt.rel_pos_w): drel_pos_h[r] = sum of dS'_ij q_i over the pairs whose row offset
  /// takes row r of the resized table, taken back through the linear resize to the
  /// given table's rows (drel_pos_w likewise by columns); dq gains sum_j dS'_ij (Rh + Rw).
  bool drel_pos_h = false;
  bool drel_pos_w = false;
  /// Also the gradient of Gemma-3n's per-dimension query scale (opt.per_dim_scale):
  /// dper_dim_scale[c] = sigmoid(w[c]) sum of dq'[., c] q[., c] (dq' the gradient of the
  /// scaled queries; dq = dq' softplus(w)).
  bool dper_dim_scale = false;
  /// Also the gradient of Gemma-3n's relative projection (opt.relative_proj):
  /// drelative_proj[h d + c, e] = sum over rows r of drk[r, h, c] timing(r)[e], drk the
  /// gradient of the projected per-head relative key table.
  bool drelative_proj = false;
  /// Also the gradients of WavLM's gate (opt.gate_input, gate_weight, gate_bias,
  /// gate_const): each row's factor gets sum_j dS_ij t5[i, j] (the gated T5 term's
  /// gradient), taken through gate = a (g c - 1) + 2 and its sigmoids; dt5_bias is then
  /// the sum of dS times the row's factor.
  bool dgate = false;
  /// Also the gradients of LongT5's side keys and values (opt.global_k, global_v), as
  /// given inputs: dglobal_k[g] = scale sum of dS_ig q_i, dglobal_v[g] = sum of P_ig dO_i
  /// over the queries i of the group's heads (LongT5 computes them from block sums of
  /// K and V: their gradients reach K, V and the hidden states through that, outside
  /// posenc). dq gains scale sum_g dS_ig kg_g whether or not they are asked for.
  bool dglobal_kv = false;
  /// Also the gradient of the side bias table (opt.global_bias, HF's
  /// global_relative_attention_bias): dS of the side columns summed over the (batch,
  /// query, side key) pairs whose block distance g - block(i) falls in each bucket, per
  /// head, as dt5_bias.
  bool dglobal_bias = false;
  /// Tile sizes (0 = automatic; the results depend on them, never on threads or memory).
  std::size_t query_tile = 0;
  std::size_t key_tile = 0;
  /// The forward's output (float64, the output's shape and layout) and lse (f32 or f64,
  /// [b, hq, sq] as attention() gives it) when the caller has them: FlashAttention's
  /// `out` and `softmax_lse`, which its backward takes as inputs. No forward is run (none
  /// is counted): D = rowsum(dO o O) from this O, P = exp(s - lse) from this lse; the
  /// attrs are those the forward would record. check_forward_given and
  /// check_forward_shapes say what a caller may give.
  const Tensor* forward_output = nullptr;
  const Tensor* forward_lse = nullptr;
  /// dk and dv written as each item's key tile completes instead of being held: called
  /// once for "dk" and once for "dv" with the gradient's dtype and shape, it returns a
  /// sink taking positional writes (TensorSink::writes_at), or null for a gradient not
  /// wanted (it is then neither held nor written). The AttentionGrads tensors stay empty.
  std::function<TensorSink*(const std::string& name, const TensorInfo& info)> sink;
  /// K and V are file mappings (Tensor::borrow of TensorSource::mapped_data) in the
  /// arithmetic's dtype, heads contiguous (bhsd): each key tile's pages leave the
  /// process's resident memory once its item is done with them, and K and V are counted
  /// as held only tile by tile.
  bool release_kv = false;
};

/// What a gradient is, for the code that walks them.
enum class GradientKind {
  rows,       ///< of an input whose rows run along the sequence (dq, dk, dv, dqv, dgate_input)
  stat,       ///< a statistic of each query row, float64 (softmax_d, lse)
  parameter,  ///< of a parameter table, summed over batch entries (and varlen sequences)
};

/// One gradient attention_backward gives, declared once: its name (the --emit word and
/// the Python key), its AttentionGrads member, the AttentionBackwardOptions switch that
/// asks for it (nullptr: every backward computes it, or the input it belongs to does),
/// and its kind. The command line's and the module's emit lists, the varlen backward's
/// sums and the roundings to the output dtype walk this table.
struct GradientField {
  const char* name;
  Tensor AttentionGrads::*member;
  bool AttentionBackwardOptions::*wanted;
  GradientKind kind;
};

/// Every gradient, in the order `--emit` lists them.
const std::vector<GradientField>& gradient_fields();

/// The gradient named `name`, nullptr for another name.
const GradientField* find_gradient(const std::string& name);

/// The names of gradient_fields() as a comma list ("dq, dk, dv, ..."), for messages.
std::string gradient_names();

/// `bopt` with the switches of the gradients in `names` set (names not checked: see
/// find_gradient).
AttentionBackwardOptions gradients_wanted(const std::vector<std::string>& names,
                                          AttentionBackwardOptions bopt = {});

/// Gradients of attention(q, k, v, opt)'s output with respect to q, k, v (and the float
/// mask, the sinks) for the output gradient `grad_output` (Q's shape with d replaced by
/// dv, any float dtype). UsageError for options the backward cannot honour (see the file
/// comment), dbias without a float mask and dt5_bias without a T5 table; InputError for shapes (grad_output not
/// matching the output), dtypes, non-finite Q, K, V (unless allowed; NaN in grad_output
/// propagates) and the opt.max_memory limit, before any large allocation.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt = {});

/// Gradients of attention(q, k, v, opt, rope), RoPE applied inside attention, with
/// respect to the unrotated q and k: the backward of the rotated inputs, then dq and dk
/// rotated back by the rotation's transpose (its inverse direction, attention factors
/// included) at the same positions, each gradient rounded once. Exact arithmetic only
/// (UsageError otherwise); the rest as attention_backward. Defined with the RoPE kernels
/// (attention_rope.cpp).
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, AttentionOptions opt,
                                  const AttentionBackwardOptions& bopt,
                                  const AttentionRope& rope);

/// The forward a caller gives in place of the backward's own (forward_output and
/// forward_lse), checked in the caller's terms before anything is read: `c.gave` knows
/// "grad_output", "forward_output", "forward_lse", "qv", "cu_seqlens_q" and
/// "cu_seqlens_k", `c.term` names them; `relative_terms`: the Transformer-XL / XLNet /
/// Funnel or DeBERTa terms are given. UsageError ("--forward-output: needs
/// --grad-output") for one without the other, either without grad_output, and where the
/// backward runs a forward of its own: qv (Q||qv over K||V), the varlen form (each
/// sequence's), the relative terms (held whole with their gradient).
void check_forward_given(bool relative_terms, const Caller& c);

/// The given forward's headers against the backward of Q, K and V of these shapes under
/// `opt` (every tensor input set): InputError in the caller's terms unless `o` is of a
/// float dtype and exactly the output's shape (Q's with dv) and `lse` f32 or f64 of the
/// lse's shape.
void check_forward_shapes(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                          const AttentionOptions& opt, const TensorInfo& o,
                          const TensorInfo& lse, const Caller& c);

/// Bytes attention_backward would allocate (outputs and work, not the inputs).
std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt = {});

}  // namespace posenc
