"""posenc.rope(x, cos=..., sin=..., seqlen_offsets=...): the caller's cos/sin tables as
given, against the torch float64 reference of flash-attn's apply_rotary_emb_torch
(tests/lib/fa_rotary_reference.py). Tolerance: f64 within 4 float64 ulp of the largest
term; bf16 equal to the float64 reference rounded once (tests/lib/rounding.py; the
reference is exact there)."""
import numpy as np
import pytest
import torch

import posenc
from fa_rotary_reference import apply_rotary_tables
from rounding import EPS64, assert_rounded_once


def tables(rows, width, dtype):
    inv = 1.0 / 10000.0 ** (np.arange(0, 2 * width, 2) / (2 * width))
    ang = np.arange(rows)[:, None] * inv
    return torch.from_numpy(np.cos(ang)).to(dtype), torch.from_numpy(np.sin(ang)).to(dtype)


def test_bf16_torch_tables_offsets_interleaved():
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.standard_normal((2, 6, 4, 24))).bfloat16()
    cos, sin = tables(20, 8, torch.bfloat16)
    y = posenc.rope(x, axes="bshd", cos=cos, sin=sin, seqlen_offsets=torch.tensor([3, 14]),
                    style="gptj")
    assert y.dtype == torch.bfloat16
    ref = apply_rotary_tables(x.double().numpy(), cos.double().numpy(), sin.double().numpy(),
                              seqlen_offsets=[3, 14], interleaved=True)
    # bf16 times bf16 is exact in float64, and so is the sum of two such products here:
    # the reference is exact (margin 0), ties included.
    assert_rounded_once(pytest, y.float().numpy(), ref, 0.0, "bf16", msg="bf16")


def test_f64_numpy_in_place_and_cli_form():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 5, 10))
    cos, sin = tables(9, 3, torch.float64)
    y = posenc.rope(x, axes="hsd", cos=cos.numpy(), sin=sin.numpy(), start=4)
    for h in range(3):
        r = apply_rotary_tables(x[h], cos.numpy(), sin.numpy(), start=4, layout="sd")
        assert np.abs(y[h] - r).max() <= 4 * EPS64 * 2 * np.abs(x).max()


@pytest.mark.parametrize("kw, exc, match", [
    (dict(cos="c"), posenc.UsageError, "cos: needs sin"),
    (dict(cos="c", sin="s", base=500.0), posenc.UsageError, "not with base"),
    (dict(cos="c", sin="s", arith="hf"), posenc.UsageError, "applied exactly only"),
    (dict(cos="c", sin="s", start=5), posenc.InputError, "beyond the table's 8 rows"),
    (dict(cos="nan", sin="s"), posenc.InputError, "cos: value nan at row 2, column 1"),
    (dict(cos="c", sin="s", seqlen_offsets=[1, 2]), posenc.InputError, "seqlen_offsets"),
])
def test_bad_tables(kw, exc, match):
    cos, sin = tables(8, 2, torch.float32)
    nan = cos.clone()
    nan[2, 1] = float("nan")
    values = {"c": cos, "s": sin, "nan": nan}
    kw = {k: values.get(v, v) if isinstance(v, str) else v for k, v in kw.items()}
    x = np.zeros((4, 4))
    with pytest.raises(exc, match=match):
        posenc.rope(x, **kw)


def test_tables_and_frequencies_in_one_process():
    # The caller's rows are never confused with tables computed from frequencies (the
    # default ones here) for the same positions, in either order.
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 16))
    cos = rng.uniform(-1, 1, (64, 8))
    sin = rng.uniform(-1, 1, (64, 8))
    plain = posenc.rope(x)
    given = posenc.rope(x, cos=cos, sin=sin)
    again = posenc.rope(x)
    ref = apply_rotary_tables(x, cos, sin, layout="sd")
    assert np.abs(given - ref).max() <= 4 * EPS64 * 2 * np.abs(x).max()
    np.testing.assert_array_equal(plain, again)
    assert np.abs(plain - given).max() > 0.1
    np.testing.assert_array_equal(posenc.rope(x, cos=cos, sin=sin), given)


def test_torch_ops_bf16_is_apply_rotary_emb_torch():
    from fa_rotary_reference import apply_rotary_torch_native
    rng = np.random.default_rng(10)
    x = torch.from_numpy(rng.standard_normal((2, 5, 2, 12)) * 3).bfloat16()
    cos, sin = tables(9, 4, torch.bfloat16)
    pos = torch.tensor([0, 4])[:, None] + torch.arange(5)[None, :]
    want = apply_rotary_torch_native(x, cos, sin, False, pos)
    got = posenc.rope(x, axes="bshd", cos=cos, sin=sin, seqlen_offsets=[0, 4], torch_ops=True)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    with pytest.raises(posenc.UsageError, match="torch_ops: needs cos"):
        posenc.rope(x, torch_ops=True)
