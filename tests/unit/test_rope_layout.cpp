// RoPE layouts (posenc/encodings/rope_layout.hpp): the presets' frequency matrices written
// out from their definitions, the checks, and RopeApplier executing a layout against a
// direct float64 evaluation (the Python references in tests/reference/
// test_rope_layouts.py compare the families with HF's code).

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_layout.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {
namespace {

RopeFreqs freqs(int d, double base = 10000.0) {
  RopeParams p;
  p.head_dim = d;
  p.base = base;
  return compute_rope_freqs(p);
}

TEST(RopeLayout, AxialAndEvenOddMatrices) {
  const RopeFreqs f = freqs(16);  // 8 angles, 4 per axis
  const RopeLayout ax = rope_layout_axial(f);
  const RopeLayout eo = rope_layout_even_odd(f);
  ASSERT_EQ(ax.axes, 2u);
  ASSERT_EQ(ax.freq.size(), 16u);
  for (std::size_t j = 0; j < 4; ++j) {
    // Axis 0 drives angles 0..3, axis 1 angles 4..7.
    EXPECT_EQ(ax.freq[j], f.inv_freq[2 * j]);
    EXPECT_EQ(ax.freq[8 + 4 + j], f.inv_freq[2 * j]);
    EXPECT_EQ(ax.freq[4 + j], 0.0);
    EXPECT_EQ(ax.freq[8 + j], 0.0);
    EXPECT_EQ(eo.freq[j], f.inv_freq[2 * j]);
    EXPECT_EQ(eo.freq[8 + 4 + j], f.inv_freq[2 * j + 1]);
  }
}

TEST(RopeLayout, ChunksAreTheFrequenciesOfTheirWidth) {
  RopeParams p;
  p.head_dim = 64;
  p.rotary_dim = 60;  // V-JEPA2: 3 chunks of 2 * ((64 / 3) / 2) = 20
  const RopeFreqs f = compute_rope_freqs(p);
  const RopeLayout l = rope_layout_chunks(f, 3);
  EXPECT_EQ(l.pairing, RopePairing::tiled);
  const std::vector<double> width20 = default_inv_freq(10000.0, 20);
  for (std::size_t a = 0; a < 3; ++a) {
    for (std::size_t j = 0; j < 30; ++j) {
      const bool mine = j / 10 == a;
      EXPECT_EQ(l.freq[a * 30 + j], mine ? width20[j % 10] : 0.0) << a << " " << j;
    }
  }
  EXPECT_THROW(rope_layout_chunks(freqs(64), 3), UsageError);  // 64 does not split in 3
}

TEST(RopeLayout, ChecksAndScale) {
  const RopeFreqs f = freqs(8);
  RopeLayoutSpec spec;
  spec.preset = RopeLayoutPreset::matrix;
  spec.axes = 2;
  spec.freq = {1, 2, 3};  // needs 2 x 4
  EXPECT_THROW(resolve_rope_layout(spec, f), UsageError);
  spec.freq = {1, 0, 0, NAN, 0, 1, 1, 0};
  EXPECT_THROW(resolve_rope_layout(spec, f), UsageError);
  spec.freq = {1, 0, 0, 0, 0, 1, 1, 0};
  spec.scale = 2;
  const RopeLayout l = resolve_rope_layout(spec, f);
  EXPECT_EQ(l.freq[0], 2.0);
  EXPECT_EQ(l.freq[5], 2.0);
  spec.scale = -1;
  EXPECT_THROW(resolve_rope_layout(spec, f), UsageError);
  EXPECT_THROW(parse_rope_layout_preset("spiral"), UsageError);
  EXPECT_EQ(rope_layout_preset_name(parse_rope_layout_preset("even-odd")), "even-odd");
}

// A [S, D] input through a two-axis matrix layout with real coordinates, each element
// against cos/sin of the summed angle written out here.
TEST(RopeLayout, MatrixLayoutWithRealCoordinates) {
  const int D = 8, S = 5;
  RopeFreqs f = freqs(D);
  RopeApplyOptions opt;
  opt.layout.preset = RopeLayoutPreset::matrix;
  opt.layout.axes = 2;
  opt.layout.freq = {0.5, -1.25, 0, 3, 0.25, 0.75, 2, 0};
  Positions pos;
  pos.coords_shape = {2, S};
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int i = 0; i < 2 * S; ++i) pos.coords.push_back(u(g));
  Tensor x(DType::f64, {static_cast<std::size_t>(S), static_cast<std::size_t>(D)});
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, u(g));
  const Tensor y = apply_rope(x, Axes{"sd"}, f, pos, opt, DType::f64);
  for (int s = 0; s < S; ++s) {
    for (int j = 0; j < D / 2; ++j) {
      const double a = pos.coords[s] * opt.layout.freq[j] +
                       pos.coords[S + s] * opt.layout.freq[D / 2 + j];
      const double x0 = x.get(s * D + j), x1 = x.get(s * D + j + D / 2);
      EXPECT_NEAR(y.get(s * D + j), x0 * std::cos(a) - x1 * std::sin(a), 1e-14);
      EXPECT_NEAR(y.get(s * D + j + D / 2), x1 * std::cos(a) + x0 * std::sin(a), 1e-14);
    }
  }
}

// The tiled pairing: dim l of a chunk of width c uses angle l mod c/2, paired with its
// neighbour; the dims past the chunks pass through.
TEST(RopeLayout, TiledPairing) {
  const int D = 14, S = 4;
  RopeParams p;
  p.head_dim = D;
  p.rotary_dim = 12;
  const RopeFreqs f = compute_rope_freqs(p);
  RopeApplyOptions opt;
  opt.layout.preset = RopeLayoutPreset::chunks;
  opt.layout.axes = 3;
  Positions pos;
  pos.grid.extent = {1, 2, 2};
  Tensor x(DType::f64, {static_cast<std::size_t>(S), static_cast<std::size_t>(D)});
  std::mt19937 g(9);
  std::normal_distribution<double> n(0, 1);
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, n(g));
  const Tensor y = apply_rope(x, Axes{"sd"}, f, pos, opt, DType::f64);
  const std::vector<double> w4 = default_inv_freq(10000.0, 4);  // chunk width 4
  for (int s = 0; s < S; ++s) {
    const double coord[3] = {0.0, static_cast<double>(s / 2), static_cast<double>(s % 2)};
    for (int k = 0; k < 12; ++k) {
      const int chunk = k / 4, l = k % 4;
      const double a = coord[chunk] * w4[static_cast<std::size_t>(l % 2)];
      const double xk = x.get(s * D + k), xp = x.get(s * D + (k ^ 1));
      const double want = l % 2 == 0 ? xk * std::cos(a) - xp * std::sin(a)
                                      : xk * std::cos(a) + xp * std::sin(a);
      EXPECT_NEAR(y.get(s * D + k), want, 1e-14) << s << " " << k;
    }
    for (int k = 12; k < D; ++k) EXPECT_EQ(y.get(s * D + k), x.get(s * D + k));
  }
  RopeApplyOptions inv = opt;
  inv.inverse = true;
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, pos, inv, DType::f64), UsageError);
}

// ERNIE-4.5-VL (sections h, w, t): pair j < h + w on h (even j) or w (odd j), the rest on
// t, each pair with its own frequency; h must equal w.
TEST(RopeLayout, ErnieVlMatrix) {
  const RopeFreqs f = freqs(24);  // 12 angles: h = w = 4, t = 4
  const RopeLayout l = rope_layout_ernie_vl(f, {4, 4, 4});
  ASSERT_EQ(l.axes, 3u);
  ASSERT_EQ(l.freq.size(), 36u);
  EXPECT_EQ(l.pairing, RopePairing::style);
  for (std::size_t j = 0; j < 12; ++j) {
    const std::size_t axis = j >= 8 ? 0 : j % 2 == 0 ? 1 : 2;
    for (std::size_t a = 0; a < 3; ++a) {
      EXPECT_EQ(l.freq[a * 12 + j], a == axis ? f.inv_freq[j] : 0.0) << a << " " << j;
    }
  }
  EXPECT_THROW(rope_layout_ernie_vl(f, {4, 2, 6}), UsageError);   // h != w
  EXPECT_THROW(rope_layout_ernie_vl(f, {4, 4, 2}), UsageError);   // sum != 12
  EXPECT_THROW(rope_layout_ernie_vl(f, {6, 6}), UsageError);      // two sections
  RopeLayoutSpec spec = parse_rope_layout("ernie-vl:4,4,4");
  EXPECT_EQ(spec.preset, RopeLayoutPreset::ernie_vl);
  EXPECT_EQ(resolve_rope_layout(spec, f).freq, l.freq);
  EXPECT_THROW(parse_rope_layout("ernie-vl:4,4"), UsageError);
}

// HunYuan-VL's xdrope: chunks of 2 * s_i of the R rotated dims (neox order) on axis i,
// dim k with inv_freq[k mod R/2]; the split pairing gives every dim its own angle.
TEST(RopeLayout, XdropeSplitPairing) {
  const int D = 16, S = 3;
  const RopeFreqs f = freqs(D);
  const std::vector<int> sec = {2, 3, 1, 2};  // dims 0-3, 4-9, 10-11, 12-15
  const RopeLayout l = rope_layout_xdrope(f, sec);
  ASSERT_EQ(l.axes, 4u);
  ASSERT_EQ(l.freq.size(), 4u * D);
  EXPECT_EQ(l.pairing, RopePairing::split);
  const int axis_of[D] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3};
  for (int k = 0; k < D; ++k) {
    for (int a = 0; a < 4; ++a) {
      EXPECT_EQ(l.freq[static_cast<std::size_t>(a * D + k)],
                a == axis_of[k] ? f.inv_freq[static_cast<std::size_t>(k % (D / 2))] : 0.0);
    }
  }
  EXPECT_THROW(rope_layout_xdrope(f, {8}), UsageError);
  EXPECT_THROW(rope_layout_xdrope(f, {2, 2, 2, 1}), UsageError);
  EXPECT_THROW(parse_rope_layout("xdrope:8"), UsageError);
  EXPECT_THROW(parse_rope_layout("xdrope:1,1,1,1,1,1,1,1,0"), UsageError);

  RopeApplyOptions opt;
  opt.layout = parse_rope_layout("xdrope:2,3,1,2");
  Positions pos;
  pos.ids_shape = {4, S};
  std::mt19937 g(11);
  std::uniform_int_distribution<int> id(0, 300);
  for (int i = 0; i < 4 * S; ++i) pos.ids.push_back(id(g));
  Tensor x(DType::f64, {static_cast<std::size_t>(S), static_cast<std::size_t>(D)});
  std::normal_distribution<double> n(0, 1);
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, n(g));
  const Tensor y = apply_rope(x, Axes{"sd"}, f, pos, opt, DType::f64);
  for (int s = 0; s < S; ++s) {
    for (int k = 0; k < D; ++k) {
      const double a = static_cast<double>(pos.ids[static_cast<std::size_t>(axis_of[k] * S + s)]) *
                       f.inv_freq[static_cast<std::size_t>(k % (D / 2))];
      const bool first = k < D / 2;
      const double xk = x.get(s * D + k), xp = x.get(s * D + (first ? k + D / 2 : k - D / 2));
      const double want = first ? xk * std::cos(a) - xp * std::sin(a)
                                : xk * std::cos(a) + xp * std::sin(a);
      EXPECT_NEAR(y.get(s * D + k), want, 1e-14) << s << " " << k;
    }
  }
  RopeApplyOptions inv = opt;
  inv.inverse = true;
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, pos, inv, DType::f64), UsageError);
}

}  // namespace
}  // namespace posenc
