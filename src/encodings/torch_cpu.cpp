// torch's CPU float32 primitives through SLEEF (see torch_cpu.hpp). The vector calls
// live in functions compiled for AVX2; available() is checked before any of them runs.

#include "encodings/torch_cpu.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "posenc/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define POSENC_HAVE_SLEEF_AVX2 1
#endif

namespace posenc::torch_cpu {

bool available() noexcept {
#if defined(POSENC_HAVE_SLEEF_AVX2)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void require(const char* what) {
  if (!available()) {
    throw UsageError(fmt::format(
        "{}: reproduces torch's x86-64 AVX2 CPU kernels (SLEEF), which this CPU cannot run", what));
  }
#if defined(POSENC_HAVE_SLEEF_AVX2)
  // One SLEEF call here, on the calling thread and before any parallel region: the
  // posenc executable loads SLEEF on its first call (src/shim/sleef.cpp), and a missing
  // library is then reported here rather than inside a worker thread.
  float x = 0.0f, y = 0.0f;
  exp(&x, &y, 1);
#endif
}

}  // namespace posenc::torch_cpu

#if defined(POSENC_HAVE_SLEEF_AVX2)

// Everything below runs only after available(), compiled for AVX2 (clang ignores GCC's
// target pragma; its own attribute pragma does the same).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

#include "encodings/sleef_avx2.hpp"

namespace posenc::torch_cpu {

namespace {

// Eight lanes at a time; the last, partial vector is zero-padded as torch's
// Vectorized<float>::loadu(ptr, count) does.
using Vec8Fn = __m256 (*)(__m256);

void map8(const float* x, float* y, std::size_t n, Vec8Fn fn) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fn(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(buf, x + i, (n - i) * sizeof(float));
    _mm256_store_ps(buf, fn(_mm256_load_ps(buf)));
    std::memcpy(y + i, buf, (n - i) * sizeof(float));
  }
}

}  // namespace

void cos(const float* x, float* y, std::size_t n) { map8(x, y, n, Sleef_cosf8_u10); }
void sin(const float* x, float* y, std::size_t n) { map8(x, y, n, Sleef_sinf8_u10); }
void exp(const float* x, float* y, std::size_t n) { map8(x, y, n, Sleef_expf8_u10); }
void log1p(const float* x, float* y, std::size_t n) { map8(x, y, n, Sleef_log1pf8_u10); }
void log(const float* x, float* y, std::size_t n) { map8(x, y, n, Sleef_logf8_u10); }

// torch's vectorized_loop: two vectors per step, then the scalar op (std::pow on
// floats, i.e. powf) for what is left.
void pow_scalar_base(float base, const float* e, float* y, std::size_t n) {
  const __m256 b = _mm256_set1_ps(base);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, Sleef_powf8_u10(b, _mm256_loadu_ps(e + i)));
    _mm256_storeu_ps(y + i + 8, Sleef_powf8_u10(b, _mm256_loadu_ps(e + i + 8)));
  }
  for (; i < n; ++i) y[i] = ::powf(base, e[i]);
}

}  // namespace posenc::torch_cpu

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

namespace posenc::torch_cpu {

void cos(const float*, float*, std::size_t) { require("torch_cpu::cos"); }
void sin(const float*, float*, std::size_t) { require("torch_cpu::sin"); }
void exp(const float*, float*, std::size_t) { require("torch_cpu::exp"); }
void log1p(const float*, float*, std::size_t) { require("torch_cpu::log1p"); }
void log(const float*, float*, std::size_t) { require("torch_cpu::log"); }
void pow_scalar_base(float, const float*, float*, std::size_t) { require("torch_cpu::pow"); }

}  // namespace posenc::torch_cpu

#endif
