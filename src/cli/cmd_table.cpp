// `posenc table KIND`: every encoding table (sinusoidal, rope, rope2d, alibi, relative,
// t5-bucket, xl-relative, funnel-relative, funnel-factorized, deberta-bucket, swin-index,
// beit-index, swinv2-coords, levit-index, detr-sine, fairseq-sinusoidal, layoutlm-bucket,
// complex-order, reformer-axial, cpmant-bucket, longt5-global, rt-detr-sincos, udop-bucket).
// The options fill the library's table requests (encodings/tables.hpp and the modules beside
// it); the table is computed in float64 and streamed to the output block by block.

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "cli/rope_options.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

struct Common {
  OutputOptions out;
  std::string dtype;
  std::string part;
};

void add_common(CLI::App* sub, Common& c, const char* dtype_help, bool several = false) {
  if (several) {
    add_output_options(sub, c.out, /*multiple=*/true, /*required=*/true,
                       "output reference(s): one per table of --emit in its order, one pattern "
                       "with {} (out_{}.npy, f.h5:/{}), or one HDF5 file (a dataset per table)");
  } else {
    add_output_options(sub, c.out);
  }
  if (defines_option("--dtype")) sub->add_option("--dtype", c.dtype, dtype_help);
  add_part_option(sub, c.part,
                  "the table's first axis whose extent is not 1 (positions for sinusoidal and "
                  "rope tables; cos|sin for --emit cos-sin)");
}

// An option's value when it was given on the command line.
template <class T>
std::optional<std::int64_t> given(CLI::App* sub, const char* name, T v) {
  if (sub->count(name) == 0) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

// Writes the tables of one run (several for --emit cos,sin) to their outputs, all
// visible together or none. `names` (for RoPE tables, whose -o may name one output per
// table, a pattern or a group) name the tables in -o patterns and groups; without them
// there is one table and one -o.
void write_all(std::vector<Table> tables, const std::vector<std::string>& names, const Common& c) {
  std::vector<std::string> defaults;
  std::vector<DType> dtypes;
  const Part part = c.part.empty() ? Part{} : parse_part(c.part, "--part");
  for (Table& t : tables) {
    const DType dtype = c.dtype.empty() ? default_table_dtype(t) : parse_dtype(c.dtype, "--dtype");
    check_table_dtype(t, dtype);
    checked_numel(t.spec.shape, dtype_size(dtype), "table");
    t.attrs.push_back({"dtype", std::string(dtype_name(dtype))});
    if (!part.whole()) {
      const std::size_t axis = slab_axis(t.spec.shape);
      const Attrs pa = part_attrs(part, t.spec.shape, axis);
      t.attrs.insert(t.attrs.end(), pa.begin(), pa.end());
      t.spec = table_part(t.spec, part, axis);
    }
    dtypes.push_back(dtype);
    defaults.push_back(t.dataset);
  }
  std::vector<TensorRef> refs =
      names.empty() ? std::vector<TensorRef>{parse_ref(c.out.outputs.at(0), c.out.to, defaults[0])}
                    : emitted_output_refs(c.out, names, defaults);
  OutputSet outs(refs, c.out.write_options());
  for (std::size_t i = 0; i < tables.size(); ++i) {
    Table& t = tables[i];
    verbose(fmt::format("{}: table shape {} as {}", refs[i].text, shape_str(t.spec.shape),
                        dtype_name(dtypes[i])));
    verbose_attrs(t.attrs);
    TensorInfo info;
    info.dtype = dtypes[i];
    info.shape = t.spec.shape;
    info.attrs = std::move(t.attrs);
    write_table(t.spec, dtypes[i], outs.open(i, info));
  }
  outs.commit();
}

void write_out(Table t, const Common& c) {
  std::vector<Table> one;
  one.push_back(std::move(t));
  write_all(std::move(one), {}, c);
}

// The tables of --emit: a comma list of emit values, each at most once.
std::vector<RopeEmit> parse_emit_list(const std::string& text) {
  std::vector<RopeEmit> out;
  for (const std::string& field : split_list(text)) {
    const RopeEmit e = parse_rope_emit(field);
    if (std::find(out.begin(), out.end(), e) != out.end()) {
      throw UsageError(fmt::format("--emit {}: '{}' is named twice", text, field));
    }
    out.push_back(e);
  }
  return out;
}

// The name of an emitted table in patterns and groups: cos, sin, inv_freq, cos_sin, ...
std::string emit_name(RopeEmit e) {
  std::string name = rope_emit_name(e);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

void add_emit_options(CLI::App* sub, std::string& emit, std::string& layout, bool& half_width) {
  sub->add_option("--emit", emit,
                  "inv-freq | angles | cos | sin | cos-sin ([2, N, W]: cos then sin) | "
                  "cos-sin-cache (vLLM [N, R] = cat(cos_half, sin_half)); default cos-sin; "
                  "a comma list (cos,sin) writes each table to its own output or dataset");
  sub->add_option("--layout", layout,
                  "full ([N, R] in the --style pair layout, default) or half ([N, R/2], one "
                  "column per frequency as flash-attn takes cos/sin)")
      ->check(CLI::IsMember({"full", "half"}));
  sub->add_flag("--half-width", half_width, "same as --layout half");
}

struct RopeTableOptions {
  Common c;
  RopeCliOptions rope;
  long long positions = 0;
  int dim = 0;
  std::string emit = "cos-sin";
  std::string layout = "full";
  bool half_width = false;
};

void run_rope(const RopeTableOptions& o, CLI::App* sub) {
  if (sub->count("--dim") > 0 && o.dim <= 0) {
    throw UsageError(fmt::format("--dim: must be at least 1, got {}", o.dim));
  }
  if (o.dim <= 0 && o.rope.hf_config.empty()) {
    throw UsageError("--dim: the head dimension is required (or give --hf-config)");
  }
  RopeTableRequest r;
  const std::vector<RopeEmit> emits = parse_emit_list(o.emit);
  r.where = rope_positions(o.rope);
  if (sub->count("--position-ids") > 0 && sub->count("--start") > 0) {
    throw UsageError("--start: cannot be combined with --position-ids (ids are absolute)");
  }
  r.positions = given(sub, "--positions", o.positions);
  r.rope = rope_params(o.rope, o.dim);
  // Where the rotated dims sit in a head, and the input pair order: nothing of a table.
  for (const char* flag :
       {"--rotary-last", "--rope-interleave", "--no-rotary-last", "--no-rope-interleave"}) {
    if (sub->count(flag) > 0) {
      throw UsageError(fmt::format(
          "{}: places the rotation in the input's head dims (posenc rope, attention --rope); a "
          "table does not depend on it",
          flag));
    }
  }
  r.half = o.half_width || o.layout == "half";
  r.inverse = o.rope.inverse;
  r.precision = rope_precision(o.rope);
  // Every table is described (and its request checked) before any output is opened.
  std::vector<Table> tables;
  std::vector<std::string> names;
  for (RopeEmit e : emits) {
    r.emit = e;
    tables.push_back(rope_table(r));
    names.push_back(emit_name(e));
  }
  write_all(std::move(tables), names, o.c);
}
// --emit of funnel-factorized: a comma list of phi, pi, psi, omega, each at most once.
std::vector<FunnelFactor> parse_factor_list(const std::string& text) {
  std::vector<FunnelFactor> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string field = text.substr(at, comma - at);
    FunnelFactor f;
    try {
      f = parse_funnel_factor(field);
    } catch (const UsageError&) {
      throw UsageError(
          fmt::format("--emit {}: expected a comma list of phi, pi, psi, omega", text));
    }
    if (std::find(out.begin(), out.end(), f) != out.end()) {
      throw UsageError(fmt::format("--emit {}: '{}' is named twice", text, field));
    }
    out.push_back(f);
    at = comma + 1;
  }
  return out;
}

// A kind's request (its declared fields bound to options) and its output options. The
// options bound by hand (files, lists) are static locals beside it.
template <class R>
struct Kind {
  Common c;
  R r;
};

// A subcommand of `table` with the options of `r`'s declared fields.
template <class R>
CLI::App* add_kind(CLI::App* table, const char* name, const char* help, R& r) {
  auto* sub = table->add_subcommand(name, help);
  add_declared_options(sub, r);
  return sub;
}

// A kind whose options are all declared: its request reduced to one table.
template <class R>
void add_plain_kind(CLI::App* table, const char* name, const char* help, const char* dtype_help,
                    Table (*compute)(const R&)) {
  static Kind<R> o;
  auto* sub = add_kind(table, name, help, o.r);
  add_common(sub, o.c, dtype_help);
  sub->callback([compute] { write_out(compute(o.r), o.c); });
}

struct WindowIndexOptions {
  Common c;
  std::vector<long long> window;
  std::string bias_table;
};

// Token ids [b, s] of an integer dtype, as int64.
xt::xarray<std::int64_t> read_ids(const std::string& ref) { return read_int64(ref, "--input-ids"); }

// A window H x W from `--window H [W]`; the library checks the range.
std::pair<std::int64_t, std::int64_t> window_sides(const std::vector<long long>& v) {
  return {v.at(0), v.size() > 1 ? v[1] : v[0]};
}

// A tensor of any numeric dtype as float64: a learned table (`allow_bool` false) or a
// pixel mask (bool allowed). The library checks its shape and values.
xt::xarray<double> read_values(const std::string& ref, const char* option, bool allow_bool,
                               DType* dtype = nullptr) {
  const Tensor t = read_tensor(ref);
  if (dtype != nullptr) *dtype = t.dtype();
  if (t.dtype() == DType::b1 && !allow_bool) {
    throw InputError(fmt::format("{}: {}: expected numbers, got bool", option, ref));
  }
  xt::xarray<double> out = xt::empty<double>(t.shape());
  for (std::size_t i = 0; i < t.numel(); ++i) out.data()[i] = t.get(i);
  return out;
}

constexpr const char* kFloatDtypeHelp =
    "output dtype: f32 (default), f64, f16, bf16 (computed in f64, rounded once)";
constexpr const char* kIntDtypeHelp =
    "output dtype: i64 (default), any integer dtype that holds the largest index, f32 or f64";

// The dtypes of an index table that a learned table turns into a bias ({}: what the
// index holds).
constexpr const char* kBiasDtypeHelp =
    "output dtype: i64 (default) or any integer dtype that holds the largest {}, f32, f64; "
    "with --bias-table f32 (default), f64, f16, bf16";

}  // namespace

void register_table(CLI::App& app) {
  auto* table = app.add_subcommand("table", "generate an encoding table");
  table->require_subcommand(1);
  // Only the kind this run names is defined: the options of all of them were two
  // thirds of a small table's run time.
  const auto wanted = [](std::string_view kind) {
    return defines_kind(
        "table", kind,
        {"sinusoidal", "rope", "rope2d", "alibi", "relative", "t5-bucket", "xl-relative",
         "funnel-relative", "funnel-factorized", "deberta-bucket", "swin-index", "beit-index",
         "swinv2-coords", "levit-index", "detr-sine", "fairseq-sinusoidal", "layoutlm-bucket",
         "complex-order", "reformer-axial", "cpmant-bucket", "longt5-global", "rt-detr-sincos",
         "udop-bucket"});
  };
  // swin-index and beit-index: one set of options, the class token apart.
  const auto add_window_kind = [table](const char* name, const char* help, WindowIndexOptions& o,
                                       bool class_token) {
    auto* sub = table->add_subcommand(name, help);
    sub->add_option("--window", o.window,
                    "window H [W]: rows and columns of tokens (one value: a square window; "
                    "HF window_size / patch grid)")
        ->required()
        ->expected(1, 2);
    sub->add_option("--bias-table", o.bias_table,
                    "learned relative_position_bias_table REF [entries, heads]: write the bias "
                    "it gives, [heads, N, N], instead of the index");
    static const std::string dtype_help = fmt::format(kBiasDtypeHelp, "index");
    add_common(sub, o.c, dtype_help.c_str());
    sub->callback([&o, class_token] {
      WindowIndexRequest r;
      std::tie(r.height, r.width) = window_sides(o.window);
      r.class_token = class_token;
      if (!o.bias_table.empty()) {
        check_window(r.height, r.width);  // before reading the table
        r.bias_table = read_values(o.bias_table, "--bias-table", false);
      }
      write_out(window_index_table(r), o.c);
    });
  };

  if (wanted("sinusoidal")) {
    add_plain_kind<SinusoidalRequest>(table, "sinusoidal",
                                      "Vaswani table PE[p,2i] = sin(p w_i), PE[p,2i+1] = cos(p "
                                      "w_i), w_i = 1/base^(2i/D); shape [N, D]",
                                      kFloatDtypeHelp, sinusoidal_table);
  }
  if (wanted("rope")) {
    static RopeTableOptions o;
    auto* sub = table->add_subcommand(
        "rope", "RoPE tables (inv_freq, angles, cos, sin) with HF scaling variants");
    sub->add_option("--positions", o.positions,
                    "number of positions N (required unless --position-ids, --cu-seqlens, "
                    "or --emit inv-freq)");
    sub->add_option("--dim", o.dim, "head dimension D (or from --hf-config)");
    add_emit_options(sub, o.emit, o.layout, o.half_width);
    add_rope_options(sub, o.rope);
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([sub] { run_rope(o, sub); });
  }
  if (wanted("rope2d")) {
    static Kind<Rope2dRequest> o;
    static std::string style = "gptj", emit = "cos-sin", layout = "full";
    static bool half_width = false;
    auto* sub = add_kind(
        table, "rope2d",
        "axial 2-D RoPE for an H x W grid: D/4 frequencies per axis; shape [H*W, D]", o.r);
    sub->add_option("--style", style,
                    "pair layout of full-width tables: gptj (default; the seed's complex "
                    "form) or neox");
    add_emit_options(sub, emit, layout, half_width);
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([] {
      o.r.style = parse_rope_style(style);
      o.r.half = half_width || layout == "half";
      std::vector<Table> tables;
      std::vector<std::string> names;
      for (RopeEmit e : parse_emit_list(emit)) {
        o.r.emit = e;
        tables.push_back(rope2d_table(o.r));
        names.push_back(emit_name(e));
      }
      write_all(std::move(tables), names, o.c);
    });
  }
  if (wanted("alibi")) {
    add_plain_kind<AlibiRequest>(table, "alibi",
                                 "ALiBi slopes [H] or bias matrices [H, Q, K] (Press et al.)",
                                 kFloatDtypeHelp, alibi_table);
  }
  if (wanted("relative")) {
    static Kind<RelativeRequest> o;
    static std::string embeddings;
    auto* sub = add_kind(
        table, "relative",
        "Shaw relative index clip(d, -L, R) + L of the distance d = j-i (or i-j), L = R = M "
        "by default; -1 beyond the window with --beyond zero; shape [Q, K], integers (or the "
        "rows of a learned table gathered, [Q, K, dim])",
        o.r);
    sub->add_option("--embeddings", embeddings,
                    "learned table REF [L + R + 1, dim] (distance_embedding, pe_k, emb_rel_k): "
                    "write its rows gathered, [Q, K, dim] (zeros for -1), instead of the index");
    add_common(sub, o.c,
               "output dtype: i64 (default), any integer dtype that holds the indices (signed "
               "with --beyond zero), f32 or f64; with --embeddings f32 (default), f64, f16, bf16");
    sub->callback([] {
      if (!embeddings.empty()) {
        relative_table(o.r);  // the window checked before the table is read
        o.r.embeddings = read_values(embeddings, "--embeddings", false);
      }
      write_out(relative_table(o.r), o.c);
    });
  }
  if (wanted("t5-bucket")) {
    add_plain_kind<T5BucketRequest>(
        table, "t5-bucket", "HF T5 _relative_position_bucket of j - i; shape [Q, K], integers",
        kIntDtypeHelp, t5_bucket_table);
  }
  if (wanted("xl-relative")) {
    add_plain_kind<XlRelativeRequest>(
        table, "xl-relative",
        "Transformer-XL / XLNet sinusoidal relative table R [rlen, D] = [sin(p w) | cos(p w)] "
        "for the relative positions p of pos_seq (HF TransfoXL, XLNet)",
        kFloatDtypeHelp, xl_relative_table);
  }
  if (wanted("funnel-relative")) {
    add_plain_kind<FunnelRelativeRequest>(
        table, "funnel-relative",
        "Funnel Transformer relative_shift position embeddings of a block [rows, D] = "
        "[sin(p w) | cos(p w)] for HF relative_pos with pooling (get_position_embeds)",
        kFloatDtypeHelp, funnel_relative_table);
  }
  if (wanted("funnel-factorized")) {
    static Kind<FunnelFactorizedRequest> o;
    static std::string emit = "phi,pi,psi,omega";
    auto* sub = add_kind(
        table, "funnel-factorized",
        "Funnel Transformer factorized attention tables phi, pi [queries, D] and psi, omega "
        "[keys, D] of sin/cos over pooled token positions (HF get_position_embeds)",
        o.r);
    sub->add_option("--emit", emit,
                    "comma list of phi, pi, psi, omega (default all four, in that order)");
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([] {
      std::vector<Table> tables;
      std::vector<std::string> names;
      for (FunnelFactor f : parse_factor_list(emit)) {
        o.r.emit = f;
        tables.push_back(funnel_factorized_table(o.r));
        names.push_back(funnel_factor_name(f));
      }
      write_all(std::move(tables), names, o.c);
    });
  }
  if (wanted("deberta-bucket")) {
    add_plain_kind<DebertaBucketRequest>(
        table, "deberta-bucket",
        "DeBERTa-v2/v3 relative positions i - j with log buckets (HF build_relative_position); "
        "shape [Q, K], integers",
        kIntDtypeHelp, deberta_bucket_table);
  }
  if (wanted("swin-index")) {
    static WindowIndexOptions o;
    add_window_kind("swin-index",
                    "Swin relative_position_index of an H x W window: (dy + H-1)(2W-1) + dx + "
                    "W-1; shape [HW, HW], integers (or the bias [heads, HW, HW] of a learned "
                    "table)",
                    o, false);
  }
  if (wanted("beit-index")) {
    static WindowIndexOptions o;
    add_window_kind("beit-index",
                    "BEiT / Data2Vec-vision relative_position_index: swin-index with a class "
                    "token first and 3 more entries (class to token, token to class, class to "
                    "class); shape [HW+1, HW+1], integers (or the bias of a learned table)",
                    o, true);
  }
  if (wanted("swinv2-coords")) {
    static Common c;
    static std::vector<long long> window, pretrained;
    static std::vector<std::string> mlp;  // W1 B1 W2
    auto* sub = table->add_subcommand(
        "swinv2-coords",
        "Swin-V2 relative_coords_table, the input of its position-bias MLP: sign(c) "
        "log2(1 + |c|) / 3 with c = 8 d / (P - 1) for the offsets d of an H x W window; "
        "shape [2H-1, 2W-1, 2] (with --mlp: the bias [heads, HW, HW])");
    sub->add_option("--window", window,
                    "window H [W] (one value: a square window; HF window_size)")
        ->required()
        ->expected(1, 2);
    sub->add_option("--pretrained-window", pretrained,
                    "P_H [P_W]: HF pretrained_window_size, dividing the offsets instead of the "
                    "window (each at least 2)")
        ->expected(1, 2);
    sub->add_option("--mlp", mlp,
                    "W1 B1 W2: HF continuous_position_bias_mlp weights ([hidden, 2], [hidden], "
                    "[heads, hidden]); the table is then the bias 16 sigmoid(mlp(coords)) "
                    "gathered by relative_position_index, [heads, HW, HW]")
        ->expected(3);
    add_common(sub, c, kFloatDtypeHelp);
    sub->callback([] {
      SwinV2CoordsRequest r;
      std::tie(r.height, r.width) = window_sides(window);
      if (!pretrained.empty()) {
        std::tie(r.pretrained_height, r.pretrained_width) = window_sides(pretrained);
      }
      if (!mlp.empty()) {
        r.mlp_w1 = read_values(mlp[0], "--mlp", false);
        r.mlp_b1 = read_values(mlp[1], "--mlp", false);
        r.mlp_w2 = read_values(mlp[2], "--mlp", false);
      }
      write_out(swinv2_coords_table(r), c);
    });
  }
  if (wanted("levit-index")) {
    static Kind<LevitIndexRequest> o;
    static std::string bias_table;
    auto* sub = add_kind(
        table, "levit-index",
        "LeViT attention_bias_idxs: offset (|dy|, |dx|) numbered |dy| R + |dx| between "
        "queries (every stride-th point) and keys of an R x R grid; shape [R_out^2, R^2], "
        "integers (or the bias of a learned table)",
        o.r);
    sub->add_option("--bias-table", bias_table,
                    "learned attention_biases REF [heads, R^2]: write the bias it gives, "
                    "[heads, R_out^2, R^2], instead of the index");
    static const std::string dtype_help = fmt::format(kBiasDtypeHelp, "index");
    add_common(sub, o.c, dtype_help.c_str());
    sub->callback([] {
      if (!bias_table.empty()) {
        levit_index_table(o.r);  // the sizes checked before the table is read
        o.r.bias_table = read_values(bias_table, "--bias-table", false);
      }
      write_out(levit_index_table(o.r), o.c);
    });
  }
  if (wanted("detr-sine")) {
    static Kind<DetrSineRequest> o;
    static std::string mask;
    static std::vector<long long> size;
    auto* sub = table->add_subcommand(
        "detr-sine",
        "DETR 2-D sine embedding of a pixel mask (HF DetrSinePositionEmbedding): y then x "
        "channels, sin/cos interleaved; shape [b, 2E, H, W]");
    sub->add_option("--mask", mask, "pixel mask REF [b, H, W] (1 = pixel, 0 = padding)");
    sub->add_option("--size", size, "H W: an all-ones mask [1, H, W] instead of --mask")
        ->expected(2);
    add_declared_options(sub, o.r);
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      if (mask.empty() == size.empty()) {
        throw UsageError("--mask: give a pixel mask or --size H W (one of them)");
      }
      if (!size.empty()) {
        o.r.height = size[0];
        o.r.width = size[1];
      } else {
        o.r.mask = read_values(mask, "--mask", true);
      }
      write_out(detr_sine_table(o.r), o.c);
    });
  }
  if (wanted("udop-bucket")) {
    static Kind<UdopBucketRequest> o;
    static std::string bbox;
    static std::vector<std::string> bias_table;
    auto* sub = add_kind(
        table, "udop-bucket",
        "UDOP relative buckets (HF RelativePositionBias1D / Horizontal / Vertical): T5 "
        "bidirectional buckets of trunc((p_j - p_i) * scaling_factor) over token positions or "
        "box centres; shape [b, s, s], integers, or the bias [b, heads, s, s] of learned "
        "weights (--axis all: the three summed, as RelativePositionBiasAggregated)",
        o.r);
    sub->add_option("--bbox", bbox,
                    "boxes REF [b, s, 4] (x0, y0, x1, y1, UDOP's normalised coordinates; a "
                    "float32 file is computed in float32, as HF does)");
    sub->add_option("--bias-table", bias_table,
                    "learned weight REF [buckets, heads] (relative_attention_bias.weight; for "
                    "--axis all three: 1d, horizontal, vertical): write the bias, [b, heads, s, "
                    "s]")
        ->expected(1, 3);
    static const std::string dtype_help = fmt::format(kBiasDtypeHelp, "bucket");
    add_common(sub, o.c, dtype_help.c_str());
    sub->callback([] {
      if (!bbox.empty()) {
        DType dt = DType::f64;
        o.r.bbox = read_values(bbox, "--bbox", false, &dt);
        o.r.bbox_f32 = dt == DType::f32;
      }
      for (const std::string& w : bias_table) {
        o.r.bias_tables.push_back(read_values(w, "--bias-table", false));
      }
      write_out(udop_bucket_table(o.r), o.c);
    });
  }
  if (wanted("rt-detr-sincos")) {
    static Kind<RtDetrSincosRequest> o;
    static std::vector<long long> size;
    auto* sub = table->add_subcommand(
        "rt-detr-sincos",
        "RT-DETR 2-D sin-cos embedding of an H x W feature map (HF RTDetrHybridEncoder."
        "build_2d_sincos_position_embedding; also RT-DETRv2, D-FINE): channels sin/cos of y "
        "then of x, frequencies 1 / T^(k / (E/4)); shape [1, H*W, E]");
    sub->add_option("--size", size, "H W: the feature map's rows and columns")
        ->required()
        ->expected(2);
    add_declared_options(sub, o.r);
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      o.r.height = size[0];
      o.r.width = size[1];
      write_out(rt_detr_sincos_table(o.r), o.c);
    });
  }
  if (wanted("fairseq-sinusoidal")) {
    static Kind<FairseqSinusoidalRequest> o;
    static std::string input_ids;
    auto* sub = add_kind(
        table, "fairseq-sinusoidal",
        "fairseq sinusoidal positions (HF M2M-100, NLLB, XGLM get_embedding): [sin | cos] "
        "with frequencies exp(-i ln(10000) / (D/2 - 1)); shape [N, D], or [b, s, D] for the "
        "tokens of --input-ids",
        o.r);
    sub->add_option("--input-ids", input_ids,
                    "token ids REF [b, s]: positions (cumsum of non-padding tokens + past) + "
                    "padding_idx, as HF create_position_ids_from_input_ids");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      if (!input_ids.empty()) o.r.input_ids = read_ids(input_ids);
      write_out(fairseq_sinusoidal_table(o.r), o.c);
    });
  }
  if (wanted("layoutlm-bucket")) {
    static Kind<LayoutBucketRequest> o;
    static std::string position_ids, bbox;
    static std::vector<std::string> bias_table;
    auto* sub = add_kind(
        table, "layoutlm-bucket",
        "LayoutLMv2/v3 relative buckets (HF relative_position_bucket, bidirectional) of "
        "position or bounding-box offsets c_j - c_i per row; shape [b, s, s], integers (or "
        "the bias [b, heads, s, s] of learned weights)",
        o.r);
    sub->add_option("--position-ids", position_ids, "1d: integer positions REF [b, s]");
    sub->add_option("--bbox", bbox,
                    "x, y, xy: integer boxes REF [b, s, 4] (x0, y0, x1, y1 as HF bbox)");
    sub->add_option("--bias-table", bias_table,
                    "learned weight REF [heads, buckets] (nn.Linear rel_pos_bias, rel_pos_x_bias "
                    "or rel_pos_y_bias; for xy two: x then y): write the bias it gives, [b, "
                    "heads, s, s], instead of the buckets")
        ->expected(1, 2);
    static const std::string dtype_help = fmt::format(kBiasDtypeHelp, "bucket");
    add_common(sub, o.c, dtype_help.c_str());
    sub->callback([] {
      LayoutBucketRequest& r = o.r;
      if (bias_table.size() == 2 && r.axis != LayoutAxis::xy) {
        throw UsageError("--bias-table: two weights are for --axis xy (x then y)");
      }
      if (r.axis == LayoutAxis::xy && bias_table.size() != 2) {
        throw UsageError("--axis xy: needs --bias-table WX WY (the buckets are per axis: x or y)");
      }
      if (!position_ids.empty()) r.position_ids = read_int64(position_ids, "--position-ids");
      if (!bbox.empty()) r.bbox = read_int64(bbox, "--bbox");
      if (!bias_table.empty()) r.bias_table = read_values(bias_table[0], "--bias-table", false);
      if (bias_table.size() == 2) {
        r.bias_table_y = read_values(bias_table[1], "--bias-table", false);
      }
      try {
        write_out(layout_bucket_table(r), o.c);
      } catch (const InputError& e) {
        // The library's second weight is the second value of --bias-table.
        const std::string msg = e.what();
        if (msg.rfind("bias_table_y: ", 0) != 0) throw;
        throw InputError("--bias-table (y, the second): " + msg.substr(14));
      }
    });
  }
  if (wanted("complex-order")) {
    static Kind<ComplexOrderRequest> o;
    static std::string frequency, amplitude, phase, input_ids;
    auto* sub = table->add_subcommand(
        "complex-order",
        "Wang et al. 2020 complex word-order embeddings r exp(i (w pos + theta)): real parts "
        "r cos(w pos + theta), then imaginary parts r sin(...); shape [2, N, D], or [2, b, s, "
        "D] for the tokens of --input-ids");
    sub->add_option("--frequency", frequency,
                    "frequencies w REF: a vector [D], or a table [V, D] of one per word (with "
                    "--input-ids)")
        ->required();
    sub->add_option("--amplitude", amplitude, "amplitudes r REF, the shape of w (default 1)");
    sub->add_option("--phase", phase, "initial phases theta REF, the shape of w (default 0)");
    add_declared_options(sub, o.r);
    sub->add_option("--input-ids", input_ids,
                    "token ids REF [b, s] into tables [V, D]: token (b, s) at position start + s");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      o.r.frequency = read_values(frequency, "--frequency", false);
      if (!amplitude.empty()) o.r.amplitude = read_values(amplitude, "--amplitude", false);
      if (!phase.empty()) o.r.phase = read_values(phase, "--phase", false);
      if (!input_ids.empty()) o.r.input_ids = read_int64(input_ids, "--input-ids");
      write_out(complex_order_table(o.r), o.c);
    });
  }
  if (wanted("reformer-axial")) {
    static Kind<AxialPositionsRequest> o;
    static std::vector<long long> axial_shape;
    static std::vector<std::string> weights;
    static std::string position_ids;
    auto* sub = table->add_subcommand(
        "reformer-axial",
        "Reformer axial position embeddings (HF AxialPositionEmbeddings): each axis weight "
        "broadcast over the grid n_1 x .. x n_k, concatenated along the features, rows in "
        "row-major order; shape [n_1 .. n_k, hidden], [N, hidden] or [b, s, hidden]");
    sub->add_option("--axial-shape", axial_shape,
                    "N1,N2[,..]: HF axial_pos_shape (1 to 8 sides; product at most 2^40)")
        ->required()
        ->delimiter(',');
    sub->add_option("--weights", weights,
                    "one weight REF per axis, in order, shaped as HF stores them: [N1, 1, d1], "
                    "[1, N2, d2], .. (HF weights.0, weights.1; d1 + d2 + .. = hidden)")
        ->required()
        ->expected(1, 8);
    add_declared_options(sub, o.r);
    sub->add_option("--position-ids", position_ids,
                    "integer positions REF [b, s] (each below N1 N2 ..): the rows HF's "
                    "eval-mode forward selects, [b, s, hidden]");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      AxialPositionsRequest& r = o.r;
      for (long long n : axial_shape) r.axial_shape.push_back(n);
      // The shape and counts checked before any file is read (as the library checks them).
      axial_rows(r.axial_shape);
      if (weights.size() != r.axial_shape.size()) {
        throw UsageError(fmt::format("--weights: one per axis of --axial-shape, {} expected, got {}",
                                     r.axial_shape.size(), weights.size()));
      }
      if (r.positions && !position_ids.empty()) {
        throw UsageError("--positions: cannot be combined with --position-ids");
      }
      for (const std::string& w : weights) r.weights.push_back(read_values(w, "--weights", false));
      if (!position_ids.empty()) r.position_ids = read_int64(position_ids, "--position-ids");
      write_out(axial_positions_table(r), o.c);
    });
  }
  if (wanted("longt5-global")) {
    static Kind<LongT5GlobalRequest> o;
    static std::string attention_mask;
    auto* sub = table->add_subcommand(
        "longt5-global",
        "LongT5 transient-global index maps (HF _make_global_fixed_block_ids, "
        "_make_side_relative_position_ids): block ids [b, s], global segment ids [b, s/G] or "
        "side relative positions [b, s, s/G], integers");
    sub->add_option("--attention-mask", attention_mask,
                    "HF attention_mask REF [b, s] of 1 (token) and 0 (padding)");
    add_declared_options(sub, o.r);
    add_common(sub, o.c, kIntDtypeHelp);
    sub->callback([] {
      longt5_global_check(o.r, !attention_mask.empty());  // before the mask is read
      if (!attention_mask.empty()) {
        o.r.attention_mask = read_int64(attention_mask, "--attention-mask");
      }
      write_out(longt5_global_table(o.r), o.c);
    });
  }
  if (wanted("cpmant-bucket")) {
    static Kind<CpmAntBucketRequest> o;
    static std::vector<std::string> segment_ids;
    static std::string bias_table;
    auto* sub = table->add_subcommand(
        "cpmant-bucket",
        "CPM-Ant segment-aware relative buckets (HF CpmAntSegmentPositionEmbedding): T5 "
        "bidirectional buckets of j - i within a segment, buckets + q_seg * segments + k_seg "
        "across segments; shape [b, q, k], integers (or the bias [b, heads, q, k] of a "
        "learned table)");
    sub->add_option("--segment-ids", segment_ids,
                    "integer segments REF [b, s] (HF segment; each below --segments), or two: "
                    "query [b, q] then key [b, k] segments")
        ->expected(1, 2);
    add_declared_options(sub, o.r);
    sub->add_option("--bias-table", bias_table,
                    "learned relative_attention_bias REF [segments^2 + buckets, heads]: write "
                    "the bias it gives, [b, heads, q, k], instead of the buckets");
    static const std::string dtype_help = fmt::format(kBiasDtypeHelp, "bucket");
    add_common(sub, o.c, dtype_help.c_str());
    sub->callback([] {
      CpmAntBucketRequest& r = o.r;
      cpmant_bucket_check(r, !segment_ids.empty());
      if (!segment_ids.empty()) r.segment_ids = read_int64(segment_ids[0], "--segment-ids");
      if (segment_ids.size() == 2) {
        r.key_segment_ids = read_int64(segment_ids[1], "--segment-ids");
      }
      if (!bias_table.empty()) r.bias_table = read_values(bias_table, "--bias-table", false);
      try {
        write_out(cpmant_bucket_table(r), o.c);
      } catch (const InputError& e) {
        // The library's key segments are the second value of --segment-ids.
        const std::string msg = e.what();
        if (msg.rfind("key_segment_ids: ", 0) != 0) throw;
        throw InputError("--segment-ids (key, the second): " + msg.substr(17));
      }
    });
  }
}

}  // namespace posenc::cli
