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

/// A Shaw-style relative window as data: the table row a (query i, key j) pair takes.
/// The signed distance d = j - i (k-q) or i - j (q-k) keeps rows left + d for d in
/// [-left, right]; beyond the window it takes the edge row (clamp, Shaw, Wav2Vec2-BERT,
/// SpeechT5) or no row (-1: a zero vector, VITS's padded relative embeddings).
///   Shaw / tensor2tensor   left = right = M, k-q, clamp
///   Wav2Vec2-BERT, SeamlessM4T-v2  left 64, right 8, k-q, clamp (distance_embedding)
///   SpeechT5               left M, right M - 1, q-k, clamp (pe_k of max_length M)
///   VITS                   left = right = window_size, k-q, zero
struct RelativeWindow {
  std::int64_t left = 0;     ///< L >= 0: distances below -L clip (or drop)
  std::int64_t right = 0;    ///< R >= 0: distances above R clip (or drop)
  bool q_minus_k = false;    ///< d = i - j instead of j - i
  bool zero_beyond = false;  ///< beyond the window: -1 instead of the edge row
  /// Rows of the table the window indexes: L + R + 1.
  std::int64_t rows() const { return left + right + 1; }
  /// The row of query i and key j, or -1 (zero_beyond, outside the window).
  std::int64_t index(std::int64_t i, std::int64_t j) const;
};

/// Shaw et al. clipped relative index: clip(j - i, -M, M) + M for sign k-q (the
/// seeds' and tensor2tensor's convention), clip(i - j, -M, M) + M for q-k
/// (RelativeWindow{M, M, q_minus_k}).
std::int64_t relative_index(std::int64_t i, std::int64_t j, std::int64_t max_distance,
                            bool q_minus_k = false);

/// HF T5 `_relative_position_bucket` of relative_position = key - query.
std::int64_t t5_bucket(std::int64_t relative_position, bool bidirectional, int num_buckets,
                       int max_distance);

}  // namespace posenc
