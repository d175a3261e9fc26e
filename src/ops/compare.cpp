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
#include "ops/widen.hpp"
#include "posenc/error.hpp"
#include "posenc/fp8.hpp"
#include "posenc/ops/compare_fields.hpp"

namespace posenc {

namespace {

// Float types by precision, least precise first (bf16 has fewer significand bits than
// f16); -1 for integers and bool.
int float_rank(DType t) {
  switch (t) {
    case DType::f8e5m2:
      return 0;
    case DType::f8e4m3fn:
      return 1;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 3;
    case DType::f32:
      return 4;
    case DType::f64:
      return 5;
    default:
      return -1;
  }
}

// The magnitude `mag` of a float's bits, negated when the sign bit `s` (0 or 1) is set,
// without a branch (signs of neighbouring values are unpredictable to a branch
// predictor): with s = 1, (mag ^ -1) + 1 = -mag. In the integer type of the caller's
// loop (32-bit lanes vectorise wider).
template <class I>
I signed_point(I mag, I s) {
  return (mag ^ -s) + s;
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
  } else if constexpr (T == DType::f8e4m3fn || T == DType::f8e5m2) {
    // Rounded as torch rounds to fp8; a value beyond the largest finite one lands one
    // step past it (e4m3fn's NaN code 0x7f, e5m2's infinity 0x7c).
    bits = fp8_from_double(v, T == DType::f8e4m3fn ? Fp8Format::e4m3fn : Fp8Format::e5m2);
    sign_bit = 0x80;
  } else {
    bits = double_to_bf16(v);
    sign_bit = 0x8000;
  }
  return signed_point(static_cast<std::int64_t>(bits & (sign_bit - 1)),
                      static_cast<std::int64_t>((bits & sign_bit) != 0));
}

/// |x - y| of two points of ordered_bits, taken unsigned (it can exceed INT64_MAX).
std::uint64_t point_distance(std::int64_t x, std::int64_t y) {
  const std::uint64_t d = static_cast<std::uint64_t>(x) - static_cast<std::uint64_t>(y);
  const std::uint64_t flip = 0 - static_cast<std::uint64_t>(x < y);  // all ones if x < y
  return (d ^ flip) - flip;                                          // branch-free |d|
}

template <DType T>
std::uint64_t float_ulps(double a, double b) {
  return point_distance(ordered_bits<T>(a), ordered_bits<T>(b));
}

std::uint64_t integer_ulps(double a, double b) {
  // Integers: the unit in the last place is 1.
  const double d = std::fabs(a - b);
  return d >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(d);
}

/// ULP distances of all pairs of a and b into `out`, with the conversion for `t`
/// chosen once per block rather than per element. f16 and bf16 values are rounded to
/// their bits by the vectorised conversion (the same bits as double_to_half and
/// double_to_bf16, element by element four times slower).
void ulp_distances(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                   std::optional<DType> t, xt::xtensor<std::uint64_t, 1>& out) {
  const std::size_t n = a.size();
  out.resize({n});
  const double *pa = a.data(), *pb = b.data();
  std::uint64_t* po = out.data();
  if (!t) {
    for (std::size_t i = 0; i < n; ++i) po[i] = integer_ulps(pa[i], pb[i]);
    return;
  }
  switch (*t) {
    case DType::f64:
      for (std::size_t i = 0; i < n; ++i) po[i] = float_ulps<DType::f64>(pa[i], pb[i]);
      break;
    case DType::f32:
      // ordered_bits<f32> in 32-bit lanes, which the compiler vectorises.
      for (std::size_t i = 0; i < n; ++i) {
        const float fa = static_cast<float>(pa[i]), fb = static_cast<float>(pb[i]);
        std::uint32_t ua, ub;
        std::memcpy(&ua, &fa, 4);
        std::memcpy(&ub, &fb, 4);
        const std::int32_t oa = signed_point(static_cast<std::int32_t>(ua & 0x7fffffffu),
                                             static_cast<std::int32_t>(ua >> 31));
        const std::int32_t ob = signed_point(static_cast<std::int32_t>(ub & 0x7fffffffu),
                                             static_cast<std::int32_t>(ub >> 31));
        const std::int64_t d = static_cast<std::int64_t>(oa) - ob;
        po[i] = static_cast<std::uint64_t>(d < 0 ? -d : d);
      }
      break;
    case DType::f8e4m3fn:
      for (std::size_t i = 0; i < n; ++i) po[i] = float_ulps<DType::f8e4m3fn>(pa[i], pb[i]);
      break;
    case DType::f8e5m2:
      for (std::size_t i = 0; i < n; ++i) po[i] = float_ulps<DType::f8e5m2>(pa[i], pb[i]);
      break;
    default: {
      // In pieces, so the bits stay in the L1 cache.
      constexpr std::size_t kPiece = 1024;
      std::uint16_t ha[kPiece], hb[kPiece];
      for (std::size_t i0 = 0; i0 < n; i0 += kPiece) {
        const std::size_t m = std::min(kPiece, n - i0);
        detail::narrow(DType::f64, pa + i0, *t, ha, m);
        detail::narrow(DType::f64, pb + i0, *t, hb, m);
        for (std::size_t i = 0; i < m; ++i) {
          po[i0 + i] = point_distance(signed_point<std::int64_t>(ha[i] & 0x7fff, ha[i] >> 15),
                                      signed_point<std::int64_t>(hb[i] & 0x7fff, hb[i] >> 15));
        }
      }
      break;
    }
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
    case DType::f8e4m3fn:  // the format's epsilon, 2^-3
      return {0.125, 1e-5};
    case DType::f8e5m2:  // 2^-2
      return {0.25, 1e-5};
    default:
      return {1.6e-2, 1e-5};  // bf16
  }
}

CompareRule make_compare_rule(DType a, DType b, const CompareOptions& opt) {
  CompareRule r;
  r.ulp_type = comparison_type(a, b);
  validate(opt);  // the declared ranges (compare_fields.hpp)
  std::tie(r.rtol, r.atol) = default_tolerances(r.ulp_type);
  if (opt.rtol) r.rtol = *opt.rtol;
  if (opt.atol) r.atol = *opt.atol;
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
    case DType::f8e4m3fn:
      return float_ulps<DType::f8e4m3fn>(a, b);
    case DType::f8e5m2:
      return float_ulps<DType::f8e5m2>(a, b);
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

namespace {

/// How one axis of the breakdown is walked along the compared elements.
struct ByWalk {
  std::size_t stride = 1;          ///< compared elements per step along the axis
  std::size_t n = 1;               ///< entries along the axis (1 for an axis a slice fixes)
  std::vector<std::size_t> group;  ///< entry -> group coordinate; empty: the entry itself
  std::size_t scale = 1;           ///< rows per group coordinate (C order over the axes)
};

}  // namespace

/// The breakdown's axes walked along the compared elements, and the worst elements kept
/// so far (a heap whose front is the least bad of them).
struct Comparator::Locator {
  using Axis = ByWalk;
  std::vector<Axis> axes;
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

/// How the breakdown walks source axis `by.axis` of the compared elements `sel`, and
/// A's index (or the pair index) of each of its entries (`coords`).
ByWalk walk_by_axis(const ByAxis& by, const CompareLocate& locate, const Selection& sel,
                    std::vector<std::size_t>& coords) {
  const AxisSelection& as = sel.axes[by.axis];
  ByWalk ax;
  if (!as.drop) {
    ax.n = as.size;
    // The result axes after this one: the kept source axes after it.
    for (std::size_t k = by.axis + 1; k < sel.source.size(); ++k) {
      if (!sel.axes[k].drop) ax.stride *= sel.axes[k].size;
    }
  }
  if (by.pairs) {
    const std::size_t extent = sel.source[by.axis];
    if (as.drop || as.size != extent || (extent > 1 && (as.start != 0 || as.step != 1)) ||
        !as.indices.empty()) {
      throw InputError(
          fmt::format("by: pairs of axis {} need the whole axis, which the slice cuts", by.axis));
    }
    ax.group = pair_groups(extent, locate.rotary_dim, locate.pairs, by.axis);
    for (std::size_t p = 0; p < extent / 2; ++p) coords.push_back(p);
  } else {
    for (std::size_t e = 0; e < (as.drop ? 1 : as.size); ++e) coords.push_back(as.at(e));
  }
  return ax;
}

}  // namespace

Comparator::Comparator(const CompareRule& rule, const CompareLocate& locate, const Selection& sel)
    : Comparator(rule) {
  if (locate.by.empty() && locate.top == 0) return;
  if (locate.top > kMaxTop) {
    throw UsageError(fmt::format("top: at most {} elements, got {}", kMaxTop, locate.top));
  }
  auto loc = std::make_unique<Locator>();
  loc->top = locate.top;
  const std::size_t rank = sel.source.size();
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
    std::vector<std::size_t> coords;
    loc->axes.push_back(walk_by_axis(by, locate, sel, coords));
    rows *= coords.size();
    if (rows > kMaxByRows) {
      throw UsageError(fmt::format("by: the breakdown would have more than {} rows", kMaxByRows));
    }
    loc->breakdown.coords.push_back(std::move(coords));
  }
  // Row of a group: C order over the axes, the last one fastest.
  for (std::size_t k = loc->axes.size(), scale = 1; k-- > 0;) {
    loc->axes[k].scale = scale;
    scale *= loc->breakdown.coords[k].size();
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
  // Blocks without NaN or infinities (the usual case) take one fused pass (add_finite);
  // the others evaluate the masks once into buffers, and the reductions over them are
  // std algorithms on contiguous memory.
  if (add_finite(a, b, first)) {
    if (loc_) {
      number_.resize({n});
      number_.fill(true);
      locate(a, b, first, true);
    }
    return;
  }
  finite_ = xt::isfinite(a) && xt::isfinite(b);
  const auto nan_a = xt::isnan(a), nan_b = xt::isnan(b);
  r_.nan_a += xt::count_nonzero(nan_a)();
  r_.nan_b += xt::count_nonzero(nan_b)();
  r_.nan_mismatches += xt::count_nonzero(xt::not_equal(nan_a, nan_b))();
  number_ = !(nan_a || nan_b);  // a pair without NaN
  offer_differences(a, b, first);
  ulp_distances(a, b, r_.rule.ulp_type, ulp_);
  if (std::find(number_.cbegin(), number_.cend(), true) != number_.cend()) {
    // The largest distance over pairs without NaN, and the first pair that has it.
    const std::uint64_t most = xt::amax(xt::where(number_, ulp_, std::uint64_t{0}))();
    offer_ulp(most, first + xt::argmax(number_ && xt::equal(ulp_, most))());
  }
  count_mismatches(a, b, first);
  if (loc_) locate(a, b, first, false);
}

bool Comparator::add_finite(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                            std::size_t first) {
  // offer_differences, the ULP maximum and count_mismatches for a block without NaN or
  // infinities: one pass without data-dependent branches (values, maxima, the mismatch
  // count and whether the block is finite at all), then a scan for the first
  // index of a maximum only where it beats the best so far, which after the first
  // blocks is rare. The values and first indices are those of the masked path.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kMax = std::numeric_limits<double>::max();
  const std::size_t n = a.size();
  const CompareRule& rule = r_.rule;
  ulp_distances(a, b, rule.ulp_type, ulp_);
  abs_.resize({n});
  rel_.resize({n});
  ok_.resize({n});
  const double *pa = a.data(), *pb = b.data();
  const std::uint64_t* pu = ulp_.data();
  double *pabs = abs_.data(), *prel = rel_.data();
  bool* pok = ok_.data();
  const bool by_ulp = rule.max_ulp.has_value(), either = rule.tolerance_explicit;
  const std::uint64_t max_ulp = by_ulp ? *rule.max_ulp : 0;
  double most_abs = 0, most_rel = 0;
  std::uint64_t most_ulp = 0;
  std::size_t bad = 0;
  bool finite = true;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = pa[i], y = pb[i];
    finite &= (std::abs(x) <= kMax) & (std::abs(y) <= kMax);
    const double d = std::abs(x - y), my = std::abs(y);
    const double rel = y != 0.0 ? d / my : (d == 0.0 ? 0.0 : kInf);
    pabs[i] = d;
    prel[i] = rel;
    most_abs = d > most_abs ? d : most_abs;
    most_rel = rel > most_rel ? rel : most_rel;
    most_ulp = pu[i] > most_ulp ? pu[i] : most_ulp;
    const bool within_tol = d <= rule.atol + rule.rtol * my;
    const bool ok = by_ulp ? (pu[i] <= max_ulp) | (either & within_tol) : within_tol;
    pok[i] = ok;
    bad += !ok;
  }
  if (!finite) return false;
  auto first_of = [&](const auto* v, auto value) {
    return static_cast<std::size_t>(std::find(v, v + n, value) - v);
  };
  auto offer_at = [&](DiffAt& at, const double* diff, double most) {
    if (at.index && !(most > at.value)) return;
    const std::size_t i = first_of(diff, most);
    at = DiffAt{most, first + i, pa[i], pb[i]};
  };
  offer_at(r_.max_abs, pabs, most_abs);
  offer_at(r_.max_rel, prel, most_rel);
  if (!r_.max_ulp || most_ulp > *r_.max_ulp) offer_ulp(most_ulp, first + first_of(pu, most_ulp));
  if (bad > 0) {
    r_.mismatches += bad;
    if (!r_.first_mismatch) r_.first_mismatch = first + first_of(pok, false);
  }
  return true;
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
      std::size_t entry = (first / ax.stride) % ax.n, left = ax.stride - first % ax.stride;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t g = ax.group.empty() ? entry : ax.group[entry];
        L.gid[i] += static_cast<std::uint32_t>(g * ax.scale);
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
                                   std::size_t first) {
  // What each pair of a block with NaN or infinities offers to the largest differences:
  // |a - b| and its size relative to |b| for finite pairs, +Inf for a pair with an
  // unequal infinity, and -1 (nothing) for pairs with NaN or equal infinities.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  abs_ = xt::abs(a - b);
  rel_ = xt::where(xt::not_equal(b, 0.0), abs_ / xt::abs(b),
                   xt::where(xt::equal(abs_, 0.0), 0.0, kInf));
  const auto other = xt::where(number_ && xt::not_equal(a, b), kInf, -1.0);
  abs_ = xt::where(finite_, abs_, other);
  rel_ = xt::where(finite_, rel_, other);
  offer(r_.max_abs, abs_, a, b, first);
  offer(r_.max_rel, rel_, a, b, first);
}

void Comparator::count_mismatches(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b,
                                  std::size_t first) {
  // The test itself, for a block with NaN or infinities: numpy.isclose's, or the ULP
  // bound (alone, or either of the two when tolerances were given explicitly). An
  // infinity matches only itself; NaN matches NaN only with equal_nan.
  const CompareRule& rule = r_.rule;
  const auto within_tol = xt::abs(a - b) <= rule.atol + rule.rtol * xt::abs(b);
  if (!rule.max_ulp) {
    ok_ = within_tol;
  } else if (rule.tolerance_explicit) {
    ok_ = ulp_ <= *rule.max_ulp || within_tol;
  } else {
    ok_ = ulp_ <= *rule.max_ulp;
  }
  ok_ = xt::where(number_, xt::where(finite_, ok_, xt::equal(a, b)),
                  rule.equal_nan && xt::isnan(a) && xt::isnan(b));
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
  // f16, bf16 and f32, the usual cases, widened by plain or vectorised loops (exact, and
  // the same values as Tensor::get's); the rest through the xtensor expression.
  if (detail::widens(t)) {
    out.resize({n});
    detail::widen(t, slab + first * dtype_size(t), out.data(), n);
    return;
  }
  if (t == DType::f32) {
    out.resize({n});
    const float* p = reinterpret_cast<const float*>(slab) + first;
    std::copy_n(p, n, out.data());
    return;
  }
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
