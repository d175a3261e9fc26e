#pragma once
// `posenc attention --grad-output dO`: the gradients of attention (posenc/ops/
// attention_backward.hpp) written as one transaction. Bound by cmd_attention.cpp.

#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/relative_options.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::cli {

/// Whether `name` is a gradient (gradient_fields(), posenc/ops/attention_backward.hpp)
/// other than lse, which the forward emits too.
bool is_gradient_name(const std::string& name);

/// The --emit list in gradient mode (empty: dq,dk,dv,softmax_d,lse, dsinks with sinks and
/// dqv with qv). UsageError for an unknown name, one given twice, dbias without a float
/// mask (`float_mask`), dsinks without sinks and dqv without qv.
std::vector<std::string> parse_gradient_emit(const std::string& list, bool sinks, bool float_mask,
                                             bool qv = false);

/// UsageError when `list` names a gradient (--emit without --grad-output).
void refuse_gradients_without_dO(const std::string& list);

/// The forward's output and lse given with --forward-output and --forward-lse ("" when
/// not; check_forward_given has said they go together).
struct ForwardRefs {
  std::string output, lse;
};

/// Reads Q, K, V and dO (checking --max-memory from the headers first), computes the
/// gradients of `names` and writes them to `refs` together (or nothing). With
/// `relative`, the backward of its terms (in memory, never streamed). With `forward`,
/// the given O (widened to float64) and lse instead of a forward, in memory and streamed.
void run_gradients(TensorSource& q, TensorSource& k, TensorSource& v, const std::string& grad_ref,
                   const AttentionOptions& opt, const std::vector<std::string>& names,
                   const std::vector<TensorRef>& refs, const OutputOptions& out,
                   const AttentionRope* rope = nullptr,
                   const RelativeCliOptions* relative = nullptr, const ForwardRefs& forward = {});

}  // namespace posenc::cli
