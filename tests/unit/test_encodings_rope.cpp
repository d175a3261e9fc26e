// Unit tests of the RoPE frequency reduction and HF config reading. The Python
// references (tests/reference/test_table_rope.py) carry the bulk of the evidence.

#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

TEST(RopeFreqs, DefaultIsInverseBasePowers) {
  RopeParams p;
  p.head_dim = 8;
  RopeFreqs f = compute_rope_freqs(p);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  EXPECT_EQ(f.rotary_dim, 8);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);
  EXPECT_DOUBLE_EQ(f.inv_freq[1], 0.1);
  EXPECT_DOUBLE_EQ(f.inv_freq[2], 0.01);
  EXPECT_DOUBLE_EQ(f.inv_freq[3], 0.001);
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeFreqs, PartialRotaryTruncatesLikeHf) {
  RopeParams p;
  p.head_dim = 80;
  p.partial = 0.4;  // int(80 * 0.4) = 32
  EXPECT_EQ(compute_rope_freqs(p).rotary_dim, 32);
  p.partial = 0.5;
  p.rotary_dim = 16;  // explicit R wins
  EXPECT_EQ(compute_rope_freqs(p).rotary_dim, 16);
}

TEST(RopeFreqs, RejectsBadDimensions) {
  RopeParams p;
  p.head_dim = 64;
  p.rotary_dim = 31;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
  p.rotary_dim = 66;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
  p.rotary_dim = 0;
  p.head_dim = 0;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
}

TEST(RopeFreqs, ScalingNeedsItsParameters) {
  RopeParams p;
  p.head_dim = 16;
  p.scaling = RopeScaling::linear;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);  // no factor
  p.factor = 4.0;
  RopeFreqs f = compute_rope_freqs(p);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 0.25);
  p.scaling = RopeScaling::llama3;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);  // no L0
  p.scaling = RopeScaling::longrope;
  p.original_max_pos = 8;
  p.short_factor = {1, 2, 3};  // needs R/2 = 8
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
}

TEST(RopeFreqs, YarnAttentionFactor) {
  RopeParams p;
  p.head_dim = 64;
  p.scaling = RopeScaling::yarn;
  p.factor = 4.0;
  p.original_max_pos = 64;
  EXPECT_NEAR(compute_rope_freqs(p).attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  p.mscale = 0.707;
  p.mscale_all_dim = 1.0;
  EXPECT_NEAR(compute_rope_freqs(p).attention_factor,
              (0.1 * 0.707 * std::log(4.0) + 1.0) / (0.1 * std::log(4.0) + 1.0), 1e-15);
  // High frequencies are extrapolated (unchanged), low ones interpolated (divided by s).
  RopeFreqs f = compute_rope_freqs(p);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);
  EXPECT_DOUBLE_EQ(f.inv_freq[31], std::pow(10000.0, -62.0 / 64.0) / 4.0);
}

TEST(RopeStyle, Aliases) {
  EXPECT_EQ(parse_rope_style("half"), RopeStyle::neox);
  EXPECT_EQ(parse_rope_style("interleaved"), RopeStyle::gptj);
  EXPECT_THROW(parse_rope_style("zigzag"), UsageError);
  EXPECT_EQ(parse_rope_scaling("default"), RopeScaling::none);
  EXPECT_EQ(parse_rope_scaling("su"), RopeScaling::longrope);
}

TEST(HfConfig, ReadsLlama3AndKeepsExplicitFields) {
  std::string path =
      ::testing::TempDir() + "posenc_cfg_test_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path);
    f << R"({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
            "max_position_embeddings": 131072,
            "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  }
  RopeParams p;
  p.factor = 2.0;
  apply_hf_config(path, p, {"factor"});
  EXPECT_EQ(p.head_dim, 128);
  EXPECT_EQ(p.base, 500000.0);
  EXPECT_EQ(p.scaling, RopeScaling::llama3);
  EXPECT_EQ(*p.original_max_pos, 8192);
  EXPECT_EQ(*p.max_pos, 131072);
  EXPECT_EQ(*p.factor, 2.0);  // kept
  std::remove(path.c_str());
  EXPECT_THROW(apply_hf_config(path, p), InputError);  // missing file
}

}  // namespace
}  // namespace posenc
