#pragma once
/// \file
/// dtype conversion of tensors, as numpy's `astype` does it.

#include "posenc/tensor.hpp"

namespace posenc {

/// A copy of `t` converted to `to`, element by element as numpy's astype:
/// - float -> float and integer -> float round to nearest even, in one rounding from
///   the exact value (f16 and bf16 with posenc's converters; 64-bit integers reach
///   f16/bf16 through float64);
/// - anything -> fp8 (f8e4m3fn, f8e5m2) is torch's `.to(torch.float8_*)`: the value is
///   rounded to float32 first, then once to nearest even (posenc/fp8.hpp; overflow to NaN
///   for e4m3fn, to Inf for e5m2); fp8 -> anything starts from the exact fp8 value;
/// - integer -> integer wraps modulo 2^bits (int64 300 -> uint8 44), exact for every
///   64-bit value;
/// - float -> integer truncates toward zero; NaN gives 0 and values beyond the target
///   range saturate (numpy leaves both undefined);
/// - anything -> bool is `x != 0` (NaN is true); bool -> anything is 0 or 1.
/// Converting to the same dtype copies the bytes.
Tensor cast(const Tensor& t, DType to);

/// The same conversion of `n` values stored as `from` at `in` into `out`, which holds
/// room for n values of `to` (and does not overlap `in`): for callers that reuse their
/// buffers.
void cast(const std::byte* in, DType from, std::byte* out, DType to, std::size_t n);

}  // namespace posenc
