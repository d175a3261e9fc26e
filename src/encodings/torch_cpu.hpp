#pragma once
// Float32 primitives computed the way torch's CPU kernels compute them (Debian's
// torch 1.13 on x86-64, ATen CPU capability AVX2), for the framework arithmetic of
// `--arith hf` and `--arith meta`. Internal to the library.
//
// What torch does, measured against Debian's python3-torch:
// - Unary transcendentals (cos, sin, exp) map SLEEF's 8-lane 1-ulp functions
//   (Sleef_cosf8_u10, ...) over the data; the remainder is a zero-padded partial
//   vector through the same function. SLEEF reduces all 8 lanes the slow way when one
//   of them is large (|x| >= 125), so an element's result depends on its vector.
// - pow(scalar, tensor) runs Sleef_powf8_u10 on blocks of 16 elements (two vectors per
//   step) and the scalar libm powf on the remaining n % 16, so an element's result
//   depends on its index in the tensor.
// - Element-wise + - * / round once to float32; bf16 and f16 operations compute in
//   float32 and round the result to the storage type; `x / scalar` is a true division
//   and `scalar / x` is reciprocal(x) * scalar.

#include <cstddef>

namespace posenc::torch_cpu {

/// True on x86-64 CPUs with AVX2 and FMA, where SLEEF's AVX2 functions run.
bool available() noexcept;

/// Throws UsageError("`what`: ...") unless available().
void require(const char* what);

/// y[i] = cos(x[i]) / sin(x[i]) / exp(x[i]) as torch.cos / torch.sin / torch.exp
/// (float32). Need available().
void cos(const float* x, float* y, std::size_t n);
void sin(const float* x, float* y, std::size_t n);
void exp(const float* x, float* y, std::size_t n);
/// y[i] = log1p(x[i]) as torch.log1p (float32, SLEEF's u10 function). Needs available().
void log1p(const float* x, float* y, std::size_t n);
/// y[i] = log(x[i]) as torch.log (float32, SLEEF's u10 function). Needs available().
void log(const float* x, float* y, std::size_t n);

/// y = base ** e for a float32 tensor e of n contiguous elements (torch.pow with a
/// scalar base, which torch casts to float32 first). Needs available().
void pow_scalar_base(float base, const float* e, float* y, std::size_t n);

}  // namespace posenc::torch_cpu
