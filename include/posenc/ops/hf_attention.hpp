#pragma once
/// \file
/// A HF config's attention parameters (posenc/encodings/hf_config.hpp) applied to
/// AttentionOptions, and checked against the Q, K, V shapes.

#include <string>
#include <vector>

#include "posenc/encodings/hf_config.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// Sets on `opt` what the config fixes for its layer type: scale, sliding_window,
/// softcap, chunk_size, temperature (scale and floor) and ALiBi (BLOOM: bias m j after
/// the scale; Falcon: before it). Fields named in `keep` (the declared fields' names,
/// attention_fields.hpp: scale, attn_temperature, ...) are left alone.
void apply_hf_attention(const HfAttentionConfig& c, AttentionOptions& opt,
                        const std::vector<std::string>& keep = {});

/// Throws InputError naming `path` and the tensor when the head counts of Q and K, the
/// head dim of Q and K or the head dim of V differ from the config's (only axes the
/// tensors have are checked; `axes` as AttentionOptions::axes).
void check_hf_attention_shapes(const HfAttentionConfig& c, const std::string& path, const Shape& q,
                               const Shape& k, const Shape* v, const std::string& axes);

}  // namespace posenc
