// Colour maps, colour scales and chart ranges: the parts of a Figure that the image and
// the terminal renderer share, so that both draw the same colours for the same values.

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "plot/plot_common.hpp"
#include "posenc/error.hpp"
#include "posenc/plot.hpp"

namespace posenc {

namespace {

constexpr Rgb hex(std::uint32_t v) {
  return Rgb{static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>((v >> 8) & 0xff),
             static_cast<std::uint8_t>(v & 0xff)};
}

// ColorBrewer RdBu (11 classes), reversed: blue for negative, red for positive.
const std::vector<Rgb> kDiverging = {hex(0x053061), hex(0x2166ac), hex(0x4393c3), hex(0x92c5de),
                                     hex(0xd1e5f0), hex(0xf7f7f7), hex(0xfddbc7), hex(0xf4a582),
                                     hex(0xd6604d), hex(0xb2182b), hex(0x67001f)};
// viridis at 10 evenly spaced points.
const std::vector<Rgb> kSequential = {hex(0x440154), hex(0x482878), hex(0x3e4989), hex(0x31688e),
                                      hex(0x26828e), hex(0x1f9e89), hex(0x35b779), hex(0x6ece58),
                                      hex(0xb5de2b), hex(0xfde725)};
// matplotlib's tab10: distinct on white and for the common colour-vision deficiencies.
const std::vector<Rgb> kPalette = {hex(0x1f77b4), hex(0xff7f0e), hex(0x2ca02c), hex(0xd62728),
                                   hex(0x9467bd), hex(0x8c564b), hex(0xe377c2), hex(0x7f7f7f),
                                   hex(0xbcbd22), hex(0x17becf)};

/// Whether the range [lo, hi] (log10 units when `log`) is at most a millionth of the
/// values' magnitude. Ends of opposite signs, or one of them 0, differ by their whole
/// magnitude; ends of one sign subtract without overflow.
bool near_constant(double lo, double hi, bool log) {
  constexpr double kFlat = 1e-6;
  if (log) return (hi - lo) * std::log(10.0) <= kFlat;  // hi/lo - 1, to first order
  if (!(lo > 0 && hi > 0) && !(lo < 0 && hi < 0)) return false;
  return hi - lo <= kFlat * std::max(std::fabs(lo), std::fabs(hi));
}

std::uint8_t mix(std::uint8_t a, std::uint8_t b, double f) {
  return static_cast<std::uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
}

}  // namespace

std::string colormap_name(ColorMap m) {
  return m == ColorMap::diverging ? "diverging" : "sequential";
}

const std::vector<Rgb>& colormap_points(ColorMap m) {
  return m == ColorMap::diverging ? kDiverging : kSequential;
}

Rgb colormap_rgb(ColorMap m, double t) {
  const auto& pts = colormap_points(m);
  if (!(t > 0.0)) t = 0.0;  // NaN too
  if (t > 1.0) t = 1.0;
  const double pos = t * static_cast<double>(pts.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(pos), pts.size() - 2);
  const double f = pos - static_cast<double>(i);
  return Rgb{mix(pts[i].r, pts[i + 1].r, f), mix(pts[i].g, pts[i + 1].g, f),
             mix(pts[i].b, pts[i + 1].b, f)};
}

std::vector<Rgb> colormap_table(ColorMap m, int n) {
  std::vector<Rgb> t(static_cast<std::size_t>(std::max(n, 2)));
  for (std::size_t i = 0; i < t.size(); ++i) {
    t[i] = colormap_rgb(m, static_cast<double>(i) / static_cast<double>(t.size() - 1));
  }
  return t;
}

Rgb series_color(int i) {
  return kPalette[static_cast<std::size_t>(std::abs(i)) % kPalette.size()];
}

std::optional<double> HeatScale::position(double v) const {
  if (!std::isfinite(v)) return std::nullopt;
  if (log) {
    if (!(v > 0.0)) return std::nullopt;
    v = std::log10(v);
  }
  const double t = plot_detail::fraction(constant.value_or(v), lo, hi);
  if (std::isnan(t)) return std::nullopt;
  return std::clamp(t, 0.0, 1.0);
}

HeatScale heat_scale(const HeatmapPanel& p) {
  HeatScale s;
  s.log = p.log;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool neg = false, pos = false;
  for (double v : p.z) {
    if (!std::isfinite(v) || (p.log && !(v > 0.0))) continue;
    neg |= v < 0.0;
    pos |= v > 0.0;
    const double u = p.log ? std::log10(v) : v;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  if (!(lo <= hi)) {
    throw InputError(p.log ? "nothing to draw: no positive finite value for a log colour scale"
                           : "nothing to draw: no finite value");
  }
  s.map = p.cmap.value_or(neg && pos ? ColorMap::diverging : ColorMap::sequential);
  if (s.map == ColorMap::diverging && !p.log) {
    const double m = std::max(std::fabs(lo), std::fabs(hi));
    lo = -m;
    hi = m;
  }
  // Values that agree to a millionth (a few float32 roundings: a softmax over equal
  // scores) are drawn as one: stretched over the whole map, their rounding noise (or
  // log10's) would paint a checkerboard of the two end colours.
  if (!p.vmin && !p.vmax && lo != hi && near_constant(lo, hi, p.log)) {
    lo = hi = lo / 2 + hi / 2;
    s.constant = lo;
  }
  const double pad = p.log ? 1.0 : 0.5;
  if (lo == hi) {
    if (lo - pad != lo && hi + pad != hi) {
      lo -= pad, hi += pad;
    } else if (lo > 0.0) {
      lo /= 2;  // too large to widen by 0.5 (and 1.5 * hi may overflow)
    } else {
      hi /= 2;
    }
  }
  auto given = [&](const std::optional<double>& v, const char* name) {
    if (!std::isfinite(*v)) throw UsageError(fmt::format("{}: must be a finite number", name));
    if (!p.log) return *v;
    if (!(*v > 0.0)) {
      throw UsageError(fmt::format("{}: must be positive with a log scale, got {}", name, *v));
    }
    return std::log10(*v);
  };
  if (p.vmin) lo = given(p.vmin, "--vmin");
  if (p.vmax) hi = given(p.vmax, "--vmax");
  if (!(lo < hi)) {
    throw UsageError(fmt::format("--vmin/--vmax: the colour range [{}, {}] is empty",
                                 p.log ? std::pow(10.0, lo) : lo, p.log ? std::pow(10.0, hi) : hi));
  }
  s.lo = lo;
  s.hi = hi;
  return s;
}

std::string image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::png:
      return "png";
    case ImageFormat::svg:
      return "svg";
    case ImageFormat::pdf:
      return "pdf";
  }
  return "?";
}

ImageFormat image_format(const std::string& path, const std::string& format) {
  std::string ext = format;
  if (ext.empty()) {
    const auto slash = path.find_last_of('/');
    const auto dot = path.find_last_of('.');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
      ext = path.substr(dot + 1);
    }
  }
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == "png") return ImageFormat::png;
  if (ext == "svg") return ImageFormat::svg;
  if (ext == "pdf") return ImageFormat::pdf;
  if (!format.empty()) {
    throw UsageError(
        fmt::format("--format: unknown image format '{}' (expected png, svg or pdf)", format));
  }
  throw UsageError(
      fmt::format("{}: unknown image type{} (expected .png, .svg or .pdf, or give --format)", path,
                  ext.empty() ? std::string() : " '." + ext + "'"));
}

namespace plot_detail {

double fraction(double v, double lo, double hi) {
  // In halves: hi - lo overflows for a range as wide as [-1e308, 1e308]. Halving is
  // exact, so for any other range this is (v - lo) / (hi - lo) to the bit; where the
  // halves of subnormal ends meet, the plain difference cannot overflow.
  const double span = hi / 2 - lo / 2;
  return span != 0.0 ? (v / 2 - lo / 2) / span : (v - lo) / (hi - lo);
}

double chart_y(const LinePanel& p, double y) {
  if (!p.log_y) return y;
  return y > 0.0 ? std::log10(y) : std::numeric_limits<double>::quiet_NaN();
}

LineRange line_range(const LinePanel& p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double x0 = kInf, x1 = -kInf, y0 = kInf, y1 = -kInf;
  for (const auto& s : p.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      const double y = chart_y(p, s.y[i]);
      if (!std::isfinite(s.x[i]) || !std::isfinite(y)) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!(x0 <= x1)) {
    throw InputError(p.log_y ? "nothing to draw: no finite positive value for a log axis"
                             : "nothing to draw: no finite value");
  }
  for (const auto& h : p.hlines) {
    const double y = chart_y(p, h.y);
    if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  if (p.ymin) y0 = chart_y(p, *p.ymin);
  if (p.ymax) y1 = chart_y(p, *p.ymax);
  if (!std::isfinite(y0) || !std::isfinite(y1) || !(y0 <= y1)) {
    throw UsageError("--ymin/--ymax: the y range is empty (or not positive on a log axis)");
  }
  if (x0 == x1) {
    x0 -= 0.5, x1 += 0.5;
  } else if (std::any_of(p.series.begin(), p.series.end(),
                         [](const PlotSeries& s) { return s.markers; })) {
    // Room for the markers at both ends.
    const double pad = (x1 / 2 - x0 / 2) * 0.06;
    x0 -= pad, x1 += pad;
  }
  if (y0 == y1) {
    const double pad = y0 == 0.0 ? 0.5 : std::fabs(y0) * 0.05;
    y0 -= pad, y1 += pad;
  } else if (!p.ymin && !p.ymax) {
    // A little air above and below the curves.
    const double pad = (y1 / 2 - y0 / 2) * 0.06;
    y0 -= pad, y1 += pad;
  }
  // Padding data near +-1.8e308 must not make an infinite axis.
  const auto finite = [](double v) {
    const double max = std::numeric_limits<double>::max();
    return std::clamp(v, -max, max);
  };
  return {finite(x0), finite(x1), finite(y0), finite(y1)};
}

std::string number_label(double v) {
  if (v == 0.0) return "0";
  return fmt::format("{:.4g}", v);
}

void check_figure(const Figure& fig) {
  if (fig.width < 64 || fig.width > 16384 || fig.height < 64 || fig.height > 16384) {
    throw UsageError(
        fmt::format("--width/--height: {}x{} is outside 64..16384", fig.width, fig.height));
  }
  if (fig.panels.empty()) throw InputError("nothing to draw: the figure has no panel");
  for (const auto& panel : fig.panels) {
    if (const auto* h = std::get_if<HeatmapPanel>(&panel)) {
      if (h->rows == 0 || h->cols == 0 || h->z.size() != h->rows * h->cols) {
        throw InputError(fmt::format("nothing to draw: a {}x{} heatmap", h->rows, h->cols));
      }
      heat_scale(*h);
    } else {
      line_range(std::get<LinePanel>(panel));
    }
  }
}

}  // namespace plot_detail

}  // namespace posenc
