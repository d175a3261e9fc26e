#pragma once
// One query row's f32 and f64 products as attention's kernel computes them
// (attention_kernel.cpp: posenc's own loops with the per-element arithmetic of OpenBLAS's
// Haswell sgemv and dgemv, BLAS for the tails and other shapes), for the tests that hold
// them to BLAS's bits; and the softmax pass over a row of f32 scores in each of its forms.

#include <cstddef>

namespace posenc::attention_detail {

/// c[j] = alpha * (a . b_j) for the n rows b_j of b (contiguous, d wide).
void row_scores_f32(const float* a, const float* b, std::size_t n, std::size_t d, float alpha,
                    float* c);
/// c += sum_j a[j] b_j over the n rows b_j of b (contiguous, dv wide).
void row_values_f32(const float* a, const float* b, std::size_t n, std::size_t dv, float* c);
/// row_scores_f32 in float64.
void row_scores_f64(const double* a, const double* b, std::size_t n, std::size_t d, double alpha,
                    double* c);
/// row_values_f32 in float64.
void row_values_f64(const double* a, const double* b, std::size_t n, std::size_t dv, double* c);
/// row_scores_f64 for gs query rows q[i] (at most 4) with the same keys, into c[i]: as
/// decode takes the query heads of a KV group.
void row_scores_heads_f64(const double* const* q, std::size_t gs, const double* b, std::size_t n,
                          std::size_t d, double alpha, double* const* c);
/// row_scores_heads_f64 in f32.
void row_scores_heads_f32(const float* const* q, std::size_t gs, const float* b, std::size_t n,
                          std::size_t d, float alpha, float* const* c);

/// s[j] = exp(s[j] - m) in place for scores s[j] <= m, and their sum in f64, as the
/// kernel's softmax pass computes them: the AVX-512 loop when `avx512` (the CPU must have
/// AVX-512F), else the lane loop (its AVX2 or plain clone); the same bits either way.
double row_exp_f32(float* s, std::size_t n, float m, bool avx512);

}  // namespace posenc::attention_detail
