#pragma once
/// \file
/// The 8-bit float formats of FP8 training and inference (OCP FP8, "FP8 Formats for Deep
/// Learning", arXiv 2209.05433), converted as PyTorch's float8_e4m3fn and float8_e5m2 are
/// (c10/util/Float8_e4m3fn.h, Float8_e5m2.h):
///
/// - e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities ("fn"): the
///   only NaNs are 0x7f and 0xff, largest finite 448 (0x7e), smallest subnormal 2^-9.
/// - e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits: the top byte of an IEEE
///   binary16, with infinities 0x7c / 0xfc, NaNs 0x7d-0x7f / 0xfd-0xff, largest finite
///   57344 (0x7b), smallest subnormal 2^-16.
///
/// Narrowing rounds to nearest, ties to even, once, from float32. A value whose rounding
/// exceeds the largest finite one overflows: to NaN (0x7f with its sign) for e4m3fn, which
/// has no infinity, and to infinity for e5m2 (torch's `.to()` does not saturate). Infinity
/// becomes NaN (e4m3fn) or infinity (e5m2); NaN becomes 0x7f with the NaN's sign bit.
/// float64 inputs are rounded to float32 first, as torch converts a float64 tensor (the
/// float8 types are constructed from float): a float64 just beside a midpoint of the fp8
/// grid can round to the midpoint in float32 and then to even. Widening is exact.

#include <cstdint>
#include <string_view>

namespace posenc {

/// The fp8 formats (torch.float8_e4m3fn, torch.float8_e5m2; ml_dtypes' float8_e4m3fn and
/// float8_e5m2).
enum class Fp8Format : std::uint8_t { e4m3fn, e5m2 };

/// "e4m3fn" or "e5m2".
std::string_view fp8_format_name(Fp8Format f) noexcept;
/// Parses "e4m3fn" / "float8_e4m3fn" / "e5m2" / "float8_e5m2"; throws UsageError naming
/// `what` otherwise.
Fp8Format parse_fp8_format(std::string_view name, std::string_view what);

/// float32 → the fp8 code, rounded to nearest even (overflow and NaN rules above).
std::uint8_t fp8_from_float(float x, Fp8Format f) noexcept;
/// float64 → the fp8 code as torch does: rounded to float32, then as fp8_from_float.
std::uint8_t fp8_from_double(double x, Fp8Format f) noexcept;
/// The fp8 code → its value in float32, exact (NaN codes give a quiet NaN of their sign,
/// e5m2's infinities infinity).
float fp8_to_float(std::uint8_t code, Fp8Format f) noexcept;
/// Whether `code` is a NaN of format `f`.
bool fp8_is_nan(std::uint8_t code, Fp8Format f) noexcept;
/// The 256 values of format `f` in float32, indexed by code (fp8_to_float of each): the
/// table every widening of fp8 data reads, exact and branch-free.
const float* fp8_table(Fp8Format f) noexcept;

}  // namespace posenc
