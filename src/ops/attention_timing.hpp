#pragma once
// Gemma-3n audio's attention inputs (HF Gemma3nAudioAttention and
// Gemma3nAudioRelativePositionEmbedding) as data for the one kernel: the relative keys
// projected from a sinusoidal timing signal become a per-head relative_k table, and the
// per-dimension query scale a scaled copy of Q. Its block-local visibility is a plain
// inclusive window (KeyRules: --window max(0, context_left - 1),context_right) and its
// relative term sits where Shaw's does, before the soft-cap, so nothing else changes.
// Internal to the library.

#include <vector>

#include "ops/attention_geometry.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// Checks per_dim_scale ([d] floats) and relative_proj ([hq d, D] floats, D even; needs
/// relative_window with both sides and no relative_k), and for relative_proj sets the
/// rows and window of g's relative tables. UsageError / InputError as attention().
void check_timing(Geometry& g, const AttentionOptions& opt);

/// torch.nn.functional.softplus(x) (beta 1, threshold 20) in float64.
double softplus(double x);

/// Row `t` (a position, here a query-minus-key distance) of tensor2tensor's
/// get_timing_signal_1d with `channels` (even) channels, min timescale 1 and max 10^4:
/// [sin(t f_i) | cos(t f_i)], f_i = exp(-i ln(10^4) / max(channels/2 - 1, 1)).
std::vector<double> timing_signal(double t, std::size_t channels);

/// The gradient of relative_proj `proj` [hq d, D] from `grad_keys`, the gradient of the
/// relative_k table it makes ([rows, hq, d]): sum over rows r of grad_keys[r] (x)
/// timing(r), in float64, rows in order.
std::vector<double> relative_proj_grad(const Geometry& g, const Tensor& proj,
                                       const Tensor& grad_keys);

/// The inputs of the run, Gemma-3n's options turned into data: Q scaled per dimension
/// (in the arithmetic type), the per-head relative_k table, and the options that point
/// at them (per_dim_scale and relative_proj cleared, the default scale made explicit).
struct TimingInputs {
  Tensor q;  ///< empty: Q as given
  Tensor rel_k;
  AttentionOptions opt;
};
/// For a run whose options were checked into `g`; `q` is Q as given.
void timing_inputs(TimingInputs& out, const Tensor& q, const Geometry& g,
                   const AttentionOptions& opt);

}  // namespace posenc::attention_detail
