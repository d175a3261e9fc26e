"""Eager attention in numpy float64 with per-element error bounds, for the exact
rounding tests (written from the published formula: q k^T * scale, masked scores -inf,
softmax, @ v; GQA as HF's repeat_kv).

Each value carries a bound on its distance from any implementation of the same formula
in an arithmetic of unit roundoff u (2^-53 float64, 2^-24 float32): logits
scale (d + 4) 2u sum|q k| + 2u |s| (plus the error bounds mq, mk of q and k, e.g. RoPE,
carried through), probs p (2 max_row(logit margin) + (sk + 8) 2u), output
sum_j (margin p_ij |v_j|) + (sk + 4) 2u sum_j p_ij |v_j|, lse max_row(logit margin) +
(sk + 8) 2u (1 + |lse|).
"""
import math

import numpy as np

U64, U32 = 2.0 ** -53, 2.0 ** -24


def attention_reference(q, k, v, keep=None, scale=None, u=U64, mq=None, mk=None):
    """q [b, hq, sq, d], k and v [b, hk, sk, d] float64; keep broadcastable to
    [b, hq, sq, sk] (True = attend); mq, mk: error bounds of q and k (RoPE). Returns
    dicts of values and margins for logits, probs, output, lse."""
    hq, hk = q.shape[1], k.shape[1]
    k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    d, sk = q.shape[-1], k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    abs_qk = np.abs(q) @ np.abs(k).swapaxes(-1, -2)
    s = scale * (q @ k.swapaxes(-1, -2))
    ms = scale * (d + 4) * 2 * u * abs_qk + 2 * u * np.abs(s)
    if mq is not None:
        mk_r = np.repeat(mk, hq // hk, axis=1)
        ms = ms + scale * (mq @ np.abs(k).swapaxes(-1, -2) + np.abs(q) @ mk_r.swapaxes(-1, -2)
                           + mq @ mk_r.swapaxes(-1, -2))
    if keep is not None:
        keep = np.broadcast_to(keep, s.shape)
        s = np.where(keep, s, -np.inf)
        ms = np.where(keep, ms, 0.0)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    z = e.sum(-1, keepdims=True)
    p = e / z
    row = ms.max(-1, keepdims=True)
    mp = p * (2 * row + (sk + 8) * 2 * u)
    o = p @ v
    mo = mp @ np.abs(v) + (sk + 4) * 2 * u * (p @ np.abs(v))
    lse = (top + np.log(z))[..., 0]
    mlse = row[..., 0] + (sk + 8) * 2 * u * (1 + np.abs(lse))
    return ({"logits": s, "probs": p, "output": o, "lse": lse},
            {"logits": ms, "probs": mp, "output": mo, "lse": mlse})


def window_keep(sq, sk, left, right):
    """Causal (bottom-right) sliding window: query i at position i + sk - sq sees keys
    [pos - left, pos + right] and none after pos."""
    i = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    return (j >= i - left) & (j <= i + right) & (j <= i)
