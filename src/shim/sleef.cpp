// SLEEF for the posenc executable, loaded on first use (see shim.hpp): only --arith hf
// needs it. The 8-lane functions of encodings/sleef_avx2.hpp take and return
// __m256 in ymm registers, so the trampolines are compiled for AVX2 as their callers
// are; torch_cpu::require() calls one on the main thread before any parallel region,
// which loads the library or reports it missing.

#if defined(__x86_64__)

#include <immintrin.h>

#include <string>

#include "posenc/error.hpp"
#include "shim/shim.hpp"

#ifndef POSENC_SLEEF_SONAME
#define POSENC_SLEEF_SONAME "libsleef.so.3"
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

#include "encodings/sleef_avx2.hpp"

namespace {

// Written out rather than through POSENC_SHIM_TRAMPOLINE: a vector type as a template
// argument loses its vector attribute.
using Unary = __m256 (*)(__m256);
using Binary = __m256 (*)(__m256, __m256);

struct Sleef {
  Unary cosf8 = nullptr, sinf8 = nullptr, expf8 = nullptr, log1pf8 = nullptr, logf8 = nullptr;
  Binary powf8 = nullptr;
  std::string error;
};

template <class F>
void bind(void* lib, const char* name, F* out, std::string* error) {
  if (error->empty()) {
    *out = reinterpret_cast<F>(posenc::shim::symbol(lib, POSENC_SLEEF_SONAME, name, error));
  }
}

Sleef load() {
  Sleef s;
  void* lib = posenc::shim::open_library(POSENC_SLEEF_SONAME, "libsleef3", &s.error);
  if (lib == nullptr) return s;
  bind(lib, "Sleef_cosf8_u10", &s.cosf8, &s.error);
  bind(lib, "Sleef_sinf8_u10", &s.sinf8, &s.error);
  bind(lib, "Sleef_expf8_u10", &s.expf8, &s.error);
  bind(lib, "Sleef_log1pf8_u10", &s.log1pf8, &s.error);
  bind(lib, "Sleef_logf8_u10", &s.logf8, &s.error);
  bind(lib, "Sleef_powf8_u10", &s.powf8, &s.error);
  return s;
}

const Sleef& sleef() {
  static const Sleef s = load();
  if (!s.error.empty()) {
    throw posenc::OutputError("cannot reproduce torch's vector math: " + s.error);
  }
  return s;
}

}  // namespace

extern "C" {
__m256 Sleef_cosf8_u10(__m256 x) { return sleef().cosf8(x); }
__m256 Sleef_sinf8_u10(__m256 x) { return sleef().sinf8(x); }
__m256 Sleef_expf8_u10(__m256 x) { return sleef().expf8(x); }
__m256 Sleef_log1pf8_u10(__m256 x) { return sleef().log1pf8(x); }
__m256 Sleef_logf8_u10(__m256 x) { return sleef().logf8(x); }
__m256 Sleef_powf8_u10(__m256 x, __m256 y) { return sleef().powf8(x, y); }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
