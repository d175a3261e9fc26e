// Figures as text for a terminal. No Debian library draws charts into a terminal with
// 24-bit colour (libcaca dithers images to 16 colours and cannot place labels), so this
// file does the little it takes: a heatmap is a grid of upper-half blocks (two cells
// per character: the foreground colours the upper one, the background the lower one),
// a chart is a braille canvas (2 x 4 dots per character). Without colour both fall
// back to plain ASCII: a character ramp for heatmaps, one character per series for
// charts. Colours come from the same colour maps and scale as the image files.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "plot/plot_common.hpp"
#include "posenc/error.hpp"
#include "posenc/plot.hpp"
#include "posenc/printable.hpp"

namespace posenc {

namespace {

using plot_detail::number_label;

constexpr const char* kReset = "\x1b[0m";
using plot_detail::kBlankColor;
using plot_detail::kRefColor;
// ASCII ramps, from the low end of the colour map to the high end.
constexpr const char* kSequentialRamp = ".,:-=+*#%@";
constexpr const char* kDivergingRamp = "#Xx=-.+*oO@";
constexpr const char* kSeriesChars = "*+ox#@%&=~";

std::string fg(Rgb c) { return fmt::format("\x1b[38;2;{};{};{}m", c.r, c.g, c.b); }
std::string bg(Rgb c) { return fmt::format("\x1b[48;2;{};{};{}m", c.r, c.g, c.b); }

/// Display width of UTF-8 text without escape sequences (one column per code point).
int text_width(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

/// The first `w` code points of `s`.
std::string clip(const std::string& s, int w) {
  int n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == w) return s.substr(0, i);
  }
  return s;
}

/// `s` cut to `w` visible columns, escape sequences kept (they take no room), with the
/// attributes reset when something was cut.
std::string clip_visible(const std::string& s, int w) {
  std::string out;
  int n = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '\x1b') {
      const std::size_t end = s.find('m', i);
      out += s.substr(i, end == std::string::npos ? std::string::npos : end + 1 - i);
      i = end == std::string::npos ? s.size() : end + 1;
      continue;
    }
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == w) {
      return out + (out.find('\x1b') != std::string::npos ? kReset : "");
    }
    out += s[i++];
  }
  return out;
}

std::string pad_left(const std::string& s, int w) {
  return std::string(static_cast<std::size_t>(std::max(0, w - text_width(s))), ' ') + s;
}

/// A label for a whole tensor index (or any other number).
std::string index_label(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<long long>(v));
  return number_label(v);
}

/// A tick label on a linear axis from `lo` to `hi`: a value within a thousandth of the
/// span of 0 (far less than one line or column of the drawing) reads 0, so the middle
/// of a nearly symmetric range says 0, not the 1.997e-05 that its ends leave.
std::string tick_label(double v, double lo, double hi) {
  const double half_span = hi / 2 - lo / 2;  // no overflow near +-1.8e308
  if (half_span > 0.0 && std::isfinite(half_span) && std::fabs(v) < half_span * 2e-3) v = 0.0;
  return number_label(v);
}

std::string title_line(const std::string& title, const std::string& subtitle, int width,
                       bool color) {
  // Titles quote names and attributes from files: escapes stay visible, not obeyed.
  std::string t = clip(printable(title), width);
  std::string sub;
  const int room = width - text_width(t) - 2;
  if (!subtitle.empty() && room > 3) sub = clip(printable(subtitle), room);
  if (!color) return sub.empty() ? t : t + "  " + sub;
  return "\x1b[1m" + t + kReset + (sub.empty() ? "" : "  \x1b[2m" + sub + kReset);
}

/// A line of `width` columns with labels placed at columns (left-aligned at 0,
/// right-aligned at the end, centred elsewhere), skipping those that would overlap.
std::string label_line(int width, const std::vector<std::pair<int, std::string>>& labels) {
  std::string line(static_cast<std::size_t>(std::max(width, 0)), ' ');
  std::vector<bool> used(line.size(), false);
  for (const auto& [col, text] : labels) {
    const int w = text_width(text);
    int at = col == 0 ? 0 : col >= width - 1 ? width - w : col - w / 2;
    if (at < 0 || at + w > width) continue;
    bool clash = false;
    for (int k = std::max(0, at - 1); k < std::min(width, at + w + 1); ++k) clash |= used[k];
    if (clash) continue;
    for (int k = 0; k < w; ++k) line[at + k] = text[k], used[at + k] = true;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

/// Maps output cell k of n to the source entry (n cells over m entries). With room for
/// every entry, each fills n / m cells (n is a multiple of m); without, the cells show
/// n entries evenly spaced from the first to the last, rounded to the nearest: every
/// cell one entry (no averaging), and the end ticks read the first and last index.
std::size_t source_of(int k, int n, std::size_t m) {
  if (static_cast<std::size_t>(n) >= m) {
    return std::min(m - 1, static_cast<std::size_t>(k) * m / static_cast<std::size_t>(n));
  }
  if (n <= 1) return 0;
  const double step = static_cast<double>(m - 1) / (n - 1);
  return std::min(m - 1, static_cast<std::size_t>(std::lround(k * step)));
}

// --- heatmaps ------------------------------------------------------------------------

/// A heatmap sampled onto `ncols` characters and `nrows` pixel rows (two per line in
/// colour): whole cells scaled up to 4x when there is room, sampled when there is not.
struct HeatGrid {
  const HeatmapPanel& p;
  HeatScale scale;
  int ncols = 0, nrows = 0;
  bool color = true;
  mutable bool blank = false;  // a non-finite cell was drawn

  HeatGrid(const HeatmapPanel& panel, int width, int lines, bool colour)
      : p(panel), scale(heat_scale(panel)), color(colour) {
    const auto fit = [](std::size_t n, int room) {
      const int cells = static_cast<int>(n);
      return cells <= room ? cells * std::min(4, room / cells) : room;
    };
    ncols = fit(p.cols, width);
    nrows = fit(p.rows, lines * (color ? 2 : 1));
  }
  std::size_t src_col(int c) const { return source_of(c, ncols, p.cols); }
  std::size_t src_row(int r) const { return source_of(r, nrows, p.rows); }
  std::optional<double> cell(int r, int c) const {
    const auto t = scale.position(p.z[src_row(r) * p.cols + src_col(c)]);
    blank |= !t;
    return t;
  }
  Rgb rgb(int r, int c) const {
    const auto t = cell(r, c);
    return t ? colormap_rgb(scale.map, *t) : kBlankColor;
  }
  const char* ramp() const {
    return scale.map == ColorMap::diverging ? kDivergingRamp : kSequentialRamp;
  }
};

/// The characters of one text line of the heatmap whose upper pixel row is `top`.
std::string heat_row(const HeatGrid& g, int top) {
  std::string s;
  if (!g.color) {
    const int n = static_cast<int>(std::char_traits<char>::length(g.ramp()));
    for (int c = 0; c < g.ncols; ++c) {
      const auto t = g.cell(top, c);
      s += t ? g.ramp()[std::min(n - 1, static_cast<int>(*t * n))] : ' ';
    }
    return s;
  }
  Rgb last_up, last_down;
  for (int c = 0; c < g.ncols; ++c) {
    // Escapes only where the colours change from the previous character.
    const Rgb up = g.rgb(top, c);
    if (c == 0 || !(up == last_up)) s += fg(up);
    if (top + 1 < g.nrows) {
      const Rgb down = g.rgb(top + 1, c);
      if (c == 0 || !(down == last_down)) s += bg(down);
      last_down = down;
    } else if (c == 0) {
      s += "\x1b[49m";  // no lower pixel: the terminal's own background
    }
    last_up = up;
    s += "▀";
  }
  return s + kReset;
}

/// The colour bar (or the ramp) between the ends of the range, and what it means.
std::string heat_legend(const HeatGrid& g) {
  const HeatScale& sc = g.scale;
  auto end_label = [&](double v) { return number_label(sc.log ? std::pow(10.0, v) : v); };
  std::string legend = end_label(sc.lo) + " ";
  if (g.color) {
    constexpr int kBar = 24;
    for (int k = 0; k < kBar; ++k) legend += fg(colormap_rgb(sc.map, k / (kBar - 1.0))) + "█";
    legend += kReset;
  } else {
    legend += std::string("[") + g.ramp() + "]";
  }
  legend += " " + end_label(sc.hi);
  if (!g.p.zlabel.empty()) legend += "  " + printable(g.p.zlabel);
  legend += "  (" + colormap_name(sc.map) + (sc.log ? ", log scale" : "") +
            (sc.constant ? ", near-constant" : "") + ")";
  if (g.blank) legend += g.color ? "  grey: not finite" : "  blank: not finite";
  return legend;
}

std::vector<std::string> heatmap_lines(const HeatmapPanel& p, int width, int lines, bool color) {
  auto row_index = [&](std::size_t r) { return p.y.first + static_cast<double>(r) * p.y.step; };
  auto col_index = [&](std::size_t c) { return p.x.first + static_cast<double>(c) * p.x.step; };
  const int margin = std::max(text_width(index_label(row_index(0))),
                              text_width(index_label(row_index(p.rows - 1)))) +
                     1;
  // The axis names go after the column ticks, or on a line of their own when they do
  // not fit beside them.
  std::string names;
  if (!p.ylabel.empty() || !p.xlabel.empty()) {
    names = "(rows: " + (p.ylabel.empty() ? "-" : printable(p.ylabel)) +
            ", columns: " + (p.xlabel.empty() ? "-" : printable(p.xlabel)) + ")";
  }
  const int names_w = names.empty() ? 0 : text_width(names) + 2;
  const bool names_apart = names_w > 0 && width - margin < 4 + names_w;
  const HeatGrid g(p, std::max(4, width - margin - (names_apart ? 0 : names_w)),
                   std::max(2, lines - 3 - (names_apart ? 1 : 0)), color);
  std::vector<std::string> out{title_line(p.title, p.subtitle, width, color)};
  const int text_rows = color ? (g.nrows + 1) / 2 : g.nrows;
  for (int line = 0; line < text_rows; ++line) {
    const int top = color ? 2 * line : line;
    const bool labelled = line == 0 || line == text_rows - 1 || line == text_rows / 2;
    out.push_back(pad_left(labelled ? index_label(row_index(g.src_row(top))) : "", margin - 1) +
                  " " + heat_row(g, top));
  }
  std::vector<std::pair<int, std::string>> xl{
      {0, index_label(col_index(g.src_col(0)))},
      {g.ncols - 1, index_label(col_index(g.src_col(g.ncols - 1)))},
      {g.ncols / 2, index_label(col_index(g.src_col(g.ncols / 2)))}};
  std::string xline = std::string(static_cast<std::size_t>(margin), ' ') + label_line(g.ncols, xl);
  if (!names.empty() && !names_apart) {
    xline.append(static_cast<std::size_t>(std::max(0, margin + g.ncols - text_width(xline))), ' ');
    xline += "  " + names;
  }
  out.push_back(xline);
  if (names_apart) out.push_back(pad_left(names, width));
  out.push_back(heat_legend(g));
  return out;
}

// --- line charts ---------------------------------------------------------------------

/// Calls `dot(x, y)` for the points of a line between two grid points (Bresenham).
template <class Dot>
void segment(int x0, int y0, int x1, int y1, Dot dot) {
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    dot(x0, y0);
    if (x0 == x1 && y0 == y1) return;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

/// A grid of w x h cells, each with `dx` x `dy` dots (braille: 2 x 4; ASCII: 1 x 1);
/// every cell remembers its dots and the series that drew last in it.
struct DotCanvas {
  int w, h, dx, dy;
  std::vector<unsigned> bits;
  std::vector<int> owner;  // -1 empty, -2 reference line, else series index
  DotCanvas(int w_, int h_, int dx_, int dy_)
      : w(w_),
        h(h_),
        dx(dx_),
        dy(dy_),
        bits(static_cast<std::size_t>(w_ * h_), 0),
        owner(static_cast<std::size_t>(w_ * h_), -1) {}
  void set(int x, int y, int who) {
    if (x < 0 || y < 0 || x >= w * dx || y >= h * dy) return;
    const std::size_t k = static_cast<std::size_t>((y / dy) * w + x / dx);
    if (who == -2 && owner[k] >= 0) return;  // reference lines stay behind the data
    // Braille dot numbering: columns of 1-2-3-7 and 4-5-6-8.
    static constexpr unsigned kDot[2][4] = {{0x01, 0x02, 0x04, 0x40}, {0x08, 0x10, 0x20, 0x80}};
    bits[k] |= dx == 2 ? kDot[x % 2][y % 4] : 1u;
    owner[k] = who;
  }
};

/// The legend of a chart (series, then reference lines), wrapped to `width`.
std::vector<std::string> chart_legend(const LinePanel& p, int width, bool color) {
  std::vector<std::string> legend;
  std::string cur;
  int cur_w = 0;
  auto add_item = [&](const std::string& mark, int mark_w, const std::string& text) {
    const std::string label = printable(text);
    const int w = mark_w + 1 + text_width(label);
    if (cur_w > 0 && cur_w + 3 + w > width) legend.push_back(cur), cur.clear(), cur_w = 0;
    if (cur_w > 0) cur += "   ", cur_w += 3;
    cur += mark + " " + label;
    cur_w += w;
  };
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    if (s.label.empty()) continue;
    if (color) {
      add_item(fg(series_color(s.color >= 0 ? s.color : static_cast<int>(i))) + "━━" + kReset, 2,
               s.label);
    } else {
      add_item(std::string(1, kSeriesChars[i % 10]), 1, s.label);
    }
  }
  for (const auto& h : p.hlines) {
    add_item(color ? fg(kRefColor) + "┈┈" + kReset : std::string("--"), 2, h.label);
  }
  if (cur_w > 0) legend.push_back(cur);
  return legend;
}

/// The reference lines (dotted) and the series of `p` on a w x h canvas.
DotCanvas draw_chart(const LinePanel& p, const plot_detail::LineRange& r, int w, int h,
                     bool color) {
  DotCanvas cv(w, h, color ? 2 : 1, color ? 4 : 1);
  const int xdots = w * cv.dx, ydots = h * cv.dy;
  // Points outside --ymin/--ymax (or the x range) may lie any distance off the canvas:
  // their fraction is kept within a few canvases of it, so a segment toward them leaves
  // in about the right direction and its dots stay countable (and in int range).
  auto dot = [](double fraction, int dots) {
    return static_cast<int>(std::lround(std::clamp(fraction, -4.0, 5.0) * (dots - 1)));
  };
  auto gx = [&](double x) { return dot(plot_detail::fraction(x, r.x0, r.x1), xdots); };
  auto gy = [&](double y) {
    // (y1 - y) / (y1 - y0), negated to lo..hi order
    return dot(plot_detail::fraction(-y, -r.y1, -r.y0), ydots);
  };
  for (const auto& line : p.hlines) {
    const double y = plot_detail::chart_y(p, line.y);
    if (!std::isfinite(y) || y < r.y0 || y > r.y1) continue;
    for (int x = 0; x < xdots; x += 2) cv.set(x, gy(y), -2);
  }
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const PlotSeries& s = p.series[i];
    const int who = static_cast<int>(i);
    bool have = false;
    int px = 0, py = 0;
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      const double y = plot_detail::chart_y(p, s.y[k]);
      if (!std::isfinite(s.x[k]) || !std::isfinite(y)) {
        have = false;
        continue;
      }
      const int x1 = gx(s.x[k]), y1 = gy(y);
      if (have) {
        segment(px, py, x1, y1, [&](int x, int yy) { cv.set(x, yy, who); });
      } else {
        cv.set(x1, y1, who);
      }
      have = true, px = x1, py = y1;
    }
  }
  return cv;
}

/// Text line `line` of the canvas: braille in the series colours, or ASCII.
std::string canvas_row(const LinePanel& p, const DotCanvas& cv, int line, bool color) {
  std::string s;
  int last = -3;
  for (int c = 0; c < cv.w; ++c) {
    const std::size_t k = static_cast<std::size_t>(line * cv.w + c);
    const int who = cv.owner[k];
    if (!color) {
      s += who == -1 ? ' ' : who == -2 ? '-' : kSeriesChars[who % 10];
      continue;
    }
    if (who != last) {
      s += who == -1   ? std::string(kReset)
           : who == -2 ? fg(kRefColor)
                       : fg(series_color(p.series[who].color >= 0 ? p.series[who].color : who));
      last = who;
    }
    if (cv.bits[k] == 0) {
      s += ' ';
    } else {
      const unsigned cp = 0x2800 + cv.bits[k];  // braille block, three UTF-8 bytes
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  if (color) s += kReset;
  while (!color && !s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::vector<std::string> chart_lines(const LinePanel& p, int width, int lines, bool color) {
  const plot_detail::LineRange r = plot_detail::line_range(p);
  std::vector<std::string> out{title_line(p.title, p.subtitle, width, color)};
  const std::vector<std::string> legend = chart_legend(p, width, color);
  // The x axis name on its own line under the ticks, right-aligned.
  const bool xname = !p.xlabel.empty();
  const int plot_h = std::max(3, lines - 2 - static_cast<int>(legend.size()) - (xname ? 1 : 0));
  auto ylab = [&](double v) {
    return p.log_y ? number_label(std::pow(10.0, v)) : tick_label(v, r.y0, r.y1);
  };
  const double ymid = r.y0 / 2 + r.y1 / 2;  // no overflow near +-1.8e308
  const int margin =
      std::max({text_width(ylab(r.y1)), text_width(ylab(r.y0)), text_width(ylab(ymid))}) + 1;
  const int plot_w = std::max(8, width - margin - 1);
  const DotCanvas cv = draw_chart(p, r, plot_w, plot_h, color);
  for (int line = 0; line < plot_h; ++line) {
    const std::string label = line == 0            ? ylab(r.y1)
                              : line == plot_h - 1 ? ylab(r.y0)
                              : line == plot_h / 2 ? ylab(ymid)
                                                   : "";
    out.push_back(pad_left(label, margin - 1) + " " + (color ? "│" : "|") +
                  canvas_row(p, cv, line, color));
  }
  auto xlab = [&](double v) { return tick_label(v, r.x0, r.x1); };
  std::vector<std::pair<int, std::string>> xl{
      {0, xlab(r.x0)}, {plot_w - 1, xlab(r.x1)}, {plot_w / 2, xlab(r.x0 / 2 + r.x1 / 2)}};
  std::string xline =
      std::string(static_cast<std::size_t>(margin + 1), ' ') + label_line(plot_w, xl);
  out.push_back(xline);
  if (xname) out.push_back(pad_left(clip(printable(p.xlabel), width), width));
  out.insert(out.end(), legend.begin(), legend.end());
  return out;
}

}  // namespace

std::string render_terminal(const Figure& fig, const TerminalStyle& style) {
  plot_detail::check_figure(fig);
  const int width = std::max(20, style.columns);
  // One line stays free for the shell prompt after the drawing.
  const int total = std::max(8, style.lines) - 1;
  const int per_panel = std::max(6, total / static_cast<int>(fig.panels.size()));
  std::string text;
  for (const auto& panel : fig.panels) {
    const auto lines =
        std::holds_alternative<HeatmapPanel>(panel)
            ? heatmap_lines(std::get<HeatmapPanel>(panel), width, per_panel, style.color)
            : chart_lines(std::get<LinePanel>(panel), width, per_panel, style.color);
    for (const auto& l : lines) text += clip_visible(l, width) + "\n";
  }
  return text;
}

}  // namespace posenc
