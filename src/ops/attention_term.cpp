#include "posenc/ops/attention_term.hpp"

namespace posenc {

namespace {

// f(term) with the call's term, f() without one.
template <class F>
auto with_term(const AttentionTerm& t, F f) {
  return t.xl ? f(*t.xl) : t.deb ? f(*t.deb) : t.rope ? f(*t.rope) : f();
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          const AttentionOptions& opt, const AttentionTerm& term) {
  return with_term(term, [&](const auto&... t) { return attention(q, k, v, opt, t...); });
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, const AttentionTerm& term) {
  return with_term(term, [&](const auto&... t) {
    return attention_backward(q, k, v, grad_output, opt, bopt, t...);
  });
}

}  // namespace posenc
