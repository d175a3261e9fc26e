#pragma once
/// \file
/// Additive attention biases and relative-position indices: ALiBi, Shaw-style clipped
/// relative indices and T5 buckets. Used by `posenc table` and `posenc attention`.

#include <cstdint>
#include <vector>

namespace posenc {

/// The most heads `alibi_slopes` accepts (2^20; models have tens).
constexpr int kMaxAlibiHeads = 1 << 20;

/// ALiBi slopes for `heads` heads (Press et al., `get_slopes`, including the rule for
/// non-powers of two); `max_bias` generalises the 8 of the paper as ggml does. Throws
/// UsageError unless 0 < heads <= kMaxAlibiHeads and max_bias is positive.
std::vector<double> alibi_slopes(int heads, double max_bias = 8.0);

/// The ALiBi bias forms (see alibi_bias for each formula).
enum class AlibiVariant {
  causal,       ///< -m·(i - j), Press et al.
  symmetric,    ///< -m·|i - j|, encoders
  fairseq,      ///< m·j, fairseq and BLOOM
  bottom_right  ///< -m·|i + k_len - q_len - j|, flash-attn
};

/// Bias for query i, key j of a head with slope m:
///   causal       -m·(i - j)                 (paper; meaningful for j <= i)
///   symmetric    -m·|i - j|
///   fairseq      m·j                        (row-invariant; equals causal under softmax)
///   bottom_right -m·|i + k_len - q_len - j| (flash-attn alignment)
double alibi_bias(AlibiVariant v, double slope, std::int64_t i, std::int64_t j,
                  std::int64_t q_len, std::int64_t k_len);

/// Shaw et al. clipped relative index: clip(j - i, -M, M) + M for sign k-q (the
/// seeds' and tensor2tensor's convention), clip(i - j, -M, M) + M for q-k.
std::int64_t relative_index(std::int64_t i, std::int64_t j, std::int64_t max_distance,
                            bool q_minus_k = false);

/// HF T5 `_relative_position_bucket` of relative_position = key - query.
std::int64_t t5_bucket(std::int64_t relative_position, bool bidirectional, int num_buckets,
                       int max_distance);

}  // namespace posenc
