// The AVX-512, AVX2 and plain forms of attention's row maximum (src/ops/row_max.hpp)
// against a reference written from the definition: the largest non-NaN score (the first
// of equal ones in lane order, which tells +0 from -0), and whether any score is NaN
// or infinite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/row_max.hpp"

namespace {

using posenc::row_max_detail::row_max_finite_avx2;
using posenc::row_max_detail::row_max_finite_avx512;
using posenc::row_max_detail::row_max_finite_base;

// Lane l (l = j mod 16) keeps its first largest value; lanes are then taken in order,
// then the tail in order, each keeping the first largest.
float reference_max(const std::vector<float>& s, bool& finite) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const std::size_t whole = s.size() / 16 * 16;
  float lanes[16];
  for (auto& l : lanes) l = neg_inf;
  for (std::size_t j = 0; j < whole; ++j) {
    if (s[j] > lanes[j % 16]) lanes[j % 16] = s[j];
  }
  float m = neg_inf;
  for (float l : lanes) m = l > m ? l : m;
  for (std::size_t j = whole; j < s.size(); ++j) m = s[j] > m ? s[j] : m;
  finite = true;
  for (float x : s) finite = finite && std::isfinite(x);
  return m;
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

using Form = float (*)(const float*, std::size_t, bool&);

void check_form(Form f, const char* name) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t n : {0, 1, 15, 16, 17, 31, 64, 100, 1024, 1037}) {
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> s(n);
      for (float& x : s) x = normal(rng);
      if (n > 0) {
        if (kind == 1) s[n / 2] = nan;
        if (kind == 2) s[n - 1] = inf;
        if (kind == 3) s[0] = -inf;
        if (kind == 4) {
          for (std::size_t j = 0; j < n; ++j) s[j] = (j % 3 == 0) ? 0.0f : -0.0f;
        }
        if (kind == 5) {
          for (float& x : s) x = -inf;  // a fully masked row
        }
      }
      bool want_finite = false, got_finite = true;
      const float want = reference_max(s, want_finite);
      const float got = f(s.data(), n, got_finite);
      SCOPED_TRACE(std::string(name) + " n=" + std::to_string(n) + " kind=" + std::to_string(kind));
      EXPECT_EQ(bits(got), bits(want));
      EXPECT_EQ(got_finite, want_finite);
    }
  }
}

TEST(RowMax, PlainFormMatchesDefinition) { check_form(row_max_finite_base, "base"); }

TEST(RowMax, Avx2FormMatchesDefinition) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "SKIP: row max avx2: this CPU lacks avx2";
  check_form(row_max_finite_avx2, "avx2");
}

TEST(RowMax, Avx512FormMatchesDefinition) {
  if (!__builtin_cpu_supports("avx512f")) {
    GTEST_SKIP() << "SKIP: row max avx512: this CPU lacks avx512f";
  }
  check_form(row_max_finite_avx512, "avx512");
}

}  // namespace
