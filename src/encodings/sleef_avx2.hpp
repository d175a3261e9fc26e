#pragma once
// SLEEF's 8-lane float functions that torch's AVX2 kernels call (libsleef 3.5's
// dispatchers). sleef.h declares them only when the whole file is compiled for AVX,
// which the files that call them must not be (they check the CPU first): include this
// after switching the rest of the file to AVX2 (`#pragma GCC target("avx2,fma")`, or
// clang's attribute pragma), so that __m256 travels in ymm registers. Declared once for
// torch_cpu.cpp, which calls them, and shim/sleef.cpp, which defines them for the posenc
// executable.

#include <immintrin.h>

extern "C" {
__m256 Sleef_cosf8_u10(__m256);
__m256 Sleef_sinf8_u10(__m256);
__m256 Sleef_expf8_u10(__m256);
__m256 Sleef_log1pf8_u10(__m256);
__m256 Sleef_logf8_u10(__m256);
__m256 Sleef_powf8_u10(__m256, __m256);
}
