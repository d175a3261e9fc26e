// A HF config's attention parameters applied to AttentionOptions and checked against
// the tensors (posenc/ops/hf_attention.hpp).

#include "posenc/ops/hf_attention.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "posenc/error.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {

void apply_hf_attention(const HfAttentionConfig& c, AttentionOptions& opt,
                        const std::vector<std::string>& keep) {
  auto free = [&keep](const char* name) {
    return std::find(keep.begin(), keep.end(), name) == keep.end();
  };
  auto from = [&](const char* field, const char* key) { opt.sources.set(field, c.path, key); };
  if (c.scale && free("scale")) opt.scale = *c.scale;
  if (c.sliding_window && free("sliding_window")) {
    opt.sliding_window = *c.sliding_window;
    from("sliding_window", "sliding_window");
  }
  if (c.softcap && free("softcap")) {
    opt.softcap = *c.softcap;
    from("softcap", "attn_logit_softcapping");
  }
  if (c.chunk_size && free("chunk_size")) {
    opt.chunk_size = *c.chunk_size;
    from("chunk_size", "attention_chunk_size");
  }
  if (c.temperature_scale && free("attn_temperature")) {
    opt.temperature_scale = *c.temperature_scale;
    opt.temperature_floor = c.temperature_floor.value_or(0.0);
    from("temperature_scale", "attn_temperature_tuning");
  }
  if (c.llama4_scaling_beta && free("llama4_scaling")) {
    opt.llama4_scaling_beta = *c.llama4_scaling_beta;
    opt.llama4_scaling_period = c.llama4_scaling_period.value_or(0);
    from("llama4_scaling_beta", "llama_4_scaling_beta");
  }
  if (c.alibi != HfAlibi::none && free("alibi")) {
    // BLOOM's build_alibi_tensor: slope * key position (cumsum of the mask - 1).
    opt.alibi = AlibiVariant::fairseq;
    opt.alibi_before_scale = c.alibi == HfAlibi::falcon;
    from("alibi", c.alibi == HfAlibi::falcon ? "alibi" : "model_type");
  }
}

void check_hf_attention_shapes(const HfAttentionConfig& c, const std::string& path, const Shape& q,
                               const Shape& k, const Shape* v, const std::string& axes) {
  const Axes ax = resolve_axes(axes, q.size(), "q");
  auto check = [&](const Shape& s, const char* what, char axis, std::optional<int> want,
                   const char* key) {
    const int i = ax.index(axis);
    if (!want || i < 0 || static_cast<std::size_t>(i) >= s.size()) return;
    if (s[static_cast<std::size_t>(i)] != static_cast<std::size_t>(*want)) {
      throw InputError(fmt::format("{}: shape {} has {} {} on axis {}, but {} ({}) says {}", what,
                                   shape_str(s), s[static_cast<std::size_t>(i)],
                                   axis == 'h' ? "heads" : "dims", axis, path, key, *want));
    }
  };
  check(q, "q", 'h', c.heads, "num_attention_heads");
  check(k, "k", 'h', c.kv_heads, "num_key_value_heads");
  check(q, "q", 'd', c.head_dim, "head_dim");
  check(k, "k", 'd', c.head_dim, "head_dim");
  if (v != nullptr) {
    check(*v, "v", 'h', c.kv_heads, "num_key_value_heads");
    check(*v, "v", 'd', c.v_head_dim ? c.v_head_dim : c.head_dim,
          c.v_head_dim ? "v_head_dim" : "head_dim");
  }
}

}  // namespace posenc
