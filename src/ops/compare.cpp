#include "posenc/ops/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

#include "dtype_visit.hpp"
#include "ops/select_batches.hpp"
#include "ops/slab_fetch.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

// Float types by precision, least precise first (bf16 has fewer significand bits than
// f16); -1 for integers and bool.
int float_rank(DType t) {
  switch (t) {
    case DType::bf16:
      return 0;
    case DType::f16:
      return 1;
    case DType::f32:
      return 2;
    case DType::f64:
      return 3;
    default:
      return -1;
  }
}

// v rounded to T, as a point on a line where adjacent floats are adjacent integers:
// the magnitude bits, negated for negative values (+0 and -0 both map to 0).
template <DType T>
std::int64_t ordered_bits(double v) {
  std::uint64_t bits = 0, sign_bit = 0;
  if constexpr (T == DType::f64) {
    std::memcpy(&bits, &v, 8);
    sign_bit = std::uint64_t{1} << 63;
  } else if constexpr (T == DType::f32) {
    const float f = static_cast<float>(v);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    bits = u;
    sign_bit = std::uint64_t{1} << 31;
  } else if constexpr (T == DType::f16) {
    bits = double_to_half(v);
    sign_bit = 0x8000;
  } else {
    bits = double_to_bf16(v);
    sign_bit = 0x8000;
  }
  // Branch-free negation (signs of neighbouring values are unpredictable to a branch
  // predictor): with s = 1, (mag ^ -1) + 1 = -mag.
  const auto mag = static_cast<std::int64_t>(bits & (sign_bit - 1));
  const auto s = static_cast<std::int64_t>((bits & sign_bit) != 0);
  return (mag ^ -s) + s;
}

template <DType T>
std::uint64_t float_ulps(double a, double b) {
  // The difference of two points can exceed INT64_MAX, so it is taken unsigned.
  const std::int64_t x = ordered_bits<T>(a), y = ordered_bits<T>(b);
  const std::uint64_t d = static_cast<std::uint64_t>(x) - static_cast<std::uint64_t>(y);
  const std::uint64_t flip = 0 - static_cast<std::uint64_t>(x < y);  // all ones if x < y
  return (d ^ flip) - flip;                                          // branch-free |d|
}

std::uint64_t integer_ulps(double a, double b) {
  // Integers: the unit in the last place is 1.
  const double d = std::fabs(a - b);
  return d >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(d);
}

/// ULP distances of all pairs of a and b into `out`, with the conversion for `t`
/// chosen once per block rather than per element.
void ulp_distances(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                   std::optional<DType> t, xt::xtensor<std::uint64_t, 1>& out) {
  // Lambdas rather than function pointers, so that the distance inlines into the loop.
  if (!t) {
    out = xt::vectorize([](double x, double y) { return integer_ulps(x, y); })(a, b);
    return;
  }
  switch (*t) {
    case DType::f64:
      out = xt::vectorize([](double x, double y) { return float_ulps<DType::f64>(x, y); })(a, b);
      break;
    case DType::f32:
      out = xt::vectorize([](double x, double y) { return float_ulps<DType::f32>(x, y); })(a, b);
      break;
    case DType::f16:
      out = xt::vectorize([](double x, double y) { return float_ulps<DType::f16>(x, y); })(a, b);
      break;
    default:
      out = xt::vectorize([](double x, double y) { return float_ulps<DType::bf16>(x, y); })(a, b);
      break;
  }
}

/// Offers the largest entry of `diff` (first occurrence; negative entries mark pairs
/// that offer nothing) to `at`, which keeps the first strictly largest overall.
void offer(DiffAt& at, const xt::xtensor<double, 1>& diff, const xt::xtensor<double, 1>& a,
           const xt::xtensor<double, 1>& b, std::size_t first) {
  if (diff.size() == 0) return;
  const std::size_t i = xt::argmax(diff)();
  if (diff(i) < 0) return;
  if (!at.index || diff(i) > at.value) at = DiffAt{diff(i), first + i, a(i), b(i)};
}

}  // namespace

std::optional<DType> comparison_type(DType a, DType b) {
  const int ra = float_rank(a), rb = float_rank(b);
  if (ra < 0 && rb < 0) return std::nullopt;
  if (ra < 0) return b;
  if (rb < 0) return a;
  return ra <= rb ? a : b;
}

std::pair<double, double> default_tolerances(std::optional<DType> t) {
  if (!t) return {0, 0};
  switch (*t) {
    case DType::f64:
      return {1e-7, 1e-7};
    case DType::f32:
      return {1.3e-6, 1e-5};
    case DType::f16:
      return {1e-3, 1e-5};
    default:
      return {1.6e-2, 1e-5};  // bf16
  }
}

CompareRule make_compare_rule(DType a, DType b, const CompareOptions& opt) {
  CompareRule r;
  r.ulp_type = comparison_type(a, b);
  std::tie(r.rtol, r.atol) = default_tolerances(r.ulp_type);
  if (opt.rtol) r.rtol = *opt.rtol;
  if (opt.atol) r.atol = *opt.atol;
  if (!(r.rtol >= 0) || !(r.atol >= 0)) {
    throw UsageError("compare: rtol and atol must be non-negative numbers");
  }
  r.tolerance_explicit = opt.rtol || opt.atol;
  r.max_ulp = opt.max_ulp;
  r.equal_nan = opt.equal_nan;
  return r;
}

std::uint64_t ulp_distance(double a, double b, std::optional<DType> t) {
  if (!t) return integer_ulps(a, b);
  switch (*t) {
    case DType::f64:
      return float_ulps<DType::f64>(a, b);
    case DType::f32:
      return float_ulps<DType::f32>(a, b);
    case DType::f16:
      return float_ulps<DType::f16>(a, b);
    default:
      return float_ulps<DType::bf16>(a, b);
  }
}

// --- Comparator ------------------------------------------------------------------------

Comparator::Comparator(const CompareRule& rule) {
  r_.rule = rule;
  r_.shapes_equal = true;
}

Comparator::~Comparator() = default;
Comparator::Comparator(Comparator&&) noexcept = default;
Comparator& Comparator::operator=(Comparator&&) noexcept = default;

double tol_ratio(double a, double b, const CompareRule& rule) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const bool nan_a = std::isnan(a), nan_b = std::isnan(b);
  if (nan_a || nan_b) return nan_a && nan_b && rule.equal_nan ? 0.0 : kInf;
  if (!std::isfinite(a) || !std::isfinite(b)) return a == b ? 0.0 : kInf;
  auto ratio = [](double x, double bound) { return bound > 0 ? x / bound : x > 0 ? kInf : 0.0; };
  const double by_tol = ratio(std::fabs(a - b), rule.atol + rule.rtol * std::fabs(b));
  if (!rule.max_ulp) return by_tol;
  const double by_ulp = ratio(static_cast<double>(ulp_distance(a, b, rule.ulp_type)),
                              static_cast<double>(*rule.max_ulp));
  return rule.tolerance_explicit ? std::min(by_tol, by_ulp) : by_ulp;
}

// --- locating the errors ----------------------------------------------------------------

/// The breakdown's axes walked along the compared elements, and the worst elements kept
/// so far (a heap whose front is the least bad of them).
struct Comparator::Locator {
  struct Axis {
    std::size_t stride = 1;          ///< compared elements per step along the axis
    std::size_t n = 1;               ///< entries along the axis (1 for an axis a slice fixes)
    std::vector<std::size_t> group;  ///< entry -> group coordinate; empty: the entry itself
  };
  std::vector<Axis> axes;
  std::size_t inner_groups = 1;  ///< groups of the second axis (1 with one axis)
  CompareBreakdown breakdown;
  std::size_t top = 0;
  std::vector<WorstElement> heap;
  std::vector<std::uint32_t> gid;  ///< group of each value of the block
};

namespace {

/// |a - b| for ordering the worst elements: NaN counts as +Inf.
double abs_key(const WorstElement& w) {
  const double d = std::fabs(w.a - w.b);
  return std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
}

/// Whether x is worse than y (comes first in the list): see CompareResult::worst.
bool worse(const WorstElement& x, const WorstElement& y) {
  if (x.tol_ratio != y.tol_ratio) return x.tol_ratio > y.tol_ratio;
  const double ax = abs_key(x), ay = abs_key(y);
  if (ax != ay) return ax > ay;
  return x.flat < y.flat;
}

std::vector<std::size_t> pair_groups(std::size_t extent, std::optional<std::size_t> rotary,
                                     PairStyle style, std::size_t axis) {
  if (extent % 2 != 0) {
    throw InputError(fmt::format("by: pairs of axis {} need an even extent, got {}", axis, extent));
  }
  const std::size_t r = rotary.value_or(extent);
  if (r == 0 || r % 2 != 0 || r > extent) {
    throw InputError(
        fmt::format("rotary_dim: must be even and within 2..{} (the extent of axis "
                    "{}), got {}",
                    extent, axis, r));
  }
  std::vector<std::size_t> g(extent);
  for (std::size_t j = 0; j < extent; ++j) {
    if (j >= r) {
      g[j] = r / 2 + (j - r) / 2;
    } else {
      g[j] = style == PairStyle::neox ? j % (r / 2) : j / 2;
    }
  }
  return g;
}

}  // namespace

Comparator::Comparator(const CompareRule& rule, const CompareLocate& locate, const Selection& sel)
    : Comparator(rule) {
  if (locate.by.empty() && locate.top == 0) return;
  if (locate.top > kMaxTop) {
    throw UsageError(fmt::format("top: at most {} elements, got {}", kMaxTop, locate.top));
  }
  if (locate.by.size() > kMaxByAxes) {
    throw UsageError(fmt::format("by: at most {} axes, got {}", kMaxByAxes, locate.by.size()));
  }
  auto loc = std::make_unique<Locator>();
  loc->top = locate.top;
  // Result axis of each kept source axis, and the strides of the result.
  const std::size_t rank = sel.source.size();
  std::vector<std::size_t> result_axis(rank, 0);
  for (std::size_t k = 0, r = 0; k < rank; ++k) {
    if (!sel.axes[k].drop) result_axis[k] = r++;
  }
  std::size_t rows = 1;
  for (std::size_t i = 0; i < locate.by.size(); ++i) {
    const ByAxis& by = locate.by[i];
    if (by.axis >= rank) {
      throw InputError(fmt::format("by: axis {} is out of range for a {}-D tensor", by.axis, rank));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (locate.by[j].axis == by.axis) {
        throw UsageError(fmt::format("by: axis {} is named twice", by.axis));
      }
    }
    const AxisSelection& as = sel.axes[by.axis];
    Locator::Axis ax;
    std::vector<std::size_t> coords;
    if (!as.drop) {
      ax.n = as.size;
      for (std::size_t r = result_axis[by.axis] + 1; r < sel.shape.size(); ++r)
        ax.stride *= sel.shape[r];
    }
    if (by.pairs) {
      const std::size_t extent = sel.source[by.axis];
      if (as.drop || as.size != extent || (extent > 1 && (as.start != 0 || as.step != 1)) ||
          !as.indices.empty()) {
        throw InputError(
            fmt::format("by: pairs of axis {} need the whole axis, which the slice "
                        "cuts",
                        by.axis));
      }
      ax.group = pair_groups(extent, locate.rotary_dim, locate.pairs, by.axis);
      for (std::size_t p = 0; p < extent / 2; ++p) coords.push_back(p);
    } else {
      for (std::size_t e = 0; e < (as.drop ? 1 : as.size); ++e) coords.push_back(as.at(e));
    }
    rows *= coords.size();
    if (rows > kMaxByRows) {
      throw UsageError(fmt::format("by: the breakdown would have more than {} rows", kMaxByRows));
    }
    if (i == 1) loc->inner_groups = coords.size();
    loc->breakdown.coords.push_back(std::move(coords));
    loc->axes.push_back(std::move(ax));
  }
  loc->breakdown.axes = locate.by;
  if (!locate.by.empty()) loc->breakdown.groups.resize(rows);
  loc_ = std::move(loc);
}

CompareResult Comparator::result() const& {
  CompareResult r = r_;
  if (!loc_) return r;
  if (!loc_->breakdown.axes.empty()) r.breakdown = loc_->breakdown;
  r.worst = loc_->heap;
  std::sort(r.worst.begin(), r.worst.end(), worse);
  return r;
}

CompareResult Comparator::result() && {
  CompareResult r = std::move(r_);
  if (!loc_) return r;
  if (!loc_->breakdown.axes.empty()) r.breakdown = std::move(loc_->breakdown);
  r.worst = std::move(loc_->heap);
  std::sort(r.worst.begin(), r.worst.end(), worse);
  return r;
}

void Comparator::add(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b) {
  const std::size_t first = r_.total, n = a.size();
  if (n == 0) return;
  r_.total += n;
  // Masks are evaluated once into buffers; the reductions over them are std
  // algorithms on contiguous memory. Blocks without NaN or infinities (the usual
  // case) skip the masking.
  finite_ = xt::isfinite(a) && xt::isfinite(b);
  const bool all_finite = std::count(finite_.cbegin(), finite_.cend(), true) == std::ptrdiff_t(n);
  if (all_finite) {
    number_.resize({n});
    number_.fill(true);
  } else {
    const auto nan_a = xt::isnan(a), nan_b = xt::isnan(b);
    r_.nan_a += xt::count_nonzero(nan_a)();
    r_.nan_b += xt::count_nonzero(nan_b)();
    r_.nan_mismatches += xt::count_nonzero(xt::not_equal(nan_a, nan_b))();
    number_ = !(nan_a || nan_b);  // a pair without NaN
  }
  offer_differences(a, b, first, all_finite);
  ulp_distances(a, b, r_.rule.ulp_type, ulp_);
  if (all_finite) {
    const std::size_t i = xt::argmax(ulp_)();
    offer_ulp(ulp_(i), first + i);
  } else if (std::find(number_.cbegin(), number_.cend(), true) != number_.cend()) {
    // The largest distance over pairs without NaN, and the first pair that has it.
    const std::uint64_t most = xt::amax(xt::where(number_, ulp_, std::uint64_t{0}))();
    offer_ulp(most, first + xt::argmax(number_ && xt::equal(ulp_, most))());
  }
  count_mismatches(a, b, first, all_finite);
  if (loc_) locate(a, b, first, all_finite);
}

void Comparator::tol_ratios(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                            bool all_finite) {
  // tol_ratio() for a block: the same cases, with the ULP distances already in ulp_.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const CompareRule& rule = r_.rule;
  const auto tol = rule.atol + rule.rtol * xt::abs(b);
  const auto d = xt::abs(a - b);
  const auto by_tol = xt::where(tol > 0, d / tol, xt::where(d > 0, kInf, 0.0));
  if (!rule.max_ulp) {
    ratio_ = by_tol;
  } else {
    const auto u = xt::cast<double>(ulp_);
    const double m = static_cast<double>(*rule.max_ulp);
    if (m > 0) {
      ratio_ = u / m;
    } else {
      ratio_ = xt::where(u > 0.0, kInf, 0.0);
    }
    if (rule.tolerance_explicit) ratio_ = xt::minimum(by_tol, ratio_);
  }
  if (!all_finite) {
    ratio_ = xt::where(number_, xt::where(finite_, ratio_, xt::where(xt::equal(a, b), 0.0, kInf)),
                       xt::where(rule.equal_nan && xt::isnan(a) && xt::isnan(b), 0.0, kInf));
  }
}

void Comparator::locate(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                        std::size_t first, bool all_finite) {
  tol_ratios(a, b, all_finite);
  Locator& L = *loc_;
  const std::size_t n = a.size();
  if (!L.breakdown.axes.empty()) {
    // The group of every value: each axis's entry walks on as the flat index does.
    L.gid.assign(n, 0);
    for (std::size_t k = 0; k < L.axes.size(); ++k) {
      const Locator::Axis& ax = L.axes[k];
      const std::size_t scale = k == 0 && L.axes.size() == 2 ? L.inner_groups : 1;
      std::size_t entry = (first / ax.stride) % ax.n, left = ax.stride - first % ax.stride;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t g = ax.group.empty() ? entry : ax.group[entry];
        L.gid[i] += static_cast<std::uint32_t>(g * scale);
        if (--left == 0) {
          left = ax.stride;
          entry = entry + 1 == ax.n ? 0 : entry + 1;
        }
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      GroupStats& s = L.breakdown.groups[L.gid[i]];
      ++s.count;
      s.mismatches += ok_(i) ? 0 : 1;
      s.max_abs = std::max(s.max_abs, abs_(i));
      s.max_rel = std::max(s.max_rel, rel_(i));
      s.max_tol_ratio = std::max(s.max_tol_ratio, ratio_(i));
      if (number_(i)) {
        s.max_ulp = std::max(s.max_ulp, ulp_(i));
        s.any_ulp = true;
      }
    }
  }
  if (L.top == 0) return;
  for (std::size_t i = 0; i < n; ++i) {
    WorstElement w{first + i, a(i), b(i), ratio_(i), !ok_(i)};
    if (L.heap.size() < L.top) {
      L.heap.push_back(w);
      std::push_heap(L.heap.begin(), L.heap.end(), worse);
    } else if (worse(w, L.heap.front())) {
      std::pop_heap(L.heap.begin(), L.heap.end(), worse);
      L.heap.back() = w;
      std::push_heap(L.heap.begin(), L.heap.end(), worse);
    }
  }
}

void Comparator::offer_differences(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                                   std::size_t first, bool all_finite) {
  // What each pair offers to the largest differences: |a - b| and its size relative
  // to |b| for finite pairs, +Inf for a pair with an unequal infinity, and -1 (nothing)
  // for pairs with NaN or equal infinities.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  abs_ = xt::abs(a - b);
  rel_ = xt::where(xt::not_equal(b, 0.0), abs_ / xt::abs(b),
                   xt::where(xt::equal(abs_, 0.0), 0.0, kInf));
  if (!all_finite) {
    const auto other = xt::where(number_ && xt::not_equal(a, b), kInf, -1.0);
    abs_ = xt::where(finite_, abs_, other);
    rel_ = xt::where(finite_, rel_, other);
  }
  offer(r_.max_abs, abs_, a, b, first);
  offer(r_.max_rel, rel_, a, b, first);
}

void Comparator::count_mismatches(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                                  std::size_t first, bool all_finite) {
  // The test itself: numpy.isclose's, or the ULP bound (alone, or either of the two
  // when tolerances were given explicitly). An infinity matches only itself; NaN
  // matches NaN only with equal_nan.
  const CompareRule& rule = r_.rule;
  const auto within_tol = xt::abs(a - b) <= rule.atol + rule.rtol * xt::abs(b);
  if (!rule.max_ulp) {
    ok_ = within_tol;
  } else if (rule.tolerance_explicit) {
    ok_ = ulp_ <= *rule.max_ulp || within_tol;
  } else {
    ok_ = ulp_ <= *rule.max_ulp;
  }
  if (!all_finite) {
    ok_ = xt::where(number_, xt::where(finite_, ok_, xt::equal(a, b)),
                    rule.equal_nan && xt::isnan(a) && xt::isnan(b));
  }
  const auto bad = std::find(ok_.cbegin(), ok_.cend(), false);
  if (bad == ok_.cend()) return;
  r_.mismatches += static_cast<std::size_t>(std::count(bad, ok_.cend(), false));
  if (!r_.first_mismatch) r_.first_mismatch = first + (bad - ok_.cbegin());
}

void Comparator::offer_ulp(std::uint64_t ulps, std::size_t index) {
  if (!r_.max_ulp || ulps > *r_.max_ulp) {
    r_.max_ulp = ulps;
    r_.max_ulp_index = index;
  }
}

// --- streaming -------------------------------------------------------------------------

namespace {

/// Values [first, first + n) of a slab of dtype `t` as doubles in `out`.
void load_doubles(DType t, const std::byte* slab, std::size_t first, std::size_t n,
                  xt::xtensor<double, 1>& out) {
  detail::visit_dtype(t, [&](auto tag) {
    using S = detail::storage_t<decltype(tag)::value>;
    const S* p = reinterpret_cast<const S*>(slab) + first;
    out = detail::as_double<decltype(tag)::value>(
        xt::adapt(p, n, xt::no_ownership(), std::array<std::size_t, 1>{n}));
  });
}

CompareResult compare_slabs(const TensorInfo& ia, const detail::FetchSlab& fa, const TensorInfo& ib,
                            const detail::FetchSlab& fb, const CompareOptions& opt,
                            const SliceSpec& slice, std::size_t slab_bytes) {
  const CompareRule rule = make_compare_rule(ia.dtype, ib.dtype, opt);
  // Each side's slice against its own shape; an error names the side.
  auto resolve = [&](const TensorInfo& info, const char* side) {
    if (slice.items.empty()) return select_all(info.shape);
    try {
      return resolve_selection(slice, info.shape);
    } catch (const InputError& e) {
      throw InputError(std::string(side) + ": " + e.what());
    }
  };
  Selection sa = resolve(ia, "A"), sb = resolve(ib, "B");
  // The breakdown follows A's axes; it is checked even when the shapes differ.
  Comparator cmp(rule, opt.locate, sa);
  if (sa.shape != sb.shape) cmp = Comparator(rule);
  if (sa.shape == sb.shape) {
    // Blocks of both sides in step; each reads slabs of its own layout.
    detail::SelectedReader ra(ia, fa, sa, slab_bytes), rb(ib, fb, sb, slab_bytes);
    std::pair<const std::byte*, std::size_t> pa{nullptr, 0}, pb{nullptr, 0};
    constexpr std::size_t kChunk = 8192;  // values compared at a time: stays in cache
    const std::size_t ea = dtype_size(ia.dtype), eb = dtype_size(ib.dtype);
    xt::xtensor<double, 1> a, b;
    for (std::size_t left = sa.numel; left > 0;) {
      if (pa.second == 0) pa = ra.next();
      if (pb.second == 0) pb = rb.next();
      const std::size_t m = std::min({kChunk, pa.second, pb.second});
      if (m == 0) throw std::logic_error("compare: the selections ended early");
      load_doubles(ia.dtype, pa.first, 0, m, a);
      load_doubles(ib.dtype, pb.first, 0, m, b);
      cmp.add(a, b);
      pa = {pa.first + m * ea, pa.second - m};
      pb = {pb.first + m * eb, pb.second - m};
      left -= m;
    }
  }
  CompareResult r = std::move(cmp).result();
  r.shape_a = ia.shape;
  r.shape_b = ib.shape;
  r.shapes_equal = sa.shape == sb.shape;
  r.sel_a = std::move(sa);
  r.sel_b = std::move(sb);
  return r;
}

}  // namespace

CompareResult compare(TensorSource& a, TensorSource& b, const CompareOptions& opt,
                      std::size_t slab_bytes) {
  return compare(a, b, opt, SliceSpec{}, slab_bytes);
}

CompareResult compare(TensorSource& a, TensorSource& b, const CompareOptions& opt,
                      const SliceSpec& slice, std::size_t slab_bytes) {
  Buffer sa, sb;
  return compare_slabs(a.info(), detail::fetch_from(a, sa), b.info(), detail::fetch_from(b, sb),
                       opt, slice, slab_bytes);
}

CompareResult compare(const Tensor& a, const Tensor& b, const CompareOptions& opt,
                      const SliceSpec& slice) {
  return compare_slabs(detail::info_of(a), detail::fetch_from(a), detail::info_of(b),
                       detail::fetch_from(b), opt, slice, kCompareSlabBytes);
}

}  // namespace posenc
