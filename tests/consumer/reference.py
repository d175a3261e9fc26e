"""Independent references for the consumer test, in numpy float64: Llama 3 RoPE
written from HF transformers' _compute_llama3_parameters and rotate_half, and causal
softmax attention.

usage: reference.py Q.npy OUT_DIR START  -> OUT_DIR/ref_cos.npy, ref_sin.npy, ref_q.npy
       reference.py attention Q.npy K.npy V.npy OUT.npy   (causal, scale 1/sqrt(d))
"""
import math
import sys

import numpy as np


def llama3_inv_freq(dim, base, factor, low, high, old_len):
    inv = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    low_wavelen = old_len / low
    high_wavelen = old_len / high
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, out)


def attention():
    q, k, v = (np.load(sys.argv[i]).astype(np.float64) for i in (2, 3, 4))
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    sq, sk = s.shape[-2:]
    s = np.where(np.tril(np.ones((sq, sk), dtype=bool), sk - sq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.save(sys.argv[5], (p / p.sum(-1, keepdims=True)) @ v)


def main():
    if sys.argv[1] == "attention":
        attention()
        return
    q = np.load(sys.argv[1]).astype(np.float64)  # [b, h, s, d]
    out, start = sys.argv[2], int(sys.argv[3])
    d, s = q.shape[-1], q.shape[-2]
    inv = llama3_inv_freq(d, 500000.0, 8.0, 1.0, 4.0, 8192)
    pos = np.arange(start, start + s, dtype=np.float64)
    emb = np.concatenate([np.outer(pos, inv)] * 2, axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    half = np.concatenate([-q[..., d // 2:], q[..., : d // 2]], axis=-1)
    np.save(f"{out}/ref_cos.npy", cos)
    np.save(f"{out}/ref_sin.npy", sin)
    np.save(f"{out}/ref_q.npy", q * cos + half * sin)


main()
