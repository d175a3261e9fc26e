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
#include "ops/widen.hpp"

namespace posenc {

// --- StatsAccumulator ------------------------------------------------------------------

void StatsAccumulator::scan(const xt::xtensor<double, 1>& c) {
  const std::size_t first = count_;  // flat index of c(0)
  const std::size_t size = c.size();
  count_ += size;
  const double* p = c.data();
  // Counts and extremes in one pass without data-dependent branches. Non-finite values
  // are kept out of the extremes (a NaN would stop the ordering).
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::size_t n = 0, zeros = 0, nan = 0, posinf = 0, neginf = 0;
  double lo = kInf, hi = -kInf;
  for (std::size_t i = 0; i < size; ++i) {
    const double x = p[i];
    const bool fin = std::abs(x) <= std::numeric_limits<double>::max();
    n += fin;
    zeros += x == 0.0;
    nan += x != x;
    posinf += x == kInf;
    neginf += x == -kInf;
    lo = fin && x < lo ? x : lo;
    hi = fin && x > hi ? x : hi;
  }
  nan_ += nan;
  posinf_ += posinf;
  neginf_ += neginf;
  if (n == 0) return;
  zeros_ += zeros;
  // First occurrences: a chunk replaces the extremes only when strictly beyond them,
  // at the first element equal to its own extreme; the position is looked for only
  // when it is needed, which after the first chunks is rare.
  const auto position = [&](double v) {
    return static_cast<std::size_t>(std::find(p, p + size, v) - p);
  };
  if (lo < min_) {
    const std::size_t at = position(lo);
    min_ = p[at], argmin_ = first + at;
  }
  if (hi > max_) {
    const std::size_t at = position(hi);
    max_ = p[at], argmax_ = first + at;
  }
  // In order and in long double (see the class comment): not an xt::sum, whose
  // accumulation order and type are xtensor's choice.
  long double s = block_sum_;
  if (n == size) {
    for (std::size_t i = 0; i < size; ++i) s += p[i];
  } else {
    for (std::size_t i = 0; i < size; ++i) {
      if (std::isfinite(p[i])) s += p[i];
    }
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

void StatsAccumulator::load_chunk(DType dtype, const std::byte* values, std::size_t i,
                                  std::size_t hi) {
  const std::size_t m = hi - i;
  chunk_.resize({m});
  double* out = chunk_.data();
  switch (dtype) {
    case DType::f64:
      std::copy_n(reinterpret_cast<const double*>(values) + i, m, out);
      break;
    case DType::f32:
      std::copy_n(reinterpret_cast<const float*>(values) + i, m, out);
      break;
    case DType::f16:
    case DType::bf16:
      detail::widen(dtype, values + i * 2, out, m);
      break;
    default:
      detail::visit_dtype(dtype, [&](auto tag) {
        constexpr DType D = decltype(tag)::value;
        using S = detail::storage_t<D>;
        const S* v = reinterpret_cast<const S*>(values) + i;
        chunk_ = detail::as_double<D>(
            xt::adapt(v, m, xt::no_ownership(), std::array<std::size_t, 1>{m}));
      });
  }
}

void StatsAccumulator::add(DType dtype, const std::byte* values, std::size_t n) {
  add_block(n, [&](std::size_t lo, std::size_t hi) { load_chunk(dtype, values, lo, hi); });
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
      acc.add(D, p, n);
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
