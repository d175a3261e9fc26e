// Absolute encodings added to embeddings (ops/add_positions.hpp): an applier that turns
// slabs of x into slabs of x * scale + PE, used whole in memory or by the slab pipeline.

#include "posenc/ops/add_positions.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "ops/slab_pipeline.hpp"
#include "ops/widen.hpp"
#include "posenc/encodings/table.hpp"
#include "posenc/error.hpp"

namespace posenc {

Combine parse_combine(const std::string& s) {
  if (s == "add") return Combine::add;
  if (s == "mul") return Combine::mul;
  throw UsageError(fmt::format("combine {}: expected add or mul", s));
}

xt::xarray<std::int64_t> positions_from_mask(const xt::xarray<std::int64_t>& mask, std::size_t s) {
  if (mask.dimension() != 2 || mask.shape()[1] < s) {
    throw InputError(fmt::format(
        "attention_mask: expected a mask [b, n] with n >= {} (the sequence length), got shape {}",
        s, shape_str(Shape(mask.shape().begin(), mask.shape().end()))));
  }
  const std::size_t b = mask.shape()[0], n = mask.shape()[1];
  xt::xarray<std::int64_t> out = xt::empty<std::int64_t>({b, s});
  for (std::size_t r = 0; r < b; ++r) {
    std::int64_t sum = 0;
    for (std::size_t c = 0; c < n; ++c) {
      const std::int64_t m = mask(r, c);
      if (m != 0 && m != 1) {
        throw InputError(fmt::format(
            "attention_mask: entry ({}, {}) is {}; an attention mask holds 0 and 1", r, c, m));
      }
      sum += m;
      if (c >= n - s) out(r, c - (n - s)) = sum * m - 1;
    }
  }
  return out;
}

namespace {

// Axis letters of an embedding: b, s, d (s and d required), by rank when not given.
std::string embedding_axes(const std::string& user, std::size_t rank, const std::string& what) {
  std::string axes = user;
  if (axes.empty()) {
    if (rank == 3) {
      axes = "bsd";
    } else if (rank == 2) {
      axes = "sd";
    } else {
      throw InputError(fmt::format(
          "{}: expected embeddings of rank 3 (b, s, d) or 2 (s, d), got rank {}", what, rank));
    }
  }
  const bool letters_ok = std::all_of(axes.begin(), axes.end(), [&](char c) {
    return std::string("bsd").find(c) != std::string::npos &&
           std::count(axes.begin(), axes.end(), c) == 1;
  });
  if (!letters_ok || axes.find('s') == std::string::npos || axes.find('d') == std::string::npos) {
    throw UsageError(fmt::format(
        "axes {}: embeddings take distinct letters from b, s, d, with s and d (e.g. bsd, sbd)",
        axes));
  }
  if (axes.size() != rank) {
    throw InputError(fmt::format("{}: {} axis letters ({}) for a tensor of rank {}", what,
                                 axes.size(), axes, rank));
  }
  return axes;
}

// Input values of one line as float64.
void load_line(DType dt, const std::byte* src, std::size_t n, double* out) {
  switch (dt) {
    case DType::f64: {
      const double* p = reinterpret_cast<const double*>(src);
      std::copy(p, p + n, out);
      break;
    }
    case DType::f32: {
      const float* p = reinterpret_cast<const float*>(src);
      for (std::size_t i = 0; i < n; ++i) out[i] = p[i];
      break;
    }
    default:  // f16, bf16 (only float inputs reach here): exact, vectorised
      detail::widen(dt, src, out, n);
      break;
  }
}

// x * scale + PE for one tensor geometry, slab by slab along `slab_axis` (every axis
// before it has extent 1). PE rows are float64 [rows, d]: those of the slab's positions
// when s is the slab axis, otherwise all s positions, computed once.
class AddApplier {
 public:
  AddApplier(const Shape& shape, DType in, const std::string& user_axes, const AbsoluteEncoding& e,
             DType out, bool allow_nonfinite, std::string what, std::size_t slab_axis)
      : shape_(shape),
        in_(in),
        out_(out),
        e_(e),
        allow_nonfinite_(allow_nonfinite),
        what_(std::move(what)),
        axis_(slab_axis) {
    axes_ = embedding_axes(user_axes, shape.size(), what_);
    check_types();
    s_axis_ = axes_.find('s');
    d_axis_ = axes_.find('d');
    b_axis_ = axes_.find('b');
    S_ = shape[s_axis_];
    D_ = shape[d_axis_];
    B_ = b_axis_ == std::string::npos ? 1 : shape[b_axis_];
    strides_.assign(shape.size(), 1);
    for (std::size_t i = shape.size() - 1; i > 0; --i) strides_[i - 1] = strides_[i] * shape[i];
    row_elems_ = shape.empty() ? 1 : strides_[axis_];
    if (e_.scale_sqrt_d) e_.scale = std::sqrt(static_cast<double>(D_));
    check_encoding();
  }

  const std::string& axes() const { return axes_; }
  double scale() const { return e_.scale; }
  std::size_t in_row_bytes() const { return row_elems_ * dtype_size(in_); }
  std::size_t out_row_bytes() const { return row_elems_ * dtype_size(out_); }
  std::size_t rows_total() const { return shape_[axis_]; }
  std::size_t table_bytes(std::size_t rows) const {
    if (e_.positions) return 0;  // rows are formed per line (a row per thread)
    return (s_axis_ == axis_ ? rows : S_) * D_ * sizeof(double);
  }

  void rows(const std::byte* src, std::byte* dst, std::size_t first, std::size_t count) {
    if (e_.positions) {
      rows_per_token(src, dst, first, count);
      return;
    }
    const bool slab_on_s = s_axis_ == axis_;
    const std::vector<double>& pe = slab_on_s ? pe_rows(first, count, slab_pe_) : all_rows();
    const std::size_t p0 = slab_on_s ? first : 0;  // position index of pe's row 0
    const std::size_t L = shape_.back();
    const std::size_t last = shape_.size() - 1;
    const std::ptrdiff_t pe_step = last == d_axis_ ? 1 : last == s_axis_ ? D_ : 0;
    const std::size_t lines = count * row_elems_ / std::max<std::size_t>(L, 1);
    const std::size_t g0 = first * row_elems_;
    const double scale = e_.scale;
    std::atomic<bool> bad{false};
#pragma omp parallel
    {
      std::vector<double> buf(L);
#pragma omp for schedule(static)
      for (std::size_t li = 0; li < lines; ++li) {
        const std::size_t g = g0 + li * L;  // flat index of the line's first element
        const std::size_t s = (g / strides_[s_axis_]) % S_ - p0;
        const std::size_t d = (g / strides_[d_axis_]) % D_;
        const double* p = pe.data() + s * D_ + d;
        load_line(in_, src + li * L * dtype_size(in_), L, buf.data());
        bool line_bad = false;
        for (std::size_t k = 0; k < L; ++k) {
          line_bad |= !std::isfinite(buf[k]);
          buf[k] = combine(buf[k] * scale, p[static_cast<std::ptrdiff_t>(k) * pe_step]);
        }
        if (line_bad) bad = true;
        convert_values(buf.data(), L, out_, dst + li * L * dtype_size(out_));
      }
    }
    check_finite(bad);
  }

 private:
  double combine(double xs, double pe) const {
    return e_.combine == Combine::mul ? xs * pe : xs + pe;
  }

  void check_finite(bool bad) const {
    if (bad && !allow_nonfinite_) {
      throw InputError(fmt::format(
          "{}: input contains NaN or Inf (use allow_nonfinite to add to it anyway)", what_));
    }
  }

  // The table row of token (b, s) with per-token positions.
  std::int64_t row_of(std::size_t b, std::size_t s) const {
    const xt::xarray<std::int64_t>& p = *e_.positions;
    const std::int64_t pos = p.dimension() == 1 ? p(s) : p(p.shape()[0] == 1 ? 0 : b, s);
    return pos + e_.offset;
  }

  // Per-token positions: each line's PE taken row by row, one cached row per thread.
  void rows_per_token(const std::byte* src, std::byte* dst, std::size_t first, std::size_t count) {
    const std::size_t L = shape_.back();
    const std::size_t last = shape_.size() - 1;
    const std::size_t lines = count * row_elems_ / std::max<std::size_t>(L, 1);
    const std::size_t g0 = first * row_elems_;
    const double scale = e_.scale;
    std::atomic<bool> bad{false};
#pragma omp parallel
    {
      std::vector<double> buf(L), pe(D_);
      std::int64_t cached = std::numeric_limits<std::int64_t>::min();
#pragma omp for schedule(static)
      for (std::size_t li = 0; li < lines; ++li) {
        load_line(in_, src + li * L * dtype_size(in_), L, buf.data());
        bool line_bad = false;
        const auto b_of = [&](std::size_t g) {
          return b_axis_ == std::string::npos ? 0 : (g / strides_[b_axis_]) % B_;
        };
        const auto use_row = [&](std::int64_t row) {
          if (row != cached) {
            pe_row(row, pe.data());
            cached = row;
          }
        };
        if (last == d_axis_) {  // the line is one token
          const std::size_t g = g0 + li * L;
          use_row(row_of(b_of(g), (g / strides_[s_axis_]) % S_));
          for (std::size_t k = 0; k < L; ++k) {
            line_bad |= !std::isfinite(buf[k]);
            buf[k] = combine(buf[k] * scale, pe[k]);
          }
        } else {
          for (std::size_t k = 0; k < L; ++k) {
            const std::size_t g = g0 + li * L + k;
            use_row(row_of(b_of(g), (g / strides_[s_axis_]) % S_));
            line_bad |= !std::isfinite(buf[k]);
            buf[k] = combine(buf[k] * scale, pe[(g / strides_[d_axis_]) % D_]);
          }
        }
        if (line_bad) bad = true;
        convert_values(buf.data(), L, out_, dst + li * L * dtype_size(out_));
      }
    }
    check_finite(bad);
  }

  void pe_row(std::int64_t p, double* row) const {
    if (e_.table) {
      const std::size_t base = static_cast<std::size_t>(p) * D_;
      for (std::size_t c = 0; c < D_; ++c) row[c] = e_.table->get(base + c);
    } else {
      sinusoidal_row(static_cast<double>(p), freqs_, e_.layout, row);
    }
  }

  // The smallest and largest table row used, checked against the table.
  std::pair<std::int64_t, std::int64_t> row_range() const {
    if (!e_.positions) {
      const std::int64_t lo = e_.start + e_.offset;
      return {lo, lo + static_cast<std::int64_t>(S_) - 1};
    }
    const xt::xarray<std::int64_t>& p = *e_.positions;
    const auto shape = p.shape();
    const bool ok = (p.dimension() == 1 && shape[0] == S_) ||
                    (p.dimension() == 2 && shape[1] == S_ && (shape[0] == B_ || shape[0] == 1));
    if (!ok) {
      throw InputError(fmt::format(
          "positions: expected [{}, {}], [1, {}] or [{}] (batch and sequence of {}), got shape {}",
          B_, S_, S_, S_, what_, shape_str(Shape(shape.begin(), shape.end()))));
    }
    std::int64_t lo = std::numeric_limits<std::int64_t>::max();
    std::int64_t hi = std::numeric_limits<std::int64_t>::min();
    for (std::int64_t v : p) {
      if (v < -(std::int64_t{1} << 52) || v > (std::int64_t{1} << 52)) {
        throw InputError(fmt::format("positions: {} is out of range (|position| <= 2^52)", v));
      }
      lo = std::min(lo, v + e_.offset);
      hi = std::max(hi, v + e_.offset);
    }
    return {lo, hi};
  }

  void check_types() const {
    if (!is_float(in_)) {
      throw InputError(fmt::format("{}: expected float embeddings (f64, f32, f16, bf16), got {}",
                                   what_, dtype_name(in_)));
    }
    if (!is_float(out_)) {
      throw UsageError(fmt::format("dtype {}: the output is a float type (f64, f32, f16, bf16)",
                                   dtype_name(out_)));
    }
  }

  void check_encoding() {
    if (e_.start < 0 || e_.start > (std::int64_t{1} << 52)) {
      throw UsageError(fmt::format("start: must be from 0 to 2^52, got {}", e_.start));
    }
    if (!std::isfinite(e_.scale)) {
      throw UsageError(fmt::format("scale: must be a finite number, got {}", e_.scale));
    }
    if (e_.offset < -(std::int64_t{1} << 52) || e_.offset > (std::int64_t{1} << 52)) {
      throw UsageError(fmt::format("offset: must be from -2^52 to 2^52, got {}", e_.offset));
    }
    if (e_.positions && e_.start != 0) {
      throw UsageError("start: cannot be combined with positions (they are absolute)");
    }
    const auto [lo, hi] = row_range();
    const bool used = lo <= hi && S_ > 0;  // some row is read
    if (e_.table) {
      const Tensor& t = *e_.table;
      if (!is_float(t.dtype()) || t.ndim() != 2 || t.shape()[1] != D_) {
        throw InputError(fmt::format(
            "table: expected a learned float table [max_len, {}] (d of {}), got {} of shape {}", D_,
            what_, dtype_name(t.dtype()), shape_str(t.shape())));
      }
      if (used && (lo < 0 || static_cast<std::size_t>(hi) >= t.shape()[0])) {
        throw InputError(fmt::format(
            "table: the learned table holds {} positions, but {} needs positions {} to {} ({})",
            t.shape()[0], what_, lo, hi,
            e_.positions ? fmt::format("positions + offset {}", e_.offset)
                         : fmt::format("start {} + offset {} + sequence length {}", e_.start,
                                       e_.offset, S_)));
      }
      if (!allow_nonfinite_ && t.has_nonfinite()) {
        throw InputError("table: the learned table contains NaN or Inf");
      }
    } else {
      if (D_ % 2 != 0 || D_ > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        throw InputError(fmt::format(
            "{}: the sinusoidal table needs an even model dimension (sin/cos pairs), got {}", what_,
            D_));
      }
      if (used && (lo < -(std::int64_t{1} << 52) || hi > (std::int64_t{1} << 52))) {
        throw InputError(fmt::format("{}: sinusoidal rows {} to {} exceed 2^52", what_, lo, hi));
      }
      freqs_ = sinusoidal_freqs(static_cast<int>(D_), e_.base);
    }
  }

  // PE rows for positions start + [first, first + count) into `out`.
  const std::vector<double>& pe_rows(std::size_t first, std::size_t count,
                                     std::vector<double>& out) const {
    out.resize(count * D_);
    const std::int64_t n = static_cast<std::int64_t>(count);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t p = e_.start + e_.offset + static_cast<std::int64_t>(first) + r;
      pe_row(p, out.data() + static_cast<std::size_t>(r) * D_);
    }
    return out;
  }

  const std::vector<double>& all_rows() {
    if (all_pe_.empty() && S_ * D_ > 0) pe_rows(0, S_, all_pe_);
    return all_pe_;
  }

  Shape shape_;
  DType in_, out_;
  AbsoluteEncoding e_;
  bool allow_nonfinite_;
  std::string what_;
  std::size_t axis_;
  std::string axes_;
  std::size_t s_axis_ = 0, d_axis_ = 0, b_axis_ = 0, S_ = 0, D_ = 0, B_ = 1, row_elems_ = 1;
  std::vector<std::size_t> strides_;
  std::vector<double> freqs_, slab_pe_, all_pe_;
};

Attrs encoding_attrs(const AbsoluteEncoding& e, const std::string& axes) {
  Attrs a;
  a.push_back({"encoding", std::string(e.table ? "learned" : "sinusoidal")});
  if (!e.table) {
    a.push_back({"base", e.base});
    a.push_back(
        {"layout", std::string(e.layout == SinusoidalLayout::concat ? "concat" : "interleaved")});
  }
  if (e.positions) {
    a.push_back({"positions", std::string("per token")});
  } else {
    a.push_back({"start", static_cast<long long>(e.start)});
  }
  a.push_back({"offset", static_cast<long long>(e.offset)});
  a.push_back({"combine", std::string(e.combine == Combine::mul ? "mul" : "add")});
  a.push_back({"scale", e.scale});
  a.push_back({"axes", axes});
  return a;
}

}  // namespace

Tensor add_positions(const Tensor& x, const std::string& axes, const AbsoluteEncoding& e, DType out,
                     bool allow_nonfinite) {
  AddApplier ap(x.shape(), x.dtype(), axes, e, out, allow_nonfinite, "x", 0);
  Tensor y(out, x.shape());
  ap.rows(x.bytes(), y.bytes(), 0, ap.rows_total());
  return y;
}

void add_positions_stream(const AddStreamRequest& r) {
  if (r.output.format == Format::hdf5 && r.input.format == Format::hdf5 &&
      r.output.path == r.input.path && !r.input.is_stdio()) {
    // An HDF5 output is a new file renamed over the target: it would drop the input's
    // other datasets.
    throw UsageError(
        fmt::format("output: {} would replace the input file {} (write the result "
                    "to another HDF5 file)",
                    r.output.text, r.input.path));
  }
  auto src = open_source(r.input);
  const TensorInfo& info = src->info();
  const std::string& what = r.input.text;
  const DType out = r.dtype.value_or(info.dtype);
  const std::size_t axis = slab_axis(info.shape);
  AddApplier ap(info.shape, info.dtype, r.axes, r.encoding, out, r.allow_nonfinite, what, axis);

  detail::SlabOp op;
  op.in_row_bytes = ap.in_row_bytes();
  op.out_row_bytes = ap.out_row_bytes();
  op.total_rows = ap.rows_total();
  op.table_bytes = [&ap](std::size_t rows) { return ap.table_bytes(rows); };
  op.rows = [&ap](const std::byte* in, std::byte* o, std::size_t first, std::size_t n) {
    ap.rows(in, o, first, n);
  };
  const std::size_t budget = r.max_memory == 0 ? detail::default_max_memory() : r.max_memory;
  const detail::SlabPlan plan = detail::plan_slabs(op, budget, what, axis, ap.axes()[axis]);

  TensorInfo out_info;
  out_info.dtype = out;
  out_info.shape = info.shape;
  AbsoluteEncoding used = r.encoding;
  used.scale = ap.scale();
  out_info.attrs = encoding_attrs(used, ap.axes());
  auto sink = create_sink(r.output, out_info, r.write);
  if (r.note) {
    r.note(fmt::format("{} -> {}: shape {}, axes {}, {} -> {}, {} along axis {} ({})", what,
                       r.output.text, shape_str(info.shape), ap.axes(), dtype_name(info.dtype),
                       dtype_name(out),
                       detail::slab_shape(*src, *sink, op, plan).describe(op.total_rows), axis,
                       ap.axes()[axis]),
           out_info.attrs);
  }
  const std::size_t total_bytes = op.total_rows * op.in_row_bytes;
  detail::stream_slabs(*src, *sink, axis, op, plan,
                       r.input.format == Format::hdf5 && r.output.format == Format::hdf5, r.threads,
                       [&](std::size_t rows_done) {
                         if (r.progress) r.progress(rows_done * op.in_row_bytes, total_bytes);
                       });
  sink->commit();
}

}  // namespace posenc
