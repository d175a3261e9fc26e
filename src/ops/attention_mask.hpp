#pragma once
// Which keys each query sees, and the temperature of each query: the one statement of
// attention's mask rules (causal alignments, windows, HF's sliding window, Llama-4
// chunks, key lengths, packed sequences) that every arithmetic path (the blocked exact
// kernel, HF's eager path) consumes, so that an option means the same in each.
// Internal to the library.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// The keys one query row sees: the window's [lo, hi] and the sink tokens [sink_lo,
/// sink_hi], which, when there are any, end before lo - 1 (touching ones are merged into
/// [lo, hi], and a row with sink tokens alone has them as [lo, hi]).
struct KeySpan {
  std::int64_t lo = 0, hi = -1;            // lo > hi: none
  std::int64_t sink_lo = 0, sink_hi = -1;  // sink_lo > sink_hi: none
  bool has_sink() const { return sink_lo <= sink_hi; }
  bool sees(std::int64_t j) const {
    return (lo <= j && j <= hi) || (sink_lo <= j && j <= sink_hi);
  }
  /// The first key seen (or lo when none).
  std::int64_t first() const { return has_sink() ? sink_lo : lo; }
};

struct KeyRules {
  std::int64_t sk = 0;
  std::int64_t off = 0;  // query i sits at position i + off (bottom-right, as a KV cache)
  CausalAlign causal = CausalAlign::none;
  std::int64_t win_left = -1, win_right = -1;  // -1: unbounded on that side
  std::int64_t chunk = 0;
  // StreamingLLM sink tokens (FlashAttention's sink_token_length): the first `sink` keys
  // (of the row's packed sequence) are exempt from the window's left side.
  std::int64_t sink = 0;
  std::vector<std::int64_t> key_len;  // per batch; empty = none
  // Per-entry alignment (seqused_q/k): entry b's queries sit at i + off_b[b], and rows
  // from q_len[b] on are padding (no key); empty = off for every entry, no padding.
  std::vector<std::int64_t> off_b, q_len;
  // Packed sequences: token i sees keys [doc_lo[i], doc_hi[i]]; empty = one sequence.
  std::vector<std::int64_t> doc_lo, doc_hi;
  double temp_scale = 0, temp_floor = 1;  // Llama-4 temperature tuning; scale 0 = off
  double l4_beta = 0;                     // Ministral-3's Llama-4 scaling; 0 = off
  std::int64_t l4_period = 1;

  /// The keys query row i of batch b sees.
  KeySpan span(std::size_t b, std::int64_t i) const;
  /// The keys [lo, hi] around every key query row i of batch b sees (lo > hi: none);
  /// with sink tokens some keys inside are not seen (span() says which).
  std::pair<std::int64_t, std::int64_t> range(std::size_t b, std::int64_t i) const {
    const KeySpan k = span(b, i);
    return {k.first(), k.hi};
  }
  /// The query rows from q0 on of batch b that are not padding (seqused_q).
  std::size_t rows_used(std::size_t b, std::size_t q0) const {
    if (q_len.empty()) return static_cast<std::size_t>(-1);
    const auto q = static_cast<std::int64_t>(q0);
    return q_len[b] > q ? static_cast<std::size_t>(q_len[b] - q) : 0;
  }
  /// Where entry b's query 0 sits (its own alignment under seqused_q/k).
  std::int64_t offset(std::size_t b) const { return off_b.empty() ? off : off_b[b]; }
  /// True when queries are scaled by position (temperature() is not always 1).
  bool scales_queries() const { return temp_scale != 0 || l4_beta != 0; }
  /// The factor of the query at position `qpos`, in float64: Llama-4's temperature
  /// 1 + temp_scale * log1p(floor((qpos + 1) / temp_floor)), or Ministral-3's
  /// 1 + l4_beta * log(1 + floor(qpos / l4_period)); 1 when off.
  double temperature(std::int64_t qpos) const;
};

/// The rules of `opt` for `sq` queries over `sk` keys (options checked by attention()):
/// HF's sliding_window W becomes a window of W-1 to the left (and to the right without a
/// causal mask), the narrower side winning over window_left/right.
KeyRules key_rules(const AttentionOptions& opt, std::size_t sq, std::size_t sk);

/// The ALiBi form of a run: `alibi` when given, else (alibi_slopes alone) FlashAttention's
/// kernel forms: fairseq (slope * j) when the mask is causal with no left window (its
/// Is_causal kernels), bottom_right (-slope |i + sk - sq - j|) otherwise.
AlibiVariant alibi_form(const AttentionOptions& opt);

}  // namespace posenc::attention_detail
