#pragma once
// The per-framework reductions behind framework_rope (arith.cpp). Internal to the
// library; each takes the user's parameters and their validated float64 reduction.

#include <vector>

#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc::framework_detail {

/// A number the float64 reduction recorded in its attributes (factor, yarn_low, ...).
/// Throws std::logic_error if it is missing: the reductions always record it.
double attr_number(const Attrs& attrs, const char* name);

/// HF transformers' inverse frequencies for every rope_type, float32 torch operations
/// in HF's order (rope_hf.cpp).
std::vector<float> hf_inv_freq(const RopeParams& p, const RopeFreqs& exact);

/// HF's default frequencies 1.0 / (base ** (arange(0, 2n, 2).float() / dim)), n pairs.
std::vector<float> hf_default_inv_freq(double base, int dim, int n);

/// llama3 scaling of `inv` (HF's _compute_llama3_parameters; Meta's apply_scaling is
/// the same torch operations).
void hf_llama3_scale(std::vector<float>& inv, double factor, double l0, double low_freq_factor,
                     double high_freq_factor);

/// ggml_rope_ext's parameters as llama.cpp derives them from a HF config (rope_ggml.cpp).
void ggml_setup(const RopeParams& p, const RopeFreqs& exact, FrameworkRope& g);

/// ggml's rope cache for one position: ggml_rope_cache_init (rope_ggml.cpp).
void ggml_row(const FrameworkRope& g, std::int64_t position, bool inverse, float* angle, float* cos,
              float* sin);

}  // namespace posenc::framework_detail
