// The relative-position check of RoPE on real q and k (analysis.hpp): scores of fixed
// content must not change when both positions move by the same shift.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include "analysis/analysis_common.hpp"
#include "posenc/analysis.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

/// A rotated tensor copied to [B, H, S, D] order (missing axes have extent 1).
struct Canon {
  std::size_t b = 1, h = 1, s = 0, d = 0;
  std::vector<double> v;
  const double* row(std::size_t bb, std::size_t hh, std::size_t ss) const {
    return v.data() + ((bb * h + hh) * s + ss) * d;
  }
};

Canon canonical(const Tensor& t, const Axes& axes) {
  const Shape& shape = t.shape();
  std::vector<std::size_t> stride(shape.size(), 1);
  for (std::size_t a = shape.size(); a-- > 1;) stride[a - 1] = stride[a] * shape[a];
  auto extent = [&](char c) {
    int i = axes.index(c);
    return i < 0 ? std::size_t{1} : shape[i];
  };
  auto step = [&](char c) {
    int i = axes.index(c);
    return i < 0 ? std::size_t{0} : stride[i];
  };
  Canon c;
  c.b = extent('b'), c.h = extent('h'), c.s = extent('s'), c.d = extent('d');
  const std::size_t sb = step('b'), sh = step('h'), ss = step('s'), sd = step('d');
  c.v.resize(c.b * c.h * c.s * c.d);
  const double* src = t.data<double>();
  std::size_t k = 0;
  for (std::size_t b = 0; b < c.b; ++b)
    for (std::size_t h = 0; h < c.h; ++h)
      for (std::size_t s = 0; s < c.s; ++s)
        for (std::size_t d = 0; d < c.d; ++d) c.v[k++] = src[b * sb + h * sh + s * ss + d * sd];
  return c;
}

/// Dot product in a fixed order (four partial sums), so results do not depend on
/// threads or on where the vectors sit.
double dot(const double* a, const double* b, std::size_t n) {
  double s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) s[k] += a[i + k] * b[i + k];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// The largest relative deviation and where it is; ties go to the earliest place.
struct Worst {
  double rel = -1;
  std::size_t row = 0, j = 0, shift = 0;
  void offer(double r, std::size_t row_, std::size_t j_, std::size_t shift_) {
    if (r > rel || (r == rel && std::tie(row_, j_, shift_) < std::tie(row, j, shift))) {
      rel = r, row = row_, j = j_, shift = shift_;
    }
  }
};

}  // namespace

double relative_default_tolerance(const RopeFreqs& f, Precision p, std::int64_t max_position) {
  const double eps = p == Precision::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  double theta = 0;
  for (double t : f.inv_freq) theta = std::max(theta, t);
  const double angle = static_cast<double>(max_position) * theta;
  return 4.0 * eps * (angle + static_cast<double>(f.head_dim));
}

namespace {

/// 0 and the shifts of `opt`, checked.
std::vector<std::int64_t> shift_list(const RelativeOptions& opt) {
  if (opt.start < 0) throw UsageError(fmt::format("--start: must be >= 0, got {}", opt.start));
  std::vector<std::int64_t> shifts{0};
  for (std::int64_t t : opt.shifts) {
    if (t < 0) throw UsageError(fmt::format("--shifts: shifts must be >= 0, got {}", t));
    if (t > (std::int64_t{1} << 53)) throw UsageError(fmt::format("--shifts: {} is too large", t));
    shifts.push_back(t);
  }
  if (shifts.size() < 2) throw UsageError("--shifts: at least one shift is needed");
  return shifts;
}

/// q and k rotated at every shift, in [B, H, S, D] order.
struct Rotated {
  std::vector<Canon> q, k;
};

Rotated rotate_at_shifts(const Tensor& q, const Tensor& k, const RopeFreqs& f,
                         const RelativeOptions& opt, const std::vector<std::int64_t>& shifts) {
  const Axes aq = resolve_axes(opt.axes, q.ndim(), "q"), ak = resolve_axes(opt.axes, k.ndim(), "k");
  RopeApplyOptions ro;
  ro.precision = opt.precision;
  Rotated r;
  for (std::int64_t t : shifts) {
    Positions pos;
    pos.start = opt.start + t;
    r.q.push_back(canonical(apply_rope(q, aq, f, pos, ro, DType::f64), aq));
    r.k.push_back(canonical(apply_rope(k, ak, f, pos, ro, DType::f64), ak));
  }
  const Canon &q0 = r.q[0], &k0 = r.k[0];
  if (q0.d != k0.d || q0.b != k0.b || k0.h == 0 || q0.h % k0.h != 0) {
    throw InputError(
        fmt::format("q {} and k {}: batch and head dims must match, and k's heads divide q's",
                    shape_str(q.shape()), shape_str(k.shape())));
  }
  return r;
}

/// The largest deviations per diagonal i - j (index i + sk - 1 - j) and overall.
struct Deviations {
  std::vector<double> abs, rel;
  Worst worst;
};

/// Compares every score with its value at shift 0. Work is split by query row; maxima
/// merge in any order, so the result does not depend on the thread count.
Deviations scan(const Rotated& r) {
  const Canon &q0 = r.q[0], &k0 = r.k[0];
  const std::size_t ndiag = q0.s + k0.s - 1, group = q0.h / k0.h, d = q0.d;
  Deviations out{std::vector<double>(ndiag, 0.0), std::vector<double>(ndiag, 0.0), {}};
  const auto rows = static_cast<std::ptrdiff_t>(q0.b * q0.h * q0.s);
#pragma omp parallel
  {
    Deviations mine{std::vector<double>(ndiag, 0.0), std::vector<double>(ndiag, 0.0), {}};
#pragma omp for schedule(static)
    for (std::ptrdiff_t row = 0; row < rows; ++row) {
      const std::size_t i = static_cast<std::size_t>(row) % q0.s;
      const std::size_t h = static_cast<std::size_t>(row) / q0.s % q0.h;
      const std::size_t b = static_cast<std::size_t>(row) / q0.s / q0.h;
      const double* qv = q0.row(b, h, i);
      const double nq = std::sqrt(dot(qv, qv, d));
      for (std::size_t j = 0; j < k0.s; ++j) {
        const double* kv = k0.row(b, h / group, j);
        const double s0 = dot(qv, kv, d), norm = nq * std::sqrt(dot(kv, kv, d));
        const std::size_t diag = i + k0.s - 1 - j;
        for (std::size_t t = 1; t < r.q.size(); ++t) {
          const double st = dot(r.q[t].row(b, h, i), r.k[t].row(b, h / group, j), d);
          const double dev = std::fabs(st - s0), rel = norm > 0 ? dev / norm : 0.0;
          mine.abs[diag] = std::max(mine.abs[diag], dev);
          mine.rel[diag] = std::max(mine.rel[diag], rel);
          mine.worst.offer(rel, static_cast<std::size_t>(row), j, t);
        }
      }
    }
#pragma omp critical
    {
      for (std::size_t x = 0; x < ndiag; ++x) {
        out.abs[x] = std::max(out.abs[x], mine.abs[x]);
        out.rel[x] = std::max(out.rel[x], mine.rel[x]);
      }
      out.worst.offer(mine.worst.rel, mine.worst.row, mine.worst.j, mine.worst.shift);
    }
  }
  return out;
}

/// The table (per diagonal), its parameters and its picture.
AnalysisTable relative_table(const RelativeCheck& r, const Deviations& dev, std::size_t sk,
                             const RopeFreqs& f, const RelativeOptions& opt,
                             const std::vector<std::int64_t>& shifts) {
  std::vector<double> distance(dev.abs.size());
  for (std::size_t x = 0; x < distance.size(); ++x) {
    distance[x] = static_cast<double>(x) - static_cast<double>(sk - 1);
  }
  const std::vector<std::int64_t> moved(shifts.begin() + 1, shifts.end());
  Attrs attrs{{"kind", std::string("rope-relative")},
              {"start", static_cast<long long>(opt.start)},
              {"shifts", fmt::format("{}", fmt::join(moved, ","))},
              {"precision", std::string(opt.precision == Precision::f64 ? "f64" : "f32")},
              {"tolerance", r.tolerance},
              {"max_rel_dev", r.max_rel},
              {"pass", static_cast<long long>(r.pass ? 1 : 0)}};
  for (const auto& a : f.attrs) attrs.push_back(a);
  AnalysisTable t = analysis_detail::make_table({"distance", "max_abs_dev", "max_rel_dev"},
                                                {distance, dev.abs, dev.rel}, std::move(attrs));
  LinePanel panel;
  panel.title = fmt::format("RoPE relative-position check: {}", r.pass ? "pass" : "FAIL");
  panel.subtitle = fmt::format("shifts {}; max |Δ score| / (|q||k|) = {:.3g}, tolerance {:.3g}",
                               fmt::join(moved, ","), r.max_rel, r.tolerance);
  panel.xlabel = "diagonal i - j";
  panel.ylabel = "max relative change of the score";
  panel.log_y = r.max_rel > 0;
  panel.hlines = {{r.tolerance, "tolerance"}};
  panel.series.push_back(PlotSeries{"max relative deviation", distance, dev.rel, false, 0, 0});
  t.figure.panels.push_back(std::move(panel));
  return t;
}

}  // namespace

RelativeCheck rope_relative_check(const Tensor& q, const Tensor& k, const RopeFreqs& f,
                                  const RelativeOptions& opt) {
  const std::vector<std::int64_t> shifts = shift_list(opt);
  const Rotated rot = rotate_at_shifts(q, k, f, opt, shifts);
  const Deviations dev = scan(rot);
  const Canon &q0 = rot.q[0], &k0 = rot.k[0];
  RelativeCheck r;
  const auto longest = static_cast<std::int64_t>(std::max(q0.s, k0.s)) - 1;
  const std::int64_t max_pos =
      opt.start + *std::max_element(shifts.begin(), shifts.end()) + longest;
  r.tolerance =
      opt.tolerance > 0 ? opt.tolerance : relative_default_tolerance(f, opt.precision, max_pos);
  r.max_abs = *std::max_element(dev.abs.begin(), dev.abs.end());
  r.max_rel = *std::max_element(dev.rel.begin(), dev.rel.end());
  r.pass = r.max_rel <= r.tolerance;
  r.scores = q0.b * q0.h * q0.s * k0.s;
  r.at_i = static_cast<std::int64_t>(dev.worst.row % q0.s);
  r.at_h = static_cast<std::int64_t>(dev.worst.row / q0.s % q0.h);
  r.at_b = static_cast<std::int64_t>(dev.worst.row / q0.s / q0.h);
  r.at_j = static_cast<std::int64_t>(dev.worst.j);
  r.at_shift = shifts[dev.worst.shift];
  r.table = relative_table(r, dev, k0.s, f, opt, shifts);
  return r;
}

}  // namespace posenc
