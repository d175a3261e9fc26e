#pragma once
// f16 and bf16 values widened to float, and floats and doubles narrowed to f16 and bf16,
// at memory speed: F16C or AVX-512 conversions, four to sixteen at a time, with the
// variant picked at run time as for the RoPE kernels (POSENC_ROPE_ISA selects it too).
// Every variant gives exactly the bits of half_to_float and bf16_to_float (signalling-NaN
// payloads included, which the conversion instructions would quiet) and of
// double_to_half and double_to_bf16 (one rounding to nearest even, overflow to Inf, NaN
// to the quiet NaN of its sign), so a result never depends on the variant.

#include <cstddef>
#include <cstdint>

#include "posenc/tensor.hpp"

namespace posenc::widen_detail {

/// How far ahead of its loads a variant prefetches the source. Mapped files sit in 4 KiB
/// pages, at whose edges the hardware prefetchers stop; 4 KiB ahead keeps the reads of a
/// key block streaming. f16 decode of a 256 MiB K/V cache in ext4's page cache, AMD Zen 4,
/// medians of 21: 27.7 -> 24.9 ms for one file, unchanged (24.4, 24.2) for another.
inline constexpr std::size_t kPrefetchBytes = 4096;

/// Widens n values; returns whether all of them are finite (no Inf, no NaN), which the
/// conversion finds for free, so that a caller checking its inputs reads them once.
using WidenFn = bool (*)(const std::uint16_t* src, float* dst, std::size_t n);

/// Rounds n values once to f16 or bf16 bits, as double_to_half / double_to_bf16 do.
using NarrowF32Fn = void (*)(const float* src, std::uint16_t* dst, std::size_t n);
using NarrowF64Fn = void (*)(const double* src, std::uint16_t* dst, std::size_t n);

namespace base {
bool f16(const std::uint16_t* src, float* dst, std::size_t n);
bool bf16(const std::uint16_t* src, float* dst, std::size_t n);
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n);
void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n);
}  // namespace base
namespace avx2 {  // needs avx2 and f16c
bool f16(const std::uint16_t* src, float* dst, std::size_t n);
bool bf16(const std::uint16_t* src, float* dst, std::size_t n);
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n);
// (f64 -> bf16 takes the base loop: rounding to odd into the f32 subnormals, which bf16
// reaches, needs a truncating conversion AVX2 does not have.)
}  // namespace avx2
namespace avx512 {  // needs avx512f, avx512bw and avx512vl
bool f16(const std::uint16_t* src, float* dst, std::size_t n);
bool bf16(const std::uint16_t* src, float* dst, std::size_t n);
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n);
void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n);
}  // namespace avx512

/// The variant's name the dispatch uses ("avx512", "avx2" or "base").
const char* widen_isa();

}  // namespace posenc::widen_detail

namespace posenc::detail {

/// Whether widen() takes `t` (f16, bf16 or an fp8 type).
constexpr bool widens(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3fn || t == DType::f8e5m2;
}

/// The `n` values at `src`, stored as `from` (f16, bf16 or fp8: `n * dtype_size(from)`
/// bytes), as floats in `dst`; returns whether all are finite.
bool widen(DType from, const void* src, float* dst, std::size_t n);
/// The same as doubles (every f16, bf16 and fp8 value is exact in both).
bool widen(DType from, const void* src, double* dst, std::size_t n);

/// Whether narrow() takes `from` to `to` (f32 or f64 to f16 or bf16).
constexpr bool narrows(DType from, DType to) {
  return (from == DType::f32 || from == DType::f64) && (to == DType::f16 || to == DType::bf16);
}
/// The `n` values at `src`, stored as `from` (f32 or f64), rounded once to `to` (f16 or
/// bf16) at `dst`: the bits of double_to_half / double_to_bf16.
void narrow(DType from, const void* src, DType to, void* dst, std::size_t n);

}  // namespace posenc::detail
