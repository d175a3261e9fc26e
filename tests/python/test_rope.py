"""posenc.rope against the independent numpy reference of tests/lib/reference_rope.py
(also used by the CLI's tests), in place and out of place, numpy and torch, every float
dtype; the in-place rotation must not copy (the input's data pointer is the output's)."""

import numpy as np
import pytest
import torch

import posenc
from reference_rope import default_inv, rope as rope_ref, yarn_inv
from rounding import bf16_bits, check_rounded_once, round_bf16


def rng():
    return np.random.default_rng(1234)


def positions(shape, axes, start=0):
    """Position of every vector: its index along s, plus start (shape[:-1] of d-last)."""
    s_axis = axes.index("s")
    return np.indices(shape[:-1])[s_axis] + start


def check(got, ref, margin, dtype):
    if dtype == "f64":  # the reference's own bound plus the final rounding
        err = np.abs(np.asarray(got, np.float64) - ref)
        assert np.all(err <= margin + 2.0 ** -53 * np.abs(ref)), err.max()
        return
    problems, _ = check_rounded_once(got, ref, margin, dtype, max_ambiguous=0.01)
    assert not problems, problems


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", ["f64", "f32", "f16"])
def test_out_of_place_matches_reference(style, dtype):
    x = rng().standard_normal((2, 3, 17, 64))
    xd = x.astype({"f64": np.float64, "f32": np.float32, "f16": np.float16}[dtype])
    got = posenc.rope(xd, style=style, base=10000.0, start=5)
    assert got.dtype == xd.dtype and got.shape == x.shape
    ref, margin = rope_ref(xd.astype(np.float64), positions(x.shape, "bhsd", 5),
                           default_inv(10000.0, 64), style)
    check(got, ref, margin, dtype)


def test_in_place_numpy_is_zero_copy():
    x = rng().standard_normal((1, 4, 33, 128)).astype(np.float32)
    before = x.copy()
    ptr = x.__array_interface__["data"][0]
    y = posenc.rope(x, out=x, base=500000.0)
    assert y is x and x.__array_interface__["data"][0] == ptr
    ref, margin = rope_ref(before.astype(np.float64), positions(x.shape, "bhsd"),
                           default_inv(500000.0, 128), "neox")
    check(x, ref, margin, "f32")


def test_in_place_torch_bshd_rotates_the_tensor_itself():
    t = torch.from_numpy(rng().standard_normal((2, 9, 4, 32)).astype(np.float32))
    before = t.clone()
    ptr = t.data_ptr()
    y = posenc.rope(t, axes="bshd", out=t)
    assert y is t and t.data_ptr() == ptr
    x = before.numpy().transpose(0, 2, 1, 3).astype(np.float64)
    ref, margin = rope_ref(x, positions(x.shape, "bhsd"), default_inv(10000.0, 32), "neox")
    check(t.numpy().transpose(0, 2, 1, 3), ref, margin, "f32")


def test_torch_in_torch_out_and_bf16():
    x = rng().standard_normal((1, 2, 8, 64))
    t = torch.from_numpy(x).to(torch.bfloat16)
    y = posenc.rope(t)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    xin = t.to(torch.float64).numpy()
    ref, margin = rope_ref(xin, positions(x.shape, "bhsd"), default_inv(10000.0, 64), "neox")
    check(y.to(torch.float32).numpy(), ref, margin, "bf16")
    # In place on a bf16 tensor: its own memory.
    ptr = t.data_ptr()
    posenc.rope(t, out=t)
    assert t.data_ptr() == ptr and torch.equal(t, y)


def test_bf16_bits_in_numpy():
    x = rng().standard_normal((8, 64)).astype(np.float32)
    bits = posenc.float32_to_bf16(x)
    got = posenc.rope(posenc.BF16(bits))
    assert got.dtype == np.uint16
    xin = posenc.bf16_to_float32(bits).astype(np.float64)
    ref, margin = rope_ref(xin, np.arange(8), default_inv(10000.0, 64), "neox")
    check(posenc.bf16_to_float32(got), ref, margin, "bf16")


def test_float32_to_bf16_rounds_once_and_quiets_nan_keeping_its_sign():
    # Every sign and exponent with random mantissas, NaN payloads (signalling and quiet)
    # and Inf included, against the rounding from the definition (tests/lib/rounding.py)
    # and torch's own float32 -> bfloat16 conversion.
    r = rng()
    u = (r.integers(0, 1 << 23, size=1 << 16, dtype=np.uint32)
         | (np.arange(1 << 16, dtype=np.uint32) % 512 << 23))
    u[:4] = [0x7F812345, 0xFFC05678, 0x7F800000, 0xFF800000]
    x = u.view(np.float32)
    got = posenc.float32_to_bf16(x)
    nan = np.isnan(x)
    want = bf16_bits(round_bf16(x[~nan].astype(np.float64)).astype(np.float32))
    assert np.array_equal(got[~nan], want)
    t = torch.from_numpy(x[~nan].copy()).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(got[~nan], t.view(np.uint16))
    assert np.array_equal(got[nan], np.where(u[nan] >> 31 == 1, 0xFFC0, 0x7FC0))


def test_out_dtype_f64_from_f32_and_out_array():
    x = rng().standard_normal((3, 16, 32)).astype(np.float32)
    out = np.empty(x.shape, np.float64)
    y = posenc.rope(x, out=out, inverse=True)
    assert y is out
    ref, margin = rope_ref(x.astype(np.float64), positions(x.shape, "bsd"),
                           default_inv(10000.0, 32), "neox", inverse=True)
    check(out, ref, margin, "f64")
    z = posenc.rope(x, dtype=np.float64, inverse=True)
    assert z.dtype == np.float64 and np.array_equal(z, out)


def test_yarn_position_ids_and_partial():
    x = rng().standard_normal((2, 12, 64))
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]] * 2) * 100
    got = posenc.rope(x, position_ids=ids, scaling="yarn", factor=4.0, original_max_pos=512,
                      rotary_dim=32)
    inv, af = yarn_inv(10000.0, 32, 4.0, 512)
    ref, margin = rope_ref(x[..., :32], ids, inv, "neox", af=af)
    check(got[..., :32], ref, margin, "f64")
    assert np.array_equal(got[..., 32:], x[..., 32:])


def test_noncontiguous_in_place_writes_back():
    base = rng().standard_normal((2, 8, 3, 16))
    view = base.transpose(0, 2, 1, 3)  # bhsd view of bshd memory
    before = view.copy()
    posenc.rope(view, out=view)
    ref, margin = rope_ref(before, positions(before.shape, "bhsd"), default_inv(10000.0, 16),
                           "neox")
    check(view, ref, margin, "f64")


def test_hf_config_matches_explicit_options():
    import os
    cfg = os.path.join(os.environ["POSENC_SOURCE_DIR"], "tests", "data", "llama-3.1-8b.json")
    x = rng().standard_normal((1, 2, 16, 128)).astype(np.float32)
    a = posenc.rope(x, hf_config=cfg)
    b = posenc.rope(x, base=500000.0, scaling="llama3", factor=8.0, original_max_pos=8192,
                    low_freq_factor=1.0, high_freq_factor=4.0)
    assert np.array_equal(a, b)
    # and rotary in f32 with arith="hf" differs from exact but stays close
    c = posenc.rope(x, hf_config=cfg, arith="hf")
    assert np.allclose(c, a, atol=1e-5)


def test_gil_released_threads_agree():
    import threading
    x = rng().standard_normal((4, 8, 256, 64)).astype(np.float32)
    want = posenc.rope(x)
    results = [None] * 4

    def work(i):
        results[i] = posenc.rope(x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, want) for r in results)
