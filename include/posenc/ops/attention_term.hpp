#pragma once
/// \file
/// The one term a call may add to attention: Transformer-XL's / XLNet's / Funnel's,
/// DeBERTa's (ops/attention_relative.hpp) or RoPE's (AttentionRope), as a value, so that
/// a caller holding any of them makes one call for the forward and one for the backward.

#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_relative.hpp"

namespace posenc {

/// The term of a call, null for none. At most one is given (check_relative_given refuses
/// the relative terms with RoPE); were several, the first of xl, deb and rope would count.
struct AttentionTerm {
  const XlAttention* xl = nullptr;
  const DebertaAttention* deb = nullptr;
  const AttentionRope* rope = nullptr;
};

/// attention(q, k, v, opt) with the term's overload.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          const AttentionOptions& opt, const AttentionTerm& term);

/// attention_backward(q, k, v, grad_output, opt, bopt) with the term's overload.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, const AttentionTerm& term);

}  // namespace posenc
