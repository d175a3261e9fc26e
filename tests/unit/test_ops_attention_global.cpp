// LongT5's global blocks (encodings/longt5_global.hpp) and attention's side keys
// (AttentionOptions::global_k): the block ids of HF's float32 rule by hand, and side
// keys that every query sees against plain attention over K and V with the side keys
// appended (the reference tests compare with HF's own code).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "posenc/encodings/longt5_global.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention.hpp"
#include "random_tensor.hpp"

namespace posenc {
namespace {

struct Blocks {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> seg;
};

Blocks blocks(const std::vector<std::uint8_t>& valid, std::int64_t g) {
  Blocks b;
  b.ids.resize(valid.size());
  b.seg.resize(valid.size() / static_cast<std::size_t>(g));
  longt5_global_block_ids(valid.data(), valid.size(), g, b.ids.data(), b.seg.data());
  return b;
}

TEST(LongT5Global, OrphansPaddingAndFloat32) {
  // 13 tokens in blocks of 5: tokens 10 .. 12 (no full block) join block 1.
  Blocks b = blocks(std::vector<std::uint8_t>(13, 1), 5);
  EXPECT_EQ(b.ids, (std::vector<std::int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.seg, (std::vector<std::uint8_t>{1, 1}));
  // Padding from token 8: block 1 is not full, so tokens 5 .. 7 join block 0, and
  // global block 1 is not a segment of the row.
  std::vector<std::uint8_t> valid(13, 1);
  for (std::size_t i = 8; i < 13; ++i) valid[i] = 0;
  b = blocks(valid, 5);
  EXPECT_EQ(b.ids, (std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1}));
  EXPECT_EQ(b.seg, (std::vector<std::uint8_t>{1, 0}));
  // Fewer tokens than a block: no block at all.
  b = blocks(std::vector<std::uint8_t>(4, 1), 5);
  EXPECT_EQ(b.ids, (std::vector<std::int32_t>(4, -1)));
  // G 25: float32 1/25 summed puts token 425 in block 16 (floor(425 / 25) is 17).
  b = blocks(std::vector<std::uint8_t>(450, 1), 25);
  EXPECT_EQ(b.ids[424], 16);
  EXPECT_EQ(b.ids[425], 16);
  EXPECT_EQ(b.ids[449], 17);
}

// K [b, h, s, d] with x [b, h, n, d] appended along s.
Tensor append_keys(const Tensor& k, const Tensor& x) {
  const Shape& ks = k.shape();
  const std::size_t s = ks[2], n = x.shape()[2], d = ks[3];
  Tensor out(DType::f64, Shape{ks[0], ks[1], s + n, d});
  for (std::size_t bh = 0; bh < ks[0] * ks[1]; ++bh) {
    for (std::size_t j = 0; j < s + n; ++j) {
      for (std::size_t c = 0; c < d; ++c) {
        out.set((bh * (s + n) + j) * d + c,
                j < s ? k.get((bh * s + j) * d + c) : x.get((bh * n + j - s) * d + c));
      }
    }
  }
  return out;
}

TEST(AttentionGlobal, SideKeysSeenByEveryQueryAreAppendedKeys) {
  // 12 tokens, G 4: 3 global blocks, all segments of the row, no bias, no padding.
  Tensor q = random_tensor({2, 3, 12, 8}, 1), k = random_tensor({2, 3, 12, 8}, 2),
         v = random_tensor({2, 3, 12, 5}, 3), kg = random_tensor({2, 3, 3, 8}, 4),
         vg = random_tensor({2, 3, 3, 5}, 5);
  AttentionOptions opt;
  opt.emit = {AttentionEmit::probs, AttentionEmit::output, AttentionEmit::lse};
  const Tensor kk = append_keys(k, kg), vv = append_keys(v, vg);
  AttentionResult plain = attention(q, kk, &vv, opt);
  opt.global_k = &kg;
  opt.global_v = &vg;
  opt.global_block_size = 4;
  EXPECT_EQ(attention_scores_shape(q.shape(), k.shape(), DType::f64, opt),
            (Shape{2, 3, 12, 15}));
  for (const std::size_t key_block : {0, 5}) {  // one key block, or several
    opt.key_block = key_block;
    // Probs materialised (one key block per row), or the online softmax over blocks.
    for (const bool online : {false, true}) {
      if (online) opt.emit = {AttentionEmit::output, AttentionEmit::lse};
      AttentionResult r = attention(q, k, &v, opt);
      const std::pair<const Tensor*, const Tensor*> pairs[] = {
          {&r.output, &plain.output}, {&r.lse, &plain.lse}, {&r.probs, &plain.probs}};
      for (const auto& [got, want] : pairs) {
        if (got->numel() == 0) continue;
        ASSERT_EQ(got->shape(), want->shape());
        for (std::size_t i = 0; i < got->numel(); ++i) {
          EXPECT_NEAR(got->get(i), want->get(i), 1e-13) << i;
        }
      }
    }
    opt.emit = {AttentionEmit::probs, AttentionEmit::output, AttentionEmit::lse};
  }
}

TEST(AttentionGlobal, BadOptions) {
  Tensor q = random_tensor({1, 2, 10, 4}, 1), k = random_tensor({1, 2, 10, 4}, 2),
         v = random_tensor({1, 2, 10, 4}, 3), kg = random_tensor({1, 2, 2, 4}, 4),
         kg3 = random_tensor({1, 2, 3, 4}, 5);
  AttentionOptions opt;
  opt.global_k = &kg;
  opt.global_v = &kg;
  EXPECT_THROW(attention(q, k, &v, opt), UsageError);  // no block size
  opt.global_block_size = 4;
  EXPECT_NO_THROW(attention(q, k, &v, opt));
  opt.global_k = &kg3;
  EXPECT_THROW(attention(q, k, &v, opt), InputError);  // 10 / 4 is 2 blocks
  opt.global_k = &kg;
  opt.softcap = 5;
  EXPECT_THROW(attention(q, k, &v, opt), UsageError);
  opt.softcap = 0;
  opt.arith = Arith::hf;
  EXPECT_THROW(attention(q, k, &v, opt), UsageError);
  opt.arith = Arith::exact;
  opt.global_v = nullptr;
  EXPECT_THROW(attention(q, k, &v, opt), UsageError);  // V without the side values
}

}  // namespace
}  // namespace posenc
