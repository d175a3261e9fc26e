// The table kinds of `posenc table` as library requests: each reduces to a TableSpec
// whose line function computes one vector along the last axis in float64.

#include "posenc/encodings/tables.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope2d.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Per-line scratch on the stack for usual widths (lines are computed millions of times;
// a heap allocation each would cost more than the line).
class Scratch {
 public:
  explicit Scratch(std::size_t n) : p_(n <= kStack ? stack_ : (heap_.resize(n), heap_.data())) {}
  double* get() { return p_; }

 private:
  static constexpr std::size_t kStack = 2048;
  double stack_[kStack];
  std::vector<double> heap_;
  double* p_;
};

std::int64_t positive(std::int64_t v, const char* name) {
  if (v <= 0) throw UsageError(fmt::format("{}: must be at least 1, got {}", name, v));
  return v;
}

// The last of `count` positions from `start`, within the 2^53 positions are exact to.
std::int64_t last_position(std::int64_t start, std::int64_t count) {
  if (count > kMaxPosition - start + 1) {
    throw UsageError(fmt::format("start: {} with {} positions goes beyond 2^53 = {}", start,
                                 count, kMaxPosition));
  }
  return start + count - 1;
}

// A request's (q_len, k_len): either gives the other by default.
std::pair<std::int64_t, std::int64_t> lengths(const std::optional<std::int64_t>& q,
                                              const std::optional<std::int64_t>& k) {
  if (!q && !k) throw UsageError("q_len/k_len: the table size is required");
  return {positive(q ? *q : *k, "q_len"), positive(k ? *k : *q, "k_len")};
}

// How a row of angles (one per frequency pair) becomes the emitted line.
struct RowShape {
  RopeEmit emit = RopeEmit::cos;
  bool half = false;  ///< [.., R/2] instead of [.., R]
  RopeStyle style = RopeStyle::neox;
  double scale = 1.0;     ///< attention factor on cos and sin
  double sin_sign = 1.0;  ///< -1 for the inverse rotation
  std::size_t pairs = 0;  ///< R/2

  std::size_t width() const {
    if (emit == RopeEmit::cos_sin_cache) return 2 * pairs;
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

  // `angle` holds the row's angles; `part` is 0 (cos) or 1 (sin) for cos_sin.
  void line(double* angle, int part, double* out) const {
    if (emit == RopeEmit::angles) {
      if (sin_sign < 0) {
        for (std::size_t i = 0; i < pairs; ++i) angle[i] = -angle[i];
      }
      expand(angle, out);
      return;
    }
    Scratch buf(2 * pairs);
    double* s = buf.get();
    double* c = s + pairs;
    sincos_array(angle, s, c, pairs);
    for (std::size_t i = 0; i < pairs; ++i) {
      c[i] *= scale;
      s[i] *= scale * sin_sign;
    }
    values(c, s, part, out);
  }

  // The row's cos and sin (scaled and signed) in the emitted layout.
  void values(const double* c, const double* s, int part, double* out) const {
    switch (emit) {
      case RopeEmit::cos:
        expand(c, out);
        break;
      case RopeEmit::sin:
        expand(s, out);
        break;
      case RopeEmit::cos_sin:
        expand(part == 0 ? c : s, out);
        break;
      case RopeEmit::cos_sin_cache:
        std::copy(c, c + pairs, out);
        std::copy(s, s + pairs, out + pairs);
        break;
      default:
        break;
    }
  }
};

std::string emit_dataset(const char* prefix, RopeEmit e) {
  std::string name = rope_emit_name(e);
  std::replace(name.begin(), name.end(), '-', '_');
  return fmt::format("/{}{}", prefix, name);
}

// One float64 vector as a table (inv_freq, slopes).
Table vector_table(std::vector<double> v, Attrs attrs, std::string dataset) {
  auto values = std::make_shared<std::vector<double>>(std::move(v));
  Table t;
  t.spec.shape = {values->size()};
  t.spec.line = [values](std::size_t, double* out) {
    std::copy(values->begin(), values->end(), out);
  };
  t.attrs = std::move(attrs);
  t.dataset = std::move(dataset);
  return t;
}

// The token positions of a RoPE table: explicit ids, packed sequences, or none (then
// start + row). Sets `lead` to the table's shape before the line axis.
std::vector<std::int64_t> table_ids(const RopeTableRequest& r, Shape& lead) {
  const Positions& pos = r.where;
  std::vector<std::int64_t> ids;
  if (!pos.ids.empty() || !pos.ids_shape.empty()) {
    if (pos.start != 0) {
      throw UsageError("start: cannot be combined with position ids (ids are absolute)");
    }
    // Rows of coordinates: M-RoPE's three, or one per section of a layout from the
    // parameters (its table is refused below if it has none).
    const std::size_t rows = r.rope.layout.custom() ? r.rope.layout.sections.size() : 3;
    const bool multi = !r.rope.mrope_section.empty() || r.rope.layout.custom();
    if (multi && !pos.ids_shape.empty() && pos.ids_shape[0] == rows &&
        pos.ids_shape.size() > 1) {
      // M-RoPE ids [3, ...]: one table line per token, each pair from its component.
      lead.assign(pos.ids_shape.begin() + 1, pos.ids_shape.end());
      return pos.ids;
    }
    if (r.positions && static_cast<std::size_t>(*r.positions) != pos.ids.size()) {
      throw UsageError(fmt::format("positions: {} does not match the {} position ids",
                                   *r.positions, pos.ids.size()));
    }
    if (pos.ids.empty()) throw InputError(pos.ids_what + ": the tensor holds no positions");
    lead = pos.ids_shape;
    return pos.ids;
  }
  if (!pos.cu_seqlens.empty()) {
    const std::int64_t total = pos.cu_seqlens.back();
    if (total <= 0) throw InputError(pos.cu_what + ": the sequences hold no tokens");
    last_position(pos.start, total);
    if (r.positions && *r.positions != total) {
      throw UsageError(fmt::format("positions: {} does not match the {} tokens of the packed "
                                   "sequences",
                                   *r.positions, total));
    }
    ids.resize(static_cast<std::size_t>(total));
    for (std::size_t k = 0; k + 1 < pos.cu_seqlens.size(); ++k) {
      for (std::int64_t t = pos.cu_seqlens[k]; t < pos.cu_seqlens[k + 1]; ++t) {
        ids[static_cast<std::size_t>(t)] = pos.start + (t - pos.cu_seqlens[k]);
      }
    }
    lead = {static_cast<std::size_t>(total)};
    return ids;
  }
  if (r.emit != RopeEmit::inv_freq) {
    // HF's tables span max_position_embeddings.
    const std::optional<std::int64_t> n = r.positions ? r.positions : r.rope.max_pos;
    if (!n) {
      throw UsageError(
          "positions: the number of positions is required (or max_pos, HF "
          "max_position_embeddings)");
    }
    lead = {static_cast<std::size_t>(positive(*n, "positions"))};
  }
  return ids;
}

// The position component (row of ids [3, ...]) of each pair under the layout the
// parameters imply (ERNIE-4.5-VL's), for a table with one line per token. Only layouts
// that give each pair one of the three components and its own frequency have such a
// table; others are refused.
std::vector<int> layout_components(const RopeFreqs& f) {
  const RopeLayout l = resolve_rope_layout(f.layout, f);
  const std::size_t half = f.inv_freq.size();
  bool ok = l.axes == 3 && l.pairing == RopePairing::style;
  std::vector<int> comp(half, 0);
  for (std::size_t j = 0; ok && j < half; ++j) {
    int terms = 0;
    for (std::size_t a = 0; a < l.axes; ++a) {
      if (l.freq[a * half + j] == 0.0) continue;
      comp[j] = static_cast<int>(a);
      ++terms;
    }
    ok = terms <= 1 && l.freq[static_cast<std::size_t>(comp[j]) * half + j] == f.inv_freq[j];
  }
  if (!ok) {
    throw UsageError(fmt::format("table rope: the RoPE layout '{}' has no table of one line "
                                 "per token; posenc rope applies it",
                                 rope_layout_preset_name(f.layout.preset)));
  }
  return comp;
}

}  // namespace

DType default_table_dtype(const Table& t) { return t.integral ? DType::i64 : DType::f32; }

DType table_dtype(const Table& t, const std::string& name, const std::string& what) {
  const DType dtype = name.empty() ? default_table_dtype(t) : parse_dtype(name, what);
  check_table_dtype(t, dtype);
  checked_numel(t.spec.shape, dtype_size(dtype), "table");
  return dtype;
}

void check_table_dtype(const Table& t, DType dtype) {
  if (!t.integral) {
    if (!is_float(dtype)) {
      throw UsageError(fmt::format(
          "dtype: this table holds real numbers; expected f64, f32, f16 or bf16, got {}",
          dtype_name(dtype)));
    }
    return;
  }
  if (dtype == DType::f32 || dtype == DType::f64) return;
  if (!is_integer(dtype)) {
    throw UsageError(fmt::format(
        "dtype: this table holds integers; expected an integer dtype, f32 or f64, got {}",
        dtype_name(dtype)));
  }
  const int bits = static_cast<int>(dtype_size(dtype)) * 8;
  const bool is_signed = dtype == DType::i8 || dtype == DType::i16 || dtype == DType::i32 ||
                         dtype == DType::i64;
  const int value_bits = is_signed ? bits - 1 : bits;
  if (value_bits < 63 && t.max_value >= (std::int64_t{1} << value_bits)) {
    throw UsageError(fmt::format("dtype: {} cannot hold the largest index {} of this table",
                                 dtype_name(dtype), t.max_value));
  }
  if (t.min_value < 0 && (!is_signed || (value_bits < 63 &&
                                           t.min_value < -(std::int64_t{1} << value_bits)))) {
    throw UsageError(fmt::format("dtype: {} cannot hold the smallest value {} of this table",
                                 dtype_name(dtype), t.min_value));
  }
}

xt::xarray<double> evaluate_table(const Table& t) {
  const Shape& shape = t.spec.shape;
  checked_numel(shape, sizeof(double), "table");
  xt::xarray<double> out = xt::empty<double>(std::vector<std::size_t>(shape.begin(), shape.end()));
  const std::size_t width = shape.back();
  const std::size_t lines = width == 0 ? 0 : out.size() / width;
  if (shape.size() == 1) {
    t.spec.line(0, out.data());
    return out;
  }
  const auto n = static_cast<std::int64_t>(lines);
#pragma omp parallel for schedule(static)
  for (std::int64_t l = 0; l < n; ++l) {
    t.spec.line(static_cast<std::size_t>(l), out.data() + static_cast<std::size_t>(l) * width);
  }
  return out;
}

// --- sinusoidal -------------------------------------------------------------------

Table sinusoidal_table(const SinusoidalRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const std::int64_t n = positive(r.positions, "positions");
  if (r.start < 0) throw UsageError(fmt::format("start: must be >= 0, got {}", r.start));
  last_position(r.start, n);
  auto freqs = std::make_shared<std::vector<double>>(sinusoidal_freqs(r.dim, r.base));
  Table t;
  t.spec.shape = {static_cast<std::size_t>(n), static_cast<std::size_t>(r.dim)};
  const double start = static_cast<double>(r.start);
  const SinusoidalLayout layout = r.layout;
  t.spec.line = [freqs, layout, start](std::size_t row, double* out) {
    sinusoidal_row(start + static_cast<double>(row), *freqs, layout, out);
  };
  t.attrs = {{"kind", std::string("sinusoidal")},
             {"positions", static_cast<long long>(n)},
             {"start", static_cast<long long>(r.start)},
             {"dim", static_cast<long long>(r.dim)},
             {"base", r.base},
             {"layout", std::string(layout == SinusoidalLayout::concat ? "concat"
                                                                       : "interleaved")}};
  t.dataset = "/sinusoidal";
  return t;
}

// --- rope and rope2d ----------------------------------------------------------------

RopeEmit parse_rope_emit(const std::string& s) {
  if (s == "inv-freq") return RopeEmit::inv_freq;
  if (s == "angles") return RopeEmit::angles;
  if (s == "cos") return RopeEmit::cos;
  if (s == "sin") return RopeEmit::sin;
  if (s == "cos-sin") return RopeEmit::cos_sin;
  if (s == "cos-sin-cache") return RopeEmit::cos_sin_cache;
  throw UsageError(fmt::format(
      "emit: unknown table '{}' (expected inv-freq, angles, cos, sin, cos-sin or cos-sin-cache)",
      s));
}

std::string rope_emit_name(RopeEmit e) {
  switch (e) {
    case RopeEmit::inv_freq:
      return "inv-freq";
    case RopeEmit::angles:
      return "angles";
    case RopeEmit::cos:
      return "cos";
    case RopeEmit::sin:
      return "sin";
    case RopeEmit::cos_sin:
      return "cos-sin";
    case RopeEmit::cos_sin_cache:
      return "cos-sin-cache";
  }
  return "";
}

Table rope_table(const RopeTableRequest& r) {
  validate(r.where);
  const bool f32 = r.precision == Precision::f32;
  Shape lead;
  auto ids = std::make_shared<std::vector<std::int64_t>>(table_ids(r, lead));
  const std::int64_t start = r.where.start;
  const std::int64_t max_pos =
      ids->empty()
          ? start + std::max<std::int64_t>(lead.empty() ? r.positions.value_or(1) : lead[0], 1) - 1
          : *std::max_element(ids->begin(), ids->end());
  RopeParams params = r.rope;
  if (params.seq_len == 0) params.seq_len = max_pos + 1;
  const RopeFreqs f = compute_rope_freqs(params);
  const std::shared_ptr<const FrameworkRope> fw = f.framework;
  if (fw && fw->arith == Arith::ggml && r.emit == RopeEmit::inv_freq) {
    throw UsageError(
        "emit inv-freq: ggml forms each angle by repeated multiplication, without a "
        "frequency vector; emit angles, cos or sin");
  }

  Attrs attrs{{"kind", std::string("rope")}, {"emit", rope_emit_name(r.emit)}};
  for (const auto& a : f.attrs) attrs.push_back(a);
  attrs.push_back({"layout", std::string(r.half ? "half" : "full")});
  // A framework's arithmetic (`arith`) has no precision of posenc's own to record.
  if (!fw) attrs.push_back({"precision", std::string(f32 ? "f32" : "f64")});
  if (r.inverse) attrs.push_back({"inverse", 1LL});
  const std::string dataset = emit_dataset("rope_", r.emit);

  if (r.emit == RopeEmit::inv_freq) {
    std::vector<double> inv = f.inv_freq;
    if (f32) {
      for (double& v : inv) v = static_cast<double>(static_cast<float>(v));
    }
    return vector_table(std::move(inv), std::move(attrs), dataset);
  }
  if (ids->empty()) {
    attrs.push_back({"rope_start", static_cast<long long>(start)});  // as `rope` records it
    attrs.push_back({"positions", static_cast<long long>(lead[0])});
  }
  RowShape rs;
  rs.emit = r.emit;
  rs.half = r.half;
  rs.style = f.style;
  rs.scale = f.attention_factor;
  rs.sin_sign = r.inverse ? -1.0 : 1.0;
  rs.pairs = f.inv_freq.size();
  std::size_t rows = 1;
  for (std::size_t d : lead) rows *= d;

  Table t;
  t.spec.shape = lead;
  if (r.emit == RopeEmit::cos_sin) t.spec.shape.insert(t.spec.shape.begin(), 2);
  t.spec.shape.push_back(rs.width());
  // Angles are positions ⊗ frequencies: one row of the outer product per line.
  auto inv = std::make_shared<xt::xtensor<double, 1>>(xt::adapt(f.inv_freq));
  auto inv32 = std::make_shared<xt::xtensor<float, 1>>(xt::cast<float>(*inv));
  // M-RoPE ids [3, ...]: pair j takes the position of its component.
  std::shared_ptr<std::vector<int>> comp;
  if (!f.mrope_section.empty() && ids->size() == 3 * rows) {
    comp = std::make_shared<std::vector<int>>(
        mrope_components(f.mrope_section, f.mrope_interleaved, rs.pairs));
  } else if (f.layout.custom() && ids->size() == f.layout.sections.size() * rows) {
    comp = std::make_shared<std::vector<int>>(layout_components(f));
  }
  if (fw && comp && (fw->arith != Arith::hf || f.mrope_section.empty())) {
    throw UsageError(fmt::format("--arith {}: {} ids are computed exactly only",
                                 arith_name(fw->arith),
                                 f.mrope_section.empty()
                                     ? "the " + rope_layout_preset_name(f.layout.preset) + " layout's"
                                     : std::string("M-RoPE")));
  }
  const bool merged = f.mrope_interleaved;
  t.spec.line = [inv, inv32, ids, comp, rs, rows, start, f32, fw, merged](std::size_t line,
                                                                         double* out) {
    const int part = static_cast<int>(line / rows);
    const std::size_t row = line % rows;
    const std::int64_t p = ids->empty() ? start + static_cast<std::int64_t>(row) : (*ids)[row];
    if (fw) {
      // Framework arithmetic: the framework's own float32 angles, cos and sin.
      std::vector<float> fa(rs.pairs), fc(rs.pairs), fs(rs.pairs);
      framework_rope_row(*fw, p, rs.sin_sign < 0, fa.data(), fc.data(), fs.data());
      // M-RoPE (hf): pair j from the row at its component's position, as Qwen2-VL picks
      // its sections after cos and sin; Qwen3-VL merges the angles before them (torch's
      // cos of a value depends on its 8-lane vector: see framework_trig).
      for (int ax = 1; comp && ax < 3; ++ax) {
        std::vector<float> ca(rs.pairs), cc(rs.pairs), cs(rs.pairs);
        framework_rope_row(*fw, (*ids)[static_cast<std::size_t>(ax) * rows + row],
                           rs.sin_sign < 0, ca.data(), cc.data(), cs.data());
        for (std::size_t j = 0; j < rs.pairs; ++j) {
          if ((*comp)[j] != ax) continue;
          fa[j] = ca[j], fc[j] = cc[j], fs[j] = cs[j];
        }
      }
      if (comp && merged) {
        framework_trig(*fw, fa.data(), rs.pairs, rs.sin_sign < 0, fc.data(), fs.data());
      }
      if (rs.emit == RopeEmit::angles) {
        std::vector<double> a(fa.begin(), fa.end());
        rs.line(a.data(), part, out);
      } else {
        std::vector<double> c(fc.begin(), fc.end()), s(fs.begin(), fs.end());
        rs.values(c.data(), s.data(), part, out);
      }
      return;
    }
    Scratch buf(rs.pairs);
    auto angle = xt::adapt(buf.get(), rs.pairs, xt::no_ownership(),
                           std::array<std::size_t, 1>{rs.pairs});
    if (comp) {
      for (std::size_t j = 0; j < rs.pairs; ++j) {
        const auto pj = (*ids)[static_cast<std::size_t>((*comp)[j]) * rows + row];
        buf.get()[j] = f32 ? static_cast<double>(static_cast<float>(pj) * (*inv32)(j))
                           : static_cast<double>(pj) * (*inv)(j);
      }
    } else if (f32) {
      // fp32(position) * fp32(correctly rounded inv_freq), rounded to fp32 (a
      // framework's own frequencies differ in the last bits: see Arith).
      angle = xt::cast<double>(static_cast<float>(p) * *inv32);
    } else {
      angle = static_cast<double>(p) * *inv;
    }
    rs.line(buf.get(), part, out);
  };
  t.attrs = std::move(attrs);
  t.dataset = dataset;
  return t;
}

Table rope2d_table(const Rope2dRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const std::int64_t h = positive(r.height, "height");
  const std::int64_t w = positive(r.width, "width");
  auto freqs = std::make_shared<std::vector<double>>(rope2d_freqs(r.dim, r.base));
  Attrs attrs{{"kind", std::string("rope2d")},
              {"emit", rope_emit_name(r.emit)},
              {"height", static_cast<long long>(h)},
              {"width", static_cast<long long>(w)},
              {"dim", static_cast<long long>(r.dim)},
              {"base", r.base},
              {"order", std::string(r.y_first ? "yx" : "xy")},
              {"rope_style", rope_style_name(r.style)}};
  const std::string dataset = emit_dataset("rope2d_", r.emit);
  if (r.emit == RopeEmit::inv_freq) return vector_table(*freqs, std::move(attrs), dataset);
  RowShape rs;
  rs.emit = r.emit;
  rs.half = r.half;
  rs.style = r.style;
  rs.pairs = 2 * freqs->size();
  attrs.push_back({"layout", std::string(rs.half ? "half" : "full")});
  const std::size_t rows = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  if (rows / static_cast<std::size_t>(w) != static_cast<std::size_t>(h)) {
    throw UsageError("height/width: the grid is too large");
  }
  Table t;
  t.spec.shape = {rows, rs.width()};
  if (r.emit == RopeEmit::cos_sin) t.spec.shape.insert(t.spec.shape.begin(), 2);
  const bool y_first = r.y_first;
  t.spec.line = [freqs, rs, rows, w, y_first](std::size_t line, double* out) {
    const int part = static_cast<int>(line / rows);
    const std::size_t row = line % rows;
    Scratch a(rs.pairs);
    rope2d_angles(static_cast<std::int64_t>(row), w, *freqs, y_first, a.get());
    rs.line(a.get(), part, out);
  };
  t.attrs = std::move(attrs);
  t.dataset = dataset;
  return t;
}

// --- alibi ------------------------------------------------------------------------

AlibiTable parse_alibi_table(const std::string& s) {
  if (s == "slopes") return AlibiTable::slopes;
  if (s == "causal") return AlibiTable::causal;
  if (s == "symmetric") return AlibiTable::symmetric;
  if (s == "fairseq") return AlibiTable::fairseq;
  if (s == "bottom-right") return AlibiTable::bottom_right;
  throw UsageError(fmt::format(
      "variant: unknown ALiBi table '{}' (expected slopes, causal, symmetric, fairseq or "
      "bottom-right)",
      s));
}

std::string alibi_table_name(AlibiTable v) {
  switch (v) {
    case AlibiTable::slopes:
      return "slopes";
    case AlibiTable::causal:
      return "causal";
    case AlibiTable::symmetric:
      return "symmetric";
    case AlibiTable::fairseq:
      return "fairseq";
    case AlibiTable::bottom_right:
      return "bottom-right";
  }
  return "";
}

Table alibi_table(const AlibiRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const bool has_lengths = r.q_len || r.k_len;
  const AlibiTable variant =
      r.variant.value_or(has_lengths ? AlibiTable::causal : AlibiTable::slopes);
  auto slopes = std::make_shared<std::vector<double>>(alibi_slopes(r.heads, r.max_bias));
  Attrs attrs{{"kind", std::string("alibi")},
              {"variant", alibi_table_name(variant)},
              {"heads", static_cast<long long>(r.heads)},
              {"max_bias", r.max_bias},
              {"slopes", *slopes}};
  if (variant == AlibiTable::slopes) {
    if (has_lengths) throw UsageError("variant: the slopes table takes no q_len/k_len");
    return vector_table(*slopes, std::move(attrs), "/alibi_slopes");
  }
  if (!has_lengths) {
    throw UsageError(fmt::format("variant: the {} table needs q_len and/or k_len",
                                 alibi_table_name(variant)));
  }
  const auto [q, k] = lengths(r.q_len, r.k_len);
  AlibiVariant v = AlibiVariant::causal;
  if (variant == AlibiTable::symmetric) v = AlibiVariant::symmetric;
  if (variant == AlibiTable::fairseq) v = AlibiVariant::fairseq;
  if (variant == AlibiTable::bottom_right) v = AlibiVariant::bottom_right;
  // The causal forms are only defined for keys at or before the query: those entries
  // hold -inf, so the table is the additive bias including the causal mask.
  const bool mask_future = v == AlibiVariant::causal || v == AlibiVariant::fairseq;
  attrs.push_back({"q_len", static_cast<long long>(q)});
  attrs.push_back({"k_len", static_cast<long long>(k)});
  Table t;
  t.spec.shape = {slopes->size(), static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  t.spec.allow_neg_inf = mask_future;
  const std::int64_t qq = q, kk = k;
  t.spec.line = [slopes, v, qq, kk, mask_future](std::size_t line, double* out) {
    const std::size_t head = line / static_cast<std::size_t>(qq);
    const auto i = static_cast<std::int64_t>(line % static_cast<std::size_t>(qq));
    const double m = (*slopes)[head];
    for (std::int64_t j = 0; j < kk; ++j) {
      out[j] = (mask_future && j > i) ? -kInf : alibi_bias(v, m, i, j, qq, kk);
    }
  };
  t.attrs = std::move(attrs);
  t.dataset = "/alibi";
  return t;
}

// --- relative and t5-bucket -----------------------------------------------------------

RelativeWindow relative_window(const RelativeRequest& r) {
  constexpr std::int64_t kMax = std::int64_t{1} << 52;
  if (r.max_distance < 0 && !(r.left && r.right)) {
    throw UsageError(fmt::format(
        "max_distance: needed (from 0 to 2^52) unless left and right are both given, got {}",
        r.max_distance));
  }
  if (r.max_distance >= 0 && r.left && r.right) {
    throw UsageError("max_distance: not used when left and right are both given (give two of them)");
  }
  if (r.max_distance > kMax) {
    throw UsageError(fmt::format("max_distance: must be from 0 to 2^52, got {}", r.max_distance));
  }
  RelativeWindow w;
  w.left = r.left.value_or(r.max_distance);
  w.right = r.right.value_or(r.max_distance);
  for (const auto& [name, v] : {std::pair{"left", w.left}, std::pair{"right", w.right}}) {
    if (v < 0 || v > kMax) {
      throw UsageError(fmt::format("{}: must be from 0 to 2^52, got {}", name, v));
    }
  }
  w.q_minus_k = r.q_minus_k;
  w.zero_beyond = r.zero_beyond;
  return w;
}

Table relative_table(const RelativeRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const auto [q, k] = lengths(r.q_len, r.k_len);
  const RelativeWindow w = relative_window(r);
  // Distances d of the pairs: j - i from -(Q-1) to K-1 (k-q), i - j from -(K-1) to Q-1.
  const std::int64_t dmin = r.q_minus_k ? 1 - k : 1 - q, dmax = r.q_minus_k ? q - 1 : k - 1;
  const bool some_beyond = dmin < -w.left || dmax > w.right;
  const std::int64_t kk = k;
  Table t;
  t.attrs = {{"kind", std::string("relative")},
             {"q_len", static_cast<long long>(q)},
             {"k_len", static_cast<long long>(k)},
             {"left", static_cast<long long>(w.left)},
             {"right", static_cast<long long>(w.right)},
             {"sign", std::string(r.q_minus_k ? "q-k" : "k-q")},
             {"beyond", std::string(r.zero_beyond ? "zero" : "clamp")}};
  if (w.left == w.right) t.attrs.push_back({"max_distance", static_cast<long long>(w.left)});
  t.dataset = "/relative";
  if (!r.embeddings) {
    t.integral = true;
    t.max_value = w.left + w.right;
    t.min_value = r.zero_beyond && some_beyond ? -1 : 0;
    t.spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
    t.spec.line = [kk, w](std::size_t i, double* out) {
      for (std::int64_t j = 0; j < kk; ++j) {
        out[j] = static_cast<double>(w.index(static_cast<std::int64_t>(i), j));
      }
    };
    return t;
  }
  const xt::xarray<double>& e = *r.embeddings;
  if (e.dimension() != 2 || static_cast<std::int64_t>(e.shape(0)) != w.rows() || e.shape(1) == 0) {
    std::string shape;
    for (std::size_t d : e.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw InputError(
        fmt::format("embeddings: expected shape ({}, dim) for left {} and right {}, "
                    "got ({})",
                    w.rows(), w.left, w.right, shape));
  }
  for (std::size_t n = 0; n < e.size(); ++n) {
    if (!std::isfinite(e.data()[n])) {
      throw InputError(
          fmt::format("embeddings: entry ({}, {}) is not finite", n / e.shape(1), n % e.shape(1)));
    }
  }
  auto table = std::make_shared<const xt::xarray<double>>(e);
  const std::size_t dim = e.shape(1);
  t.attrs.push_back({"dim", static_cast<long long>(dim)});
  t.dataset += "_embeddings";
  t.spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k), dim};
  // embedding(index): line (i, j) is row index(i, j), or zeros.
  t.spec.line = [kk, w, table, dim](std::size_t line, double* out) {
    const auto i = static_cast<std::int64_t>(line / static_cast<std::size_t>(kk));
    const auto j = static_cast<std::int64_t>(line % static_cast<std::size_t>(kk));
    const std::int64_t row = w.index(i, j);
    for (std::size_t c = 0; c < dim; ++c) {
      out[c] = row < 0 ? 0.0 : table->data()[static_cast<std::size_t>(row) * dim + c];
    }
  };
  return t;
}

Table t5_bucket_table(const T5BucketRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const auto [q, k] = lengths(r.q_len, r.k_len);
  if (r.buckets <= 0 || r.max_distance <= 0 ||
      r.max_distance > std::numeric_limits<int>::max()) {
    throw UsageError("buckets/max_distance: must be positive");
  }
  const int md = static_cast<int>(r.max_distance);
  const bool bidirectional = r.bidirectional;
  const int nb = r.buckets;
  t5_bucket(0, bidirectional, nb, md);  // validates the pair (throws UsageError)
  Table t;
  t.integral = true;
  t.max_value = nb - 1;
  t.attrs = {{"kind", std::string("t5-bucket")},
             {"q_len", static_cast<long long>(q)},
             {"k_len", static_cast<long long>(k)},
             {"num_buckets", static_cast<long long>(nb)},
             {"max_distance", static_cast<long long>(r.max_distance)},
             {"bidirectional", static_cast<long long>(bidirectional ? 1 : 0)}};
  t.spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  const std::int64_t kk = k;
  t.spec.line = [kk, bidirectional, nb, md](std::size_t i, double* out) {
    for (std::int64_t j = 0; j < kk; ++j) {
      out[j] =
          static_cast<double>(t5_bucket(j - static_cast<std::int64_t>(i), bidirectional, nb, md));
    }
  };
  t.dataset = "/t5_bucket";
  return t;
}

}  // namespace posenc
