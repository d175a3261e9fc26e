#pragma once
// FlashAttention's varlen form (AttentionOptions::cu_seqlens_q / cu_seqlens_k): packed
// Q, K and V cut into their sequences, each computed as a run of its own (so every mask
// and bias by position aligns to the sequence's own lengths, and its rows are the bytes
// of that run), the rows put back into the packed output and FlashAttention's [hq,
// total_q] lse. Internal to the library (attention.cpp).

#include <cstddef>
#include <string>
#include <utility>

#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"

namespace posenc::attention_detail {

/// Whether `opt` asks for the varlen form.
inline bool is_varlen(const AttentionOptions& opt) {
  return opt.cu_seqlens_q != nullptr || opt.cu_seqlens_k != nullptr;
}

/// The varlen run: options and boundaries checked (UsageError, InputError), then one
/// attention() per sequence.
AttentionResult attention_varlen(const Tensor& q, const Tensor& k, const Tensor* v,
                                 const AttentionOptions& opt);

/// The varlen run reading its inputs whole from the sources (they count against
/// opt.max_memory, checked from the headers before anything is read).
AttentionResult attention_varlen(TensorSource& q, TensorSource& k, TensorSource* v,
                                 const AttentionOptions& opt);

/// Bytes a varlen run needs besides its inputs (the packed output and lse, and the
/// largest sequence's run), checked as attention_varlen checks.
std::pair<std::size_t, std::string> varlen_memory(const Shape& q, const Shape& k, const Shape* v,
                                                  DType q_dtype, const AttentionOptions& opt);

/// The varlen backward: per sequence, the backward of that sequence alone (its masks
/// aligned to its own lengths, as the forward), its rows put into packed dq [total_q, ...],
/// dk and dv [total_k, ...] (dqv as dq), softmax_d and lse [hq, total_q]; rows of empty
/// sequences and past seqused_q / seqused_k have gradient 0 (lse -inf, softmax_d 0). The
/// sinks', T5 table's and Shaw tables' gradients are summed over the sequences. Computed in
/// float64 per sequence and rounded once. UsageError for the streamed forms (bopt.sink,
/// forward_output, release_kv) and what the forward's varlen form refuses.
AttentionGrads attention_varlen_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& grad_output, const AttentionOptions& opt,
                                         const AttentionBackwardOptions& bopt);

/// Bytes attention_varlen_backward needs besides its inputs.
std::size_t varlen_backward_memory(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                                   const AttentionOptions& opt,
                                   const AttentionBackwardOptions& bopt);

}  // namespace posenc::attention_detail
