"""FlashAttention's test reference (hopper/test_util.py: attention_ref,
construct_local_mask, construct_chunk_mask) rewritten in torch float64 from its public
semantics, for judging posenc's masks the way FA's test suite judges a kernel.

Layout bshd as FA: q [b, sq, h, d], k [b, sk, h_k, d], v [b, sk, h_k, dv].
- Per batch entry, sk_b = keys in its padding mask (seqused_k), sq_b = queries in its
  padding mask (seqused_q); the padded lengths without them. Query row i sits at
  position i + sk_b - sq_b.
- construct_local_mask: row i sees key j when j <= i + sk_b - sq_b + right and (left is
  None or j >= i + sk_b - sq_b - left or j < sink_token_length); causal is the window
  (left, 0).
- construct_chunk_mask: start = p - (p mod C) with Python's floor modulo, p = i + sk_b -
  sq_b; keys start <= j < start + C; ORed with the window's masked set.
- Key padding masked; rows with no visible key give probabilities 0, output 0 and lse
  -inf (FA fills such rows with 0 instead of NaN); padded query rows output 0.
"""
import math

import numpy as np
import torch


def local_mask(sq, sk, sq_b, sk_b, left, right, sink_token_length=0):
    """The masked set (True = masked) [sq, sk] of construct_local_mask for one entry;
    left/right None = unbounded on that side."""
    row = torch.arange(sq, dtype=torch.long)[:, None]
    col = torch.arange(sk, dtype=torch.long)[None, :]
    pos = row + sk_b - sq_b
    masked = torch.zeros(sq, sk, dtype=torch.bool)
    if right is not None:
        masked |= col > torch.clamp(pos + right, max=sk_b)
    if left is not None:
        masked |= (col < pos - left) & (col >= sink_token_length)
    return masked


def chunk_mask(sq, sk, sq_b, sk_b, chunk):
    """construct_chunk_mask for one entry (True = masked)."""
    row = torch.arange(sq, dtype=torch.long)[:, None]
    col = torch.arange(sk, dtype=torch.long)[None, :]
    p = row + sk_b - sq_b
    start = p - torch.remainder(p, chunk)  # torch.remainder floors, as Python's %
    return (col < start) | (col >= start + chunk)


def masked_set(b, sq, sk, causal, window, chunk, seqused_q, seqused_k, sink_token_length=0):
    """attention_ref's masked set [b, 1, sq, sk] (True = masked): key padding, the local
    window (causal is (left, 0)), the chunks and the padded query rows, per entry."""
    left, right = window
    if causal:
        right = 0
    masked = torch.zeros(b, 1, sq, sk, dtype=torch.bool)
    for e in range(b):
        sq_b = sq if seqused_q is None else int(seqused_q[e])
        sk_b = sk if seqused_k is None else int(seqused_k[e])
        m = torch.zeros(sq, sk, dtype=torch.bool)
        m[:, sk_b:] = True  # key padding
        if left is not None or right is not None:
            m |= local_mask(sq, sk, sq_b, sk_b, left, right, sink_token_length)
        if chunk > 0:
            m |= chunk_mask(sq, sk, sq_b, sk_b, chunk)
        m[sq_b:, :] = True  # padded query rows
        masked[e, 0] = m
    return masked


def attention_ref(q, k, v, causal=False, window=(None, None), chunk=0, sink_token_length=0,
                  seqused_q=None, seqused_k=None, scale=None):
    """Output [b, sq, h, dv] and lse [b, h, sq] in float64 (numpy arrays)."""
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    scale = 1 / math.sqrt(d) if scale is None else scale
    scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    masked = masked_set(b, sq, sk, causal, window, chunk, seqused_q, seqused_k,
                        sink_token_length)
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    empty = masked.all(dim=-1, keepdim=True)
    p = torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)
    out = torch.einsum("bhts,bshd->bthd", p, v)
    return out.numpy(), lse.numpy()


def seq_masked(sq, sk, causal=None, window=(None, None), sink=0, chunk=0):
    """One sequence's masked set [sq, sk] (True = masked) aligned to its own lengths:
    causal "top-left" (j > i) or bottom-right (any other true value: the window (left,
    0)), the local window with its sink tokens, and the chunks."""
    row = torch.arange(sq)[:, None]
    col = torch.arange(sk)[None, :]
    left, right = window
    m = torch.zeros(sq, sk, dtype=torch.bool)
    if causal == "top-left":
        m |= col > row
    elif causal:
        right = 0
    if left is not None or right is not None:
        m |= local_mask(sq, sk, sq, sk, left, right, sink)
    if chunk:
        m |= chunk_mask(sq, sk, sq, sk, chunk)
    return m


def seq_ref(q, k, v, causal=None, window=(None, None), chunk=0, sink=0, alibi=False, qv=None):
    """FlashAttention's varlen semantics for one sequence, q [sq, h, d], k, v [sk, hk, d]: output [sq, h, dv] and lse [h, sq]
    in float64, aligned to its own lengths (query i at position i + sk - sq)."""
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    sq, h, d = q.shape
    sk, hk = k.shape[0], k.shape[1]
    if sk == 0:
        return np.zeros((sq, h, v.shape[2])), np.full((h, sq), -np.inf)
    k = k.repeat_interleave(h // hk, dim=1)
    v = v.repeat_interleave(h // hk, dim=1)
    if qv is None:
        s = torch.einsum("thd,shd->hts", q / math.sqrt(d), k)
    else:  # FA-3's qv: + (qv scale).v, scale 1/sqrt(d + dv)
        scale = 1 / math.sqrt(d + v.shape[2])
        s = torch.einsum("thd,shd->hts", q * scale, k) + torch.einsum(
            "thd,shd->hts", torch.as_tensor(qv).double() * scale, v)
    row = torch.arange(sq)[:, None]
    col = torch.arange(sk)[None, :]
    if alibi:  # FA's non-causal ALiBi: -slope |i + sk - sq - j|, posenc's slopes
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]).double()
        s = s - slopes[:, None, None] * (row + sk - sq - col).abs()
    m = seq_masked(sq, sk, causal, window, sink, chunk)
    s = s.masked_fill(m, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).masked_fill(m.all(dim=-1)[:, None], 0.0)
    return torch.einsum("hts,shd->thd", p, v).numpy(), lse.numpy()


def varlen_ref(q, k, v, cq, ck, uq=None, uk=None, **ref):
    """flash_attn_varlen_func: packed q [total_q, h, d], k, v [total_k, hk, d], boundaries
    cq, ck [n+1], rows used uq, uk [n] (default all): each sequence unpacked and computed
    on its own (seq_ref); output [total_q, h, dv] (rows not used 0) and lse [h, total_q]
    (-inf there), FA's varlen layout."""
    out = np.zeros(q.shape[:2] + (v.shape[2],))
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(cq) - 1):
        nq = cq[b + 1] - cq[b] if uq is None else uq[b]
        nk = ck[b + 1] - ck[b] if uk is None else uk[b]
        one = dict(ref)
        if ref.get("qv") is not None:
            one["qv"] = ref["qv"][cq[b]:cq[b] + nq]
        o, l = seq_ref(q[cq[b]:cq[b] + nq], k[ck[b]:ck[b] + nk], v[ck[b]:ck[b] + nk], **one)
        out[cq[b]:cq[b] + nq] = o
        lse[:, cq[b]:cq[b] + nq] = l
    return out, lse
