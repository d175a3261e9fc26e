// The RoPE kernel compiled for the avx2 instruction set (see rope_kernel_impl.inc).
// Standard headers come before the target pragma so none of their inline functions is
// compiled for the wider set.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include "ops/rope_kernel.hpp"

#pragma GCC target("avx2,f16c")
#define POSENC_ROPE_F16C 1

namespace posenc::rope_detail::avx2 {
#include "ops/rope_kernel_impl.inc"
}  // namespace posenc::rope_detail::avx2
