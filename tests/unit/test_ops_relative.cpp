// The library API of `posenc add` and of the Transformer-XL / XLNet / DeBERTa terms:
// add_positions against the sinusoid written out here, properties DeBERTa's log buckets
// must have by their formula, and thread-count independence of the relative terms.
// (The values of the relative terms are checked against HF-derived torch references
// in tests/reference/test_attention_xl_deberta.py.)
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "posenc/encodings/relative_attention.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/add_positions.hpp"
#include "posenc/ops/attention_relative.hpp"
#include "random_tensor.hpp"

namespace posenc {
namespace {

TEST(AddPositions, SinusoidInterleavedScaledWithStart) {
  const std::size_t b = 2, s = 5, d = 8;
  const Tensor x = random_tensor({b, s, d}, 1);
  AbsoluteEncoding e;
  e.scale = 2.0;
  e.start = 3;
  const Tensor y = add_positions(x, "", e, DType::f64);
  for (std::size_t bi = 0; bi < b; ++bi)
    for (std::size_t p = 0; p < s; ++p)
      for (std::size_t c = 0; c < d; ++c) {
        const double w = std::pow(10000.0, -static_cast<double>(c / 2 * 2) / d);
        const double angle = static_cast<double>(p + 3) * w;
        const double pe = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
        const std::size_t i = (bi * s + p) * d + c;
        EXPECT_NEAR(y.get(i), 2.0 * x.get(i) + pe, 1e-13);
      }
}

TEST(AddPositions, LearnedTableTooShortIsInputError) {
  const Tensor x = random_tensor({1, 6, 4}, 2);
  const Tensor table = random_tensor({7, 4}, 3);
  AbsoluteEncoding e;
  e.table = &table;
  e.start = 1;
  EXPECT_NO_THROW(add_positions(x, "", e, DType::f32));
  e.start = 2;
  EXPECT_THROW(add_positions(x, "", e, DType::f32), InputError);
}

TEST(DebertaBuckets, OddMonotonicAndEndpoints) {
  for (const auto& [nb, mp] : {std::pair{256, 512}, {16, 24}, {5, 10}, {2, 3}, {64, 1000}}) {
    const std::int64_t mid = nb / 2;
    std::int64_t prev = deberta_log_bucket(-3000, nb, mp);
    for (std::int64_t r = -3000; r <= 3000; ++r) {
      const std::int64_t v = deberta_log_bucket(r, nb, mp);
      EXPECT_EQ(deberta_log_bucket(-r, nb, mp), -v);
      EXPECT_GE(v, prev);
      if (r >= -mid && r <= mid) {
        EXPECT_EQ(v, r);
      }
      prev = v;
    }
    // At distance max_position - 1 the log ratio is exactly 1: bucket mid + mid - 1.
    EXPECT_EQ(deberta_log_bucket(mp - 1, nb, mp), 2 * mid - 1);
  }
}

TEST(RelativeTerms, ThreadCountDoesNotChangeBits) {
  const Tensor q = random_tensor({2, 3, 17, 8}, 4, DType::f32);
  const Tensor k = random_tensor({2, 3, 29, 8}, 5, DType::f32);
  const Tensor r = random_tensor({29 + 17, 3, 8}, 6, DType::f32);
  const Tensor pk = random_tensor({16, 3, 8}, 7, DType::f32);
  AttentionOptions opt;
  XlAttention xl;
  xl.rel_keys = &r;
  DebertaAttention deb;
  deb.pos_key = &pk;
  deb.position_buckets = 8;
  deb.max_relative_positions = 12;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor x1 = xl_score_bias(q, k, opt, xl), d1 = deberta_score_bias(q, k, opt, deb);
  omp_set_num_threads(2);
  const Tensor x2 = xl_score_bias(q, k, opt, xl), d2 = deberta_score_bias(q, k, opt, deb);
  omp_set_num_threads(saved);
  ASSERT_EQ(x1.shape(), (Shape{2, 3, 17, 29}));
  EXPECT_EQ(std::memcmp(x1.bytes(), x2.bytes(), x1.nbytes()), 0);
  EXPECT_EQ(std::memcmp(d1.bytes(), d2.bytes(), d1.nbytes()), 0);
}

}  // namespace
}  // namespace posenc
