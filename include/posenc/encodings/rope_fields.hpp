#pragma once
/// \file
/// The declared parameters of RoPE (declare.hpp): the scaling parameters of RopeParams
/// (with the longrope factor lists), the first position of Positions, the coordinate
/// grid's prefix and merge window and the ways of applying (RopeApplyOptions: --inverse
/// and --precision of every RoPE command, `posenc rope`'s --rope2d, --rope2d-ids, --order,
/// --mrope-section, --mrope-interleaved, --layout, --inv-freq, --freq-scale, --torch-ops and
/// --allow-nonfinite; the rules between them are check_given's), in the order --help
/// lists them, and the HF config a request follows (HfConfigChoice). The ROPE OPTIONS of
/// `table rope`, `rope` and `attention --rope`, the Python keywords of posenc.rope /
/// posenc.table.rope / posenc.attention, their ranges and the field list the tests walk
/// (`posenc._posenc._fields("rope")`) come from here.
///
/// The arithmetic (ArithChoice) is declared apart: `posenc attention` names one more
/// (fa-baseline) and refuses two (meta, ggml).
///
/// Not declared, parsed by each front end: the coordinate grid's text (--coords).
///
/// `compute_rope_freqs` validates RopeParams from here (a value from a config file names
/// the file's key, RopeParams::sources); RopeApplier validates Positions and its grid.

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_layout.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

namespace fields {

constexpr std::int64_t k2p31 = std::int64_t{1} << 31;

/// The pair layouts by name, aliases after the names.
inline const Names<RopeStyle>& rope_styles() {
  static const Names<RopeStyle> n{{"neox", RopeStyle::neox},
                                  {"gptj", RopeStyle::gptj},
                                  {"half", RopeStyle::neox},
                                  {"interleaved", RopeStyle::gptj}};
  return n;
}
/// HF's rope_type names (and the older "su" for longrope), aliases after the names.
inline const Names<RopeScaling>& rope_scalings() {
  static const Names<RopeScaling> n{{"none", RopeScaling::none},
                                    {"linear", RopeScaling::linear},
                                    {"dynamic", RopeScaling::dynamic},
                                    {"yarn", RopeScaling::yarn},
                                    {"longrope", RopeScaling::longrope},
                                    {"llama3", RopeScaling::llama3},
                                    {"proportional", RopeScaling::proportional},
                                    {"default", RopeScaling::none},
                                    {"su", RopeScaling::longrope}};
  return n;
}

/// A bool member named by two words (--order xy|yx, --sign k-q|q-k, ...).
inline Names<bool> two_words(const char* when_false, const char* when_true) {
  return Names<bool>{{when_false, false}, {when_true, true}};
}
/// Which coordinate of a 2-D grid comes first.
inline const Names<bool>& grid_orders() {
  static const Names<bool> n = two_words("xy", "yx");
  return n;
}
/// The words --freq-scale takes for DINOv3's 2*pi.
inline const Names<double>& freq_scale_words() {
  static const Names<double> n{{"2pi", kRopeTwoPi}, {"tau", kRopeTwoPi}};
  return n;
}
/// `--layout NAME[:ARGS]` (parse_rope_layout), its errors naming the field.
inline RopeLayoutSpec layout_of(std::string_view text, std::string_view name) {
  return parse_rope_layout(std::string(text), std::string(name));
}
/// The values of a tensor reference as float64 (--short-factor f.npy).
inline xt::xarray<double> tensor_values(const std::string& ref) {
  const Tensor t = read_tensor(ref);
  xt::xarray<double> out = xt::empty<double>(t.shape());
  for (std::size_t i = 0; i < t.numel(); ++i) out.data()[i] = t.get(i);
  return out;
}
/// `layout` the frequency matrix `m` [axes, R/2] gives (--inv-freq): InputError naming
/// field `f` for another shape or a value that is not finite.
inline void set_freq_matrix(RopeLayoutSpec& layout, const Field& f, const xt::xarray<double>& m) {
  if (m.dimension() != 2 || m.shape(0) < 1 || m.shape(0) > kMaxRopeAxes) {
    const Shape shape(m.shape().begin(), m.shape().end());
    throw InputError(fmt::format("{}: expected shape [axes, R/2] with 1 to {} axes, got {}",
                                 f.name, kMaxRopeAxes, shape_str(shape)));
  }
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (!std::isfinite(m.data()[i])) {
      throw InputError(fmt::format("{}: value at flat index {} is not finite", f.name, i));
    }
  }
  layout.preset = RopeLayoutPreset::matrix;
  layout.axes = m.shape(0);
  layout.freq.assign(m.begin(), m.end());
}
/// `--hf-version X.Y` (parse_hf_version).
inline HfVersion hf_version_of(std::string_view text, std::string_view) {
  return parse_hf_version(std::string(text));
}
/// posenc's own working precision, numpy's names after posenc's.
inline const Names<Precision>& precisions() {
  static const Names<Precision> n{{"f64", Precision::f64},
                                  {"f32", Precision::f32},
                                  {"float64", Precision::f64},
                                  {"float32", Precision::f32}};
  return n;
}

}  // namespace fields

template <class V>
void declare(V& v, RopeParams& p) {
  v(field("style",
          "pair layout: neox (i, i+r/2; alias half) or gptj (2i, 2i+1; alias interleaved); "
          "default neox; posenc rope also takes tiled (V-JEPA2: adjacent pairs, dim l of a "
          "chunk of width c using angle l mod c/2)"),
    choice(p.style, fields::rope_styles()));
  v(field("base", "theta base, HF rope_theta (default 10000)"), p.base);
  v(field("rotary_dim", "rotate only the first R dims (even, <= D)"), p.rotary_dim);
  v(field("rotary_last",
          "rotate the last R dims instead of the first (DeepSeek MLA q = [nope | rope])")
        .negated_by("no_rotary_last", "rotate the first R dims (the default)"),
    p.rotary_last);
  v(field("rope_interleave",
          "HF rope_interleave (DeepSeek-V3): input pairs (2i, 2i+1), output in the neox "
          "order (i, i+R/2); needs --style neox")
        .negated_by("no_rope_interleave", "input pairs in the style's order (the default)"),
    p.rope_interleave);
  v(field("partial", "rotate the first int(F*D) dims (partial_rotary_factor, default 1)"),
    p.partial);
  v(field("scaling",
          "none|linear|dynamic|yarn|longrope|llama3|proportional (HF rope_type; aliases "
          "default, su), default none"),
    choice(p.scaling, fields::rope_scalings()));
  v(field("factor", "scaling factor s (HF factor)"), p.factor);
  v(field("original_max_pos", "L0, HF original_max_position_embeddings").at_least(1),
    p.original_max_pos);
  v(field("max_pos", "HF max_position_embeddings (dynamic, yarn, longrope)").at_least(1),
    p.max_pos);
  v(field("seq_len",
          "sequence length the frequencies are for (dynamic NTK, longrope switch); "
          "default (0): largest position + 1")
        .at_least(0),
    p.seq_len);
  v(field("beta_fast", "yarn beta_fast (default 32)"), p.beta_fast);
  v(field("beta_slow", "yarn beta_slow (default 1)"), p.beta_slow);
  v(field("mscale", "yarn mscale (DeepSeek)"), p.mscale);
  v(field("mscale_all_dim", "yarn mscale_all_dim (DeepSeek)"), p.mscale_all_dim);
  v(field("attention_factor",
          "attention factor multiplying cos and sin (overrides the yarn/longrope default)"),
    p.attention_factor);
  v(field("truncate", "yarn: floor/ceil the correction range (HF truncate, default true)")
        .negated_by("no_truncate",
                    "yarn: do not floor/ceil the correction range (HF truncate=false)",
                    /*with_positive=*/false),
    p.truncate);
  v(field("low_freq_factor", "llama3 low_freq_factor (default 1)"), p.low_freq_factor);
  v(field("high_freq_factor", "llama3 high_freq_factor (default 4)"), p.high_freq_factor);
  // After the first position and the tensors of positions in --help.
  v(field("short_factor", "longrope short_factor: comma list or tensor reference, R/2 values"),
    number_list(p.short_factor, &fields::tensor_values));
  v(field("long_factor", "longrope long_factor: comma list or tensor reference, R/2 values"),
    number_list(p.long_factor, &fields::tensor_values));
}

/// The first position and the tensors of positions, each named in the library's messages
/// by its source (the option and file, or the keyword). The ids and the packed sequences'
/// boundaries are ROPE OPTIONS of every command (real coordinates as ids `posenc rope`'s
/// alone); the angles, the caller's cos/sin tables and the per-entry offsets `posenc rope`'s
/// (fields::rope_only_positions), listed by --help after its ways of applying.
template <class V>
void declare(V& v, Positions& p) {
  v(field("start", "first position (KV-cache offset), default 0")
        .from(0, kMaxPosition, "2^53 = 9007199254740992"),
    p.start);
  v(field("position_ids",
          "explicit positions: tensor of any integer dtype, shape [s] or [b, s] ([n, s] "
          "or [n, b, s] for n coordinate axes; posenc rope also takes real coordinates "
          "as a float tensor)"),
    values(p.ids, p.ids_shape, p.ids_what).or_reals(p.coords, p.coords_shape));
  v(field("cu_seqlens", "packed sequences: boundaries [n+1]; positions restart at each one"),
    values(p.cu_seqlens, p.cu_seqlens_shape, p.cu_what));
  v(field("angles",
          "the angles themselves, tensor [s, R/2] or [b, s, R/2] in radians (learned "
          "angles, e.g. LightGlue's projected keypoints)"),
    values(p.angles, p.angles_shape, p.angles_what));
  v(field("cos",
          "the caller's cos table, [rows, R/2] (flash-attn's rotary_cos) or [rows, R] "
          "(HF's cos), any float dtype, applied as given; token at position p takes row "
          "p; R from its width unless --rotary-dim; needs --sin"),
    values(p.table_cos, p.table_shape, p.cos_what).dtype_to([&p](const std::string& n) {
      p.table_dtype = parse_dtype(n, "cos");
    }));
  v(field("sin", "the caller's sin table, the shape of --cos"),
    values(p.table_sin, p.sin_shape, p.sin_what).dtype_to([&p](const std::string& n) {
      p.sin_dtype = parse_dtype(n, "sin");
    }));
  v(field("seqlen_offsets",
          "per-entry offsets [b] (flash-attn's seqlen_offsets / rotary_seqlens): token s "
          "of entry b at --start + offset[b] + s; with --cu-seqlens one per sequence"),
    values(p.seqlen_offsets, p.seqlen_offsets_shape, p.offsets_what));
}

namespace fields {
/// The fields of Positions only `posenc rope` (posenc.rope) takes.
inline const std::vector<std::string>& rope_only_positions() {
  static const std::vector<std::string> n{"angles", "cos", "sin", "seqlen_offsets"};
  return n;
}
}  // namespace fields

/// Explicit positions are of one kind: ids or packed sequences' boundaries (the caller's
/// terms).
inline void check_given(const Positions&, const Caller& c) {
  if (c.gave("position_ids") && c.gave("cu_seqlens")) {
    throw UsageError(c.term("position_ids") + ": cannot be combined with " +
                     c.term("cu_seqlens"));
  }
}

/// The generated coordinates' scalars (the grid itself is parse_coord_grid's).
template <class V>
void declare(V& v, CoordGrid& g) {
  v(field("prefix_tokens",
          "--coords: tokens before the grid (class, register tokens), at coordinate 0 and so "
          "not rotated")
        .from(0, fields::k2p31, "2^31"),
    g.prefix);
  v(field("merge_window",
          "--coords: patches in M x M windows over the last two axes (Qwen2-VL's vision "
          "spatial_merge_size order)")
        .from(1, fields::k2p31, "2^31"),
    g.merge);
}

/// The grid's scalars apply to generated coordinates only (the caller's terms).
inline void check_given(const CoordGrid&, const Caller& c) {
  for (const char* name : {"prefix_tokens", "merge_window"}) {
    if (c.gave(name) && !c.gave("coords")) {
      throw UsageError(c.term(name) + ": applies to " + c.term("coords") + " only");
    }
  }
}

/// The ways of applying. The inverse and the precision are ROPE OPTIONS of `table rope`,
/// `rope` and `attention --rope` (and keywords of their Python twins); the others
/// `posenc rope` and posenc.rope take alone.
template <class V>
void declare(V& v, RopeApplyOptions& a) {
  v(field("inverse", "apply the inverse rotation (R^T)"), a.inverse);
  v(field("precision",
          "posenc's own working precision for --arith exact: f64 (default; correctly "
          "rounded) or f32 (faster, not any framework's bits)"),
    choice(a.precision, fields::precisions()));
  v(field("rope2d",
          "H W: axial 2-D RoPE over an H x W grid of tokens in row-major order: x and y "
          "each get R/4 pairs with frequencies base^(-4j/R); --base defaults to 100"),
    pair(a.grid_h, a.grid_w));
  v(field("rope2d_ids",
          "axial 2-D RoPE with coordinates from --position-ids [2, s] or [2, b, s]: row 0 "
          "drives the first R/4 pairs, row 1 the next R/4 (Qwen2-VL vision (h, w) ids; "
          "with --style neox, --base 10000 as there)"),
    a.grid_ids);
  v(field("order", "2-D RoPE: which coordinate takes the first R/4 pairs, xy (default) or yx"),
    choice(a.grid_yx, fields::grid_orders()));
  v(field("mrope_section",
          "M-RoPE (Qwen2-VL): pairs per t,h,w section, summing to R/2, e.g. 16,24,24; "
          "--position-ids then has shape [3, s] or [3, b, s]")
        .value_name("T,H,W"),
    counts(a.mrope_section, 3, 0, 1 << 20, "three counts t,h,w such as 16,24,24"));
  v(field("mrope_interleaved",
          "Qwen3-VL interleaved M-RoPE: pair j takes h when j % 3 = 1 and j < 3H, w when "
          "j % 3 = 2 and j < 3W, else t"),
    a.mrope_interleaved);
  v(field("layout",
          "the frequency assignment over coordinate axes: plain (default), axial (2-D, "
          "the --rope2d frequencies), even-odd (Pixtral: height the even-indexed, width "
          "the odd-indexed frequencies), sections:T,H,W or interleaved:T,H,W (M-RoPE), "
          "chunks[:N] (V-JEPA2: N chunks of 2*((D/N)/2) dims, default 3, tiled pairing), "
          "ernie-vl:H,W,T (ERNIE-4.5-VL, with --style gptj: pairs below H+W alternate "
          "h and w, the rest t; ids t,h,w), xdrope:S1,...,Sn (HunYuan-VL: chunks of "
          "2*Si dims in the neox order on axis i, each dim its own angle)")
        .value_name("NAME[:ARGS]"),
    parsed(a.layout, &fields::layout_of, "layout"));
  v(field("inv_freq",
          "any frequency assignment: tensor [axes, R/2]; angle j = sum over axes of "
          "coordinate * freq[axis, j] (LightGlue: its projector weight transposed)"),
    ArrayInto{[&a](const Field& f, const xt::xarray<double>& m) {
      fields::set_freq_matrix(a.layout, f, m);
    }});
  v(field("freq_scale", "multiply every frequency of the layout (2pi for DINOv3's 2*pi)")
        .value_name("X|2pi"),
    number_or_word(a.layout.scale, fields::freq_scale_words()));
  v(field("torch_ops",
          "with --cos/--sin: flash-attn's apply_rotary_emb_torch bit for bit, each product "
          "and the sum rounded to torch's type for x and the tables (default: exact, "
          "rounded once)"),
    a.torch_ops);
  v(field("allow_nonfinite",
          "rotate NaN/Inf input values instead of refusing them (NaN results are "
          "written as the positive quiet NaN)"),
    a.allow_nonfinite);
}

/// The rules between the ways of applying, in the caller's terms, checked by each front
/// end once the fields are set: the grid's sides positive when it is given (0 0 in the
/// library is no grid), inv_freq gives the layout itself (not with layout), interleaved
/// M-RoPE needs its sections, the ids of rope2d_ids take neither a grid nor an order, and
/// torch_ops needs the caller's cos/sin tables and has no precision of posenc's (a
/// caller's Caller knows whether cos was given).
inline void check_given(const RopeApplyOptions& a, const Caller& c) {
  if (c.gave("rope2d") && (a.grid_h <= 0 || a.grid_w <= 0)) {
    throw UsageError(fmt::format("{}: height and width must be positive, got {} {}",
                                 c.term("rope2d"), a.grid_h, a.grid_w));
  }
  if (c.gave("inv_freq") && c.gave("layout")) {
    throw UsageError(c.term("inv_freq") + ": gives the layout itself; not with " +
                     c.term("layout"));
  }
  if (a.mrope_interleaved && !c.gave("mrope_section")) {
    throw UsageError(c.term("mrope_interleaved") + ": needs " + c.term("mrope_section"));
  }
  if (a.grid_ids && c.gave("rope2d")) {
    throw UsageError(c.term("rope2d_ids") + ": cannot be combined with " + c.term("rope2d"));
  }
  if (a.grid_ids && c.gave("order")) {
    throw UsageError(c.term("order") + ": the rows of " + c.term("position_ids") +
                     " give the order with " + c.term("rope2d_ids"));
  }
  if (a.torch_ops && !c.gave("cos")) {
    throw UsageError(c.term("torch_ops") + ": needs " + c.term("cos") + " and " + c.term("sin"));
  }
  if (a.torch_ops && c.gave("precision")) {
    throw UsageError(c.term("torch_ops") + ": computes as torch does; not with " +
                     c.term("precision"));
  }
}

/// The HF config whose RoPE a request takes (merge_hf_config; explicit fields win): the
/// file, the transformers release whose rules read it and the layers to follow. The ROPE
/// OPTIONS --hf-config, --hf-version, --layer-type and --layer; Python's keywords of the
/// same names.
struct HfConfigChoice {
  std::string hf_config;                ///< config.json; empty: none
  std::optional<HfVersion> hf_version;  ///< none: the latest rules (HfVersion{})
  std::string layer_type;               ///< a layer_types value; "": the default
  std::optional<std::int64_t> layer;    ///< one layer, 0-based

  HfLayer layers() const { return HfLayer{layer_type, layer}; }
};

template <class V>
void declare(V& v, HfConfigChoice& h) {
  v(field("hf_config",
          "take the RoPE of a HF config.json as transformers v5 reads it (rope_theta, "
          "head_dim, partial_rotary_factor, max_position_embeddings, "
          "rope_scaling/rope_parameters, mrope_section, ...); explicit options win"),
    h.hf_config);
  v(field("hf_version",
          "with --hf-config: read the config as this transformers release does "
          "(4.43 to 5.x; default 5), where releases differ: the YaRN factor rule, "
          "original_max_position_embeddings, rope_parameters")
        .value_name("X.Y"),
    parsed(h.hf_version, &fields::hf_version_of, "version"));
  v(field("layer_type",
          "with --hf-config: the layers to follow (a layer_types value such as "
          "sliding_attention); default full_attention, or the config's only type"),
    h.layer_type);
  v(field("layer",
          "with --hf-config: follow one layer (0-based index): its layer type and its "
          "own rules, such as SmolLM3's no_rope_layers"),
    h.layer);
}

/// A HF config's companions need it: the layers to follow (layer_type; layer, an index
/// `layer` >= 0) and the release whose rules read it (hf_version). In the caller's terms.
inline void check_hf_config_given(const Caller& c, std::optional<std::int64_t> layer) {
  for (const char* name : {"layer_type", "hf_version", "layer"}) {
    if (c.gave(name) && !c.gave("hf_config")) {
      throw UsageError(c.term(name) + ": needs " + c.term("hf_config"));
    }
  }
  if (layer && *layer < 0) {
    throw UsageError(
        fmt::format("{}: must be a layer index >= 0, got {}", c.term("layer"), *layer));
  }
}

/// The config's companions need it and a layer index is >= 0 (check_hf_config_given).
inline void check_given(const HfConfigChoice& h, const Caller& c) {
  check_hf_config_given(c, h.layer);
}

namespace fields {
/// The arithmetics of the ROPE OPTIONS (arith.hpp), in the order --help lists them.
inline const Names<Arith>& ariths() {
  static const Names<Arith> n{
      {"exact", Arith::exact}, {"hf", Arith::hf}, {"meta", Arith::meta}, {"ggml", Arith::ggml}};
  return n;
}
}  // namespace fields

/// The arithmetic of the ROPE OPTIONS (--arith; Python's keyword arith): posenc's exact one
/// or a framework's float32 arithmetic bit for bit. Sets RopeParams::arith (`set_arith`)
/// and AttentionOptions::arith.
struct ArithChoice {
  Arith arith = Arith::exact;
};

template <class V>
void declare(V& v, ArithChoice& a) {
  v(field("arith",
          "exact (default: the correctly rounded value) or a framework's float32 "
          "arithmetic bit for bit: hf (HF transformers on torch CPU), meta (Meta's "
          "llama complex form), ggml (ggml's CPU rope)"),
    choice(a.arith, fields::ariths()));
}

/// posenc's working precision applies to the exact arithmetic only: a framework's has its
/// own. In the caller's terms.
inline void check_given(const ArithChoice& a, const Caller& c) {
  if (a.arith != Arith::exact && c.gave("precision")) {
    throw UsageError(fmt::format("{}: applies to {} exact only ({} {} has its framework's "
                                 "own arithmetic)",
                                 c.term("precision"), c.term("arith"), c.term("arith"),
                                 arith_name(a.arith)));
  }
}

/// The caller's cos/sin tables are applied exactly: no framework's arithmetic with them.
inline void check_tables_arith(const ArithChoice& a, const Caller& c) {
  if (a.arith != Arith::exact) {
    throw UsageError(fmt::format("{} {}: cos/sin tables are applied exactly only ({} f32 "
                                 "rotates in float32)",
                                 c.term("arith"), arith_name(a.arith), c.term("precision")));
  }
}

/// Sets `p`'s arithmetic. Meta's code only has the complex (interleaved) form: with meta
/// the style is gptj unless the caller gave one.
inline void set_arith(RopeParams& p, const ArithChoice& a, const Caller& c) {
  p.arith = a.arith;
  if (a.arith == Arith::meta && !c.gave("style")) p.style = RopeStyle::gptj;
}

/// The caller's cos/sin tables replace every field that makes frequencies or angles: with
/// cos given, none of them ("cos: the tables replace the frequencies; not with base"), in
/// the caller's terms.
inline void check_tables_given(const Caller& c) {
  if (!c.gave("cos")) return;
  for (const char* name :
       {"base", "partial", "scaling", "factor", "original_max_pos", "max_pos", "seq_len",
        "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate",
        "low_freq_factor", "high_freq_factor", "short_factor", "long_factor", "hf_config",
        "hf_version", "layer_type", "layer", "rope2d", "rope2d_ids", "order", "mrope_section",
        "mrope_interleaved", "layout", "inv_freq", "freq_scale", "coords", "prefix_tokens",
        "merge_window", "angles"}) {
    if (c.gave(name)) {
      throw UsageError(c.term("cos") + ": the tables replace the frequencies; not with " +
                       c.term(name));
    }
  }
}

/// The RoPE parameters `p` of head dimension `head_dim` with the defaults the ways of
/// applying `a` set where the caller (`c`) did not give the field: 2-D RoPE's frequencies
/// from base 100 (as `table rope2d`), V-JEPA2's chunks the rotary width of their 2 *
/// ((D / N) / 2) dims each.
inline RopeParams with_apply_defaults(RopeParams p, int head_dim, const RopeApplyOptions& a,
                                      const Caller& c) {
  if (a.grid_h > 0 && !c.gave("base")) p.base = 100.0;
  if (a.layout.preset == RopeLayoutPreset::chunks && !c.gave("rotary_dim") &&
      !c.gave("partial")) {
    p.rotary_dim = rope_chunks_width(head_dim, a.layout.axes);
  }
  return p;
}

/// `f(name, Request{})` for every declared RoPE request: the field lists the tests walk.
template <class F>
void for_each_rope_request(F&& f) {
  // Named values, not temporaries: GCC 12 warns that a temporary's vectors may be used
  // uninitialised when the visitor copies them.
  const RopeParams rope;
  const Positions positions;
  const CoordGrid coords;
  const RopeApplyOptions apply;
  const HfConfigChoice hf;
  const ArithChoice arith;
  f("rope", rope);
  f("hf", hf);
  f("arith", arith);
  f("positions", positions);
  f("coords", coords);
  f("apply", apply);
}

}  // namespace posenc
