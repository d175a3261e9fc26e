// Unit tests of the framework arithmetic (--arith): what each framework accepts and the
// properties its values must have. Bit equality with the frameworks themselves is
// checked by tests/reference/test_arith_{hf,meta,ggml}.py against their own code.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

RopeParams params(Arith a, int head_dim = 16) {
  RopeParams p;
  p.head_dim = head_dim;
  p.arith = a;
  if (a == Arith::meta) p.style = RopeStyle::gptj;
  return p;
}

// hf and meta need the x86-64 AVX2 kernels torch uses; elsewhere they refuse.
RopeFreqs freqs_or_skip(const RopeParams& p) {
  try {
    return compute_rope_freqs(p);
  } catch (const UsageError& e) {
    if (std::string(e.what()).find("cannot run") != std::string::npos) return RopeFreqs{};
    throw;
  }
}

TEST(Arith, NamesRoundTrip) {
  for (Arith a : {Arith::exact, Arith::hf, Arith::meta, Arith::ggml}) {
    EXPECT_EQ(parse_arith(arith_name(a)), a);
  }
  EXPECT_THROW(parse_arith("torch"), UsageError);
}

TEST(Arith, HfReplacesFrequenciesByFloat32Ones) {
  RopeParams p = params(Arith::hf, 128);
  p.base = 500000.0;
  const RopeFreqs f = freqs_or_skip(p);
  if (!f.framework) GTEST_SKIP() << "no AVX2";
  ASSERT_EQ(f.inv_freq.size(), 64u);
  int off = 0;
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    EXPECT_EQ(f.inv_freq[i], static_cast<double>(static_cast<float>(f.inv_freq[i])));
    // within two float32 steps of the exact frequency (float32 pow, then a reciprocal)
    const double step = std::ldexp(1.0, std::ilogb(f.inv_freq[i]) - 23);
    const double want = 1.0 / std::pow(500000.0, static_cast<double>(2 * i) / 128.0);
    EXPECT_LE(std::fabs(f.inv_freq[i] - want), 2 * step);
    off += f.inv_freq[i] != static_cast<double>(static_cast<float>(want));
  }
  EXPECT_GT(off, 0);  // HF's float32 pow and division are not the rounded exact value
  bool recorded = false;
  for (const Attr& a : f.attrs) {
    if (a.name == "arith") recorded = std::get<std::string>(a.value) == "hf";
  }
  EXPECT_TRUE(recorded);
}

TEST(Arith, RowsNegateSineForTheInverse) {
  for (Arith a : {Arith::hf, Arith::meta, Arith::ggml}) {
    const RopeFreqs f = freqs_or_skip(params(a));
    if (!f.framework) continue;
    std::vector<float> ang(8), c(8), s(8), c2(8), s2(8);
    framework_rope_row(*f.framework, 12345, false, ang.data(), c.data(), s.data());
    framework_rope_row(*f.framework, 12345, true, ang.data(), c2.data(), s2.data());
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(c[j], c2[j]) << arith_name(a);
      EXPECT_EQ(s[j], -s2[j]) << arith_name(a);
    }
    framework_rope_row(*f.framework, 0, false, ang.data(), c.data(), s.data());
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(c[j], 1.0f) << arith_name(a);
      EXPECT_EQ(s[j], 0.0f) << arith_name(a);
    }
  }
}

TEST(Arith, GgmlAdvancesTheAngleByRepeatedMultiplication) {
  const RopeFreqs f = compute_rope_freqs(params(Arith::ggml));
  ASSERT_TRUE(f.framework);
  const float scale = powf(10000.0f, -2.0f / 16.0f);
  std::vector<float> ang(8), c(8), s(8);
  framework_rope_row(*f.framework, 70000, false, ang.data(), c.data(), s.data());
  float theta = 70000.0f;
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(ang[j], theta) << j;
    theta *= scale;
  }
  EXPECT_THROW(framework_rope_row(*f.framework, std::int64_t{1} << 31, false, ang.data(), c.data(),
                                  s.data()),
               InputError);
}

TEST(Arith, EachFrameworkRefusesWhatItDoesNotHave) {
  RopeParams p = params(Arith::meta);
  p.scaling = RopeScaling::yarn;
  p.factor = 4.0;
  p.original_max_pos = 4096;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
  p = params(Arith::meta);
  p.style = RopeStyle::neox;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
  p = params(Arith::ggml);
  p.scaling = RopeScaling::dynamic;
  p.factor = 2.0;
  p.max_pos = 4096;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
  p = params(Arith::ggml);
  p.scaling = RopeScaling::proportional;
  p.partial = 0.5;
  EXPECT_THROW(compute_rope_freqs(p), UsageError);
}

}  // namespace
}  // namespace posenc
