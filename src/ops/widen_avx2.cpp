// widen.hpp compiled for avx2 and f16c. Standard headers come before the target pragma
// so none of their inline functions is compiled for the wider set.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "ops/widen.hpp"

#pragma GCC target("avx2,f16c")

namespace posenc::widen_detail::avx2 {

bool f16(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m256i exp = _mm256_set1_epi32(0x7c00);
  bool special_seen = false;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i) + kPrefetchBytes, _MM_HINT_T0);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256 f = _mm256_cvtph_ps(h);
    // Inf and NaN as half_to_float makes them: the payload shifted, a signalling NaN
    // left signalling (vcvtph2ps quiets it).
    const __m256i x = _mm256_cvtepu16_epi32(h);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(x, exp), exp);
    if (!_mm256_testz_si256(special, special)) {
      special_seen = true;
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16);
      const __m256i mant = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3ff)), 13);
      const __m256i bits =
          _mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_set1_epi32(0x7f800000));
      f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(special));
    }
    _mm256_storeu_ps(dst + i, f);
  }
  for (; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
    special_seen |= (src[i] & 0x7c00) == 0x7c00;
  }
  return !special_seen;
}

bool bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  const __m128i exp = _mm_set1_epi16(0x7f80);
  __m128i special = _mm_setzero_si128();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i) + kPrefetchBytes, _MM_HINT_T0);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    special = _mm_or_si128(special, _mm_cmpeq_epi16(_mm_and_si128(h, exp), exp));
    const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(x));
  }
  bool special_seen = !_mm_testz_si128(special, special);
  for (; i < n; ++i) {
    dst[i] = bf16_to_float(src[i]);
    special_seen |= (src[i] & 0x7f80) == 0x7f80;
  }
  return !special_seen;
}

}  // namespace posenc::widen_detail::avx2
