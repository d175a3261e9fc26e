// The RoPE kernel compiled for avx512 plus AVX512-FP16 (see rope_kernel_impl.inc): f16
// converts to and from float64 in one instruction each (vcvtph2pd, vcvtpd2ph).
// Standard headers come before the target pragma so none of their inline functions is
// compiled for the wider set.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/rope_kernel.hpp"

// GCC 12 warns about the deliberately undefined upper lanes inside its own AVX-512
// headers (_mm512_undefined_*); the warning says nothing about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512fp16,avx2,f16c")
#define POSENC_ROPE_F16C 1
#define POSENC_ROPE_AVX512 1
#define POSENC_ROPE_AVX512FP16 1

namespace posenc::rope_detail::avx512fp16 {
#include "ops/rope_kernel_impl.inc"
}  // namespace posenc::rope_detail::avx512fp16
