// RoPE kernel bandwidth against memcpy of the same bytes, timed alternately in one run
// (this machine is shared and noisy: only same-run ratios mean something).
//
//   bench_rope [--dtype f32|f16|bf16|f64] [--style neox|gptj] [--threads N]
//              [--axes bshd|bhsd] [--seq S] [--heads H] [--dim D] [--reps N]
//              [--precision f64|f32]
//
// Default: f32 [1, 16384, 32, 128] bshd = 256 MiB, the perf-anchors.md shape.
//
// For f16 neox bshd on a CPU with AVX-512 the same run also times `plain`: a float32 loop
// on the same buffers and positions without the exact-rounding test (its results
// may differ from posenc's in the last bit). It is the ceiling of any float32 kernel
// here: what posenc's would reach if the test cost nothing.

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/ops/rope_kernel.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/tensor.hpp"

// GCC 12 warns about the deliberately undefined upper lanes inside its own AVX-512
// headers (_mm512_undefined_*), as in src/ops/rope_kernel_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// memcpy split into one contiguous chunk per thread, as the RoPE kernel splits rows.
void parallel_copy(std::byte* dst, const std::byte* src, std::size_t n) {
#pragma omp parallel
  {
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t lo = n * t / nt, hi = n * (t + 1) / nt;
    std::memcpy(dst + lo, src + lo, hi - lo);
  }
}

// f16 neox [seq, heads, dim] in float32: y = a c - b s, b c + a s from a float32 table
// (rows of dim/2 cosines then dim/2 sines), no rounding test. Needs dim a multiple of 32.
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void plain_f16(
    const std::uint16_t* x, std::uint16_t* y, const float* table, std::size_t seq,
    std::size_t heads, std::size_t dim) {
  const std::size_t half = dim / 2;
  const bool stream = reinterpret_cast<std::uintptr_t>(y) % 32 == 0;
  for (std::size_t s = 0; s < seq; ++s) {
    const float* c = table + s * dim;
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t off = (s * heads + h) * dim;
      for (std::size_t j = 0; j < half; j += 16) {
        const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + off + j)));
        const __m512 b =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + off + half + j)));
        const __m512 cj = _mm512_loadu_ps(c + j), sj = _mm512_loadu_ps(c + half + j);
        const __m256i lo = _mm512_cvtps_ph(_mm512_fmsub_ps(a, cj, _mm512_mul_ps(b, sj)), 0);
        const __m256i hi = _mm512_cvtps_ph(_mm512_fmadd_ps(b, cj, _mm512_mul_ps(a, sj)), 0);
        auto* p = reinterpret_cast<__m256i*>(y + off + j);
        auto* q = reinterpret_cast<__m256i*>(y + off + half + j);
        if (stream) {
          _mm256_stream_si256(p, lo), _mm256_stream_si256(q, hi);
        } else {
          _mm256_storeu_si256(p, lo), _mm256_storeu_si256(q, hi);
        }
      }
    }
  }
  _mm_sfence();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype = "f32", style = "neox", axes = "bshd", precision = "f64";
  int threads = 1, reps = 7;
  std::size_t seq = 16384, heads = 32, dim = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dtype") dtype = v;
    else if (k == "--style") style = v;
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--axes") axes = v;
    else if (k == "--seq") seq = std::stoul(v);
    else if (k == "--heads") heads = std::stoul(v);
    else if (k == "--dim") dim = std::stoul(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--precision") precision = v;
  }
  omp_set_num_threads(threads);
  const posenc::DType dt = posenc::parse_dtype(dtype);
  const posenc::Shape shape = axes == "bshd" ? posenc::Shape{1, seq, heads, dim}
                                             : posenc::Shape{1, heads, seq, dim};
  posenc::RopeParams p;
  p.style = posenc::parse_rope_style(style);
  p.head_dim = static_cast<int>(dim);
  const posenc::RopeFreqs f = posenc::compute_rope_freqs(p);
  posenc::RopeApplyOptions opt;
  opt.precision = precision == "f32" ? posenc::Precision::f32 : posenc::Precision::f64;
  posenc::RopeApplier ap(shape, dt, posenc::Axes{axes}, f, posenc::Positions{}, opt, dt, "bench");

  posenc::Tensor x(dt, shape), y(dt, shape), z(dt, shape);
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.001 * static_cast<double>(i)));
  std::memset(y.bytes(), 0, y.nbytes());
  std::memset(z.bytes(), 0, z.nbytes());
  ap.rows(x.bytes(), y.bytes(), 0, shape[0]);  // builds the table once (cached after)

  const double bytes = 2.0 * static_cast<double>(x.nbytes());  // read + write
  const bool plain = dt == posenc::DType::f16 && p.style == posenc::RopeStyle::neox &&
                     axes == "bshd" && dim % 32 == 0 && __builtin_cpu_supports("avx512f");
  std::vector<float> table(plain ? seq * dim : 0);
  for (std::size_t s = 0; plain && s < seq; ++s) {
    for (std::size_t j = 0; j < dim / 2; ++j) {
      const double a = static_cast<double>(s) * f.inv_freq[j];
      table[s * dim + j] = static_cast<float>(std::cos(a));
      table[s * dim + dim / 2 + j] = static_cast<float>(std::sin(a));
    }
  }
  double best_copy = 1e30, best_rope = 1e30, best_plain = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_copy(z.bytes(), x.bytes(), x.nbytes());
    best_copy = std::min(best_copy, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    ap.rows(x.bytes(), y.bytes(), 0, shape[0]);
    best_rope = std::min(best_rope, seconds_since(t0));
    if (plain) {
      t0 = std::chrono::steady_clock::now();
      plain_f16(reinterpret_cast<const std::uint16_t*>(x.bytes()),
                reinterpret_cast<std::uint16_t*>(z.bytes()), table.data(), seq, heads, dim);
      best_plain = std::min(best_plain, seconds_since(t0));
    }
  }
  std::printf("%-5s %-5s %-4s prec=%s isa=%s threads=%d size=%zu MiB  memcpy %6.2f GB/s  "
              "rope %6.2f GB/s  ratio %.2f\n",
              dtype.c_str(), style.c_str(), axes.c_str(), precision.c_str(),
              posenc::rope_detail::kernel_isa(), threads,
              x.nbytes() >> 20, bytes / best_copy * 1e-9, bytes / best_rope * 1e-9,
              best_copy / best_rope);
  if (plain) {
    std::printf("  plain float32 loop, no rounding test: %6.2f GB/s  ratio %.2f\n",
                bytes / best_plain * 1e-9, best_copy / best_plain);
  }
  return 0;
}
