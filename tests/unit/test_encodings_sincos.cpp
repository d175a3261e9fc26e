// The table sin/cos kernel against libm: every position below 2^20 times a few
// frequencies (and some beyond the fast range) must round to a float within one float
// ulp of the float rounding of libm's double result, and agree with it to a few double
// ulps.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "posenc/encodings/rope2d.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

double float_ulps(double got, double ref) {
  float r = static_cast<float>(ref);
  float g = static_cast<float>(got);
  double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
  return std::fabs(static_cast<double>(g) - ref) / ulp;
}

TEST(SinCos, MatchesLibmOverAllPositionsToTwoPow20) {
  const double freqs[] = {1.0,  0.7498942093324559, 0.1, 1.0 / std::pow(10000.0, 2.0 / 128.0),
                          1e-4, 0.31622776601683794};
  const std::size_t n = std::size_t{1} << 20;
  std::vector<double> a(n), s(n), c(n);
  for (double w : freqs) {
    for (std::size_t p = 0; p < n; ++p) a[p] = static_cast<double>(p) * w;
    sincos_array(a.data(), s.data(), c.data(), n);
    double worst = 0, worst_abs = 0;
    for (std::size_t p = 0; p < n; ++p) {
      const double rs = std::sin(a[p]), rc = std::cos(a[p]);
      worst = std::max({worst, float_ulps(s[p], rs), float_ulps(c[p], rc)});
      worst_abs = std::max({worst_abs, std::fabs(s[p] - rs), std::fabs(c[p] - rc)});
    }
    EXPECT_LE(worst, 1.0) << "w = " << w;
    EXPECT_LE(worst_abs, 4e-16) << "w = " << w;
  }
}

TEST(SinCos, LargeAnglesFallBackToExactReduction) {
  std::vector<double> a = {1.4e6, 1.6e6, 1e7, 123456789.123, -2e6, 0.0, -0.5};
  std::vector<double> s(a.size()), c(a.size());
  sincos_array(a.data(), s.data(), c.data(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(s[i], std::sin(a[i]), 4e-16) << a[i];
    EXPECT_NEAR(c[i], std::cos(a[i]), 4e-16) << a[i];
  }
}

TEST(Sinusoidal, RowLayouts) {
  auto w = sinusoidal_freqs(4, 10000.0);
  ASSERT_EQ(w.size(), 2u);
  double row[4];
  sinusoidal_row(2.0, w, SinusoidalLayout::interleaved, row);
  EXPECT_NEAR(row[0], std::sin(2.0), 1e-16);
  EXPECT_NEAR(row[1], std::cos(2.0), 1e-16);
  EXPECT_NEAR(row[2], std::sin(0.02), 1e-17);
  sinusoidal_row(2.0, w, SinusoidalLayout::concat, row);
  EXPECT_NEAR(row[1], std::sin(0.02), 1e-17);
  EXPECT_NEAR(row[2], std::cos(2.0), 1e-16);
  EXPECT_THROW(sinusoidal_freqs(5, 10000.0), UsageError);
}

TEST(Rope2d, GridAngles) {
  auto f = rope2d_freqs(8, 100.0);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_DOUBLE_EQ(f[1], 0.1);
  double a[4];
  rope2d_angles(7, 3, f, false, a);  // x = 1, y = 2
  EXPECT_DOUBLE_EQ(a[0], 1.0);
  EXPECT_DOUBLE_EQ(a[1], 0.1);
  EXPECT_DOUBLE_EQ(a[2], 2.0);
  EXPECT_DOUBLE_EQ(a[3], 0.2);
  EXPECT_THROW(rope2d_freqs(6, 100.0), UsageError);
}

}  // namespace
}  // namespace posenc
