"""Checks that ride on the reads of the data, and tables shared between calls.

posenc.attention checks K and V for NaN and Inf as its kernel reads them (no pass of
their own): the refusals must be those of a check of the whole of K, then of V, before
anything runs, whatever the layout, the K/V dtype, the arithmetic and the mask (a key
block that no query sees is still refused). posenc.rope shares the cos/sin table of a
whole tensor's positions with later calls: every call must still match the independent
float64 reference of tests/lib/reference_rope.py at its own positions and parameters.
"""

import numpy as np
import pytest

import posenc
from reference_rope import default_inv, rope as rope_ref

NONFINITE = r"contains NaN or Inf \(use allow_nonfinite"


def kv(hk, sk, d, dtype, axes, seed=3):
    rng = np.random.default_rng(seed)
    shape = (1, hk, sk, d) if axes == "bhsd" else (1, sk, hk, d)
    return (rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype))


def poke(x, axes, key, value):
    """x with `value` at key `key` of head 0, dim 1."""
    y = x.copy()
    if axes == "bhsd":
        y[0, 0, key, 1] = value
    else:
        y[0, key, 0, 1] = value
    return y


CASES = [  # hq, hk, sq, sk, axes
    (4, 4, 1, 3000, "bhsd"),   # decode
    (8, 2, 1, 2500, "bhsd"),   # GQA decode
    (4, 2, 37, 700, "bhsd"),   # prefill
    (2, 2, 5, 1500, "bshd"),   # heads interleaved
]


@pytest.mark.parametrize("hq,hk,sq,sk,axes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("precision", [None, "f32"])
def test_attention_refuses_nonfinite_k_and_v(hq, hk, sq, sk, axes, dtype, precision):
    d = 16
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, hq, sq, d) if axes == "bhsd" else (1, sq, hq, d))
    q = q.astype(np.float32)
    k, v = kv(hk, sk, d, dtype, axes)
    base = {"axes": axes, "emit": "output"}
    if precision:
        base["precision"] = precision
    # Key 0 is seen by no query under a window of 8 keys: refused all the same.
    for mask in ({}, {"causal": True}, {"window": (8, 0)}):
        kw = dict(base, **mask)
        for key in (0, sk // 2, sk - 1):
            with pytest.raises(posenc.InputError, match="^k: " + NONFINITE):
                posenc.attention(q, poke(k, axes, key, np.nan), v, **kw)
            with pytest.raises(posenc.InputError, match="^v: " + NONFINITE):
                posenc.attention(q, k, poke(v, axes, key, np.inf), **kw)
        # Both bad: K is named, wherever its bad key lies against V's.
        with pytest.raises(posenc.InputError, match="^k: " + NONFINITE):
            posenc.attention(q, poke(k, axes, sk - 1, -np.inf), poke(v, axes, 0, np.nan), **kw)
        # Q is named before K and V.
        qb = q.copy()
        qb.reshape(-1)[3] = np.nan
        with pytest.raises(posenc.InputError, match="^q: " + NONFINITE):
            posenc.attention(qb, poke(k, axes, 0, np.nan), v, **kw)
    # Allowed, the output is computed (NaN in the rows that see the key).
    out = posenc.attention(q, poke(k, axes, 0, np.nan), v, allow_nonfinite=True, **base)
    assert np.isnan(out).any()


def test_attention_checked_run_matches_numpy():
    # A finite run is unchanged by the check: the output equals numpy's in float64.
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 1, 16))
    k = rng.standard_normal((1, 2, 4000, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, 4000, 16)).astype(np.float32)
    got = posenc.attention(q, k, v, emit="output")
    s = q @ np.swapaxes(k.astype(np.float64), -1, -2) / 4.0
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def rope_positions(shape, axes, start):
    return np.indices(shape[:-1])[axes.index("s")] + start


@pytest.mark.parametrize("precision", [None, "f32"])
def test_rope_shared_tables_follow_positions_and_parameters(precision):
    shape, axes = (1, 1500, 2, 32), "bshd"
    x = np.random.default_rng(2).standard_normal(shape)
    inv = default_inv(10000.0, 32)
    tol = 1e-12 if precision is None else 5e-3
    kw = {"axes": axes}
    if precision:
        kw["precision"] = precision
    # The same positions twice, then shifted ones, then the inverse, then the first again:
    # each call against the reference at its own positions.
    for start, inverse, style in ((0, False, "neox"), (0, False, "neox"), (7, False, "neox"),
                                  (7, True, "neox"), (0, False, "gptj"), (0, False, "neox")):
        got = posenc.rope(x, start=start, inverse=inverse, style=style, **kw)
        ref, _ = rope_ref(x, rope_positions(shape, axes, start), inv, style, inverse=inverse)
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
        # In place gives the same bytes.
        y = x.copy()
        posenc.rope(y, out=y, start=start, inverse=inverse, style=style, **kw)
        assert y.tobytes() == np.asarray(got).tobytes()


def test_rope_caller_tables_after_a_shared_table():
    # The caller's cos/sin tables are used, not a table shared by an earlier call at the
    # same positions.
    shape, axes = (1, 600, 2, 32), "bshd"
    x = np.random.default_rng(4).standard_normal(shape)
    posenc.rope(x, axes=axes)
    inv = default_inv(500.0, 32)
    ang = np.arange(600, dtype=np.float64)[:, None] * inv
    got = posenc.rope(x, axes=axes, cos=np.cos(ang), sin=np.sin(ang))
    ref, _ = rope_ref(x, rope_positions(shape, axes, 0), inv, "neox")
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
