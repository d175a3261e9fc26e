#pragma once
// The largest score of a float row and whether every score is finite, in one pass, in
// an AVX-512, an AVX2 and a plain form that give the same result. Internal to the
// library (attention.cpp); tests/unit/test_row_max.cpp checks each form the CPU runs.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace posenc::row_max_detail {

// Largest of s[0, n) and whether every one is finite (on the bits), in one pass: 16
// lanes (lane l takes s[j] for j = l mod 16) each keeping x > acc ? x : acc (so NaNs
// are passed over and of equal values the earlier stays), reduced in lane order, then
// the last n mod 16 in order; finite when the largest exponent field is not all ones.
// GCC leaves this loop scalar, so the AVX-512 and AVX2 forms are written out, with
// vmaxps(x, acc)'s rule (acc when unordered or equal) being that comparison.
inline float row_max_finite_tail(const float* acc, std::uint32_t ex, const float* s, std::size_t j,
                                 std::size_t n, bool& finite) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t l = 0; l < 16; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) {
    m = s[j] > m ? s[j] : m;
    ex = std::max(ex, __builtin_bit_cast(std::uint32_t, s[j]) & 0x7f800000u);
  }
  finite = ex != 0x7f800000u;
  return m;
}

// GCC 12 warns of the undefined pass-through operand inside _mm512_max_ps (a known false
// positive of its AVX-512 headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline float row_max_finite_avx512(const float* s, std::size_t n,
                                                                      bool& finite) {
  __m512 acc = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512i ex = _mm512_setzero_si512();
  const __m512i field = _mm512_set1_epi32(0x7f800000);
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(s + j);
    acc = _mm512_max_ps(x, acc);
    ex = _mm512_max_epu32(ex, _mm512_and_si512(_mm512_castps_si512(x), field));
  }
  alignas(64) float lanes[16];
  alignas(64) std::uint32_t e[16];
  _mm512_store_ps(lanes, acc);
  _mm512_store_si512(e, ex);
  return row_max_finite_tail(lanes, *std::max_element(e, e + 16), s, j, n, finite);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2"))) inline float row_max_finite_avx2(const float* s, std::size_t n,
                                                                 bool& finite) {
  __m256 lo = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), hi = lo;
  __m256i ex = _mm256_setzero_si256();
  const __m256i field = _mm256_set1_epi32(0x7f800000);
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 a = _mm256_loadu_ps(s + j), b = _mm256_loadu_ps(s + j + 8);
    lo = _mm256_max_ps(a, lo);
    hi = _mm256_max_ps(b, hi);
    ex = _mm256_max_epu32(ex, _mm256_and_si256(_mm256_castps_si256(a), field));
    ex = _mm256_max_epu32(ex, _mm256_and_si256(_mm256_castps_si256(b), field));
  }
  alignas(32) float lanes[16];
  alignas(32) std::uint32_t e[8];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  _mm256_store_si256(reinterpret_cast<__m256i*>(e), ex);
  return row_max_finite_tail(lanes, *std::max_element(e, e + 8), s, j, n, finite);
}

inline float row_max_finite_base(const float* s, std::size_t n, bool& finite) {
  float acc[16];
  std::uint32_t ex = 0;
  for (auto& a : acc) a = -std::numeric_limits<float>::infinity();
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    for (std::size_t l = 0; l < 16; ++l) {
      acc[l] = s[j + l] > acc[l] ? s[j + l] : acc[l];
      ex = std::max(ex, __builtin_bit_cast(std::uint32_t, s[j + l]) & 0x7f800000u);
    }
  }
  return row_max_finite_tail(acc, ex, s, j, n, finite);
}

inline float row_max_finite(const float* s, std::size_t n, bool& finite) {
  static const auto f = __builtin_cpu_supports("avx512f") ? row_max_finite_avx512
                        : __builtin_cpu_supports("avx2")  ? row_max_finite_avx2
                                                          : row_max_finite_base;
  return f(s, n, finite);
}

}  // namespace posenc::row_max_detail
