#pragma once
/// \file
/// The declared parameters of attention (declare.hpp): the scalar fields of
/// AttentionOptions that are one option and one keyword of the same name, in the order
/// `posenc attention --help` lists them. The command line's options, the Python module's
/// keywords, the ranges checked (`validate_given`) and the field list the tests walk
/// (`posenc._posenc._fields("attention")`) come from here.
///
/// A range is what a value the caller gives must be in; not giving a field leaves its
/// default, which may be outside it (0 = off for sliding_window, -1 = from the rows for
/// max_distance): AttentionOptions has no "unset". A real field's `lo` is exclusive: a
/// given value must be finite and above it (0: a positive number).
///
/// Shapes beyond one value: `--causal [ALIGN]` and `--alibi [VARIANT]` are choices whose
/// option may go without its word (Field::optional_word; Python True), --alibi's names
/// setting two members (alibi, alibi_before_scale); `--window LEFT[,RIGHT]` is two
/// members (Sides; Python LEFT or (LEFT, RIGHT)); --attn-temperature SCALE FLOOR and
/// --llama4-scaling BETA PERIOD are two numbers into two members each (Numbers); --dtype is
/// parsed by the library's parse_dtype (Parsed). The rules between fields and tensor
/// inputs are `check_given`. The tensor inputs are `declare_tensors` (TensorSlot), the
/// relative window (--relative-left/right/sign/beyond) the optional RelativeWindow's own
/// declaration, --grid / --key-grid H W DecomposedGrids' (two Pairs into size_t members),
/// --arith AttentionArith's (RoPE's names and fa-baseline; the command binds it among the
/// ROPE OPTIONS), --max-memory MemoryBudget's (a size; Python an int of bytes).
///
/// Not declared, bound by each front end: --t5-bidirectional / --t5-causal
/// (t5_bidirectional, keyword t5_causal; check_given knows them by these names), --emit
/// (a comma list or a Python sequence, names the gradients with --grad-output),
/// and --precision (bound with the ROPE OPTIONS, which share it).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_cache.hpp"
#include "posenc/ops/rope_stream.hpp"

namespace posenc {

namespace fields {

inline const Names<MaskedRows>& masked_rows_names() {
  static const Names<MaskedRows> n{{"zero", MaskedRows::zero}, {"nan", MaskedRows::nan}};
  return n;
}
/// The causal mask's alignments (`--causal` alone: bottom-right).
inline const Names<CausalAlign>& causal_names() {
  static const Names<CausalAlign> n{{"bottom-right", CausalAlign::bottom_right},
                                    {"top-left", CausalAlign::top_left}};
  return n;
}
/// ALiBi's forms: the variant and whether the bias is added before the scale (Falcon).
inline const Names<std::tuple<AlibiVariant, bool>>& alibi_names() {
  using V = AlibiVariant;
  static const Names<std::tuple<V, bool>> n{
      {"causal", {V::causal, false}},     {"symmetric", {V::symmetric, false}},
      {"bottom-right", {V::bottom_right, false}}, {"fairseq", {V::fairseq, false}},
      {"bloom", {V::fairseq, false}},     {"falcon", {V::fairseq, true}}};
  return n;
}
/// FlashAttention's intermediate dtypes (AttentionOptions::p_dtype holds the name).
inline const Names<std::string>& p_dtype_names() {
  static const Names<std::string> n{
      {"f32", "f32"}, {"f16", "f16"}, {"bf16", "bf16"}, {"e4m3fn", "e4m3fn"}, {"e5m2", "e5m2"}};
  return n;
}

}  // namespace fields

template <class V>
void declare(V& v, AttentionOptions& o) {
  v(field("axes", "axis letters of Q, K and V (b, h, s, d); default bhsd, bsd or sd by rank"),
    o.axes);
  v(field("scale", "multiplies q.k (default 1/sqrt(d); 1 for T5)").at_least(0), o.scale);
  v(field("sliding_window",
          "HF sliding_window W: keys with j > pos(i) - W (W keys with --causal), and "
          "j < pos(i) + W without --causal; equals --window W-1[,W-1]")
        .at_least(1),
    o.sliding_window);
  v(field("chunk_size",
          "chunked attention (Llama-4 attention_chunk_size C): keys with floor(j / C) == "
          "floor(pos(i) / C), pos(i) = i + sk - sq (a negative position sees no key, as "
          "FlashAttention)")
        .at_least(1),
    o.chunk_size);
  v(field("sink_tokens",
          "StreamingLLM sink tokens (FlashAttention sink_token_length N): the first N "
          "keys (of each packed sequence) stay visible left of --window or "
          "--sliding-window; not the --sinks logits")
        .at_least(0),
    o.sink_tokens);
  v(field("alibi_max_bias", "ALiBi slopes 2^(-max_bias (h+1)/H) (default 8)").at_least(0),
    o.alibi_max_bias);
  v(field("t5_buckets", "T5 buckets (default 32)"), o.t5_buckets);
  v(field("t5_max_distance", "T5 max distance (default 128)"), o.t5_max_distance);
  v(field("clipped_symmetric",
          "--clipped-bias is HF's bias_symmetric table [M, hq], indexed by |clip(j-pos(i))|"),
    o.clipped_symmetric);
  v(field("global_block_size",
          "G of --global-kv (HF global_block_size): token i is in global block "
          "floor(i/G) as HF computes it, padding in none")
        .from(1, std::int64_t{1} << 31, "2^31"),
    o.global_block_size);
  v(field("max_distance", "M of the relative tables (default: from their rows)").at_least(0),
    o.max_distance);
  v(field("softcap", "soft-cap C: logits = C tanh(scale q.k / C)").at_least(0), o.softcap);
  v(field("p_dtype",
          "round the normalised probabilities P to f32|f16|bf16|e4m3fn|e5m2 before P.V "
          "(FlashAttention's intermediate_dtype)"),
    choice(o.p_dtype, fields::p_dtype_names()));
  v(field("k_scale",
          "vLLM's per-tensor fp8 KV-cache scale S: K times S, as --k-descale filled with S "
          "(S rounded to float32, each product in float32, FlashAttention's descale "
          "arithmetic); not with --k-descale")
        .at_least(0),
    o.k_scale);
  v(field("v_scale",
          "vLLM's per-tensor fp8 KV-cache scale S of V: V times S, as --v-descale filled "
          "with S; not with --v-descale")
        .at_least(0),
    o.v_scale);
  v(field("masked_rows", "rows with every key masked: zero (probs 0, output 0; default) or nan"),
    choice(o.masked_rows, fields::masked_rows_names()));
  v(field("allow_nonfinite",
          "compute with NaN/Inf inputs (they propagate) instead of refusing them"),
    o.allow_nonfinite);
  v(field("causal",
          "causal mask aligned bottom-right (default; flash-attn, and HF with a KV cache) or "
          "top-left (torch SDPA is_causal) when sq != sk")
        .optional_word("bottom-right", "[ALIGN]"),
    choice(o.causal, fields::causal_names()));
  v(field("window",
          "LEFT[,RIGHT]: query i sees keys [i+sk-sq-LEFT, i+sk-sq+RIGHT] inclusive; -1 = "
          "unbounded (RIGHT defaults to -1)")
        .from(-1, std::int64_t{1} << 53, "2^53")
        .sides("LEFT", "RIGHT"),
    sides(o.window_left, o.window_right, -1));
  v(field("alibi",
          "ALiBi bias: causal (default; -m(i-j)), symmetric (-m|i-j|), bottom-right "
          "(-m|i+sk-sq-j|), fairseq or bloom (m j), falcon (m j before the scale)")
        .optional_word("causal", "[VARIANT]"),
    choice(std::tie(o.alibi, o.alibi_before_scale), fields::alibi_names()));
  v(field("attn_temperature",
          "Llama-4 temperature tuning: scores of the query at position p times 1 + SCALE "
          "log1p(floor((p + 1) / FLOOR)) (HF attn_scale, floor_scale)")
        .sides("SCALE", "FLOOR"),
    numbers(
        o.temperature_scale, o.temperature_floor,
        [](double scale, double floor) { return std::isfinite(scale) && floor > 0; },
        "a number and a positive floor"));
  v(field("llama4_scaling",
          "Llama-4 query scaling as Ministral-3 applies it: queries at position p times 1 + "
          "BETA log(1 + floor(p / PERIOD)) (HF llama_4_scaling_beta, "
          "original_max_position_embeddings)")
        .sides("BETA", "PERIOD"),
    numbers(
        o.llama4_scaling_beta, o.llama4_scaling_period,
        [](double beta, double period) {
          return std::isfinite(beta) && period >= 1 && period <= 9.0e15 &&
                 period == std::floor(period);
        },
        "a number and a positive whole period"));
  v(field("dtype", "output dtype f64|f32|f16|bf16 (default: that of Q; bf16 for fp8 Q)"),
    parsed(o.dtype, &parse_dtype, "dtype"));
}

/// A per-tensor scale (k_scale, v_scale) against the descales of the same operand: one
/// scale per operand. attention() checks it too, naming the fields (attention_fa.cpp).
inline void check_kv_scales(const Caller& c) {
  for (const char* x : {"k", "v"}) {
    const std::string scale = std::string(x) + "_scale", descale = std::string(x) + "_descale";
    if (c.gave(scale) && c.gave(descale)) {
      throw UsageError(c.term(scale) + ": not with " + c.term(descale) +
                       " (the scale is the descale of every entry; give one)");
    }
  }
}

/// The rules between declared fields and between a field and a tensor input, checked by
/// each front end once the fields are set and before any tensor is read: `c.gave` knows
/// the fields, the tensor inputs (declare_tensors: "alibi_slopes", "t5_bias",
/// "global_kv") and the T5 bucket direction (t5_bidirectional, t5_causal) given. Messages
/// in the caller's terms: "alibi_max_bias needs alibi", "--alibi-max-bias needs --alibi".
inline void check_given(const AttentionOptions& o, const Caller& c) {
  check_kv_scales(c);
  if (o.clipped_symmetric && !c.gave("clipped_bias")) {
    throw UsageError(c.term("clipped_symmetric") + ": needs " + c.term("clipped_bias"));
  }
  if (c.gave("wavlm_gate") && !c.gave("t5_bias")) {
    throw UsageError(c.term("wavlm_gate") + ": gates the " + c.term("t5_bias") + " term; give " +
                     c.term("t5_bias"));
  }
  if (!c.gave("global_kv") && (c.gave("global_block_size") || c.gave("global_bias"))) {
    throw UsageError(c.term("global_block_size") + "/" + c.term("global_bias") + ": only with " +
                     c.term("global_kv"));
  }
  if (c.gave("global_kv") && !c.gave("global_block_size")) {
    throw UsageError(c.term("global_kv") + ": needs " + c.term("global_block_size") + " G");
  }
  if (c.gave("alibi_max_bias") && c.gave("alibi_slopes")) {
    throw UsageError(c.term("alibi_max_bias") + ": not with " + c.term("alibi_slopes") +
                     " (the slopes are given)");
  }
  if (c.gave("alibi_max_bias") && !c.gave("alibi")) {
    throw UsageError(c.term("alibi_max_bias") + " needs " + c.term("alibi"));
  }
  const bool tables = c.gave("relative_k") || c.gave("relative_v");
  if (c.gave("max_distance") && !tables) {
    throw UsageError(c.term("max_distance") + " needs " + c.term("relative_k") + " or " +
                     c.term("relative_v"));
  }
  const char* window[] = {"relative_left", "relative_right", "relative_sign", "relative_beyond"};
  if (!tables && !c.gave("relative_proj") &&
      std::any_of(std::begin(window), std::end(window), c.gave)) {
    throw UsageError(c.term("relative_left") + "/" + c.term("relative_right") + "/" +
                     c.term("relative_sign") + "/" + c.term("relative_beyond") + " need " +
                     c.term("relative_k") + ", " + c.term("relative_v") + " or " +
                     c.term("relative_proj"));
  }
  if (!c.gave("decomposed_rel_pos") && (c.gave("grid") || c.gave("key_grid"))) {
    throw UsageError(c.term("grid") + "/" + c.term("key_grid") + ": only with " +
                     c.term("decomposed_rel_pos"));
  }
  if (c.gave("decomposed_rel_pos") && !c.gave("grid")) {
    throw UsageError(c.term("decomposed_rel_pos") + ": needs " + c.term("grid") +
                     " H W (the query grid)");
  }
  // The bucket options shape the T5 tables: t5_bias's, or the global side's global_bias.
  const char* buckets[] = {"t5_buckets", "t5_max_distance", "t5_bidirectional", "t5_causal"};
  if (c.gave("t5_bias") || c.gave("global_bias")) return;
  bool given = false;
  std::string names;  // those the caller has, as it spells them
  for (const char* n : buckets) {
    if (c.term(n).empty()) continue;
    given = given || c.gave(n);
    names += (names.empty() ? "" : "/") + c.term(n);
  }
  if (given) {
    throw UsageError(names + " need " + c.term("t5_bias") + " or " + c.term("global_bias"));
  }
}

/// The gradients a caller names (emit with grad_output, gradient_fields()): each one of
/// gradient_names(), dsinks only with sinks given and dqv only with qv. UsageError in the
/// caller's terms: "emit dsinks: needs sinks", "--emit dsinks: needs --sinks".
inline void check_gradient_emit(const std::vector<std::string>& names, const Caller& c) {
  for (const std::string& n : names) {
    const std::string emit = c.term("emit") + " " + n + ": ";
    if (find_gradient(n) == nullptr) {
      throw UsageError(emit + "with " + c.term("grad_output") + ", expected " + gradient_names());
    }
    for (const char* input : {"sinks", "qv"}) {
      if (n == std::string("d") + input && !c.gave(input)) {
        throw UsageError(emit + "needs " + c.term(input));
      }
    }
  }
}

/// The relative tables' window (AttentionOptions::relative_window), a group of fields
/// that sets the optional member when any of them is given (checked_window).
template <class V>
void declare(V& v, RelativeWindow& w) {
  const std::int64_t k2p30 = std::int64_t{1} << 30;
  v(field("relative_left",
          "L: an asymmetric window, tables of L + R + 1 rows indexed clip(d, -L, R) + L "
          "(Wav2Vec2-BERT left_max_position_embeddings 64); with --relative-right")
        .from(0, k2p30, "2^30"),
    w.left);
  v(field("relative_right", "R of the window (Wav2Vec2-BERT right_max_position_embeddings 8)")
        .from(0, k2p30, "2^30"),
    w.right);
  v(field("relative_sign",
          "distance d of the relative tables: k-q (j - i, default) or q-k (i - j, SpeechT5)"),
    choice(w.q_minus_k, fields::distance_signs()));
  v(field("relative_beyond",
          "pairs outside [-L, R]: clamp (the edge row, default) or zero (no term, VITS)"),
    choice(w.zero_beyond, fields::beyond_rules()));
}
/// "relative_left/relative_right: give both (or max_distance for both sides)".
inline void check_given(const RelativeWindow&, const Caller& c) {
  if (c.gave("relative_left") != c.gave("relative_right")) {
    throw UsageError(c.term("relative_left") + "/" + c.term("relative_right") + ": give both (or " +
                     c.term("max_distance") + " for both sides)");
  }
}
/// The window of the fields a caller gave, `w` read from them onto RelativeWindow{}:
/// check_given, then each side's range ("relative_left: must be from 0 to 2^30, got -1");
/// sides not given are -1 (from the table's rows).
inline RelativeWindow checked_window(RelativeWindow w, const Caller& c) {
  check_given(w, c);
  validate(w);
  if (!c.gave("relative_left")) w.left = w.right = -1;
  return w;
}

/// The query and key grids of the decomposed relative positions (AttentionOptions::grid_h,
/// grid_w, key_grid_h, key_grid_w; `--grid H W`, Python `grid=(H, W)`), set by set_grids.
struct DecomposedGrids {
  std::int64_t grid_h = 0, grid_w = 0, key_grid_h = 0, key_grid_w = 0;
};
template <class V>
void declare(V& v, DecomposedGrids& g) {
  const std::int64_t k2p31 = std::int64_t{1} << 31;
  v(field("grid",
          "the queries' grid: H rows of W in row-major order (H W = sq), for "
          "--decomposed-rel-pos")
        .from(1, k2p31, "2^31")
        .value_name("H W"),
    pair(g.grid_h, g.grid_w));
  v(field("key_grid", "the keys' grid H W (H W = sk; default: --grid), for --decomposed-rel-pos")
        .from(1, k2p31, "2^31")
        .value_name("H W"),
    pair(g.key_grid_h, g.key_grid_w));
}
/// Sets the grids of `o` from those of `g` the caller gave (`c.gave`; check_given has
/// joined them to decomposed_rel_pos), each side in its field's range: UsageError "grid 0
/// 12: sides must be from 1 to 2^31".
inline void set_grids(AttentionOptions& o, DecomposedGrids g, const Caller& c) {
  struct InRange {
    const Caller& c;
    void operator()(const Field& f, Pair p) const {
      if (!c.gave(f.name)) return;
      if (p.first < *f.lo || p.first > *f.hi || p.second < *f.lo || p.second > *f.hi) {
        throw UsageError(fmt::format("{} {} {}: sides must be from {} to {}", f.name, p.first,
                                     p.second, *f.lo, f.hi_text));
      }
    }
  } in_range{c};
  declare(in_range, g);
  o.grid_h = static_cast<std::size_t>(g.grid_h);
  o.grid_w = static_cast<std::size_t>(g.grid_w);
  o.key_grid_h = static_cast<std::size_t>(g.key_grid_h);
  o.key_grid_w = static_cast<std::size_t>(g.key_grid_w);
}

/// The range errors of the fields a caller gave (declare.hpp's visitor protocol):
/// "<name> <value>: must be ..." as UsageError.
class GivenValidator {
 public:
  explicit GivenValidator(const std::vector<std::string>& given) : given_(given) {}

  template <class T>
  void operator()(const Field& f, const T& value) {
    if (!f.lo || !is_given(f.name)) return;
    if constexpr (std::is_floating_point_v<T>) {
      if (value > *f.lo && std::isfinite(value)) return;
      throw UsageError(*f.lo == 0
                           ? fmt::format("{} {}: must be a positive number", f.name, value)
                           : fmt::format("{} {}: must be a number above {}", f.name, value, *f.lo));
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const auto v = static_cast<std::int64_t>(value);
      if (f.hi && (v < *f.lo || v > *f.hi)) {
        throw UsageError(fmt::format("{} {}: must be from {} to {}", f.name, v, *f.lo,
                                     f.hi_text.empty() ? std::to_string(*f.hi) : f.hi_text));
      }
      if (v >= *f.lo) return;
      throw UsageError(*f.lo == 0 ? fmt::format("{} {}: must be >= 0", f.name, v)
                                  : fmt::format("{} {}: must be at least {}", f.name, v, *f.lo));
    }
  }
  template <class M, class E>
  void operator()(const Field&, const Choice<M, E>&) {}  // a name table holds only valid values

 private:
  bool is_given(const std::string& name) const {
    for (const std::string& g : given_) {
      if (g == name) return true;
    }
    return false;
  }
  const std::vector<std::string>& given_;
};

/// Checks the declared ranges of the fields of `o` named in `given` (the caller's own
/// values; defaults stand for "off" and are not checked here). Throws UsageError naming
/// the field: "sliding_window 0: must be at least 1".
inline void validate_given(const AttentionOptions& o, const std::vector<std::string>& given) {
  GivenValidator v(given);
  declare(v, const_cast<AttentionOptions&>(o));  // the validator only reads
}

/// AttentionOptions' tensor inputs, in the order --help lists them: those that are one
/// option and one keyword of the same name (TensorSlot: --mask REF, Python mask=m), then
/// those given several under one option, each into its member (TensorSlots): --wavlm-gate
/// X W B C (Python wavlm_gate=(x, w, b, c)), --global-kv KG VG, --decomposed-rel-pos RH
/// RW, whose messages name the members (gate_input, ..., rel_pos_w). The command line binds
/// them and the Python module reads them from here, once check_given has passed. Not here:
/// score_bias (the relative schemes' own, no option).
template <class V>
void declare_tensors(V& v, AttentionOptions& o) {
  v(field("key_lengths", "[b] integers: keys at or after the length are padding (masked)"),
    tensor_slot(o.key_lengths));
  v(field("seqused_q",
          "[b] integers (FlashAttention seqused_q): entry b uses its first queries, the rest "
          "output 0; masks align to the entry's own lengths"),
    tensor_slot(o.seqused_q));
  v(field("seqused_k",
          "[b] integers (FlashAttention seqused_k): entry b uses its first keys; causal, "
          "windows, chunks and sink tokens align to i + seqused_k - seqused_q"),
    tensor_slot(o.seqused_k));
  v(field("cu_seqlens_q",
          "FlashAttention varlen: int32/int64 boundaries [n+1] of the sequences in packed Q "
          "[total_q, hq, d] (--axes shd); with --cu-seqlens-k, each sequence a run of its own; "
          "lse [hq, total_q]"),
    tensor_slot(o.cu_seqlens_q));
  v(field("cu_seqlens_k",
          "FlashAttention varlen: boundaries [n+1] in packed K, V [total_k, hk, d]; with "
          "--seqused-q/-k [n] only the first rows of each sequence are used"),
    tensor_slot(o.cu_seqlens_k));
  v(field("mask", "bool/int (true = keep) or additive float mask, broadcastable to [b, h, sq, sk]"),
    tensor_slot(o.mask));
  v(field("alibi_slopes",
          "ALiBi slopes [hq] or [b, hq] (FlashAttention alibi_slopes), in place of "
          "--alibi-max-bias's; alone: slope*j with --causal, else -slope*|i + sk - sq - j| "
          "(each entry's own lengths)"),
    tensor_slot(o.alibi_slopes));
  v(field("t5_bias", "T5 relative bias embedding [buckets, hq]"), tensor_slot(o.t5_bias));
  v(field("clipped_bias",
          "Phi-4-multimodal audio bias_values [2M, hq]: logits += table[clip(j-pos(i), -M, "
          "M-1) + M] (HF Phi4MultimodalAudioRelativeAttentionBias)"),
    tensor_slot(o.clipped_bias));
  v(field("global_bias",
          "HF global_relative_attention_bias [buckets, hq]: side score (i, g) += "
          "table[t5_bucket(g - block(i))], with the --t5-* bucket options"),
    tensor_slot(o.global_bias));
  v(field("relative_k",
          "Shaw relative key table [2M+1, d] (or per head [2M+1, hq, d]): logits += "
          "q.rk[clip(j-i,-M,M)+M]"),
    tensor_slot(o.relative_k));
  v(field("relative_v",
          "Shaw relative value table [2M+1, dv]: output += sum_j p_ij rv[clip(j-i)+M]"),
    tensor_slot(o.relative_v));
  v(field("relative_proj",
          "Gemma-3n audio: pos_proj.weight W [hq*d, D]; --relative-k becomes the per-head "
          "table W timing(i-j) over --relative-left/--relative-right (timing: [sin | cos] of "
          "(i-j) exp(-c ln(1e4)/max(D/2-1,1)), HF Gemma3nAudioRelativePositionEmbedding)"),
    tensor_slot(o.relative_proj));
  v(field("per_dim_scale",
          "Gemma-3n audio: per_dim_scale P [d]; query dim c times softplus(P_c), default "
          "--scale 1/(sqrt(d) ln 2) (HF Gemma3nAudioAttention q_scale)"),
    tensor_slot(o.per_dim_scale));
  v(field("sinks", "[hq] sink logits (gpt-oss): an extra softmax column"), tensor_slot(o.sinks));
  v(field("qv",
          "FlashAttention-3 qv, Q's shape with dv: scores += scale qv.v (V repeated over the "
          "group); default scale 1/sqrt(d + dv)"),
    tensor_slot(o.qv));
  v(field("q_descale",
          "FlashAttention fp8 descale [b, hk], finite and positive: Q and qv (each head by its "
          "KV head's) multiplied by it in float32 first"),
    tensor_slot(o.q_descale));
  v(field("k_descale",
          "FlashAttention fp8 descale [b, hk], finite and positive: K multiplied by it in "
          "float32 first"),
    tensor_slot(o.k_descale));
  v(field("v_descale",
          "FlashAttention fp8 descale [b, hk], finite and positive: V multiplied by it in "
          "float32 first"),
    tensor_slot(o.v_descale));
  v(field("wavlm_gate",
          "WavLM's gate on --t5-bias: the layer's hidden states X [b, sq, hidden], "
          "gru_rel_pos_linear W [8, hidden/hq] and B [8], gru_rel_pos_const C [hq]; "
          "query i of head h gets bias times a (g C_h - 1) + 2 (HF WavLMAttention)"),
    tensor_slots({&o.gate_input, &o.gate_weight, &o.gate_bias, &o.gate_const},
                 {"gate_input", "gate_weight", "gate_bias", "gate_const"}, "X W B C",
                 "the four tensors"));
  v(field("global_kv",
          "LongT5 transient-global side keys and values [b, hk, n, d] and [b, hk, n, "
          "dv], n = sk / G (HF k(global_inputs), v(global_inputs)): every query "
          "also sees the global blocks of its sequence, as columns sk .. sk+n-1"),
    tensor_slots({&o.global_k, &o.global_v}, {"global_k", "global_v"}, "KG VG",
                 "the side keys and values"));
  v(field("decomposed_rel_pos",
          "SAM / ViTDet decomposed relative positions: tables RH [LH, d] and RW [LW, d]; "
          "logits += q.RH[row offset] + q.RW[column offset] over --grid (HF "
          "add_decomposed_rel_pos; tables resized linearly to 2 max(q, k) - 1 rows)"),
    tensor_slots({&o.rel_pos_h, &o.rel_pos_w}, {"rel_pos_h", "rel_pos_w"}, "RH RW",
                 "the two tables"));
}

/// The KV-cache step's inputs (FlashAttention's flash_attn_with_kvcache arguments), in
/// the order --help lists them: its tensors, then the rotation's pairing.
template <class V>
void declare(V& v, KvCacheOptions& k) {
  v(field("page_table",
          "paged cache: -k/-v are [num_blocks, page_size, hk, d] pages and this [b, max_blocks] "
          "integer tensor their ids per entry"),
    tensor_slot(k.page_table));
  v(field("cache_seqlens",
          "[b] tokens already in each entry's cache (-k/-v are then the caches [b_cache, "
          "s_cache, hk, d]); default: all"),
    tensor_slot(k.cache_seqlens));
  v(field("cache_batch_idx", "[b] cache row (or page-table row) of each entry"),
    tensor_slot(k.cache_batch_idx));
  v(field("cache_leftpad", "[b] first valid cache row of each entry"),
    tensor_slot(k.cache_leftpad));
  v(field("k_new", "new keys [b, s_new, hk, d], stored at cache_seqlens before attending"),
    tensor_slot(k.k_new));
  v(field("v_new", "new values [b, s_new, hk, dv] (with --k-new)"), tensor_slot(k.v_new));
  v(field("cu_seqlens_k_new",
          "[b+1] int32/int64 offsets packing the new keys: --k-new/--v-new are [total_new, hk, "
          "d], entry b's rows [cu[b], cu[b+1]) (varlen)"),
    tensor_slot(k.cu_seqlens_k_new));
  v(field("rotary_cos",
          "[s_rot, rotary_dim/2] cos table (any float dtype, used as given) rotating q and the "
          "new keys at cache_seqlens"),
    tensor_slot(k.rotary_cos));
  v(field("rotary_sin", "the sin table (with --rotary-cos)"), tensor_slot(k.rotary_sin));
  v(field("rotary_seqlens",
          "[b] rotary position of each entry's first new token (default cache_seqlens)"),
    tensor_slot(k.rotary_seqlens));
  v(field("rotary_interleaved",
          "rotate adjacent pairs (GPT-J; FlashAttention's default) instead of halves"),
    k.rotary_interleaved);
}

/// AttentionOptions' tensor inputs as a request of their own (declare_tensors), for the
/// field lists the tests walk.
struct AttentionTensors {
  AttentionOptions options;
};
template <class V>
void declare(V& v, AttentionTensors& t) {
  declare_tensors(v, t.options);
}

/// `f(kind, Request{})` for attention's tensor inputs (kind attention) and the KV-cache
/// step's inputs (kind kvcache).
template <class F>
void for_each_attention_input(F&& f) {
  f("attention", AttentionTensors{});
  f("kvcache", KvCacheOptions{});
}

/// `f(name, Request{})` for every declared attention request (AttentionOptions, its
/// relative window and its decomposed grids): the field lists the tests walk.
namespace fields {
/// attention's arithmetics (AttentionOptions::arith, fa_baseline): RoPE's (meta and ggml
/// named to be refused with a message) and FlashAttention's PyTorch baseline.
inline const Names<std::tuple<Arith, bool>>& attention_ariths() {
  static const Names<std::tuple<Arith, bool>> n{{"exact", {Arith::exact, false}},
                                                {"hf", {Arith::hf, false}},
                                                {"fa-baseline", {Arith::exact, true}},
                                                {"meta", {Arith::meta, false}},
                                                {"ggml", {Arith::ggml, false}}};
  return n;
}
}  // namespace fields

/// --arith of `posenc attention` (keyword arith): exact, hf (HF eager attention's bits) or
/// fa-baseline (FlashAttention's PyTorch baseline, attention_fa.cpp). The command binds it
/// among the ROPE OPTIONS, which share it.
struct AttentionArith {
  Arith arith = Arith::exact;
  bool fa_baseline = false;
};

template <class V>
void declare(V& v, AttentionArith& a) {
  v(field("arith",
          "exact (default); hf: HF transformers' eager attention (and RoPE with --rope) in "
          "the model dtype, element operations bit for bit as torch's CPU kernels; "
          "fa-baseline: FlashAttention's PyTorch baseline (attention_ref upcast=False, "
          "reorder_ops=True), each op rounded to Q's dtype as CUDA does"),
    choice(std::tie(a.arith, a.fa_baseline), fields::attention_ariths()));
}

/// The precision applies to exact only (as RoPE's), and attention reproduces HF's
/// arithmetic only: Meta's and ggml's are RoPE's alone. In the caller's terms.
inline void check_given(const AttentionArith& a, const Caller& c) {
  check_given(ArithChoice{a.arith}, c);
  if (a.arith == Arith::meta || a.arith == Arith::ggml) {
    const std::string said = c.term("arith") + " " + arith_name(a.arith);
    throw UsageError(said + ": attention reproduces hf only (rotate Q and K with rope's " +
                     said + ")");
  }
}

/// attention's memory budget: at most physical memory unless told (0: no limit, also when
/// physical memory is unknown).
struct MemoryBudget {
  std::size_t max_memory = physical_memory();
};

template <class V>
void declare(V& v, MemoryBudget& b) {
  v(field("max_memory",
          "memory for inputs, outputs and work (e.g. 64M, 4G, 1.5GiB or bytes; K, M, G, T "
          "are powers of 1024; default: physical memory): with --emit output/lse K and V "
          "are read in chunks that fit (with --grad-output: see GRADIENTS), else the run "
          "fails up front (exit 3)"),
    MemorySize{b.max_memory});
}

template <class F>
void for_each_attention_request(F&& f) {
  const AttentionOptions attention;
  f("attention", attention);
  f("attention", RelativeWindow{});
  f("attention", DecomposedGrids{});
  f("attention", AttentionArith{});
  f("attention", MemoryBudget{});
}

}  // namespace posenc
