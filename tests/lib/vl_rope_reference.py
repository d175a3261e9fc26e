"""The RoPE of two multimodal language models of HF transformers, rewritten in torch
float64 with the structure of the upstream functions (cited per function), for tests/
reference/test_rope_vl_families.py and tests/python/test_layouts.py:

- ERNIE-4.5-VL (modeling_ernie4_5_vl_moe.py): pre-permuted inv_freq, h and w parts
  interleaved pair by pair, t appended, repeat_interleave(2), rotate_half_text.
- HunYuan-VL (modeling_hunyuan_vl.py): NTK-alpha inv_freq, cat(freqs, freqs) per
  position-id row, apply_rotary_pos_emb_xdrope's chunks of 2 * section dims over the
  whole head.
"""
import torch


# --- ERNIE-4.5-VL: transformers modeling_ernie4_5_vl_moe.py, in float64 ---------------

def ernie_compute_default_rope_parameters(base, dim, mrope_section):
    """Ernie4_5_VL_MoeTextRotaryEmbedding.compute_default_rope_parameters (float64)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float64) / dim))
    # Special to ernie, we prerotate on the hw dim
    hw_dim = mrope_section[0] + mrope_section[1]
    t_dim = mrope_section[2]
    inv_freq_3d = torch.empty_like(inv_freq)
    inv_freq_3d[:hw_dim] = torch.cat([inv_freq[:-t_dim][0::2], inv_freq[:-t_dim][1::2]])
    inv_freq_3d[-t_dim:] = inv_freq[-t_dim:]
    return inv_freq_3d, 1.0


def ernie_recomposition_to_3d(freq, mrope_section):
    """Ernie4_5_VL_MoeTextRotaryEmbedding.recomposition_to_3d."""
    freq_h, freq_w, freq_t = (m[(i + 1) % 3] for i, m in enumerate(freq.split([*mrope_section], dim=-1)))
    freq_hw = torch.stack([freq_h, freq_w], dim=-1).flatten(-2)
    freq_hwt = torch.cat([freq_hw, freq_t], dim=-1)
    return freq_hwt.repeat_interleave(2, dim=-1)


def ernie_forward(inv_freq, attention_scaling, position_ids, mrope_section):
    """Ernie4_5_VL_MoeTextRotaryEmbedding.forward (float64); position_ids [3, bs, s]."""
    inv_freq_expanded = inv_freq[None, None, :, None].expand(3, position_ids.shape[1], -1, 1)
    position_ids_expanded = position_ids[:, :, None, :].to(torch.float64)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(2, 3)
    cos = freqs.cos() * attention_scaling
    sin = freqs.sin() * attention_scaling
    sin = ernie_recomposition_to_3d(sin, mrope_section)
    cos = ernie_recomposition_to_3d(cos, mrope_section)
    return cos, sin


def rotate_half_text(x):
    """modeling_ernie4_5_vl_moe.rotate_half_text."""
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def ernie_apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1):
    """modeling_ernie4_5_vl_moe.apply_rotary_pos_emb (q only; float64 throughout)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half_text(q) * sin)


def ernie_reference(q, ids, base, mrope_section):
    """q [b, h, s, D], ids [3, b, s] or [3, s] (t, h, w)."""
    ids = torch.from_numpy(ids)
    if ids.dim() == 2:
        ids = ids[:, None, :].expand(3, q.shape[0], -1)
    inv_freq, scaling = ernie_compute_default_rope_parameters(base, q.shape[-1], mrope_section)
    cos, sin = ernie_forward(inv_freq, scaling, ids, mrope_section)
    return ernie_apply_rotary_pos_emb(torch.from_numpy(q), cos, sin).numpy()


# --- HunYuan-VL: transformers modeling_hunyuan_vl.py, in float64 ---------------------

def hunyuan_inv_freq(rope_theta, alpha, head_dim):
    """HunYuanDenseV1RotaryEmbedding.__init__, DynamicNTKAlpha branch (float64)."""
    base = rope_theta * alpha ** (head_dim / (head_dim - 2))
    return 1.0 / (base ** (torch.arange(0, head_dim, 2).to(torch.float64) / head_dim))


def hunyuan_forward(inv_freq, attention_scaling, position_ids):
    """HunYuanVLRotaryEmbedding.forward (float64); position_ids [channels, bs, s]."""
    num_channels = position_ids.shape[0]
    inv_freq_expanded = inv_freq[None, None, :, None].expand(num_channels, position_ids.shape[1], -1, 1)
    position_ids_expanded = position_ids[:, :, None, :].to(torch.float64)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos, sin


def rotate_half(x):
    """modeling_hunyuan_vl.rotate_half."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hunyuan_apply_rotary_pos_emb_xdrope(q, cos, sin, xdrope_section, unsqueeze_dim=1):
    """modeling_hunyuan_vl.apply_rotary_pos_emb_xdrope (q only; float64 throughout)."""
    num_channels = len(xdrope_section)
    section = [s * 2 for s in xdrope_section]
    cos = torch.cat([m[i % num_channels] for i, m in enumerate(cos.split(section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % num_channels] for i, m in enumerate(sin.split(section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


def hunyuan_reference(q, ids, rope_theta, alpha, xdrope_section):
    """q [b, h, s, D], ids [channels, b, s]."""
    inv_freq = hunyuan_inv_freq(rope_theta, alpha, q.shape[-1])
    cos, sin = hunyuan_forward(inv_freq, 1.0, torch.from_numpy(ids))
    return hunyuan_apply_rotary_pos_emb_xdrope(torch.from_numpy(q), cos, sin, xdrope_section).numpy()
