// Figures to PNG, SVG and PDF with PLplot drawing on a cairo surface we own.
//
// Why PLplot: it is packaged in Debian (libplplot-dev, plplot-driver-cairo), is a C
// library with no interpreter or GUI toolkit behind it, and draws everything a
// scientific chart needs (axes with automatic ticks, log axes, labels, images with a
// colour map, colour bars, legends) with real fonts through cairo/pango. matplotlib
// would need Python at run time, gnuplot a separate program and a pipe.
//
// Why its `extcairo` device rather than the pngcairo/svgcairo/pdfcairo file devices:
// we create the cairo surface, so the bytes come back through our own stream callback
// (the caller writes them atomically), and we control the metadata: cairo 1.16's PDF
// surface writes the current time as /CreationDate (and ignores SOURCE_DATE_EPOCH)
// unless told otherwise, which would make two runs differ. Both libraries are loaded
// on first use (graphics_api.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "plot/graphics_api.hpp"
#include "plot/plot_common.hpp"
#include "posenc/error.hpp"
#include "posenc/plot.hpp"
#include "posenc/printable.hpp"

namespace posenc {

namespace {

using plot_detail::gfx;
using plot_detail::LineRange;

// cmap0 entries: background, ink, grid, blank cells, reference lines, then the palette.
constexpr int kWhite = 0, kBlack = 1, kGrid = 2, kBlank = 3, kRef = 4, kPalette0 = 5;
constexpr int kPaletteSize = 10;
constexpr int kColors = 256;  // cmap1 entries: the heatmap colour table

// PLplot keeps one global state; renders are serialised.
std::mutex g_plplot_mutex;
std::string g_plplot_warning;

// PLplot calls this instead of exit(): the message becomes an exception that unwinds
// through PLplot's C frames (x86-64 C code always carries unwind tables).
int on_plplot_exit(const char* msg) {
  throw std::runtime_error(fmt::format("PLplot: {}", msg ? msg : "fatal error"));
}

// Non-fatal complaints are collected (PLplot would print them) and reported after
// drawing: they mean we called it wrongly.
void on_plplot_abort(const char* msg) {
  if (g_plplot_warning.empty()) g_plplot_warning = msg ? msg : "warning";
}

/// Text as PLplot shows it: '#' starts an escape sequence, so it is doubled.
std::string pl_text(const std::string& text) {
  // Names and attributes from files: no control character reaches an SVG or PDF.
  const std::string s = printable(text);
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '#') out += '#';
  }
  return out;
}

struct CairoDeleter {
  void operator()(cairo_surface_t* s) const { gfx().cairo_surface_destroy(s); }
  void operator()(cairo_t* c) const { gfx().cairo_destroy(c); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, CairoDeleter>;
using ContextPtr = std::unique_ptr<cairo_t, CairoDeleter>;

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int n) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), n);
  return CAIRO_STATUS_SUCCESS;
}

SurfacePtr make_surface(ImageFormat format, int w, int h, std::string* out) {
  cairo_surface_t* s = nullptr;
  switch (format) {
    case ImageFormat::png:
      s = gfx().cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
      break;
    case ImageFormat::svg:
      s = gfx().cairo_svg_surface_create_for_stream(append_bytes, out, w, h);
      break;
    case ImageFormat::pdf:
      s = gfx().cairo_pdf_surface_create_for_stream(append_bytes, out, w, h);
      // A date that is not ISO 8601 makes cairo drop /CreationDate altogether.
      gfx().cairo_pdf_surface_set_metadata(s, CAIRO_PDF_METADATA_CREATE_DATE, "none");
      break;
  }
  SurfacePtr p(s);
  if (gfx().cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    throw OutputError(fmt::format("cannot create a {}x{} {} surface: {}", w, h,
                                  image_format_name(format),
                                  gfx().cairo_status_to_string(gfx().cairo_surface_status(s))));
  }
  return p;
}

void require_cairo_device() {
  // plgDevs fills arrays the caller provides; n holds their size and then the count.
  std::vector<const char*> menu(64), names(64);
  const char** pm = menu.data();
  const char** pn = names.data();
  int n = static_cast<int>(names.size());
  gfx().plgDevs(&pm, &pn, &n);
  for (int i = 0; i < n; ++i) {
    if (std::string(names[static_cast<std::size_t>(i)]) == "extcairo") return;
  }
  throw OutputError(
      "cannot draw images: PLplot's cairo driver is not installed (Debian package "
      "plplot-driver-cairo)");
}

void set_palettes(ColorMap heat) {
  std::vector<PLINT> r, g, b;
  auto add = [&](Rgb c) {
    r.push_back(c.r);
    g.push_back(c.g);
    b.push_back(c.b);
  };
  add({255, 255, 255});           // kWhite
  add({0, 0, 0});                 // kBlack
  add(plot_detail::kGridColor);   // kGrid
  add(plot_detail::kBlankColor);  // kBlank
  add(plot_detail::kRefColor);    // kRef
  for (int i = 0; i < kPaletteSize; ++i) add(series_color(i));
  gfx().plscmap0(r.data(), g.data(), b.data(), static_cast<PLINT>(r.size()));
  r.clear(), g.clear(), b.clear();
  for (const Rgb& c : colormap_table(heat, kColors)) add(c);
  gfx().plscmap1(r.data(), g.data(), b.data(), kColors);
}

/// A tick spacing of 1, 2 or 5 times a power of ten giving about `target` ticks over
/// `span`, at least `minimum` (heatmap axes label whole indices only).
double nice_tick(double span, int target, double minimum) {
  const double raw = std::fabs(span) / target;
  if (!(raw > 0.0)) return std::max(minimum, 1.0);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double t = p;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    t = m * p;
    if (t >= raw) break;
  }
  return std::max(t, minimum);
}

// A character's advance as a fraction of PLplot's character height, for fitting text
// (PLplot cannot measure it): DejaVu Sans averages 0.76 over a subtitle such as
// "kind=rope emit=cos ..."; the rest allows for wider letters.
constexpr double kCharAdvance = 0.85;
// Text above the plot box shrinks to no less than this share of its size to fit.
constexpr double kMinShrink = 0.6;

/// The first `n` code points of `s`.
std::string first_code_points(const std::string& s, std::size_t n) {
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && k++ == n) return s.substr(0, i);
  }
  return s;
}

/// A line of text `disp` character heights above the plot box (`left` to `right`, as
/// fractions of the subpage), at character scale `scale`: centred over the box when it
/// stays within margins as wide as the box's left one, else starting level with the
/// box's left edge, made smaller (down to kMinShrink) to end before the right margin
/// and, if still too long, cut short with "...".
void top_text(const std::string& text, double disp, double scale, double left, double right) {
  const std::string s = printable(text);
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  PLFLT def = 0, ht = 0, sx0 = 0, sx1 = 0, sy0 = 0, sy1 = 0;
  gfx().plschr(0, scale);
  gfx().plgchr(&def, &ht);
  gfx().plgspa(&sx0, &sx1, &sy0, &sy1);
  const double per_char = kCharAdvance * ht / (sx1 - sx0);  // of the subpage width
  const double w = per_char * static_cast<double>(n), room = 1.0 - 2 * left;
  const double mid = (left + right) / 2;
  if (!(per_char > 0.0) || (mid - w / 2 >= left && mid + w / 2 <= 1.0 - left)) {
    gfx().plmtex("t", disp, 0.5, 0.5, pl_text(s).c_str());
    gfx().plschr(0, 1.0);
    return;
  }
  const double f = std::clamp(room / w, kMinShrink, 1.0);
  const auto fits = static_cast<std::size_t>(room / (per_char * f));
  const std::string cut = n <= fits ? s : first_code_points(s, fits > 3 ? fits - 3 : 0) + "...";
  gfx().plschr(0, scale * f);
  // disp counts the current character heights: the baseline stays where it was.
  gfx().plmtex("t", disp / f, 0.0, 0.0, pl_text(cut).c_str());
  gfx().plschr(0, 1.0);
}

/// The axis labels, and the title and subtitle above the plot box (`left` to `right`).
void titles(const std::string& title, const std::string& subtitle, const std::string& xlabel,
            const std::string& ylabel, double left, double right) {
  gfx().plcol0(kBlack);
  gfx().pllab(pl_text(xlabel).c_str(), pl_text(ylabel).c_str(), "");
  top_text(title, subtitle.empty() ? 1.2 : 2.6, 1.0, left, right);
  if (!subtitle.empty()) top_text(subtitle, 1.0, 0.8, left, right);
}

/// The colour bar right of the viewport: the map over the scale's range, labelled.
void draw_colorbar(const HeatScale& scale, const std::string& label) {
  PLFLT w = 0, h = 0;
  const PLINT label_opts[] = {PL_COLORBAR_LABEL_RIGHT};
  const std::string text = pl_text(label);
  const char* labels[] = {text.c_str()};
  const char* axis_opts[] = {scale.log ? "bcvtml" : "bcvtm"};
  const PLFLT ticks[] = {0.0};
  const PLINT sub_ticks[] = {0};
  const PLINT n_values[] = {2};
  const PLFLT range[] = {scale.lo, scale.hi};
  const PLFLT* values[] = {range};
  gfx().plcolorbar(&w, &h, PL_COLORBAR_GRADIENT | PL_COLORBAR_LABEL_RIGHT,
                   PL_POSITION_RIGHT | PL_POSITION_OUTSIDE | PL_POSITION_VIEWPORT, 0.02, 0.0, 0.03,
                   1.0, kWhite, kBlack, 1, 0.0, 0.0, kBlack, 0.0, text.empty() ? 0 : 1, label_opts,
                   labels, 1, axis_opts, ticks, sub_ticks, n_values, values);
}

/// Where corner (x, y) of the cell grid (cell indices) lies in world coordinates.
struct CellGrid {
  double x0, dx, y0, dy;
};
void cell_corner(PLFLT x, PLFLT y, PLFLT* tx, PLFLT* ty, PLPointer data) {
  const auto* g = static_cast<const CellGrid*>(data);
  *tx = g->x0 + x * g->dx;
  *ty = g->y0 + y * g->dy;
}

/// The bottom and top of a panel's viewport in its subpage: stacked panels are
/// shorter, so their axis labels need a larger share.
std::pair<double, double> viewport_y(std::size_t panels) {
  return panels <= 1   ? std::make_pair(0.11, 0.87)
         : panels == 2 ? std::make_pair(0.17, 0.83)
                       : std::make_pair(0.22, 0.80);
}

void draw_heatmap(const HeatmapPanel& p, std::size_t panels) {
  const HeatScale scale = heat_scale(p);
  // Cell k spans its index +- half a step, so ticks at whole indices sit on cell centres.
  const double x0 = p.x.first - p.x.step / 2;
  const double x1 = p.x.first + (static_cast<double>(p.cols) - 0.5) * p.x.step;
  const double ytop = p.y.first - p.y.step / 2;
  const double ybot = p.y.first + (static_cast<double>(p.rows) - 0.5) * p.y.step;
  const auto [vy0, vy1] = viewport_y(panels);
  constexpr double kLeft = 0.10, kRight = 0.84;
  gfx().plvpor(kLeft, kRight, vy0, vy1);
  gfx().plwind(x0, x1, ybot, ytop);

  // Blank (non-finite) cells show the grey under the image.
  gfx().plcol0(kBlank);
  const PLFLT bx[4] = {x0, x1, x1, x0}, by[4] = {ytop, ytop, ybot, ybot};
  gfx().plfill(4, bx, by);

  // PLplot wants data[ix][iy], x along the columns; values are colour positions. The
  // cell corners go through cell_corner: without a transform PLplot 5.15 spaces cells
  // (xmax - xmin) / (nx - 1) apart (later releases / nx), with one they are exact.
  std::vector<PLFLT> cells(p.rows * p.cols);
  std::vector<const PLFLT*> columns(p.cols);
  for (std::size_t c = 0; c < p.cols; ++c) {
    columns[c] = cells.data() + c * p.rows;
    for (std::size_t r = 0; r < p.rows; ++r) {
      const auto t = scale.position(p.z[r * p.cols + c]);
      cells[c * p.rows + r] = t ? *t : std::nan("");
    }
  }
  CellGrid grid{x0, p.x.step, ytop, p.y.step};
  gfx().plimagefr(columns.data(), static_cast<PLINT>(p.cols), static_cast<PLINT>(p.rows), x0, x1,
                  ytop, ybot, 0.0, 1.0, 0.0, 1.0, cell_corner, &grid);

  gfx().plcol0(kBlack);
  gfx().plbox("bcnst", nice_tick(x1 - x0, 8, std::fabs(p.x.step)), 0, "bcnstv",
              nice_tick(ybot - ytop, 8, std::fabs(p.y.step)), 0);
  titles(p.title, p.subtitle, p.xlabel, p.ylabel, kLeft, kRight);

  draw_colorbar(scale, p.zlabel);
}

/// Draws the finite runs of one series (a NaN or a non-positive value on a log axis
/// breaks the line).
void draw_series(const LinePanel& p, const PlotSeries& s) {
  std::vector<PLFLT> x, y;
  auto flush = [&] {
    if (x.size() >= 2) gfx().plline(static_cast<PLINT>(x.size()), x.data(), y.data());
    if (s.markers || x.size() == 1) {
      gfx().plschr(0, 1.8);
      gfx().plstring(static_cast<PLINT>(x.size()), x.data(), y.data(), "•");
      gfx().plschr(0, 1.0);
    }
    x.clear(), y.clear();
  };
  for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    const double yy = plot_detail::chart_y(p, s.y[i]);
    if (std::isfinite(s.x[i]) && std::isfinite(yy)) {
      x.push_back(s.x[i]);
      y.push_back(yy);
    } else {
      flush();
    }
  }
  flush();
}

PLINT line_style(int dash) { return dash == 1 ? 3 : dash == 2 ? 8 : 1; }

// The legend's layout (pllegend's arguments below): the line sample's width in
// viewport units, the gap after it and the entry spacing in character heights, and the
// legend's offset from the plot box's edges.
constexpr double kLegendSample = 0.06, kLegendTextOffset = 0.6, kLegendSpacing = 1.8;
constexpr double kLegendInset = 0.02, kLegendCharScale = 0.85;

/// Where a chart's legend goes: `position` for pllegend and the right end of the plot
/// box (a fraction of the subpage).
struct LegendPlace {
  PLINT position = PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE;
  double y = kLegendInset;  ///< pllegend's y offset
  double right = 0.95;
  /// The fraction of the plot box's height the curves keep below the legend (1: all).
  double data_height = 1.0;
};

/// The inside corner of the plot box whose legend covers the fewest points of the
/// curves and reference lines (top right first among equals, as matplotlib's "best");
/// when every corner would cover some, the legend goes outside on the right, with the
/// plot box narrowed to make room; when it is too wide for that, it stays in the top
/// right corner and the y range grows so that the curves stay below it. The legend's
/// size is estimated from the character height and the longest label (a generous 0.65
/// character heights per code point).
LegendPlace place_legend(const LinePanel& p, const LineRange& r, double left, double right,
                         double bottom, double top) {
  LegendPlace place;
  place.right = right;
  std::size_t entries = 0, longest = 0;
  for (const auto& s : p.series) {
    if (s.label.empty()) continue;
    ++entries;
    std::size_t n = 0;
    for (unsigned char c : pl_text(s.label)) n += (c & 0xC0) != 0x80;
    longest = std::max(longest, n);
  }
  if (entries == 0) return place;
  PLFLT def = 0, ht = 0, sx0 = 0, sx1 = 0, sy0 = 0, sy1 = 0;
  gfx().plgchr(&def, &ht);
  gfx().plgspa(&sx0, &sx1, &sy0, &sy1);
  const double ch = def * kLegendCharScale;  // mm
  const double vw = (sx1 - sx0) * (right - left), vh = (sy1 - sy0) * (top - bottom);
  if (!(ch > 0.0) || !(vw > 0.0) || !(vh > 0.0)) return place;
  // In units of the plot box.
  const double w =
      kLegendSample + (kLegendTextOffset + 1.0 + 0.65 * static_cast<double>(longest)) * ch / vw;
  const double h = (kLegendSpacing * static_cast<double>(entries) + 0.6) * ch / vh;
  struct Corner {
    PLINT position;
    double x0, y0;  // lower-left corner of the legend
  };
  const Corner corners[] = {
      {PL_POSITION_TOP | PL_POSITION_RIGHT, 1 - kLegendInset - w, 1 - kLegendInset - h},
      {PL_POSITION_TOP | PL_POSITION_LEFT, kLegendInset, 1 - kLegendInset - h},
      {PL_POSITION_BOTTOM | PL_POSITION_RIGHT, 1 - kLegendInset - w, kLegendInset},
      {PL_POSITION_BOTTOM | PL_POSITION_LEFT, kLegendInset, kLegendInset}};
  std::size_t hits[4] = {0, 0, 0, 0};
  auto mark = [&](double fx, double fy) {
    for (int k = 0; k < 4; ++k) {
      const Corner& c = corners[k];
      hits[k] += fx >= c.x0 && fx <= c.x0 + w && fy >= c.y0 && fy <= c.y0 + h;
    }
  };
  for (const auto& line : p.hlines) {
    const double y = plot_detail::chart_y(p, line.y);
    if (!std::isfinite(y) || y < r.y0 || y > r.y1) continue;
    for (int k = 0; k <= 200; ++k) mark(k / 200.0, plot_detail::fraction(y, r.y0, r.y1));
  }
  for (const auto& s : p.series) {
    bool have = false;
    double px = 0, py = 0;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      const double y = plot_detail::chart_y(p, s.y[i]);
      if (!std::isfinite(s.x[i]) || !std::isfinite(y)) {
        have = false;
        continue;
      }
      const double fx = plot_detail::fraction(s.x[i], r.x0, r.x1);
      const double fy = plot_detail::fraction(y, r.y0, r.y1);
      // Points along the segment from the previous point, about 1/400 of the box apart.
      const double len = have ? std::hypot(fx - px, fy - py) : 0.0;
      const int steps = have ? static_cast<int>(std::min(4000.0, std::ceil(len * 400))) : 0;
      for (int k = 1; k <= steps; ++k) {
        const double t = static_cast<double>(k) / steps;
        mark(px + t * (fx - px), py + t * (fy - py));
      }
      mark(fx, fy);
      have = true, px = fx, py = fy;
    }
  }
  int best = 0;
  for (int k = 1; k < 4; ++k) {
    if (hits[k] < hits[best]) best = k;
  }
  if (hits[best] == 0) {
    place.position = corners[best].position | PL_POSITION_INSIDE;
    return place;
  }
  // Outside: the legend's width in subpage units, and a gap on each side of it.
  const double outside = w * (right - left) + 2 * kLegendInset;
  if (right - outside - left < 0.45) {  // too wide: the box would be a sliver
    place.data_height = std::max(0.3, 1.0 - 2 * kLegendInset - h);
    return place;
  }
  // Centred on the right side by PLplot; moved up to start level with the box's top.
  place.position = PL_POSITION_RIGHT | PL_POSITION_OUTSIDE;
  place.y = std::max(0.0, (1.0 - h) / 2);
  place.right = right - outside;
  return place;
}

void draw_legend(const LinePanel& p, const LegendPlace& place) {
  std::vector<std::string> text;
  std::vector<PLINT> opts, text_colors, colors, styles, symbol_numbers;
  std::vector<PLFLT> widths, symbol_scales;
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    if (s.label.empty()) continue;
    const int c = kPalette0 + (s.color >= 0 ? s.color : static_cast<int>(i)) % kPaletteSize;
    text.push_back(pl_text(s.label));
    opts.push_back(PL_LEGEND_LINE | (s.markers ? PL_LEGEND_SYMBOL : 0));
    text_colors.push_back(kBlack);
    colors.push_back(c);
    styles.push_back(line_style(s.dash));
    widths.push_back(2.0);
    symbol_scales.push_back(1.0);
    symbol_numbers.push_back(3);
  }
  if (text.empty()) return;
  std::vector<const char*> texts, symbols;
  for (const auto& t : text) texts.push_back(t.c_str()), symbols.push_back("•");
  const auto n = static_cast<PLINT>(text.size());
  PLFLT w = 0, h = 0;
  gfx().plschr(0, kLegendCharScale);
  gfx().pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, place.position,
                 kLegendInset, place.y, kLegendSample, kWhite, kBlack, 1, n, 1, n, opts.data(),
                 kLegendTextOffset, 1.0, kLegendSpacing, 0.0, text_colors.data(), texts.data(),
                 nullptr, nullptr, nullptr, nullptr, colors.data(), styles.data(), widths.data(),
                 colors.data(), symbol_scales.data(), symbol_numbers.data(), symbols.data());
  gfx().plschr(0, 1.0);
}

void draw_lines(const LinePanel& p, std::size_t panels) {
  LineRange r = plot_detail::line_range(p);
  const auto [vy0, vy1] = viewport_y(panels);
  const LegendPlace legend = place_legend(p, r, 0.11, 0.95, vy0, vy1);
  if (legend.data_height < 1.0 && !p.ymax) {  // (a --vmax the user gave stays)
    // Headroom for the legend: the range so far fills the lower data_height of the box.
    const double y1 = r.y0 + 2 * ((r.y1 / 2 - r.y0 / 2) / legend.data_height);
    if (std::isfinite(y1)) r.y1 = y1;
  }
  gfx().plvpor(0.11, legend.right, vy0, vy1);
  gfx().plwind(r.x0, r.x1, r.y0, r.y1);
  const char* yopt = p.log_y ? "bcnstvl" : "bcnstv";
  gfx().plcol0(kGrid);
  gfx().plwidth(1.0);
  gfx().plbox("g", 0, 0, p.log_y ? "gl" : "g", 0, 0);
  gfx().plcol0(kRef);
  gfx().pllsty(2);
  for (const auto& h : p.hlines) {
    const double y = plot_detail::chart_y(p, h.y);
    if (!std::isfinite(y) || y < r.y0 || y > r.y1) continue;
    const PLFLT xs[2] = {r.x0, r.x1}, ys[2] = {y, y};
    gfx().plline(2, xs, ys);
    gfx().plschr(0, 0.75);
    gfx().plptex(r.x0 + 0.01 * (r.x1 - r.x0), y, 1, 0, 0.0, (" " + pl_text(h.label)).c_str());
    gfx().plschr(0, 1.0);
  }
  gfx().plwidth(2.0);
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    gfx().plcol0(kPalette0 + (s.color >= 0 ? s.color : static_cast<int>(i)) % kPaletteSize);
    gfx().pllsty(line_style(s.dash));
    draw_series(p, s);
  }
  gfx().pllsty(1);
  gfx().plwidth(1.0);
  gfx().plcol0(kBlack);
  gfx().plbox("bcnst", 0, 0, yopt, 0, 0);
  titles(p.title, p.subtitle, p.xlabel, p.ylabel, 0.11, legend.right);
  draw_legend(p, legend);
}

void draw_panels(const Figure& fig) {
  for (const auto& panel : fig.panels) {
    gfx().pladv(0);
    if (const auto* h = std::get_if<HeatmapPanel>(&panel)) {
      draw_heatmap(*h, fig.panels.size());
    } else {
      draw_lines(std::get<LinePanel>(panel), fig.panels.size());
    }
  }
}

void draw_figure(const Figure& fig, ColorMap heat, cairo_t* cr) {
  gfx().plsexit(on_plplot_exit);
  gfx().plsabort(on_plplot_abort);
  g_plplot_warning.clear();
  gfx().plsdev("extcairo");
  gfx().plspage(72, 72, fig.width, fig.height, 0, 0);
  gfx().plssub(1, static_cast<PLINT>(fig.panels.size()));
  set_palettes(heat);
  gfx().plinit();
  try {
    gfx().pl_cmd(PLESC_DEVINIT, cr);
    draw_panels(fig);
  } catch (...) {
    // Leave PLplot ready for the next figure of this process.
    try {
      gfx().plend();
    } catch (...) {
    }
    throw;
  }
  gfx().plend();
  if (!g_plplot_warning.empty()) {
    throw std::logic_error(fmt::format("PLplot: {}", g_plplot_warning));
  }
}

}  // namespace

std::string render_image(const Figure& fig, ImageFormat format) {
  plot_detail::check_figure(fig);
  // Several heatmaps in one figure share PLplot's one colour map 1.
  std::optional<ColorMap> heat;
  for (const auto& panel : fig.panels) {
    if (const auto* h = std::get_if<HeatmapPanel>(&panel)) {
      const ColorMap m = heat_scale(*h).map;
      if (heat && *heat != m) {
        throw UsageError("heatmaps of one figure must share a colour map (give --cmap)");
      }
      heat = m;
    }
  }
  std::lock_guard<std::mutex> lock(g_plplot_mutex);
  require_cairo_device();
  std::string bytes;
  SurfacePtr surface = make_surface(format, fig.width, fig.height, &bytes);
  {
    ContextPtr cr(gfx().cairo_create(surface.get()));
    gfx().cairo_set_source_rgb(cr.get(), 1.0, 1.0, 1.0);
    gfx().cairo_paint(cr.get());
    draw_figure(fig, heat.value_or(ColorMap::sequential), cr.get());
  }
  if (format == ImageFormat::png) {
    gfx().cairo_surface_flush(surface.get());
    if (gfx().cairo_surface_write_to_png_stream(surface.get(), append_bytes, &bytes) !=
        CAIRO_STATUS_SUCCESS) {
      throw OutputError("cannot encode the PNG image");
    }
  }
  gfx().cairo_surface_finish(surface.get());
  if (gfx().cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    throw OutputError(
        fmt::format("cannot draw the {} image: {}", image_format_name(format),
                    gfx().cairo_status_to_string(gfx().cairo_surface_status(surface.get()))));
  }
  return bytes;
}

}  // namespace posenc
