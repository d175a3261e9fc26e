"""Gemma-3n audio attention (HF transformers models/gemma3n/modeling_gemma3n.py:
Gemma3nAudioAttention and Gemma3nAudioRelativePositionEmbedding), re-implemented in
torch with the upstream structure, from the projected heads on: queries cut into blocks
of chunk_size (_convert_to_block), keys, values and the validity mask framed into
contexts of chunk_size + max_past_horizon + max_future_horizon (_extract_block_context:
zero padding, unfold), the relative term q . pos_proj(timing signal) over the
distances max_past_horizon .. -max_future_horizon moved into place by _relative_shift
(pad, flatten, cut, reshape), the logit soft-cap, the local causal validity mask, a
softmax with finfo.min for masked entries and the product with the value blocks.

HF keeps inv_timescales, the timing signal and q_scale in float32 buffers even in a
float64 model; `f32_buffers=True` reproduces that, False computes them in float64.
Its softmax is float32 too (softmax(dtype=torch.float32)); `softmax_f32=True`
reproduces that, False keeps the model dtype.
"""
import math

import torch


def softplus(x):
    return torch.nn.functional.softplus(x)


class RelativePositionEmbedding:
    """Gemma3nAudioRelativePositionEmbedding with a given pos_proj weight [N H, D]."""

    def __init__(self, num_heads, channels, context_left, context_right, pos_proj,
                 f32_buffers):
        self.num_heads = num_heads
        self.channels = channels
        self.head_dim = pos_proj.shape[0] // num_heads
        self.max_backward = max(0, context_left - 1)
        self.max_forward = context_right
        self.pos_proj = pos_proj
        self.f32 = f32_buffers
        n = channels // 2
        increment = math.log(1.0e4 / 1.0) / max(n - 1, 1)
        dt = torch.float32 if f32_buffers else torch.float64
        self.inv_timescales = torch.exp(torch.arange(n, dtype=dt) * -increment)[None, None, :]

    def timing_signal(self, position, dtype):
        dt = torch.float32 if self.f32 else torch.float64
        scaled = position.to(dt).unsqueeze(-1) * self.inv_timescales
        return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=-1).to(dtype)

    def sin_emb(self, dtype):
        """The projected signals [F, N, H] for distances max_backward .. -max_forward."""
        pos = torch.arange(self.max_backward, -self.max_forward - 1, -1).unsqueeze(0)
        projected = self.timing_signal(pos, dtype) @ self.pos_proj.T
        return projected.reshape(1, pos.shape[1], self.num_heads, self.head_dim).squeeze(0)

    @staticmethod
    def relative_shift(x, b, n, u, w, c, f):
        # [B, N, U, W, F] -> pad F to C + 1, flatten W, keep W * C, -> [B, N, U, W, C]
        x = torch.nn.functional.pad(x, (0, c + 1 - f))
        x = x.reshape(b, n, u, w * (c + 1))[:, :, :, : w * c]
        return x.reshape(b, n, u, w, c)

    def forward(self, queries, keys):
        b, u, w, n, h = queries.shape
        c = keys.shape[2]
        emb = self.sin_emb(queries.dtype)  # [F, N, H]
        f = emb.shape[0]
        ac = torch.matmul(queries.permute(0, 3, 1, 2, 4), keys.permute(0, 3, 1, 4, 2))
        q = queries.permute(0, 3, 1, 2, 4).reshape(b, n, u * w, h)
        bd = torch.matmul(q, emb.permute(1, 2, 0)).reshape(b, n, u, w, f)
        return ac + self.relative_shift(bd, b, n, u, w, c, f)


class AudioAttention:
    """Gemma3nAudioAttention.forward after q_proj / k_proj / v_proj."""

    def __init__(self, num_heads, hidden_size, chunk_size, context_left, context_right,
                 logit_cap, per_dim_scale, pos_proj, f32_buffers=True, softmax_f32=False):
        self.num_heads = num_heads
        self.softmax_f32 = softmax_f32
        self.head_dim = per_dim_scale.shape[0]
        self.chunk_size = chunk_size
        self.max_future_horizon = context_right
        self.max_past_horizon = max(0, context_left - 1)
        self.context_size = chunk_size + self.max_past_horizon + self.max_future_horizon
        self.rel = RelativePositionEmbedding(num_heads, hidden_size, context_left,
                                             context_right, pos_proj, f32_buffers)
        self.per_dim_scale = per_dim_scale
        if f32_buffers:
            # a float32 buffer, as HF registers it, then cast with the model
            q_scale = (self.head_dim ** -0.5 * (1.0 / softplus(torch.tensor(0.0))))
            self.q_scale = q_scale.to(torch.float64)
        else:
            self.q_scale = torch.tensor(
                self.head_dim ** -0.5 / softplus(torch.tensor(0.0, dtype=torch.float64)).item(),
                dtype=torch.float64)
        lower = torch.tril(torch.ones((self.context_size, chunk_size), dtype=torch.bool)).T
        upper = torch.tril(torch.ones((chunk_size, self.context_size), dtype=torch.bool),
                           diagonal=self.max_past_horizon + self.max_future_horizon)
        self.local_causal_valid_mask = (
            torch.ones((chunk_size, self.context_size), dtype=torch.bool) * lower * upper)
        self.softcap = torch.tensor(float(logit_cap)).float()

    @staticmethod
    def pad_dim1(x, left, right):
        b, _, *tail = x.shape
        return torch.cat([x.new_zeros((b, left, *tail)), x, x.new_zeros((b, right, *tail))], 1)

    def convert_to_block(self, x):
        b, t = x.shape[:2]
        blocks = (t + self.chunk_size - 1) // self.chunk_size
        if blocks * self.chunk_size - t > 0:
            x = self.pad_dim1(x, 0, blocks * self.chunk_size - t)
        return x.reshape((b, blocks, self.chunk_size) + x.shape[2:]).contiguous()

    def extract_block_context(self, x):
        x = self.pad_dim1(x, self.max_past_horizon, self.max_future_horizon + self.chunk_size - 1)
        x = x.unfold(dimension=1, size=self.context_size, step=self.chunk_size)
        if x.ndim > 3:
            x = torch.movedim(x, source=-1, destination=2)
        return x.contiguous()

    def forward(self, q, k, v, mask):
        """q, k, v [B, T, N, H]; mask [B, T] bool, True = padded. Returns the context
        vectors [B, T, N, H] and the logits and probabilities [B, N, U, W, C]."""
        q = q * self.q_scale * softplus(self.per_dim_scale).view(1, 1, 1, self.head_dim)
        b, t = q.shape[:2]
        qb = self.convert_to_block(q)
        kb = self.extract_block_context(k)
        vb = self.extract_block_context(v)
        u = qb.shape[1]
        valid = self.extract_block_context(~mask)
        cond = torch.logical_and(valid.unsqueeze(1).unsqueeze(-2),
                                 self.local_causal_valid_mask[None, None, None])
        logits = self.rel.forward(qb, kb)
        logits = logits / self.softcap
        logits = torch.tanh(logits)
        logits = logits * self.softcap
        logits = torch.where(cond, logits, torch.finfo(logits.dtype).min)
        # HF: softmax(..., dtype=torch.float32).to(value dtype), float32 even in a float64
        # model; softmax_f32=False keeps the model dtype.
        sm_dtype = torch.float32 if self.softmax_f32 else logits.dtype
        probs = torch.softmax(logits, dim=-1, dtype=sm_dtype).to(vb.dtype)
        bb, n, uu, w, c = probs.shape
        h = vb.shape[-1]
        ctx = torch.bmm(probs.permute(0, 2, 1, 3, 4).reshape(-1, w, c),
                        vb.permute(0, 1, 3, 2, 4).reshape(-1, c, h))
        ctx = ctx.reshape(bb, uu, n, w, h).permute(0, 1, 3, 2, 4)
        ctx = ctx.reshape(b, u * self.chunk_size, self.num_heads, self.head_dim)[:, :t]
        return ctx, logits, probs, cond


def blocks_to_full(x, cond, t, chunk_size, max_past, fill):
    """[B, N, U, W, C] entries (where cond [B, 1|N, U, W, C]) placed at [B, N, T, T]:
    query u W + w, key u W + c - max_past; `fill` elsewhere."""
    b, n, u, w, c = x.shape
    out = torch.full((b, n, t, t), fill, dtype=x.dtype)
    cond = cond.expand(b, n, u, w, c)
    for ui in range(u):
        for wi in range(w):
            i = ui * chunk_size + wi
            if i >= t:
                continue
            for ci in range(c):
                j = ui * chunk_size + ci - max_past
                if 0 <= j < t:
                    keep = cond[:, :, ui, wi, ci]
                    out[:, :, i, j] = torch.where(keep, x[:, :, ui, wi, ci], out[:, :, i, j])
    return out
