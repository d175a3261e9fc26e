// widen.hpp compiled for avx512f, avx512bw and avx512vl. Standard headers come before
// the target pragma so none of their inline functions is compiled for the wider set.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "ops/widen.hpp"

#pragma GCC target("avx512f,avx512bw,avx512vl")
// GCC 12 warns about the deliberately undefined upper lanes inside its own AVX-512
// headers (_mm512_undefined_*), as in rope_kernel_avx512.cpp; the narrowing below uses
// the plain forms.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

// Narrowing: one rounding to nearest even, as double_to_half / double_to_bf16 (the base
// loops) round; NaN lanes become the quiet NaN of their sign (f16 0x7e00, bf16 0x7fc0),
// where the instructions would keep part of the payload. Tails take the base loops.

namespace {

#include "ops/narrow_avx512.inc"

/// f16 bits of 16 floats, NaN lanes made the quiet NaN of their sign.
__m256i half_bits(__m512 v) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m256i quiet =
      _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                      _mm256_set1_epi16(0x7e00));
  return _mm256_mask_mov_epi16(h, nan, quiet);
}

/// lo in lanes 0-7, hi in 8-15 (insertf64x4: avx512f, where insertf32x8 needs avx512dq).
__m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

}  // namespace

void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), half_bits(_mm512_loadu_ps(src + i)));
  }
  base::f32_to_f16(src + i, dst + i, n - i);
}

void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        bf16_bits(_mm512_castps_si512(_mm512_loadu_ps(src + i))));
  }
  base::f32_to_bf16(src + i, dst + i, n - i);
}

void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d lo = _mm512_loadu_pd(src + i), hi = _mm512_loadu_pd(src + i + 8);
    // NaN lanes are NaN after the rounding to odd too (their sign kept).
    const __m256i h = half_bits(join(to_odd(lo), to_odd(hi)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  base::f64_to_f16(src + i, dst + i, n - i);
}

void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d lo = _mm512_loadu_pd(src + i), hi = _mm512_loadu_pd(src + i + 8);
    const __m512 f = join(to_odd(lo), to_odd(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_bits(_mm512_castps_si512(f)));
  }
  base::f64_to_bf16(src + i, dst + i, n - i);
}

}  // namespace posenc::widen_detail::avx512
