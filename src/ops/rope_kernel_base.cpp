// The RoPE kernel compiled for the base instruction set (see rope_kernel_impl.inc).
// Standard headers come before the target pragma so none of their inline functions is
// compiled for the wider set.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ops/rope_kernel.hpp"

namespace posenc::rope_detail::base {
#include "ops/rope_kernel_impl.inc"
}  // namespace posenc::rope_detail::base
