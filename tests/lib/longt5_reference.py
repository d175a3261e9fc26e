"""LongT5's local and transient-global attention (HF transformers'
models/longt5/modeling_longt5.py: LongT5LocalAttention, LongT5TransientGlobalAttention
and the module functions they call), re-implemented in torch float64 with the upstream
structure, step for step, independent of posenc:

- blocks: _pad_to_multiple, _split_into_blocks, _concatenate_3_blocks;
- the local mask: _make_3block_relative_position_ids, _mask_local_attention_mask,
  _get_local_attention_mask (what LongT5Stack hands a local layer);
- the global blocks: _make_global_fixed_block_ids (float32 arithmetic on i / G as
  upstream: its ones_like(mask) / G is float32), _make_side_relative_position_ids,
  _create_global_aggregates, LongT5LayerNorm on the aggregates;
- compute_bias(block_len) (relative positions memory - context with the context the
  middle block), compute_side_bias, and forward: einsum scores, + position_bias,
  masks as -1e10, softmax, einsum with the values.

One deliberate difference: upstream softmaxes `scores.float()`, which rounds float64
scores to float32 first; `f32_softmax=True` keeps that cast, the default computes the
softmax in float64 (what "float64 rounding" means for the comparison).

Returned per head, before the output projection `o`: q, k, v [b, h, s, d], the side k
and v [b, h, n_global, d], and the probabilities and outputs scattered from the blocks
back to sequence positions: probs [b, h, s, s] (local keys) and [b, h, s, n_global]
(side keys), output [b, h, s, d], and the logits (scores plus position_bias) likewise,
-inf where HF adds -1e10 or the 3 blocks hold no such key.
"""
import math

import torch
import torch.nn.functional as F

from reference_bias import t5_bucket


def pad_to_multiple(x, block_len, dim, pad_value=0):
    dim %= x.ndim
    pad_len = -x.shape[dim] % block_len
    pad = [0, 0] * x.ndim
    # F.pad lists (left, right) pairs from the last dimension backwards.
    pad[2 * (x.ndim - 1 - dim) + 1] = pad_len
    return F.pad(x, pad, mode="constant", value=pad_value)


def split_into_blocks(x, block_len, dim):
    dim %= x.ndim
    if x.shape[dim] % block_len:
        x = pad_to_multiple(x, block_len, dim)
    n = x.shape[dim] // block_len
    return x.reshape(x.shape[:dim] + (n, block_len) + x.shape[dim + 1:])


def concatenate_3_blocks(x, block_dim, sequence_dim, pad_value=0):
    block_dim %= x.ndim
    n = x.shape[block_dim]
    pad = [0, 0] * x.ndim
    pad[2 * (x.ndim - 1 - block_dim)] = 1
    pad[2 * (x.ndim - 1 - block_dim) + 1] = 1
    x = F.pad(x, pad, mode="constant", value=pad_value)
    parts = [x.narrow(block_dim, i, n) for i in range(3)]
    return torch.cat(parts, dim=sequence_dim)


def three_block_relative_position_ids(block_len):
    pos = torch.arange(3 * block_len, dtype=torch.int32)
    center = pos[block_len:-block_len]
    return pos[None, :] - center[:, None]


def local_attention_mask(attention_mask, block_len):
    """[b, 1, num_blocks, block_len, 3 block_len] booleans."""
    blocked = split_into_blocks(attention_mask, block_len, dim=1)
    three = concatenate_3_blocks(blocked, block_dim=1, sequence_dim=2)
    m = torch.logical_and(blocked.unsqueeze(-1), three.unsqueeze(-2))
    locality = torch.abs(three_block_relative_position_ids(block_len)) < block_len
    m = torch.logical_and(m, locality[None, None])
    return m.unsqueeze(1)


def global_fixed_block_ids(attention_mask, global_block_size):
    """(block ids [b, s], global segment ids [b, s // G]) as upstream."""
    b, s = attention_mask.shape[:2]
    fixed = torch.ones_like(attention_mask) / global_block_size  # float32 for int masks
    fixed = torch.cumsum(fixed, dim=1) - fixed
    mask = torch.where(attention_mask != 0.0, 1.0, -1000.0).type(attention_mask.dtype)
    ids = torch.floor(mask + fixed - 1.0).type(attention_mask.dtype)
    lower = torch.tensor(-1, dtype=ids.dtype)
    ids = torch.where(ids > lower, ids, lower)
    ids = ids * attention_mask + (attention_mask - 1)  # padding tokens -1
    # Orphan tokens (after the last full block) join the block before them.
    ends = (torch.arange(s) % global_block_size) == global_block_size - 1
    full = torch.logical_and(ends, ids >= 0).sum(-1).unsqueeze(-1).type(ids.dtype) - 1
    ids = torch.where(ids < full, ids, full)
    n = s // global_block_size
    if n > 0:
        top = torch.max(ids, dim=-1).values.repeat(n, 1).transpose(0, 1)
    else:
        top = torch.zeros(b, 0, dtype=ids.dtype)
    seg = torch.cumsum(torch.ones(b, n), dim=-1) - 1
    seg = torch.where(seg <= top, 1, 0)
    return ids.type(torch.int), seg.type(torch.int)


def side_relative_position_ids(attention_mask, global_block_size):
    ids, seg = global_fixed_block_ids(attention_mask, global_block_size)
    return (torch.arange(seg.shape[-1]) - ids[..., None]).type(torch.int64)


def global_aggregates(hidden, block_ids, n):
    ids = block_ids.where(block_ids >= 0, torch.tensor(n, dtype=block_ids.dtype))
    one_hot = F.one_hot(ids.type(torch.int64), n + 1)[:, :, :-1]
    return torch.einsum("...nd,...ng->...gd", hidden, one_hot.type(hidden.dtype))


def rms_norm(x, weight, eps):
    """LongT5LayerNorm (float64 weights: no cast back)."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


class LongT5Layer:
    """Random float64 weights of one LongT5 encoder self-attention layer with relative
    attention bias (layer 0), local or transient-global."""

    def __init__(self, gen, d_model, heads, d_kv, local_radius, buckets=32,
                 max_distance=128, global_block_size=None, eps=1e-6):
        def t(*shape):
            return torch.randn(*shape, generator=gen, dtype=torch.float64)
        self.heads, self.d_kv = heads, d_kv
        self.block_len = local_radius + 1
        self.buckets, self.max_distance = buckets, max_distance
        self.global_block_size = global_block_size
        self.eps = eps
        inner = heads * d_kv
        self.wq = t(inner, d_model) / math.sqrt(d_model)
        self.wk = t(inner, d_model) / math.sqrt(d_model)
        self.wv = t(inner, d_model) / math.sqrt(d_model)
        self.relative_attention_bias = t(buckets, heads)
        self.global_relative_attention_bias = t(buckets, heads)
        self.global_norm_weight = 1.0 + 0.1 * t(d_model)

    def bucket(self, rel):
        return t5_bucket(rel, bidirectional=True, num_buckets=self.buckets,
                         max_distance=self.max_distance)

    def compute_bias(self, block_len):
        """[1, 1, h, block_len, 3 block_len] (context = the middle block)."""
        memory = torch.arange(3 * block_len, dtype=torch.long)
        context = memory[block_len:-block_len]
        rel = memory[None, :] - context[:, None]
        values = F.embedding(self.bucket(rel), self.relative_attention_bias)
        return values.permute([2, 0, 1]).unsqueeze(0).unsqueeze(0)

    def compute_side_bias(self, mask, global_segment_ids):
        side_mask = torch.eq(mask[..., None], global_segment_ids[:, None, :])[:, None, ...]
        side = torch.where(side_mask > 0, 0.0, -1e10).to(torch.float64)
        rel = side_relative_position_ids(mask, self.global_block_size)
        bias = F.embedding(self.bucket(rel), self.global_relative_attention_bias)
        return side + bias.permute([0, 3, 1, 2])

    def forward(self, hidden, attention_mask, transient_global, f32_softmax=False):
        """hidden [b, s, d_model], attention_mask [b, s] int64 (1 = token)."""
        b, s = hidden.shape[:2]
        bl = self.block_len

        def shape(x):
            return x.view(b, -1, self.heads, self.d_kv)

        q = shape(F.linear(hidden, self.wq))
        k = shape(F.linear(hidden, self.wk))
        v = shape(F.linear(hidden, self.wv))
        side_k = side_v = None
        if transient_global:
            ids, seg = global_fixed_block_ids(attention_mask, self.global_block_size)
            agg = global_aggregates(hidden, ids, seg.shape[-1])
            agg = rms_norm(agg, self.global_norm_weight, self.eps)
            side_k, side_v = shape(F.linear(agg, self.wk)), shape(F.linear(agg, self.wv))
        qb = split_into_blocks(q, bl, dim=1)
        kb = concatenate_3_blocks(split_into_blocks(k, bl, dim=1), block_dim=1, sequence_dim=2)
        vb = concatenate_3_blocks(split_into_blocks(v, bl, dim=1), block_dim=1, sequence_dim=2)
        nblocks = qb.shape[1]
        if transient_global:
            reps = [1] * (side_k.ndim + 1)
            reps[1] = nblocks
            kb = torch.cat([kb, side_k.unsqueeze(1).repeat(reps)], dim=2)
            vb = torch.cat([vb, side_v.unsqueeze(1).repeat(reps)], dim=2)
        scores = torch.einsum("...qhd,...khd->...hqk", qb, kb)
        local = local_attention_mask(attention_mask, bl)  # LongT5Stack / the TG layer
        local = torch.where(local > 0, 0.0, -1e10).to(torch.float64)
        position_bias = self.compute_bias(bl) + local.transpose(1, 2)
        if transient_global:
            side = self.compute_side_bias(attention_mask, seg)
            side = split_into_blocks(side, bl, dim=-2).transpose(1, 2)
            position_bias = torch.cat([position_bias, side], dim=-1)
        scores = scores + position_bias
        if f32_softmax:
            probs = F.softmax(scores.float(), dim=-1).type_as(scores)
        else:
            probs = F.softmax(scores, dim=-1)
        out = torch.einsum("...hqk,...khd->...qhd", probs, vb)
        out = out.reshape(b, -1, self.heads, self.d_kv)[:, :s]
        # Back to sequence positions: block c, slot t of the 3 blocks is key
        # (c - 1) bl + t.
        full = torch.zeros(b, self.heads, s, s, dtype=torch.float64)
        logits = torch.full((b, self.heads, s, s), -math.inf, dtype=torch.float64)
        sb = torch.where(scores < -1e9, -math.inf, scores).permute(0, 2, 1, 3, 4)
        pb = probs.permute(0, 2, 1, 3, 4)  # [b, h, blocks, bl, 3 bl (+ n)]
        for c in range(nblocks):
            for r in range(bl):
                i = c * bl + r
                if i >= s:
                    break
                for t in range(3 * bl):
                    j = (c - 1) * bl + t
                    if 0 <= j < s:
                        full[:, :, i, j] = pb[:, :, c, r, t]
                        logits[:, :, i, j] = sb[:, :, c, r, t]
        side_probs = side_logits = None
        if transient_global:
            n = side_k.shape[1]
            side_probs = pb[..., 3 * bl:].reshape(b, self.heads, -1, n)[:, :, :s]
            side_logits = sb[..., 3 * bl:].reshape(b, self.heads, -1, n)[:, :, :s]
        heads = lambda x: x.transpose(1, 2).contiguous()  # [b, s, h, d] -> [b, h, s, d]
        return dict(q=heads(q), k=heads(k), v=heads(v),
                    side_k=None if side_k is None else heads(side_k),
                    side_v=None if side_v is None else heads(side_v),
                    probs=full, side_probs=side_probs, output=heads(out),
                    logits=logits, side_logits=side_logits)
