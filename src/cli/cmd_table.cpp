// `posenc table KIND`: every encoding table (sinusoidal, rope, rope2d, alibi, relative,
// t5-bucket), computed in float64 and streamed to the output row block by row block.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/rope_options.hpp"
#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope2d.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Common {
  OutputOptions out;
  std::string dtype;
};

void add_common(CLI::App* sub, Common& c, const char* dtype_help) {
  add_output_options(sub, c.out);
  sub->add_option("--dtype", c.dtype, dtype_help);
}

DType float_dtype(const Common& c) {
  if (c.dtype.empty()) return DType::f32;
  DType t = parse_dtype(c.dtype, "--dtype");
  if (!is_float(t)) {
    throw UsageError(fmt::format(
        "--dtype: this table holds real numbers; expected f64, f32, f16 or bf16, got {}", c.dtype));
  }
  return t;
}

// Integer tables: any integer dtype that holds `max_value`, or f32/f64 (exact here).
DType int_dtype(const Common& c, std::int64_t max_value) {
  if (c.dtype.empty()) return DType::i64;
  DType t = parse_dtype(c.dtype, "--dtype");
  if (t == DType::f32 || t == DType::f64) return t;
  if (!is_integer(t)) {
    throw UsageError(fmt::format(
        "--dtype: this table holds integers; expected an integer dtype, f32 or f64, got {}",
        c.dtype));
  }
  const int bits = static_cast<int>(dtype_size(t)) * 8;
  const bool is_signed = t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64;
  const int value_bits = is_signed ? bits - 1 : bits;
  if (value_bits < 63 && max_value >= (std::int64_t{1} << value_bits)) {
    throw UsageError(fmt::format("--dtype: {} cannot hold the largest index {} of this table",
                                 dtype_name(t), max_value));
  }
  return t;
}

std::int64_t positive(long long v, const char* option) {
  if (v <= 0) throw UsageError(fmt::format("{}: must be at least 1, got {}", option, v));
  return v;
}

void write_out(const TableSpec& spec, DType dtype, Attrs attrs, const Common& c,
               const std::string& dataset) {
  checked_numel(spec.shape, dtype_size(dtype), "table");
  TensorRef ref = parse_ref(c.out.outputs.at(0), c.out.to, dataset);
  attrs.push_back({"dtype", std::string(dtype_name(dtype))});
  verbose(fmt::format("table shape {} as {}", shape_str(spec.shape), dtype_name(dtype)));
  verbose_attrs(attrs);
  TensorInfo info;
  info.dtype = dtype;
  info.shape = spec.shape;
  info.attrs = std::move(attrs);
  auto sink = create_sink(ref, info, c.out.write_options());
  write_table(spec, dtype, *sink);
  sink->commit();
}

// --- sinusoidal -------------------------------------------------------------------

struct SinusoidalOptions {
  Common c;
  long long positions = 0;
  int dim = 0;
  double base = 10000.0;
  long long start = 0;
  std::string layout = "interleaved";
};

void run_sinusoidal(const SinusoidalOptions& o) {
  const std::int64_t n = positive(o.positions, "--positions");
  if (o.start < 0) throw UsageError(fmt::format("--start: must be >= 0, got {}", o.start));
  last_position(o.start, n);
  auto freqs = std::make_shared<std::vector<double>>(sinusoidal_freqs(o.dim, o.base));
  const auto layout =
      o.layout == "concat" ? SinusoidalLayout::concat : SinusoidalLayout::interleaved;
  const DType dtype = float_dtype(o.c);
  TableSpec spec;
  spec.shape = {static_cast<std::size_t>(n), static_cast<std::size_t>(o.dim)};
  const double start = static_cast<double>(o.start);
  spec.line = [freqs, layout, start](std::size_t row, double* out) {
    sinusoidal_row(start + static_cast<double>(row), *freqs, layout, out);
  };
  Attrs attrs{{"kind", std::string("sinusoidal")},
              {"positions", static_cast<long long>(n)},
              {"start", o.start},
              {"dim", static_cast<long long>(o.dim)},
              {"base", o.base},
              {"layout", o.layout}};
  write_out(spec, dtype, std::move(attrs), o.c, "/sinusoidal");
}

// --- rope and rope2d: shared emission ------------------------------------------------

enum class Emit { inv_freq, angles, cos, sin, cos_sin, cos_sin_cache };

Emit parse_emit(const std::string& s) {
  if (s == "inv-freq") return Emit::inv_freq;
  if (s == "angles") return Emit::angles;
  if (s == "cos") return Emit::cos;
  if (s == "sin") return Emit::sin;
  if (s == "cos-sin") return Emit::cos_sin;
  if (s == "cos-sin-cache") return Emit::cos_sin_cache;
  throw UsageError(fmt::format(
      "--emit: unknown table '{}' (expected inv-freq, angles, cos, sin, cos-sin or cos-sin-cache)",
      s));
}

// How a row of half-width angles (one per frequency pair) becomes the emitted line.
struct RowShape {
  Emit emit = Emit::cos;
  bool half = false;  ///< [.., R/2] instead of [.., R]
  RopeStyle style = RopeStyle::neox;
  double scale = 1.0;     ///< attention factor on cos and sin
  double sin_sign = 1.0;  ///< -1 for the inverse rotation
  std::size_t pairs = 0;  ///< R/2

  std::size_t width() const {
    if (emit == Emit::cos_sin_cache) return 2 * pairs;
    return half ? pairs : 2 * pairs;
  }

  // Expands `h` (pairs values) into `out` in the pair layout.
  void expand(const double* h, double* out) const {
    if (half) {
      std::copy(h, h + pairs, out);
    } else if (style == RopeStyle::neox) {
      std::copy(h, h + pairs, out);
      std::copy(h, h + pairs, out + pairs);
    } else {
      for (std::size_t i = 0; i < pairs; ++i) out[2 * i] = out[2 * i + 1] = h[i];
    }
  }

  // `angle` holds the row's pairs angles; `part` is 0 (cos) or 1 (sin) for cos-sin.
  void line(double* angle, int part, double* out) const {
    if (emit == Emit::angles) {
      if (sin_sign < 0) {
        for (std::size_t i = 0; i < pairs; ++i) angle[i] = -angle[i];
      }
      expand(angle, out);
      return;
    }
    constexpr std::size_t kStack = 1024;
    double sbuf[kStack], cbuf[kStack];
    std::vector<double> heap;
    double *s = sbuf, *c = cbuf;
    if (pairs > kStack) {
      heap.resize(2 * pairs);
      s = heap.data();
      c = s + pairs;
    }
    sincos_array(angle, s, c, pairs);
    for (std::size_t i = 0; i < pairs; ++i) {
      c[i] *= scale;
      s[i] *= scale * sin_sign;
    }
    switch (emit) {
      case Emit::cos:
        expand(c, out);
        break;
      case Emit::sin:
        expand(s, out);
        break;
      case Emit::cos_sin:
        expand(part == 0 ? c : s, out);
        break;
      case Emit::cos_sin_cache:
        std::copy(c, c + pairs, out);
        std::copy(s, s + pairs, out + pairs);
        break;
      default:
        break;
    }
  }
};

std::string emit_dataset(const char* prefix, const std::string& emit) {
  std::string name = emit;
  std::replace(name.begin(), name.end(), '-', '_');
  return fmt::format("/{}{}", prefix, name);
}

void add_emit_options(CLI::App* sub, std::string& emit, std::string& layout, bool& half_width) {
  sub->add_option("--emit", emit,
                  "inv-freq | angles | cos | sin | cos-sin ([2, N, W]: cos then sin) | "
                  "cos-sin-cache (vLLM [N, R] = cat(cos_half, sin_half)); default cos-sin");
  sub->add_option("--layout", layout,
                  "full ([N, R] in the --style pair layout, default) or half ([N, R/2], one "
                  "column per frequency as flash-attn takes cos/sin)")
      ->check(CLI::IsMember({"full", "half"}));
  sub->add_flag("--half-width", half_width, "same as --layout half");
}

// --- rope -------------------------------------------------------------------------

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
  const Emit emit = parse_emit(o.emit);
  const DType dtype = float_dtype(o.c);
  if (sub->count("--dim") > 0 && o.dim <= 0) {
    throw UsageError(fmt::format("--dim: must be at least 1, got {}", o.dim));
  }
  if (o.dim <= 0 && o.rope.hf_config.empty()) {
    throw UsageError("--dim: the head dimension is required (or give --hf-config)");
  }
  if (sub->count("--positions") > 0) positive(o.positions, "--positions");
  Positions pos = rope_positions(o.rope);
  const bool f32 = rope_precision(o.rope) == Precision::f32;

  // Rows: explicit ids (any shape), packed sequences, or start + 0..N-1.
  auto ids = std::make_shared<std::vector<std::int64_t>>();
  Shape lead;
  std::int64_t max_pos = 0;
  if (!pos.ids.empty() || !pos.ids_shape.empty()) {
    if (sub->count("--start") > 0) {
      throw UsageError("--start: cannot be combined with --position-ids (ids are absolute)");
    }
    if (sub->count("--positions") > 0 && static_cast<std::size_t>(o.positions) != pos.ids.size()) {
      throw UsageError(fmt::format("--positions: {} does not match the {} ids of --position-ids",
                                   o.positions, pos.ids.size()));
    }
    if (pos.ids.empty()) throw InputError("--position-ids: the tensor holds no positions");
    *ids = pos.ids;
    lead = pos.ids_shape;
  } else if (!pos.cu_seqlens.empty()) {
    const std::int64_t total = pos.cu_seqlens.back();
    if (total <= 0) throw InputError("--cu-seqlens: the sequences hold no tokens");
    last_position(pos.start, total);
    if (sub->count("--positions") > 0 && o.positions != total) {
      throw UsageError(fmt::format("--positions: {} does not match the {} tokens of --cu-seqlens",
                                   o.positions, total));
    }
    ids->resize(static_cast<std::size_t>(total));
    for (std::size_t k = 0; k + 1 < pos.cu_seqlens.size(); ++k) {
      for (std::int64_t t = pos.cu_seqlens[k]; t < pos.cu_seqlens[k + 1]; ++t) {
        (*ids)[static_cast<std::size_t>(t)] = pos.start + (t - pos.cu_seqlens[k]);
      }
    }
    lead = {static_cast<std::size_t>(total)};
  } else if (emit != Emit::inv_freq) {
    if (sub->count("--positions") == 0) {
      throw UsageError("--positions: the number of positions is required");
    }
    lead = {static_cast<std::size_t>(o.positions)};
  }
  if (!ids->empty()) {
    max_pos = *std::max_element(ids->begin(), ids->end());
  } else {
    max_pos = last_position(pos.start, std::max<long long>(o.positions, 1));
  }

  RopeParams params = rope_params(o.rope, o.dim);
  if (params.seq_len == 0) params.seq_len = max_pos + 1;
  const RopeFreqs f = compute_rope_freqs(params);
  auto inv = std::make_shared<std::vector<double>>(f.inv_freq);

  RowShape rs;
  rs.emit = emit;
  rs.half = o.half_width || o.layout == "half";
  rs.style = f.style;
  rs.scale = f.attention_factor;
  rs.sin_sign = o.rope.inverse ? -1.0 : 1.0;
  rs.pairs = inv->size();

  Attrs attrs{{"kind", std::string("rope")}, {"emit", o.emit}};
  for (const auto& a : f.attrs) attrs.push_back(a);
  attrs.push_back({"layout", std::string(rs.half ? "half" : "full")});
  attrs.push_back({"precision", o.rope.precision});
  if (o.rope.inverse) attrs.push_back({"inverse", 1LL});

  TableSpec spec;
  if (emit == Emit::inv_freq) {
    spec.shape = {inv->size()};
    spec.line = [inv, f32](std::size_t, double* out) {
      for (std::size_t i = 0; i < inv->size(); ++i) {
        out[i] = f32 ? static_cast<double>(static_cast<float>((*inv)[i])) : (*inv)[i];
      }
    };
    write_out(spec, dtype, std::move(attrs), o.c, emit_dataset("rope_", o.emit));
    return;
  }
  if (ids->empty()) {
    attrs.push_back({"start", static_cast<long long>(pos.start)});
    attrs.push_back({"positions", o.positions});
  }
  std::size_t rows = 1;
  for (std::size_t d : lead) rows *= d;
  spec.shape = lead;
  if (emit == Emit::cos_sin) spec.shape.insert(spec.shape.begin(), 2);
  spec.shape.push_back(rs.width());
  const std::int64_t start = pos.start;
  spec.line = [inv, ids, rs, rows, start, f32](std::size_t line, double* out) {
    const int part = static_cast<int>(line / rows);
    const std::size_t row = line % rows;
    const std::int64_t p = ids->empty() ? start + static_cast<std::int64_t>(row) : (*ids)[row];
    constexpr std::size_t kStack = 1024;
    double abuf[kStack];
    std::vector<double> heap;
    double* a = abuf;
    if (rs.pairs > kStack) {
      heap.resize(rs.pairs);
      a = heap.data();
    }
    if (f32) {
      // HF's float32 angle formation: fp32(position) * fp32(inv_freq), rounded to fp32.
      const float pf = static_cast<float>(p);
      for (std::size_t i = 0; i < rs.pairs; ++i) {
        a[i] = static_cast<double>(pf * static_cast<float>((*inv)[i]));
      }
    } else {
      const double pd = static_cast<double>(p);
      for (std::size_t i = 0; i < rs.pairs; ++i) a[i] = pd * (*inv)[i];
    }
    rs.line(a, part, out);
  };
  write_out(spec, dtype, std::move(attrs), o.c, emit_dataset("rope_", o.emit));
}

// --- rope2d -----------------------------------------------------------------------

struct Rope2dOptions {
  Common c;
  long long height = 0, width = 0;
  int dim = 0;
  double base = 100.0;
  std::string order = "xy";
  std::string style = "gptj";
  std::string emit = "cos-sin";
  std::string layout = "full";
  bool half_width = false;
};

void run_rope2d(const Rope2dOptions& o) {
  const std::int64_t h = positive(o.height, "--height");
  const std::int64_t w = positive(o.width, "--width");
  const Emit emit = parse_emit(o.emit);
  const RopeStyle style = parse_rope_style(o.style);
  const DType dtype = float_dtype(o.c);
  auto freqs = std::make_shared<std::vector<double>>(rope2d_freqs(o.dim, o.base));
  const bool y_first = o.order == "yx";
  Attrs attrs{{"kind", std::string("rope2d")},
              {"emit", o.emit},
              {"height", static_cast<long long>(h)},
              {"width", static_cast<long long>(w)},
              {"dim", static_cast<long long>(o.dim)},
              {"base", o.base},
              {"order", o.order},
              {"rope_style", rope_style_name(style)}};
  TableSpec spec;
  if (emit == Emit::inv_freq) {
    spec.shape = {freqs->size()};
    spec.line = [freqs](std::size_t, double* out) { std::copy(freqs->begin(), freqs->end(), out); };
    write_out(spec, dtype, std::move(attrs), o.c, emit_dataset("rope2d_", o.emit));
    return;
  }
  RowShape rs;
  rs.emit = emit;
  rs.half = o.half_width || o.layout == "half";
  rs.style = style;
  rs.pairs = 2 * freqs->size();
  attrs.push_back({"layout", std::string(rs.half ? "half" : "full")});
  const std::size_t rows = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  if (rows / static_cast<std::size_t>(w) != static_cast<std::size_t>(h)) {
    throw UsageError("--height/--width: the grid is too large");
  }
  spec.shape = {rows, rs.width()};
  if (emit == Emit::cos_sin) spec.shape.insert(spec.shape.begin(), 2);
  spec.line = [freqs, rs, rows, w, y_first](std::size_t line, double* out) {
    const int part = static_cast<int>(line / rows);
    const std::size_t row = line % rows;
    std::vector<double> a(rs.pairs);
    rope2d_angles(static_cast<std::int64_t>(row), w, *freqs, y_first, a.data());
    rs.line(a.data(), part, out);
  };
  write_out(spec, dtype, std::move(attrs), o.c, emit_dataset("rope2d_", o.emit));
}

// --- alibi ------------------------------------------------------------------------

struct AlibiOptions {
  Common c;
  int heads = 0;
  long long q_len = 0, k_len = 0;
  std::string variant;
  double max_bias = 8.0;
};

void run_alibi(const AlibiOptions& o, CLI::App* sub) {
  const bool lengths = sub->count("--q-len") > 0 || sub->count("--k-len") > 0;
  const std::string variant = o.variant.empty() ? (lengths ? "causal" : "slopes") : o.variant;
  auto slopes = std::make_shared<std::vector<double>>(alibi_slopes(o.heads, o.max_bias));
  const DType dtype = float_dtype(o.c);
  Attrs attrs{{"kind", std::string("alibi")},
              {"variant", variant},
              {"heads", static_cast<long long>(o.heads)},
              {"max_bias", o.max_bias},
              {"slopes", *slopes}};
  TableSpec spec;
  if (variant == "slopes") {
    if (lengths) throw UsageError("--variant slopes: takes no --q-len/--k-len");
    spec.shape = {slopes->size()};
    spec.line = [slopes](std::size_t, double* out) {
      std::copy(slopes->begin(), slopes->end(), out);
    };
    write_out(spec, dtype, std::move(attrs), o.c, "/alibi_slopes");
    return;
  }
  if (!lengths) {
    throw UsageError(fmt::format("--variant {}: needs --q-len and/or --k-len", variant));
  }
  const std::int64_t q = positive(sub->count("--q-len") ? o.q_len : o.k_len, "--q-len");
  const std::int64_t k = positive(sub->count("--k-len") ? o.k_len : o.q_len, "--k-len");
  AlibiVariant v = AlibiVariant::causal;
  if (variant == "symmetric")
    v = AlibiVariant::symmetric;
  else if (variant == "fairseq")
    v = AlibiVariant::fairseq;
  else if (variant == "bottom-right")
    v = AlibiVariant::bottom_right;
  // The causal forms are only defined for keys at or before the query: those entries
  // hold -inf, so the table is the additive bias including the causal mask.
  const bool mask_future = v == AlibiVariant::causal || v == AlibiVariant::fairseq;
  attrs.push_back({"q_len", static_cast<long long>(q)});
  attrs.push_back({"k_len", static_cast<long long>(k)});
  spec.shape = {slopes->size(), static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  spec.allow_neg_inf = mask_future;
  spec.line = [slopes, v, q, k, mask_future](std::size_t line, double* out) {
    const std::size_t head = line / static_cast<std::size_t>(q);
    const auto i = static_cast<std::int64_t>(line % static_cast<std::size_t>(q));
    const double m = (*slopes)[head];
    for (std::int64_t j = 0; j < k; ++j) {
      out[j] = (mask_future && j > i) ? -kInf : alibi_bias(v, m, i, j, q, k);
    }
  };
  write_out(spec, dtype, std::move(attrs), o.c, "/alibi");
}

// --- relative and t5-bucket -----------------------------------------------------------

struct PairOptions {
  Common c;
  long long q_len = 0, k_len = 0;
  long long max_distance = -1;
  std::string sign = "k-q";
  int buckets = 32;
  bool bidirectional = false, causal = false;
};

std::pair<std::int64_t, std::int64_t> pair_lengths(const PairOptions& o, CLI::App* sub) {
  const bool has_q = sub->count("--q-len") > 0, has_k = sub->count("--k-len") > 0;
  if (!has_q && !has_k) throw UsageError("--q-len/--k-len: the table size is required");
  const std::int64_t q = positive(has_q ? o.q_len : o.k_len, "--q-len");
  const std::int64_t k = positive(has_k ? o.k_len : o.q_len, "--k-len");
  return {q, k};
}

void run_relative(const PairOptions& o, CLI::App* sub) {
  auto [q, k] = pair_lengths(o, sub);
  if (sub->count("--max-distance") == 0) throw UsageError("--max-distance: M is required");
  if (o.max_distance < 0 || o.max_distance > (std::int64_t{1} << 52)) {
    throw UsageError(fmt::format("--max-distance: must be >= 0, got {}", o.max_distance));
  }
  const std::int64_t m = o.max_distance;
  const DType dtype = int_dtype(o.c, 2 * m);
  const bool q_minus_k = o.sign == "q-k";
  Attrs attrs{{"kind", std::string("relative")},
              {"q_len", static_cast<long long>(q)},
              {"k_len", static_cast<long long>(k)},
              {"max_distance", static_cast<long long>(m)},
              {"sign", o.sign}};
  TableSpec spec;
  spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  spec.line = [k, m, q_minus_k](std::size_t i, double* out) {
    for (std::int64_t j = 0; j < k; ++j) {
      out[j] = static_cast<double>(relative_index(static_cast<std::int64_t>(i), j, m, q_minus_k));
    }
  };
  write_out(spec, dtype, std::move(attrs), o.c, "/relative");
}

void run_t5(const PairOptions& o, CLI::App* sub) {
  auto [q, k] = pair_lengths(o, sub);
  if (o.bidirectional && o.causal) {
    throw UsageError("--bidirectional: cannot be combined with --causal");
  }
  const bool bidirectional = !o.causal;
  const long long max_distance = sub->count("--max-distance") ? o.max_distance : 128;
  if (o.buckets <= 0 || max_distance <= 0 || max_distance > std::numeric_limits<int>::max()) {
    throw UsageError("--buckets/--max-distance: must be positive");
  }
  const int md = static_cast<int>(max_distance);
  t5_bucket(0, bidirectional, o.buckets, md);  // validates the pair (throws UsageError)
  const DType dtype = int_dtype(o.c, o.buckets - 1);
  const int nb = o.buckets;
  Attrs attrs{{"kind", std::string("t5-bucket")},
              {"q_len", static_cast<long long>(q)},
              {"k_len", static_cast<long long>(k)},
              {"num_buckets", static_cast<long long>(nb)},
              {"max_distance", max_distance},
              {"bidirectional", static_cast<long long>(bidirectional ? 1 : 0)}};
  TableSpec spec;
  spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  spec.line = [k, bidirectional, nb, md](std::size_t i, double* out) {
    for (std::int64_t j = 0; j < k; ++j) {
      out[j] =
          static_cast<double>(t5_bucket(j - static_cast<std::int64_t>(i), bidirectional, nb, md));
    }
  };
  write_out(spec, dtype, std::move(attrs), o.c, "/t5_bucket");
}

constexpr const char* kFloatDtypeHelp =
    "output dtype: f32 (default), f64, f16, bf16 (computed in f64, rounded once)";
constexpr const char* kIntDtypeHelp =
    "output dtype: i64 (default), any integer dtype that holds the largest index, f32 or f64";

}  // namespace

void register_table(CLI::App& app) {
  auto* table = app.add_subcommand("table", "generate an encoding table");
  table->require_subcommand(1);

  {
    static SinusoidalOptions o;
    auto* sub =
        table->add_subcommand("sinusoidal",
                              "Vaswani table PE[p,2i] = sin(p w_i), PE[p,2i+1] = cos(p w_i), "
                              "w_i = 1/base^(2i/D); shape [N, D]");
    sub->add_option("--positions", o.positions, "number of positions N")->required();
    sub->add_option("--dim", o.dim, "model dimension D (even)")->required();
    sub->add_option("--base", o.base, "frequency base (default 10000)");
    sub->add_option("--start", o.start, "first position (default 0)");
    sub->add_option("--layout", o.layout,
                    "interleaved (sin, cos pairs; default) or concat ([sin | cos])")
        ->check(CLI::IsMember({"interleaved", "concat"}));
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] { run_sinusoidal(o); });
  }
  {
    static RopeTableOptions o;
    auto* sub = table->add_subcommand(
        "rope", "RoPE tables (inv_freq, angles, cos, sin) with HF scaling variants");
    sub->add_option("--positions", o.positions, "number of positions N");
    sub->add_option("--dim", o.dim, "head dimension D (or from --hf-config)");
    add_emit_options(sub, o.emit, o.layout, o.half_width);
    add_rope_options(sub, o.rope);
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] { run_rope(o, sub); });
  }
  {
    static Rope2dOptions o;
    auto* sub = table->add_subcommand(
        "rope2d", "axial 2-D RoPE for an H x W grid: D/4 frequencies per axis; shape [H*W, D]");
    sub->add_option("--height", o.height, "grid height H (rows)")->required();
    sub->add_option("--width", o.width, "grid width W (columns)")->required();
    sub->add_option("--dim", o.dim, "head dimension D (multiple of 4)")->required();
    sub->add_option("--base", o.base, "theta base (default 100, as RoPE-ViT)");
    sub->add_option("--order", o.order, "xy (x block first, default) or yx")
        ->check(CLI::IsMember({"xy", "yx"}));
    sub->add_option("--style", o.style,
                    "pair layout of full-width tables: gptj (default; the seed's complex "
                    "form) or neox");
    add_emit_options(sub, o.emit, o.layout, o.half_width);
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([] { run_rope2d(o); });
  }
  {
    static AlibiOptions o;
    auto* sub = table->add_subcommand("alibi",
                                      "ALiBi slopes [H] or bias matrices [H, Q, K] (Press et al.)");
    sub->add_option("--heads", o.heads, "number of heads H (any count)")->required();
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--variant", o.variant,
                    "slopes (default without lengths), causal (default with lengths), "
                    "symmetric, fairseq or bottom-right")
        ->check(CLI::IsMember({"slopes", "causal", "symmetric", "fairseq", "bottom-right"}));
    sub->add_option("--max-bias", o.max_bias, "ggml max_bias; 8 gives Press's slopes");
    add_common(sub, o.c, kFloatDtypeHelp);
    sub->callback([sub] { run_alibi(o, sub); });
  }
  {
    static PairOptions o;
    auto* sub = table->add_subcommand(
        "relative", "Shaw clipped relative index clip(j-i, -M, M) + M; shape [Q, K], integers");
    sub->add_option("--q-len", o.q_len, "query length Q (default: K)");
    sub->add_option("--k-len", o.k_len, "key length K (default: Q)");
    sub->add_option("--max-distance", o.max_distance, "clipping distance M")->required();
    sub->add_option("--sign", o.sign, "k-q (j - i, default; tensor2tensor) or q-k (i - j)")
        ->check(CLI::IsMember({"k-q", "q-k"}));
    add_common(sub, o.c, kIntDtypeHelp);
    sub->callback([sub] { run_relative(o, sub); });
  }
  {
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
    sub->callback([sub] { run_t5(o, sub); });
  }
}

}  // namespace posenc::cli
