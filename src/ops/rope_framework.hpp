#pragma once
// The rotation of `--arith hf|meta|ggml`: each framework's element operations in its
// storage types, over the same slab layout as the exact kernels (rope_kernel.hpp).
// Internal to the library: RopeApplier in rope.cpp prepares the arguments.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/rope_kernel.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope_layout.hpp"
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

/// `--arith hf` for a RoPE layout over several coordinate axes, as the HF model that
/// defines the layout forms its table rows: pair j < R/2 turns by float32(coordinate of
/// axis[j]) * freq[j], one float32 product (DINOv3: float32(2 pi) * its float32 patch
/// centre first), then torch's cos and sin and the attention scaling.
struct FrameworkLayout {
  std::string model;                  ///< whose HF code, e.g. "Qwen2-VL's M-RoPE"
  std::vector<std::size_t> axis;      ///< per pair: the coordinate axis
  std::vector<float> freq;            ///< per pair: the float32 frequency HF forms
  std::vector<std::int64_t> centres;  ///< DINOv3: the grid extents; empty: integer coordinates
  /// Qwen2-VL: cos and sin of every axis's whole row, each pair picked after (torch's
  /// cos of a value depends on its 8-lane vector: see framework_trig)
  bool pick_after_trig = false;
  HfRotation rotation = HfRotation::storage;  ///< how the model's apply rounds
};

/// The HF arithmetic of the layout `spec` (not plain) for `fw` (arith hf) and the
/// RoPE `f` it was attached to; `grid` is the generated coordinate grid, or nullptr for
/// explicit ids. Throws UsageError naming the layout where posenc does not reproduce an
/// HF model's float32 code for it.
FrameworkLayout hf_framework_layout(const FrameworkRope& fw, const RopeFreqs& f,
                                    const RopeLayoutSpec& spec, const CoordGrid* grid);

/// The row of a token with coordinates `coords` (one per axis, as the layout's
/// positions give them): float32 angles, and cos, sin (R/2 each) as they enter the
/// rotation (before the cast to the input dtype); `inverse` negates the sine.
void framework_layout_row(const FrameworkRope& fw, const FrameworkLayout& l,
                          const double* coords, bool inverse, float* angle, float* cos,
                          float* sin);

}  // namespace posenc::rope_detail
