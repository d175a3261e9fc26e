// Unit tests of ALiBi slopes, relative indices and T5 buckets.

#include <gtest/gtest.h>

#include <climits>
#include <cmath>

#include "posenc/encodings/bias.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

TEST(Alibi, PowerOfTwoSlopesAreExactPowers) {
  auto s = alibi_slopes(8);
  ASSERT_EQ(s.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0, -(h + 1)));
}

TEST(Alibi, NonPowerOfTwoTakesOddSlopesOfTheDoubledSet) {
  auto s = alibi_slopes(12);
  ASSERT_EQ(s.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0, -(h + 1)));
  for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(s[8 + k], std::exp2(-0.5 - k));
  EXPECT_THROW(alibi_slopes(0), UsageError);
}

TEST(Alibi, HeadCountsNearTheIntLimitAreRefusedAtOnce) {
  // Doubling an int from 2^30 overflowed and the loop never ended.
  for (int heads : {kMaxAlibiHeads + 1, 1 << 30, (1 << 30) + 5, INT_MAX}) {
    EXPECT_THROW(alibi_slopes(heads), UsageError) << heads;
  }
  // The largest count accepted: n' = 2^20 geometric slopes 2^(-8(h+1)/n').
  const auto s = alibi_slopes(kMaxAlibiHeads);
  ASSERT_EQ(s.size(), static_cast<std::size_t>(kMaxAlibiHeads));
  EXPECT_EQ(s.back(), std::ldexp(1.0, -8));
  EXPECT_EQ(s[(1 << 19) - 1], std::ldexp(1.0, -4));
  // 2^20 - 1: n' = 2^19, the last head takes the odd slope 2^(-4 (2k+1) / 2^19).
  const auto t = alibi_slopes(kMaxAlibiHeads - 1);
  EXPECT_DOUBLE_EQ(t.back(), std::exp2(-4.0 * (2.0 * ((1 << 19) - 2) + 1.0) / (1 << 19)));
}

TEST(Alibi, BiasVariants) {
  EXPECT_EQ(alibi_bias(AlibiVariant::causal, 0.5, 4, 1, 5, 5), -1.5);
  EXPECT_EQ(alibi_bias(AlibiVariant::symmetric, 0.5, 1, 4, 5, 5), -1.5);
  EXPECT_EQ(alibi_bias(AlibiVariant::fairseq, 0.5, 4, 2, 5, 5), 1.0);
  // q_len 2, k_len 5: query 0 sits at key position 3.
  EXPECT_EQ(alibi_bias(AlibiVariant::bottom_right, 1.0, 0, 3, 2, 5), 0.0);
  EXPECT_EQ(alibi_bias(AlibiVariant::bottom_right, 1.0, 0, 0, 2, 5), -3.0);
}

TEST(Relative, ClipsAndShifts) {
  EXPECT_EQ(relative_index(0, 5, 2), 4);
  EXPECT_EQ(relative_index(5, 0, 2), 0);
  EXPECT_EQ(relative_index(3, 4, 2), 3);
  EXPECT_EQ(relative_index(3, 4, 2, true), 1);
}

TEST(Relative, WindowsAsData) {
  // Wav2Vec2-BERT: k - q clamped to [-64, 8], + 64.
  const RelativeWindow w2v{64, 8, false, false};
  EXPECT_EQ(w2v.rows(), 73);
  EXPECT_EQ(w2v.index(0, 0), 64);
  EXPECT_EQ(w2v.index(0, 100), 72);
  EXPECT_EQ(w2v.index(100, 0), 0);
  EXPECT_EQ(w2v.index(10, 5), 59);
  // SpeechT5 with max_length 3: q - k in [-3, 2], + 3.
  const RelativeWindow t5{3, 2, true, false};
  EXPECT_EQ(t5.index(9, 0), 5);
  EXPECT_EQ(t5.index(0, 9), 0);
  EXPECT_EQ(t5.index(4, 3), 4);
  // VITS: no row beyond the window.
  const RelativeWindow vits{4, 4, false, true};
  EXPECT_EQ(vits.index(0, 4), 8);
  EXPECT_EQ(vits.index(0, 5), -1);
  EXPECT_EQ(vits.index(5, 0), -1);
  EXPECT_EQ(vits.index(5, 1), 0);
  // Shaw's symmetric index is the window with L = R = M.
  for (std::int64_t d = -6; d <= 6; ++d) {
    EXPECT_EQ(relative_index(6, 6 + d, 3), (RelativeWindow{3, 3, false, false}.index(6, 6 + d)));
  }
}

TEST(T5, KnownBuckets) {
  // bidirectional 32/128: 16 per side, 0..7 exact, key after query in the upper half.
  EXPECT_EQ(t5_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(t5_bucket(-7, true, 32, 128), 7);
  EXPECT_EQ(t5_bucket(7, true, 32, 128), 23);
  EXPECT_EQ(t5_bucket(-1000, true, 32, 128), 15);
  EXPECT_EQ(t5_bucket(1000, true, 32, 128), 31);
  // causal: future keys share bucket 0.
  EXPECT_EQ(t5_bucket(5, false, 32, 128), 0);
  EXPECT_EQ(t5_bucket(-15, false, 32, 128), 15);
  EXPECT_EQ(t5_bucket(-1000, false, 32, 128), 31);
  EXPECT_THROW(t5_bucket(1, true, 2, 128), UsageError);
}

}  // namespace
}  // namespace posenc
