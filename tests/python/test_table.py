"""posenc.table kinds against the references of tests/lib (sinusoidal, RoPE frequencies,
ALiBi slopes, T5 buckets) and closed forms written here (Shaw indices)."""

import numpy as np
import pytest
import torch

import posenc
from reference_bias import get_slopes, t5_bucket
from reference_rope import default_inv, mcos, msin, yarn_inv
from reference_sinusoidal import sinusoidal as sinusoidal_ref
from rounding import check_rounded_once


def check(got, ref, dtype, margin=None):
    if margin is None:
        margin = 4 * 2.0 ** -52 * np.abs(ref) + 1e-300
    if dtype == "f64":  # the reference's own bound plus the final rounding
        err = np.abs(np.asarray(got, np.float64) - ref)
        assert np.all(err <= margin + 2.0 ** -53 * np.abs(ref)), err.max()
        return
    problems, _ = check_rounded_once(got, ref, margin, dtype, max_ambiguous=0.01)
    assert not problems, problems


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal(layout):
    got = posenc.table.sinusoidal(positions=50, dim=16, start=3, layout=layout,
                                  dtype=np.float64)
    ref = sinusoidal_ref(np.arange(3, 53), 16, layout=layout)
    # angles p * w_i in float64: the angle's rounding moves sin/cos by up to |p w| eps
    ang = np.repeat(np.arange(3, 53)[:, None] * 1.0, 16, axis=1)
    check(got, ref, "f64", 4 * 2.0 ** -52 * (np.abs(ref) + ang))


def test_rope_yarn_cos_sin_tuple_in_float64():
    cos, sin = posenc.table.rope(positions=64, dim=32, base=10000.0, scaling="yarn",
                                 factor=4.0, original_max_pos=16, emit=("cos", "sin"),
                                 dtype=np.float64)
    inv, af = yarn_inv(10000.0, 32, 4.0, 16)
    ang = np.arange(64)[:, None] * inv
    full = np.concatenate([ang, ang], axis=1)  # neox layout
    margin = 8 * 2.0 ** -52 * (1 + np.abs(full))
    check(cos, mcos(full) * af, "f64", margin)
    check(sin, msin(full) * af, "f64", margin)


def test_rope_default_emit_and_dtypes():
    both = posenc.table.rope(positions=10, dim=8)
    assert both.shape == (2, 10, 8) and both.dtype == np.float32
    inv = posenc.table.rope(dim=8, base=500.0, emit="inv-freq", dtype="f64")
    check(inv, default_inv(500.0, 8), "f64")
    half = posenc.table.rope(positions=10, dim=8, emit="cos", layout="half", style="gptj",
                             dtype=torch.bfloat16)
    assert isinstance(half, torch.Tensor) and half.dtype == torch.bfloat16
    assert half.shape == (10, 4)
    ref = mcos(np.arange(10)[:, None] * default_inv(10000.0, 8))
    check(half.float().numpy(), ref, "bf16", 1e-15)
    f16 = posenc.table.rope(positions=10, dim=8, emit="sin", dtype=np.float16)
    assert f16.dtype == np.float16


def test_rope_position_ids_shape():
    ids = np.array([[0, 5, 9], [2, 2, 7]])
    t = posenc.table.rope(position_ids=ids, dim=4, emit="angles", dtype=np.float64)
    assert t.shape == (2, 3, 4)
    inv = default_inv(10000.0, 4)
    np.testing.assert_array_equal(t[..., :2], ids[..., None] * inv)


def test_rope2d_shape():
    t = posenc.table.rope2d(height=3, width=4, dim=8)
    assert t.shape == (2, 12, 8)


def test_alibi_slopes_and_bias():
    slopes = posenc.table.alibi(heads=12, dtype=np.float64)
    np.testing.assert_allclose(slopes, get_slopes(12), rtol=1e-15)
    bias = posenc.table.alibi(heads=4, q_len=5, variant="symmetric", dtype=np.float64)
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    want = -np.array(get_slopes(4))[:, None, None] * np.abs(i - j)
    np.testing.assert_allclose(bias, want, rtol=1e-15)


def test_relative_index():
    t = posenc.table.relative(q_len=6, k_len=9, max_distance=3)
    i, j = np.arange(6)[:, None], np.arange(9)[None, :]
    assert t.dtype == np.int64
    np.testing.assert_array_equal(t, np.clip(j - i, -3, 3) + 3)
    u8 = posenc.table.relative(q_len=6, k_len=9, max_distance=3, sign="q-k", dtype=np.uint8)
    np.testing.assert_array_equal(u8, np.clip(i - j, -3, 3) + 3)


@pytest.mark.parametrize("causal", [False, True])
def test_t5_buckets(causal):
    t = posenc.table.t5_bucket(q_len=40, k_len=300, buckets=32, max_distance=128,
                               causal=causal)
    rel = torch.arange(300)[None, :] - torch.arange(40)[:, None]
    np.testing.assert_array_equal(t, t5_bucket(rel, bidirectional=not causal).numpy())


def test_xl_relative_and_deberta_shapes():
    r = posenc.table.xl_relative(q_len=4, k_len=6, dim=8, dtype=np.float64)
    assert r.shape == (6, 8)
    p = np.arange(5, -1, -1)[:, None] * default_inv(10000.0, 8)
    np.testing.assert_allclose(r, np.concatenate([np.sin(p), np.cos(p)], axis=1), atol=1e-15)
    d = posenc.table.deberta_bucket(q_len=5, k_len=5, position_buckets=-1)
    np.testing.assert_array_equal(d, np.arange(5)[:, None] - np.arange(5)[None, :])
