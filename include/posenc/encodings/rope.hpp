#pragma once
/// \file
/// RoPE frequency tables and context-extension scaling, with HF transformers'
/// formulas and parameter names (`modeling_rope_utils.py`). A variant is reduced once
/// to a RopeFreqs value (conventions as data): the pair layout, the rotary width, the
/// inverse frequencies and the attention factor. Tables (`posenc table rope`) and the
/// rotation of tensors (`posenc rope`, `posenc attention --rope`) both use it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/rope_layout.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/value_source.hpp"

namespace posenc {

/// Pairing of dimensions: neox pairs (i, i + r/2) (HF rotate_half), gptj pairs
/// (2i, 2i+1) (GPT-J, Meta's complex form).
enum class RopeStyle {
  neox,  ///< (i, i + r/2): HF rotate_half, GPT-NeoX, Llama in HF (--style neox, alias half)
  gptj   ///< (2i, 2i+1): GPT-J, Meta's complex form, ggml's normal mode (alias interleaved)
};
/// `proportional` is HF v5's Gemma-4 type: the rotation spans the whole head, with
/// int(partial * D) / 2 frequencies 1 / base^(2j / D) and zeros after them.
enum class RopeScaling {
  none,          ///< HF "default": 1 / base^(2i/R)
  linear,        ///< frequencies divided by factor (position interpolation)
  dynamic,       ///< dynamic NTK: the base grows with the sequence length past max_pos
  yarn,          ///< YaRN: interpolation blended with extrapolation, attention factor
  longrope,      ///< LongRoPE (Phi-3 "su"): per-pair short or long factors
  llama3,        ///< Llama 3.1: low frequencies divided by factor, a smooth band between
  proportional   ///< HF v5 (Gemma-4 global layers), see above
};

/// Whose arithmetic the numbers follow: the correctly rounded value (exact) or one
/// framework's float32 operation sequence, bit for bit (see posenc/encodings/arith.hpp).
enum class Arith {
  exact,  ///< float64, rounded once on output (the default)
  hf,     ///< HF transformers on torch's CPU
  meta,   ///< Meta's llama reference (complex64)
  ggml    ///< ggml's CPU rope op
};

/// How HF's apply_rotary_pos_emb rounds under `--arith hf` (f32 inputs: the same in
/// every form).
enum class HfRotation {
  storage,  ///< Llama and most models: cos, sin cast to q's dtype, each operation in it
  /// ERNIE-4.5-MoE: q.float() * cos + rotate_half(q).float() * sin with float32 cos and
  /// sin, rounded once to q's dtype (q.float() narrows f64 inputs to float32 first).
  float32,
  /// ERNIE-4.5: the same with cos and sin cast to q's dtype first.
  float32_cast_trig,
};
struct FrameworkRope;

RopeStyle parse_rope_style(const std::string& s);      ///< neox|half|gptj|interleaved
RopeScaling parse_rope_scaling(const std::string& s);  ///< none|default|linear|...|proportional
/// "neox" or "gptj" (as recorded in the rope_style attribute).
std::string rope_style_name(RopeStyle s);
/// HF's rope_type name: "default", "linear", "dynamic", "yarn", "longrope", "llama3",
/// "proportional" (as recorded in the rope_type attribute).
std::string rope_scaling_name(RopeScaling s);

/// The user-facing parameters (names as in HF `rope_scaling`). Unset optionals take
/// HF's defaults. Each field is one option of the ROPE OPTIONS (posenc-rope(1)): the
/// option is the field's name with dashes (`low_freq_factor` is --low-freq-factor),
/// except head_dim (--dim) and scaling (--scaling).
struct RopeParams {
  RopeStyle style = RopeStyle::neox;  ///< pair layout (--style)
  int head_dim = 0;       ///< D, the head dimension (--dim), even unless rotary_dim is
  int rotary_dim = 0;     ///< R; 0 = int(partial * D), truncating as HF does
  double partial = 1.0;   ///< partial_rotary_factor, in (0, 1]
  double base = 10000.0;  ///< rope_theta, > 0
  RopeScaling scaling = RopeScaling::none;       ///< rope_type (--scaling)
  std::optional<double> factor;  ///< s > 0 (linear, dynamic, yarn, longrope, llama3)
  std::optional<std::int64_t> original_max_pos;  ///< L0 (original_max_position_embeddings)
  std::optional<std::int64_t> max_pos;           ///< max_position_embeddings
  std::optional<double> beta_fast;               ///< yarn: fast correction bound, default 32
  std::optional<double> beta_slow;               ///< yarn: slow correction bound, default 1
  std::optional<double> mscale;                  ///< yarn (DeepSeek): get_mscale's mscale
  std::optional<double> mscale_all_dim;          ///< yarn (DeepSeek): its mscale_all_dim
  std::optional<double> attention_factor;        ///< yarn / longrope override
  bool truncate = true;                          ///< yarn: floor/ceil the correction range
  std::optional<double> low_freq_factor;         ///< llama3: default 1
  std::optional<double> high_freq_factor;        ///< llama3: default 4
  std::vector<double> short_factor;              ///< longrope: R/2 divisors up to L0
  std::vector<double> long_factor;               ///< longrope: R/2 divisors past L0
  /// PhiMoE (PhimoeRotaryEmbedding): the factor multiplying cos and sin with the short
  /// factor set, in place of the longrope attention factor.
  std::optional<double> short_mscale;
  /// PhiMoE: the factor multiplying cos and sin with the long factor set.
  std::optional<double> long_mscale;
  /// HunYuan's NTK-alpha form of dynamic (HunYuanDenseV1RotaryEmbedding): while the
  /// sequence fits max_pos, base * alpha^(R / (R - 2)) and attention factor 1; past it,
  /// HF's dynamic update recomputes the plain dynamic NTK frequencies.
  std::optional<double> alpha;
  /// The sequence length the table is for: dynamic NTK uses max(seq_len, max_pos);
  /// longrope picks long_factor when seq_len > L0. 0 = not known (taken from the
  /// positions by the caller).
  std::int64_t seq_len = 0;
  Arith arith = Arith::exact;  ///< framework arithmetic (see arith.hpp)
  /// Rotate the last R dims of a head instead of the first (DeepSeek MLA: q = [nope |
  /// rope]); the first D - R pass through.
  bool rotary_last = false;
  /// HF `rope_interleave` (DeepSeek-V3 `apply_rotary_pos_emb_interleave`): the input's
  /// rotary pairs are (2i, 2i+1); the output holds pair i at (i, i + R/2), the neox
  /// order. Needs the neox style; tables are the neox ones.
  bool rope_interleave = false;
  /// M-RoPE sections (t, h, w) in frequency pairs, summing to R/2 (HF `mrope_section`);
  /// empty = plain RoPE. `mrope_interleaved` (Qwen3-VL) assigns pair j to h when
  /// j % 3 == 1 and j < 3 h, to w when j % 3 == 2 and j < 3 w, else to t; otherwise the
  /// sections are consecutive chunks (Qwen2-VL).
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;  ///< Qwen3-VL's interleaved sections (see mrope_section)
  /// A RoPE layout the model type implies (apply_hf_config: ERNIE-4.5-VL's ernie_vl,
  /// HunYuan-VL's xdrope, with their config's sections); plain = none, and not with
  /// mrope_section. The rotation uses it unless its options give M-RoPE sections (which
  /// replace it); a layout or 2-D grid in the options is refused with it.
  RopeLayoutSpec layout;
  /// `--arith hf`: the rounding of the rotation (set by apply_hf_config for the model
  /// types whose apply_rotary_pos_emb computes in float32).
  HfRotation hf_rotation = HfRotation::storage;
  /// The fields a config file gave (apply_hf_config records them, by member name): a
  /// range check of compute_rope_freqs names that file's key (InputError) instead of
  /// the field's option (UsageError).
  ValueSources sources;
};

/// A reduced RoPE variant: everything the rotation needs.
struct RopeFreqs {
  RopeStyle style = RopeStyle::neox;  ///< pair layout
  int head_dim = 0;                   ///< D
  int rotary_dim = 0;                 ///< R, the rotated dims (even, <= D)
  std::vector<double> inv_freq;   ///< rotary_dim / 2 entries, float64
  double attention_factor = 1.0;  ///< multiplies cos and sin (HF attention_scaling)
  int rotary_offset = 0;          ///< first rotated dim: 0, or D - R for rotary_last
  bool rope_interleave = false;   ///< see RopeParams::rope_interleave
  std::vector<int> mrope_section;  ///< see RopeParams::mrope_section
  bool mrope_interleaved = false;  ///< see RopeParams::mrope_interleaved
  RopeLayoutSpec layout;           ///< see RopeParams::layout
  ValueSources sources;            ///< see RopeParams::sources
  Attrs attrs;                    ///< the parameters used, for recording with outputs
  /// Set when the parameters asked for a framework's arithmetic (RopeParams::arith);
  /// inv_freq then holds that framework's float32 frequencies where it has them.
  std::shared_ptr<const FrameworkRope> framework;
};

/// HF's default inverse frequencies 1 / base^(2i / dim) for i < dim / 2, in float64.
/// Also the frequencies of the sinusoidal table and (with dim = D / 2) of axial 2-D RoPE.
std::vector<double> default_inv_freq(double base, int dim);

/// The position component (0 t, 1 h, 2 w) of each of `pairs` frequency pairs for M-RoPE
/// sections (RopeParams::mrope_section). Throws UsageError unless there are three
/// non-negative sections summing to `pairs`.
std::vector<int> mrope_components(const std::vector<int>& sections, bool interleaved,
                                  std::size_t pairs);

/// Reduces `p` to frequencies. Throws UsageError for inconsistent parameters (odd or
/// too large rotary dim, missing factor, factor lists of the wrong length, ...), or
/// InputError naming the file and key where `p.sources` says a config gave the value.
RopeFreqs compute_rope_freqs(const RopeParams& p);

/// Fills rope fields of `p` from a HF model config.json as HF transformers v5 reads it
/// (see posenc/encodings/hf_config.hpp for the keys, the model-type defaults and the
/// layer types): rope_theta, partial_rotary_factor, head_dim (qk_rope_head_dim for
/// MLA, global_head_dim for Gemma-4 full layers, else hidden_size /
/// num_attention_heads), max_position_embeddings, original_max_position_embeddings
/// (the top level wins over the scaling object, as HF's standardisation does),
/// rope_scaling / rope_parameters (the entry of `layer_type` when keyed by layer type;
/// "" = full_attention, or the config's only layer type), mrope_section,
/// mrope_interleaved, rope_interleave and the pair style of the model type; for
/// ERNIE-4.5-VL (ernie4_5_vl_moe) the ernie_vl layout of its mrope_section. Fields named
/// in `keep` are not overwritten; the names are the RopeParams members: base, partial,
/// head_dim, rotary_dim, max_pos, original_max_pos, scaling, factor, beta_fast,
/// beta_slow, mscale, mscale_all_dim, attention_factor, low_freq_factor,
/// high_freq_factor, truncate, short_factor, long_factor, short_mscale, long_mscale,
/// alpha, style, mrope_section, rope_interleave, layout (short_mscale and long_mscale are
/// PhiMoE's, alpha HunYuan's). Throws InputError naming the file for unreadable or
/// malformed JSON, wrongly typed or out-of-range fields, unsupported rope types, unknown
/// layer types and layer types without RoPE.
void apply_hf_config(const std::string& path, RopeParams& p,
                     const std::vector<std::string>& keep = {}, const std::string& layer_type = "");

}  // namespace posenc
