"""posenc.compare against numpy.isclose and ULP counts computed here; posenc.read and
posenc.write against numpy's NPY files and h5py."""
import h5py
import numpy as np
import pytest
import torch

import posenc


def test_compare_tolerances_and_counts():
    b = np.linspace(-1, 1, 101)
    a = b.copy()
    a[10] += 1e-3
    a[20] += 1e-9
    r = posenc.compare(a, b, atol=1e-6, rtol=0)
    assert not r and r.mismatches == int(np.count_nonzero(~np.isclose(a, b, rtol=0, atol=1e-6)))
    assert r.first_mismatch == 10 and r.max_abs["index"] == (10,)
    assert r.max_abs["value"] == pytest.approx(1e-3)
    with pytest.raises(posenc.DifferError) as e:
        r.check()
    assert e.value.status == 1 and "1 of 101 differ" in str(e.value)
    assert posenc.compare(a, b, atol=1e-2).check()


def test_compare_ulp_float32():
    b = np.arange(1, 9, dtype=np.float32)
    a = b.copy()
    a[3] = np.nextafter(np.nextafter(a[3], np.float32(9)), np.float32(9))
    assert posenc.compare(a, b, ulp=2).match
    r = posenc.compare(a, b, ulp=1)
    assert not r.match and r.max_ulp == 2


def test_compare_shapes_and_nan():
    r = posenc.compare(np.zeros(3), np.zeros(4))
    assert not r.shapes_equal and not r
    a = np.array([1.0, np.nan])
    assert not posenc.compare(a, a)
    assert posenc.compare(a, a, equal_nan=True)


def test_read_write_npy_and_hdf5(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    posenc.write(tmp_path / "x.npy", x)
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), x)
    np.testing.assert_array_equal(posenc.read(tmp_path / "x.npy"), x)
    ref = f"{tmp_path}/f.h5:/g/x"
    posenc.write(ref, x, attrs={"base": 10000.0, "name": "q"})
    with h5py.File(tmp_path / "f.h5") as f:
        np.testing.assert_array_equal(f["/g/x"][...], x)
        assert f["/g/x"].attrs["base"] == 10000.0
    posenc.write(f"{tmp_path}/f.h5:/g/y", x * 2)  # adds to the file
    with h5py.File(tmp_path / "f.h5") as f:
        assert set(f["g"]) == {"x", "y"}
    with pytest.raises(posenc.OutputError, match="already exists"):
        posenc.write(ref, x)  # replacing needs force
    posenc.write(ref, x + 1, force=True)
    np.testing.assert_array_equal(posenc.read(ref), x + 1)


def test_bf16_round_trip_torch(tmp_path):
    t = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
    with pytest.raises(posenc.UsageError, match="NPY has no bfloat16"):
        posenc.write(tmp_path / "b.npy", t)
    ref = f"{tmp_path}/b.h5:/t"
    posenc.write(ref, t)
    bits = posenc.read(ref)
    assert bits.dtype == np.uint16
    assert torch.equal(posenc.read(ref, torch=True), t)
    np.testing.assert_array_equal(posenc.bf16_to_float32(bits), t.float().numpy())
