"""fp8 conversions (posenc/fp8.hpp, through the module's fp8_encode/fp8_decode) against a
reference written from the formats' definition (tests/lib/fp8_reference.py; OCP FP8;
torch's float8_e4m3fn and float8_e5m2): every one of the 256 codes decoded, every midpoint
of the grid and its float32 neighbours, random float32 bit patterns, float64 inputs
(rounded to float32 first, as torch converts), and, where this torch has float8 (Debian's
1.13 has not: skipped), torch's own .to(float8_*) on the same values. Exact equality of
codes; decoded values bit for bit."""
import numpy as np
import pytest
import torch

from posenc import _posenc

# The reference written from the formats' definition (tests/lib, shared with the
# command-line tests).
from fp8_reference import FORMATS, grid  # noqa: E402
from fp8_reference import decode as decode_ref  # noqa: E402
from fp8_reference import encode as encode_ref  # noqa: E402


def check_codes(got, want, x):
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_code_decodes_exactly(fmt):
    codes = np.arange(256, dtype=np.uint8)
    got = _posenc.fp8_decode(codes, fmt)
    want = np.array([decode_ref(int(c), fmt) for c in codes], dtype=np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # -0.0 too
    # Every non-NaN code encodes back to itself; NaN codes to 0x7f with their sign.
    back = _posenc.fp8_encode(got, fmt)
    assert np.array_equal(back[ok], codes[ok])
    assert np.all(back[~ok] == (codes[~ok] & 0x80) | 0x7F)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_midpoint_and_its_neighbours(fmt):
    g = grid(fmt)
    mids = (g[:-1] + g[1:]) / 2  # exact in float32
    mids = np.concatenate([mids, g, [g[-1] * 2, 1e30, np.finfo(np.float32).max,
                                     np.finfo(np.float32).tiny, 1e-45]]).astype(np.float32)
    with np.errstate(over="ignore"):
        x = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)),
                            np.nextafter(mids, np.float32(0))])
    x = np.concatenate([x, -x, [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0]]).astype(np.float32)
    check_codes(_posenc.fp8_encode(x, fmt), encode_ref(x, fmt), x)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_random_float32_bit_patterns(fmt):
    rng = np.random.default_rng(44)
    bits = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    # Half of them in the fp8 range, where the rounding happens.
    x[::2] = (rng.standard_normal(50_000) * 10.0 ** rng.uniform(-4, 5, 50_000)).astype(np.float32)
    check_codes(_posenc.fp8_encode(x, fmt), encode_ref(x, fmt), x)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_float64_rounds_to_float32_first(fmt):
    g = grid(fmt)
    mids = (g[:-2] + g[1:-1]) / 2
    # Beside a midpoint by less than half a float32 ulp: float32 rounding lands on the
    # midpoint, which then goes to the even code (torch's double rounding).
    x = np.concatenate([mids * (1 + 2.0 ** -30), mids * (1 - 2.0 ** -30)])
    got = _posenc.fp8_encode(x, fmt)
    check_codes(got, encode_ref(x.astype(np.float32), fmt), x)
    check_codes(got, encode_ref(np.tile(mids, 2), fmt), x)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_torch_float8_path(fmt):
    tdt = getattr(torch, "float8_" + fmt, None)
    if tdt is None:
        pytest.skip(f"torch {torch.__version__} has no float8_{fmt}")
    rng = np.random.default_rng(45)
    g = grid(fmt)
    x = np.concatenate([(g[:-1] + g[1:]) / 2, g, rng.standard_normal(10_000) * 100])
    x = np.concatenate([x, -x]).astype(np.float32)
    want = torch.from_numpy(x).to(tdt).view(torch.uint8).numpy()
    check_codes(_posenc.fp8_encode(x, fmt), want, x)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    tv = codes.view(tdt).float().numpy()
    pv = _posenc.fp8_decode(codes.numpy(), fmt)
    assert np.array_equal(np.isnan(tv), np.isnan(pv))
    ok = ~np.isnan(tv)
    assert np.array_equal(tv[ok].view(np.uint32), pv[ok].view(np.uint32))
