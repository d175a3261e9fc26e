// Attention's blocked kernel (attention_kernel.hpp): the products by BLAS (one-row f32
// and f64 products by loops of its own with BLAS's bits: own_gemv), the softmax
// exponentials, the stores in the output dtype, and a work item's three steps: its
// rows' state set up, key blocks folded in with an online softmax (the score terms are
// applied here, element by element), normalised and stored.
#include "ops/attention_kernel.hpp"

#include <fmt/format.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

#include "ops/row_gemv.hpp"
#include "ops/row_max.hpp"
#include "ops/widen.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"

namespace posenc::attention_detail {

namespace {

// ---------------------------------------------------------------------------------
// BLAS, single-threaded per call (see the file comment of attention.hpp), through
// xtensor-blas. Blocks whose rows are contiguous (the default bhsd layout, every tile)
// are zero-copy row-major adaptors; a block with a longer row stride (bshd inputs) is
// copied into contiguous rows first (O(rows * cols) next to the O(m * n * k) product).
// C is a contiguous m x n tile.

// A strided block, copied into `buf` as the contiguous rows xtensor-blas would evaluate
// it into. The copy is made here, into a buffer each thread reuses, because xtensor-blas
// makes a new temporary on every call: with two threads that churn left the heap at 70
// MiB resident under a 32 MiB --max-memory (f16 bshd K and V streamed in chunks). The
// product is the same BLAS call on the same values, so the same bits.
template <class T>
const T* contiguous(const T* p, std::size_t rows, std::size_t cols, std::size_t ld,
                    std::vector<T>& buf) {
  if (buf.size() < rows * cols) buf.resize(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(p + r * ld, cols, buf.data() + r * cols);
  return buf.data();
}

/// A read-only rows x cols row-major adaptor.
template <class T>
auto matrix(const T* p, std::size_t rows, std::size_t cols) {
  return xt::adapt(p, rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}

// One-row f32 products by posenc's own loops, element for element the arithmetic of
// OpenBLAS 0.3.21's Haswell gemv kernels (sgemv_t and sgemv_n with their Haswell
// microkernels, which OpenBLAS runs on the AVX2 and AVX-512 machines this project
// measures on), so they give the bits the BLAS call gave, but with independent FMA
// chains: OpenBLAS's sum over V chains eight dependent FMAs per eight keys in two
// chains, so its products ran at FMA latency. Scores: each key's dot product in 8 lanes
// (element e of the row in lane (e - (d & 4)) % 8 after the first d & 4 elements in
// lanes 0-3), the lanes added (l + l4), then pairwise, scaled and added to +0. Sums over
// V: eight keys at a time, each output element one FMA chain over them added to c with
// one FMA (rows from (dv & 4) + (dv & 8) on), or two chains (even and odd keys) added,
// scaled and added to c (the first rows). Keys past the last whole group (4 for scores,
// 8 for sums) and shapes outside these (d or dv not a multiple of 4, above 2048) are left
// to the BLAS call. The scalar forms (std::fma) give the same bits where AVX2 and FMA
// are missing or POSENC_ROPE_ISA=base.
namespace own_gemv {

inline bool vector_isa() {
  static const bool on = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         std::strcmp(widen_detail::widen_isa(), "base") != 0;
  return on;
}

inline bool scores_fit(std::size_t d) { return d % 4 == 0 && d > 0 && d <= 2048; }
inline bool values_fit(std::size_t dv) { return dv % 4 == 0 && dv > 0 && dv <= 2048; }

// Keys [0, n) (n a multiple of 4) of rows b (d wide): c[j] = 0 + (a . b_j) * alpha.
void scores_scalar(const float* a, const float* b, std::size_t n, std::size_t d, float alpha,
                   float* c) {
  for (std::size_t j = 0; j < n; ++j) {
    const float* k = b + j * d;
    float acc[8] = {};
    std::size_t e = 0;
    if (d & 4) {
      for (std::size_t l = 0; l < 4; ++l) acc[l] = std::fma(k[l], a[l], acc[l]);
      e = 4;
    }
    for (; e < d; e += 8) {
      for (std::size_t l = 0; l < 8; ++l) acc[l] = std::fma(k[e + l], a[e + l], acc[l]);
    }
    const float t0 = acc[0] + acc[4], t1 = acc[1] + acc[5], t2 = acc[2] + acc[6],
                t3 = acc[3] + acc[7];
    const float dot = (t0 + t1) + (t2 + t3);
    c[j] = 0.0f + dot * alpha;
  }
}

__attribute__((target("avx2,fma"))) inline float lanes_sum(__m256 acc) {
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// G keys from b at once (independent chains).
template <std::size_t G>
__attribute__((target("avx2,fma"))) void scores_group(const float* a, const float* b, std::size_t d,
                                                      float alpha, float* c) {
  __m256 acc[G];
  for (std::size_t u = 0; u < G; ++u) acc[u] = _mm256_setzero_ps();
  std::size_t e = 0;
  if (d & 4) {
    const __m256 q = _mm256_zextps128_ps256(_mm_loadu_ps(a));
    for (std::size_t u = 0; u < G; ++u) {
      acc[u] = _mm256_fmadd_ps(_mm256_zextps128_ps256(_mm_loadu_ps(b + u * d)), q, acc[u]);
    }
    e = 4;
  }
  for (; e < d; e += 8) {
    const __m256 q = _mm256_loadu_ps(a + e);
    for (std::size_t u = 0; u < G; ++u) {
      acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(b + u * d + e), q, acc[u]);
    }
  }
  for (std::size_t u = 0; u < G; ++u) c[u] = 0.0f + lanes_sum(acc[u]) * alpha;
}

__attribute__((target("avx2,fma"))) void scores_avx2(const float* a, const float* b, std::size_t n,
                                                     std::size_t d, float alpha, float* c) {
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) scores_group<8>(a, b + j * d, d, alpha, c + j);
  if (j + 4 <= n) scores_group<4>(a, b + j * d, d, alpha, c + j);
}

// Keys [0, n) (n a multiple of 8) of rows b (dv wide) added into c with weights a.
void values_scalar(const float* a, const float* b, std::size_t n, std::size_t dv, float alpha,
                   float* c) {
  const std::size_t first = (dv & 4) + (dv & 8);
  for (std::size_t j = 0; j < n; j += 8) {
    const float* v = b + j * dv;
    const float* x = a + j;
    for (std::size_t r = 0; r < first; ++r) {
      float c4 = std::fma(v[r], x[0], 0.0f), c5 = std::fma(v[dv + r], x[1], 0.0f);
      for (std::size_t u = 2; u < 8; u += 2) {
        c4 = std::fma(v[u * dv + r], x[u], c4);
        c5 = std::fma(v[(u + 1) * dv + r], x[u + 1], c5);
      }
      const float t = (c5 + c4) * alpha;
      c[r] = t + c[r];
    }
    for (std::size_t r = first; r < dv; ++r) {
      float acc = 0.0f;
      for (std::size_t u = 0; u < 8; ++u) acc = std::fma(v[u * dv + r], x[u], acc);
      c[r] = std::fma(alpha, acc, c[r]);
    }
  }
}

__attribute__((target("avx2,fma"))) void values_avx2(const float* a, const float* b, std::size_t n,
                                                     std::size_t dv, float alpha, float* c) {
  const __m256 al = _mm256_set1_ps(alpha);
  for (std::size_t j = 0; j < n; j += 8) {
    const float* v = b + j * dv;
    __m256 x[8];
    for (std::size_t u = 0; u < 8; ++u) x[u] = _mm256_set1_ps(a[j + u]);
    std::size_t r = 0;
    if (dv & 4) {
      __m128 c4 = _mm_setzero_ps(), c5 = _mm_setzero_ps();
      for (std::size_t u = 0; u < 8; u += 2) {
        c4 = _mm_fmadd_ps(_mm_loadu_ps(v + u * dv), _mm256_castps256_ps128(x[u]), c4);
        c5 = _mm_fmadd_ps(_mm_loadu_ps(v + (u + 1) * dv), _mm256_castps256_ps128(x[u + 1]), c5);
      }
      const __m128 t = _mm_mul_ps(_mm_add_ps(c5, c4), _mm256_castps256_ps128(al));
      _mm_storeu_ps(c, _mm_add_ps(t, _mm_loadu_ps(c)));
      r = 4;
    }
    if (dv & 8) {
      __m256 c4 = _mm256_setzero_ps(), c5 = _mm256_setzero_ps();
      for (std::size_t u = 0; u < 8; u += 2) {
        c4 = _mm256_fmadd_ps(_mm256_loadu_ps(v + u * dv + r), x[u], c4);
        c5 = _mm256_fmadd_ps(_mm256_loadu_ps(v + (u + 1) * dv + r), x[u + 1], c5);
      }
      const __m256 t = _mm256_mul_ps(_mm256_add_ps(c5, c4), al);
      _mm256_storeu_ps(c + r, _mm256_add_ps(t, _mm256_loadu_ps(c + r)));
      r += 8;
    }
    for (; r < dv; r += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (std::size_t u = 0; u < 8; ++u) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + u * dv + r), x[u], acc);
      }
      _mm256_storeu_ps(c + r, _mm256_fmadd_ps(al, acc, _mm256_loadu_ps(c + r)));
    }
  }
}

// (GCC 12 warns about the undefined upper lanes inside its own AVX-512 headers, as in
// rope_kernel_avx512.cpp.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// values_avx2 with 16 rows an instruction, for dv a multiple of 16 (no first rows taken
// in two chains): the same arithmetic per element.
__attribute__((target("avx512f,avx2,fma"))) void values_avx512(const float* a, const float* b,
                                                               std::size_t n, std::size_t dv,
                                                               float alpha, float* c) {
  const __m512 al = _mm512_set1_ps(alpha);
  for (std::size_t j = 0; j < n; j += 8) {
    const float* v = b + j * dv;
    __m512 x[8];
    for (std::size_t u = 0; u < 8; ++u) x[u] = _mm512_set1_ps(a[j + u]);
    std::size_t r = 0;
    for (; r + 16 <= dv; r += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (std::size_t u = 0; u < 8; ++u) {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(v + u * dv + r), x[u], acc);
      }
      _mm512_storeu_ps(c + r, _mm512_fmadd_ps(al, acc, _mm512_loadu_ps(c + r)));
    }
    for (; r < dv; r += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (std::size_t u = 0; u < 8; ++u) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + u * dv + r), _mm512_castps512_ps256(x[u]), acc);
      }
      _mm256_storeu_ps(c + r,
                       _mm256_fmadd_ps(_mm512_castps512_ps256(al), acc, _mm256_loadu_ps(c + r)));
    }
  }
}

#pragma GCC diagnostic pop

inline bool avx512_isa() {
  static const bool on =
      __builtin_cpu_supports("avx512f") && std::strcmp(widen_detail::widen_isa(), "avx512") == 0;
  return on;
}

// One-row f64 products, element for element the arithmetic of OpenBLAS 0.3.21's Haswell
// dgemv kernels (dgemv_t_4.c and dgemv_n_4.c with their Haswell microkernels), the same
// bits with independent FMA chains. Scores (dgemv_t): each key's dot product in 4 lanes
// (element e in lane e % 4, in order), (l0 + l2) + (l1 + l3), scaled and added to +0.
// Sums over V (dgemv_n): four keys at a time, each output element
// c = fma(fma(v2, x2, v0 * x0) + fma(v3, x3, v1 * x1), alpha, c); OpenBLAS takes the
// four keys over all the rows before the next four, so each element's chain through c
// is one dependent FMA per four keys from one pass over the rows to the next; here a
// block of rows keeps c in registers over the tile's keys, several blocks' chains
// side by side. Keys past the last group of 4, d or dv not a multiple of 4 (or above
// 2048) are left to the BLAS call, as for f32.
void scores_f64_scalar(const double* a, const double* b, std::size_t n, std::size_t d,
                       double alpha, double* c) {
  for (std::size_t j = 0; j < n; ++j) {
    const double* k = b + j * d;
    double acc[4] = {};
    for (std::size_t e = 0; e < d; e += 4) {
      for (std::size_t l = 0; l < 4; ++l) acc[l] = std::fma(k[e + l], a[e + l], acc[l]);
    }
    const double dot = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    c[j] = 0.0 + dot * alpha;
  }
}

template <std::size_t G>
__attribute__((target("avx2,fma"))) void scores_f64_group(const double* a, const double* b,
                                                          std::size_t d, double alpha,
                                                          double* c) {
  __m256d acc[G];
  for (std::size_t u = 0; u < G; ++u) acc[u] = _mm256_setzero_pd();
  for (std::size_t e = 0; e < d; e += 4) {
    const __m256d q = _mm256_loadu_pd(a + e);
    for (std::size_t u = 0; u < G; ++u) {
      acc[u] = _mm256_fmadd_pd(_mm256_loadu_pd(b + u * d + e), q, acc[u]);
    }
  }
  for (std::size_t u = 0; u < G; ++u) {
    const __m128d t =
        _mm_add_pd(_mm256_castpd256_pd128(acc[u]), _mm256_extractf128_pd(acc[u], 1));
    c[u] = 0.0 + _mm_cvtsd_f64(_mm_hadd_pd(t, t)) * alpha;
  }
}

__attribute__((target("avx2,fma"))) void scores_f64_avx2(const double* a, const double* b,
                                                         std::size_t n, std::size_t d,
                                                         double alpha, double* c) {
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) scores_f64_group<8>(a, b + j * d, d, alpha, c + j);
  if (j + 4 <= n) scores_f64_group<4>(a, b + j * d, d, alpha, c + j);
}

// Keys [0, n) (n a multiple of 4) of rows b (dv wide) added into c with weights a.
void values_f64_scalar(const double* a, const double* b, std::size_t n, std::size_t dv,
                       double alpha, double* c) {
  for (std::size_t j = 0; j < n; j += 4) {
    const double* v = b + j * dv;
    const double x0 = a[j], x1 = a[j + 1], x2 = a[j + 2], x3 = a[j + 3];
    for (std::size_t r = 0; r < dv; ++r) {
      const double t4 = std::fma(v[2 * dv + r], x2, v[r] * x0);
      const double t5 = std::fma(v[3 * dv + r], x3, v[dv + r] * x1);
      c[r] = std::fma(t4 + t5, alpha, c[r]);
    }
  }
}

// R registers of 4 rows (b and c start at the block's first row; rows dv apart).
template <std::size_t R>
__attribute__((target("avx2,fma"))) inline void values_f64_rows(const double* a, const double* b,
                                                                std::size_t n, std::size_t dv,
                                                                __m256d al, double* c) {
  __m256d y[R];
  for (std::size_t u = 0; u < R; ++u) y[u] = _mm256_loadu_pd(c + 4 * u);
  for (std::size_t j = 0; j < n; j += 4) {
    const double* v = b + j * dv;
    const __m256d x0 = _mm256_broadcast_sd(a + j), x1 = _mm256_broadcast_sd(a + j + 1),
                  x2 = _mm256_broadcast_sd(a + j + 2), x3 = _mm256_broadcast_sd(a + j + 3);
    for (std::size_t u = 0; u < R; ++u) {
      __m256d t4 = _mm256_mul_pd(_mm256_loadu_pd(v + 4 * u), x0);
      __m256d t5 = _mm256_mul_pd(_mm256_loadu_pd(v + dv + 4 * u), x1);
      t4 = _mm256_fmadd_pd(_mm256_loadu_pd(v + 2 * dv + 4 * u), x2, t4);
      t5 = _mm256_fmadd_pd(_mm256_loadu_pd(v + 3 * dv + 4 * u), x3, t5);
      y[u] = _mm256_fmadd_pd(_mm256_add_pd(t4, t5), al, y[u]);
    }
  }
  for (std::size_t u = 0; u < R; ++u) _mm256_storeu_pd(c + 4 * u, y[u]);
}

__attribute__((target("avx2,fma"))) void values_f64_avx2(const double* a, const double* b,
                                                         std::size_t n, std::size_t dv,
                                                         double alpha, double* c) {
  const __m256d al = _mm256_set1_pd(alpha);
  std::size_t r = 0;
  for (; r + 32 <= dv; r += 32) values_f64_rows<8>(a, b + r, n, dv, al, c + r);
  for (; r < dv; r += 4) values_f64_rows<1>(a, b + r, n, dv, al, c + r);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// values_f64_rows with 8 rows a register: the same arithmetic per element.
template <std::size_t R>
__attribute__((target("avx512f,avx2,fma"))) inline void values_f64_rows512(
    const double* a, const double* b, std::size_t n, std::size_t dv, __m512d al, double* c) {
  __m512d y[R];
  for (std::size_t u = 0; u < R; ++u) y[u] = _mm512_loadu_pd(c + 8 * u);
  for (std::size_t j = 0; j < n; j += 4) {
    const double* v = b + j * dv;
    const __m512d x0 = _mm512_set1_pd(a[j]), x1 = _mm512_set1_pd(a[j + 1]),
                  x2 = _mm512_set1_pd(a[j + 2]), x3 = _mm512_set1_pd(a[j + 3]);
    for (std::size_t u = 0; u < R; ++u) {
      __m512d t4 = _mm512_mul_pd(_mm512_loadu_pd(v + 8 * u), x0);
      __m512d t5 = _mm512_mul_pd(_mm512_loadu_pd(v + dv + 8 * u), x1);
      t4 = _mm512_fmadd_pd(_mm512_loadu_pd(v + 2 * dv + 8 * u), x2, t4);
      t5 = _mm512_fmadd_pd(_mm512_loadu_pd(v + 3 * dv + 8 * u), x3, t5);
      y[u] = _mm512_fmadd_pd(_mm512_add_pd(t4, t5), al, y[u]);
    }
  }
  for (std::size_t u = 0; u < R; ++u) _mm512_storeu_pd(c + 8 * u, y[u]);
}

__attribute__((target("avx512f,avx2,fma"))) void values_f64_avx512(const double* a,
                                                                   const double* b,
                                                                   std::size_t n, std::size_t dv,
                                                                   double alpha, double* c) {
  const __m512d al = _mm512_set1_pd(alpha);
  std::size_t r = 0;
  for (; r + 64 <= dv; r += 64) values_f64_rows512<8>(a, b + r, n, dv, al, c + r);
  for (; r + 8 <= dv; r += 8) values_f64_rows512<1>(a, b + r, n, dv, al, c + r);
  if (r < dv) values_f64_rows<1>(a, b + r, n, dv, _mm512_castpd512_pd256(al), c + r);
}
#pragma GCC diagnostic pop

// Scores of H query heads (q[h], d wide) with the same n keys (n a multiple of 4), f32:
// each key row loaded once for the H heads; each (head, key) dot product takes the same
// lanes in the same order as scores_group, so the same bits.
template <std::size_t H>
__attribute__((target("avx2,fma"))) void scores_heads_avx2(const float* const* q, const float* b,
                                                           std::size_t n, std::size_t d,
                                                           float alpha, float* const* c) {
  constexpr std::size_t G = 2;
  for (std::size_t j = 0; j < n; j += G) {
    const float* k = b + j * d;
    __m256 acc[H][G];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t u = 0; u < G; ++u) acc[h][u] = _mm256_setzero_ps();
    std::size_t e = 0;
    if (d & 4) {
      for (std::size_t h = 0; h < H; ++h) {
        const __m256 qq = _mm256_zextps128_ps256(_mm_loadu_ps(q[h]));
        for (std::size_t u = 0; u < G; ++u) {
          acc[h][u] =
              _mm256_fmadd_ps(_mm256_zextps128_ps256(_mm_loadu_ps(k + u * d)), qq, acc[h][u]);
        }
      }
      e = 4;
    }
    for (; e < d; e += 8) {
      __m256 kk[G];
      for (std::size_t u = 0; u < G; ++u) kk[u] = _mm256_loadu_ps(k + u * d + e);
      for (std::size_t h = 0; h < H; ++h) {
        const __m256 qq = _mm256_loadu_ps(q[h] + e);
        for (std::size_t u = 0; u < G; ++u) acc[h][u] = _mm256_fmadd_ps(kk[u], qq, acc[h][u]);
      }
    }
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t u = 0; u < G; ++u) c[h][j + u] = 0.0f + lanes_sum(acc[h][u]) * alpha;
    }
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Two 256-bit halves as one 512-bit register (AVX-512F only: no DQ).
__attribute__((target("avx512f,avx2,fma"))) inline __m512 halves(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// f16 keys widened in registers (exact), for the loops that read keys stored as f16.
__attribute__((target("avx512f,avx2,fma,f16c"))) inline __m256 half4(const std::uint16_t* p) {
  return _mm256_zextps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// How scores_heads_avx512 loads keys: elements [e, e + 4) (zero-extended to 8 lanes) or
// [e, e + 8) of two keys as one 512-bit register, the first key in lanes 0-7, the
// second in lanes 8-15; as f32 (F32Keys) or as f16 widened in registers (F16Keys: the
// same values, widening is exact, so the same bits).
struct F32Keys {
  using Elem = float;
  __attribute__((target("avx512f,avx2,fma,f16c"))) static __m512 four(const float* a,
                                                                      const float* b) {
    return halves(_mm256_zextps128_ps256(_mm_loadu_ps(a)), _mm256_zextps128_ps256(_mm_loadu_ps(b)));
  }
  __attribute__((target("avx512f,avx2,fma,f16c"))) static __m512 eight(const float* a,
                                                                       const float* b) {
    return halves(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
  }
};

struct F16Keys {
  using Elem = std::uint16_t;
  __attribute__((target("avx512f,avx2,fma,f16c"))) static __m512 four(const std::uint16_t* a,
                                                                      const std::uint16_t* b) {
    return halves(half4(a), half4(b));
  }
  __attribute__((target("avx512f,avx2,fma,f16c"))) static __m512 eight(const std::uint16_t* a,
                                                                       const std::uint16_t* b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
  }
};

// The same with two keys a 512-bit register (key j in lanes 0-7, key j + 1 in lanes 8-15),
// the keys b loaded by Keys (F32Keys, F16Keys). With F16Keys and H = 1 it gives
// gemv_scores' bits too: each key's dot product in the same 8 lanes, in the same order.
// (F16C is in every CPU with AVX-512F, where these run.)
template <class Keys, std::size_t H>
__attribute__((target("avx512f,avx2,fma,f16c"))) void scores_heads_avx512(
    const float* const* q, const typename Keys::Elem* b, std::size_t n, std::size_t d, float alpha,
    float* const* c) {
  constexpr std::size_t P = 2;  // pairs of keys
  for (std::size_t j = 0; j < n; j += 2 * P) {
    const typename Keys::Elem* k = b + j * d;
    __m512 acc[H][P];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t u = 0; u < P; ++u) acc[h][u] = _mm512_setzero_ps();
    std::size_t e = 0;
    if (d & 4) {
      __m512 kk[P];
      for (std::size_t u = 0; u < P; ++u) kk[u] = Keys::four(k + 2 * u * d, k + (2 * u + 1) * d);
      for (std::size_t h = 0; h < H; ++h) {
        const __m256 q4 = _mm256_zextps128_ps256(_mm_loadu_ps(q[h]));
        const __m512 qq = halves(q4, q4);
        for (std::size_t u = 0; u < P; ++u) acc[h][u] = _mm512_fmadd_ps(kk[u], qq, acc[h][u]);
      }
      e = 4;
    }
    for (; e < d; e += 8) {
      __m512 kk[P];
      for (std::size_t u = 0; u < P; ++u) {
        kk[u] = Keys::eight(k + 2 * u * d + e, k + (2 * u + 1) * d + e);
      }
      for (std::size_t h = 0; h < H; ++h) {
        const __m512 qq =
            _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q[h] + e))));
        for (std::size_t u = 0; u < P; ++u) acc[h][u] = _mm512_fmadd_ps(kk[u], qq, acc[h][u]);
      }
    }
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t u = 0; u < P; ++u) {
        const __m512d a2 = _mm512_castps_pd(acc[h][u]);
        c[h][j + 2 * u] = 0.0f + lanes_sum(_mm256_castpd_ps(_mm512_castpd512_pd256(a2))) * alpha;
        c[h][j + 2 * u + 1] =
            0.0f + lanes_sum(_mm256_castpd_ps(_mm512_extractf64x4_pd(a2, 1))) * alpha;
      }
    }
  }
}
#pragma GCC diagnostic pop

// Scores of H query heads (q[h], d wide) with the same n keys (n a multiple of 4): each
// key row is loaded once for the H heads; each (head, key) dot product takes the same
// lanes in the same order as scores_f64_group, so the same bits.
template <std::size_t H>
__attribute__((target("avx2,fma"))) void scores_f64_heads_avx2(const double* const* q,
                                                               const double* b, std::size_t n,
                                                               std::size_t d, double alpha,
                                                               double* const* c) {
  constexpr std::size_t G = 2;
  for (std::size_t j = 0; j < n; j += G) {
    const double* k = b + j * d;
    __m256d acc[H][G];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t u = 0; u < G; ++u) acc[h][u] = _mm256_setzero_pd();
    for (std::size_t e = 0; e < d; e += 4) {
      __m256d kk[G];
      for (std::size_t u = 0; u < G; ++u) kk[u] = _mm256_loadu_pd(k + u * d + e);
      for (std::size_t h = 0; h < H; ++h) {
        const __m256d qq = _mm256_loadu_pd(q[h] + e);
        for (std::size_t u = 0; u < G; ++u) acc[h][u] = _mm256_fmadd_pd(kk[u], qq, acc[h][u]);
      }
    }
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t u = 0; u < G; ++u) {
        const __m128d t =
            _mm_add_pd(_mm256_castpd256_pd128(acc[h][u]), _mm256_extractf128_pd(acc[h][u], 1));
        c[h][j + u] = 0.0 + _mm_cvtsd_f64(_mm_hadd_pd(t, t)) * alpha;
      }
    }
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same with two keys a 512-bit register (key j in lanes 0-3, key j + 1 in lanes 4-7).
template <std::size_t H>
__attribute__((target("avx512f,avx2,fma"))) void scores_f64_heads_avx512(
    const double* const* q, const double* b, std::size_t n, std::size_t d, double alpha,
    double* const* c) {
  constexpr std::size_t P = 2;  // pairs of keys
  for (std::size_t j = 0; j < n; j += 2 * P) {
    const double* k = b + j * d;
    __m512d acc[H][P];
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t u = 0; u < P; ++u) acc[h][u] = _mm512_setzero_pd();
    for (std::size_t e = 0; e < d; e += 4) {
      __m512d kk[P];
      for (std::size_t u = 0; u < P; ++u) {
        kk[u] = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(k + 2 * u * d + e)),
                                   _mm256_loadu_pd(k + (2 * u + 1) * d + e), 1);
      }
      for (std::size_t h = 0; h < H; ++h) {
        const __m512d qq = _mm512_broadcast_f64x4(_mm256_loadu_pd(q[h] + e));
        for (std::size_t u = 0; u < P; ++u) acc[h][u] = _mm512_fmadd_pd(kk[u], qq, acc[h][u]);
      }
    }
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t u = 0; u < P; ++u) {
        for (std::size_t half = 0; half < 2; ++half) {
          const __m256d a4 = half ? _mm512_extractf64x4_pd(acc[h][u], 1)
                                  : _mm512_castpd512_pd256(acc[h][u]);
          const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(a4), _mm256_extractf128_pd(a4, 1));
          c[h][j + 2 * u + half] = 0.0 + _mm_cvtsd_f64(_mm_hadd_pd(t, t)) * alpha;
        }
      }
    }
  }
}
#pragma GCC diagnostic pop


// f16 values widened in registers as the f32 products read them (decode of an f16 KV
// cache; the keys: scores_heads_avx512 with F16Keys): the arithmetic of values_avx512
// on the same values (widening f16 is exact), so the same bits, without the pass that
// widened each tile into a buffer and the reads of it back (that pass was most of an
// f16 decode's time). AVX-512F with F16C; the callers check finiteness apart
// (half_finite).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// values_avx512 with the rows b stored as f16 (dv a multiple of 16; n of 8).
__attribute__((target("avx512f,avx2,fma,f16c"))) void values_f16_avx512(
    const float* a, const std::uint16_t* b, std::size_t n, std::size_t dv, float alpha,
    float* c) {
  const __m512 al = _mm512_set1_ps(alpha);
  for (std::size_t j = 0; j < n; j += 8) {
    const std::uint16_t* v = b + j * dv;
    __m512 x[8];
    for (std::size_t u = 0; u < 8; ++u) x[u] = _mm512_set1_ps(a[j + u]);
    for (std::size_t r = 0; r < dv; r += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (std::size_t u = 0; u < 8; ++u) {
        const __m512 vv = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + u * dv + r)));
        acc = _mm512_fmadd_ps(vv, x[u], acc);
      }
      _mm512_storeu_ps(c + r, _mm512_fmadd_ps(al, acc, _mm512_loadu_ps(c + r)));
    }
  }
}
#pragma GCC diagnostic pop

}  // namespace own_gemv

// One query row's products with n keys, rows of B (contiguous, k wide): the scores
// c[j] = alpha * a . b_j + beta * c[j].
template <class T>
void gemv_scores(const T* a, const T* b, std::size_t n, std::size_t k, T alpha, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    if (beta == 0 && alpha != 0 && own_gemv::scores_fit(k)) {
      const std::size_t n4 = n / 4 * 4;
      if (own_gemv::vector_isa()) {
        own_gemv::scores_avx2(a, b, n4, k, alpha, c);
      } else {
        own_gemv::scores_scalar(a, b, n4, k, alpha, c);
      }
      b += n4 * k, c += n4, n -= n4;
      if (n == 0) return;
    }
  } else if constexpr (std::is_same_v<T, double>) {
    if (beta == 0 && alpha != 0 && own_gemv::scores_fit(k)) {
      const std::size_t n4 = n / 4 * 4;
      if (own_gemv::vector_isa()) {
        own_gemv::scores_f64_avx2(a, b, n4, k, alpha, c);
      } else {
        own_gemv::scores_f64_scalar(a, b, n4, k, alpha, c);
      }
      b += n4 * k, c += n4, n -= n4;
      if (n == 0) return;
    }
  }
  auto x = xt::adapt(a, k, xt::no_ownership(), std::array<std::size_t, 1>{k});
  auto y = xt::adapt(c, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
  xt::blas::gemv(matrix(b, n, k), x, y, false, alpha, beta);
}

// The weighted sum of n value rows b_j (contiguous, dv wide): c = alpha * sum_j a[j] b_j +
// beta * c.
template <class T>
void gemv_values(const T* a, const T* b, std::size_t n, std::size_t dv, T alpha, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    if (beta == 1 && alpha != 0 && own_gemv::values_fit(dv)) {
      const std::size_t n8 = n / 8 * 8;
      if (own_gemv::vector_isa() && own_gemv::avx512_isa() && ((dv & 4) + (dv & 8)) == 0) {
        own_gemv::values_avx512(a, b, n8, dv, alpha, c);
      } else if (own_gemv::vector_isa()) {
        own_gemv::values_avx2(a, b, n8, dv, alpha, c);
      } else {
        own_gemv::values_scalar(a, b, n8, dv, alpha, c);
      }
      a += n8, b += n8 * dv, n -= n8;
      if (n == 0) return;
    }
  } else if constexpr (std::is_same_v<T, double>) {
    if (beta == 1 && alpha != 0 && own_gemv::values_fit(dv)) {
      const std::size_t n4 = n / 4 * 4;
      if (own_gemv::vector_isa() && own_gemv::avx512_isa()) {
        own_gemv::values_f64_avx512(a, b, n4, dv, alpha, c);
      } else if (own_gemv::vector_isa()) {
        own_gemv::values_f64_avx2(a, b, n4, dv, alpha, c);
      } else {
        own_gemv::values_f64_scalar(a, b, n4, dv, alpha, c);
      }
      a += n4, b += n4 * dv, n -= n4;
      if (n == 0) return;
    }
  }
  auto x = xt::adapt(a, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
  auto y = xt::adapt(c, dv, xt::no_ownership(), std::array<std::size_t, 1>{dv});
  xt::blas::gemv(matrix(b, n, dv), x, y, true, alpha, beta);
}

// The scores of gs query heads (rows q[i]) with the same m keys (rows of b, d wide):
// c[i][j] = alpha * q[i] . b_j. Where posenc's own loops take the shape, heads four or
// two at a time, each key row loaded once for them (with AVX-512, two keys a register),
// so that the heads of a KV group (GQA) share the loads: f64 with AVX2 or AVX-512, f32
// with AVX-512 (in 8-lane AVX2 the head-by-head loops are as fast). The same bits as
// gemv_scores head by head.
template <class T>
void gemv_scores_heads(const T* const* q, std::size_t gs, const T* b, std::size_t m,
                       std::size_t d, T alpha, T* const* c) {
  std::size_t i = 0;
  const std::size_t m4 = m / 4 * 4;
  if (gs > 1 && m4 > 0 && alpha != 0 && own_gemv::scores_fit(d) && own_gemv::vector_isa() &&
      (std::is_same_v<T, double> || own_gemv::avx512_isa())) {
    const bool wide = own_gemv::avx512_isa();
    auto heads = [&](auto h) {
      constexpr std::size_t H = decltype(h)::value;
      if constexpr (std::is_same_v<T, double>) {
        if (wide) {
          own_gemv::scores_f64_heads_avx512<H>(q + i, b, m4, d, alpha, c + i);
        } else {
          own_gemv::scores_f64_heads_avx2<H>(q + i, b, m4, d, alpha, c + i);
        }
      } else {
        own_gemv::scores_heads_avx512<own_gemv::F32Keys, H>(q + i, b, m4, d, alpha, c + i);
      }
      if (m4 < m) {
        for (std::size_t u = i; u < i + H; ++u) {
          gemv_scores(q[u], b + m4 * d, m - m4, d, alpha, T(0), c[u] + m4);
        }
      }
      i += H;
    };
    while (i + 4 <= gs) heads(std::integral_constant<std::size_t, 4>{});
    if (i + 2 <= gs) heads(std::integral_constant<std::size_t, 2>{});
  }
  for (; i < gs; ++i) gemv_scores(q[i], b, m, d, alpha, T(0), c[i]);
}

// gemv_scores_heads and gemv_values on keys stored as f16 (HalfTiles), f32 arithmetic:
// posenc's own loops widen in registers, and the few keys past their last whole group
// are widened into a buffer for the BLAS call gemv_scores and gemv_values make on them,
// so the same bits as on the keys widened first. Only where fold_tiled takes them
// (half_scores_fit, half_values_fit, half_tiles_fused).
inline bool half_scores_fit(std::size_t d, float alpha) {
  return alpha != 0 && own_gemv::scores_fit(d);
}
inline bool half_values_fit(std::size_t dv) { return own_gemv::values_fit(dv) && dv % 16 == 0; }

void half_scores_heads(const float* const* q, std::size_t gs, const std::uint16_t* b, std::size_t m,
                       std::size_t d, float alpha, float* const* c) {
  const std::size_t m4 = m / 4 * 4;
  std::size_t i = 0;
  for (; m4 > 0 && i + 4 <= gs; i += 4) {
    own_gemv::scores_heads_avx512<own_gemv::F16Keys, 4>(q + i, b, m4, d, alpha, c + i);
  }
  for (; m4 > 0 && i + 2 <= gs; i += 2) {
    own_gemv::scores_heads_avx512<own_gemv::F16Keys, 2>(q + i, b, m4, d, alpha, c + i);
  }
  for (; m4 > 0 && i < gs; ++i) {
    own_gemv::scores_heads_avx512<own_gemv::F16Keys, 1>(q + i, b, m4, d, alpha, c + i);
  }
  if (m4 == m) return;
  thread_local std::vector<float> tail;
  tail.resize((m - m4) * d);
  detail::widen(DType::f16, b + m4 * d, tail.data(), tail.size());
  for (std::size_t u = 0; u < gs; ++u) {
    gemv_scores(q[u], tail.data(), m - m4, d, alpha, 0.0f, c[u] + m4);
  }
}

void half_values(const float* a, const std::uint16_t* b, std::size_t n, std::size_t dv, float* c) {
  const std::size_t n8 = n / 8 * 8;
  own_gemv::values_f16_avx512(a, b, n8, dv, 1.0f, c);
  if (n8 == n) return;
  thread_local std::vector<float> tail;
  tail.resize((n - n8) * dv);
  detail::widen(DType::f16, b + n8 * dv, tail.data(), tail.size());
  gemv_values(a + n8, tail.data(), n - n8, dv, 1.0f, 1.0f, c);
}

// Whether a one-row product with values dv wide is taken kKeyTile keys at a time (the
// weighted sum accumulates into c tile after tile; see kKeyTile).
inline bool values_in_tiles(std::size_t dv) { return dv % 4 == 0; }

template <class T>
void gemm(bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, bool b_strided = false) {
  const std::size_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  if (m == 1 && ldb == b_cols && !b_strided) {
    // One query row (decoding): a matrix-vector product reads B once, where sgemm would
    // first copy it into its packed layout. (Strided B, as from bshd inputs, takes the
    // gemm path on a contiguous copy; so does B marked `b_strided`, a contiguous copy of
    // strided rows made by the caller.) In tiles of kKeyTile keys, as fold_tiled takes
    // them, so every path gives the same bits.
    if (trans_b) {
      for (std::size_t j = 0; j < n; j += kKeyTile) {
        gemv_scores(a, b + j * ldb, std::min(kKeyTile, n - j), k, alpha, beta, c + j);
      }
    } else if (values_in_tiles(n)) {
      for (std::size_t j = 0; j < k; j += kKeyTile) {
        gemv_values(a + j, b + j * ldb, std::min(kKeyTile, k - j), n, alpha, j ? T(1) : beta, c);
      }
    } else {
      gemv_values(a, b, k, n, alpha, beta, c);
    }
    return;
  }
  thread_local std::vector<T> a_rows, b_rows_copy;
  if (lda != k) a = contiguous(a, m, k, lda, a_rows);
  if (ldb != b_cols) b = contiguous(b, b_rows, b_cols, ldb, b_rows_copy);
  auto out = xt::adapt(c, m * n, xt::no_ownership(), std::array<std::size_t, 2>{m, n});
  xt::blas::gemm(matrix(a, m, k), matrix(b, b_rows, b_cols), out, false, trans_b, alpha, beta);
}

// ---------------------------------------------------------------------------------
// exp

// p[j] = exp(s[j] - m) in place; returns the sum in double (NaN if a score is NaN;
// `may_nan` false skips that check when the scores are known finite). One pass: the
// exponentials go into 16 f32 lanes summed over chunks of up to 1024, the chunks added
// in f64, and the last n % 16 one by one in f64
// (a fixed order, so the result does not depend on anything but the data).
// AVX2 and plain clones (and exp_shift_sum_avx512 below): the same per-lane arithmetic
// (this file is compiled with -ffp-contract=off: no FMA), so the bits do not depend on
// the machine's vector width.
__attribute__((target_clones("avx2", "default"), noinline)) double exp_shift_sum_lanes(
    float* s, std::size_t n, float m, bool may_nan) {
  if (may_nan) {
    int nans = 0;
    for (std::size_t j = 0; j < n; ++j) nans += s[j] != s[j];
    if (nans) return std::numeric_limits<double>::quiet_NaN();
  }
  constexpr std::size_t kLanes = 16, kChunk = 1024;
  double sum = 0;
  std::size_t j = 0;
  const std::size_t whole = n / kLanes * kLanes;
  for (; j < whole; j += kChunk) {
    const std::size_t len = std::min(kChunk, whole - j);
    float acc[kLanes] = {};
    for (std::size_t c = 0; c < len; c += kLanes) {
      for (std::size_t l = 0; l < kLanes; ++l) {
        const float e = exp_nonpositive(s[j + c + l] - m);
        s[j + c + l] = e;
        acc[l] += e;
      }
    }
    for (std::size_t l = 0; l < kLanes; ++l) sum += acc[l];
  }
  j = whole;
  for (; j < n; ++j) {
    const float e = exp_nonpositive(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
}

// exp_shift_sum_lanes in AVX-512, the same bits in fewer instructions (the exponentials
// were a tenth of a non-causal f32 prefill on a Xeon with AVX-512; this loop is 10-15%
// faster): a lane below -87 (or -inf, or a negative NaN) is not clamped to -87 first,
// only zeroed at the end as it was, and y * 2^n is vscalefps(y, n), exact before its one
// rounding as the product by the power of two was (n is an integer in [-126, 0] for
// the arguments s - m <= 0 met here; every float <= 0 and every NaN was compared with
// exp_nonpositive, bit for bit).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"), noinline)) double exp_shift_sum_avx512(float* s, std::size_t n,
                                                                         float m, bool may_nan) {
  if (may_nan) {
    int nans = 0;
    for (std::size_t j = 0; j < n; ++j) nans += s[j] != s[j];
    if (nans) return std::numeric_limits<double>::quiet_NaN();
  }
  constexpr std::size_t kLanes = 16, kChunk = 1024;
  const __m512 vm = _mm512_set1_ps(m);
  const __m512i lim =
      _mm512_set1_epi32(static_cast<int>(__builtin_bit_cast(std::uint32_t, -87.0f)));
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), shifter = _mm512_set1_ps(12582912.0f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __m512 c0 = _mm512_set1_ps(1.9875691500e-4f), c1 = _mm512_set1_ps(1.3981999507e-3f),
               c2 = _mm512_set1_ps(8.3334519073e-3f), c3 = _mm512_set1_ps(4.1665795894e-2f),
               c4 = _mm512_set1_ps(1.6666665459e-1f), c5 = _mm512_set1_ps(5.0000001201e-1f),
               one = _mm512_set1_ps(1.0f);
  double sum = 0;
  std::size_t j = 0;
  const std::size_t whole = n / kLanes * kLanes;
  for (; j < whole; j += kChunk) {
    const std::size_t len = std::min(kChunk, whole - j);
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t c = 0; c < len; c += kLanes) {
      float* p = s + j + c;
      const __m512i xb = _mm512_castps_si512(_mm512_sub_ps(_mm512_loadu_ps(p), vm));
      const __mmask16 keep = _mm512_cmple_epu32_mask(xb, lim);
      const __m512 xc = _mm512_castsi512_ps(xb);  // lanes not in `keep`: zeroed at the end
      const __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, log2e), shifter);
      const __m512 k = _mm512_sub_ps(t, shifter);
      __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(k, ln2_hi));
      r = _mm512_sub_ps(r, _mm512_mul_ps(k, ln2_lo));
      __m512 q = _mm512_add_ps(_mm512_mul_ps(c0, r), c1);
      q = _mm512_add_ps(_mm512_mul_ps(q, r), c2);
      q = _mm512_add_ps(_mm512_mul_ps(q, r), c3);
      q = _mm512_add_ps(_mm512_mul_ps(q, r), c4);
      q = _mm512_add_ps(_mm512_mul_ps(q, r), c5);
      const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(q, r), r), r), one);
      const __m512 e = _mm512_maskz_scalef_ps(keep, y, k);
      _mm512_storeu_ps(p, e);
      acc = _mm512_add_ps(acc, e);
    }
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, acc);
    for (std::size_t l = 0; l < kLanes; ++l) sum += lanes[l];
  }
  j = whole;
  for (; j < n; ++j) {
    const float e = exp_nonpositive(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
}
#pragma GCC diagnostic pop

// p[j] = exp(s[j] - m) in place, the sum: exp_shift_sum_lanes, in AVX-512 where the CPU
// has it (the same bits).
double exp_shift_sum(float* s, std::size_t n, float m, bool may_nan) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? exp_shift_sum_avx512(s, n, m, may_nan) : exp_shift_sum_lanes(s, n, m, may_nan);
}

// Largest score of a row (lane-wise so it vectorises; NaNs are found by exp_shift_sum).
template <class T>
inline T row_max(const T* s, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  T acc[kLanes];
  for (auto& a : acc) a = -std::numeric_limits<T>::infinity();
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) acc[l] = s[j + l] > acc[l] ? s[j + l] : acc[l];
  T m = -std::numeric_limits<T>::infinity();
  for (std::size_t l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// The largest float score of a row and whether all are finite: ops/row_max.hpp.
using row_max_detail::row_max_finite;
inline double row_max_finite(const double* s, std::size_t n, bool& finite) {
  finite = all_finite(s, n);
  return row_max(s, n);
}

inline double exp_shift_sum(double* s, std::size_t n, double m, bool) {
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    double e = std::exp(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
}

// ---------------------------------------------------------------------------------
// Storing rows in the output dtype.

template <class T>
void store(DType dt, std::byte* base, std::size_t offset, std::ptrdiff_t stride, const T* src,
           std::size_t n, T mul) {
  switch (dt) {
    case DType::f32: {
      float* p = reinterpret_cast<float*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) p[j * stride] = static_cast<float>(src[j] * mul);
      break;
    }
    case DType::f64: {
      double* p = reinterpret_cast<double*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) p[j * stride] = static_cast<double>(src[j] * mul);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      auto* p = reinterpret_cast<std::uint16_t*>(base) + offset;
      const bool half = dt == DType::f16;
      if (stride == 1) {
        // Rows in place: rounded by the vectorised conversion, in pieces that stay in the
        // L1 cache (element by element, an f16 probs output took three times as long as
        // the f32 one). The same bits as below.
        constexpr std::size_t kPiece = 512;
        T scaled[kPiece];
        for (std::size_t j0 = 0; j0 < n; j0 += kPiece) {
          const std::size_t m = std::min(kPiece, n - j0);
          for (std::size_t j = 0; j < m; ++j) scaled[j] = src[j0 + j] * mul;
          detail::narrow(dtype_of<T>(), scaled, dt, p + j0, m);
        }
        break;
      }
      for (std::size_t j = 0; j < n; ++j) {
        const T v = src[j] * mul;
        if constexpr (std::is_same_v<T, double>) {
          p[j * stride] = half ? double_to_half(v) : double_to_bf16(v);
        } else {
          p[j * stride] = half ? float_to_half(static_cast<float>(v)) : float_to_bf16(v);
        }
      }
      break;
    }
    default:
      break;
  }
}

template <class T>
void fill(DType dt, std::byte* base, std::size_t offset, std::ptrdiff_t stride, std::size_t n,
          double v) {
  T one = 1;
  std::vector<T> tmp(n, static_cast<T>(v));
  store<T>(dt, base, offset, stride, tmp.data(), n, one);
}

template <class T>
[[noreturn]] void overflow(std::size_t b, std::size_t h, std::size_t q0) {
  throw InputError(fmt::format(
      "attention scores overflow {} for finite inputs (batch {}, head {}, queries from {}): "
      "|scale * q.k| plus biases exceeds {:g}{}",
      std::is_same_v<T, float> ? "f32" : "f64", b, h, q0, std::numeric_limits<T>::max(),
      std::is_same_v<T, float> ? "; compute in f64 (the default) without --precision f32" : ""));
}

}  // namespace

// A work item is (batch, query head, query block). Its rows' running softmax state
// lives in a Scratch: item_begin sets it up, item_keys folds in key blocks (in order,
// each block of P.bl.k keys from a multiple of P.bl.k), item_end normalises and
// stores. Whether the keys come in one piece (in memory) or in chunks (streamed from
// a file), the blocks and so the bits are the same.
template <class T>
void item_begin(const Plan<T>& P, Scratch<T>& w, std::size_t bi, std::size_t hi_q,
                std::size_t q0) {
  const Geometry& g = P.g;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0);
  const T* qp = P.q.p + bi * P.q.b + hi_q * P.q.h + q0 * P.q.s;
  const bool need_v = P.has_v && g.emit_output;
  const std::size_t dv = g.dv;
  const T neg_inf = -std::numeric_limits<T>::infinity();

  w.m.assign(qn, neg_inf);
  w.l.assign(qn, 0.0);
  if (need_v) w.o.assign(qn * dv, T(0));
  if (P.R) {
    w.qr.resize(qn * P.R);
    gemm(true, qn, P.R, g.d, P.scale, qp, P.q.s, P.rel_k.data() + hi_q * P.rel_k_head, g.d, T(0),
         w.qr.data());
    if (need_v && !P.rel_v.empty()) w.bucket.assign(qn * P.R, T(0));
  }
  if (P.dec.on()) {
    const std::size_t cols = P.dec.cols();
    w.dec.resize(qn * cols);
    for (std::size_t r = 0; r < qn; ++r) P.dec.row(qp + r * P.q.s, q0 + r, w.dec.data() + r * cols);
  }
  if (!P.sinks.empty()) {
    T sink = P.sinks[hi_q];
    if (sink > neg_inf) {
      std::fill(w.m.begin(), w.m.end(), sink);
      std::fill(w.l.begin(), w.l.end(), 1.0);  // exp(sink - sink)
    }
  }
  w.lo.resize(qn);
  w.hi.resize(qn);
  w.slo.resize(qn);
  w.shi.resize(qn);
  std::tie(w.lo_min, w.hi_max) =
      item_key_range(P, bi, q0, w.lo.data(), w.hi.data(), w.slo.data(), w.shi.data());
}

// The online softmax update of row r with its scores s[0, n) (mt: their maximum over
// the keys the row sees): the running maximum and sum, s turned into exponentials, and
// the row's output (and Shaw value buckets) scaled to the new maximum. The scale factor,
// or nothing when every score so far is -inf or NaN (s zeroed; row_max skips NaN, so a
// NaN must still poison the row's sum rather than make it look fully masked).
template <class T>
std::optional<T> online_update(const Plan<T>& P, Scratch<T>& w, std::size_t r, T* s,
                               std::size_t n, T mt, bool need_v) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T m_old = w.m[r];
  const T m_new = std::max(m_old, mt);
  if (m_new == neg_inf) {
    if (std::any_of(s, s + n, [](T x) { return x != x; })) {
      w.l[r] = std::numeric_limits<double>::quiet_NaN();
    }
    std::fill(s, s + n, T(0));
    return std::nullopt;
  }
  const double alpha = m_old == neg_inf ? 0.0 : std::exp(static_cast<double>(m_old - m_new));
  // Scores checked finite cannot be NaN; masked ones are -inf and give 0.
  const double sum = exp_shift_sum(s, n, m_new, !P.check_overflow);
  w.l[r] = w.l[r] * alpha + sum;
  w.m[r] = m_new;
  const T a = static_cast<T>(alpha);
  if (alpha != 1.0) {
    const std::size_t dv = P.g.dv;
    if (need_v) {
      for (std::size_t c = 0; c < dv; ++c) w.o[r * dv + c] *= a;
    }
    for (std::size_t c = 0; !w.bucket.empty() && c < P.R; ++c) w.bucket[r * P.R + c] *= a;
  }
  return a;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) bool all_finite(const float* p,
                                                                             std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= static_cast<std::uint32_t>((__builtin_bit_cast(std::uint32_t, p[i]) & 0x7f800000u) ==
                                      0x7f800000u);
  }
  return bad == 0;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) bool widen_f32(const float* src,
                                                                             double* dst,
                                                                             std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = src[i];
    bad |= static_cast<std::uint32_t>(
        (__builtin_bit_cast(std::uint32_t, src[i]) & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// The scores S of rows [r0, r1) of the item against keys [j0, j0 + n) (the products,
// row by row n apart) made the rows' exponentials: the score terms, the range masks, the
// logits stored, the online softmax update (and Shaw's value buckets).
template <class T>
void fold_rows(const Plan<T>& P, Scratch<T>& w, T* S, std::size_t r0, std::size_t r1,
               std::size_t j0, std::size_t n, std::size_t bi, std::size_t hi_q, std::size_t q0,
               bool need_v) {
  const Geometry& g = P.g;
  const std::size_t rows = r1 - r0;
  const std::int64_t j0i = static_cast<std::int64_t>(j0);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t sk = static_cast<std::int64_t>(g.sk);
  const std::int64_t sq = static_cast<std::int64_t>(g.sq);
  const std::size_t ndist = g.sq + g.sk - 1;
  const T* t5row = P.t5.empty() ? nullptr : P.t5.data() + hi_q * ndist;
  const double slope = P.alibi ? P.slopes[bi * P.slope_b + hi_q] : 0.0;
  const std::int64_t alibi_sk = sq + P.rules.offset(bi);  // the entry's own k_len
  // Overflow check: over the whole tile before the biases (a soft-cap would hide an
  // infinite product), else row by row over the keys the row sees, with its maximum.
  const bool per_element = P.per_element();
  if (P.check_overflow && per_element && !all_finite(S, rows * n)) overflow<T>(bi, hi_q, q0);
  for (std::size_t r = r0; r < r1; ++r) {
    T* s = S + (r - r0) * n;
    const std::int64_t i = static_cast<std::int64_t>(q0 + r);
    const std::int64_t qpos = i + P.off;
    if (P.dec.on()) {
      // SAM's terms first, on the scaled scores as HF adds them: (s + rel_h) + rel_w.
      const T* dr = w.dec.data() + r * P.dec.cols();
      for (std::size_t jj = 0; jj < n; ++jj) {
        const std::size_t jk = j0 + jj;
        s[jj] = s[jj] + dr[jk / P.dec.kw] + dr[P.dec.kh + jk % P.dec.kw];
      }
    }
    if (per_element) {
      const T* qr = P.R ? w.qr.data() + r * P.R : nullptr;
      // WavLM's gate on the T5 row (1 without one: 1 * t is t, bit for bit).
      const T gate5 = P.t5_gate.empty() ? T(1) : P.t5_gate[(bi * g.hq + hi_q) * g.sq + q0 + r];
      const T* br = P.bias ? P.bias + ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.sk : nullptr;
      const std::int64_t dshift = sk - 1 - qpos;  // distance index = j + dshift
      std::ptrdiff_t mbase = bi * P.m_b + hi_q * P.m_h + i * P.m_i;
      const T temp = static_cast<T>(P.rules.temperature(qpos));
      for (std::size_t jj = 0; jj < n; ++jj) {
        const std::int64_t j = j0i + static_cast<std::int64_t>(jj);
        T x = s[jj];
        if (qr) x += qr[P.rel_index[j + dshift]];
        if (P.rules.scales_queries()) x *= temp;
        if (br) x += br[j];
        if (P.softcap > 0) x = P.softcap * std::tanh(x / P.softcap);
        if (P.alibi) x += static_cast<T>(alibi_bias(*P.alibi, slope, i, j, sq, alibi_sk));
        if (t5row) x += gate5 * t5row[j + dshift];
        if (P.check_overflow && !(std::abs(x) <= std::numeric_limits<T>::max())) {
          overflow<T>(bi, hi_q, q0);
        }
        if (P.has_add_mask) x += P.add_mask[mbase + j * P.m_j];
        if (P.has_keep_mask && !P.keep_mask[mbase + j * P.m_j]) x = neg_inf;
        s[jj] = x;
      }
    }
    // Range masks: keys [a, e) of the block are seen, and the sink tokens [sa, se)
    // (before a when both are in the block: KeySpan).
    auto clip = [&](std::int64_t lo, std::int64_t hi) {
      lo -= j0i, hi -= j0i;
      if (lo > hi || hi < 0 || lo >= static_cast<std::int64_t>(n)) {
        return std::pair<std::size_t, std::size_t>{0, 0};
      }
      return std::pair<std::size_t, std::size_t>{
          static_cast<std::size_t>(std::max<std::int64_t>(lo, 0)),
          static_cast<std::size_t>(std::min<std::int64_t>(hi + 1, static_cast<std::int64_t>(n)))};
    };
    const auto [a, e] = clip(w.lo[r], w.hi[r]);
    const auto [sa, se] = clip(w.slo[r], w.shi[r]);
    // The maximum over the seen keys (the masked ones are -inf).
    T mt = neg_inf;
    for (const auto& [x0, x1] : {std::pair{sa, se}, std::pair{a, e}}) {
      if (x0 >= x1) continue;
      bool finite = true;
      mt = std::max(mt, row_max_finite(s + x0, x1 - x0, finite));
      if (P.check_overflow && !per_element && !finite) overflow<T>(bi, hi_q, q0);
    }
    if (sa < se) {
      std::fill(s, s + sa, neg_inf);
      std::fill(s + se, s + (a < e ? a : n), neg_inf);
      if (a < e) std::fill(s + e, s + n, neg_inf);
    } else {
      std::fill(s, s + a, neg_inf);
      std::fill(s + e, s + n, neg_inf);
    }
    if (P.logits) {
      store<T>(g.out, P.logits, ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.cols() + j0, 1, s, n,
               T(1));
    }
    if (!online_update(P, w, r, s, n, mt, need_v)) continue;
    if (!w.bucket.empty()) {
      const std::int64_t dshift = sk - 1 - qpos;
      T* bk = w.bucket.data() + r * P.R;
      for (std::size_t jj = 0; jj < n; ++jj) {
        bk[P.rel_index[j0i + static_cast<std::int64_t>(jj) + dshift]] += s[jj];
      }
    }
  }
}

template <class T>
std::pair<std::int64_t, std::int64_t> keys_seen(const Scratch<T>& w, std::size_t r0, std::size_t r1,
                                                std::int64_t b0, std::int64_t b1) {
  std::int64_t a = b1, e = b0 - 1;
  for (std::size_t r = r0; r < r1; ++r) {
    if (w.slo[r] <= w.shi[r] && w.slo[r] < b1 && w.shi[r] >= b0) {
      a = std::min(a, std::max(b0, w.slo[r]));
      e = std::max(e, std::min(b1 - 1, w.shi[r]));
    }
    if (w.lo[r] > w.hi[r]) continue;
    a = std::min(a, std::max(b0, w.lo[r]));
    e = std::max(e, std::min(b1 - 1, w.hi[r]));
  }
  return {a, e};
}

template <class T>
std::size_t item_rows(const Plan<T>& P, std::size_t bi, std::size_t q0) {
  std::size_t qn = std::min(P.bl.q, P.g.sq - q0);
  if (!P.g.materialise()) qn = std::min(qn, P.rules.rows_used(bi, q0));
  return qn;
}

template <class T>
bool folds_tiled(const Plan<T>& P, std::size_t rows) {
  return rows == 1 && !P.g.materialise() && values_in_tiles(P.g.dv);
}

// Key blocks [j_begin, j_end) of the item; K and V view the keys from c0 on (all of
// them in memory, or the chunk read last).
template <class T>
void item_keys(const Plan<T>& P, Scratch<T>& w, std::vector<T>& tile, const View<T>& K,
               const View<T>& V, std::size_t c0, std::size_t bi, std::size_t hi_q,
               std::size_t q0, std::size_t j_begin, std::size_t j_end) {
  const Geometry& g = P.g;
  // Padded query rows (seqused_q) see no key and take no part in the products, so an
  // entry's rows are computed as in a run of its own (the same bits); with logits or
  // probs every row is stored, and folded.
  const std::size_t qn = item_rows(P, bi, q0);
  const std::size_t kvh = hi_q / (g.hq / g.hk);
  const T* qp = P.q.p + bi * P.q.b + hi_q * P.q.h + q0 * P.q.s;
  const T* kp = K.p + bi * K.b + kvh * K.h;
  const T* vp = V.p ? V.p + bi * V.b + kvh * V.h : nullptr;
  const bool need_v = vp && g.emit_output;
  const std::size_t kB = P.bl.k;
  const std::size_t dv = g.dv;
  if (tile.size() < qn * kB) tile.resize(qn * kB);

  // Rows [r0, r1) of the item against keys [j0, j0 + n) of the block: the scores, the
  // online softmax update and the product with V.
  auto fold = [&](std::size_t r0, std::size_t r1, std::size_t j0, std::size_t n) {
    const std::size_t rows = r1 - r0;
    T* S = tile.data() + r0 * n;  // (fits: r0 * n + rows * n <= qn * kB)
    gemm(true, rows, n, g.d, P.scale, qp + r0 * P.q.s, P.q.s, kp + (j0 - c0) * K.s, K.s, T(0),
         S, K.strided);
    fold_rows(P, w, S, r0, r1, j0, n, bi, hi_q, q0, need_v);
    if (need_v) {
      gemm(false, rows, dv, n, T(1), S, n, vp + (j0 - c0) * V.s, V.s, T(1), w.o.data() + r0 * dv,
           V.strided);
    }
  };

  for (std::size_t jb = j_begin; jb < j_end; jb += kB) {
    const std::size_t nb = std::min(kB, j_end - jb);
    if (g.materialise()) {
      fold(0, qn, jb, nb);  // logits and probs need every -inf
      continue;
    }
    // Only the keys some row sees: a block no row of the item sees is skipped, the
    // edges of one seen in part (the causal diagonal, window edges, padding) are cut
    // off, for each group of kRowGroup rows on its own when their ranges differ, so
    // that at most a kRowGroup-wide triangle of the causal diagonal is computed and
    // masked (a 256 x 256 triangle was 6% of the FLOPs of a causal run at s 4096).
    const std::int64_t b0 = static_cast<std::int64_t>(jb), b1 = b0 + static_cast<std::int64_t>(nb);
    auto cut = [&](std::size_t r0, std::size_t r1) { return keys_seen(w, r0, r1, b0, b1); };
    const auto whole = cut(0, qn);
    if (whole.first > whole.second) continue;
    bool same = true;
    for (std::size_t r0 = 0; r0 < qn && same; r0 += kRowGroup) {
      same = cut(r0, std::min(qn, r0 + kRowGroup)) == whole;
    }
    for (std::size_t r0 = 0; r0 < qn; r0 += same ? qn : kRowGroup) {
      const std::size_t r1 = same ? qn : std::min(qn, r0 + kRowGroup);
      const auto [a, e] = same ? whole : cut(r0, r1);
      if (a <= e) fold(r0, r1, static_cast<std::size_t>(a), static_cast<std::size_t>(e - a + 1));
    }
  }
}

bool half_tiles_fused() {
  static const bool on = own_gemv::vector_isa() && own_gemv::avx512_isa() &&
                         __builtin_cpu_supports("f16c");
  return on;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) bool half_finite(const std::uint16_t* p,
                                                                     std::size_t n) {
  const __m512i exp = _mm512_set1_epi16(0x7c00);
  __mmask32 special = 0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i) + widen_detail::kPrefetchBytes,
                 _MM_HINT_T0);
    const __m512i x = _mm512_loadu_si512(p + i);
    special |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exp), exp);
  }
  bool bad = special != 0;
  for (; i < n; ++i) bad |= (p[i] & 0x7c00) == 0x7c00;
  return !bad;
}

template <class T>
void fold_tiled(const Plan<T>& P, Scratch<T>* ws, std::size_t gs, std::size_t bi, std::size_t h0,
                std::size_t q0, std::size_t a, std::size_t e, const KeyTiles<T>& k,
                const KeyTiles<T>* v, const HalfTiles* hk, const HalfTiles* hv) {
  const Geometry& g = P.g;
  const std::size_t n = e - a + 1;
  const bool need_v = v && g.emit_output;
  // f16 K or V taken in place, widened in registers (f32 arithmetic only).
  if constexpr (std::is_same_v<T, float>) {
    if (!half_scores_fit(g.d, P.scale)) hk = nullptr;
    if (!half_values_fit(g.dv)) hv = nullptr;
  } else {
    hk = hv = nullptr;
  }
  for (std::size_t i = 0; i < gs; ++i) {
    if (ws[i].s.size() < n) ws[i].s.resize(std::max(n, P.bl.k));
  }
  // Each tile of K for every head while it is in the L1 cache, then the rows, then each
  // tile of V for every head.
  for (std::size_t j = a; j <= e; j += kKeyTile) {
    const std::size_t m = std::min(kKeyTile, e + 1 - j);
    if constexpr (std::is_same_v<T, float>) {
      if (hk) {
        const std::uint16_t* kh = (*hk)(j, m);
        constexpr std::size_t kMaxHalfHeads = 4;  // as gemv_scores_heads takes them
        float* sp[kMaxHalfHeads];
        const float* qp[kMaxHalfHeads];
        for (std::size_t i0 = 0; i0 < gs; i0 += kMaxHalfHeads) {
          const std::size_t hn = std::min(kMaxHalfHeads, gs - i0);
          for (std::size_t i = 0; i < hn; ++i) {
            qp[i] = P.q.p + bi * P.q.b + (h0 + i0 + i) * P.q.h + q0 * P.q.s;
            sp[i] = ws[i0 + i].s.data() + (j - a);
          }
          half_scores_heads(qp, hn, kh, m, g.d, P.scale, sp);
        }
        continue;
      }
    }
    const T* kt = k(j, m);
    for (std::size_t i0 = 0; i0 < gs; i0 += 4) {
      const std::size_t hn = std::min<std::size_t>(4, gs - i0);
      const T* qp[4];
      T* sp[4];
      for (std::size_t i = 0; i < hn; ++i) {
        qp[i] = P.q.p + bi * P.q.b + (h0 + i0 + i) * P.q.h + q0 * P.q.s;
        sp[i] = ws[i0 + i].s.data() + (j - a);
      }
      gemv_scores_heads(qp, hn, kt, m, g.d, P.scale, sp);
    }
  }
  for (std::size_t i = 0; i < gs; ++i) {
    fold_rows(P, ws[i], ws[i].s.data(), 0, 1, a, n, bi, h0 + i, q0, need_v);
  }
  if (!need_v) return;
  for (std::size_t j = a; j <= e; j += kKeyTile) {
    const std::size_t m = std::min(kKeyTile, e + 1 - j);
    if constexpr (std::is_same_v<T, float>) {
      if (hv) {
        const std::uint16_t* vh = (*hv)(j, m);
        for (std::size_t i = 0; i < gs; ++i) {
          half_values(ws[i].s.data() + (j - a), vh, m, g.dv, ws[i].o.data());
        }
        continue;
      }
    }
    const T* vt = (*v)(j, m);
    for (std::size_t i = 0; i < gs; ++i) {
      gemv_values(ws[i].s.data() + (j - a), vt, m, g.dv, T(1), T(1), ws[i].o.data());
    }
  }
}

// LongT5's side keys (attention_global.hpp) folded into the item's rows after all its
// key blocks, as one more block of P.global.n keys: scores scale q.kg plus the bias by
// block distance, HF's side mask, the online softmax update, the product with the side
// values. In item_end, so that every run (in memory, chunked, in place) folds them the
// same way. w.side keeps the rows' exponentials for the probs, w.side_alpha the factor
// of the key-block exponentials kept in the tile.
template <class T>
void item_global(const Plan<T>& P, Scratch<T>& w, std::size_t bi, std::size_t hi_q,
                 std::size_t q0) {
  const Geometry& g = P.g;
  const GlobalKeys<T>& G = P.global;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0), n = G.n, dv = g.dv;
  const std::size_t kvh = hi_q / (g.hq / g.hk);
  const bool need_v = P.has_v && g.emit_output;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* qp = P.q.p + bi * P.q.b + hi_q * P.q.h + q0 * P.q.s;
  w.side.resize(qn * n);
  w.side_alpha.assign(qn, T(1));
  gemm(true, qn, n, g.d, P.scale, qp, P.q.s, G.k.data() + (bi * g.hk + kvh) * n * g.d, g.d, T(0),
       w.side.data());
  if (P.check_overflow && !all_finite(w.side.data(), qn * n)) overflow<T>(bi, hi_q, q0);
  const T* bias = G.bias.empty() ? nullptr : G.bias.data() + hi_q * 2 * n;
  for (std::size_t r = 0; r < qn; ++r) {
    T* s = w.side.data() + r * n;
    const std::size_t tok = bi * g.sq + q0 + r;
    const std::uint8_t valid = G.valid[tok];
    // Index of g - block(i) in the bias: g - block + n - 1.
    const std::int64_t shift = static_cast<std::int64_t>(n) - 1 - G.ids[tok];
    for (std::size_t c = 0; c < n; ++c) {
      T x = s[c];
      if (bias) x += bias[static_cast<std::int64_t>(c) + shift];
      if (P.check_overflow && !(std::abs(x) <= std::numeric_limits<T>::max())) {
        overflow<T>(bi, hi_q, q0);
      }
      s[c] = G.seg[bi * n + c] == valid ? x : neg_inf;
    }
    if (P.logits) {
      store<T>(g.out, P.logits, ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.cols() + g.sk, 1, s, n,
               T(1));
    }
    if (const auto a = online_update(P, w, r, s, n, row_max(s, n), need_v)) w.side_alpha[r] = *a;
  }
  if (need_v) {
    gemm(false, qn, dv, n, T(1), w.side.data(), n, G.v.data() + (bi * g.hk + kvh) * n * dv, dv,
         T(1), w.o.data());
  }
}

// Normalises the item's rows and stores them; `tile` holds the whole score rows when
// probs are materialised.
template <class T>
void item_end(const Plan<T>& P, Scratch<T>& w, const std::vector<T>& tile, std::size_t bi,
              std::size_t hi_q, std::size_t q0) {
  const Geometry& g = P.g;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0);
  const bool need_v = P.has_v && g.emit_output;
  const std::size_t dv = g.dv;
  if (P.global.on()) item_global(P, w, bi, hi_q, q0);
  if (need_v && !w.bucket.empty()) {
    gemm(false, qn, dv, P.R, T(1), w.bucket.data(), P.R, P.rel_v.data(), dv, T(1), w.o.data());
  }
  // Normalise and store: into the output, or into out_rows for the sink (rows of an
  // item are then contiguous: out_st.s == dv).
  const std::size_t out0 = bi * P.out_st.b + hi_q * P.out_st.h + q0 * P.out_st.s;
  std::byte* out = P.out;
  std::size_t out_at = out0;
  if (P.out_sink) {
    w.out_rows.resize(qn * dv * dtype_size(g.out));
    out = w.out_rows.data();
    out_at = 0;
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if (P.logits && w.lo_min > w.hi_max) {
    // No row of the item sees a key: a run that folds only the blocks some row sees (K
    // and V used in place) stored none of their logits, which are all masked.
    for (std::size_t r = 0; r < qn; ++r) {
      fill<T>(g.out, P.logits, ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.cols(), 1, g.sk,
              -kInf);
    }
  }
  for (std::size_t r = 0; r < qn; ++r) {
    const std::size_t row = (bi * g.hq + hi_q) * g.sq + q0 + r;
    const double l = w.l[r];
    const bool empty = !(l > 0) && !std::isnan(l);
    T inv = empty ? T(0) : static_cast<T>(1.0 / l);
    if (empty && P.masked_rows == MaskedRows::nan) inv = nan;
    if (P.probs) {
      const T* s = tile.data() + r * g.sk;  // one block when probs are materialised
      if (empty) {
        fill<T>(g.out, P.probs, row * g.cols(), 1, g.cols(), static_cast<double>(inv));
      } else if (P.global.on()) {
        store<T>(g.out, P.probs, row * g.cols(), 1, s, g.sk, inv * w.side_alpha[r]);
        store<T>(g.out, P.probs, row * g.cols() + g.sk, 1, w.side.data() + r * P.global.n,
                 P.global.n, inv);
      } else {
        store<T>(g.out, P.probs, row * g.sk, 1, s, g.sk, inv);
      }
    }
    if (out) {
      const std::size_t off = out_at + r * P.out_st.s;
      if (empty) {
        fill<T>(g.out, out, off, P.out_st.d, dv, static_cast<double>(inv));
      } else {
        store<T>(g.out, out, off, P.out_st.d, w.o.data() + r * dv, dv, inv);
      }
    }
    if (P.lse) {
      double v = empty ? -kInf : static_cast<double>(w.m[r]) + std::log(l);
      if (g.lse == DType::f64) {
        reinterpret_cast<double*>(P.lse)[row] = v;
      } else {
        reinterpret_cast<float*>(P.lse)[row] = static_cast<float>(v);
      }
    }
  }
  if (P.out_sink) P.out_sink->write_at(out0, out, qn * dv);
}

template <class T>
void run_items(const Plan<T>& P, std::vector<Scratch<T>>& ws, std::size_t bi, std::size_t h0,
               std::size_t q0) {
  const std::size_t n = ws.size();
  for (std::size_t i = 0; i < n; ++i) item_begin(P, ws[i], bi, h0 + i, q0);
  const Geometry& g = P.g;
  const std::size_t kvh = h0 / (g.hq / g.hk);
  // Rows of a head's keys contiguous (bhsd): each tile of keys read once for the heads.
  auto contiguous = [](const View<T>& x, std::size_t width) {
    return !x.strided && x.s == static_cast<std::ptrdiff_t>(width);
  };
  if (n > 1 && folds_tiled(P, item_rows(P, bi, q0)) && contiguous(P.k, g.d) &&
      (!P.v.p || contiguous(P.v, g.dv))) {
    const T* kp = P.k.p + bi * P.k.b + kvh * P.k.h;
    const T* vp = P.v.p ? P.v.p + bi * P.v.b + kvh * P.v.h : nullptr;
    const KeyTiles<T> kt = [&](std::size_t j, std::size_t) { return kp + j * g.d; };
    const KeyTiles<T> vt = [&](std::size_t j, std::size_t) { return vp + j * g.dv; };
    const std::size_t kB = std::max<std::size_t>(P.bl.k, 1);
    for (std::size_t j0 = 0; j0 < g.sk; j0 += kB) {
      const std::int64_t b0 = static_cast<std::int64_t>(j0);
      const auto [a, e] =
          keys_seen(ws[0], 0, 1, b0, b0 + static_cast<std::int64_t>(std::min(kB, g.sk - j0)));
      if (a > e) continue;
      fold_tiled(P, ws.data(), n, bi, h0, q0, static_cast<std::size_t>(a),
                 static_cast<std::size_t>(e), kt, vp ? &vt : nullptr);
    }
  } else if (n == 1) {
    item_keys(P, ws[0], ws[0].s, P.k, P.v, 0, bi, h0, q0, 0, P.g.sk);
  } else {
    const std::size_t kB = std::max<std::size_t>(P.bl.k, 1);
    for (std::size_t j0 = 0; j0 < P.g.sk; j0 += kB) {
      const std::size_t j1 = std::min(j0 + kB, P.g.sk);
      for (std::size_t i = 0; i < n; ++i) {
        item_keys(P, ws[i], ws[i].s, P.k, P.v, 0, bi, h0 + i, q0, j0, j1);
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) item_end(P, ws[i], ws[i].s, bi, h0 + i, q0);
}

void row_scores_f32(const float* a, const float* b, std::size_t n, std::size_t d, float alpha,
                    float* c) {
  gemv_scores(a, b, n, d, alpha, 0.0f, c);
}

void row_values_f32(const float* a, const float* b, std::size_t n, std::size_t dv, float* c) {
  gemv_values(a, b, n, dv, 1.0f, 1.0f, c);
}

void row_scores_f64(const double* a, const double* b, std::size_t n, std::size_t d, double alpha,
                    double* c) {
  gemv_scores(a, b, n, d, alpha, 0.0, c);
}

void row_values_f64(const double* a, const double* b, std::size_t n, std::size_t dv, double* c) {
  gemv_values(a, b, n, dv, 1.0, 1.0, c);
}

void row_scores_heads_f64(const double* const* q, std::size_t gs, const double* b, std::size_t n,
                          std::size_t d, double alpha, double* const* c) {
  gemv_scores_heads(q, gs, b, n, d, alpha, c);
}

void row_scores_heads_f32(const float* const* q, std::size_t gs, const float* b, std::size_t n,
                          std::size_t d, float alpha, float* const* c) {
  gemv_scores_heads(q, gs, b, n, d, alpha, c);
}

double row_exp_f32(float* s, std::size_t n, float m, bool avx512) {
  return avx512 ? exp_shift_sum_avx512(s, n, m, false) : exp_shift_sum_lanes(s, n, m, false);
}

#define POSENC_ATTENTION_KERNEL(T)                                                                 \
  template void item_begin<T>(const Plan<T>&, Scratch<T>&, std::size_t, std::size_t, std::size_t); \
  template void item_keys<T>(const Plan<T>&, Scratch<T>&, std::vector<T>&, const View<T>&,         \
                             const View<T>&, std::size_t, std::size_t, std::size_t, std::size_t,   \
                             std::size_t, std::size_t);                                            \
  template void item_end<T>(const Plan<T>&, Scratch<T>&, const std::vector<T>&, std::size_t,       \
                            std::size_t, std::size_t);                                             \
  template void run_items<T>(const Plan<T>&, std::vector<Scratch<T>>&, std::size_t, std::size_t,   \
                             std::size_t);                                                         \
  template std::pair<std::int64_t, std::int64_t> keys_seen<T>(                                     \
      const Scratch<T>&, std::size_t, std::size_t, std::int64_t, std::int64_t);                    \
  template std::size_t item_rows<T>(const Plan<T>&, std::size_t, std::size_t);                     \
  template bool folds_tiled<T>(const Plan<T>&, std::size_t);                                       \
  template void fold_tiled<T>(const Plan<T>&, Scratch<T>*, std::size_t, std::size_t, std::size_t,  \
                              std::size_t, std::size_t, std::size_t, const KeyTiles<T>&,           \
                              const KeyTiles<T>*, const HalfTiles*, const HalfTiles*);
POSENC_ATTENTION_KERNEL(float)
POSENC_ATTENTION_KERNEL(double)
#undef POSENC_ATTENTION_KERNEL

}  // namespace posenc::attention_detail
