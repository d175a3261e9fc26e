"""float64 -> f16 and bf16 conversions are one rounding to nearest even, on every
conversion variant this CPU runs (the scalar code of `base`, the AVX2 and AVX-512 loops;
POSENC_ROPE_ISA selects the variant for conversions as for the RoPE kernels).

Claim (posenc(1), "Exactness by default"): a float64 value is rounded once to the output
type. Reference: numpy's astype from float64 to float16, which rounds once
(npy_double_to_half), and for bf16 tests/lib/rounding.py's round_bf16, written from the
format's definition. The values sit just beside the midpoints between neighbouring f16
(bf16) values, the overflow threshold and the subnormals, where rounding through float32
first (a double rounding) gives the other neighbour for about half of them: the test
checks that at least a third would, so it cannot pass vacuously.
"""
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase
from rounding import report_skipped_variants, round_bf16

F16_MAX_HALFWAY = 65520.0  # halfway between the largest finite f16 and 2^16
BF16_MAX_HALFWAY = float.fromhex("0x1.ffp127")


def beside_midpoints(lo, hi):
    """float64 values beside the midpoints between neighbours lo < hi of the format
    (exact in float64): the next double each way, and 2^-30 relative each way (below
    half a float32 ulp, so float32 rounds them onto the midpoint), with both signs."""
    mid = (lo + hi) / 2  # exact: one more bit than the format has
    x = np.concatenate([np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
                        mid * (1 + 2.0 ** -30), mid * (1 - 2.0 ** -30)])
    return np.concatenate([x, -x])


def f16_cases(rng):
    """Beside the midpoints after random positive f16 values (subnormal and normal), and
    just below the overflow threshold (65504 once, Inf through float32)."""
    bits = np.unique(rng.integers(0, 0x7bff, 4000)).astype(np.uint16)
    lo = bits.view(np.float16).astype(np.float64)
    hi = (bits + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    near_top = np.array([F16_MAX_HALFWAY * (1 - 2.0 ** -30), np.nextafter(F16_MAX_HALFWAY, 0)])
    return np.concatenate([beside_midpoints(lo, hi), near_top, -near_top])


def bf16_cases(rng):
    """The same for bf16: after random positive bf16 values, subnormal to the largest."""
    bits = np.unique(rng.integers(0, 0x7f7f, 4000)).astype(np.uint32)
    lo = (bits << 16).view(np.float32).astype(np.float64)
    hi = ((bits + 1) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    near_top = np.array([BF16_MAX_HALFWAY * (1 - 2.0 ** -30), np.nextafter(BF16_MAX_HALFWAY, 0)])
    return np.concatenate([beside_midpoints(lo, hi), near_top, -near_top])


class ConvertRoundsOnce(PosencTestCase):
    @classmethod
    def setUpClass(cls):
        cls.variants = report_skipped_variants(BIN, "test_convert_rounding")

    def assert_discriminates(self, x, once, twice, what):
        """At least a third of the cases round differently through float32."""
        differ = np.count_nonzero(once != twice)
        self.assertGreater(differ, len(x) // 3, f"{what}: the cases do not test double rounding")

    def convert(self, x, dtype, env):
        np.save(self.path("x.npy"), x)
        out = self.path("y.h5")
        self.run_ok("convert", self.path("x.npy"), "-o", out + ":/y", "--dtype", dtype, env=env)
        with h5py.File(out, "r") as f:
            got = f["y"][()]
        os.remove(out)
        return got

    def test_f64_to_f16_is_numpys_single_rounding(self):
        x = f16_cases(np.random.default_rng(16))
        want = x.astype(np.float16)
        with np.errstate(over="ignore"):  # 65520 * (1 - 2^-30) through float32: Inf
            twice = x.astype(np.float32).astype(np.float16)
        self.assert_discriminates(x, want.view(np.uint16), twice.view(np.uint16), "f16")
        for isa, env in self.variants:
            with self.subTest(kernel=isa):
                got = self.convert(x, "f16", env)
                self.assertEqual(got.dtype, np.float16)
                bad = np.flatnonzero(got.view(np.uint16) != want.view(np.uint16))
                self.assertEqual(bad.size, 0, f"kernel {isa}: {bad.size} of {x.size} differ, "
                                 f"first x = {x[bad[:3]].tolist()}, got "
                                 f"{got[bad[:3]].tolist()}, numpy {want[bad[:3]].tolist()}")

    def test_f64_to_bf16_is_a_single_rounding(self):
        x = bf16_cases(np.random.default_rng(17))
        want = round_bf16(x)
        self.assert_discriminates(x, want, round_bf16(x.astype(np.float32)), "bf16")
        for isa, env in self.variants:
            with self.subTest(kernel=isa):
                got = self.convert(x, "bf16", env).astype(np.float64)
                bad = np.flatnonzero(got != want)
                self.assertEqual(bad.size, 0, f"kernel {isa}: {bad.size} of {x.size} differ, "
                                 f"first x = {x[bad[:3]].tolist()}, got "
                                 f"{got[bad[:3]].tolist()}, want {want[bad[:3]].tolist()}")


if __name__ == "__main__":
    unittest.main()
