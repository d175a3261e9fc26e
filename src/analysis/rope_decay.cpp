// RoPE's long-term decay and the wavelengths of its frequency pairs (analysis.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "analysis/analysis_common.hpp"
#include "posenc/analysis.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

/// bound and mean_qk at distance m for frequencies `theta` (see rope_decay).
void decay_at(const std::vector<double>& theta, double m, double& bound, double& mean) {
  double re = 0, im = 0, sum_abs = 0, sum_cos = 0;
  for (double t : theta) {
    const double a = m * t;
    const double c = std::cos(a), s = std::sin(a);
    re += c;  // S_{j+1} = S_j + e^{i m θ_j}
    im += s;
    sum_abs += std::hypot(re, im);
    sum_cos += c;
  }
  const double n = static_cast<double>(theta.size());
  bound = sum_abs / n;
  mean = sum_cos / n;
}

}  // namespace

std::vector<DecayQuantity> parse_decay_quantities(const std::string& list) {
  std::vector<DecayQuantity> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, comma - pos);
    DecayQuantity q;
    if (name == "bound") {
      q = DecayQuantity::bound;
    } else if (name == "mean-qk") {
      q = DecayQuantity::mean_qk;
    } else {
      throw UsageError(
          fmt::format("--emit: unknown quantity '{}' (expected bound, mean-qk)", name));
    }
    if (std::find(out.begin(), out.end(), q) == out.end()) out.push_back(q);
    pos = comma + 1;
  }
  return out;
}

AnalysisTable rope_decay(const std::vector<RopeCurve>& curves,
                         const std::vector<std::int64_t>& distances,
                         const std::vector<DecayQuantity>& quantities) {
  analysis_detail::require_curves(curves);
  if (distances.empty()) throw UsageError("decay: no distance to evaluate");
  if (quantities.empty()) throw UsageError("--emit: no quantity asked for");
  for (std::int64_t m : distances) {
    if (m < 0) throw UsageError(fmt::format("decay: negative distance {}", m));
  }
  const std::size_t n = distances.size();
  std::vector<std::string> names{"distance"};
  std::vector<std::vector<double>> cols{std::vector<double>(n)};
  for (std::size_t i = 0; i < n; ++i) cols[0][i] = static_cast<double>(distances[i]);

  // One panel per quantity: the bound starts at (n + 1) / 2, the mean q·k at 1.
  std::vector<LinePanel> panels(quantities.size());
  for (std::size_t k = 0; k < quantities.size(); ++k) {
    const bool b = quantities[k] == DecayQuantity::bound;
    panels[k].title = b ? "RoPE long-term decay: RoFormer upper bound"
                        : "RoPE long-term decay: mean q·k of unit vectors";
    panels[k].subtitle = analysis_detail::shared_params(curves);
    panels[k].xlabel = "relative distance m";
    panels[k].ylabel = b ? "(1/n) Σ_j |S_j|" : "(1/n) Σ_j cos(m θ_j)";
  }
  for (std::size_t c = 0; c < curves.size(); ++c) {
    const auto& theta = curves[c].freqs.inv_freq;
    if (theta.empty()) throw UsageError("decay: a RoPE variant without frequencies");
    std::vector<double> bound(n), mean(n);
    const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < count; ++i) {
      decay_at(theta, static_cast<double>(distances[i]), bound[i], mean[i]);
    }
    for (std::size_t k = 0; k < quantities.size(); ++k) {
      const bool b = quantities[k] == DecayQuantity::bound;
      names.push_back(fmt::format("{}[{}]", b ? "bound" : "mean_qk", curves[c].label));
      cols.push_back(b ? bound : mean);
      PlotSeries s;
      s.label = curves[c].label;
      s.x = cols[0];
      s.y = cols.back();
      s.color = static_cast<int>(c);
      panels[k].series.push_back(std::move(s));
    }
  }
  Attrs attrs{{"kind", std::string("rope-decay")}};
  for (auto& a : analysis_detail::curve_attrs(curves)) attrs.push_back(std::move(a));
  AnalysisTable t = analysis_detail::make_table(std::move(names), cols, std::move(attrs));
  for (auto& p : panels) t.figure.panels.push_back(std::move(p));
  return t;
}

AnalysisTable rope_wavelengths(const std::vector<RopeCurve>& curves, std::int64_t trained,
                               std::int64_t target) {
  analysis_detail::require_curves(curves);
  if (trained <= 0 || target <= 0) {
    throw UsageError(fmt::format("wavelengths: context lengths must be positive, got {} and {}",
                                 trained, target));
  }
  const std::size_t pairs = curves[0].freqs.inv_freq.size();
  std::vector<std::string> names{"pair"};
  std::vector<std::vector<double>> cols{std::vector<double>(pairs)};
  for (std::size_t j = 0; j < pairs; ++j) cols[0][j] = static_cast<double>(j);

  LinePanel panel;
  panel.title = "RoPE wavelength per frequency pair";
  panel.subtitle = analysis_detail::shared_params(curves);
  panel.xlabel = "frequency pair j";
  panel.ylabel = "wavelength 2π/θ_j (tokens)";
  panel.log_y = true;
  panel.hlines = {{static_cast<double>(trained), fmt::format("trained context {}", trained)},
                  {static_cast<double>(target), fmt::format("target context {}", target)}};
  for (std::size_t c = 0; c < curves.size(); ++c) {
    const auto& theta = curves[c].freqs.inv_freq;
    if (theta.size() != pairs) {
      throw UsageError(fmt::format("wavelengths: '{}' has {} frequency pairs, '{}' has {}",
                                   curves[c].label, theta.size(), curves[0].label, pairs));
    }
    std::vector<double> wl(pairs), rot_trained(pairs), rot_target(pairs);
    for (std::size_t j = 0; j < pairs; ++j) {
      wl[j] = theta[j] > 0 ? kTwoPi / theta[j] : std::numeric_limits<double>::infinity();
      rot_trained[j] = static_cast<double>(trained) * theta[j] / kTwoPi;
      rot_target[j] = static_cast<double>(target) * theta[j] / kTwoPi;
    }
    const std::string& label = curves[c].label;
    names.push_back(fmt::format("wavelength[{}]", label));
    names.push_back(fmt::format("rotations_trained[{}]", label));
    names.push_back(fmt::format("rotations_target[{}]", label));
    cols.push_back(wl);
    cols.push_back(std::move(rot_trained));
    cols.push_back(std::move(rot_target));
    PlotSeries s;
    s.label = label;
    s.x = cols[0];
    s.y = std::move(wl);
    s.color = static_cast<int>(c);
    panel.series.push_back(std::move(s));
  }
  Attrs attrs{{"kind", std::string("rope-wavelengths")},
              {"trained_context", static_cast<long long>(trained)},
              {"target_context", static_cast<long long>(target)}};
  for (auto& a : analysis_detail::curve_attrs(curves)) attrs.push_back(std::move(a));
  AnalysisTable t = analysis_detail::make_table(std::move(names), cols, std::move(attrs));
  t.figure.panels.push_back(std::move(panel));
  return t;
}

}  // namespace posenc
