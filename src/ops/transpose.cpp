// Matrix transposes for the working copies of RoPE with d not last (transpose.hpp).
#include "ops/transpose.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/rope_kernel.hpp"

namespace posenc::detail {

namespace {

// Columns per OpenMP work item and rows per tile: both sides of a 32 x 32 tile are
// walked within a few cache lines.
constexpr std::size_t kTile = 32;

// Elements [r0, r1) x [c0, c1) of a [.., lda] to b [.., ldb], one by one. ES is a
// constant so that each copy is one move rather than a call to memcpy.
template <std::size_t ES>
void copy_scalar(const std::byte* a, std::size_t lda, std::byte* b, std::size_t ldb,
                 std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
  for (std::size_t r = r0; r < r1; ++r) {
    for (std::size_t c = c0; c < c1; ++c) {
      std::memcpy(b + (c * ldb + r) * ES, a + (r * lda + c) * ES, ES);
    }
  }
}

// One 8 x 8 block of 4-byte elements: rows of `a` (stride lda) to rows of `b`.
__attribute__((target("avx2"))) void block_4(const std::byte* a, std::size_t lda, std::byte* b,
                                             std::size_t ldb) {
  const auto* s = reinterpret_cast<const float*>(a);
  auto* d = reinterpret_cast<float*>(b);
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * lda);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ldb, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ldb, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// One 4 x 4 block of 8-byte elements.
__attribute__((target("avx2"))) void block_8(const std::byte* a, std::size_t lda, std::byte* b,
                                             std::size_t ldb) {
  const auto* s = reinterpret_cast<const double*>(a);
  auto* d = reinterpret_cast<double*>(b);
  const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + lda),
                r2 = _mm256_loadu_pd(s + 2 * lda), r3 = _mm256_loadu_pd(s + 3 * lda);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1),
                t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(d + ldb, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(d + 2 * ldb, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(d + 3 * ldb, _mm256_permute2f128_pd(t1, t3, 0x31));
}

// One 8 x 8 block of 2-byte elements (128-bit rows).
__attribute__((target("avx2"))) void block_2(const std::byte* a, std::size_t lda, std::byte* b,
                                             std::size_t ldb) {
  __m128i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * i * lda));
  }
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
    t[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm_unpacklo_epi32(t[i], t[i + 2]);
    u[i + 1] = _mm_unpackhi_epi32(t[i], t[i + 2]);
    u[i + 2] = _mm_unpacklo_epi32(t[i + 1], t[i + 3]);
    u[i + 3] = _mm_unpackhi_epi32(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 2 * (2 * i) * ldb),
                     _mm_unpacklo_epi64(u[i], u[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 2 * (2 * i + 1) * ldb),
                     _mm_unpackhi_epi64(u[i], u[i + 4]));
  }
}

// Tile [r0, r1) x [c0, c1) of one matrix: whole blocks in registers, the edges one by
// one.
template <std::size_t ES>
void copy_tile(const std::byte* a, std::size_t lda, std::byte* b, std::size_t ldb,
               std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1, bool simd) {
  constexpr std::size_t kBlock = ES == 8 ? 4 : 8;
  if (!simd) return copy_scalar<ES>(a, lda, b, ldb, r0, r1, c0, c1);
  const std::size_t rb = r0 + (r1 - r0) / kBlock * kBlock, cb = c0 + (c1 - c0) / kBlock * kBlock;
  for (std::size_t r = r0; r < rb; r += kBlock) {
    for (std::size_t c = c0; c < cb; c += kBlock) {
      const std::byte* from = a + (r * lda + c) * ES;
      std::byte* to = b + (c * ldb + r) * ES;
      if constexpr (ES == 2) block_2(from, lda, to, ldb);
      if constexpr (ES == 4) block_4(from, lda, to, ldb);
      if constexpr (ES == 8) block_8(from, lda, to, ldb);
    }
  }
  copy_scalar<ES>(a, lda, b, ldb, r0, rb, cb, c1);  // right edge
  copy_scalar<ES>(a, lda, b, ldb, rb, r1, c0, c1);  // bottom edge
}

template <std::size_t ES>
void transpose_es(const std::byte* src, std::byte* dst, std::size_t outer, std::size_t rows,
                  std::size_t cols, bool simd) {
  const std::size_t tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (outer * rows * cols >= rope_detail::kParallelElements)
  for (std::ptrdiff_t o = 0; o < static_cast<std::ptrdiff_t>(outer); ++o) {
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(tiles); ++t) {
      const std::size_t c0 = static_cast<std::size_t>(t) * kTile;
      const std::size_t c1 = std::min(cols, c0 + kTile);
      const std::size_t at = static_cast<std::size_t>(o) * rows * cols * ES;
      for (std::size_t r0 = 0; r0 < rows; r0 += kTile) {
        copy_tile<ES>(src + at, cols, dst + at, rows, r0, std::min(rows, r0 + kTile), c0, c1,
                      simd);
      }
    }
  }
}

}  // namespace

void transpose_matrices(const std::byte* src, std::byte* dst, std::size_t outer,
                        std::size_t rows, std::size_t cols, std::size_t es, bool simd) {
  switch (es) {
    case 1:
      return transpose_es<1>(src, dst, outer, rows, cols, false);
    case 2:
      return transpose_es<2>(src, dst, outer, rows, cols, simd);
    case 4:
      return transpose_es<4>(src, dst, outer, rows, cols, simd);
    case 8:
      return transpose_es<8>(src, dst, outer, rows, cols, simd);
    default:
      break;
  }
#pragma omp parallel for schedule(static) if (outer * rows * cols >= rope_detail::kParallelElements)
  for (std::ptrdiff_t o = 0; o < static_cast<std::ptrdiff_t>(outer); ++o) {
    const std::size_t at = static_cast<std::size_t>(o) * rows * cols * es;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        std::memcpy(dst + at + (c * rows + r) * es, src + at + (r * cols + c) * es, es);
      }
    }
  }
}

}  // namespace posenc::detail
