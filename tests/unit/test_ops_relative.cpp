// The library API of `posenc add` and of the Transformer-XL / XLNet / Funnel / DeBERTa terms:
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

// Funnel's _relative_shift_gather by its definition, one head, d = 1, scale 1: score
// (i, j) = q_i r[S (sq - i) + j].
TEST(RelativeTerms, FunnelShiftTwoReadsColumnsOfItsRow) {
  Tensor q(DType::f64, {2, 1}), k(DType::f64, {3, 1}), r(DType::f64, {7, 1});
  for (std::size_t i = 0; i < 2; ++i) q.data<double>()[i] = 1.0 + static_cast<double>(i);
  for (std::size_t j = 0; j < 3; ++j) k.data<double>()[j] = 0.0;
  for (std::size_t c = 0; c < 7; ++c) r.data<double>()[c] = std::ldexp(1.0, static_cast<int>(c));
  AttentionOptions opt;
  opt.scale = 1.0;
  XlAttention xl;
  xl.rel_keys = &r;
  xl.shift = 2;
  const Tensor t = xl_score_bias(q, k, opt, xl);
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      const double want = q.data<double>()[i] * r.data<double>()[2 * (2 - i) + j];
      EXPECT_EQ(t.data<double>()[i * 3 + j], want) << i << "," << j;
    }
  }
  xl.cls_mask = true;  // query 0 and key 0 lose the term
  const Tensor m = xl_score_bias(q, k, opt, xl);
  EXPECT_EQ(m.data<double>()[0 * 3 + 2], 0.0);
  EXPECT_EQ(m.data<double>()[1 * 3 + 0], 0.0);
  EXPECT_EQ(m.data<double>()[1 * 3 + 1], t.data<double>()[1 * 3 + 1]);
}

// Shift 1 is XLNet's rel_shift_bnij, which the rows choose when rlen > k_len.
TEST(RelativeTerms, FunnelShiftOneIsXlnetShift) {
  const Tensor q = random_tensor({2, 3, 5, 8}, 11);
  const Tensor k = random_tensor({2, 3, 9, 8}, 12);
  const Tensor r = random_tensor({9 + 5, 3, 8}, 13);
  AttentionOptions opt;
  XlAttention xl;
  xl.rel_keys = &r;
  const Tensor by_rows = xl_score_bias(q, k, opt, xl);
  xl.shift = 1;
  const Tensor funnel = xl_score_bias(q, k, opt, xl);
  EXPECT_EQ(std::memcmp(by_rows.bytes(), funnel.bytes(), by_rows.nbytes()), 0);
  xl.shift = 6;  // needs rlen >= k_len + 6
  EXPECT_THROW(xl_score_bias(q, k, opt, xl), InputError);
}

// HF relative_pos for L = 8, separate_cls, block 2, shift 2: keys [-1, 1, 3, 5, 7]
// (block 1), queries [-3, 1, 5], stride 2: 10 down to -10.
TEST(FunnelPositions, SeparateClsBlockTwoShiftTwo) {
  FunnelRelativeRequest r;
  r.seq_len = 8;
  r.dim = 4;
  r.block = 2;
  r.shift = 2;
  r.separate_cls = true;
  const FunnelPositions p = funnel_relative_positions(r);
  EXPECT_EQ(p.q_len, 3);
  EXPECT_EQ(p.k_len, 5);
  ASSERT_EQ(p.relative.size(), 11u);
  for (std::size_t c = 0; c < 11; ++c)
    EXPECT_EQ(p.relative[c], 10 - 2 * static_cast<std::int64_t>(c));
  r.block = 0;
  EXPECT_THROW(funnel_relative_positions(r), UsageError);
}

}  // namespace
}  // namespace posenc
