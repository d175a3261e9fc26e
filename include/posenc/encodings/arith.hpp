#pragma once
/// \file
/// Framework-faithful RoPE arithmetic (`--arith`). posenc's default (`exact`) is the
/// correctly rounded value: frequencies, angles, cos/sin and the rotation in float64,
/// rounded once on output. The other modes reproduce, bit for bit, the float32
/// operation sequence and dtypes of one framework:
/// - `hf`: HF transformers' RoPE init functions (modeling_rope_utils.py) and
///   `apply_rotary_pos_emb`, as torch's CPU kernels compute them (see the man page,
///   section Arithmetic);
/// - `meta`: Meta's llama `precompute_freqs_cis` / `apply_rotary_emb` (complex64);
/// - `ggml`: ggml's CPU `rope` op (incremental angles, glibc cosf/sinf, f16 storage).
/// The mode is a field of RopeParams; `compute_rope_freqs` then attaches a
/// FrameworkRope to the RopeFreqs it returns, and tables and the rotation use it.

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"

namespace posenc {

/// exact|hf|meta|ggml. Throws UsageError naming --arith otherwise.
Arith parse_arith(const std::string& s);
/// "exact", "hf", "meta" or "ggml".
std::string arith_name(Arith a);

/// A RoPE variant reduced to one framework's float32 arithmetic.
struct FrameworkRope {
  Arith arith = Arith::hf;            ///< the framework (never exact)
  RopeStyle style = RopeStyle::neox;  ///< pair layout
  int head_dim = 0;                   ///< D
  int rotary_dim = 0;                 ///< R
  /// hf, meta: the float32 inverse frequencies the framework computes (R/2).
  std::vector<float> inv_freq;
  /// hf: HF's attention_scaling as the float32 that multiplies cos and sin.
  float attention_scaling = 1.0f;
  /// hf: how the rotation rounds (RopeParams::hf_rotation).
  HfRotation hf_rotation = HfRotation::storage;
  /// ggml: the parameters of ggml_rope_ext as llama.cpp passes them (float32), the
  /// derived theta_scale = powf(freq_base, -2/n_dims) and YaRN correction dims, and
  /// the per-pair freq_factors (empty when the op has none).
  float freq_base = 10000.0f;         ///< ggml: freq_base (rope_theta)
  float freq_scale = 1.0f;            ///< ggml: freq_scale, 1 / factor
  float ext_factor = 0.0f;            ///< ggml: ext_factor, YaRN's extrapolation mix (0: none)
  float attn_factor = 1.0f;           ///< ggml: attn_factor, multiplies cos and sin
  float beta_fast = 32.0f;            ///< ggml: beta_fast (YaRN)
  float beta_slow = 1.0f;             ///< ggml: beta_slow (YaRN)
  int n_ctx_orig = 0;                 ///< ggml: n_ctx_orig, the trained context L0
  float theta_scale = 1.0f;           ///< ggml: powf(freq_base, -2 / n_dims)
  float corr_dims[2] = {0.0f, 0.0f};  ///< ggml: YaRN correction dims (ggml_rope_yarn_corr_dims)
  std::vector<float> freq_factors;    ///< ggml: per-pair divisors (llama3, longrope); empty: none
};

/// Reduces `p` (with p.arith != exact) to the framework's arithmetic, given the
/// validated float64 reduction `exact` of the same parameters (rotary width, factor,
/// attention factor, YaRN range). Throws UsageError for combinations the framework
/// does not implement (e.g. dynamic NTK in ggml, YaRN in Meta's code), and when the
/// framework's kernels cannot run on this CPU.
FrameworkRope framework_rope(const RopeParams& p, const RopeFreqs& exact);

/// Attaches framework_rope(p, f) to `f` (called by compute_rope_freqs when p.arith is
/// not exact): sets f.framework, replaces f.inv_freq by the framework's float32
/// frequencies where it has them (hf, meta), and records the arithmetic in f.attrs.
void attach_framework(const RopeParams& p, RopeFreqs& f);

/// The values one framework forms for position `position`, per frequency pair j < R/2:
/// the float32 angle, and cos and sin as they enter the rotation (attention scaling
/// included; hf before the cast to the input dtype). `inverse` negates the sine (the
/// transpose, as a backward pass applies it). Throws InputError for positions the
/// framework cannot represent (ggml: above INT32_MAX).
void framework_rope_row(const FrameworkRope& f, std::int64_t position, bool inverse, float* angle,
                        float* cos, float* sin);

/// hf and meta: cos and sin of n float32 angles as framework_rope_row forms them from its
/// angles (hf: torch's kernels over the n values as one tensor, then the attention
/// scaling; torch's cos and sin of a value depend on the other values of its 8-lane
/// vector, so `angle` must hold what the framework's tensor holds there).
void framework_trig(const FrameworkRope& f, const float* angle, std::size_t n, bool inverse,
                    float* cos, float* sin);

}  // namespace posenc
