// `posenc table KIND`: every encoding table (sinusoidal, rope, rope2d, alibi, relative,
// t5-bucket, xl-relative, funnel-relative, funnel-factorized, deberta-bucket, swin-index,
// beit-index, swinv2-coords, levit-index, detr-sine, fairseq-sinusoidal, layoutlm-bucket,
// complex-order, reformer-axial, cpmant-bucket, longt5-global, rt-detr-sincos, udop-bucket).
// The options fill the library's table requests (encodings/tables.hpp and the modules beside
// it); the table is computed in float64 and streamed to the output block by block.

#include <fmt/format.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
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

// Writes the tables of one run (several for --emit cos,sin) to their outputs, all
// visible together or none. `names` (for RoPE tables, whose -o may name one output per
// table, a pattern or a group) name the tables in -o patterns and groups; without them
// there is one table and one -o.
void write_all(std::vector<Table> tables, const std::vector<std::string>& names, const Common& c) {
  std::vector<std::string> defaults;
  std::vector<DType> dtypes;
  const Part part = c.part.empty() ? Part{} : parse_part(c.part, "--part");
  for (Table& t : tables) {
    const DType dtype = table_dtype(t, c.dtype, "--dtype");
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

struct RopeTableOptions {
  Common c;
  RopeCliOptions rope;
  long long positions = 0;
  int dim = 0;
  RopeTableRequest r;  // --emit, --layout (its declared fields)
};

void run_rope(const RopeTableOptions& o, CLI::App* sub) {
  if (sub->count("--dim") > 0 && o.dim <= 0) {
    throw UsageError(fmt::format("--dim: must be at least 1, got {}", o.dim));
  }
  if (o.dim <= 0 && o.rope.hf_config.empty()) {
    throw UsageError("--dim: the head dimension is required (or give --hf-config)");
  }
  RopeTableRequest r = o.r;
  r.where = rope_positions(o.rope);
  if (sub->count("--position-ids") > 0 && sub->count("--start") > 0) {
    throw UsageError("--start: cannot be combined with --position-ids (ids are absolute)");
  }
  if (sub->count("--positions") > 0) r.positions = o.positions;
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
  r.inverse = o.rope.apply.inverse;
  r.precision = rope_precision(o.rope);
  // Every table is described (and its request checked) before any output is opened.
  std::vector<Table> tables;
  std::vector<std::string> names;
  for_each_emitted(r, [&](const std::string& name) {
    tables.push_back(rope_table(r));
    names.push_back(name);
  });
  write_all(std::move(tables), names, o.c);
}
// A kind: its request (the declared fields bound to options), its output options, the
// files of its array fields, and its subcommand.
template <class R>
struct Kind {
  Common c;
  R r;
  ArrayFiles files;
  CLI::App* sub = nullptr;

  // The rules joining the request's fields checked, then its files read.
  void read() {
    check_given(r, command_line(sub));
    files.read();
  }
};

// A kind whose options are all declared: its request reduced to its table, or to one
// table per name of its --emit list (each its own output).
template <class R>
void add_plain_kind(CLI::App* table, const char* name, const char* help,
                    const std::string& dtype_help, Table (*compute)(const R&), R preset = R{}) {
  static std::list<Kind<R>> kinds;  // swin-index and beit-index share a request type
  Kind<R>& o = kinds.emplace_back();
  o.r = std::move(preset);
  o.sub = table->add_subcommand(name, help);
  add_declared_options(o.sub, o.r, &o.files);
  const bool several = emits_several<R>();
  add_common(o.sub, o.c, dtype_help.c_str(), several);
  o.sub->callback([&o, compute, several] {
    o.read();
    std::vector<Table> tables;
    std::vector<std::string> names;
    for_each_emitted(o.r, [&](const std::string& table_name) {
      tables.push_back(in_callers_terms(o.r, command_line(o.sub), [&] { return compute(o.r); }));
      names.push_back(table_name);
    });
    write_all(std::move(tables), several ? names : std::vector<std::string>{}, o.c);
  });
}

constexpr const char* kFloatDtypeHelp =
    "output dtype: f32 (default), f64, f16, bf16 (computed in f64, rounded once)";
constexpr const char* kIntDtypeHelp =
    "output dtype: i64 (default), any integer dtype that holds the largest index, f32 or f64";

// The dtypes of an index table that a learned table turns into a bias (`what`: what the
// index holds).
std::string bias_dtype_help(const char* what) {
  return fmt::format(
      "output dtype: i64 (default) or any integer dtype that holds the largest {}, f32, f64; "
      "with --bias-table f32 (default), f64, f16, bf16",
      what);
}

}  // namespace

void register_table(CLI::App& app) {
  auto* table = app.add_subcommand("table", "generate an encoding table");
  table->require_subcommand(1);
  // Only the kind this run names is defined: the options of all of them were two
  // thirds of a small table's run time.
  const auto wanted = [](std::string_view kind) {
    return defines_kind(
        "table", kind,
        {"sinusoidal",        "rope",           "rope2d",         "alibi",
         "relative",          "t5-bucket",      "xl-relative",    "funnel-relative",
         "funnel-factorized", "deberta-bucket", "swin-index",     "beit-index",
         "swinv2-coords",     "levit-index",    "detr-sine",      "fairseq-sinusoidal",
         "layoutlm-bucket",   "complex-order",  "reformer-axial", "cpmant-bucket",
         "longt5-global",     "rt-detr-sincos", "udop-bucket"});
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
    add_declared_options(sub, o.r);
    add_rope_options(sub, o.rope);
    add_common(sub, o.c, kFloatDtypeHelp, /*several=*/true);
    sub->callback([sub] { run_rope(o, sub); });
  }
  if (wanted("rope2d")) {
    add_plain_kind<Rope2dRequest>(
        table, "rope2d",
        "axial 2-D RoPE for an H x W grid: D/4 frequencies per axis; shape [H*W, D]",
        kFloatDtypeHelp, rope2d_table);
  }
  if (wanted("alibi")) {
    add_plain_kind<AlibiRequest>(table, "alibi",
                                 "ALiBi slopes [H] or bias matrices [H, Q, K] (Press et al.)",
                                 kFloatDtypeHelp, alibi_table);
  }
  if (wanted("relative")) {
    add_plain_kind<RelativeRequest>(
        table, "relative",
        "Shaw relative index clip(d, -L, R) + L of the distance d = j-i (or i-j), L = R = M "
        "by default; -1 beyond the window with --beyond zero; shape [Q, K], integers (or the "
        "rows of a learned table gathered, [Q, K, dim])",
        "output dtype: i64 (default), any integer dtype that holds the indices (signed "
        "with --beyond zero), f32 or f64; with --embeddings f32 (default), f64, f16, bf16",
        relative_table);
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
    add_plain_kind<FunnelFactorizedRequest>(
        table, "funnel-factorized",
        "Funnel Transformer factorized attention tables phi, pi [queries, D] and psi, omega "
        "[keys, D] of sin/cos over pooled token positions (HF get_position_embeds)",
        kFloatDtypeHelp, funnel_factorized_table);
  }
  if (wanted("deberta-bucket")) {
    add_plain_kind<DebertaBucketRequest>(
        table, "deberta-bucket",
        "DeBERTa-v2/v3 relative positions i - j with log buckets (HF build_relative_position); "
        "shape [Q, K], integers",
        kIntDtypeHelp, deberta_bucket_table);
  }
  if (wanted("swin-index")) {
    add_plain_kind<WindowIndexRequest>(
        table, "swin-index",
        "Swin relative_position_index of an H x W window: (dy + H-1)(2W-1) + dx + W-1; shape "
        "[HW, HW], integers (or the bias [heads, HW, HW] of a learned table)",
        bias_dtype_help("index"), window_index_table);
  }
  if (wanted("beit-index")) {
    WindowIndexRequest beit;
    beit.class_token = true;
    add_plain_kind<WindowIndexRequest>(
        table, "beit-index",
        "BEiT / Data2Vec-vision relative_position_index: swin-index with a class token first "
        "and 3 more entries (class to token, token to class, class to class); shape [HW+1, "
        "HW+1], integers (or the bias of a learned table)",
        bias_dtype_help("index"), window_index_table, beit);
  }
  if (wanted("swinv2-coords")) {
    add_plain_kind<SwinV2CoordsRequest>(
        table, "swinv2-coords",
        "Swin-V2 relative_coords_table, the input of its position-bias MLP: sign(c) "
        "log2(1 + |c|) / 3 with c = 8 d / (P - 1) for the offsets d of an H x W window; "
        "shape [2H-1, 2W-1, 2] (with --mlp: the bias [heads, HW, HW])",
        kFloatDtypeHelp, swinv2_coords_table);
  }
  if (wanted("levit-index")) {
    add_plain_kind<LevitIndexRequest>(
        table, "levit-index",
        "LeViT attention_bias_idxs: offset (|dy|, |dx|) numbered |dy| R + |dx| between "
        "queries (every stride-th point) and keys of an R x R grid; shape [R_out^2, R^2], "
        "integers (or the bias of a learned table)",
        bias_dtype_help("index"), levit_index_table);
  }
  if (wanted("detr-sine")) {
    add_plain_kind<DetrSineRequest>(
        table, "detr-sine",
        "DETR 2-D sine embedding of a pixel mask (HF DetrSinePositionEmbedding): y then x "
        "channels, sin/cos interleaved; shape [b, 2E, H, W]",
        kFloatDtypeHelp, detr_sine_table);
  }
  if (wanted("udop-bucket")) {
    add_plain_kind<UdopBucketRequest>(
        table, "udop-bucket",
        "UDOP relative buckets (HF RelativePositionBias1D / Horizontal / Vertical): T5 "
        "bidirectional buckets of trunc((p_j - p_i) * scaling_factor) over token positions or "
        "box centres; shape [b, s, s], integers, or the bias [b, heads, s, s] of learned "
        "weights (--axis all: the three summed, as RelativePositionBiasAggregated)",
        bias_dtype_help("bucket"), udop_bucket_table);
  }
  if (wanted("rt-detr-sincos")) {
    add_plain_kind<RtDetrSincosRequest>(
        table, "rt-detr-sincos",
        "RT-DETR 2-D sin-cos embedding of an H x W feature map (HF RTDetrHybridEncoder."
        "build_2d_sincos_position_embedding; also RT-DETRv2, D-FINE): channels sin/cos of y "
        "then of x, frequencies 1 / T^(k / (E/4)); shape [1, H*W, E]",
        kFloatDtypeHelp, rt_detr_sincos_table);
  }
  if (wanted("fairseq-sinusoidal")) {
    add_plain_kind<FairseqSinusoidalRequest>(
        table, "fairseq-sinusoidal",
        "fairseq sinusoidal positions (HF M2M-100, NLLB, XGLM get_embedding): [sin | cos] "
        "with frequencies exp(-i ln(10000) / (D/2 - 1)); shape [N, D], or [b, s, D] for the "
        "tokens of --input-ids",
        kFloatDtypeHelp, fairseq_sinusoidal_table);
  }
  if (wanted("layoutlm-bucket")) {
    add_plain_kind<LayoutBucketRequest>(
        table, "layoutlm-bucket",
        "LayoutLMv2/v3 relative buckets (HF relative_position_bucket, bidirectional) of "
        "position or bounding-box offsets c_j - c_i per row; shape [b, s, s], integers (or "
        "the bias [b, heads, s, s] of learned weights)",
        bias_dtype_help("bucket"), layout_bucket_table);
  }
  if (wanted("complex-order")) {
    add_plain_kind<ComplexOrderRequest>(
        table, "complex-order",
        "Wang et al. 2020 complex word-order embeddings r exp(i (w pos + theta)): real parts "
        "r cos(w pos + theta), then imaginary parts r sin(...); shape [2, N, D], or [2, b, s, "
        "D] for the tokens of --input-ids",
        kFloatDtypeHelp, complex_order_table);
  }
  if (wanted("reformer-axial")) {
    add_plain_kind<AxialPositionsRequest>(
        table, "reformer-axial",
        "Reformer axial position embeddings (HF AxialPositionEmbeddings): each axis weight "
        "broadcast over the grid n_1 x .. x n_k, concatenated along the features, rows in "
        "row-major order; shape [n_1 .. n_k, hidden], [N, hidden] or [b, s, hidden]",
        kFloatDtypeHelp, axial_positions_table);
  }
  if (wanted("longt5-global")) {
    add_plain_kind<LongT5GlobalRequest>(
        table, "longt5-global",
        "LongT5 transient-global index maps (HF _make_global_fixed_block_ids, "
        "_make_side_relative_position_ids): block ids [b, s], global segment ids [b, s/G] or "
        "side relative positions [b, s, s/G], integers",
        kIntDtypeHelp, longt5_global_table);
  }
  if (wanted("cpmant-bucket")) {
    add_plain_kind<CpmAntBucketRequest>(
        table, "cpmant-bucket",
        "CPM-Ant segment-aware relative buckets (HF CpmAntSegmentPositionEmbedding): T5 "
        "bidirectional buckets of j - i within a segment, buckets + q_seg * segments + k_seg "
        "across segments; shape [b, q, k], integers (or the bias [b, heads, q, k] of a "
        "learned table)",
        bias_dtype_help("bucket"), cpmant_bucket_table);
  }
}

}  // namespace posenc::cli
