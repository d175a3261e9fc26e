#pragma once
/// \file
/// Figures of tensors: heatmaps of 2-D data and line charts, drawn to PNG, SVG or PDF
/// (PLplot on a cairo surface, see render_image) or as text for a terminal (Unicode
/// half blocks and braille with 24-bit colour, or plain ASCII; see render_terminal).
///
/// A Figure is plain data: one or more panels stacked top to bottom. Both renderers
/// take the same Figure, resolve the same colour scale (`heat_scale`) and map values to
/// the same colours (`colormap_rgb`), so a file and a terminal preview agree.
///
/// Colour maps (control points, linear interpolation in sRGB between them):
/// - diverging: ColorBrewer RdBu, 11 classes, reversed so that negative values are blue,
///   zero is near-white (`#f7f7f7`) and positive values are red; for signed data, with a
///   range symmetric about zero;
/// - sequential: viridis at 10 evenly spaced points (`#440154`, `#482878`, ... `#b5de2b`,
///   `#fde725`, the common 10-step list); for non-negative data such as probabilities.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "posenc/io/ref.hpp"

namespace posenc {

/// An sRGB colour.
struct Rgb {
  std::uint8_t r = 0;  ///< red, 0..255
  std::uint8_t g = 0;  ///< green, 0..255
  std::uint8_t b = 0;  ///< blue, 0..255
  /// Equal in all three channels.
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

/// The two colour maps of heatmaps (see the file comment for their colours).
enum class ColorMap {
  diverging,  ///< RdBu: blue for negative, near-white for 0, red for positive
  sequential  ///< viridis: dark purple for the smallest values to yellow for the largest
};

/// "diverging", "sequential".
std::string colormap_name(ColorMap m);

/// The control points of `m`, evenly spaced over [0, 1].
const std::vector<Rgb>& colormap_points(ColorMap m);

/// The colour at `t` in [0, 1] (clamped): linear interpolation between the two nearest
/// control points, each channel rounded to nearest.
Rgb colormap_rgb(ColorMap m, double t);

/// The `n`-entry table (n >= 2) that image files use: entry i is colormap_rgb(m, i / (n-1)).
/// A value at position t in [0, 1] is drawn with entry min(floor(t * n), n - 1) (how
/// PLplot indexes its colour map 1).
std::vector<Rgb> colormap_table(ColorMap m, int n);

/// The tensor index of each row or column of a heatmap: first, first + step, ...
/// (slices are arithmetic progressions; the step may be negative).
struct AxisIndex {
  double first = 0;  ///< the tensor index of row (column) 0
  double step = 1;   ///< the index difference from one row (column) to the next
};

/// A heatmap of a rows x cols matrix, row 0 at the top (as numpy / matplotlib imshow).
struct HeatmapPanel {
  std::string title;             ///< above the panel
  std::string subtitle;          ///< under the title, smaller (e.g. the recorded parameters)
  std::string xlabel;            ///< names the columns' axis
  std::string ylabel;            ///< names the rows' axis
  std::string zlabel;            ///< names the colour bar
  std::size_t rows = 0;          ///< matrix rows (the y axis)
  std::size_t cols = 0;          ///< matrix columns (the x axis)
  std::vector<double> z;         ///< rows * cols values, row-major; non-finite cells stay blank
  AxisIndex y;                   ///< the tensor indices of the rows
  AxisIndex x;                   ///< the tensor indices of the columns
  std::optional<ColorMap> cmap;  ///< unset: diverging for signed data, else sequential
  std::optional<double> vmin;    ///< value at the low end of the colours; unset: see heat_scale
  std::optional<double> vmax;    ///< value at the high end of the colours; unset: see heat_scale
  bool log = false;              ///< colours by log10 of the values
};

/// One line of a chart. Non-finite points break the line.
struct PlotSeries {
  std::string label;      ///< legend text; empty = not in the legend
  std::vector<double> x;  ///< the points' x values (pairs with y; the shorter one counts)
  std::vector<double> y;  ///< the points' y values
  bool markers = false;   ///< draw a marker at every point
  int dash = 0;           ///< 0 solid, 1 dashed, 2 dotted
  int color = -1;         ///< palette index (see series_color); -1 = by position
};

/// A horizontal reference line across a chart (e.g. a context length).
struct RefLine {
  double y = 0;       ///< where the line is drawn (a y value; drawn only within the y range)
  std::string label;  ///< written at its left end and in the legend
};

/// A line chart.
struct LinePanel {
  std::string title;               ///< above the panel
  std::string subtitle;            ///< under the title, smaller
  std::string xlabel;              ///< names the x axis
  std::string ylabel;              ///< names the y axis
  std::vector<PlotSeries> series;  ///< the lines, drawn in order (later ones on top)
  std::vector<RefLine> hlines;     ///< dotted reference lines, behind the series
  bool log_y = false;              ///< logarithmic y axis; points <= 0 are left out
  std::optional<double> ymin;      ///< bottom of the y range; unset: the data's, with a margin
  std::optional<double> ymax;      ///< top of the y range; unset: the data's, with a margin
};

/// One panel of a figure: a heatmap or a line chart.
using PlotPanel = std::variant<HeatmapPanel, LinePanel>;

/// What render_image and render_terminal draw: panels stacked top to bottom.
struct Figure {
  std::vector<PlotPanel> panels;  ///< stacked top to bottom
  int width = 960;                ///< pixels (PNG) or points (SVG, PDF), 64..16384
  int height = 720;               ///< pixels (PNG) or points (SVG, PDF), 64..16384
};

/// The colour of line series number `i` (a 10-colour palette, repeated).
Rgb series_color(int i);

/// The resolved colour scale of a heatmap: map, range (in log10 units when `log`).
struct HeatScale {
  ColorMap map = ColorMap::sequential;  ///< the colour map
  double lo = 0;                        ///< the value at colour position 0 (log10 of it when `log`)
  double hi = 1;                        ///< the value at colour position 1 (log10 of it when `log`)
  bool log = false;                     ///< positions are taken on log10 of the values
  /// Set for nearly constant data: every drawable value is placed as this one (its
  /// log10 when `log`), so rounding noise cannot paint the map's two ends.
  std::optional<double> constant;
  /// Position in [0, 1] of value `v`, or nullopt for a blank cell (non-finite, or not
  /// positive with `log`).
  std::optional<double> position(double v) const;
};

/// Resolves the scale of `p`: the map (diverging when the finite values include both
/// signs, unless set), and the range: vmin/vmax when given, else [-M, M] with M the
/// largest magnitude for the diverging map and [min, max] for the sequential one (with
/// `log`, over positive values, in log10). Throws InputError when there is no finite
/// (positive, with log) value and UsageError for vmin >= vmax or non-positive vmin/vmax
/// with log. A constant matrix gets a range of +-0.5 (+-1 in log10) around its value;
/// so does, without vmin and vmax, one whose values agree to a millionth (their range is
/// at most 1e-6 of the largest magnitude), drawn in one colour (`constant`).
HeatScale heat_scale(const HeatmapPanel& p);

/// The image file formats render_image writes.
enum class ImageFormat {
  png,  ///< PNG, 8-bit RGB
  svg,  ///< SVG, text as glyph outlines
  pdf   ///< PDF, without a creation date
};

/// "png", "svg", "pdf".
std::string image_format_name(ImageFormat f);

/// The format named by `path`'s extension (.png, .svg, .pdf, any case), or by `format`
/// when that is not empty ("png", "svg", "pdf"). Throws UsageError naming the path for
/// other extensions.
ImageFormat image_format(const std::string& path, const std::string& format = "");

/// Draws `fig` and returns the file bytes. The same figure gives the same bytes on
/// the same machine (fonts come from fontconfig): PNG has no time chunk, the PDF no
/// creation date, and SVG ids count from the start of each run of the program.
/// Throws InputError for a panel with nothing to draw, UsageError for bad sizes
/// (width/height outside 64..16384), OutputError when PLplot's cairo driver is missing.
/// Serialised internally (PLplot keeps global state). To write a file atomically, hand
/// the bytes to an OutputFile (io/atomic.hpp).
std::string render_image(const Figure& fig, ImageFormat format);

/// How a terminal drawing looks.
struct TerminalStyle {
  int columns = 80;   ///< width of the drawing, in characters (at least 20)
  int lines = 24;     ///< height of the whole drawing, in lines (at least 8)
  bool color = true;  ///< Unicode blocks/braille with 24-bit colour; false: plain ASCII
};

/// Draws `fig` as text: per panel a title line, the plot area with value labels on the
/// left and index labels below, and a legend (a colour bar with its range for heatmaps,
/// the series names with their colours or characters for charts). Throws as
/// render_image for panels with nothing to draw.
std::string render_terminal(const Figure& fig, const TerminalStyle& style);

}  // namespace posenc
