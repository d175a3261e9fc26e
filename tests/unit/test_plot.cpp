// Colour maps, colour scales and the terminal renderer (the image renderer is tested
// end to end in tests/cli/test_plot.py, against decoded PNG/SVG/PDF files).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "posenc/error.hpp"
#include "posenc/plot.hpp"

namespace posenc {
namespace {

TEST(ColorMap, EndsMiddleAndInterpolation) {
  EXPECT_EQ(colormap_rgb(ColorMap::diverging, 0.0), (Rgb{0x05, 0x30, 0x61}));
  EXPECT_EQ(colormap_rgb(ColorMap::diverging, 0.5), (Rgb{0xf7, 0xf7, 0xf7}));
  EXPECT_EQ(colormap_rgb(ColorMap::diverging, 1.0), (Rgb{0x67, 0x00, 0x1f}));
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, 0.0), (Rgb{0x44, 0x01, 0x54}));
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, 1.0), (Rgb{0xfd, 0xe7, 0x25}));
  // Half way between the first two viridis points #440154 and #482878, rounded to nearest.
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, 0.5 / 9), (Rgb{70, 21, 102}));
  // Out of range and NaN clamp to the ends.
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, -3), colormap_rgb(ColorMap::sequential, 0));
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, 7), colormap_rgb(ColorMap::sequential, 1));
  EXPECT_EQ(colormap_rgb(ColorMap::sequential, std::nan("")),
            colormap_rgb(ColorMap::sequential, 0));
  const auto table = colormap_table(ColorMap::diverging, 256);
  ASSERT_EQ(table.size(), 256u);
  EXPECT_EQ(table.front(), colormap_rgb(ColorMap::diverging, 0));
  EXPECT_EQ(table.back(), colormap_rgb(ColorMap::diverging, 1));
}

HeatmapPanel panel(std::vector<double> z, std::size_t rows, std::size_t cols) {
  HeatmapPanel p;
  p.rows = rows;
  p.cols = cols;
  p.z = std::move(z);
  return p;
}

TEST(HeatScale, AutoMapAndRange) {
  HeatScale s = heat_scale(panel({-1, 0.5, 3, std::nan("")}, 2, 2));
  EXPECT_EQ(s.map, ColorMap::diverging);
  EXPECT_EQ(s.lo, -3);
  EXPECT_EQ(s.hi, 3);
  EXPECT_DOUBLE_EQ(*s.position(0), 0.5);
  EXPECT_FALSE(s.position(std::nan("")));
  s = heat_scale(panel({0.25, 0.5, 1, 0}, 2, 2));
  EXPECT_EQ(s.map, ColorMap::sequential);
  EXPECT_EQ(s.lo, 0);
  EXPECT_EQ(s.hi, 1);
  EXPECT_DOUBLE_EQ(*s.position(0.25), 0.25);
  EXPECT_DOUBLE_EQ(*s.position(9), 1.0);  // clamped
  // A constant matrix gets a range around its value.
  s = heat_scale(panel({2, 2}, 1, 2));
  EXPECT_EQ(s.lo, 1.5);
  EXPECT_EQ(s.hi, 2.5);
}

TEST(HeatScale, LogAndLimits) {
  HeatmapPanel p = panel({1e-3, 1, 10, -1}, 2, 2);
  p.log = true;
  HeatScale s = heat_scale(p);
  EXPECT_DOUBLE_EQ(s.lo, -3);
  EXPECT_DOUBLE_EQ(s.hi, 1);
  EXPECT_DOUBLE_EQ(*s.position(1.0), 0.75);
  EXPECT_FALSE(s.position(-1));
  p.vmin = 0.0;
  EXPECT_THROW(heat_scale(p), UsageError);
  p = panel({1, 2}, 1, 2);
  p.vmin = 3;
  p.vmax = 2;
  EXPECT_THROW(heat_scale(p), UsageError);
  p = panel({std::nan(""), std::numeric_limits<double>::infinity()}, 1, 2);
  EXPECT_THROW(heat_scale(p), InputError);
}

TEST(HeatScale, RangesAsWideAsDoublesGo) {
  constexpr double kMax = std::numeric_limits<double>::max();
  // (v - lo) / (hi - lo) overflowed: hi - lo is infinite, and the NaN it made for the
  // ends indexed the terminal's ramp out of bounds.
  for (double m : {1e308, kMax}) {
    HeatScale s = heat_scale(panel({-m, 0, m, m / 2}, 2, 2));
    EXPECT_EQ(s.map, ColorMap::diverging);
    EXPECT_EQ(*s.position(-m), 0.0);
    EXPECT_EQ(*s.position(0), 0.5);
    EXPECT_EQ(*s.position(m), 1.0);
    EXPECT_DOUBLE_EQ(*s.position(m / 2), 0.75);
    EXPECT_EQ(*s.position(-kMax), 0.0);
    EXPECT_FALSE(s.position(std::nan("")));
  }
  HeatmapPanel p = panel({-1, 0, 1, 0.5}, 2, 2);
  p.vmin = -1e308;
  p.vmax = 1e308;
  HeatScale s = heat_scale(p);
  EXPECT_EQ(*s.position(1), 0.5);
  EXPECT_DOUBLE_EQ(*s.position(5e307), 0.75);
  // A constant matrix too large to widen by 0.5 still has a range.
  s = heat_scale(panel({kMax, kMax}, 1, 2));
  EXPECT_LT(s.lo, s.hi);
  EXPECT_EQ(*s.position(kMax), 1.0);
  s = heat_scale(panel({-kMax, -kMax}, 1, 2));
  EXPECT_LT(s.lo, s.hi);
  // Subnormal ends: the halves meet, the difference does not overflow.
  const double tiny = std::numeric_limits<double>::denorm_min();
  s = heat_scale(panel({0, tiny}, 1, 2));
  EXPECT_EQ(*s.position(tiny), 1.0);
  EXPECT_EQ(*s.position(0), 0.0);
}

TEST(HeatScale, NearConstantValuesAreOneValue) {
  // Within a millionth of their magnitude: one position, the midpoint, for every value.
  HeatScale s = heat_scale(panel({1.0, 1.0 + 1e-9, 1.0 - 1e-9}, 1, 3));
  ASSERT_TRUE(s.constant.has_value());
  EXPECT_EQ(*s.position(1.0 + 1e-9), *s.position(1.0 - 1e-9));
  s = heat_scale(panel({-3.0, -3.0 * (1 + 5e-7)}, 1, 2));
  EXPECT_TRUE(s.constant.has_value());
  // A spread beyond it, ends of opposite signs, or 0 beside a subnormal keep their range.
  for (const auto& z : {std::vector<double>{1.0, 1.0 + 1e-5}, std::vector<double>{-1e-300, 1e-300},
                        std::vector<double>{0.0, std::numeric_limits<double>::denorm_min()}}) {
    s = heat_scale(panel(z, 1, 2));
    EXPECT_FALSE(s.constant.has_value()) << z[0] << " " << z[1];
    EXPECT_LT(*s.position(z[0]), *s.position(z[1]));
  }
}

TEST(ImageFormat, FromExtensionOrFlag) {
  EXPECT_EQ(image_format("a/b.PNG"), ImageFormat::png);
  EXPECT_EQ(image_format("x.svg"), ImageFormat::svg);
  EXPECT_EQ(image_format("x.pdf"), ImageFormat::pdf);
  EXPECT_EQ(image_format("-", "svg"), ImageFormat::svg);
  EXPECT_THROW(image_format("x.jpg"), UsageError);
  EXPECT_THROW(image_format("dir.png/x"), UsageError);
  EXPECT_THROW(image_format("x.png", "gif"), UsageError);
}

TEST(Terminal, AsciiHeatmapUsesTheRampAndLabels) {
  Figure f;
  HeatmapPanel p = panel({0, 1, 2, 3}, 2, 2);
  p.title = "t";
  p.y.first = 10;
  p.x.first = 4;
  p.x.step = 2;
  f.panels.push_back(p);
  const std::string out = render_terminal(f, {40, 12, false});
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  // Sequential ramp ".,:-=+*#%@": 0 is the first character, 3 the last.
  EXPECT_NE(out.find("\n10 ...."), std::string::npos) << out;
  EXPECT_NE(out.find("@@@@"), std::string::npos) << out;
  EXPECT_NE(out.find("4"), std::string::npos);
  EXPECT_NE(out.find("6"), std::string::npos);
  EXPECT_NE(out.find("0 [.,:-=+*#%@] 3"), std::string::npos) << out;
}

TEST(Terminal, ColourChartUsesBrailleAndPalette) {
  Figure f;
  LinePanel p;
  p.series.push_back({"up", {0, 1, 2}, {0, 1, 2}});
  p.series.push_back({"down", {0, 1, 2}, {2, 1, 0}});
  f.panels.push_back(p);
  const std::string out = render_terminal(f, {50, 16, true});
  EXPECT_NE(out.find("\xe2\xa0"), std::string::npos);  // U+28xx braille
  EXPECT_NE(out.find("\x1b[38;2;31;119;180m"), std::string::npos);
  EXPECT_NE(out.find("\x1b[38;2;255;127;14m"), std::string::npos);
  EXPECT_NE(out.find(" up"), std::string::npos);
  EXPECT_NE(out.find(" down"), std::string::npos);
}

TEST(Terminal, HugeRangesDrawAndTitlesAreEscaped) {
  constexpr double kMax = std::numeric_limits<double>::max();
  HeatmapPanel h = panel({-kMax, 0, kMax, std::nan("")}, 2, 2);
  h.title = "t\x1b[2J";
  h.subtitle = "kind=\x1b]0;x\x07";
  Figure fig;
  fig.panels.push_back(h);
  for (bool color : {false, true}) {
    const std::string out = render_terminal(fig, TerminalStyle{60, 20, color});
    EXPECT_NE(out.find("t\\x1b[2J"), std::string::npos) << out;
    EXPECT_NE(out.find("kind=\\x1b]0;x\\x07"), std::string::npos) << out;
    EXPECT_EQ(out.find("\x1b[2J"), std::string::npos);
  }
  LinePanel l;
  l.series.push_back({"s\x1b[31m", {0, 1, 2, 3}, {-kMax, kMax, 0, -1e308}});
  fig.panels = {l};
  for (bool color : {false, true}) {
    const std::string out = render_terminal(fig, TerminalStyle{60, 20, color});
    EXPECT_NE(out.find("s\\x1b[31m"), std::string::npos) << out;
    EXPECT_EQ(out.find("inf"), std::string::npos) << out;
  }
}

TEST(Terminal, NothingToDrawIsAnInputError) {
  Figure f;
  LinePanel p;
  p.series.push_back({"", {0, 1}, {std::nan(""), std::nan("")}});
  f.panels.push_back(p);
  EXPECT_THROW(render_terminal(f, {}), InputError);
  f.panels.clear();
  EXPECT_THROW(render_terminal(f, {}), InputError);
}

}  // namespace
}  // namespace posenc
