#pragma once
// The backward of LongT5's transient-global side keys (attention_global.hpp): each work
// item (batch, KV head) of attention_backward, after its key tiles, adds the side
// columns' part of dq and owns the gradients of its rows of global_k and global_v and
// the sums by block distance of its query heads for the side bias table. The side
// scores are the forward's, scale q.kg + global_bias[bucket(g - block(i)), h] under HF's
// side mask; P = exp(s - lse) with the forward's lse (which counts the side keys), dS =
// P (dP - D):
//   dq_i += scale sum_g dS_ig kg_g,  dglobal_k_g = scale sum_i dS_ig q_i,
//   dglobal_v_g = sum_i P_ig dO_i,   dglobal_bias[bucket, h] = sum of dS over its pairs,
// summed over the group's query heads (GQA) and, for the table, the batch entries. Each
// item adds its rows in a fixed order, so the bytes do not depend on the thread count.
// Internal to the library.

#include <cstddef>
#include <vector>

#include "ops/attention_kernel.hpp"
#include "posenc/ops/attention_backward.hpp"

namespace posenc::attention_detail {

/// UsageError for a side-key gradient asked for without its input.
void refuse_global_gradients(const AttentionOptions& opt, const AttentionBackwardOptions& bopt);

/// Bytes the side keys' gradients hold beyond the forward's plan (the sums and the
/// gradients in the output dtype `out`).
std::size_t global_backward_bytes(const Geometry& g, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, DType out);

/// The side keys' gradients of a run, in the arithmetic type T.
template <class T>
struct GlobalGrads {
  bool on = false;           // the side keys are given
  std::vector<T> dk, dv;     // [b][hk][n][d], [b][hk][n][dv]; empty unless asked for
  std::vector<double> bias;  // dS summed by g - block + n - 1: [b][hq][2n]; likewise

  void init(const Plan<T>& P, const AttentionBackwardOptions& bopt);

  /// The side columns of item (bi, kvh): dq [group][sq][d] (the item's accumulator)
  /// gains their part; the item's rows of dk, dv and bias their sums. lse and D are
  /// [b][hq][sq].
  void item(const Plan<T>& P, const View<T>& q, const View<T>& dO, const double* lse,
            const double* D, std::size_t bi, std::size_t kvh, T* dq);

  /// The gradients asked for, each rounded once to `out` (global_k's and global_v's
  /// shapes and axes; the table's [buckets, hq]).
  void results(const Plan<T>& P, const AttentionOptions& opt, DType out,
               AttentionGrads& res) const;
};

}  // namespace posenc::attention_detail
