#pragma once
/// \file
/// The declared parameters of the table requests (declare.hpp): one `declare` overload
/// per kind of `posenc table`, its fields in the order --help lists them. The command
/// line's options, the Python keywords, the ranges checked and the stubs' keyword lists
/// all come from here. Tensors (learned tables, masks, ids: a file REF on the command
/// line, an array in Python), pairs (--window H W) and lists are declared too; what a
/// kind's fields join (one of two, sizes before a table is read) is its `check_given`.
/// A kind that writes several tables (`--emit cos,sin`) declares the list as an Emits field.
///
/// `for_each_table_kind(f)` calls `f(kind_name, Request{})` for every declared kind.

#include <limits>
#include <string>

#include "posenc/declare.hpp"
#include "posenc/encodings/axial_positions.hpp"
#include "posenc/encodings/complex_order.hpp"
#include "posenc/encodings/cpmant_bucket.hpp"
#include "posenc/encodings/family_sinusoids.hpp"
#include "posenc/encodings/layout_bucket.hpp"
#include "posenc/encodings/longt5_global.hpp"
#include "posenc/encodings/relative_attention.hpp"
#include "posenc/encodings/rope_fields.hpp"  // two_words, grid_orders, rope_styles
#include "posenc/encodings/tables.hpp"
#include "posenc/encodings/window_index.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace fields {

constexpr std::int64_t k2p20 = std::int64_t{1} << 20;
constexpr std::int64_t k2p24 = std::int64_t{1} << 24;
constexpr std::int64_t k2p52 = std::int64_t{1} << 52;

inline const Names<SinusoidalLayout>& sinusoidal_layouts() {
  static const Names<SinusoidalLayout> n{{"interleaved", SinusoidalLayout::interleaved},
                                         {"concat", SinusoidalLayout::concat}};
  return n;
}
inline const Names<AlibiTable>& alibi_tables() {
  static const Names<AlibiTable> n{{"slopes", AlibiTable::slopes},
                                   {"causal", AlibiTable::causal},
                                   {"symmetric", AlibiTable::symmetric},
                                   {"fairseq", AlibiTable::fairseq},
                                   {"bottom-right", AlibiTable::bottom_right}};
  return n;
}
inline const Names<XlForm>& xl_forms() {
  static const Names<XlForm> n{{"transfo-xl", XlForm::transfo_xl},
                               {"xlnet-bi", XlForm::xlnet_bi},
                               {"xlnet-uni", XlForm::xlnet_uni}};
  return n;
}
inline const Names<LayoutAxis>& layout_axes() {
  static const Names<LayoutAxis> n{{"1d", LayoutAxis::positions},
                                   {"x", LayoutAxis::x},
                                   {"y", LayoutAxis::y},
                                   {"xy", LayoutAxis::xy}};
  return n;
}
inline const Names<UdopAxis>& udop_axes() {
  static const Names<UdopAxis> n{{"1d", UdopAxis::positions},
                                 {"horizontal", UdopAxis::horizontal},
                                 {"vertical", UdopAxis::vertical},
                                 {"all", UdopAxis::all}};
  return n;
}
inline const Names<LongT5GlobalMap>& longt5_maps() {
  static const Names<LongT5GlobalMap> n{{"block-ids", LongT5GlobalMap::block_ids},
                                        {"segment-ids", LongT5GlobalMap::segment_ids},
                                        {"side-positions", LongT5GlobalMap::side_positions}};
  return n;
}
inline const Names<bool>& distance_signs() {
  static const Names<bool> n = two_words("k-q", "q-k");
  return n;
}
inline const Names<bool>& beyond_rules() {
  static const Names<bool> n = two_words("clamp", "zero");
  return n;
}
inline const Names<RopeEmit>& rope_emits() {
  static const Names<RopeEmit> n{{"inv-freq", RopeEmit::inv_freq}, {"angles", RopeEmit::angles},
                                 {"cos", RopeEmit::cos},           {"sin", RopeEmit::sin},
                                 {"cos-sin", RopeEmit::cos_sin},   {"cos-sin-cache", RopeEmit::cos_sin_cache}};
  return n;
}
inline const Names<bool>& rope_widths() {
  static const Names<bool> n = two_words("full", "half");
  return n;
}
inline const Names<FunnelFactor>& funnel_factors() {
  static const Names<FunnelFactor> n{{"phi", FunnelFactor::phi},
                                     {"pi", FunnelFactor::pi},
                                     {"psi", FunnelFactor::psi},
                                     {"omega", FunnelFactor::omega}};
  return n;
}
inline const Names<bool>& detr_layouts() {
  static const Names<bool> n = two_words("channels", "tokens");
  return n;
}

// The query and key lengths of the pair tables: either gives the other.
template <class V, class R>
void lengths(V& v, R& r, const char* k_help = "key length K (default: Q)") {
  v(field("q_len", "query length Q (default: K)").at_least(1), r.q_len);
  v(field("k_len", k_help).at_least(1), r.k_len);
}

// The RoPE tables a request writes and their width.
template <class V, class R>
void rope_tables(V& v, R& r) {
  v(field("emit",
          "inv-freq | angles | cos | sin | cos-sin ([2, N, W]: cos then sin) | cos-sin-cache "
          "(vLLM [N, R] = cat(cos_half, sin_half)); default cos-sin; a comma list (cos,sin) "
          "writes each table to its own output or dataset"),
    emits(r.emits, r.emit, rope_emits()));
  v(field("layout",
          "full ([N, R] in the --style pair layout, default) or half ([N, R/2], one column per "
          "frequency as flash-attn takes cos/sin)")
        .flag_for("half_width", "half", "same as --layout half"),
    choice(r.half, rope_widths()));
}

}  // namespace fields

template <class V>
void declare(V& v, SinusoidalRequest& r) {
  v(field("positions", "number of positions N").require().at_least(1), r.positions);
  v(field("dim", "model dimension D (even)").require(), r.dim);
  v(field("base", "frequency base (default 10000)"), r.base);
  v(field("start", "first position (default 0)"), r.start);
  v(field("layout", "interleaved (sin, cos pairs; default) or concat ([sin | cos])"),
    choice(r.layout, fields::sinusoidal_layouts()));
}

template <class V>
void declare(V& v, Rope2dRequest& r) {
  v(field("height", "grid height H (rows)").require().at_least(1), r.height);
  v(field("width", "grid width W (columns)").require().at_least(1), r.width);
  v(field("dim", "head dimension D (multiple of 4)").require(), r.dim);
  v(field("base", "theta base (default 100, as RoPE-ViT)"), r.base);
  v(field("order", "xy (x block first, default) or yx"), choice(r.y_first, fields::grid_orders()));
  v(field("style",
          "pair layout of full-width tables: gptj (default; the seed's complex form) or neox")
        .value_name("TEXT"),
    choice(r.style, fields::rope_styles()));
  fields::rope_tables(v, r);
}

/// The table fields of `posenc table rope` (--emit, --layout); its ROPE OPTIONS and
/// positions are RopeParams' and Positions' declarations (rope_fields.hpp).
template <class V>
void declare(V& v, RopeTableRequest& r) {
  fields::rope_tables(v, r);
}


template <class V>
void declare(V& v, AlibiRequest& r) {
  v(field("heads", "number of heads H (any count)").require(), r.heads);
  fields::lengths(v, r);
  v(field("variant",
          "slopes (default without lengths), causal (default with lengths), symmetric, fairseq "
          "or bottom-right"),
    choice(r.variant, fields::alibi_tables()));
  v(field("max_bias", "ggml max_bias; 8 gives Press's slopes"), r.max_bias);
}

template <class V>
void declare(V& v, RelativeRequest& r) {
  fields::lengths(v, r);
  v(field("max_distance", "clipping distance M on both sides (needed unless --left and --right)"),
    r.max_distance);
  v(field("left",
          "L: the window below 0 (default M; Wav2Vec2-BERT left_max_position_embeddings 64; "
          "SpeechT5 max_length)")
        .from(0, fields::k2p52, "2^52"),
    r.left);
  v(field("right",
          "R: the window above 0 (default M; Wav2Vec2-BERT right_max_position_embeddings 8; "
          "SpeechT5 max_length - 1)")
        .from(0, fields::k2p52, "2^52"),
    r.right);
  v(field("sign",
          "k-q (d = j - i, default; tensor2tensor, Wav2Vec2-BERT, VITS) or q-k (d = i - j; "
          "SpeechT5)"),
    choice(r.q_minus_k, fields::distance_signs()));
  v(field("beyond",
          "clamp (distances outside [-L, R] take the edge row, default) or zero (index -1, a "
          "zero row: VITS)"),
    choice(r.zero_beyond, fields::beyond_rules()));
  v(field("embeddings",
          "learned table REF [L + R + 1, dim] (distance_embedding, pe_k, emb_rel_k): write its "
          "rows gathered, [Q, K, dim] (zeros for -1), instead of the index"),
    r.embeddings);
}
/// The window is checked before a learned table is read.
inline void check_given(const RelativeRequest& r, const Caller& c) {
  if (c.gave("embeddings")) relative_table(r);
}

template <class V>
void declare(V& v, T5BucketRequest& r) {
  fields::lengths(v, r);
  v(field("buckets", "num_buckets (default 32)"), r.buckets);
  v(field("max_distance", "max_distance (default 128)"), r.max_distance);
  v(field("bidirectional", "encoder buckets (default)")
        .negated_by("causal", "decoder buckets (bidirectional=False)"),
    r.bidirectional);
}

template <class V>
void declare(V& v, XlRelativeRequest& r) {
  fields::lengths(v, r, "key length K = memory + Q (default: Q)");
  v(field("dim", "model dimension D (even)").require(), r.dim);
  v(field("form",
          "transfo-xl (p = K-1 .. 0, K rows; default), xlnet-bi (p = K .. -Q+1, K+Q rows) or "
          "xlnet-uni (p = K .. 0, K+1 rows)"),
    choice(r.form, fields::xl_forms()));
  v(field("clamp_len", "clamp p to [-C, C] when C > 0 (HF clamp_len; default 0 = none)"),
    r.clamp_len);
  v(field("base", "frequency base (default 10000)"), r.base);
}

template <class V>
void declare(V& v, FunnelRelativeRequest& r) {
  v(field("seq_len", "the model's input length L").require().at_least(1), r.seq_len);
  v(field("dim", "d_model D (even)").require(), r.dim);
  v(field("block", "block index b (default 0): queries pooled b times").from(0, 62), r.block);
  v(field("shift",
          "1 (keys pooled as the queries, stride 2^b; default) or 2 (the block's first layer: "
          "keys pooled b-1 times, stride 2^(b-1)); HF position_embeds[b][shift-1]"),
    r.shift);
  v(field("separate_cls", "HF separate_cls: the <cls> token pooled apart at position 1 - 2^b"),
    r.separate_cls);
  v(field("truncate_seq",
          "HF truncate_seq (with --separate-cls): the last position dropped at each pooling"),
    r.truncate_seq);
  v(field("base", "frequency base (default 10000)"), r.base);
}

template <class V>
void declare(V& v, FunnelFactorizedRequest& r) {
  v(field("seq_len", "the model's input length L").require().at_least(1), r.seq_len);
  v(field("dim", "d_model D (even)").require(), r.dim);
  v(field("block", "poolings of the queries' tables phi, pi (default 0; HF's block index)")
        .from(0, 62),
    r.block);
  v(field("key_block",
          "poolings of the keys' tables psi, omega (default --block; --block minus 1 in a "
          "block's first layer with pool_q_only)")
        .from(0, 62),
    r.key_block);
  v(field("separate_cls",
          "HF separate_cls: each pooling keeps the first row (the <cls> token) apart"),
    r.separate_cls);
  v(field("truncate_seq", "HF truncate_seq (with --separate-cls): each pooling drops the last row"),
    r.truncate_seq);
  v(field("base", "frequency base (default 10000)"), r.base);
  v(field("emit", "comma list of phi, pi, psi, omega (default all four, in that order)"),
    emits(r.emits, r.emit, fields::funnel_factors()));
}

template <class V>
void declare(V& v, DebertaBucketRequest& r) {
  fields::lengths(v, r);
  v(field("position_buckets", "position_buckets (default 256; <= 0 for plain i - j)"),
    r.position_buckets);
  v(field("max_relative_positions", "max_relative_positions (default 512)").at_least(1),
    r.max_relative_positions);
}

template <class V>
void declare(V& v, WindowIndexRequest& r) {
  v(field("window",
          "window H [W]: rows and columns of tokens (one value: a square window; HF "
          "window_size / patch grid)")
        .require(),
    pair(r.height, r.width, /*one_for_both=*/true));
  v(field("bias_table",
          "learned relative_position_bias_table REF [entries, heads]: write the bias it "
          "gives, [heads, N, N], instead of the index"),
    r.bias_table);
}
inline void check_given(const WindowIndexRequest& r, const Caller& c) {
  if (c.gave("bias_table")) check_window(r.height, r.width);  // before the table is read
}

template <class V>
void declare(V& v, SwinV2CoordsRequest& r) {
  v(field("window", "window H [W] (one value: a square window; HF window_size)").require(),
    pair(r.height, r.width, /*one_for_both=*/true));
  v(field("pretrained_window",
          "P_H [P_W]: HF pretrained_window_size, dividing the offsets instead of the window "
          "(each at least 2)"),
    pair(r.pretrained_height, r.pretrained_width, /*one_for_both=*/true));
  v(field("mlp",
          "W1 B1 W2: HF continuous_position_bias_mlp weights ([hidden, 2], [hidden], [heads, "
          "hidden]); the table is then the bias 16 sigmoid(mlp(coords)) gathered by "
          "relative_position_index, [heads, HW, HW]")
        .count(3, 3),
    spread({&r.mlp_w1, &r.mlp_b1, &r.mlp_w2}));
}

template <class V>
void declare(V& v, LevitIndexRequest& r) {
  v(field("resolution", "grid side R (HF resolution, resolution_in)")
        .require()
        .from(1, kMaxWindowSide),
    r.resolution);
  v(field("stride",
          "query stride s (default 1; 2 for LevitAttentionSubsample: R_out = (R - 1) / s + 1)"),
    r.stride);
  v(field("bias_table",
          "learned attention_biases REF [heads, R^2]: write the bias it gives, [heads, "
          "R_out^2, R^2], instead of the index"),
    r.bias_table);
}
inline void check_given(const LevitIndexRequest& r, const Caller& c) {
  if (c.gave("bias_table")) levit_index_table(r);  // the sizes, before the table is read
}

template <class V>
void declare(V& v, DetrSineRequest& r) {
  v(field("mask", "pixel mask REF [b, H, W] (1 = pixel, 0 = padding)").bool_ok(), r.mask);
  v(field("size", "H W: an all-ones mask [1, H, W] instead of --mask"), pair(r.height, r.width));
  v(field("embedding_dim", "E, channels per axis (HF embedding_dim; DETR passes d_model / 2), even")
        .require(),
    r.embedding_dim);
  v(field("temperature",
          "temperature T (default 10000; DAB-DETR temperature_height with --temperature-width)"),
    r.temperature);
  v(field("temperature_width",
          "DAB-DETR temperature_width: the T of the x channels (default: --temperature)"),
    r.temperature_width);
  v(field("offset",
          "subtracted from the cumulative sums before normalising (Deformable DETR, "
          "Grounding-DINO: 0.5; default 0)"),
    r.offset);
  v(field("normalize", "normalise the cumulative sums (HF normalize, default True)")
        .negated_by("no_normalize",
                    "use the raw cumulative sums (HF normalize=False; DETR normalises)",
                    /*with_positive=*/false),
    r.normalize);
  v(field("scale", "scale of the normalised sums (default 2 pi; needs normalisation)"), r.scale);
  v(field("layout",
          "channels ([b, 2E, H, W], default) or tokens ([b, H*W, 2E], flattened for the "
          "encoder as HF's refactored forward does)"),
    choice(r.tokens, fields::detr_layouts()));
}
inline void check_given(const DetrSineRequest&, const Caller& c) {
  if (c.gave("mask") == c.gave("size")) {
    throw UsageError(c.term("mask") + ": give a pixel mask or " + c.term("size") +
                     " H W (one of them)");
  }
}

template <class V>
void declare(V& v, RtDetrSincosRequest& r) {
  v(field("size", "H W: the feature map's rows and columns").require(), pair(r.height, r.width));
  v(field("embedding_dim", "E (HF encoder_hidden_dim, default 256), a multiple of 4"),
    r.embedding_dim);
  v(field("temperature", "T (HF positional_encoding_temperature, default 10000)"), r.temperature);
}

template <class V>
void declare(V& v, FairseqSinusoidalRequest& r) {
  v(field("positions", "rows N of the weights (not with --input-ids)"), r.positions);
  v(field("dim", "embedding dimension D (>= 4; odd D: a zero column)").require(), r.dim);
  v(field("padding_idx",
          "the row set to zero, and the id of padding tokens (HF padding_idx = pad_token_id; "
          "needed with --input-ids)"),
    r.padding_idx);
  v(field("past_length",
          "HF past_key_values_length added to the positions (default 0; with --input-ids)"),
    r.past_length);
  v(field("input_ids",
          "token ids REF [b, s]: positions (cumsum of non-padding tokens + past) + "
          "padding_idx, as HF create_position_ids_from_input_ids"),
    r.input_ids);
}

template <class V>
void declare(V& v, LayoutBucketRequest& r) {
  v(field("axis",
          "1d (token positions, default), x (bbox[..., 0]), y (bbox[..., 3]) or xy (the x bias "
          "plus the y bias; needs two --bias-table weights)"),
    choice(r.axis, fields::layout_axes()));
  v(field("seq_len", "1d: positions 0 .. S-1 of one row, [1, S, S]")
        .from(1, kMaxLayoutBucketTokens),
    r.seq_len);
  v(field("buckets",
          "num_buckets (HF rel_pos_bins, default 32; rel_2d_pos_bins for boxes, default 64)")
        .from(4, fields::k2p20, "2^20"),
    r.buckets);
  v(field("max_distance",
          "max_distance (HF max_rel_pos, default 128; max_rel_2d_pos for boxes, default 256)")
        .from(1, fields::k2p24, "2^24"),
    r.max_distance);
  v(field("position_ids", "1d: integer positions REF [b, s]"), r.position_ids);
  v(field("bbox", "x, y, xy: integer boxes REF [b, s, 4] (x0, y0, x1, y1 as HF bbox)"), r.bbox);
  v(field("bias_table",
          "learned weight REF [heads, buckets] (nn.Linear rel_pos_bias, rel_pos_x_bias or "
          "rel_pos_y_bias; for xy two: x then y): write the bias it gives, [b, heads, s, s], "
          "instead of the buckets")
        .count(1, 2),
    spread({&r.bias_table, &r.bias_table_y}, {{"bias_table_y", "y, the second"}}));
}
/// Two weights are the x and y of --axis xy, and only then.
inline void check_given(const LayoutBucketRequest& r, const Caller& c) {
  const std::size_t n = c.count("bias_table");
  if (n == 2 && r.axis != LayoutAxis::xy) {
    throw UsageError(c.term("bias_table") + ": two weights are for " + c.term("axis") +
                     " xy (x then y)");
  }
  if (r.axis == LayoutAxis::xy && n != 2) {
    throw UsageError(c.term("axis") + " xy: needs " + c.term("bias_table") +
                     " WX WY (the buckets are per axis: x or y)");
  }
}

template <class V>
void declare(V& v, UdopBucketRequest& r) {
  v(field("axis",
          "1d (token positions, default), horizontal ((x0 + x1) / 2 of --bbox), vertical "
          "((y0 + y1) / 2) or all (the three biases summed; needs three --bias-table weights)"),
    choice(r.axis, fields::udop_axes()));
  v(field("seq_len", "1d without --bbox: positions 0 .. S-1, [1, S, S]")
        .from(1, kMaxLayoutBucketTokens),
    r.seq_len);
  v(field("buckets", "relative_attention_num_buckets (default 32)").from(4, fields::k2p20, "2^20"),
    r.buckets);
  v(field("max_distance", "max_distance (default 128 for 1d, 100 for the boxes)")
        .from(1, fields::k2p24, "2^24"),
    r.max_distance);
  v(field("scaling_factor", "scaling_factor (default 1 for 1d, 100 for the boxes)"),
    r.scaling_factor);
  v(field("bbox",
          "boxes REF [b, s, 4] (x0, y0, x1, y1, UDOP's normalised coordinates; a float32 file "
          "is computed in float32, as HF does)"),
    with_f32(r.bbox, r.bbox_f32));
  v(field("bias_table",
          "learned weight REF [buckets, heads] (relative_attention_bias.weight; for --axis all "
          "three: 1d, horizontal, vertical): write the bias, [b, heads, s, s]")
        .count(1, 3),
    r.bias_tables);
}

template <class V>
void declare(V& v, ComplexOrderRequest& r) {
  v(field("frequency",
          "frequencies w REF: a vector [D], or a table [V, D] of one per word (with "
          "--input-ids)")
        .require(),
    r.frequency);
  v(field("amplitude", "amplitudes r REF, the shape of w (default 1)"), r.amplitude);
  v(field("phase", "initial phases theta REF, the shape of w (default 0)"), r.phase);
  v(field("positions", "rows N for vectors [D]: positions start ..").from(1, fields::k2p52, "2^52"),
    r.positions);
  v(field("start", "position of the first row or token (default 0)"), r.start);
  v(field("input_ids",
          "token ids REF [b, s] into tables [V, D]: token (b, s) at position start + s"),
    r.input_ids);
}

template <class V>
void declare(V& v, AxialPositionsRequest& r) {
  v(field("axial_shape", "N1,N2[,..]: HF axial_pos_shape (1 to 8 sides; product at most 2^40)")
        .require(),
    r.axial_shape);
  v(field("weights",
          "one weight REF per axis, in order, shaped as HF stores them: [N1, 1, d1], [1, N2, "
          "d2], .. (HF weights.0, weights.1; d1 + d2 + .. = hidden)")
        .require()
        .count(1, 8),
    r.weights);
  v(field("positions", "rows N: positions 0 .. N-1 (N at most N1 N2 ..; default the whole table)"),
    r.positions);
  v(field("position_ids",
          "integer positions REF [b, s] (each below N1 N2 ..): the rows HF's eval-mode forward "
          "selects, [b, s, hidden]"),
    r.position_ids);
}
/// The shape and the counts, before any weight is read.
inline void check_given(const AxialPositionsRequest& r, const Caller& c) {
  axial_rows(r.axial_shape);
  if (c.count("weights") != r.axial_shape.size()) {
    throw UsageError(fmt::format("{}: one per axis of {}, {} expected, got {}", c.term("weights"),
                                 c.term("axial_shape"), r.axial_shape.size(), c.count("weights")));
  }
  if (r.positions && c.gave("position_ids")) {
    throw UsageError(c.term("positions") + ": cannot be combined with " + c.term("position_ids"));
  }
}

template <class V>
void declare(V& v, CpmAntBucketRequest& r) {
  v(field("seq_len", "S: one row of S tokens in segment 0 (the position buckets alone), [1, S, S]")
        .from(1, kMaxCpmAntTokens),
    r.seq_len);
  v(field("segments", "HF segment_types (num_segments; default 32)").from(1, kMaxCpmAntSegments),
    r.segments);
  v(field("buckets", "HF position_bias_num_buckets (default 512; at least 4)")
        .from(4, fields::k2p20, "2^20"),
    r.buckets);
  v(field("max_distance", "HF position_bias_max_distance (default 2048)")
        .from(1, fields::k2p24, "2^24"),
    r.max_distance);
  v(field("bias_table",
          "learned relative_attention_bias REF [segments^2 + buckets, heads]: write the bias "
          "it gives, [b, heads, q, k], instead of the buckets"),
    r.bias_table);
  v(field("segment_ids",
          "integer segments REF [b, s] (HF segment; each below --segments), or two: query [b, "
          "q] then key [b, k] segments")
        .count(1, 2),
    spread<std::int64_t>({&r.segment_ids, &r.key_segment_ids},
                         {{"key_segment_ids", "key, the second"}},
                         {"segment_ids", "key_segment_ids"}));
}
/// One of seq_len and segment_ids, and the counts, before a file is read.
inline void check_given(const CpmAntBucketRequest& r, const Caller& c) {
  cpmant_bucket_check(r, c.gave("segment_ids"));
}

template <class V>
void declare(V& v, LongT5GlobalRequest& r) {
  v(field("attention_mask", "HF attention_mask REF [b, s] of 1 (token) and 0 (padding)"),
    r.attention_mask);
  v(field("seq_len", "S: one row of S tokens without padding, [1, S]"), r.seq_len);
  v(field("global_block_size", "HF global_block_size G (default 16)"), r.global_block_size);
  v(field("emit",
          "block-ids (default; HF global_block_ids, -1 for padding), segment-ids (HF "
          "global_segment_ids) or side-positions (g - block(i))"),
    choice(r.emit, fields::longt5_maps()));
}
inline void check_given(const LongT5GlobalRequest& r, const Caller& c) {
  longt5_global_check(r, c.gave("attention_mask"));  // before the mask is read
}

/// What `posenc table --help` says of a kind (`help`, one line) and the dtypes its
/// table may be written as (`dtypes`, the --dtype help; posenc.table's dtype alike).
struct TableAbout {
  const char* help;
  std::string dtypes;
};

namespace fields {
inline const char* const kFloatDtypes =
    "output dtype: f32 (default), f64, f16, bf16 (computed in f64, rounded once)";
inline const char* const kIntDtypes =
    "output dtype: i64 (default), any integer dtype that holds the largest index, f32 or f64";
// The dtypes of an index table that a learned table turns into a bias (`what`: what the
// index holds).
inline std::string bias_dtypes(const char* what) {
  return fmt::format(
      "output dtype: i64 (default) or any integer dtype that holds the largest {}, f32, f64; "
      "with --bias-table f32 (default), f64, f16, bf16",
      what);
}
}  // namespace fields

/// Calls `f(kind, request, compute, about)` for each table kind with declared fields, in
/// the order `posenc table --help` lists them: its request with the kind's presets
/// (beit-index: the class token), the function that computes its table, and its TableAbout.
template <class F>
void for_each_table(F&& f) {
  using namespace fields;
  f("sinusoidal", SinusoidalRequest{}, sinusoidal_table,
    TableAbout{"Vaswani table PE[p,2i] = sin(p w_i), PE[p,2i+1] = cos(p w_i), w_i = "
               "1/base^(2i/D); shape [N, D]",
               kFloatDtypes});
  f("rope2d", Rope2dRequest{}, rope2d_table,
    TableAbout{"axial 2-D RoPE for an H x W grid: D/4 frequencies per axis; shape [H*W, D]",
               kFloatDtypes});
  f("alibi", AlibiRequest{}, alibi_table,
    TableAbout{"ALiBi slopes [H] or bias matrices [H, Q, K] (Press et al.)", kFloatDtypes});
  f("relative", RelativeRequest{}, relative_table,
    TableAbout{"Shaw relative index clip(d, -L, R) + L of the distance d = j-i (or i-j), L = R = "
               "M by default; -1 beyond the window with --beyond zero; shape [Q, K], integers "
               "(or the rows of a learned table gathered, [Q, K, dim])",
               "output dtype: i64 (default), any integer dtype that holds the indices (signed "
               "with --beyond zero), f32 or f64; with --embeddings f32 (default), f64, f16, bf16"});
  f("t5-bucket", T5BucketRequest{}, t5_bucket_table,
    TableAbout{"HF T5 _relative_position_bucket of j - i; shape [Q, K], integers", kIntDtypes});
  f("xl-relative", XlRelativeRequest{}, xl_relative_table,
    TableAbout{"Transformer-XL / XLNet sinusoidal relative table R [rlen, D] = [sin(p w) | cos(p "
               "w)] for the relative positions p of pos_seq (HF TransfoXL, XLNet)",
               kFloatDtypes});
  f("funnel-relative", FunnelRelativeRequest{}, funnel_relative_table,
    TableAbout{"Funnel Transformer relative_shift position embeddings of a block [rows, D] = "
               "[sin(p w) | cos(p w)] for HF relative_pos with pooling (get_position_embeds)",
               kFloatDtypes});
  f("funnel-factorized", FunnelFactorizedRequest{}, funnel_factorized_table,
    TableAbout{"Funnel Transformer factorized attention tables phi, pi [queries, D] and psi, "
               "omega [keys, D] of sin/cos over pooled token positions (HF get_position_embeds)",
               kFloatDtypes});
  f("deberta-bucket", DebertaBucketRequest{}, deberta_bucket_table,
    TableAbout{"DeBERTa-v2/v3 relative positions i - j with log buckets (HF "
               "build_relative_position); shape [Q, K], integers",
               kIntDtypes});
  f("swin-index", WindowIndexRequest{}, window_index_table,
    TableAbout{"Swin relative_position_index of an H x W window: (dy + H-1)(2W-1) + dx + W-1; "
               "shape [HW, HW], integers (or the bias [heads, HW, HW] of a learned table)",
               bias_dtypes("index")});
  WindowIndexRequest beit;
  beit.class_token = true;
  f("beit-index", beit, window_index_table,
    TableAbout{"BEiT / Data2Vec-vision relative_position_index: swin-index with a class token "
               "first and 3 more entries (class to token, token to class, class to class); "
               "shape [HW+1, HW+1], integers (or the bias of a learned table)",
               bias_dtypes("index")});
  f("swinv2-coords", SwinV2CoordsRequest{}, swinv2_coords_table,
    TableAbout{"Swin-V2 relative_coords_table, the input of its position-bias MLP: sign(c) "
               "log2(1 + |c|) / 3 with c = 8 d / (P - 1) for the offsets d of an H x W window; "
               "shape [2H-1, 2W-1, 2] (with --mlp: the bias [heads, HW, HW])",
               kFloatDtypes});
  f("levit-index", LevitIndexRequest{}, levit_index_table,
    TableAbout{"LeViT attention_bias_idxs: offset (|dy|, |dx|) numbered |dy| R + |dx| between "
               "queries (every stride-th point) and keys of an R x R grid; shape [R_out^2, R^2], "
               "integers (or the bias of a learned table)",
               bias_dtypes("index")});
  f("detr-sine", DetrSineRequest{}, detr_sine_table,
    TableAbout{"DETR 2-D sine embedding of a pixel mask (HF DetrSinePositionEmbedding): y then "
               "x channels, sin/cos interleaved; shape [b, 2E, H, W]",
               kFloatDtypes});
  f("udop-bucket", UdopBucketRequest{}, udop_bucket_table,
    TableAbout{"UDOP relative buckets (HF RelativePositionBias1D / Horizontal / Vertical): T5 "
               "bidirectional buckets of trunc((p_j - p_i) * scaling_factor) over token "
               "positions or box centres; shape [b, s, s], integers, or the bias [b, heads, s, "
               "s] of learned weights (--axis all: the three summed, as "
               "RelativePositionBiasAggregated)",
               bias_dtypes("bucket")});
  f("rt-detr-sincos", RtDetrSincosRequest{}, rt_detr_sincos_table,
    TableAbout{"RT-DETR 2-D sin-cos embedding of an H x W feature map (HF RTDetrHybridEncoder."
               "build_2d_sincos_position_embedding; also RT-DETRv2, D-FINE): channels sin/cos "
               "of y then of x, frequencies 1 / T^(k / (E/4)); shape [1, H*W, E]",
               kFloatDtypes});
  f("fairseq-sinusoidal", FairseqSinusoidalRequest{}, fairseq_sinusoidal_table,
    TableAbout{"fairseq sinusoidal positions (HF M2M-100, NLLB, XGLM get_embedding): [sin | "
               "cos] with frequencies exp(-i ln(10000) / (D/2 - 1)); shape [N, D], or [b, s, D] "
               "for the tokens of --input-ids",
               kFloatDtypes});
  f("layoutlm-bucket", LayoutBucketRequest{}, layout_bucket_table,
    TableAbout{"LayoutLMv2/v3 relative buckets (HF relative_position_bucket, bidirectional) of "
               "position or bounding-box offsets c_j - c_i per row; shape [b, s, s], integers "
               "(or the bias [b, heads, s, s] of learned weights)",
               bias_dtypes("bucket")});
  f("complex-order", ComplexOrderRequest{}, complex_order_table,
    TableAbout{"Wang et al. 2020 complex word-order embeddings r exp(i (w pos + theta)): real "
               "parts r cos(w pos + theta), then imaginary parts r sin(...); shape [2, N, D], "
               "or [2, b, s, D] for the tokens of --input-ids",
               kFloatDtypes});
  f("reformer-axial", AxialPositionsRequest{}, axial_positions_table,
    TableAbout{"Reformer axial position embeddings (HF AxialPositionEmbeddings): each axis "
               "weight broadcast over the grid n_1 x .. x n_k, concatenated along the features, "
               "rows in row-major order; shape [n_1 .. n_k, hidden], [N, hidden] or [b, s, "
               "hidden]",
               kFloatDtypes});
  f("longt5-global", LongT5GlobalRequest{}, longt5_global_table,
    TableAbout{"LongT5 transient-global index maps (HF _make_global_fixed_block_ids, "
               "_make_side_relative_position_ids): block ids [b, s], global segment ids [b, "
               "s/G] or side relative positions [b, s, s/G], integers",
               kIntDtypes});
  f("cpmant-bucket", CpmAntBucketRequest{}, cpmant_bucket_table,
    TableAbout{"CPM-Ant segment-aware relative buckets (HF CpmAntSegmentPositionEmbedding): T5 "
               "bidirectional buckets of j - i within a segment, buckets + q_seg * segments + "
               "k_seg across segments; shape [b, q, k], integers (or the bias [b, heads, q, k] "
               "of a learned table)",
               bias_dtypes("bucket")});
}

/// Calls `f(kind, request)` for each table kind with declared fields.
template <class F>
void for_each_table_kind(F&& f) {
  for_each_table([&f](const char* kind, const auto& r, auto, const TableAbout&) { f(kind, r); });
}

}  // namespace posenc
