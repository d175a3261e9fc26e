// Unit tests of the LayoutLM buckets, complex-order embeddings and OPT's mask positions.

#include <gtest/gtest.h>

#include <cmath>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/complex_order.hpp"
#include "posenc/encodings/layout_bucket.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/add_positions.hpp"

namespace posenc {
namespace {

TEST(LayoutBucket, BucketsAreT5BidirectionalOfOffsets) {
  LayoutBucketRequest r;
  r.position_ids = xt::xarray<std::int64_t>{{0, 3, 500, -700}};
  const xt::xarray<double> t = evaluate_table(layout_bucket_table(r));
  ASSERT_EQ(t.shape(0), 1u);
  const std::int64_t c[] = {0, 3, 500, -700};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(t(0, i, j), t5_bucket(c[j] - c[i], true, 32, 128)) << i << " " << j;
    }
  }
}

TEST(LayoutBucket, XyBiasIsTheSumOfTheAxes) {
  LayoutBucketRequest r;
  r.axis = LayoutAxis::xy;
  r.bbox = xt::xarray<std::int64_t>{{{0, 0, 5, 10}, {300, 1, 400, 900}}};
  r.bias_table = xt::xarray<double>::from_shape({1, 64});
  r.bias_table_y = xt::xarray<double>::from_shape({1, 64});
  for (int k = 0; k < 64; ++k) {
    (*r.bias_table)(0, k) = k;
    (*r.bias_table_y)(0, k) = 1000.0 * k;
  }
  const xt::xarray<double> t = evaluate_table(layout_bucket_table(r));
  // (0, 1): x offset 300, y offset 890 (bottom edges 10 and 900).
  EXPECT_EQ(t(0, 0, 0, 1), t5_bucket(300, true, 64, 256) + 1000.0 * t5_bucket(890, true, 64, 256));
  EXPECT_EQ(t(0, 0, 1, 1), 0.0);
  r.bias_table_y.reset();
  EXPECT_THROW(layout_bucket_table(r), UsageError);
}

TEST(ComplexOrder, RealAndImaginaryParts) {
  ComplexOrderRequest r;
  r.frequency = xt::xarray<double>{0.5, 2.0};
  r.amplitude = xt::xarray<double>{3.0, -1.0};
  r.phase = xt::xarray<double>{0.25, 0.0};
  r.positions = 3;
  r.start = 1;
  const xt::xarray<double> t = evaluate_table(complex_order_table(r));
  for (int p = 0; p < 3; ++p) {
    EXPECT_NEAR(t(0, p, 0), 3.0 * std::cos(0.5 * (p + 1) + 0.25), 1e-15);
    EXPECT_NEAR(t(1, p, 1), -std::sin(2.0 * (p + 1)), 1e-15);
  }
  r.input_ids = xt::xarray<std::int64_t>::from_shape({1, 1});
  (*r.input_ids)(0, 0) = 0;
  EXPECT_THROW(complex_order_table(r), UsageError);  // vectors take positions
}

TEST(AddPositions, OptPositionsFromTheMask) {
  const xt::xarray<std::int64_t> mask{{0, 0, 1, 1, 1}, {1, 1, 1, 0, 1}};
  const xt::xarray<std::int64_t> all = positions_from_mask(mask, 5);
  EXPECT_EQ(all, (xt::xarray<std::int64_t>{{-1, -1, 0, 1, 2}, {0, 1, 2, -1, 3}}));
  const xt::xarray<std::int64_t> last = positions_from_mask(mask, 2);  // past 3
  EXPECT_EQ(last, (xt::xarray<std::int64_t>{{1, 2}, {-1, 3}}));
  EXPECT_THROW(positions_from_mask(mask, 6), InputError);
  EXPECT_THROW(positions_from_mask(xt::xarray<std::int64_t>{{1, 2}}, 2), InputError);
}

}  // namespace
}  // namespace posenc
