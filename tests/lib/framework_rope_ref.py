"""The frameworks' own RoPE and attention code paths, run in Debian's torch on the CPU:
the references of `posenc ... --arith hf` and `--arith meta`.

Written line by line after
- HF transformers: modeling_rope_utils.py (v5 forms: rope_parameters, `truncate`,
  `proportional`, dynamic_rope_update) and modeling_llama.py (LlamaRotaryEmbedding.forward,
  rotate_half, apply_rotary_pos_emb, repeat_kv, eager_attention_forward);
- Meta: llama/model.py (precompute_freqs_cis, reshape_for_broadcast, apply_rotary_emb)
  and llama-models' llama3/model.py (apply_scaling for Llama 3.1).
Only the parts posenc reproduces are kept; the arithmetic, dtypes and operation order
are the frameworks'. torch runs single-threaded (see set_threads) so that its parallel
split never cuts an inner loop.
"""
import ctypes
import math

import torch


def set_threads():
    """torch on one thread, and the OpenBLAS it links too (the same library posenc loads):
    torch.set_num_threads does not reach OpenBLAS's own pool, and a threaded sgemm splits
    some products otherwise (AMD EPYC Zen 5, OpenBLAS 0.3.21 on its Haswell kernels: 4412
    of the 16384 float32 logits of four 64x128 by 128x64 products differ with two
    threads, by up to 2e-4 relative). posenc reproduces torch on one OpenBLAS thread."""
    torch.set_num_threads(1)
    ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(1)


class Config:
    """The attributes HF's init functions read from a PretrainedConfig."""

    def __init__(self, head_dim, rope_parameters, max_position_embeddings=4096):
        self.head_dim = head_dim
        self.hidden_size = head_dim
        self.num_attention_heads = 1
        self.rope_parameters = rope_parameters
        self.max_position_embeddings = max_position_embeddings


# --- HF: modeling_rope_utils.py ------------------------------------------------------

def _compute_default_rope_parameters(config, device=None, seq_len=None):
    base = config.rope_parameters["rope_theta"]
    partial_rotary_factor = config.rope_parameters.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * partial_rotary_factor)
    attention_factor = 1.0
    inv_freq = 1.0 / (
        base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
    return inv_freq, attention_factor


def _compute_linear_scaling_rope_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    factor = rope_parameters_dict["factor"]
    base = rope_parameters_dict["rope_theta"]
    partial_rotary_factor = rope_parameters_dict.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * partial_rotary_factor)
    attention_factor = 1.0
    inv_freq = 1.0 / (
        base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
    inv_freq /= factor
    return inv_freq, attention_factor


def _compute_proportional_rope_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    base = rope_parameters_dict["rope_theta"]
    factor = rope_parameters_dict.get("factor", 1.0)
    rope_proportion = rope_parameters_dict.get("partial_rotary_factor", 1.0)
    attention_factor = 1.0
    rope_angles = int(rope_proportion * head_dim // 2)
    inv_freq_rotated = 1.0 / (
        base ** (torch.arange(0, 2 * rope_angles, 2, dtype=torch.int64).to(device=device, dtype=torch.float)
                 / head_dim))
    nope_angles = head_dim // 2 - rope_angles
    if nope_angles > 0:
        inv_freq = torch.cat(
            (inv_freq_rotated, torch.zeros(nope_angles, dtype=torch.float32, device=device)), dim=0)
    else:
        inv_freq = inv_freq_rotated
    inv_freq /= factor
    return inv_freq, attention_factor


def _compute_dynamic_ntk_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    base = rope_parameters_dict["rope_theta"]
    partial_rotary_factor = rope_parameters_dict.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    dim = int(head_dim * partial_rotary_factor)
    factor = rope_parameters_dict["factor"]
    attention_factor = 1.0
    if seq_len is None:
        seq_len = config.max_position_embeddings
    elif isinstance(seq_len, torch.Tensor):
        seq_len = torch.maximum(
            seq_len, torch.tensor(config.max_position_embeddings, dtype=seq_len.dtype,
                                  device=seq_len.device))
    else:
        seq_len = max(seq_len, config.max_position_embeddings)
    base = base * ((factor * seq_len / config.max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (
        base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
    return inv_freq, attention_factor


def _compute_yarn_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    base = rope_parameters_dict["rope_theta"]
    partial_rotary_factor = rope_parameters_dict.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    dim = int(head_dim * partial_rotary_factor)
    factor = rope_parameters_dict["factor"]
    attention_factor = rope_parameters_dict.get("attention_factor")
    mscale = rope_parameters_dict.get("mscale")
    mscale_all_dim = rope_parameters_dict.get("mscale_all_dim")
    original_max_position_embeddings = rope_parameters_dict["original_max_position_embeddings"]
    if factor is None:
        factor = config.max_position_embeddings / original_max_position_embeddings

    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rope_parameters_dict.get("beta_fast") or 32
    beta_slow = rope_parameters_dict.get("beta_slow") or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
        low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
        high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
        if truncate:
            low = math.floor(low)
            high = math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):
        if min == max:
            max += 0.001
        linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
        ramp_func = torch.clamp(linear_func, 0, 1)
        return ramp_func

    pos_freqs = base ** (torch.arange(0, dim, 2).to(device=device, dtype=torch.float) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    truncate = config.rope_parameters.get("truncate", True)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base, original_max_position_embeddings,
                                      truncate)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).to(
        device=device, dtype=torch.float)
    inv_freq = (inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
                + inv_freq_extrapolation * inv_freq_extrapolation_factor)
    return inv_freq, attention_factor


def _compute_longrope_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    base = rope_parameters_dict["rope_theta"]
    partial_rotary_factor = rope_parameters_dict.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    dim = int(head_dim * partial_rotary_factor)
    long_factor = rope_parameters_dict["long_factor"]
    short_factor = rope_parameters_dict["short_factor"]
    factor = rope_parameters_dict.get("factor")
    attention_factor = rope_parameters_dict.get("attention_factor")
    original_max_position_embeddings = rope_parameters_dict["original_max_position_embeddings"]
    if factor is None:
        factor = config.max_position_embeddings / original_max_position_embeddings
    if attention_factor is None:
        if factor <= 1.0:
            attention_factor = 1.0
        else:
            attention_factor = math.sqrt(1 + math.log(factor) / math.log(original_max_position_embeddings))
    if seq_len and seq_len > original_max_position_embeddings:
        ext_factors = torch.tensor(long_factor, dtype=torch.float32, device=device)
    else:
        ext_factors = torch.tensor(short_factor, dtype=torch.float32, device=device)
    inv_freq_shape = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    inv_freq = 1.0 / (ext_factors * base**inv_freq_shape)
    return inv_freq, attention_factor


def _compute_llama3_parameters(config, device=None, seq_len=None):
    rope_parameters_dict = config.rope_parameters
    inv_freq, attention_factor = _compute_default_rope_parameters(config, device, seq_len)
    factor = rope_parameters_dict["factor"]
    low_freq_factor = rope_parameters_dict["low_freq_factor"]
    high_freq_factor = rope_parameters_dict["high_freq_factor"]
    old_context_len = rope_parameters_dict["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, attention_factor


ROPE_INIT_FUNCTIONS = {
    "default": _compute_default_rope_parameters,
    "linear": _compute_linear_scaling_rope_parameters,
    "dynamic": _compute_dynamic_ntk_parameters,
    "yarn": _compute_yarn_parameters,
    "longrope": _compute_longrope_parameters,
    "llama3": _compute_llama3_parameters,
    "proportional": _compute_proportional_rope_parameters,
}


# --- HF: modeling_llama.py -----------------------------------------------------------

class RotaryEmbedding:
    """LlamaRotaryEmbedding with @dynamic_rope_update, for one forward call."""

    def __init__(self, config):
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        self.rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = self.rope_init_fn(self.config, None)
        self.inv_freq = inv_freq
        self.original_inv_freq = self.inv_freq

    def _dynamic_frequency_update(self, position_ids):
        seq_len = torch.max(position_ids) + 1
        if seq_len > self.max_seq_len_cached:
            inv_freq, self.attention_scaling = self.rope_init_fn(self.config, None, seq_len=seq_len)
            self.inv_freq = inv_freq
            self.max_seq_len_cached = seq_len

    def _longrope_frequency_update(self, position_ids):
        seq_len = torch.max(position_ids) + 1
        original_max_position_embeddings = self.config.rope_parameters["original_max_position_embeddings"]
        if seq_len > original_max_position_embeddings:
            self.inv_freq, _ = self.rope_init_fn(self.config, None,
                                                 seq_len=original_max_position_embeddings + 1)
        else:
            self.inv_freq = self.original_inv_freq

    def forward(self, x, position_ids):
        if "dynamic" in self.rope_type:
            self._dynamic_frequency_update(position_ids)
        elif self.rope_type == "longrope":
            self._longrope_frequency_update(position_ids)
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1):
    """Llama's, with partial rotary as in Phi/NeoX (the first cos.shape[-1] dims)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    return torch.cat((q_embed, q_pass), dim=-1)


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_rotary_pos_emb_interleaved(q, cos, sin, unsqueeze_dim=1):
    """The interleaved form (GPT-J's rotate_every_two and repeat_interleave) with Llama's
    dtypes: cos and sin in q's dtype, one rounding per operation."""
    half = cos.shape[-1] // 2
    cos = torch.repeat_interleave(cos[..., :half], 2, -1).unsqueeze(unsqueeze_dim)
    sin = torch.repeat_interleave(sin[..., :half], 2, -1).unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_every_two(q_rot) * sin)
    return torch.cat((q_embed, q_pass), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(query, key, value, attention_mask, scaling, num_key_value_groups,
                            matmul=torch.matmul):
    """HF's eager path; `matmul` replaces torch.matmul where the test needs to (the
    elementwise steps stay HF's). Returns the masked logits too."""
    key_states = repeat_kv(key, num_key_value_groups)
    value_states = repeat_kv(value, num_key_value_groups)
    attn_weights = matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    logits = attn_weights
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = matmul(attn_weights, value_states)
    return logits, attn_weights, attn_output


def eager_mask(allowed, dtype):
    """HF v5's eager mask from a boolean one: 0 where allowed, finfo(dtype).min elsewhere."""
    min_dtype = torch.finfo(dtype).min
    return torch.where(allowed, torch.tensor(0.0, dtype=dtype), torch.tensor(min_dtype, dtype=dtype))


# --- HF: modeling_qwen2_vl.py, modeling_qwen3_vl.py (text) ---------------------------

class MultimodalRotaryEmbedding(RotaryEmbedding):
    """Qwen2VLRotaryEmbedding.forward (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni), or with
    `interleaved` sections Qwen3VLTextRotaryEmbedding.forward and its
    apply_interleaved_mrope; position_ids [3, b, s]."""

    def __init__(self, config, interleaved=None):
        super().__init__(config)
        self.interleaved = interleaved

    def forward(self, x, position_ids):
        if "dynamic" in self.rope_type:
            self._dynamic_frequency_update(position_ids)
        if position_ids.ndim == 2:
            position_ids = position_ids[None, ...].expand(3, position_ids.shape[0], -1)
        inv_freq_expanded = self.inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
        position_ids_expanded = position_ids[:, :, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(2, 3)
        if self.interleaved is not None:
            freqs = apply_interleaved_mrope(freqs, self.interleaved)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def apply_interleaved_mrope(freqs, mrope_section):
    freqs_t = freqs[0]
    for dim, offset in enumerate((1, 2), start=1):
        length = mrope_section[dim] * 3
        idx = slice(offset, length, 3)
        freqs_t[..., idx] = freqs[dim, ..., idx]
    return freqs_t


def apply_multimodal_rotary_pos_emb(q, cos, sin, mrope_section, unsqueeze_dim=1):
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


# --- HF: the vision towers (modeling_qwen2_vl.py, modeling_pixtral.py,
# modeling_dinov3_vit.py) ------------------------------------------------------------

class VisionRotaryEmbedding:
    def __init__(self, dim, theta=10000.0):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))

    def forward(self, seqlen):
        seq = torch.arange(seqlen, dtype=self.inv_freq.dtype)
        return torch.outer(seq, self.inv_freq)


def qwen2_vl_rot_pos_emb(head_dim, grid_thw, spatial_merge_size, theta=10000.0):
    """Qwen2VisionTransformerPretrainedModel.rot_pos_emb, then its forward's
    cat((rotary_pos_emb, rotary_pos_emb)).cos() / .sin(); also the (h, w) ids."""
    pos_ids = []
    for t, h, w in grid_thw:
        hpos_ids = torch.arange(h).unsqueeze(1).expand(-1, w)
        hpos_ids = hpos_ids.reshape(h // spatial_merge_size, spatial_merge_size,
                                    w // spatial_merge_size, spatial_merge_size)
        hpos_ids = hpos_ids.permute(0, 2, 1, 3).flatten()
        wpos_ids = torch.arange(w).unsqueeze(0).expand(h, -1)
        wpos_ids = wpos_ids.reshape(h // spatial_merge_size, spatial_merge_size,
                                    w // spatial_merge_size, spatial_merge_size)
        wpos_ids = wpos_ids.permute(0, 2, 1, 3).flatten()
        pos_ids.append(torch.stack([hpos_ids, wpos_ids], dim=-1).repeat(t, 1))
    pos_ids = torch.cat(pos_ids, dim=0)
    return vision_cos_sin(head_dim, pos_ids, theta), pos_ids


def vision_cos_sin(head_dim, pos_ids, theta=10000.0):
    """rot_pos_emb's table lookup for (h, w) ids [n, 2]: cos, sin [n, head_dim] float32."""
    rotary_pos_emb_full = VisionRotaryEmbedding(head_dim // 2, theta).forward(int(pos_ids.max()) + 1)
    rotary_pos_emb = rotary_pos_emb_full[pos_ids].flatten(1)
    emb = torch.cat((rotary_pos_emb, rotary_pos_emb), dim=-1)
    return emb.cos(), emb.sin()


def apply_rotary_pos_emb_vision(q, cos, sin):
    """q [n, heads, d] as the vision attention holds it."""
    orig_q_dtype = q.dtype
    q = q.float()
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    q_embed = (q * cos) + (rotate_half(q) * sin)
    return q_embed.to(orig_q_dtype)


class PixtralRotaryEmbedding:
    def __init__(self, head_dim, rope_theta, max_patches_per_side):
        freqs = 1.0 / (rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        h = torch.arange(max_patches_per_side)
        w = torch.arange(max_patches_per_side)
        freqs_h = torch.outer(h, freqs[::2]).float()
        freqs_w = torch.outer(w, freqs[1::2]).float()
        inv_freq = torch.cat(
            [freqs_h[:, None, :].repeat(1, max_patches_per_side, 1),
             freqs_w[None, :, :].repeat(max_patches_per_side, 1, 1)],
            dim=-1,
        ).reshape(-1, head_dim // 2)
        self.inv_freq = torch.cat((inv_freq, inv_freq), dim=-1)

    def forward(self, x, position_ids):
        freqs = self.inv_freq[position_ids]
        emb = freqs
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(x.dtype), sin.to(x.dtype)


def get_patches_center_coordinates(num_patches_h, num_patches_w, dtype):
    coords_h = torch.arange(0.5, num_patches_h, dtype=dtype)
    coords_w = torch.arange(0.5, num_patches_w, dtype=dtype)
    coords_h = coords_h / num_patches_h
    coords_w = coords_w / num_patches_w
    coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1)
    coords = coords.flatten(0, 1)
    coords = 2.0 * coords - 1.0
    return coords


class DINOv3ViTRopePositionEmbedding:
    def __init__(self, head_dim, rope_theta):
        self.inv_freq = 1 / rope_theta ** torch.arange(0, 1, 4 / head_dim, dtype=torch.float32)

    def forward(self, num_patches_h, num_patches_w, dtype):
        patch_coords = get_patches_center_coordinates(num_patches_h, num_patches_w, torch.float32)
        angles = 2 * math.pi * patch_coords[:, :, None] * self.inv_freq[None, None, :]
        angles = angles.flatten(1, 2)
        angles = angles.tile(2)
        cos = torch.cos(angles)
        sin = torch.sin(angles)
        return cos.to(dtype=dtype), sin.to(dtype=dtype)


def dinov3_apply_rotary_pos_emb(q, cos, sin):
    num_tokens = q.shape[-2]
    num_patches = sin.shape[-2]
    num_prefix_tokens = num_tokens - num_patches
    q_prefix_tokens, q_patches = q.split((num_prefix_tokens, num_patches), dim=-2)
    q_patches = (q_patches * cos) + (rotate_half(q_patches) * sin)
    return torch.cat((q_prefix_tokens, q_patches), dim=-2)


# --- Meta ----------------------------------------------------------------------------

def apply_scaling(freqs, scale_factor=8, low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
    """llama-models' llama3/model.py (its constants as parameters)."""
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * torch.pi / freqs
    new_freqs = torch.where(wavelen > low_freq_wavelen, freqs / scale_factor, freqs)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    return torch.where(
        (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen),
        (1 - smooth) * new_freqs / scale_factor + smooth * new_freqs,
        new_freqs,
    )


def precompute_freqs_cis(dim, end, theta=10000.0, use_scaled=False, **scaling):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    if use_scaled:
        freqs = apply_scaling(freqs, **scaling)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, freqs_cis):
    """llama's apply_rotary_emb for one tensor [b, s, h, d]."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq)
