#pragma once
// FlashAttention-3's test-suite features of attention (AttentionOptions::qv, the fp8
// descales, p_dtype and fa_baseline): the inputs prepared as attention_ref prepares them,
// then the blocked kernel (exact) or attention_ref's op-by-op baseline arithmetic.
// Internal to the library (attention.cpp).
#include <cstddef>
#include <string>

#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// a||b concatenated along the axis d of `axes` (float64 when their dtypes differ: both
/// widen exactly). qv's term as one dot product: Q||qv over K||V.
Tensor concat_d(const Tensor& a, const Tensor& b, const std::string& axes);

/// Whether `opt` asks for any of qv, the descales, p_dtype or fa_baseline.
bool fa_extras(const AttentionOptions& opt);

/// attention() with fa_extras(opt): checks them (UsageError for options they cannot go
/// with, InputError for shapes and values of qv and the descales), then computes.
AttentionResult attention_fa(const Tensor& q, const Tensor& k, const Tensor* v,
                             const AttentionOptions& opt);

}  // namespace posenc::attention_detail
