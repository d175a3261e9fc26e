// HF config reading (posenc/encodings/hf_config.hpp, apply_hf_config) on the published
// configs of tests/data: the values expected are those the files and HF's config classes
// state (query_pre_attn_scalar 168, qk_rope_head_dim 64, ...), not posenc output.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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

// A config file with `text` in the test's temporary folder, removed afterwards.
class TempConfig {
 public:
  explicit TempConfig(const std::string& text)
      : path_(::testing::TempDir() + "posenc_hf_" + std::to_string(::getpid()) + ".json") {
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempConfig() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The message of the InputError that applying `text` throws ("" if none).
std::string config_error(const std::string& text, const std::vector<std::string>& keep = {}) {
  TempConfig c(text);
  RopeParams p;
  try {
    apply_hf_config(c.path(), p, keep);
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(c.path() + ": ", 0), 0u) << what;  // names the file first
    return what.substr(c.path().size() + 2);
  }
  return "";
}

TEST(HfConfigFile, NestingAndSizeAreBoundedBeforeParsing) {
  // 60,000 nested objects: a recursive copy of this document overflowed the stack.
  std::string deep;
  for (int i = 0; i < 60000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(60000, '}');
  EXPECT_EQ(config_error(deep), "nested deeper than 256 levels; not a HF config");
  EXPECT_EQ(config_error(std::string(300000, '[') + std::string(300000, ']')),
            "nested deeper than 256 levels; not a HF config");
  // At the limit it is a config (with an unknown key).
  EXPECT_EQ(config_error("{\"head_dim\": 8, \"x\": " + std::string(255, '[') +
                         std::string(255, ']') + "}"),
            "");
  const std::string big = "{\"pad\": \"" + std::string((16 << 20) + 1, 'x') + "\"}";
  EXPECT_EQ(config_error(big), "larger than 16 MiB; a HF config is a few kilobytes");
}

TEST(HfConfigFile, OutOfRangeValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"head_dim": 64, "rope_theta": 0})", "'rope_theta' must be a positive number, got 0"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": 0}})",
       "'factor' must be a positive number, got 0"},
      {R"({"head_dim": 64, "partial_rotary_factor": 0})",
       "'partial_rotary_factor' must be in (0, 1], got 0"},
      {R"({"head_dim": 64, "partial_rotary_factor": 1.5})",
       "'partial_rotary_factor' must be in (0, 1], got 1.5"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": -1}})",
       "'beta_fast' must be a positive number (0 means the default), got -1"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4,
           "attention_factor": 0}})",
       "'attention_factor' must be a positive number, got 0"},
      {R"({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8,
           "low_freq_factor": 8, "high_freq_factor": 4}})",
       "'low_freq_factor' 8 must not exceed 'high_freq_factor' 4"},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, -1, 1, 1]}})",
       "'short_factor' must be a list of positive numbers, got -1"},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "longrope", "long_factor": [1, 1]}})",
       "'long_factor' has 2 values, the rotary dimension 8 needs 4"},
      {R"({"head_dim": 64, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})",
       "'mrope_section' sums to 64 frequency pairs, the rotary dimension 64 has 32"},
  };
  for (const auto& [text, message] : cases) EXPECT_EQ(config_error(text), message) << text;
  // Keys the variant does not read are not checked (HF ignores them too) ...
  EXPECT_EQ(config_error(R"({"head_dim": 64, "rope_scaling": {"factor": 0, "beta_fast": -1}})"),
            "");
  // ... nor are those the caller sets itself.
  EXPECT_EQ(config_error(R"({"head_dim": 64, "rope_theta": 0, "partial_rotary_factor": 2})",
                         {"base", "partial"}),
            "");
  EXPECT_EQ(config_error(R"({"head_dim": 64, "rope_scaling": {"type": "mrope",
                             "mrope_section": [16, 24, 24]}})",
                         {"rotary_dim"}),
            "");
  // Qwen2-VL as published: sections 16, 24, 24 of head_dim 128.
  EXPECT_EQ(config_error(R"({"head_dim": 128, "rope_scaling": {"type": "mrope",
                             "mrope_section": [16, 24, 24]}})"),
            "");
}

}  // namespace
}  // namespace posenc
