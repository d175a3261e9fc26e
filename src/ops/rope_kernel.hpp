#pragma once
// The RoPE hot loop, compiled once per instruction set (rope_kernel_*.cpp include
// rope_kernel_impl.inc under different `#pragma GCC target`s) and picked at run time.
// Internal to the library: RopeApplier in rope.cpp prepares the arguments.

#include <cstddef>
#include <cstdint>

#include "posenc/encodings/rope.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/tensor.hpp"

namespace posenc::rope_detail {

/// Work below this many elements runs on the calling thread: waking the OpenMP team
/// costs more than a small slab's rotation (a 1x1x8x64 call from Python took 17-34 us
/// in a parallel region, 4 us without one). Every element is computed alone, so the
/// result does not depend on it.
constexpr std::size_t kParallelElements = std::size_t{1} << 15;

inline std::size_t kernel_elements(std::size_t n0, std::size_t n1, std::size_t n2,
                                   std::size_t head_dim) {
  return n0 * n1 * n2 * head_dim;
}

/// One slab, seen as vectors along d (contiguous, stride 1) visited by three loop
/// axes (outer to inner; absent axes have size 1). Vector (i0, i1, i2) starts at
/// element i0*st0 + i1*st1 + i2*st2 of src and dst (same shape, C order), and uses
/// table row rowidx[i0*t0 + i1*t1 + i2*t2]. A table row holds R/2 cos then R/2 sin
/// values in the working precision (attention factor and inverse sign included).
struct KernelArgs {
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t n0 = 1, n1 = 1, n2 = 1;
  std::ptrdiff_t st0 = 0, st1 = 0, st2 = 0;
  std::ptrdiff_t t0 = 0, t1 = 0, t2 = 0;
  std::size_t head_dim = 0;    ///< D
  std::size_t rotary_dim = 0;  ///< R (even, <= D)
  const std::int32_t* rowidx = nullptr;
  const void* table = nullptr;
  /// Vectors along axis 2 handled per work item; a small block keeps the table rows it
  /// needs in cache when axis 2 is the sequence axis.
  std::size_t block2 = 1;
  /// Optional, for f16 -> f16 and bf16 -> bf16 with float64 arithmetic: the table split
  /// into float32 pairs (build_split_table), same row indices. The AVX-512 variants then
  /// compute in float32 with a proof that the bits equal the float64 result rounded once
  /// (rope_kernel_impl.inc); the others ignore it.
  const float* split = nullptr;
  /// Write the output with non-temporal stores (large outputs that will not be read
  /// back from cache soon).
  bool stream = false;
};

/// Runs the rotation over all vectors (OpenMP, static schedule). Returns true if any
/// input value was NaN or Inf.
using KernelFn = bool (*)(const KernelArgs&);

/// in, out ∈ {f16, bf16, f32, f64}. Returns nullptr for other types.
namespace base {
KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style);
}
namespace avx2 {
KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style);
}
namespace avx512 {
KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style);
}
namespace avx512fp16 {
KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style);
}

/// Largest |cos|, |sin| table value (attention factor included) a split table accepts.
constexpr double kSplitTableMax = 4.0;

/// Floats per split table row for rotary dim R: neox [c1 | s1 | c2 | s2], R/2 each;
/// gptj [C1 | S1 | C2 | S2], R each (pair j's value at 2j and 2j + 1, the sines negated
/// at 2j + 1). v1 = float(v), v2 = float(v - v1) for each float64 table value v.
inline std::size_t split_row_floats(std::size_t rotary_dim, RopeStyle style) {
  return style == RopeStyle::gptj ? 4 * rotary_dim : 2 * rotary_dim;
}

/// Fills `out` (rows * split_row_floats) from the float64 table (rows of R/2 cos then R/2
/// sin). Returns false, leaving the split unusable, if a value is not finite or exceeds
/// kSplitTableMax in magnitude.
bool build_split_table(const double* table, std::size_t rows, std::size_t rotary_dim,
                       RopeStyle style, float* out);

/// Whether the kernel find_kernel picks for these types uses a split table.
bool split_table_wanted(DType in, DType out, Precision p);

/// The best variant this CPU runs (POSENC_ROPE_ISA=base|avx2|avx512|avx512fp16 forces one, for
/// tests and benchmarks).
KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style);
/// Name of the variant find_kernel picks ("avx512fp16", "avx512", "avx2", "base").
const char* kernel_isa();

}  // namespace posenc::rope_detail
