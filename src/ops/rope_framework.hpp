#pragma once
// The rotation of `--arith hf|meta|ggml`: each framework's element operations in its
// storage types, over the same slab layout as the exact kernels (rope_kernel.hpp).
// Internal to the library: RopeApplier in rope.cpp prepares the arguments.

#include <cstddef>

#include "ops/rope_kernel.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/tensor.hpp"

namespace posenc::rope_detail {

/// `k` as for the exact kernels, its table rows float32 (R/2 cos then R/2 sin, as
/// framework_rope_row gives them). `in` is the input dtype (the framework's storage
/// type), `out` the dtype written (the framework's result rounded once more if it
/// differs). Meta's complex multiply rounds differently in the tail of torch's inner
/// loop: `meta_row` is that loop's length in pairs, and `meta_s_axis` / `meta_s0` say
/// which loop axis of `k` is s and the slab's first s, when the loop runs over whole
/// sequences (h = 1); `meta_s_axis` is -1 otherwise. Returns true if an input value
/// was NaN or Inf.
struct FrameworkKernelArgs {
  const KernelArgs* k = nullptr;
  const FrameworkRope* f = nullptr;
  DType in = DType::f32, out = DType::f32;
  std::size_t meta_row = 0;
  int meta_s_axis = -1;
  std::size_t meta_s0 = 0;
};

bool run_framework_kernel(const FrameworkKernelArgs& a);

}  // namespace posenc::rope_detail
