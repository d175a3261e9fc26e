// widen.hpp compiled for avx512f and avx512bw. Standard headers come before the target
// pragma so none of their inline functions is compiled for the wider set.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "ops/widen.hpp"

#pragma GCC target("avx512f,avx512bw")

// The zero-masked forms throughout, with every lane selected: GCC 12 warns that the
// plain forms' undefined starting value "may be used uninitialized".
constexpr __mmask16 kAll = 0xffff;

namespace posenc::widen_detail::avx512 {

bool f16(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m512i exp = _mm512_set1_epi32(0x7c00);
  bool special_seen = false;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m512 f = _mm512_maskz_cvtph_ps(kAll, h);
    // Inf and NaN as half_to_float makes them (see the avx2 variant).
    const __m512i x = _mm512_maskz_cvtepu16_epi32(kAll, h);
    const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_maskz_and_epi32(kAll, x, exp), exp);
    if (special != 0) {
      special_seen = true;
      const __m512i sign = _mm512_maskz_slli_epi32(
          kAll, _mm512_maskz_and_epi32(kAll, x, _mm512_set1_epi32(0x8000)), 16);
      const __m512i mant = _mm512_maskz_slli_epi32(
          kAll, _mm512_maskz_and_epi32(kAll, x, _mm512_set1_epi32(0x3ff)), 13);
      const __m512i bits = _mm512_maskz_or_epi32(kAll, _mm512_maskz_or_epi32(kAll, sign, mant),
                                                 _mm512_set1_epi32(0x7f800000));
      f = _mm512_mask_mov_ps(f, special, _mm512_castsi512_ps(bits));
    }
    _mm512_storeu_ps(dst + i, f);
  }
  for (; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
    special_seen |= (src[i] & 0x7c00) == 0x7c00;
  }
  return !special_seen;
}

bool bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m256i exp = _mm256_set1_epi16(0x7f80);
  __m256i special = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    special = _mm256_or_si256(special, _mm256_cmpeq_epi16(_mm256_and_si256(h, exp), exp));
    const __m512i x = _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(x));
  }
  bool special_seen = !_mm256_testz_si256(special, special);
  for (; i < n; ++i) {
    dst[i] = bf16_to_float(src[i]);
    special_seen |= (src[i] & 0x7f80) == 0x7f80;
  }
  return !special_seen;
}

}  // namespace posenc::widen_detail::avx512
