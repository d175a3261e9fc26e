"""posenc.combine: split-KV combine against a torch float64 reference written here from
the definition (flash_attn_combine / merge_state), the command's bytes, and its errors."""
import os
import subprocess
import tempfile

import numpy as np
import pytest
import torch

import posenc


def reference(out_partial, lse_partial, axis=0):
    o = torch.movedim(torch.tensor(out_partial, dtype=torch.float64), axis, 0)
    l = torch.movedim(torch.tensor(lse_partial, dtype=torch.float64), axis, 0)
    lse = torch.logsumexp(l, dim=0)
    w = torch.exp(l - lse)
    w = torch.where(torch.isfinite(w), w, torch.zeros_like(w))
    o = torch.where((w > 0).unsqueeze(-1), o, torch.zeros_like(o))
    return (w.unsqueeze(-1) * o).sum(0).numpy(), lse.numpy()


def partials(seed=0):
    rng = np.random.default_rng(seed)
    o = rng.standard_normal((5, 2, 3, 4, 16))
    lse = rng.standard_normal((5, 2, 3, 4)) * 3
    lse[2:, 1] = -np.inf  # empty splits
    o[2:, 1] = np.nan
    lse[:, 0, 1, 2] = -np.inf  # a position no split saw a key for
    return o, lse


def test_equals_the_float64_reference():
    o, lse = partials()
    out, got_lse = posenc.combine(o, lse)
    ref_o, ref_l = reference(o, lse)
    assert out.dtype == np.float64 and got_lse.dtype == np.float64
    np.testing.assert_allclose(out, ref_o, rtol=0, atol=1e-13)
    np.testing.assert_allclose(got_lse, ref_l, rtol=1e-15, atol=1e-14)
    assert np.all(out[0, 1, 2] == 0) and got_lse[0, 1, 2] == -np.inf


def test_axis_layout_and_torch():
    o, lse = partials(1)
    ref_o, ref_l = reference(o, lse)
    out, got_lse = posenc.combine(np.moveaxis(o, 0, 2), np.moveaxis(lse, 0, 2), axis=-3)
    np.testing.assert_allclose(out, ref_o, rtol=0, atol=1e-13)
    out, got_lse = posenc.combine(torch.tensor(o, dtype=torch.float32),
                                  torch.tensor(np.swapaxes(lse, -1, -2)), lse_layout="hs")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert got_lse.dtype == torch.float32 and tuple(got_lse.shape) == (2, 4, 3)
    ref32_o, ref32_l = reference(o.astype(np.float32), lse.astype(np.float32))
    np.testing.assert_allclose(out.numpy(), ref32_o, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_lse.numpy(), np.swapaxes(ref32_l, -1, -2), rtol=1e-6)
    out, _ = posenc.combine(o, lse, dtype=torch.bfloat16)
    assert out.dtype == np.uint16  # bf16 bits for numpy inputs


@pytest.mark.skipif(not os.environ.get("POSENC_BIN"), reason="POSENC_BIN is not set")
def test_same_bytes_as_the_command():
    o, lse = partials(2)
    with tempfile.TemporaryDirectory() as t:
        np.save(os.path.join(t, "o.npy"), o.astype(np.float32))
        np.save(os.path.join(t, "l.npy"), lse)
        r = subprocess.run([os.environ["POSENC_BIN"], "combine", "o.npy", "l.npy", "-o",
                            "out.npy", "--lse-output", "lse.npy", "--dtype", "f16"],
                           cwd=t, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out, got_lse = posenc.combine(o.astype(np.float32), lse, dtype="f16")
        assert np.array_equal(np.load(os.path.join(t, "out.npy")), out)
        assert np.array_equal(np.load(os.path.join(t, "lse.npy")), got_lse, equal_nan=True)


def test_errors():
    o, lse = partials()
    with pytest.raises(posenc.InputError, match=r"lse_partial: has shape \(5, 2, 3\)"):
        posenc.combine(o, lse[..., 0])
    bad = lse.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(posenc.InputError, match=r"lse_partial: NaN at \(0, 0, 0, 0\)"):
        posenc.combine(o, bad)
    with pytest.raises(posenc.UsageError, match=r"axis: 4 is not a split axis"):
        posenc.combine(o, lse, axis=4)
    with pytest.raises(posenc.UsageError, match=r"lse_layout"):
        posenc.combine(o, lse, lse_layout="bhs")
    with pytest.raises(posenc.UsageError, match=r"axis: expected a whole number"):
        posenc.combine(o, lse, axis="0")
