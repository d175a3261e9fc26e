// Unit tests of the windowed relative indices (Swin, BEiT, LeViT) and the family
// sinusoids (DETR, fairseq) as library requests.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

#include "posenc/encodings/family_sinusoids.hpp"
#include "posenc/encodings/window_index.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

TEST(WindowIndex, SwinIndexIsAUniqueNumberingOfTheOffsets) {
  // Every (dy, dx) pair of a window gets its own entry, all (2H-1)(2W-1) of them used.
  for (auto [h, w] : {std::pair{3, 5}, std::pair{4, 4}, std::pair{1, 6}}) {
    const WindowIndex win{h, w, false};
    std::map<std::pair<int, int>, std::int64_t> seen;
    for (std::int64_t i = 0; i < win.tokens(); ++i) {
      for (std::int64_t j = 0; j < win.tokens(); ++j) {
        const std::pair<int, int> d{static_cast<int>(i / w - j / w),
                                    static_cast<int>(i % w - j % w)};
        const std::int64_t k = win.index(i, j);
        auto [it, fresh] = seen.emplace(d, k);
        EXPECT_EQ(it->second, k) << h << "x" << w;
        ASSERT_GE(k, 0);
        ASSERT_LT(k, win.entries());
      }
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), win.entries());
  }
}

TEST(WindowIndex, BeitClassTokenTakesTheLastThreeEntries) {
  const WindowIndex win{2, 3, true};
  EXPECT_EQ(win.tokens(), 7);
  EXPECT_EQ(win.entries(), 3 * 5 + 3);
  EXPECT_EQ(win.index(0, 0), 17);
  EXPECT_EQ(win.index(0, 4), 15);
  EXPECT_EQ(win.index(5, 0), 16);
  const WindowIndex plain{2, 3, false};
  EXPECT_EQ(win.index(1, 1), plain.index(0, 0));
}

TEST(WindowIndex, BiasGathersTheLearnedTable) {
  WindowIndexRequest r;
  r.height = 2;
  r.width = 2;
  xt::xarray<double> tab = xt::zeros<double>({9, 2});
  for (std::size_t k = 0; k < 9; ++k) {
    tab(k, 0) = static_cast<double>(k);
    tab(k, 1) = -static_cast<double>(k);
  }
  r.bias_table = tab;
  const auto b = evaluate_table(window_index_table(r));
  ASSERT_EQ(b.shape(0), 2u);
  const WindowIndex win{2, 2, false};
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 4; ++j) {
      const auto k = static_cast<double>(
          win.index(static_cast<std::int64_t>(i), static_cast<std::int64_t>(j)));
      EXPECT_EQ(b(0, i, j), k);
      EXPECT_EQ(b(1, i, j), -k);
    }
  }
  r.bias_table = xt::zeros<double>({8, 2});
  EXPECT_THROW(window_index_table(r), InputError);
  r.height = 0;
  EXPECT_THROW(window_index_table(r), UsageError);
}

TEST(SwinV2Coords, EdgesAreOneAndTheCentreZero) {
  // c = 8 d / (H - 1) reaches 8 at the edge: log2(9) / log2(8); the centre is 0.
  SwinV2CoordsRequest r;
  r.height = 5;
  r.width = 3;
  const auto t = evaluate_table(swinv2_coords_table(r));  // [9, 5, 2]
  ASSERT_EQ(t.shape(0), 9u);
  EXPECT_DOUBLE_EQ(t(0, 0, 0), -std::log2(9.0) / 3.0);
  EXPECT_DOUBLE_EQ(t(8, 4, 1), std::log2(9.0) / 3.0);
  EXPECT_EQ(t(4, 2, 0), 0.0);
  EXPECT_EQ(t(4, 2, 1), 0.0);
  r.pretrained_height = 1;
  r.pretrained_width = 3;
  EXPECT_THROW(swinv2_coords_table(r), UsageError);
}

TEST(LevitIndex, ClosedFormMatchesFirstAppearanceNumbering) {
  // HF numbers offsets in the order its loop meets them; the table says |dy| R + |dx|.
  for (auto [res, stride] : {std::pair{5, 1}, std::pair{7, 2}, std::pair{9, 4}}) {
    LevitIndexRequest r;
    r.resolution = res;
    r.stride = stride;
    const auto t = evaluate_table(levit_index_table(r));
    const std::int64_t out = (res - 1) / stride + 1;
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> order;
    for (std::int64_t q = 0; q < out * out; ++q) {
      for (std::int64_t k = 0; k < res * res; ++k) {
        const std::int64_t dy = std::llabs(q / out * stride - k / res);
        const std::int64_t dx = std::llabs(q % out * stride - k % res);
        auto it = order.emplace(std::pair{dy, dx}, static_cast<std::int64_t>(order.size())).first;
        EXPECT_EQ(t(static_cast<std::size_t>(q), static_cast<std::size_t>(k)),
                  static_cast<double>(it->second));
      }
    }
  }
  LevitIndexRequest bad;
  bad.resolution = 4;
  bad.stride = 0;
  EXPECT_THROW(levit_index_table(bad), UsageError);
}

TEST(DetrSine, OnesMaskNormalisedEndsAtTwoPi) {
  DetrSineRequest r;
  r.height = 3;
  r.width = 4;
  r.embedding_dim = 2;
  const auto t = evaluate_table(detr_sine_table(r));  // [1, 4, 3, 4]
  ASSERT_EQ(t.dimension(), 4u);
  // Channel 0: sin(y_norm), y_norm = y / (3 + 1e-6) * 2 pi at the last row.
  EXPECT_NEAR(t(0, 0, 2, 0), std::sin(3.0 / (3.0 + 1e-6) * 2.0 * M_PI), 1e-15);
  EXPECT_NEAR(t(0, 3, 1, 3), std::cos(4.0 / (4.0 + 1e-6) * 2.0 * M_PI), 1e-15);
  r.normalize = false;
  r.scale = 1.0;
  EXPECT_THROW(detr_sine_table(r), UsageError);
  r.scale.reset();
  r.embedding_dim = 3;
  EXPECT_THROW(detr_sine_table(r), UsageError);
}

TEST(FairseqSinusoidal, RowsUseHalfMinusOneAndZeroThePaddingRow) {
  FairseqSinusoidalRequest r;
  r.positions = 6;
  r.dim = 9;
  r.padding_idx = 1;
  const auto t = evaluate_table(fairseq_sinusoidal_table(r));
  const double step = std::log(10000.0) / 3.0;  // h = 4
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(t(5, static_cast<std::size_t>(i)), std::sin(5.0 * std::exp(-i * step)), 1e-15);
    EXPECT_NEAR(t(5, static_cast<std::size_t>(4 + i)), std::cos(5.0 * std::exp(-i * step)), 1e-15);
  }
  for (std::size_t c = 0; c < 9; ++c) EXPECT_EQ(t(1, c), 0.0);
  for (std::size_t p = 0; p < 6; ++p) EXPECT_EQ(t(p, 8), 0.0);
  // Token ids: positions from padding_idx + 1, padding tokens on the zero row.
  FairseqSinusoidalRequest ids;
  ids.dim = 4;
  ids.padding_idx = 1;
  ids.input_ids = xt::xarray<std::int64_t>{{1, 7, 7}};
  const auto e = evaluate_table(fairseq_sinusoidal_table(ids));
  EXPECT_EQ(e(0, 0, 0), 0.0);
  EXPECT_NEAR(e(0, 1, 0), std::sin(2.0), 1e-15);
  EXPECT_NEAR(e(0, 2, 0), std::sin(3.0), 1e-15);
  ids.padding_idx.reset();
  EXPECT_THROW(fairseq_sinusoidal_table(ids), UsageError);
}

}  // namespace
}  // namespace posenc
