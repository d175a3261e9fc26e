#pragma once
// `attention --arith hf`: HF transformers' eager attention (eager_attention_forward) in
// the model dtype, element operation by element operation as torch's CPU kernels run
// it. Internal to the library: attention() in attention.cpp checks the shapes and
// calls it.

#include <cstddef>
#include <string>

#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// The checked geometry attention() hands over.
struct HfShape {
  std::string axes;
  std::size_t b = 1, hq = 1, hk = 1, sq = 0, sk = 0, d = 0, dv = 0;
  bool emit_logits = false, emit_probs = false, emit_output = false, emit_lse = false;
  Shape logits_shape;
  DType out = DType::f32;
};

/// Runs HF's eager path in Q's dtype. Throws UsageError for options that path does not
/// have (ALiBi, T5 and Shaw biases, SAM's decomposed terms, soft-capping, sinks, lse,
/// --masked-rows) and InputError when K or V has another dtype than Q.
AttentionResult attention_hf(const Tensor& q, const Tensor& k, const Tensor* v,
                             const AttentionOptions& opt, const HfShape& g);

}  // namespace posenc::attention_detail
