#pragma once
// Internal to the RoPE streaming of tensors whose d axis is not last (rope.cpp): the
// working copies with d moved last, and back.

#include <cstddef>

namespace posenc::detail {

/// Copies each of `outer` matrices [rows, cols] (C order, elements of `es` bytes) from
/// `src` to `dst` transposed, [cols, rows]. Elements of 2, 4 and 8 bytes move in 8 x 8
/// (8 bytes: 4 x 4) register blocks with `simd` (needs AVX2), one by one otherwise; the
/// bytes are the same. OpenMP over tiles of 32 columns.
void transpose_matrices(const std::byte* src, std::byte* dst, std::size_t outer,
                        std::size_t rows, std::size_t cols, std::size_t es, bool simd);

}  // namespace posenc::detail
