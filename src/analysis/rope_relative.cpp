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

RelativeCheck rope_relative_check(const Tensor& q, const Tensor& k, const RopeFreqs& f,
                                  const RelativeOptions& opt) {
  if (opt.start < 0) throw UsageError(fmt::format("--start: must be >= 0, got {}", opt.start));
  std::vector<std::int64_t> shifts{0};
  for (std::int64_t t : opt.shifts) {
    if (t < 0) throw UsageError(fmt::format("--shifts: shifts must be >= 0, got {}", t));
    if (t > (std::int64_t{1} << 53)) throw UsageError(fmt::format("--shifts: {} is too large", t));
    shifts.push_back(t);
  }
  if (shifts.size() < 2) throw UsageError("--shifts: at least one shift is needed");
  const Axes aq = resolve_axes(opt.axes, q.ndim(), "q"), ak = resolve_axes(opt.axes, k.ndim(), "k");
  RopeApplyOptions ro;
  ro.precision = opt.precision;
  std::vector<Canon> qs, ks;
  for (std::int64_t t : shifts) {
    Positions pos;
    pos.start = opt.start + t;
    qs.push_back(canonical(apply_rope(q, aq, f, pos, ro, DType::f64), aq));
    ks.push_back(canonical(apply_rope(k, ak, f, pos, ro, DType::f64), ak));
  }
  const Canon &q0 = qs[0], &k0 = ks[0];
  if (q0.d != k0.d || q0.b != k0.b || k0.h == 0 || q0.h % k0.h != 0) {
    throw InputError(
        fmt::format("q {} and k {}: batch and head dims must match, and k's heads divide q's",
                    shape_str(q.shape()), shape_str(k.shape())));
  }
  const std::size_t ndiag = q0.s + k0.s - 1, group = q0.h / k0.h, d = q0.d;
  std::vector<double> max_abs(ndiag, 0.0), max_rel(ndiag, 0.0);
  Worst worst;
  const auto rows = static_cast<std::ptrdiff_t>(q0.b * q0.h * q0.s);
#pragma omp parallel
  {
    std::vector<double> la(ndiag, 0.0), lr(ndiag, 0.0);
    Worst lw;
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
        for (std::size_t t = 1; t < shifts.size(); ++t) {
          const double dev = std::fabs(dot(qs[t].row(b, h, i), ks[t].row(b, h / group, j), d) - s0);
          const double rel = norm > 0 ? dev / norm : 0.0;
          la[diag] = std::max(la[diag], dev);
          lr[diag] = std::max(lr[diag], rel);
          lw.offer(rel, static_cast<std::size_t>(row), j, t);
        }
      }
    }
#pragma omp critical
    {
      for (std::size_t x = 0; x < ndiag; ++x) {
        max_abs[x] = std::max(max_abs[x], la[x]);
        max_rel[x] = std::max(max_rel[x], lr[x]);
      }
      worst.offer(lw.rel, lw.row, lw.j, lw.shift);
    }
  }

  RelativeCheck r;
  const std::int64_t longest = static_cast<std::int64_t>(std::max(q0.s, k0.s)) - 1;
  const std::int64_t max_pos =
      opt.start + *std::max_element(shifts.begin(), shifts.end()) + longest;
  r.tolerance =
      opt.tolerance > 0 ? opt.tolerance : relative_default_tolerance(f, opt.precision, max_pos);
  r.max_abs = *std::max_element(max_abs.begin(), max_abs.end());
  r.max_rel = *std::max_element(max_rel.begin(), max_rel.end());
  r.pass = r.max_rel <= r.tolerance;
  r.scores = q0.b * q0.h * q0.s * k0.s;
  if (worst.rel >= 0) {
    r.at_i = static_cast<std::int64_t>(worst.row % q0.s);
    r.at_h = static_cast<std::int64_t>(worst.row / q0.s % q0.h);
    r.at_b = static_cast<std::int64_t>(worst.row / q0.s / q0.h);
    r.at_j = static_cast<std::int64_t>(worst.j);
    r.at_shift = shifts[worst.shift];
  }

  std::vector<double> distance(ndiag);
  for (std::size_t x = 0; x < ndiag; ++x) {
    distance[x] = static_cast<double>(x) - static_cast<double>(k0.s - 1);
  }
  std::vector<std::string> shift_text;
  for (std::size_t t = 1; t < shifts.size(); ++t) shift_text.push_back(std::to_string(shifts[t]));
  Attrs attrs{{"kind", std::string("rope-relative")},
              {"start", static_cast<long long>(opt.start)},
              {"shifts", fmt::format("{}", fmt::join(shift_text, ","))},
              {"precision", std::string(opt.precision == Precision::f64 ? "f64" : "f32")},
              {"tolerance", r.tolerance},
              {"max_rel_dev", r.max_rel},
              {"pass", static_cast<long long>(r.pass ? 1 : 0)}};
  for (const auto& a : f.attrs) attrs.push_back(a);
  r.table = analysis_detail::make_table({"distance", "max_abs_dev", "max_rel_dev"},
                                        {distance, max_abs, max_rel}, std::move(attrs));
  LinePanel panel;
  panel.title = fmt::format("RoPE relative-position check: {}", r.pass ? "pass" : "FAIL");
  panel.subtitle = fmt::format("shifts {}; max |Δ score| / (|q||k|) = {:.3g}, tolerance {:.3g}",
                               fmt::join(shift_text, ","), r.max_rel, r.tolerance);
  panel.xlabel = "diagonal i - j";
  panel.ylabel = "max relative change of the score";
  panel.log_y = r.max_rel > 0;
  panel.hlines = {{r.tolerance, "tolerance"}};
  panel.series.push_back(PlotSeries{"max relative deviation", distance, max_rel, false, 0, 0});
  r.table.figure.panels.push_back(std::move(panel));
  return r;
}

}  // namespace posenc
