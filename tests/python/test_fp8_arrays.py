"""fp8 arrays in the Python module: uint8 codes marked posenc.FP8(codes, "e4m3fn"),
compared with the values of tests/lib/fp8_reference.py (written from the formats'
definition): attention on fp8 Q/K/V gives the bytes of attention on their float32 values;
posenc.write/read keep fp8 (NPY '<V1', HDF5 opaque with a dtype attribute) and h5py
reads it; bad codes and names are UsageErrors. torch float8 tensors are viewed as their
codes where torch has them (2.1 and later; Debian's 1.13 has not, so that case is
skipped here)."""
import h5py
import numpy as np
import pytest
import torch

import fp8_reference as ref
import posenc

FORMATS = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def codes_within(fmt, bound, shape, rng):
    t = ref.table(fmt)
    ok = np.nonzero(np.isfinite(t) & (np.abs(t) <= bound))[0].astype(np.uint8)
    return rng.choice(ok, shape)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_attention_on_fp8_equals_attention_on_its_values(fmt):
    rng = np.random.default_rng(11)
    t = ref.table(fmt)
    q, k, v = (codes_within(fmt, 4, (2, 2, 9, 8), rng) for _ in range(3))
    got = posenc.attention(posenc.FP8(q, fmt), posenc.FP8(k, fmt), posenc.FP8(v, FORMATS[fmt]),
                           emit="output", dtype="f32")
    want = posenc.attention(t[q], t[k], t[v], emit="output")
    assert got.dtype == np.float32
    assert got.tobytes() == want.tobytes()
    # Default output for fp8 Q: bf16 (FlashAttention-3), as uint16 bit patterns.
    assert posenc.attention(posenc.FP8(q, fmt), posenc.FP8(k, fmt), posenc.FP8(v, fmt),
                            emit="output").dtype == np.uint16


def test_nan_code_is_a_nonfinite_input():
    q = np.full((1, 1, 3, 4), 0x38, np.uint8)
    k = q.copy()
    k[0, 0, 1, 2] = 0xFF
    with pytest.raises(posenc.InputError, match="NaN"):
        posenc.attention(posenc.FP8(q, "e4m3fn"), posenc.FP8(k, "e4m3fn"),
                         posenc.FP8(q, "e4m3fn"), emit="output", dtype="f32")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_write_read_and_h5py(tmp_path, fmt):
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    h5 = str(tmp_path / "x.h5")
    posenc.write(h5 + ":/x", posenc.FP8(codes, fmt))
    with h5py.File(h5, "r") as f:
        assert f["x"].dtype == np.dtype("V1")
        assert f["x"].attrs["dtype"] == FORMATS[fmt]
        np.testing.assert_array_equal(f["x"][()].view(np.uint8), codes)
    back = posenc.read(h5 + ":/x")
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, codes)
    npy = str(tmp_path / "x.npy")
    posenc.write(npy, posenc.FP8(codes, fmt))
    loaded = np.load(npy)
    assert loaded.dtype == np.dtype("V1")
    np.testing.assert_array_equal(loaded.view(np.uint8), codes)
    tt = posenc.read(h5 + ":/x", torch=True)
    want = getattr(torch, FORMATS[fmt], torch.uint8)
    assert tt.dtype == want


def test_bad_fp8_arguments():
    with pytest.raises(posenc.UsageError, match="FP8"):
        posenc.FP8(np.zeros(3, np.float32), "e4m3fn")
    with pytest.raises(posenc.UsageError, match="FP8"):
        posenc.FP8(np.zeros(3, np.uint8), "e4m3")
    with pytest.raises(posenc.UsageError, match="FP8"):
        posenc.FP8(np.zeros(3, np.uint16), "e5m2")


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no float8")
def test_torch_float8_tensors_are_viewed_as_codes():
    rng = np.random.default_rng(2)
    t = ref.table("e4m3fn")
    q, k, v = (codes_within("e4m3fn", 4, (1, 2, 5, 8), rng) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(c).view(torch.float8_e4m3fn) for c in (q, k, v))
    got = posenc.attention(tq, tk, tv, emit="output", dtype="f32")
    want = posenc.attention(t[q], t[k], t[v], emit="output")
    assert got.numpy().tobytes() == want.tobytes()
