// M-RoPE position ids of prompt layouts (encodings/rope_ids.hpp): the SPEC parser and
// small layouts worked out by hand from HF's rules. The comparison with HF's own code is
// tests/reference/test_rope_ids.py.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "posenc/encodings/rope_ids.hpp"
#include "posenc/error.hpp"

namespace {

using posenc::PromptLayout;
using posenc::RopeIdsFamily;
using posenc::RopeIdsRules;

std::vector<std::int64_t> row(const posenc::RopeIds& r, int axis) {
  const std::int64_t* p = r.ids.data<std::int64_t>() + axis * r.tokens;
  return {p, p + r.tokens};
}

posenc::RopeIds ids(RopeIdsFamily f, const char* spec, double tps = 0) {
  RopeIdsRules rules;
  rules.family = f;
  rules.tokens_per_second = tps;
  return posenc::rope_ids(posenc::parse_prompt_layout(spec), rules);
}

TEST(RopeIds, ParsesAndPrintsTheSpec) {
  const PromptLayout l =
      posenc::parse_prompt_layout("text:5,image:1x4x6,video:2x4x4@2.5/3,audio:7");
  ASSERT_EQ(l.segments.size(), 4u);
  EXPECT_EQ(l.segments[1].h, 4);
  EXPECT_EQ(l.segments[2].seconds_per_grid, 2.5);
  EXPECT_EQ(l.segments[2].frame_gap, 3);
  EXPECT_EQ(posenc::prompt_layout_text(l), "text:5,image:1x4x6,video:2x4x4@2.5/3,audio:7");
  for (const char* bad :
       {"", "text", "text:", "text:-1", "text:+1", "text:1,", "image:1x2", "image:1x2x3x4",
        "video:1x2x2@", "video:1x2x2@1e3", "video:1x2x2/x", "pixels:3", "text:2147483648"}) {
    EXPECT_THROW(posenc::parse_prompt_layout(bad), posenc::UsageError) << bad;
  }
}

TEST(RopeIds, OmniVideoWithItsAudio) {
  // Start tokens at 1, from q = 2 a 1x2x2 merged video at time 0 (one chunk) and 3 audio
  // tokens (one chunk): video 2,2,2 / 2,2,3 / 2,3,2 / 2,3,3, audio 2, 3, 4; end tokens at
  // the audio chunk's max + 1 = 5.
  RopeIdsRules rules;
  rules.family = RopeIdsFamily::qwen2_5_omni;
  const auto r =
      posenc::rope_ids(posenc::parse_prompt_layout("text:1,video:1x4x4@2+audio:3"), rules);
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 1, 1, 2, 2, 2, 2, 2, 3, 4, 5, 5}));
  EXPECT_EQ(row(r, 2), (std::vector<std::int64_t>{0, 1, 1, 2, 3, 2, 3, 2, 3, 4, 5, 5}));
  EXPECT_EQ(posenc::prompt_layout_text(posenc::parse_prompt_layout("video:1x4x4@2+audio:3")),
            "video:1x4x4@2+audio:3");
}

TEST(RopeIds, Qwen2VlImageThenText) {
  // 3 text tokens, an image of 2x3 merged patches, 2 text tokens from 3 + max(2, 3).
  const auto r = ids(RopeIdsFamily::qwen2_vl, "text:3,image:1x4x6,text:2");
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7}));
  EXPECT_EQ(row(r, 1), (std::vector<std::int64_t>{0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7}));
  EXPECT_EQ(row(r, 2), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.delta, 8 - 11);
}

TEST(RopeIds, VideoTimeAxes) {
  // v5: text after a video continues at p + max(H, W)/m even when time ids went further.
  auto r = ids(RopeIdsFamily::qwen2_vl, "video:4x2x2,text:1");
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 1, 2, 3, 1}));
  EXPECT_EQ(r.delta, 4 - 5);
  // Qwen2.5-VL: tokens_per_second * int(seconds): 2 * int(1.5) = 2; int(0.5) = 0.
  r = ids(RopeIdsFamily::qwen2_5_vl, "video:3x2x2@1.5", 2);
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 2, 4}));
  r = ids(RopeIdsFamily::qwen2_5_vl, "video:3x2x2@0.5", 2);
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_THROW(ids(RopeIdsFamily::qwen2_5_vl, "video:3x2x2@0.5"), posenc::UsageError);
  // Omni: trunc(f32(k) * f32(f32(0.04) * 25)): f32(0.04) * 25 is just below 1 in double
  // (k - 1 after trunc), but rounds to 1 in float32 as torch's product does.
  r = ids(RopeIdsFamily::qwen2_5_omni, "text:1,video:3x2x2@0.04,text:1");
  EXPECT_EQ(row(r, 0), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(RopeIds, RefusesWhatHfCannotLayOut) {
  for (auto [f, spec] : std::vector<std::pair<RopeIdsFamily, const char*>>{
           {RopeIdsFamily::qwen2_vl, "text:1,image:1x4x4,image:1x4x4"},
           {RopeIdsFamily::qwen2_vl, "image:1x3x4"},
           {RopeIdsFamily::qwen2_vl, "text:1,audio:3"},
           {RopeIdsFamily::qwen3_vl, "video:2x4x4"},
           {RopeIdsFamily::qwen2_5_omni, "audio:3,text:1"},
           {RopeIdsFamily::glm4v, "video:1x4x4,text:1"},
           {RopeIdsFamily::qwen2_vl, "image:2147483647x2147483646x2147483646"}}) {
    EXPECT_THROW(ids(f, spec), posenc::UsageError) << spec;
  }
}

}  // namespace

// A request for `family` with option names or member names.
posenc::RopeIdsRequest request(const char* family, bool option_names = true) {
  posenc::RopeIdsRequest q;
  if (family != nullptr) q.family = family;
  q.option_names = option_names;
  return q;
}

// Precedence of resolve_rope_ids_rules: the request, else the config, else HF's defaults;
// and the names its messages use.
TEST(RopeIds, RulesComeFromTheRequestThenTheConfigThenHf) {
  posenc::RopeIdsConfig cfg;
  cfg.model_type = "qwen2_5_vl";
  cfg.spatial_merge_size = 4;
  posenc::RopeIdsRequest req;
  req.hf_config = "config.json";
  RopeIdsRules r = posenc::resolve_rope_ids_rules(req, cfg);
  EXPECT_EQ(r.family, RopeIdsFamily::qwen2_5_vl);
  EXPECT_EQ(r.spatial_merge_size, 4);
  EXPECT_EQ(r.tokens_per_second, 4);  // Qwen2_5_VLVisionConfig's default
  req.spatial_merge_size = 2;
  req.tokens_per_second = 2.5;
  r = posenc::resolve_rope_ids_rules(req, cfg);
  EXPECT_EQ(r.spatial_merge_size, 2);
  EXPECT_EQ(r.tokens_per_second, 2.5);
  // Without a config nothing is made up: a qwen2.5-vl video then needs the rate.
  r = posenc::resolve_rope_ids_rules(request("qwen2.5-vl"), {});
  EXPECT_EQ(r.tokens_per_second, 0);
  EXPECT_EQ(r.position_id_per_seconds, 25);
  EXPECT_EQ(r.seconds_per_chunk, 2);

  auto message = [](const posenc::RopeIdsRequest& q) {
    try {
      posenc::resolve_rope_ids_rules(q, {});
    } catch (const posenc::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  posenc::RopeIdsRequest bad = request("qwen2-vl");
  bad.tokens_per_second = 2.0;
  EXPECT_EQ(message(bad), "--tokens-per-second: only qwen2.5-vl scales video time by it");
  bad.option_names = false;
  EXPECT_EQ(message(bad), "tokens_per_second: only qwen2.5-vl scales video time by it");
  posenc::RopeIdsRequest omni = request("qwen2.5-omni");
  omni.seconds_per_chunk = 0.0;
  EXPECT_EQ(message(omni), "--seconds-per-chunk: must be above 0 and below 2^53");
  EXPECT_EQ(message(request(nullptr, false)),
            "family: required (or give hf_config with a model_type)");
  cfg.model_type = "llama";
  req = request(nullptr);
  req.hf_config = "c.json";
  EXPECT_THROW(posenc::resolve_rope_ids_rules(req, cfg), posenc::InputError);
}

TEST(RopeIds, MediaTokenIdsAndTheirMessages) {
  posenc::RopeIdsConfig cfg;
  cfg.tokens.image = 7;
  cfg.tokens.video = 8;
  posenc::RopeIdsRequest req;
  req.token_ids[1] = 9;
  const auto ids = posenc::resolve_media_token_ids(req, cfg, RopeIdsFamily::qwen2_vl, true);
  EXPECT_EQ(ids.image, 7);
  EXPECT_EQ(ids.video, 9);
  EXPECT_THROW(posenc::resolve_media_token_ids(req, cfg, RopeIdsFamily::glm4v, true),
               posenc::UsageError);
  EXPECT_NO_THROW(posenc::resolve_media_token_ids(req, cfg, RopeIdsFamily::glm4v, false));
  req.token_ids[0] = -1;
  req.option_names = false;
  try {
    posenc::resolve_media_token_ids(req, cfg, RopeIdsFamily::qwen2_vl, false);
    ADD_FAILURE() << "a negative id was taken";
  } catch (const posenc::UsageError& e) {
    EXPECT_STREQ(e.what(), "image_token_id: must not be negative, got -1");
  }
}

// rope_ids names the layout as its parser was told to, and a row of input_ids by its row.
TEST(RopeIds, MessagesNameTheLayoutAsGiven) {
  RopeIdsRules rules;
  rules.family = RopeIdsFamily::qwen2_vl;
  try {
    posenc::rope_ids(posenc::parse_prompt_layout("image:1x3x4", "layout"), rules);
    ADD_FAILURE() << "a grid the merge does not divide was taken";
  } catch (const posenc::UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("layout: segment 1 ", 0), 0u) << e.what();
  }
}
