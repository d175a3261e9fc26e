#pragma once
// Pieces both renderers of a Figure share (not part of the public API).

#include <string>

#include "posenc/plot.hpp"

namespace posenc::plot_detail {

/// Non-finite heatmap cells, reference lines and chart grids, in both renderers.
constexpr Rgb kBlankColor{200, 200, 200};
constexpr Rgb kRefColor{110, 110, 110};
constexpr Rgb kGridColor{222, 222, 222};

/// The drawn ranges of a line chart: x over finite points, y over finite points (and
/// the reference lines), in log10 units when the chart is logarithmic; ymin/ymax of the
/// panel override. Never empty: a single value is widened. Throws InputError when no
/// point can be drawn.
struct LineRange {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
};
LineRange line_range(const LinePanel& p);

/// (v - lo) / (hi - lo) without overflow for any finite v, lo and hi (a range may span
/// [-1.8e308, 1.8e308]); NaN when lo == hi or v is NaN.
double fraction(double v, double lo, double hi);

/// y as drawn: log10(y) on a log chart (NaN for y <= 0), y otherwise.
double chart_y(const LinePanel& p, double y);

/// Short label of a number for ticks and legends: up to 4 significant digits.
std::string number_label(double v);

/// Checks the sizes of a figure (UsageError) and that every panel has something to draw
/// (InputError), before anything is rendered.
void check_figure(const Figure& fig);

}  // namespace posenc::plot_detail
