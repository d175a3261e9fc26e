#include "posenc/ops/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>

#include "dtype_visit.hpp"
#include "ops/slab_fetch.hpp"

namespace posenc {

// --- StatsAccumulator ------------------------------------------------------------------

void StatsAccumulator::scan(const xt::xtensor<double, 1>& c) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const std::size_t first = count_;  // flat index of c(0)
  count_ += c.size();
  const auto finite = xt::isfinite(c);
  const std::size_t n = xt::count_nonzero(finite)();
  const bool all_finite = n == c.size();
  if (!all_finite) {
    nan_ += xt::count_nonzero(xt::isnan(c))();
    posinf_ += xt::count_nonzero(xt::equal(c, kInf))();
    neginf_ += xt::count_nonzero(xt::equal(c, -kInf))();
    if (n == 0) return;
  }
  zeros_ += xt::count_nonzero(xt::equal(c, 0.0))();
  // First occurrences: a chunk replaces the extremes only when strictly beyond them,
  // at the first element equal to its own extreme. Non-finite values are moved out of
  // the way (a NaN would stop the ordering). xt::minmax finds both values in one pass;
  // the position is looked for only when it is needed, which after the first chunks
  // is rare.
  const auto extremes = all_finite ? xt::minmax(c)() : xt::minmax(xt::where(finite, c, kNaN))();
  const auto position = [&](double v) {
    return static_cast<std::size_t>(std::find(c.cbegin(), c.cend(), v) - c.cbegin());
  };
  if (extremes[0] < min_) {
    const std::size_t lo = position(extremes[0]);
    min_ = c(lo), argmin_ = first + lo;
  }
  if (extremes[1] > max_) {
    const std::size_t hi = position(extremes[1]);
    max_ = c(hi), argmax_ = first + hi;
  }
  // In order and in long double (see the class comment): not an xt::sum, whose
  // accumulation order and type are xtensor's choice.
  long double s = block_sum_;
  for (double x : c) {
    if (all_finite || std::isfinite(x)) s += x;
  }
  block_sum_ = s;
  block_finite_ += n;
}

void StatsAccumulator::spread(const xt::xtensor<double, 1>& c) {
  const long double mean = block_mean_;
  long double m2 = block_m2_;
  for (double x : c) {
    if (std::isfinite(x)) m2 += (x - mean) * (x - mean);
  }
  block_m2_ = m2;
}

void StatsAccumulator::merge_block() {
  // Chan, Golub & LeVeque's pairwise update of (count, mean, M2).
  const std::size_t n = block_finite_;
  const long double delta = block_mean_ - mean_;
  const std::size_t total = finite_ + n;
  mean_ += delta * n / total;
  m2_ += block_m2_ + delta * delta * static_cast<long double>(finite_) * n / total;
  sum_ += block_sum_;
  finite_ = total;
}

TensorStats StatsAccumulator::result() const {
  TensorStats s;
  s.count = count_;
  s.finite = finite_;
  s.nan = nan_;
  s.posinf = posinf_;
  s.neginf = neginf_;
  s.zeros = zeros_;
  if (finite_ == 0) return s;
  s.min = min_;
  s.max = max_;
  s.argmin = argmin_;
  s.argmax = argmax_;
  // max |x| over the finite values is the larger of |min| and |max|.
  s.absmax = std::max(std::fabs(min_), std::fabs(max_));
  s.sum = static_cast<double>(sum_);
  s.mean = static_cast<double>(mean_);
  s.std = static_cast<double>(std::sqrt(m2_ / finite_));
  return s;
}

// --- summarize -------------------------------------------------------------------------

namespace {

/// The batch of selected entries [k, k + m) along the streaming axis, as a selection
/// of the slab that holds them (entries lo .. lo + span - 1 of that axis).
struct Batch {
  std::size_t lo = 0;
  Selection local;
};

Batch batch_selection(const Selection& sel, std::size_t axis, std::size_t k, std::size_t m) {
  const AxisSelection& rows = sel.axes[axis];
  const auto first =
      static_cast<std::int64_t>(rows.start) + static_cast<std::int64_t>(k) * rows.step;
  const std::int64_t last = first + static_cast<std::int64_t>(m - 1) * rows.step;
  Batch b;
  b.lo = static_cast<std::size_t>(std::min(first, last));
  b.local = sel;
  b.local.source[axis] = static_cast<std::size_t>(std::abs(last - first)) + 1;
  AxisSelection& a = b.local.axes[axis];
  a.start = static_cast<std::size_t>(first) - b.lo;
  a.size = m;
  if (m <= 1) a.step = 1;
  b.local.numel = sel.numel / rows.size * m;
  if (!a.drop) {
    std::size_t kept = 0;  // position of `axis` in the result shape
    for (std::size_t ax = 0; ax < axis; ++ax) kept += !sel.axes[ax].drop;
    b.local.shape[kept] = m;
  }
  return b;
}

/// Adds the selected elements of one slab to `acc` and copies the leading ones into
/// `head` (from flat position `flat` of the selection).
template <DType D>
void scan_slab(const std::byte* slab, const Selection& local, std::size_t flat,
               StatsAccumulator& acc, Tensor& head, std::vector<std::byte>& gather) {
  using S = detail::storage_t<D>;
  const std::size_t n = local.numel;
  const S* values = nullptr;
  if (auto off = contiguous_offset(local)) {
    values = reinterpret_cast<const S*>(slab) + *off;  // zero-copy
  } else {
    gather.resize(n * sizeof(S));
    std::size_t slab_numel = 1;
    for (std::size_t e : local.source) slab_numel *= e;
    auto src =
        xt::adapt(reinterpret_cast<const S*>(slab), slab_numel, xt::no_ownership(), local.source);
    auto dst = xt::adapt(reinterpret_cast<S*>(gather.data()), n, xt::no_ownership(), local.shape);
    dst = select_view(src, local);
    values = reinterpret_cast<const S*>(gather.data());
  }
  auto raw = xt::adapt(values, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
  if (flat < head.numel()) {
    const std::size_t k = std::min(head.numel() - flat, n);
    std::copy_n(values, k, head.data<S>() + flat);
  }
  acc.add(detail::as_double<D>(raw));
}

SelectionSummary summarize_slabs(const TensorInfo& info, const detail::FetchSlab& fetch,
                                 const Selection& sel, std::size_t head, std::size_t slab_bytes) {
  if (sel.source != info.shape) {
    throw std::invalid_argument(fmt::format("summarize: a selection of shape {} applied to {}",
                                            shape_str(sel.source), shape_str(info.shape)));
  }
  SelectionSummary out;
  out.head = Tensor(info.dtype, Shape{std::min(head, sel.numel)});
  StatsAccumulator acc;
  std::vector<std::byte> gather;
  if (sel.numel == 0) {
    out.stats = acc.result();
    return out;
  }
  const auto scan = [&](const std::byte* slab, const Selection& local, std::size_t flat) {
    detail::visit_dtype(info.dtype, [&](auto tag) {
      scan_slab<decltype(tag)::value>(slab, local, flat, acc, out.head, gather);
    });
  };
  if (info.shape.empty()) {  // rank 0: one value
    scan(fetch(0, 0, 1), sel, 0);
    out.stats = acc.result();
    return out;
  }
  // Entries of the first axis whose extent is not 1 (those before it have extent 1),
  // so a [1, s, h, d] tensor streams along s, never as one row.
  const std::size_t axis = slab_axis(info.shape);
  const std::size_t entry =
      std::max<std::size_t>(1, detail::entry_bytes(info.shape, axis, info.dtype));
  const std::size_t slab_entries = std::max<std::size_t>(1, slab_bytes / entry);
  // Selected entries whose span fits one slab: |step| * (m - 1) + 1 <= slab_entries.
  const AxisSelection& rows = sel.axes[axis];
  const auto stride = static_cast<std::size_t>(rows.step < 0 ? -rows.step : rows.step);
  const std::size_t per_batch = (slab_entries - 1) / stride + 1;
  std::size_t flat = 0;
  for (std::size_t k = 0; k < rows.size;) {
    const std::size_t m = std::min(per_batch, rows.size - k);
    const Batch b = batch_selection(sel, axis, k, m);
    scan(fetch(axis, b.lo, b.local.source[axis]), b.local, flat);
    flat += b.local.numel;
    k += m;
  }
  out.stats = acc.result();
  return out;
}

}  // namespace

SelectionSummary summarize(TensorSource& src, const Selection& sel, std::size_t head,
                           std::size_t slab_bytes) {
  Buffer slab;
  return summarize_slabs(src.info(), detail::fetch_from(src, slab), sel, head, slab_bytes);
}

SelectionSummary summarize(const Tensor& t, const Selection& sel, std::size_t head,
                           std::size_t slab_bytes) {
  return summarize_slabs(detail::info_of(t), detail::fetch_from(t), sel, head, slab_bytes);
}

}  // namespace posenc
