// HF config reading (posenc/encodings/hf_config.hpp, apply_hf_config) on the published
// configs of tests/data: the values expected are those the files and HF's config classes
// state (query_pre_attn_scalar 168, qk_rope_head_dim 64, ...), not posenc output.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/hf_attention.hpp"

namespace posenc {
namespace {

std::string data(const char* name) { return std::string(POSENC_TEST_DATA_DIR) + "/" + name; }

TEST(HfLayerTypes, FollowTheConfigClassRules) {
  const auto gemma3 = hf_layer_types(data("gemma-3-27b-it.json"));
  ASSERT_EQ(gemma3.size(), 62u);  // sliding_window_pattern 6 by class default
  EXPECT_EQ(gemma3[4], "sliding_attention");
  EXPECT_EQ(gemma3[5], "full_attention");
  const auto llama4 = hf_layer_types(data("llama-4-scout-17b-16e-instruct.json"));
  ASSERT_EQ(llama4.size(), 48u);
  EXPECT_EQ(llama4[2], "chunked_attention");
  EXPECT_EQ(llama4[3], "full_attention");
  const auto qwen = hf_layer_types(data("qwen2.5-7b-instruct.json"));
  EXPECT_EQ(qwen.front(), "full_attention");  // use_sliding_window false
  EXPECT_EQ(qwen.back(), "full_attention");
}

TEST(HfRope, PerLayerTypeAndMla) {
  RopeParams local, global;
  apply_hf_config(data("gemma-3-27b-it.json"), local, {}, "sliding_attention");
  apply_hf_config(data("gemma-3-27b-it.json"), global, {}, "full_attention");
  EXPECT_EQ(local.base, 10000.0);  // rope_local_base_freq, unscaled
  EXPECT_EQ(local.scaling, RopeScaling::none);
  EXPECT_EQ(global.base, 1000000.0);
  EXPECT_EQ(global.scaling, RopeScaling::linear);
  EXPECT_EQ(*global.factor, 8.0);
  RopeParams ds;
  apply_hf_config(data("deepseek-v3.json"), ds);
  EXPECT_EQ(ds.head_dim, 64);
  EXPECT_EQ(ds.rotary_dim, 64);
  EXPECT_TRUE(ds.rotary_last);
  EXPECT_TRUE(ds.rope_interleave);
  RopeParams g4;
  apply_hf_config(data("gemma-4-e4b.json"), g4);
  EXPECT_EQ(g4.head_dim, 512);  // global_head_dim of full layers
  EXPECT_EQ(g4.scaling, RopeScaling::proportional);
  RopeParams qwen3;
  apply_hf_config(data("qwen3-vl-4b-instruct.json"), qwen3);
  EXPECT_EQ(qwen3.mrope_section, (std::vector<int>{24, 20, 20}));
  EXPECT_TRUE(qwen3.mrope_interleaved);
  RopeParams nope;
  EXPECT_THROW(
      apply_hf_config(data("llama-4-scout-17b-16e-instruct.json"), nope, {}, "full_attention"),
      InputError);
}

TEST(HfLayer, AnIndexSelectsTheLayersTypeAndRules) {
  // Llama-4 Scout: 48 layers, every 4th (index 3, 7, ...) full_attention without RoPE.
  const std::string path = data("llama-4-scout-17b-16e-instruct.json");
  RopeParams p;
  apply_hf_config(path, p, {}, HfLayer{"", 2});
  EXPECT_EQ(p.base, 500000.0);
  EXPECT_THROW(apply_hf_config(path, p, {}, HfLayer{"", 3}), InputError);
  const HfAttentionConfig nope = read_hf_attention_config(path, HfLayer{"", 3});
  EXPECT_EQ(nope.layer_type, "full_attention");
  EXPECT_EQ(nope.layer_index, std::optional<std::int64_t>(3));
  EXPECT_FALSE(nope.rope);
  EXPECT_TRUE(nope.temperature_scale.has_value());
  EXPECT_TRUE(read_hf_attention_config(path, HfLayer{"chunked_attention", 46}).rope);
  EXPECT_THROW(read_hf_attention_config(path, HfLayer{"", 48}), InputError);  // 48 layers
  EXPECT_THROW(read_hf_attention_config(path, HfLayer{"full_attention", 2}), InputError);
}

TEST(HfAttention, ScalesWindowsAndTemperature) {
  const auto g3 = read_hf_attention_config(data("gemma-3-27b-it.json"), "sliding_attention");
  EXPECT_DOUBLE_EQ(*g3.scale, 1.0 / std::sqrt(168.0));
  EXPECT_EQ(*g3.sliding_window, 1024);
  EXPECT_EQ(*g3.heads, 32);
  EXPECT_EQ(*g3.kv_heads, 16);
  EXPECT_EQ(*g3.head_dim, 128);
  const auto full = read_hf_attention_config(data("gemma-3-27b-it.json"));
  EXPECT_EQ(full.layer_type, "full_attention");
  EXPECT_FALSE(full.sliding_window);
  const auto ds = read_hf_attention_config(data("deepseek-v3.json"));
  EXPECT_EQ(*ds.head_dim, 192);
  EXPECT_EQ(*ds.v_head_dim, 128);
  const double m = 0.1 * std::log(40.0) + 1.0;  // mscale(40, mscale_all_dim 1)
  EXPECT_NEAR(*ds.scale, m * m / std::sqrt(192.0), 1e-15);
  const auto l4 = read_hf_attention_config(data("llama-4-scout-17b-16e-instruct.json"));
  EXPECT_FALSE(l4.rope);
  EXPECT_EQ(*l4.temperature_scale, 0.1);
  EXPECT_EQ(*l4.temperature_floor, 8192.0);
  const auto oss = read_hf_attention_config(data("gpt-oss-120b.json"), "sliding_attention");
  EXPECT_EQ(*oss.sliding_window, 128);

  AttentionOptions opt;
  opt.scale = 0.5;
  apply_hf_attention(g3, opt, {"scale"});
  EXPECT_EQ(opt.scale, 0.5);  // kept
  EXPECT_EQ(opt.sliding_window, 1024);
  EXPECT_THROW(read_hf_attention_config(data("gemma-3-27b-it.json"), "local"), InputError);
  EXPECT_THROW(
      check_hf_attention_shapes(g3, "cfg", {1, 8, 4, 128}, {1, 16, 4, 128}, nullptr, "bhsd"),
      InputError);
  EXPECT_NO_THROW(
      check_hf_attention_shapes(g3, "cfg", {1, 32, 4, 128}, {1, 16, 4, 128}, nullptr, "bhsd"));
}

}  // namespace
}  // namespace posenc
