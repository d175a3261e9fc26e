// Analyses with closed-form answers (the general cases are compared with numpy/torch in
// tests/reference/test_analyze.py).
#include <gtest/gtest.h>

#include <cmath>

#include "posenc/analysis.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

RopeCurve curve(double base, int dim) {
  RopeParams p;
  p.head_dim = dim;
  p.base = base;
  return {"c", compute_rope_freqs(p)};
}

TEST(Decay, AtZeroAndColumns) {
  const AnalysisTable t =
      rope_decay({curve(10000, 16)}, {0, 5}, {DecayQuantity::bound, DecayQuantity::mean_qk});
  ASSERT_EQ(t.data.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"distance", "bound[c]", "mean_qk[c]"}));
  // m = 0: |S_j| = j, so the bound is (n + 1) / 2 with n = 8 pairs; every cosine is 1.
  EXPECT_DOUBLE_EQ(t.data.get(1), 4.5);
  EXPECT_DOUBLE_EQ(t.data.get(2), 1.0);
  // m = 5, one pair of frequency 1: bound |e^{5i}| = 1, mean cos 5.
  RopeFreqs one;
  one.inv_freq = {1.0};
  const AnalysisTable u =
      rope_decay({{"one", one}}, {5}, {DecayQuantity::bound, DecayQuantity::mean_qk});
  EXPECT_NEAR(u.data.get(1), 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(u.data.get(2), std::cos(5.0));
  EXPECT_THROW(rope_decay({curve(10000, 16)}, {-1}, {DecayQuantity::bound}), UsageError);
  EXPECT_THROW(parse_decay_quantities("bound,x"), UsageError);
}

TEST(Wavelengths, TwoPiOverTheta) {
  const AnalysisTable t = rope_wavelengths({curve(10000, 4)}, 100, 400);
  ASSERT_EQ(t.data.shape(), (Shape{2, 4}));
  // Pair 0 has θ = 1: wavelength 2π, 100 / 2π and 400 / 2π turns.
  EXPECT_DOUBLE_EQ(t.data.get(1), 2 * M_PI);
  EXPECT_DOUBLE_EQ(t.data.get(2), 100 / (2 * M_PI));
  EXPECT_DOUBLE_EQ(t.data.get(3), 400 / (2 * M_PI));
  // Pair 1: θ = 10000^(-1/2) = 0.01.
  EXPECT_NEAR(t.data.get(5), 2 * M_PI / 0.01, 1e-9);
  EXPECT_THROW(rope_wavelengths({curve(10000, 4), curve(10000, 8)}, 1, 1), UsageError);
}

TEST(AttentionStats, UniformAndOneHot) {
  // Head 0 uniform over 4 keys, head 1 attends exactly the aligned key.
  Tensor p(DType::f64, Shape{2, 4, 4});
  for (std::size_t i = 0; i < 16; ++i) p.set(i, 0.25);
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 4; ++j) p.set(16 + i * 4 + j, i == j ? 1.0 : 0.0);
  }
  const AnalysisTable t = attention_head_stats(p, "p");
  ASSERT_EQ(t.data.shape(), (Shape{2, 4}));
  EXPECT_NEAR(t.data.get(1), std::log(4.0), 1e-15);
  // Uniform: mean over rows i of (1/4) Σ_j |i - j| = (6 + 4 + 4 + 6) / 16.
  EXPECT_DOUBLE_EQ(t.data.get(2), 20.0 / 16);
  EXPECT_EQ(t.data.get(3), 4);
  EXPECT_EQ(t.data.get(5), 0);
  EXPECT_EQ(t.data.get(6), 0);
  p.set(0, 0.5);  // row sums to 1.25
  EXPECT_THROW(attention_head_stats(p, "p"), InputError);
}

}  // namespace
}  // namespace posenc
