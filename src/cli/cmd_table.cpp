// `posenc table KIND`: every encoding table (sinusoidal, rope, rope2d, alibi, relative,
// t5-bucket, xl-relative, funnel-relative, funnel-factorized, deberta-bucket, swin-index,
// beit-index, swinv2-coords, levit-index, detr-sine, fairseq-sinusoidal, layoutlm-bucket,
// complex-order, reformer-axial, cpmant-bucket). The options fill the library's table requests
// (encodings/tables.hpp and the modules beside it); the table is computed in float64 and streamed
// to the output block by block.

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
#include "cli/rope_options.hpp"
#include "posenc/encodings/axial_positions.hpp"
#include "posenc/encodings/complex_order.hpp"
#include "posenc/encodings/cpmant_bucket.hpp"
#include "posenc/encodings/family_sinusoids.hpp"
#include "posenc/encodings/layout_bucket.hpp"
#include "posenc/encodings/relative_attention.hpp"
#include "posenc/encodings/tables.hpp"
#include "posenc/encodings/window_index.hpp"
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

struct SinusoidalOptions {
  Common c;
  SinusoidalRequest r;
  std::string layout = "interleaved";
};

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
  for (const char* flag : {"--rotary-last", "--rope-interleave"}) {
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

struct Rope2dOptions {
  Common c;
  Rope2dRequest r;
  std::string order = "xy";
  std::string style = "gptj";
  std::string emit = "cos-sin";
  std::string layout = "full";
  bool half_width = false;
};

struct AlibiOptions {
  Common c;
  AlibiRequest r;
  long long q_len = 0, k_len = 0;
  std::string variant;
};

struct PairOptions {
  Common c;
  long long q_len = 0, k_len = 0;
  long long max_distance = -1;
  std::string sign = "k-q";
  int buckets = 32;
  bool bidirectional = false, causal = false;
};

struct XlRelativeOptions {
  Common c;
  XlRelativeRequest r;
  long long q_len = 0, k_len = 0;
  std::string form = "transfo-xl";
};

struct FunnelRelativeOptions {
  Common c;
  FunnelRelativeRequest r;
  long long seq_len = 0, block = 0;
};

struct FunnelFactorizedOptions {
  Common c;
  FunnelFactorizedRequest r;
  long long seq_len = 0, block = 0, key_block = 0;
  std::string emit = "phi,pi,psi,omega";
};

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

struct DebertaBucketOptions {
  Common c;
  DebertaBucketRequest r;
  long long q_len = 0, k_len = 0;
};

struct WindowIndexOptions {
  Common c;
  std::vector<long long> window;
  std::string bias_table;
};

struct SwinV2Options {
  Common c;
  std::vector<long long> window, pretrained;
};

struct LevitOptions {
  Common c;
  LevitIndexRequest r;
  std::string bias_table;
};

struct DetrSineOptions {
  Common c;
  DetrSineRequest r;
  std::string mask;
  std::vector<long long> size;
  std::string layout = "channels";
  double scale = 0.0;
  bool no_normalize = false;
};

struct LayoutBucketOptions {
  Common c;
  std::string axis = "1d";
  long long seq_len = 0, max_distance = 0;
  int buckets = 0;
  std::string position_ids, bbox;
  std::vector<std::string> bias_table;
};

struct ComplexOrderOptions {
  Common c;
  std::string frequency, amplitude, phase, input_ids;
  long long positions = 0, start = 0;
};

struct ReformerAxialOptions {
  Common c;
  std::vector<long long> axial_shape;
  std::vector<std::string> weights;
  long long positions = 0;
  std::string position_ids;
};

struct CpmAntBucketOptions {
  Common c;
  CpmAntBucketRequest r;
  std::vector<std::string> segment_ids;
  long long seq_len = 0;
  std::string bias_table;
};

struct FairseqOptions {
  Common c;
  FairseqSinusoidalRequest r;
  long long positions = 0, padding_idx = 0;
  std::string input_ids;
};

// Token ids [b, s] of an integer dtype, as int64.
xt::xarray<std::int64_t> read_ids(const std::string& ref) { return read_int64(ref, "--input-ids"); }

// A window H x W from `--window H [W]`; the library checks the range.
std::pair<std::int64_t, std::int64_t> window_sides(const std::vector<long long>& v) {
  return {v.at(0), v.size() > 1 ? v[1] : v[0]};
}

// A tensor of any numeric dtype as float64: a learned table (`allow_bool` false) or a
// pixel mask (bool allowed). The library checks its shape and values.
xt::xarray<double> read_values(const std::string& ref, const char* option, bool allow_bool) {
  const Tensor t = read_tensor(ref);
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
         "complex-order", "reformer-axial", "cpmant-bucket"});
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
    add_common(sub, o.c,
               "output dtype: i64 (default) or any integer dtype that holds the largest index, "
               "f32, f64; with --bias-table f32 (default), f64, f16, bf16");
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
    static SinusoidalOptions o;
    auto* sub =
        table->add_subcommand("sinusoidal",
                              "Vaswani table PE[p,2i] = sin(p w_i), PE[p,2i+1] = cos(p w_i), "
                              "w_i = 1/base^(2i/D); shape [N, D]");
    sub->add_option("--positions", o.r.positions, "number of positions N")->required();
    sub->add_option("--dim", o.r.dim, "model dimension D (even)")->required();
    sub->add_option("--base", o.r.base, "frequency base (default 10000)");
    sub->add_option("--start", o.r.start, "first position (default 0)");
    sub->add_option("--layout", o.layout,
                    "interleaved (sin, cos pairs; default) or concat ([sin | cos])")
        ->check(CLI::IsMember({"interleaved", "concat"}));
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      o.r.layout = o.layout == "concat" ? SinusoidalLayout::concat : SinusoidalLayout::interleaved;
      write_out(sinusoidal_table(o.r), o.c);
    });
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
    static Rope2dOptions o;
    auto* sub = table->add_subcommand(
        "rope2d", "axial 2-D RoPE for an H x W grid: D/4 frequencies per axis; shape [H*W, D]");
    sub->add_option("--height", o.r.height, "grid height H (rows)")->required();
    sub->add_option("--width", o.r.width, "grid width W (columns)")->required();
    sub->add_option("--dim", o.r.dim, "head dimension D (multiple of 4)")->required();
    sub->add_option("--base", o.r.base, "theta base (default 100, as RoPE-ViT)");
    sub->add_option("--order", o.order, "xy (x block first, default) or yx")
        ->check(CLI::IsMember({"xy", "yx"}));
    sub->add_option("--style", o.style,
                    "pair layout of full-width tables: gptj (default; the seed's complex "
                    "form) or neox");
    add_emit_options(sub, o.emit, o.layout, o.half_width);
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([] {
      o.r.y_first = o.order == "yx";
      o.r.style = parse_rope_style(o.style);
      o.r.half = o.half_width || o.layout == "half";
      std::vector<Table> tables;
      std::vector<std::string> names;
      for (RopeEmit e : parse_emit_list(o.emit)) {
        o.r.emit = e;
        tables.push_back(rope2d_table(o.r));
        names.push_back(emit_name(e));
      }
      write_all(std::move(tables), names, o.c);
    });
  }
  if (wanted("alibi")) {
    static AlibiOptions o;
    auto* sub = table->add_subcommand("alibi",
                                      "ALiBi slopes [H] or bias matrices [H, Q, K] (Press et al.)");
    sub->add_option("--heads", o.r.heads, "number of heads H (any count)")->required();
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--variant", o.variant,
                    "slopes (default without lengths), causal (default with lengths), "
                    "symmetric, fairseq or bottom-right")
        ->check(CLI::IsMember({"slopes", "causal", "symmetric", "fairseq", "bottom-right"}));
    sub->add_option("--max-bias", o.r.max_bias, "ggml max_bias; 8 gives Press's slopes");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      o.r.q_len = given(sub, "--q-len", o.q_len);
      o.r.k_len = given(sub, "--k-len", o.k_len);
      if (!o.variant.empty()) o.r.variant = parse_alibi_table(o.variant);
      write_out(alibi_table(o.r), o.c);
    });
  }
  if (wanted("relative")) {
    static PairOptions o;
    static long long left = 0, right = 0;
    static std::string beyond = "clamp", embeddings;
    auto* sub = table->add_subcommand(
        "relative",
        "Shaw relative index clip(d, -L, R) + L of the distance d = j-i (or i-j), L = R = M "
        "by default; -1 beyond the window with --beyond zero; shape [Q, K], integers (or the "
        "rows of a learned table gathered, [Q, K, dim])");
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--max-distance", o.max_distance,
                    "clipping distance M on both sides (needed unless --left and --right)");
    sub->add_option("--left", left,
                    "L: the window below 0 (default M; Wav2Vec2-BERT left_max_position_embeddings "
                    "64; SpeechT5 max_length)");
    sub->add_option("--right", right,
                    "R: the window above 0 (default M; Wav2Vec2-BERT right_max_position_embeddings "
                    "8; SpeechT5 max_length - 1)");
    sub->add_option("--sign", o.sign,
                    "k-q (d = j - i, default; tensor2tensor, Wav2Vec2-BERT, VITS) or q-k "
                    "(d = i - j; SpeechT5)")
        ->check(CLI::IsMember({"k-q", "q-k"}));
    sub->add_option("--beyond", beyond,
                    "clamp (distances outside [-L, R] take the edge row, default) or zero "
                    "(index -1, a zero row: VITS)")
        ->check(CLI::IsMember({"clamp", "zero"}));
    sub->add_option("--embeddings", embeddings,
                    "learned table REF [L + R + 1, dim] (distance_embedding, pe_k, emb_rel_k): "
                    "write its rows gathered, [Q, K, dim] (zeros for -1), instead of the index");
    add_common(sub, o.c,
               "output dtype: i64 (default), any integer dtype that holds the indices (signed "
               "with --beyond zero), f32 or f64; with --embeddings f32 (default), f64, f16, bf16");
    sub->callback([sub] {
      RelativeRequest r;
      r.q_len = given(sub, "--q-len", o.q_len);
      r.k_len = given(sub, "--k-len", o.k_len);
      r.max_distance = o.max_distance;
      r.left = given(sub, "--left", left);
      r.right = given(sub, "--right", right);
      r.q_minus_k = o.sign == "q-k";
      r.zero_beyond = beyond == "zero";
      if (!embeddings.empty()) {
        relative_table(r);  // the window checked before the table is read
        r.embeddings = read_values(embeddings, "--embeddings", false);
      }
      write_out(relative_table(r), o.c);
    });
  }
  if (wanted("t5-bucket")) {
    static PairOptions o;
    auto* sub = table->add_subcommand(
        "t5-bucket", "HF T5 _relative_position_bucket of j - i; shape [Q, K], integers");
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--buckets", o.buckets, "num_buckets (default 32)");
    sub->add_option("--max-distance", o.max_distance, "max_distance (default 128)");
    sub->add_flag("--bidirectional", o.bidirectional, "encoder buckets (default)");
    sub->add_flag("--causal", o.causal, "decoder buckets (bidirectional=False)");
    add_common(sub, o.c, kIntDtypeHelp);
    sub->callback([sub] {
      if (o.bidirectional && o.causal) {
        throw UsageError("--bidirectional: cannot be combined with --causal");
      }
      T5BucketRequest r;
      r.q_len = given(sub, "--q-len", o.q_len);
      r.k_len = given(sub, "--k-len", o.k_len);
      r.buckets = o.buckets;
      if (sub->count("--max-distance") > 0) r.max_distance = o.max_distance;
      r.bidirectional = !o.causal;
      write_out(t5_bucket_table(r), o.c);
    });
  }
  if (wanted("xl-relative")) {
    static XlRelativeOptions o;
    auto* sub = table->add_subcommand(
        "xl-relative",
        "Transformer-XL / XLNet sinusoidal relative table R [rlen, D] = [sin(p w) | cos(p w)] "
        "for the relative positions p of pos_seq (HF TransfoXL, XLNet)");
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K = memory + Q (default: Q)");
    sub->add_option("--dim", o.r.dim, "model dimension D (even)")->required();
    sub->add_option("--form", o.form,
                    "transfo-xl (p = K-1 .. 0, K rows; default), xlnet-bi (p = K .. -Q+1, K+Q "
                    "rows) or xlnet-uni (p = K .. 0, K+1 rows)")
        ->check(CLI::IsMember({"transfo-xl", "xlnet-bi", "xlnet-uni"}));
    sub->add_option("--clamp-len", o.r.clamp_len,
                    "clamp p to [-C, C] when C > 0 (HF clamp_len; default 0 = none)");
    sub->add_option("--base", o.r.base, "frequency base (default 10000)");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      o.r.q_len = given(sub, "--q-len", o.q_len);
      o.r.k_len = given(sub, "--k-len", o.k_len);
      o.r.form = parse_xl_form(o.form);
      write_out(xl_relative_table(o.r), o.c);
    });
  }
  if (wanted("funnel-relative")) {
    static FunnelRelativeOptions o;
    auto* sub = table->add_subcommand(
        "funnel-relative",
        "Funnel Transformer relative_shift position embeddings of a block [rows, D] = "
        "[sin(p w) | cos(p w)] for HF relative_pos with pooling (get_position_embeds)");
    sub->add_option("--seq-len", o.seq_len, "the model's input length L")->required();
    sub->add_option("--dim", o.r.dim, "d_model D (even)")->required();
    sub->add_option("--block", o.block,
                    "block index b (default 0): queries pooled b times");
    sub->add_option(
        "--shift", o.r.shift,
        "1 (keys pooled as the queries, stride 2^b; default) or 2 (the block's first "
        "layer: keys pooled b-1 times, stride 2^(b-1)); HF position_embeds[b][shift-1]");
    sub->add_flag("--separate-cls", o.r.separate_cls,
                  "HF separate_cls: the <cls> token pooled apart at position 1 - 2^b");
    sub->add_flag(
        "--truncate-seq", o.r.truncate_seq,
        "HF truncate_seq (with --separate-cls): the last position dropped at each pooling");
    sub->add_option("--base", o.r.base, "frequency base (default 10000)");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      o.r.seq_len = o.seq_len;
      o.r.block = o.block;
      write_out(funnel_relative_table(o.r), o.c);
    });
  }
  if (wanted("funnel-factorized")) {
    static FunnelFactorizedOptions o;
    auto* sub = table->add_subcommand(
        "funnel-factorized",
        "Funnel Transformer factorized attention tables phi, pi [queries, D] and psi, omega "
        "[keys, D] of sin/cos over pooled token positions (HF get_position_embeds)");
    sub->add_option("--seq-len", o.seq_len, "the model's input length L")->required();
    sub->add_option("--dim", o.r.dim, "d_model D (even)")->required();
    sub->add_option("--block", o.block,
                    "poolings of the queries' tables phi, pi (default 0; HF's block index)");
    sub->add_option("--key-block", o.key_block,
                    "poolings of the keys' tables psi, omega (default --block; --block minus 1 in "
                    "a block's first layer with pool_q_only)");
    sub->add_option("--emit", o.emit,
                    "comma list of phi, pi, psi, omega (default all four, in that order)");
    sub->add_flag("--separate-cls", o.r.separate_cls,
                  "HF separate_cls: each pooling keeps the first row (the <cls> token) apart");
    sub->add_flag("--truncate-seq", o.r.truncate_seq,
                  "HF truncate_seq (with --separate-cls): each pooling drops the last row");
    sub->add_option("--base", o.r.base, "frequency base (default 10000)");
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([sub] {
      o.r.seq_len = o.seq_len;
      o.r.block = o.block;
      o.r.key_block = given(sub, "--key-block", o.key_block);
      std::vector<Table> tables;
      std::vector<std::string> names;
      for (FunnelFactor f : parse_factor_list(o.emit)) {
        o.r.emit = f;
        tables.push_back(funnel_factorized_table(o.r));
        names.push_back(funnel_factor_name(f));
      }
      write_all(std::move(tables), names, o.c);
    });
  }
  if (wanted("deberta-bucket")) {
    static DebertaBucketOptions o;
    auto* sub = table->add_subcommand(
        "deberta-bucket",
        "DeBERTa-v2/v3 relative positions i - j with log buckets (HF build_relative_position); "
        "shape [Q, K], integers");
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--position-buckets", o.r.position_buckets,
                    "position_buckets (default 256; <= 0 for plain i - j)");
    sub->add_option("--max-relative-positions", o.r.max_relative_positions,
                    "max_relative_positions (default 512)");
    add_common(sub, o.c, kIntDtypeHelp);
    sub->callback([sub] {
      o.r.q_len = given(sub, "--q-len", o.q_len);
      o.r.k_len = given(sub, "--k-len", o.k_len);
      write_out(deberta_bucket_table(o.r), o.c);
    });
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
    static SwinV2Options o;
    auto* sub = table->add_subcommand(
        "swinv2-coords",
        "Swin-V2 relative_coords_table, the input of its position-bias MLP: sign(c) "
        "log2(1 + |c|) / 3 with c = 8 d / (P - 1) for the offsets d of an H x W window; "
        "shape [2H-1, 2W-1, 2]");
    sub->add_option("--window", o.window,
                    "window H [W] (one value: a square window; HF window_size)")
        ->required()
        ->expected(1, 2);
    sub->add_option("--pretrained-window", o.pretrained,
                    "P_H [P_W]: HF pretrained_window_size, dividing the offsets instead of the "
                    "window (each at least 2)")
        ->expected(1, 2);
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] {
      SwinV2CoordsRequest r;
      std::tie(r.height, r.width) = window_sides(o.window);
      if (!o.pretrained.empty()) {
        std::tie(r.pretrained_height, r.pretrained_width) = window_sides(o.pretrained);
      }
      write_out(swinv2_coords_table(r), o.c);
    });
  }
  if (wanted("levit-index")) {
    static LevitOptions o;
    auto* sub = table->add_subcommand(
        "levit-index",
        "LeViT attention_bias_idxs: offset (|dy|, |dx|) numbered |dy| R + |dx| between "
        "queries (every stride-th point) and keys of an R x R grid; shape [R_out^2, R^2], "
        "integers (or the bias of a learned table)");
    sub->add_option("--resolution", o.r.resolution, "grid side R (HF resolution, resolution_in)")
        ->required();
    sub->add_option("--stride", o.r.stride,
                    "query stride s (default 1; 2 for LevitAttentionSubsample: R_out = "
                    "(R - 1) / s + 1)");
    sub->add_option("--bias-table", o.bias_table,
                    "learned attention_biases REF [heads, R^2]: write the bias it gives, "
                    "[heads, R_out^2, R^2], instead of the index");
    add_common(sub, o.c,
               "output dtype: i64 (default) or any integer dtype that holds the largest index, "
               "f32, f64; with --bias-table f32 (default), f64, f16, bf16");
    sub->callback([] {
      if (!o.bias_table.empty()) {
        levit_index_table(o.r);  // the sizes checked before the table is read
        o.r.bias_table = read_values(o.bias_table, "--bias-table", false);
      }
      write_out(levit_index_table(o.r), o.c);
    });
  }
  if (wanted("detr-sine")) {
    static DetrSineOptions o;
    auto* sub = table->add_subcommand(
        "detr-sine",
        "DETR 2-D sine embedding of a pixel mask (HF DetrSinePositionEmbedding): y then x "
        "channels, sin/cos interleaved; shape [b, 2E, H, W]");
    sub->add_option("--mask", o.mask, "pixel mask REF [b, H, W] (1 = pixel, 0 = padding)");
    sub->add_option("--size", o.size, "H W: an all-ones mask [1, H, W] instead of --mask")
        ->expected(2);
    sub->add_option("--embedding-dim", o.r.embedding_dim,
                    "E, channels per axis (HF embedding_dim; DETR passes d_model / 2), even")
        ->required();
    sub->add_option("--temperature", o.r.temperature, "temperature T (default 10000)");
    sub->add_flag("--no-normalize", o.no_normalize,
                  "use the raw cumulative sums (HF normalize=False; DETR normalises)");
    sub->add_option("--scale", o.scale,
                    "scale of the normalised sums (default 2 pi; needs normalisation)");
    sub->add_option("--layout", o.layout,
                    "channels ([b, 2E, H, W], default) or tokens ([b, H*W, 2E], flattened for "
                    "the encoder as HF's refactored forward does)")
        ->check(CLI::IsMember({"channels", "tokens"}));
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      if (o.mask.empty() == o.size.empty()) {
        throw UsageError("--mask: give a pixel mask or --size H W (one of them)");
      }
      o.r.normalize = !o.no_normalize;
      o.r.tokens = o.layout == "tokens";
      if (sub->count("--scale") > 0) o.r.scale = o.scale;
      if (!o.size.empty()) {
        o.r.height = o.size[0];
        o.r.width = o.size[1];
      } else {
        o.r.mask = read_values(o.mask, "--mask", true);
      }
      write_out(detr_sine_table(o.r), o.c);
    });
  }
  if (wanted("fairseq-sinusoidal")) {
    static FairseqOptions o;
    auto* sub = table->add_subcommand(
        "fairseq-sinusoidal",
        "fairseq sinusoidal positions (HF M2M-100, NLLB, XGLM get_embedding): [sin | cos] "
        "with frequencies exp(-i ln(10000) / (D/2 - 1)); shape [N, D], or [b, s, D] for the "
        "tokens of --input-ids");
    sub->add_option("--positions", o.positions, "rows N of the weights (not with --input-ids)");
    sub->add_option("--dim", o.r.dim, "embedding dimension D (>= 4; odd D: a zero column)")
        ->required();
    sub->add_option("--padding-idx", o.padding_idx,
                    "the row set to zero, and the id of padding tokens (HF padding_idx = "
                    "pad_token_id; needed with --input-ids)");
    sub->add_option("--input-ids", o.input_ids,
                    "token ids REF [b, s]: positions (cumsum of non-padding tokens + past) + "
                    "padding_idx, as HF create_position_ids_from_input_ids");
    sub->add_option("--past-length", o.r.past_length,
                    "HF past_key_values_length added to the positions (default 0; with "
                    "--input-ids)");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      o.r.positions = given(sub, "--positions", o.positions);
      o.r.padding_idx = given(sub, "--padding-idx", o.padding_idx);
      if (!o.input_ids.empty()) o.r.input_ids = read_ids(o.input_ids);
      write_out(fairseq_sinusoidal_table(o.r), o.c);
    });
  }
  if (wanted("layoutlm-bucket")) {
    static LayoutBucketOptions o;
    auto* sub = table->add_subcommand(
        "layoutlm-bucket",
        "LayoutLMv2/v3 relative buckets (HF relative_position_bucket, bidirectional) of "
        "position or bounding-box offsets c_j - c_i per row; shape [b, s, s], integers (or "
        "the bias [b, heads, s, s] of learned weights)");
    sub->add_option("--axis", o.axis,
                    "1d (token positions, default), x (bbox[..., 0]), y (bbox[..., 3]) or xy "
                    "(the x bias plus the y bias; needs two --bias-table weights)")
        ->check(CLI::IsMember({"1d", "x", "y", "xy"}));
    sub->add_option("--seq-len", o.seq_len, "1d: positions 0 .. S-1 of one row, [1, S, S]");
    sub->add_option("--position-ids", o.position_ids, "1d: integer positions REF [b, s]");
    sub->add_option("--bbox", o.bbox,
                    "x, y, xy: integer boxes REF [b, s, 4] (x0, y0, x1, y1 as HF bbox)");
    sub->add_option("--buckets", o.buckets,
                    "num_buckets (HF rel_pos_bins, default 32; rel_2d_pos_bins for boxes, "
                    "default 64)");
    sub->add_option("--max-distance", o.max_distance,
                    "max_distance (HF max_rel_pos, default 128; max_rel_2d_pos for boxes, "
                    "default 256)");
    sub->add_option("--bias-table", o.bias_table,
                    "learned weight REF [heads, buckets] (nn.Linear rel_pos_bias, rel_pos_x_bias "
                    "or rel_pos_y_bias; for xy two: x then y): write the bias it gives, [b, "
                    "heads, s, s], instead of the buckets")
        ->expected(1, 2);
    add_common(sub, o.c,
               "output dtype: i64 (default) or any integer dtype that holds the largest bucket, "
               "f32, f64; with --bias-table f32 (default), f64, f16, bf16");
    sub->callback([sub] {
      LayoutBucketRequest r;
      r.axis = parse_layout_axis(o.axis);
      if (sub->count("--seq-len") > 0) r.seq_len = o.seq_len;
      if (sub->count("--buckets") > 0) r.buckets = o.buckets;
      if (sub->count("--max-distance") > 0) r.max_distance = o.max_distance;
      if (o.bias_table.size() == 2 && r.axis != LayoutAxis::xy) {
        throw UsageError("--bias-table: two weights are for --axis xy (x then y)");
      }
      if (r.axis == LayoutAxis::xy && o.bias_table.size() != 2) {
        throw UsageError("--axis xy: needs --bias-table WX WY (the buckets are per axis: x or y)");
      }
      if (!o.position_ids.empty()) r.position_ids = read_int64(o.position_ids, "--position-ids");
      if (!o.bbox.empty()) r.bbox = read_int64(o.bbox, "--bbox");
      if (!o.bias_table.empty()) r.bias_table = read_values(o.bias_table[0], "--bias-table", false);
      if (o.bias_table.size() == 2) {
        r.bias_table_y = read_values(o.bias_table[1], "--bias-table", false);
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
    static ComplexOrderOptions o;
    auto* sub = table->add_subcommand(
        "complex-order",
        "Wang et al. 2020 complex word-order embeddings r exp(i (w pos + theta)): real parts "
        "r cos(w pos + theta), then imaginary parts r sin(...); shape [2, N, D], or [2, b, s, "
        "D] for the tokens of --input-ids");
    sub->add_option("--frequency", o.frequency,
                    "frequencies w REF: a vector [D], or a table [V, D] of one per word (with "
                    "--input-ids)")
        ->required();
    sub->add_option("--amplitude", o.amplitude, "amplitudes r REF, the shape of w (default 1)");
    sub->add_option("--phase", o.phase, "initial phases theta REF, the shape of w (default 0)");
    sub->add_option("--positions", o.positions, "rows N for vectors [D]: positions start ..");
    sub->add_option("--start", o.start, "position of the first row or token (default 0)");
    sub->add_option("--input-ids", o.input_ids,
                    "token ids REF [b, s] into tables [V, D]: token (b, s) at position start + s");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      ComplexOrderRequest r;
      if (sub->count("--positions") > 0) r.positions = o.positions;
      r.start = o.start;
      r.frequency = read_values(o.frequency, "--frequency", false);
      if (!o.amplitude.empty()) r.amplitude = read_values(o.amplitude, "--amplitude", false);
      if (!o.phase.empty()) r.phase = read_values(o.phase, "--phase", false);
      if (!o.input_ids.empty()) r.input_ids = read_int64(o.input_ids, "--input-ids");
      write_out(complex_order_table(r), o.c);
    });
  }
  if (wanted("reformer-axial")) {
    static ReformerAxialOptions o;
    auto* sub = table->add_subcommand(
        "reformer-axial",
        "Reformer axial position embeddings (HF AxialPositionEmbeddings): each axis weight "
        "broadcast over the grid n_1 x .. x n_k, concatenated along the features, rows in "
        "row-major order; shape [n_1 .. n_k, hidden], [N, hidden] or [b, s, hidden]");
    sub->add_option("--axial-shape", o.axial_shape,
                    "N1,N2[,..]: HF axial_pos_shape (1 to 8 sides; product at most 2^40)")
        ->required()
        ->delimiter(',');
    sub->add_option("--weights", o.weights,
                    "one weight REF per axis, in order, shaped as HF stores them: [N1, 1, d1], "
                    "[1, N2, d2], .. (HF weights.0, weights.1; d1 + d2 + .. = hidden)")
        ->required()
        ->expected(1, 8);
    sub->add_option("--positions", o.positions,
                    "rows N: positions 0 .. N-1 (N at most N1 N2 ..; default the whole table)");
    sub->add_option("--position-ids", o.position_ids,
                    "integer positions REF [b, s] (each below N1 N2 ..): the rows HF's "
                    "eval-mode forward selects, [b, s, hidden]");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] {
      AxialPositionsRequest r;
      for (long long n : o.axial_shape) r.axial_shape.push_back(n);
      r.positions = given(sub, "--positions", o.positions);
      // The shape and counts checked before any file is read (as the library checks them).
      axial_rows(r.axial_shape);
      if (o.weights.size() != r.axial_shape.size()) {
        throw UsageError(fmt::format("--weights: one per axis of --axial-shape, {} expected, got {}",
                                     r.axial_shape.size(), o.weights.size()));
      }
      if (r.positions && !o.position_ids.empty()) {
        throw UsageError("--positions: cannot be combined with --position-ids");
      }
      for (const std::string& w : o.weights) r.weights.push_back(read_values(w, "--weights", false));
      if (!o.position_ids.empty()) r.position_ids = read_int64(o.position_ids, "--position-ids");
      write_out(axial_positions_table(r), o.c);
    });
  }
  if (wanted("cpmant-bucket")) {
    static CpmAntBucketOptions o;
    auto* sub = table->add_subcommand(
        "cpmant-bucket",
        "CPM-Ant segment-aware relative buckets (HF CpmAntSegmentPositionEmbedding): T5 "
        "bidirectional buckets of j - i within a segment, buckets + q_seg * segments + k_seg "
        "across segments; shape [b, q, k], integers (or the bias [b, heads, q, k] of a "
        "learned table)");
    sub->add_option("--segment-ids", o.segment_ids,
                    "integer segments REF [b, s] (HF segment; each below --segments), or two: "
                    "query [b, q] then key [b, k] segments")
        ->expected(1, 2);
    sub->add_option("--seq-len", o.seq_len,
                    "S: one row of S tokens in segment 0 (the position buckets alone), [1, S, S]");
    sub->add_option("--segments", o.r.segments, "HF segment_types (num_segments; default 32)");
    sub->add_option("--buckets", o.r.buckets,
                    "HF position_bias_num_buckets (default 512; at least 4)");
    sub->add_option("--max-distance", o.r.max_distance,
                    "HF position_bias_max_distance (default 2048)");
    sub->add_option("--bias-table", o.bias_table,
                    "learned relative_attention_bias REF [segments^2 + buckets, heads]: write "
                    "the bias it gives, [b, heads, q, k], instead of the buckets");
    add_common(sub, o.c,
               "output dtype: i64 (default) or any integer dtype that holds the largest bucket, "
               "f32, f64; with --bias-table f32 (default), f64, f16, bf16");
    sub->callback([sub] {
      CpmAntBucketRequest r = o.r;
      if (sub->count("--seq-len") > 0) r.seq_len = o.seq_len;
      cpmant_bucket_check(r, !o.segment_ids.empty());
      if (!o.segment_ids.empty()) r.segment_ids = read_int64(o.segment_ids[0], "--segment-ids");
      if (o.segment_ids.size() == 2) {
        r.key_segment_ids = read_int64(o.segment_ids[1], "--segment-ids");
      }
      if (!o.bias_table.empty()) r.bias_table = read_values(o.bias_table, "--bias-table", false);
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
