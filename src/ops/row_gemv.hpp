#pragma once
// One query row's f32 products as attention's kernel computes them (attention_kernel.cpp:
// posenc's own loops with the per-element arithmetic of OpenBLAS's Haswell sgemv, BLAS
// for the tails and other shapes), for the tests that hold them to BLAS's bits.

#include <cstddef>

namespace posenc::attention_detail {

/// c[j] = alpha * (a . b_j) for the n rows b_j of b (contiguous, d wide).
void row_scores_f32(const float* a, const float* b, std::size_t n, std::size_t d, float alpha,
                    float* c);
/// c += sum_j a[j] b_j over the n rows b_j of b (contiguous, dv wide).
void row_values_f32(const float* a, const float* b, std::size_t n, std::size_t dv, float* c);

}  // namespace posenc::attention_detail
