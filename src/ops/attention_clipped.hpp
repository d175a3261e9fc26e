#pragma once
// Phi-4-multimodal audio's clipped-distance bias as an attention score term (HF
// Phi4MultimodalAudioRelativeAttentionBias): a learned table [rows, heads] indexed by the
// key-query distance clipped to [-M, M - 1], by its absolute value (symmetric, M rows)
// or shifted by M (2 M rows). The options are checked here (check_clipped) and each
// distance's row given by clipped_row; the kernel adds the gathered rows as it adds
// T5's (attention_terms.cpp builds them). Internal to the library.

#include <cstdint>

#include "ops/attention_geometry.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// Checks clipped_bias against Q and K: UsageError with t5_bias (one table gathered by
/// distance at a time); InputError for a table that is not [rows, hq] floats, 2 M rows
/// of an asymmetric table that are odd, or a symmetric table of M rows for keys M or
/// more before a query (HF would index row M, past its table).
void check_clipped(const Geometry& g, const AttentionOptions& opt);

/// M, the clipping distance of the table of `opt` (rows, or rows / 2 when asymmetric).
std::int64_t clipped_distance(const AttentionOptions& opt);

/// The table row of key-query distance `rel` (key position minus query position):
/// HF's relative_position clipped to [-M, M - 1], then abs() when symmetric, else + M.
inline std::int64_t clipped_row(std::int64_t rel, std::int64_t m, bool symmetric) {
  rel = rel < -m ? -m : rel > m - 1 ? m - 1 : rel;
  return symmetric ? (rel < 0 ? -rel : rel) : rel + m;
}

}  // namespace posenc::attention_detail
