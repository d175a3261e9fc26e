// Unit tests of where RoPE parameters came from (posenc/value_source.hpp): the range
// checks of compute_rope_freqs judge a value merged from a HF config as that file's key
// (InputError) and a value the caller gave as the caller's (UsageError).

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"
#include "posenc/value_source.hpp"

namespace posenc {
namespace {

std::string write_config(const std::string& text) {
  char name[] = "/tmp/posenc-value-source-XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  std::ofstream(name) << text;
  close(fd);
  return name;
}

std::string message_of(const RopeParams& p) {
  try {
    compute_rope_freqs(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ValueSources, FailSaysTheFileAndKeyOrTheCallersName) {
  ValueSources s;
  EXPECT_THROW(s.fail("head_dim", "dim: odd"), UsageError);
  s.set("head_dim", "c.json", "head_dim");
  try {
    s.fail("head_dim", "dim: odd");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "c.json: 'head_dim': odd");
  }
  s.erase("head_dim");
  EXPECT_EQ(s.find("head_dim"), nullptr);
  EXPECT_THROW(s.fail("head_dim", "dim: odd"), UsageError);
}

TEST(ValueSources, ConfigValuesAreInputErrorsGivenValuesUsageErrors) {
  const std::string path =
      write_config(R"({"model_type": "llama", "head_dim": 3, "hidden_size": 12,
                       "num_attention_heads": 4})");
  RopeParams given;
  const RopeParams p = merge_hf_config(given, {}, path);
  EXPECT_THROW(compute_rope_freqs(p), InputError);
  EXPECT_EQ(message_of(p).rfind(path + ": 'head_dim': RoPE rotates pairs", 0), 0u)
      << message_of(p);
  // The caller's head dimension wins over the config's and is judged as the caller's.
  given.head_dim = 5;
  const RopeParams q = merge_hf_config(given, {}, path);
  EXPECT_THROW(compute_rope_freqs(q), UsageError);
  EXPECT_EQ(message_of(q).rfind("dim: ", 0), 0u) << message_of(q);
  std::remove(path.c_str());
}

TEST(ValueSources, AGivenBaseIsTheCallersEvenWithAConfig) {
  const std::string path =
      write_config(R"({"model_type": "llama", "head_dim": 128, "rope_theta": 1e-320})");
  RopeParams given;
  EXPECT_THROW(compute_rope_freqs(merge_hf_config(given, {}, path)), InputError);
  given.base = 1e-320;
  EXPECT_THROW(compute_rope_freqs(merge_hf_config(given, {"base"}, path)), UsageError);
  given.base = 10000.0;
  EXPECT_NO_THROW(compute_rope_freqs(merge_hf_config(given, {"base"}, path)));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace posenc
