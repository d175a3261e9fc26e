"""FlashAttention's KV-cache step (flash_attn_with_kvcache) in torch float64, written for
posenc's tests from FA's test semantics (hopper/test_flash_attn.py test_flash_attn_kvcache,
attention_ref with key_leftpad):

- the cache rows of entry b are those of cache_batch_idx[b] (b without it);
- rotary tables rotate the new keys at positions offset_b + t (offset = rotary_seqlens,
  else cache_seqlens) with apply_rotary_emb's rule (fa_rotary_reference.py), the queries
  at the same per-token positions when causal or local, else all at offset_b;
- the rotated new keys and the values are stored at rows cache_seqlens_b .. + s_new - 1;
- packed new keys (cu_new, FA's cu_seqlens_k_new): k_new [total_new, hk, d], entry b's
  s_new_b = cu_new[b + 1] - cu_new[b] tokens rows cu_new[b] .. cu_new[b + 1] - 1, each
  entry as above with its own s_new_b;
- the key padding mask keeps rows leftpad_b <= j < cache_seqlens_b + s_new, the masks see
  key column j - leftpad_b and the entry's length sk_b = cache_seqlens_b + s_new -
  leftpad_b (query i at i + sk_b - sq), computed over the whole cache row.
"""
import math

import numpy as np
import torch

from fa_rotary_reference import apply_rotary_tables


def kv_reference(q, kc, vc, seqlens, k_new=None, v_new=None, batch_idx=None, leftpad=None,
                 cos=None, sin=None, interleaved=False, rotary_seqlens=None, causal=False,
                 window=(-1, -1), chunk=0, scale=None, softcap=0.0, sinks=None, sink_tokens=0,
                 qv=None, q_descale=None, k_descale=None, v_descale=None, cu_new=None):
    """out [b, sq, h, dv], lse [b, h, sq] (float64) and the updated caches (their dtype).

    scale multiplies q.k (default 1/sqrt(d)); softcap C > 0 gives C tanh(s / C) before the
    masks (attention_ref); sinks [h] are gpt-oss's sink logits, one more column in the
    softmax's denominator (and lse) that adds nothing to the output; the first
    sink_tokens keys of an entry (columns j - leftpad) stay visible whatever the window's
    left side (FlashAttention's sink_token_length).

    FA3's qv [b, sq, h, dv] and descales [b, hk] (attention_ref's upcast reference): the
    entry's cache rows are read as float32(k) * k_descale[b, kv head] and float32(v) *
    v_descale, the (rotated) queries and qv as float32(x) * q_descale of their KV head,
    each product in float32; with qv the scores are (q.k + qv.v) scale, scale defaulting
    to 1/sqrt(d + dv)."""
    b, sq, h, d = q.shape
    kc, vc = kc.copy(), vc.copy()
    rows = np.arange(b) if batch_idx is None else np.asarray(batch_idx)
    seqlens = np.asarray(seqlens)
    leftpad = np.zeros(b, np.int64) if leftpad is None else np.asarray(leftpad)
    if k_new is None:
        counts, spans = np.zeros(b, np.int64), None
    elif cu_new is None:
        counts = np.full(b, k_new.shape[1])
        spans = [(k_new[e], v_new[e]) for e in range(b)]
    else:
        cu_new = np.asarray(cu_new, np.int64)
        counts = np.diff(cu_new)
        spans = [(k_new[cu_new[e]:cu_new[e + 1]], v_new[cu_new[e]:cu_new[e + 1]])
                 for e in range(b)]
    local = causal or window != (-1, -1) or chunk > 0
    q_ro = np.asarray(q, np.float64)
    if cos is not None:
        offs = seqlens if rotary_seqlens is None else np.asarray(rotary_seqlens)
        spans = [(apply_rotary_tables(kn[None], cos, sin, interleaved,
                                      seqlen_offsets=np.asarray([offs[e]]))[0].astype(kc.dtype),
                  vn) for e, (kn, vn) in enumerate(spans)]
        if local:
            q_ro = apply_rotary_tables(q, cos, sin, interleaved, seqlen_offsets=offs)
        else:
            q_ro = apply_rotary_tables(q.reshape(b, 1, sq * h, d), cos, sin, interleaved,
                                       seqlen_offsets=offs).reshape(q.shape)
    for e in range(b):
        if counts[e]:
            kc[rows[e], seqlens[e]:seqlens[e] + counts[e]] = spans[e][0]
            vc[rows[e], seqlens[e]:seqlens[e] + counts[e]] = spans[e][1]
    K = torch.from_numpy(kc[rows].astype(np.float64))
    V = torch.from_numpy(vc[rows].astype(np.float64))
    S, hk = K.shape[1], K.shape[2]

    def descale(x, ds, group):  # float32(x) * ds[b, head // group], in float32
        if ds is None:
            return x
        f = torch.from_numpy(np.asarray(ds, np.float32)).repeat_interleave(group, dim=1)
        return (x.float() * f[:, None, :, None]).double()

    K = descale(K, k_descale, 1).repeat_interleave(h // hk, dim=2)
    V = descale(V, v_descale, 1).repeat_interleave(h // hk, dim=2)
    Q = descale(torch.from_numpy(q_ro), q_descale, h // hk)
    dv = V.shape[3]
    if scale is None:
        scale = 1 / math.sqrt(d + dv if qv is not None else d)
    scores = torch.einsum("bthd,bshd->bhts", Q, K)
    if qv is not None:
        QV = descale(torch.from_numpy(np.asarray(qv, np.float64)), q_descale, h // hk)
        scores = scores + torch.einsum("bthd,bshd->bhts", QV, V)
    scores = scores * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    left, right = window
    if causal:
        right = 0
    for e in range(b):
        j = torch.arange(S)[None, :]
        i = torch.arange(sq)[:, None]
        lp, end = int(leftpad[e]), int(seqlens[e]) + int(counts[e])
        col = torch.where(j >= lp, j - lp, torch.full_like(j, 2 ** 32))
        sk = end - lp
        pos = i + sk - sq
        m = (j < lp) | (j >= end)
        if right >= 0:
            m = m | (col > torch.clamp(pos + right, max=sk))
        if left >= 0:
            m = m | ((col < pos - left) & (col >= sink_tokens))
        if chunk > 0:
            start = pos - torch.remainder(pos, chunk)
            m = m | (col < start) | (col >= start + chunk)
        scores[e] = scores[e].masked_fill(m[None], float("-inf"))
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    if sinks is not None:
        sink = torch.as_tensor(np.asarray(sinks, np.float64)).view(1, h, 1, 1)
        full = torch.cat([scores, sink.expand(b, h, sq, 1)], dim=-1)
        lse = torch.logsumexp(full, dim=-1)
        p = torch.softmax(full, dim=-1)[..., :-1]
    else:
        lse = torch.logsumexp(scores, dim=-1)
        p = torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)
    out = torch.einsum("bhts,bshd->bthd", p, V)
    return out.numpy(), lse.numpy(), kc, vc
