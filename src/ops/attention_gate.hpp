#pragma once
// WavLM's gate on the T5 relative bias as an attention score term (HF WavLMAttention:
// gru_rel_pos_linear and gru_rel_pos_const): one factor per (batch, head, query) from
// the layer's input hidden states, multiplying that query's T5 bias row. The options
// are checked here (check_gate) and the factors computed once per run (gate_factors);
// the kernel applies them (attention_kernel.cpp). Internal to the library.

#include <vector>

#include "ops/attention_geometry.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// Checks the gate tensors of `opt` against Q (g.b, g.hq, g.sq): UsageError for some
/// of them alone or without t5_bias; InputError for shapes that do not fit or
/// non-float tensors.
void check_gate(const Geometry& g, const AttentionOptions& opt);

/// The factors [b][hq][sq] in float64 (empty without a gate): HF's
///   proj = gru_rel_pos_linear(x).view(..., 2, 4).sum(-1)
///   gate_a, gate_b = sigmoid(proj).chunk(2)
///   gate = gate_a * (gate_b * gru_rel_pos_const - 1.0) + 2.0
std::vector<double> gate_factors(const Geometry& g, const AttentionOptions& opt);

/// The gradients of the gate's tensors (float64, each of its tensor's size, row-major)
/// from `dfactor` [b][hq][sq], the gradient of each factor: through gate = a (g c - 1) + 2
/// and the two sigmoids to the projection's sums, then to its weight, bias and input;
/// summed over b, hq, sq in that order.
struct GateGrads {
  std::vector<double> input, weight, bias, constant;
};
GateGrads gate_grads(const Geometry& g, const AttentionOptions& opt,
                     const std::vector<double>& dfactor);

}  // namespace posenc::attention_detail
