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

// Narrowing, as in the avx512 variant (one rounding to nearest even, NaN to the quiet
// NaN of its sign); tails take the base loops.

namespace {

/// The f16 bits of 8 floats, NaN lanes made the quiet NaN of their sign.
__m128i half_bits(__m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (!_mm256_testz_ps(nan, nan)) {
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                          _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
    const __m128i quiet = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))),
                                       _mm_set1_epi16(0x7e00));
    h = _mm_blendv_epi8(h, quiet, nan16);
  }
  return h;
}

}  // namespace

void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half_bits(_mm256_loadu_ps(src + i)));
  }
  base::f32_to_f16(src + i, dst + i, n - i);
}

void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    // NaN: magnitude bits above Inf's (a signed compare: both sides are below 2^31).
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                        _mm256_set1_epi32(0x7fc0));
    r = _mm256_blendv_epi8(r, quiet, nan);
    // Every lane is below 2^16, so the unsigned saturating pack keeps it.
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  base::f32_to_bf16(src + i, dst + i, n - i);
}

void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n) {
  // Rounded to odd into f32 on the bits: the 29 bits f32 drops cleared, the lowest it
  // keeps set where they were not all zero; the double is then a float (or beyond f32's
  // normal range, where f16 gets Inf or a signed zero whatever the conversion does), and
  // its conversion exact. Rounding that to f16 is the one rounding of the double.
  const __m256i low = _mm256_set1_epi64x(0x1fffffff), keep = _mm256_set1_epi64x(0x20000000);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128 f[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 4 * k));
      const __m256i exact = _mm256_cmpeq_epi64(_mm256_and_si256(b, low), _mm256_setzero_si256());
      const __m256i odd =
          _mm256_or_si256(_mm256_andnot_si256(low, b), _mm256_andnot_si256(exact, keep));
      // NaN stays NaN: its exponent bits are untouched.
      f[k] = _mm256_cvtpd_ps(_mm256_castsi256_pd(odd));
    }
    const __m256 v = _mm256_insertf128_ps(_mm256_castps128_ps256(f[0]), f[1], 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half_bits(v));
  }
  base::f64_to_f16(src + i, dst + i, n - i);
}

}  // namespace posenc::widen_detail::avx2
