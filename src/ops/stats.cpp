#include "posenc/ops/stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>

#include "dtype_visit.hpp"
#include "ops/select_batches.hpp"
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

SelectionSummary summarize_slabs(const TensorInfo& info, const detail::FetchSlab& fetch,
                                 const Selection& sel, std::size_t head, std::size_t slab_bytes) {
  if (sel.source != info.shape) {
    throw std::invalid_argument(fmt::format("summarize: a selection of shape {} applied to {}",
                                            shape_str(sel.source), shape_str(info.shape)));
  }
  SelectionSummary out;
  out.head = Tensor(info.dtype, Shape{std::min(head, sel.numel)});
  StatsAccumulator acc;
  std::size_t flat = 0;  // position in the selection of the block's first value
  detail::for_each_selected(info, fetch, sel, slab_bytes, [&](const std::byte* p, std::size_t n) {
    detail::visit_dtype(info.dtype, [&](auto tag) {
      constexpr DType D = decltype(tag)::value;
      using S = detail::storage_t<D>;
      const S* values = reinterpret_cast<const S*>(p);
      if (flat < out.head.numel()) {
        const std::size_t k = std::min(out.head.numel() - flat, n);
        std::copy_n(values, k, out.head.data<S>() + flat);
      }
      auto raw = xt::adapt(values, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
      acc.add(detail::as_double<D>(raw));
    });
    flat += n;
  });
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
