"""The RoPE of HF transformers' vision families, rewritten in torch float64 with the
structure of the upstream functions (cited per function), for tests/reference/
test_rope_layouts.py and tests/python/test_layouts.py:

- Pixtral (`PixtralRotaryEmbedding`, `position_ids_in_meshgrid`): height takes the
  even-indexed frequencies, width the odd-indexed ones; ids h * max_width + w.
- DINOv3 (`DINOv3ViTRopePositionEmbedding`, `get_patches_center_coordinates`,
  `apply_rotary_pos_emb` skipping the prefix tokens): angles 2 pi c f at patch centres
  c in [-1, 1], theta 100.
- Qwen2-VL vision (`VisionRotaryEmbedding`, `Qwen2VisionTransformerPretrainedModel.
  rot_pos_emb` with spatial_merge_size 2, `apply_rotary_pos_emb_vision`).
- V-JEPA2 (`VJEPA2RopeAttention.get_position_ids`, `apply_rotary_embeddings`,
  `rotate_queries_or_keys`): three chunks of 2 * ((D/3)/2) dims, tiled table, adjacent
  pairs.
- LightGlue (`LightGluePositionalEncoder`, GPT-J `rotate_half`): angles from a learned
  projection of keypoints.
"""
import math

import torch


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rotate_pairs(x):  # LightGlue's rotate_half: (2i, 2i+1) pairs
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def pixtral(x, ids_hw, max_width, theta=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    h = torch.arange(max_width, dtype=torch.float64)
    freqs_h = torch.outer(h, freqs[::2])
    freqs_w = torch.outer(h, freqs[1::2])
    inv = torch.cat([freqs_h[:, None, :].repeat(1, max_width, 1),
                     freqs_w[None, :, :].repeat(max_width, 1, 1)], dim=-1).reshape(-1, d // 2)
    inv = torch.cat((inv, inv), dim=-1)
    pos = ids_hw[0] * max_width + ids_hw[1]
    f = inv[pos]
    return x * f.cos() + rotate_half(x) * f.sin()


def dinov3(x, h, w, prefix, theta=100.0):
    d = x.shape[-1]
    inv = 1.0 / theta ** torch.arange(0, 1, 4 / d, dtype=torch.float64)
    ch = torch.arange(0.5, h, dtype=torch.float64) / h
    cw = torch.arange(0.5, w, dtype=torch.float64) / w
    coords = torch.stack(torch.meshgrid(ch, cw, indexing="ij"), dim=-1).flatten(0, 1)
    coords = 2.0 * coords - 1.0
    ang = (2 * math.pi * coords[:, :, None] * inv[None, None, :]).flatten(1, 2).tile(2)
    xp, xq = x.split((prefix, h * w), dim=-2)
    return torch.cat((xp, xq * ang.cos() + rotate_half(xq) * ang.sin()), dim=-2)


def qwen2_vl_vision(x, t, h, w, merge, theta=10000.0):
    d = x.shape[-1]
    dim = d // 2
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    hpos = torch.arange(h).unsqueeze(1).expand(-1, w)
    hpos = hpos.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten()
    wpos = torch.arange(w).unsqueeze(0).expand(h, -1)
    wpos = wpos.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten()
    ids = torch.stack([hpos, wpos], dim=-1).repeat(t, 1)
    table = torch.outer(torch.arange(max(h, w), dtype=torch.float64), inv)
    f = table[ids].flatten(1)
    emb = torch.cat((f, f), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def vjepa2_rotate(x, pos, theta=10000.0):
    d = x.size(-1)
    omega = torch.arange(d // 2, dtype=x.dtype)
    omega /= d / 2.0
    omega = 1.0 / theta ** omega
    freq = pos.unsqueeze(-1) * omega
    es = freq.sin().repeat(1, 1, 1, 2)
    ec = freq.cos().repeat(1, 1, 1, 2)
    y = x.unflatten(-1, (-1, 2))
    y1, y2 = y.unbind(dim=-1)
    y = torch.stack((-y2, y1), dim=-1).flatten(-2)
    return x * ec + y * es


def vjepa2(x, grid_depth, grid_size):
    b, heads, n, d = x.shape
    ids = torch.arange(n)
    per_frame = grid_size * grid_size
    frame = ids // per_frame
    height = (ids - per_frame * frame) // grid_size
    width = ids - per_frame * frame - grid_size * height
    c = 2 * ((d // 3) // 2)
    parts = []
    for k, p in enumerate((frame, height, width)):
        pos = p.to(torch.float64)[None, None].expand(b, heads, n)
        parts.append(vjepa2_rotate(x[..., k * c:(k + 1) * c], pos))
    return torch.cat(parts + [x[..., 3 * c:]], dim=-1)


def lightglue(x, keypoints, weight):
    proj = keypoints @ weight.T                  # nn.Linear(2, d/2, bias=False)
    emb = proj.repeat_interleave(2, dim=-1)
    return x * emb.cos() + rotate_pairs(x) * emb.sin(), proj
