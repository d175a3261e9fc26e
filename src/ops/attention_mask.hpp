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

struct KeyRules {
  std::int64_t sk = 0;
  std::int64_t off = 0;  // query i sits at position i + off (bottom-right, as a KV cache)
  CausalAlign causal = CausalAlign::none;
  std::int64_t win_left = -1, win_right = -1;  // -1: unbounded on that side
  std::int64_t chunk = 0;
  std::vector<std::int64_t> key_len;  // per batch; empty = none
  // Packed sequences: token i sees keys [doc_lo[i], doc_hi[i]]; empty = one sequence.
  std::vector<std::int64_t> doc_lo, doc_hi;
  double temp_scale = 0, temp_floor = 1;  // Llama-4 temperature tuning; scale 0 = off
  double l4_beta = 0;                     // Ministral-3's Llama-4 scaling; 0 = off
  std::int64_t l4_period = 1;

  /// The keys [lo, hi] query row i of batch b sees (lo > hi: none).
  std::pair<std::int64_t, std::int64_t> range(std::size_t b, std::int64_t i) const;
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

}  // namespace posenc::attention_detail
