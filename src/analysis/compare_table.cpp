// compare's error breakdown as a table and its picture: see compare_breakdown_table in
// include/posenc/analysis.hpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "analysis/analysis_common.hpp"
#include "posenc/analysis.hpp"

namespace posenc {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double or_nan(double v) { return v < 0 ? kNaN : v; }

bool any_positive(const std::vector<double>& v) {
  for (double x : v) {
    if (std::isfinite(x) && x > 0) return true;
  }
  return false;
}

/// The tensor indices of the entries of an axis as a heatmap axis: their own values when
/// evenly spaced, else the entry numbers (`even` false).
AxisIndex axis_index(const std::vector<std::size_t>& c, bool& even) {
  even = true;
  if (c.size() < 2) return {c.empty() ? 0.0 : static_cast<double>(c[0]), 1.0};
  const double first = static_cast<double>(c[0]);
  const double step = static_cast<double>(c[1]) - first;
  for (std::size_t i = 2; i < c.size(); ++i) {
    if (static_cast<double>(c[i]) != first + static_cast<double>(i) * step) even = false;
  }
  return even && step != 0 ? AxisIndex{first, step} : (even = false, AxisIndex{0.0, 1.0});
}

std::string rule_text(const CompareRule& rule) {
  std::string t = fmt::format("|a - b| <= {} + {} |b|", rule.atol, rule.rtol);
  if (rule.max_ulp) {
    const std::string u = fmt::format("ulp <= {}", *rule.max_ulp);
    t = rule.tolerance_explicit ? u + " or " + t : u;
  }
  return t;
}

}  // namespace

AnalysisTable compare_breakdown_table(const CompareResult& r, const std::vector<std::string>& names,
                                      Attrs extra) {
  if (!r.breakdown) throw std::invalid_argument("compare_breakdown_table: no breakdown");
  const CompareBreakdown& bd = *r.breakdown;
  if (names.size() != bd.axes.size()) {
    throw std::invalid_argument("compare_breakdown_table: one name per axis");
  }
  const std::size_t rows = bd.groups.size();
  const std::size_t inner = bd.coords.size() == 2 ? bd.coords[1].size() : 1;
  std::vector<std::vector<double>> cols(names.size() + 6, std::vector<double>(rows));
  for (std::size_t g = 0; g < rows; ++g) {
    const GroupStats& s = bd.groups[g];
    // The group's entries: C order over the axes, the last fastest.
    for (std::size_t k = names.size(), rest = g; k-- > 0;) {
      cols[k][g] = static_cast<double>(bd.coords[k][rest % bd.coords[k].size()]);
      rest /= bd.coords[k].size();
    }
    const std::size_t k = names.size();
    cols[k][g] = static_cast<double>(s.count);
    cols[k + 1][g] = static_cast<double>(s.mismatches);
    cols[k + 2][g] = or_nan(s.max_abs);
    cols[k + 3][g] = or_nan(s.max_rel);
    cols[k + 4][g] = s.any_ulp ? static_cast<double>(s.max_ulp) : kNaN;
    cols[k + 5][g] = or_nan(s.max_tol_ratio);
  }
  std::vector<std::string> col_names = names;
  for (const char* c : {"count", "mismatches", "max_abs", "max_rel", "max_ulp", "max_tol_ratio"}) {
    col_names.push_back(c);
  }
  const CompareRule& rule = r.rule;
  Attrs attrs{{"kind", std::string("compare-breakdown")}, {"rtol", rule.rtol}, {"atol", rule.atol}};
  if (rule.max_ulp) attrs.push_back({"max_ulp", static_cast<long long>(*rule.max_ulp)});
  attrs.push_back({"ulp_type", rule.ulp_type ? std::string(dtype_name(*rule.ulp_type))
                                             : std::string("integer")});
  attrs.push_back({"by", fmt::format("{}", fmt::join(names, ","))});
  for (auto& a : extra) attrs.push_back(std::move(a));
  const std::size_t k = names.size();
  const std::vector<double> max_abs = cols[k + 2], mism = cols[k + 1];
  AnalysisTable t = analysis_detail::make_table(std::move(col_names), cols, std::move(attrs));

  const std::string subtitle =
      fmt::format("{} of {} elements differ; rule {}", r.mismatches, r.total, rule_text(rule));
  if (names.size() == 1) {
    const std::vector<double>& x = cols[0];
    LinePanel err, count;
    err.title = fmt::format("largest |a - b| by {}", names[0]);
    err.subtitle = subtitle;
    err.xlabel = count.xlabel = names[0];
    err.ylabel = "max |a - b|";
    err.log_y = any_positive(max_abs);
    err.series.push_back({"", x, max_abs, rows <= 64, 0, 0});
    count.title = fmt::format("mismatches by {}", names[0]);
    count.ylabel = "mismatches";
    count.series.push_back({"", x, mism, rows <= 64, 0, 3});
    t.figure.panels.push_back(std::move(err));
    t.figure.panels.push_back(std::move(count));
    return t;
  }
  if (names.size() > 2) return t;  // no picture: a table of groups only
  HeatmapPanel err, count;
  bool even_y = true, even_x = true;
  err.y = count.y = axis_index(bd.coords[0], even_y);
  err.x = count.x = axis_index(bd.coords[1], even_x);
  err.rows = count.rows = bd.coords[0].size();
  err.cols = count.cols = inner;
  err.ylabel = count.ylabel = even_y ? names[0] : names[0] + " (entry)";
  err.xlabel = count.xlabel = even_x ? names[1] : names[1] + " (entry)";
  err.title = fmt::format("largest |a - b| by {} and {}", names[0], names[1]);
  err.log = any_positive(max_abs);
  err.subtitle = err.log ? "grey cells: no difference" : "";
  count.subtitle = subtitle;
  err.zlabel = "max |a - b|";
  err.z = max_abs;
  count.title = fmt::format("mismatches by {} and {} (bright: more)", names[0], names[1]);
  count.zlabel = "mismatches";
  count.z = mism;
  err.cmap = count.cmap = ColorMap::sequential;
  t.figure.panels.push_back(std::move(count));
  t.figure.panels.push_back(std::move(err));
  return t;
}

}  // namespace posenc
