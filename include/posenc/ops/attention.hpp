#pragma once
/// \file
/// Reference scaled dot-product attention with every positional scheme posenc knows:
/// RoPE (applied to Q and K before the scores, see `rope_for_attention`), ALiBi, T5
/// relative buckets, Shaw relative key/value tables, causal and sliding-window masks,
/// padding by key lengths, boolean and additive masks, Gemma-2 soft-capping and
/// gpt-oss attention sinks.
///
/// Conventions (the man page repeats them):
/// - Q [b, hq, sq, d], K [b, hk, sk, d], V [b, hk, sk, dv] in any axes order; rank 3
///   (`bsd`, one head) and rank 2 (`sd`) too. hk must divide hq: query head i uses
///   key/value head i / (hq / hk) (grouped-query / multi-query attention).
/// - Positions are aligned bottom-right (KV cache): query i sits at position
///   i + sk - sq, key j at j. Window, T5 and Shaw distances use these positions; the
///   causal mask has both alignments.
/// - Per score: s = scale * (q.k + q.rk[rel(i, j)]) (q first multiplied by
///   softplus(per_dim_scale) per dimension, Gemma-3n audio); s = C tanh(s / C) with a soft-cap C;
///   then ALiBi, T5 and additive-mask biases are added; masked scores become -inf.
///   This final s is what `logits` holds. The softmax subtracts the row maximum; a sink
///   logit (one per query head) joins the denominator and is dropped from the probs.
/// - Output = sum_j p_ij (v_j + rv[rel(i, j)]); lse = log(sum_j exp(s_ij) [+ exp(sink)]).
/// - A row with no unmasked key and no sink ("fully masked") gives probs 0, output 0 and
///   lse -inf under MaskedRows::zero; probs and output NaN (lse -inf) under MaskedRows::nan.
///   K and V may have no keys (sk = 0, FlashAttention's empty sequences): every row is
///   then fully masked.
///
/// Arithmetic: f64 for every input dtype, each output rounded once to its dtype, unless
/// `precision` asks for f32 (the opt-in for speed); Q·K^T and P·V go through BLAS, row
/// sums of the softmax are accumulated in f64. When neither logits nor probs are asked for, keys are processed in blocks with
/// an online (running max / running sum) softmax, so the [sq, sk] matrix is never
/// materialised, and the TensorSource overload reads K and V in chunks of such blocks
/// (out of core). Results do not depend on the thread count: the work is cut into
/// (batch, head, query block) items of a size fixed by the shapes alone, and each item
/// calls single-threaded BLAS (OpenBLAS's own threading changes the rounding with the
/// thread count).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "posenc/encodings/bias.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/tensor.hpp"
#include "posenc/value_source.hpp"

namespace posenc {

/// The tensors `attention` can produce, in the order of the `--emit` list.
enum class AttentionEmit { logits, probs, output, lse };

/// "logits", "probs", "output", "lse".
std::string attention_emit_name(AttentionEmit e);

/// Parses a comma list such as "probs,output" (order kept). An empty string gives the
/// default: probs,output, or probs alone when `has_v` is false. Throws UsageError for
/// unknown names, a name given twice, and output without V.
std::vector<AttentionEmit> parse_attention_emit(const std::string& list, bool has_v);

/// Alignment of the causal mask when sq != sk: bottom-right (flash-attn; query i sees
/// keys j <= i + sk - sq) or top-left (eager/HF default; j <= i).
enum class CausalAlign {
  none,          ///< no causal mask
  bottom_right,  ///< j <= i + sk - sq (flash-attn; --causal, --causal bottom-right)
  top_left       ///< j <= i (torch SDPA is_causal; --causal top-left)
};

/// What a fully masked row gives (see the file comment).
enum class MaskedRows {
  zero,  ///< probs 0, output 0 (flash-attn)
  nan    ///< probs and output NaN (PyTorch's eager softmax)
};

/// `posenc attention`'s options: each field is the option of its name with dashes
/// (`sliding_window` is --sliding-window) unless its comment names another.
struct AttentionOptions {
  /// Axes letters shared by Q, K and V (e.g. "bhsd", "bshd"); empty = by rank
  /// (4 bhsd, 3 bsd, 2 sd).
  std::string axes;
  /// Multiplies q.k; 0 = 1/sqrt(d). Must not be negative.
  double scale = 0;
  CausalAlign causal = CausalAlign::none;  ///< causal mask and its alignment (--causal)
  /// Sliding window, inclusive, like flash-attn: query i attends keys
  /// [i + sk - sq - left, i + sk - sq + right]; -1 = unbounded on that side.
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;  ///< (--window LEFT,RIGHT)
  /// HF's sliding_window W (0 = off): keys j > pos(i) - W, and without a causal mask also
  /// j < pos(i) + W (HF's bidirectional window): `window` W-1 on each side. With
  /// window_left/right too, the narrower side wins.
  std::int64_t sliding_window = 0;
  /// Chunked attention (Llama-4 attention_chunk_size C; 0 = off): a query at position p
  /// sees only keys j with floor(j / C) == floor(p / C) (FlashAttention's
  /// construct_chunk_mask: a negative p is in a chunk of negative positions, no key).
  std::int64_t chunk_size = 0;
  /// StreamingLLM sink tokens (FlashAttention's sink_token_length; 0 = none): the first N
  /// keys (of each packed sequence) stay visible whatever the window's left side (window
  /// or sliding_window); the window's right side, the causal mask, chunks and padding
  /// still apply to them. At most sk. Not the learnable `sinks` logits.
  std::int64_t sink_tokens = 0;
  /// Attention temperature tuning (Llama-4; scale 0 = off): the scores of a query at
  /// position p are multiplied by 1 + temperature_scale * log1p(floor((p + 1) /
  /// temperature_floor)), as scaling the query would, before soft-capping and biases.
  double temperature_scale = 0;
  double temperature_floor = 0;  ///< (--attn-temperature SCALE FLOOR)
  /// Llama-4 attention scaling as Ministral-3 applies it (rope_parameters'
  /// llama_4_scaling_beta; beta 0 = off): queries at position p are multiplied by
  /// 1 + llama4_scaling_beta * log(1 + floor(p / llama4_scaling_period)), the period being
  /// the config's original_max_position_embeddings. Not together with temperature_scale.
  double llama4_scaling_beta = 0;
  std::int64_t llama4_scaling_period = 0;  ///< (--llama4-scaling BETA PERIOD)
  /// [b] integers: keys j >= length[b] are masked (right padding).
  const Tensor* key_lengths = nullptr;
  /// FlashAttention's seqused_q / seqused_k (its padding masks' lengths), [b] integers
  /// each, either alone (the other then the padded length): batch entry b uses its first
  /// seqused_q[b] queries and seqused_k[b] keys, and every mask aligns to the entry's own
  /// lengths, query i at position i + seqused_k[b] - seqused_q[b] (causal in both
  /// alignments, windows, chunks, sink tokens). Padded keys are masked; padded query rows
  /// are fully masked rows (output 0 and lse -inf). Not with key_lengths, cu_seqlens,
  /// position-dependent biases or query scaling (UsageError), nor under arith hf.
  const Tensor* seqused_q = nullptr;
  const Tensor* seqused_k = nullptr;  ///< (seqused_q: the queries)
  /// Packed sequences (flash-attn's varlen cu_seqlens): boundaries 0 = c0 <= c1 <= ...
  /// <= cn = s; token i belongs to the sequence [c_k, c_k+1) that holds it and attends
  /// only to keys of that sequence. Needs sq == sk; empty = one sequence.
  std::vector<std::int64_t> cu_seqlens;
  /// FlashAttention's varlen form (flash_attn_varlen_func's cu_seqlens_q, cu_seqlens_k):
  /// Q packed [total_q, hq, d], K and V [total_k, hk, d] (axes "shd", FlashAttention's
  /// thd; "sd" for one head; no b axis), each an int32 or int64 [n + 1] list of
  /// boundaries from 0 to its total rows, not decreasing. Sequence b is queries
  /// [cu_q[b], cu_q[b+1]) over keys [cu_k[b], cu_k[b+1]), computed as a run of its own
  /// (every mask, window, chunk, sink token and bias by position aligned to its own
  /// lengths; the same bytes). seqused_q / seqused_k are then [n] per sequence (at most
  /// its length): its first queries and keys are used, its other query rows are fully
  /// masked rows. qv is packed as Q, the fp8 descales are [n, hk] (a row per sequence).
  /// The output is Q's shape with dv; lse is [hq, total_q] as FlashAttention's
  /// varlen softmax_lse. Both or neither; only output and lse (default output, lse
  /// without V); not with cu_seqlens, key_lengths, mask, score_bias, global_k,
  /// gate_input, rel_pos_h, arith hf (UsageError).
  const Tensor* cu_seqlens_q = nullptr;
  const Tensor* cu_seqlens_k = nullptr;  ///< (cu_seqlens_q: the queries')
  /// Broadcastable (numpy rules) to the logits shape. bool or integer: true / non-zero
  /// = keep; float: added to the scores (-inf masks).
  const Tensor* mask = nullptr;
  /// ALiBi bias (slopes from alibi_slopes(hq, alibi_max_bias), bias from alibi_bias).
  std::optional<AlibiVariant> alibi;
  double alibi_max_bias = 8.0;  ///< slopes 2^(-max_bias (h+1) / H), > 0
  /// Falcon: the ALiBi bias is added before the scale, s = scale * (q.k + bias).
  bool alibi_before_scale = false;
  /// ALiBi slopes given (FlashAttention's alibi_slopes, vLLM's per-head slopes): float
  /// [hq] or [b, hq] (a row per sequence under cu_seqlens_q), finite; entry b, head h
  /// takes slopes[b, h] (slopes[h]) in place of the generated ones, in the `alibi` form
  /// in force. Without `alibi`, FlashAttention's forms (alibi_form): slope * j when
  /// causal with no left window, else -slope |i + sk_b - sq_b - j| with the entry's own
  /// lengths (seqused_q/k, the KV cache's). Not under arith hf or fa_baseline.
  const Tensor* alibi_slopes = nullptr;
  /// T5 relative bias table [buckets, hq]; bias = table[t5_bucket(key pos - query pos)].
  const Tensor* t5_bias = nullptr;
  int t5_buckets = 32;            ///< HF num_buckets of the T5 bucketing
  int t5_max_distance = 128;      ///< HF max_distance of the T5 bucketing
  bool t5_bidirectional = true;   ///< encoder buckets; false: decoder (--t5-causal)
  /// Phi-4-multimodal audio's clipped-distance bias (HF
  /// Phi4MultimodalAudioRelativeAttentionBias, bias_values.weight): a table [rows, hq];
  /// score (i, j) gains table[row, h] with rel = clip(j - pos(i), -M, M - 1) and row = rel
  /// + M (2 M rows, M = bias_max_distance) or |rel| (clipped_symmetric: M rows; keys M
  /// or more before a query are then refused, HF indexing past the table). Not with
  /// t5_bias.
  const Tensor* clipped_bias = nullptr;
  bool clipped_symmetric = false;  ///< HF bias_symmetric (--clipped-symmetric)
  /// WavLM's gated relative position bias (HF WavLMAttention: gru_rel_pos_linear,
  /// gru_rel_pos_const): the t5_bias term (needed) of query i in head h is multiplied
  /// by gate = a (g c[h] - 1) + 2, a = sigmoid(p0 + p1 + p2 + p3), g = sigmoid(p4 + ... +
  /// p7), p = gate_weight x + gate_bias, x the head's slice h E .. h E + E - 1 of the
  /// layer's input hidden states at query i (E = hidden / hq). Computed in float64.
  /// gate_input: [b, sq, hq E] ([sq, hq E] when Q has no b axis).
  const Tensor* gate_input = nullptr;
  const Tensor* gate_weight = nullptr;  ///< gru_rel_pos_linear.weight [8, E]
  const Tensor* gate_bias = nullptr;    ///< gru_rel_pos_linear.bias [8]
  const Tensor* gate_const = nullptr;   ///< gru_rel_pos_const, hq values ([1, hq, 1, 1] or [hq])
  /// LongT5's transient-global side keys (HF LongT5TransientGlobalAttention): K and V
  /// of the n_global = sk / global_block_size block aggregates, [b, hk, n_global, d] and
  /// [b, hk, n_global, dv] in the axes order of Q (global_v is needed with V, and not
  /// without). They follow the sk keys as columns sk .. sk + n_global - 1 of the scores;
  /// score (i, g) = scale q_i.kg_g + global_bias[bucket(g - block(i)), h] (T5 buckets of
  /// t5_buckets, t5_max_distance, t5_bidirectional), and the query sees side key g when
  /// "g <= the largest block id" equals "token i is not padding" (HF's eq(mask,
  /// global_segment_ids)). block(i) is HF's _make_global_fixed_block_ids: floor(i / G)
  /// computed in float32 as upstream, -1 for padding, the tokens after the last full
  /// block joining it. Padding is read from key_lengths and a boolean mask over keys
  /// alone ([b, 1, 1, sk]). Needs sq == sk; not with cu_seqlens, softcap or query scaling.
  const Tensor* global_k = nullptr;
  /// The side values [b, hk, n_global, dv] (--global-kv KG VG: global_k is KG).
  const Tensor* global_v = nullptr;
  std::int64_t global_block_size = 0;  ///< HF's global_block_size G, >= 1 with global_k
  /// HF's global_relative_attention_bias [buckets, hq], or none (no side bias).
  const Tensor* global_bias = nullptr;
  /// Shaw et al. tables [2M+1, d] and [2M+1, dv], index relative_index(qpos, j, M).
  /// relative_k may also hold one table per query head, [2M+1, hq, d] (Gemma-3n audio's
  /// projected timing signals, HF Gemma3nAudioRelativePositionEmbedding's sin_emb).
  const Tensor* relative_k = nullptr;
  const Tensor* relative_v = nullptr;  ///< the value table (--relative-v), or nullptr
  std::int64_t max_distance = -1;  ///< M; -1 = from the table's rows
  /// The Shaw tables' window as data (left, right, sign, beyond; bias.hpp): the tables
  /// then hold window.rows() rows, and a pair outside a zero_beyond window adds nothing
  /// (Wav2Vec2-BERT's relative_key, SpeechT5, VITS). Unset: {M, M, k-q, clamp}. Sides
  /// both -1: M, M from the rows (or max_distance); other sides not with max_distance.
  std::optional<RelativeWindow> relative_window;
  /// Gemma-3n audio's relative keys from a timing signal (HF
  /// Gemma3nAudioRelativePositionEmbedding; not with relative_k): pos_proj.weight
  /// [hq d, D], D even. relative_k becomes the per-head table [rows, hq, d] whose row for
  /// the query-minus-key distance t (relative_window, both sides given) is
  /// W timing(t) split into heads, timing(t) = [sin(t f_0) .. sin(t f_{D/2-1}) |
  /// cos(t f_0) ..], f_i = exp(-i ln(10^4) / max(D/2 - 1, 1)) (tensor2tensor's
  /// get_timing_signal_1d), all in float64.
  const Tensor* relative_proj = nullptr;
  /// Gemma-3n audio's per-dimension query scale (HF Gemma3nAudioAttention.per_dim_scale,
  /// [d]): query dimension c is multiplied by softplus(p_c) (torch's softplus: x above
  /// 20) before the scores, and the default scale becomes 1 / (sqrt(d) softplus(0)) =
  /// 1 / (sqrt(d) ln 2), HF's q_scale (which HF holds in float32: give scale to match).
  const Tensor* per_dim_scale = nullptr;
  /// SAM / SAM-HQ / ViTDet / GOT-OCR2 decomposed relative positions (HF
  /// SamVisionAttention.add_decomposed_rel_pos): the queries are a grid_h x grid_w grid
  /// in row-major order, the keys a key_grid_h x key_grid_w grid, and score (i, j) gains
  /// q_i.Rh[dh] + q_i.Rw[dw], q_i the query as given (before the scale), Rh and Rw the
  /// tables [Lh, d] and [Lw, d] resized to 2 max(q, k) - 1 rows along each axis as
  /// F.interpolate(mode="linear") does, and dh, dw the row and column offsets of HF's
  /// get_rel_pos (its coordinates scaled by max(k/q, 1), computed in float32 as torch's
  /// default dtype does). The products are summed in float64. Both tables or neither.
  const Tensor* rel_pos_h = nullptr;
  const Tensor* rel_pos_w = nullptr;  ///< the width table Rw [Lw, d] (rel_pos_h: Rh)
  std::size_t grid_h = 0;  ///< query grid rows (grid_h * grid_w = sq); 0 = none
  std::size_t grid_w = 0;  ///< query grid columns
  /// Key grid rows (key_grid_h * key_grid_w = sk); 0 = the query grid's.
  std::size_t key_grid_h = 0;
  std::size_t key_grid_w = 0;  ///< key grid columns; 0 = the query grid's
  /// Additive score terms [b, hq, sq, sk] (b and h only where Q has them), f32 or f64,
  /// already scaled: added to scale * q.k with the Shaw term, before the soft-cap. The
  /// relative schemes of ops/attention_relative.hpp (Transformer-XL, XLNet, DeBERTa)
  /// compute their terms into it.
  const Tensor* score_bias = nullptr;
  /// Soft-cap C > 0 (0 = off): s = C tanh(scale q.k / C), before biases and masks.
  double softcap = 0;
  /// [hq] sink logits (gpt-oss).
  const Tensor* sinks = nullptr;
  MaskedRows masked_rows = MaskedRows::zero;  ///< what a fully masked row gives
  /// What to compute; empty = the default of parse_attention_emit.
  std::vector<AttentionEmit> emit;
  /// Arithmetic; unset = f64 for every input dtype (results rounded once to the output
  /// types); f32 is the opt-in for speed.
  std::optional<Precision> precision;
  /// Type of logits, probs and output; unset = Q's dtype. lse is f64 when that type is
  /// f64, f32 otherwise (f16 and bf16 outputs too, as flash-attn's softmax_lse), rounded
  /// once from the arithmetic.
  std::optional<DType> dtype;
  /// exact: posenc's arithmetic above; hf: HF transformers' eager attention in Q's
  /// dtype, element operation by element operation as torch's CPU kernels (see the man
  /// page, section Arithmetic). Other values are a UsageError.
  Arith arith = Arith::exact;
  /// Fail with InputError before allocating when the outputs and working memory would
  /// need more bytes than this (0 = no limit). The TensorSource overload also counts
  /// the inputs, and streams K and V in chunks that fit.
  std::size_t max_memory = 0;
  /// Otherwise NaN or Inf in Q, K, V, the relative and T5 tables, and NaN or +Inf in a
  /// float mask or the sinks (-Inf masks there), is an InputError. When allowed, they
  /// propagate as in PyTorch's eager attention.
  bool allow_nonfinite = false;
  /// Block sizes (0 = automatic). Tests use them to force several key blocks.
  std::size_t query_block = 0;
  std::size_t key_block = 0;  ///< keys per block (query_block: queries per block)
  /// Where the output may go as it is computed, instead of AttentionResult::output.
  /// Called once, before the computation, with the output's dtype and shape, when the
  /// output is computed in blocks of whole rows that are contiguous in C order: arith
  /// exact, d the last axis and s the one before it (as in bhsd; not bshd). A returned
  /// sink whose writes_at() is true gets every entry through write_at(), from several
  /// threads, the output stays empty and output_streamed is set; the caller commits
  /// the sink (or drops it when attention throws). A null return, or a sink without
  /// write_at, keeps the output in memory. Not called otherwise.
  std::function<TensorSink*(const TensorInfo&)> output_sink;
  /// FlashAttention-3's qv (attention_ref's qv; DeepSeek MLA's absorbed latent queries):
  /// [b, hq, sq, dv] in Q's axes order (Q's shape with dv), needs V. Every score gains
  /// scale * qv_i.v_j (V repeated over the group as K is), and the default scale becomes
  /// 1/sqrt(d + dv). Computed as attention of Q||qv over K||V (concatenated along d, exact
  /// copies counted against max_memory; K and V are then read whole). Not with the terms
  /// that need d (relative_k, relative_proj, per_dim_scale, rel_pos_h, global_k) nor arith
  /// hf (UsageError).
  const Tensor* qv = nullptr;
  /// FlashAttention's fp8 descales, [b, hk] each (b and hk 1 where Q has no such axis),
  /// finite and positive (else InputError naming them): as attention_ref, Q (and qv) are
  /// multiplied by q_descale of their KV head, K by k_descale and V by v_descale, each
  /// product in float32; under fa_baseline rounded back to the input dtype, otherwise kept
  /// in float32 (attention_ref's upcast reference). Not under arith hf.
  const Tensor* q_descale = nullptr;
  const Tensor* k_descale = nullptr;  ///< K's descales (q_descale says how)
  const Tensor* v_descale = nullptr;  ///< V's descales (q_descale says how)
  /// vLLM's per-tensor fp8 KV-cache scales (its attention's k_scale, v_scale; 0 = none):
  /// K is multiplied by k_scale, exactly as by a k_descale [b, hk] filled with it (the
  /// scale rounded to float32, each product in float32: kept in float32, or rounded back
  /// to the input dtype under fa_baseline). vLLM's dequantization convention, cache value
  /// times scale; its paged-attention test rounds the products to the model dtype, which
  /// this does not. Given, positive and finite in float32; not with k_descale, gradients
  /// or arith hf (UsageError).
  double k_scale = 0;
  double v_scale = 0;  ///< V's scale, as k_scale K's (not with v_descale; needs V)
  /// FlashAttention's intermediate_dtype: the normalised probabilities P are rounded to
  /// this type ("f32", "f16", "bf16", "e4m3fn", "e5m2"; posenc/fp8.hpp) before P.V, once
  /// from the arithmetic (the emitted probs are P before rounding). Empty = no rounding.
  /// P is materialised for this: [b, hq, sq, sk] counts against max_memory. Not under
  /// arith hf.
  std::string p_dtype;
  /// FlashAttention's PyTorch baseline (attention_ref with upcast=False, reorder_ops=True,
  /// `out_pt` of its tests) in Q's dtype T (K, V and qv of the same dtype): every torch
  /// operation's result rounded to T as CUDA computes it (k.scale and qv.scale in float32
  /// rounded to T; each einsum accumulated exactly, rounded to float32 then T; soft-cap's
  /// divide, tanh and multiply each rounded; softmax of the rounded scores rounded to
  /// float32 then T; P.V as the einsums). A GPU's GEMMs sum in another order, so bits may
  /// differ from a GPU run, but the error scale is the baseline's. lse is float32 from the
  /// rounded scores. Only with the options attention_ref has (scale, causal, windows,
  /// chunks, sink_tokens, key_lengths, seqused, cu_seqlens, softcap, qv, descales,
  /// p_dtype, dtype); others are a UsageError.
  bool fa_baseline = false;
  /// The fields a config file set (apply_hf_attention: softcap, sliding_window, alibi,
  /// ...), so that a refusal names the file's key rather than an option not given.
  ValueSources sources;
};

/// The emitted tensors (those not asked for are empty) and the parameters used.
struct AttentionResult {
  /// [b, hq, sq, sk] (b and h only where Q has them; sk + n_global columns with
  /// global_k)
  Tensor logits;
  Tensor probs;   ///< same shape as logits
  Tensor output;  ///< Q's shape and axes order with d replaced by dv
  Tensor lse;     ///< [b, hq, sq] (b and h only where Q has them)
  Attrs attrs;    ///< scale, masks, biases, ... for recording with the outputs
  /// The output went to AttentionOptions::output_sink (and `output` is empty).
  bool output_streamed = false;
  /// The tensor for `e`.
  const Tensor& get(AttentionEmit e) const;
  Tensor& get(AttentionEmit e) { return const_cast<Tensor&>(std::as_const(*this).get(e)); }
};

/// The arithmetic type of attention with `opt`: f64, or f32 when opt.precision asks.
DType attention_arith(const AttentionOptions& opt);

/// Computes attention of `q` over `k` (and `v`, may be null when only logits, probs or
/// lse are asked for). Throws UsageError for bad option values (negative scale, bad
/// axes, output without V) and InputError for inconsistent shapes or dtypes (head
/// counts that do not divide, d or length mismatches, masks that do not broadcast,
/// key lengths out of range, the --max-memory limit, non-finite values unless
/// allowed), before any large allocation.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          const AttentionOptions& opt);

/// Attention reading its inputs from sources: Q whole, and K and V streamed in chunks
/// of whole key blocks when only output and lse are asked for (arith exact, seekable
/// sources such as NPY files and HDF5 datasets), so that memory stays within
/// `opt.max_memory` whatever sk is. The chunk is the largest multiple of the key block
/// that fits beside the outputs (not one taken by `opt.output_sink`), Q and the work
/// memory; the key blocks and their order are those of the in-memory run, so the
/// result is byte for byte that of `attention` on the whole tensors. Otherwise (logits
/// or probs, --arith hf, streams) everything is read and the inputs count against the
/// budget. Shapes and the budget are checked from the headers before anything is read:
/// InputError when `opt.max_memory` cannot hold one key block (or, not streaming, the
/// inputs with the outputs and work memory).
AttentionResult attention(TensorSource& q, TensorSource& k, TensorSource* v,
                          const AttentionOptions& opt);

/// Bytes `attention` would allocate for these shapes and options (outputs and working
/// memory, not the inputs), and the names of the emitted tensors that dominate it.
/// Shapes are checked as by `attention`. K and V count as whole copies in the arithmetic
/// type unless the dtypes they are stored as are given: then only when the run makes
/// one (d not the last axis, or a dtype it neither uses as it is nor widens per key
/// block; f16 and bf16 are widened per block).
std::pair<std::size_t, std::string> attention_memory(const Shape& q, const Shape& k, const Shape* v,
                                                     DType q_dtype, const AttentionOptions& opt,
                                                     std::optional<DType> k_dtype = std::nullopt,
                                                     std::optional<DType> v_dtype = std::nullopt);

/// The shape of the scores (logits, probs) for Q and K of these shapes: [b, hq, sq, sk],
/// b and h only where Q has them, sk + n_global columns with global_k. Checks Q, K and the options as `attention` does (V
/// and the emitted tensors aside).
Shape attention_scores_shape(const Shape& q, const Shape& k, DType q_dtype,
                             const AttentionOptions& opt);

/// Applies RoPE to Q and K for attention with the KV-cache alignment: key j at
/// position pos.start + j (or ids[..., j]), query i at pos.start + sk - sq + i (or the
/// last sq ids). Packed sequences (cu_seqlens) need sq == sk. Returns rotated copies
/// of type `out` (the arithmetic type of attention, so no rounding in between).
std::pair<Tensor, Tensor> rope_for_attention(const Tensor& q, const Tensor& k, const Axes& axes,
                                             const RopeFreqs& f, const Positions& pos,
                                             const RopeApplyOptions& opt, DType out);

/// RoPE applied to Q and K inside attention (`posenc attention --rope`).
struct AttentionRope {
  /// The RoPE variant for Q's head dimension. `seq_len` 0 is filled in with the largest
  /// position used plus one.
  std::function<RopeParams(int head_dim)> params;
  Positions positions;     ///< start / ids / cu_seqlens, aligned as rope_for_attention
  RopeApplyOptions apply;  ///< inverse, precision, allow_nonfinite
};

/// Attention with RoPE: checks the shapes as `attention` does, rotates Q and K in the
/// arithmetic type of attention (no rounding in between) and computes attention.
/// Outputs are of Q's dtype unless `opt.dtype` says otherwise.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          AttentionOptions opt, const AttentionRope& rope);

}  // namespace posenc
