// Fuzzes what `plot` and `analyze --plot` draw in the terminal from data they did not
// make: the input builds a figure (the first bytes pick heatmaps or line charts, their
// sizes, the colour-scale and axis options and the terminal size; titles and labels are
// raw bytes; values are raw doubles, so NaN, infinities, subnormals and +-1e308 all
// occur). Contract: heat_scale and render_terminal throw only InputError or UsageError;
// a scale's positions of finite values lie in [0, 1]; the drawing carries no control
// byte from the input (only newlines and the renderer's own colour escapes).

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "posenc/error.hpp"
#include "posenc/plot.hpp"

namespace {

using posenc::fuzz::expect;

using posenc::fuzz::Bytes;

// A value to draw: often ordinary, sometimes extreme.
double value(Bytes& b) {
  switch (b.byte() % 4) {
    case 0:
      return static_cast<double>(static_cast<std::int8_t>(b.byte()));
    case 1:
      return std::ldexp(static_cast<double>(static_cast<std::int8_t>(b.byte())), 1020);
    default:
      return b.real();
  }
}

std::string text(Bytes& b) {
  std::string s;
  for (std::size_t len = b.byte() % 24; len > 0 && b.n > 0; --len) {
    s += static_cast<char>(b.byte());
  }
  return s;
}

posenc::HeatmapPanel heatmap(Bytes& b) {
  posenc::HeatmapPanel p;
  p.title = text(b);
  p.subtitle = text(b);
  p.rows = 1 + b.byte() % 24;
  p.cols = 1 + b.byte() % 24;
  for (std::size_t i = 0; i < p.rows * p.cols; ++i) p.z.push_back(value(b));
  p.x = {value(b), value(b)};
  p.y = {static_cast<double>(b.byte()), static_cast<double>(static_cast<std::int8_t>(b.byte()))};
  const std::uint8_t opt = b.byte();
  if (opt & 1) p.vmin = value(b);
  if (opt & 2) p.vmax = value(b);
  if (opt & 4) p.cmap = opt & 8 ? posenc::ColorMap::diverging : posenc::ColorMap::sequential;
  p.log = opt & 16;
  return p;
}

posenc::LinePanel chart(Bytes& b) {
  posenc::LinePanel p;
  p.title = text(b);
  for (int s = 1 + b.byte() % 3; s > 0; --s) {
    posenc::PlotSeries ser;
    ser.label = text(b);
    for (std::size_t i = 0, len = b.byte() % 40; i < len; ++i) {
      ser.x.push_back(b.byte() & 1 ? value(b) : static_cast<double>(i));
      ser.y.push_back(value(b));
    }
    ser.markers = b.byte() & 1;
    p.series.push_back(ser);
  }
  const std::uint8_t opt = b.byte();
  if (opt & 1) p.ymin = value(b);
  if (opt & 2) p.ymax = value(b);
  if (opt & 4) p.hlines.push_back({value(b), text(b)});
  p.log_y = opt & 8;
  return p;
}

void check_scale(const posenc::HeatmapPanel& p) {
  posenc::HeatScale s;
  try {
    s = posenc::heat_scale(p);
  } catch (const posenc::InputError&) {
    return;
  } catch (const posenc::UsageError&) {
    return;
  }
  expect(std::isfinite(s.lo) && std::isfinite(s.hi) && s.lo < s.hi, "scale range not finite");
  for (double v : p.z) {
    const auto t = s.position(v);
    if (t) expect(*t >= 0 && *t <= 1, "a position outside [0, 1]");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes b{data, size};
  posenc::Figure fig;
  for (int panels = 1 + b.byte() % 2; panels > 0; --panels) {
    if (b.byte() & 1) {
      posenc::HeatmapPanel h = heatmap(b);
      check_scale(h);
      fig.panels.emplace_back(std::move(h));
    } else {
      fig.panels.emplace_back(chart(b));
    }
  }
  posenc::TerminalStyle style;
  style.columns = 20 + b.byte() % 100;
  style.lines = 8 + b.byte() % 40;
  style.color = b.byte() & 1;
  std::string out;
  try {
    out = posenc::render_terminal(fig, style);
  } catch (const posenc::InputError&) {
    return 0;
  } catch (const posenc::UsageError&) {
    return 0;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c == '\n') continue;
    if (c == 0x1b) {  // the renderer's own SGR colour: ESC [ digits ; ... m
      expect(style.color && i + 1 < out.size() && out[i + 1] == '[', "a bare escape byte");
      std::size_t j = i + 2;
      while (j < out.size() && (std::isdigit(static_cast<unsigned char>(out[j])) || out[j] == ';')) ++j;
      expect(j < out.size() && out[j] == 'm', "an escape that is not a colour");
      i = j;
      continue;
    }
    expect(c >= 0x20 && c != 0x7f, "a control byte in the drawing");
  }
  return 0;
}
