#pragma once
// LongT5's transient-global side keys as extra attention keys (HF
// LongT5TransientGlobalAttention): the K and V of the global block aggregates, seen by
// every query after its own keys, with a T5-bucketed bias by block distance and HF's
// side mask. The options are checked here (check_global), the block ids
// (longt5_global_block_ids, encodings/longt5_global.hpp) and the bias by distance made
// once per run (GlobalKeys::from); the kernel folds the side
// keys into each work item's softmax (attention_kernel.cpp, item_global). Internal to
// the library.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/attention_geometry.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// Checks the global options against Q and K and sets g.global (the side keys):
/// UsageError for options without global_k, a block size below 1, global_v with and
/// without V, and the options global keys cannot honour (cu_seqlens, softcap, query
/// scaling); InputError for shapes that do not fit, sq != sk, and a mask that does not
/// say which tokens are padding (a float mask, or one that varies by query or head).
void check_global(Geometry& g, const Shape* vs, const AttentionOptions& opt);

/// The run's side keys in the arithmetic type T: K and V held in b, h, s, d order, and
/// per batch the block ids, padding and segments, the bias by g - block + n - 1 [hq][2n].
template <class T>
struct GlobalKeys {
  std::size_t n = 0;  // side keys; 0 = none
  std::vector<T> k, v;  // [b][hk][n][d], [b][hk][n][dv]
  std::vector<std::int32_t> ids;    // [b][s]
  std::vector<std::uint8_t> valid;  // [b][s]
  std::vector<std::uint8_t> seg;    // [b][n]
  std::vector<T> bias;              // [hq][2n], empty without global_bias
  bool on() const { return n > 0; }
  static GlobalKeys from(const Geometry& g, const AttentionOptions& opt);
};

}  // namespace posenc::attention_detail
