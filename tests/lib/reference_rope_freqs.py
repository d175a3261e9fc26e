"""numpy float64 references of RoPE frequencies, written from HF transformers' rope
init functions (modeling_rope_utils.py, as summarised in rope-landscape.md §1.2).
Shared by the `table rope` and `analyze` reference tests.
"""
import math

import numpy as np


# --- references (numpy, float64) ----------------------------------------------------
# numpy's float64 sin/cos/power may use vectorised (SVML) kernels that are a few ulp
# off; the references use libm through Python's math module (correctly rounded in
# practice) so that "within one float32 ulp" compares against the true value.
_sin = np.frompyfunc(math.sin, 1, 1)
_cos = np.frompyfunc(math.cos, 1, 1)
_pow = np.frompyfunc(math.pow, 2, 1)


def msin(x):
    return _sin(np.asarray(x, dtype=np.float64)).astype(np.float64)


def mcos(x):
    return _cos(np.asarray(x, dtype=np.float64)).astype(np.float64)


def mpow(base, e):
    return _pow(float(base), np.asarray(e, dtype=np.float64)).astype(np.float64)


def default_inv(base, d):
    return 1.0 / mpow(base, np.arange(0, d, 2, dtype=np.int64).astype(np.float64) / d)


def linear_inv(base, d, factor):
    return default_inv(base, d) / factor


def dynamic_inv(base, d, factor, max_pos, seq_len):
    seq = max(seq_len, max_pos)
    base = base * ((factor * seq / max_pos) - (factor - 1)) ** (d / (d - 2))
    return default_inv(base, d)


def yarn_mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn(base, d, factor, l0, beta_fast=32, beta_slow=1, mscale=None, mscale_all_dim=None,
         attention_factor=None, truncate=True):
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)

    def corr_dim(n_rot):
        return (d * math.log(l0 / (n_rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = mpow(base, np.arange(0, d, 2).astype(np.float64) / d)
    extrap = 1.0 / pos_freqs
    interp = 1.0 / (factor * pos_freqs)
    extrap_factor = 1 - ramp
    inv = interp * (1 - extrap_factor) + extrap * extrap_factor
    return inv, attention_factor


def longrope(base, d, short_factor, long_factor, l0, seq_len, factor=None, max_pos=None,
             attention_factor=None):
    if factor is None:
        factor = max_pos / l0
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(l0))
    ext = np.array(long_factor if seq_len > l0 else short_factor, dtype=np.float64)
    inv = 1.0 / (ext * mpow(base, np.arange(0, d, 2, dtype=np.int64).astype(np.float64) / d))
    return inv, attention_factor


def llama3_inv(base, d, factor, l0, lff=1.0, hff=4.0):
    inv = default_inv(base, d)
    low_wl, high_wl = l0 / lff, l0 / hff
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > low_wl, inv / factor, inv)
    smooth = (l0 / wavelen - lff) / (hff - lff)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, smoothed, out)
