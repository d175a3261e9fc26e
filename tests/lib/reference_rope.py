"""Float64 RoPE references with error bounds, for the exact-rounding tests.

Written from HF transformers' definitions (modeling_rope_utils.py, rotate_half; Meta's
interleaved pairs for gptj), in numpy, with sine, cosine and power from libm through
Python's math module (numpy's vectorised float64 kernels may be a few ulp off).

Each reference comes with `margin`, a bound on its distance from posenc's float64 value
that holds for any implementation of the documented arithmetic: angles fl(p * w) with
w = 1 / base^(2i/R), cos and sin within an ulp, products and sums rounded once. The two
float64 values can differ by the rounding of two products and a sum and an ulp of cos
and sin on each side (at most 8 ulp of |x_a c| + |x_b s| for output a), and by two ulp
of w (scaled frequencies take a few more roundings), which move the angle by up to 4 ulp
of |angle| (times |x_a s| + |x_b c|).
"""
import math

import numpy as np

from rounding import EPS64

_sin = np.frompyfunc(math.sin, 1, 1)
_cos = np.frompyfunc(math.cos, 1, 1)


def msin(x):
    return _sin(np.asarray(x, dtype=np.float64)).astype(np.float64)


def mcos(x):
    return _cos(np.asarray(x, dtype=np.float64)).astype(np.float64)


def default_inv(base, r):
    """HF default inverse frequencies 1 / base^(2i / r), i < r / 2."""
    return np.array([1.0 / math.pow(base, (2 * i) / r) for i in range(r // 2)])


def yarn_inv(base, r, factor, l0, beta_fast=32.0, beta_slow=1.0, mscale=None,
             mscale_all_dim=None):
    """HF _compute_yarn_parameters (truncate=True): (inv_freq, attention_factor)."""
    def get_mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    if mscale and mscale_all_dim:
        att = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    else:
        att = get_mscale(factor)

    def corr_dim(n_rot):
        return (r * math.log(l0 / (n_rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), r - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(r // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = np.array([math.pow(base, (2 * i) / r) for i in range(r // 2)])
    extrap, interp = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrap_factor = 1 - ramp
    return interp * (1 - extrap_factor) + extrap * extrap_factor, att


def pair_index(style, r):
    """Indices (a, b) of the R/2 rotated pairs: neox (j, j + R/2), gptj (2j, 2j + 1)."""
    j = np.arange(r // 2)
    return (j, j + r // 2) if style == "neox" else (2 * j, 2 * j + 1)


def rope(x, pos, inv, style, af=1.0, inverse=False):
    """RoPE of x (float64, d last) at positions `pos` (shape x.shape[:-1], integers),
    rotating the first 2 * len(inv) dims. Returns (y, margin), both float64 arrays of
    x's shape (margin 0 on the dims passed through)."""
    x = np.asarray(x, dtype=np.float64)
    r = 2 * len(inv)
    ang = np.asarray(pos, dtype=np.int64).astype(np.float64)[..., None] * inv
    if inverse:  # R(p)^-1 for the scaled rotation af R(p): R(-p) / af
        c, s = mcos(ang) / af, -msin(ang) / af
    else:
        c, s = mcos(ang) * af, msin(ang) * af
    a, b = pair_index(style, r)
    xa, xb = x[..., a], x[..., b]
    y = x.copy()
    y[..., a] = xa * c - xb * s
    y[..., b] = xb * c + xa * s
    # Products as computed, and the angle's lever on each output.
    pa_c, pb_s, pb_c, pa_s = np.abs(xa * c), np.abs(xb * s), np.abs(xb * c), np.abs(xa * s)
    lever = 4.0 * np.abs(ang)
    margin = np.zeros_like(x)
    margin[..., a] = EPS64 * (8.0 * (pa_c + pb_s) + lever * (pa_s + pb_c))
    margin[..., b] = EPS64 * (8.0 * (pb_c + pa_s) + lever * (pb_s + pa_c))
    return y, margin


def near_ties(pos, inv, style, shape, dtype, rng, af=1.0, inverse=False):
    """Float64 inputs of `shape` (d last, positions `pos` of shape shape[:-1]) whose
    rotation lands just above or below midpoints between neighbouring values of dtype
    ("f16", "bf16" or "f32"), at 2^-30 relative: far beyond the reference's margin and
    well inside half an f32 ulp, so rounding through f32 (double rounding) and rounding
    once give different results for about half of them. In pairs whose cos is not
    small, x_b = 0 and x_a = (midpoint +- delta) / c, c the scaled cos."""
    bits = {"f16": 11, "bf16": 8, "f32": 24}[dtype]
    r = 2 * len(inv)
    x = rng.standard_normal(shape)
    a, b = pair_index(style, r)
    ang = np.asarray(pos, dtype=np.int64).astype(np.float64)[..., None] * inv
    c = mcos(ang) / af if inverse else mcos(ang) * af
    # A value with `bits` significant bits and one more set bit: a midpoint.
    e = rng.integers(-6, 6, size=c.shape)
    mant = rng.integers(2 ** (bits - 1), 2 ** bits, size=c.shape).astype(np.float64)
    mid = np.ldexp(2 * mant + 1, e - bits) * rng.choice([-1.0, 1.0], size=c.shape)
    delta = np.abs(mid) * 2.0 ** -30 * rng.choice([-1.0, 1.0], size=c.shape)
    tie = np.abs(c) > 0.25
    x[..., a] = np.where(tie, (mid + delta) / c, x[..., a])
    x[..., b] = np.where(tie, 0.0, x[..., b])
    return x
