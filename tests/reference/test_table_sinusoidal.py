"""`posenc table sinusoidal` against float64 references from Vaswani's formula
(PE[p, 2i] = sin(p / base^(2i/D)), PE[p, 2i+1] = cos(...), computed with libm through
Python's math module) and against the seeds' PyTorch construction in float64.

Tolerances: f64 rtol 1e-12 (1e-12 absolute against the seed code, whose exp/log
frequencies differ from 1/base^(2i/D) by a few ulp); f32 within one float32 ulp of the float64 value, across every
position up to 2^20 for the columns of a D = 8 table and around p = 10^6 for D = 128;
f16 equal to numpy's astype; bf16 equal to round-to-nearest-even emulated in numpy.
"""
import math
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_sinusoidal import sinusoidal


def seed_torch(max_len, d_model):
    """The seeds' PositionalEncoding buffer, in float64."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) *
                         -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.numpy()


def bf16_round(x):
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.rint(np.ldexp(m, 8)), e - 8)


class Sinusoidal(PosencTestCase):
    def table(self, *args, dtype="f64"):
        out = self.path("t.npy")
        self.run_ok("table", "sinusoidal", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def assert_ulp(self, got, ref, msg):
        self.assertEqual(got.dtype, np.float32)
        self.assertEqual(got.shape, ref.shape)
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        ratio = np.abs(got.astype(np.float64) - ref) / ulp
        self.assertLessEqual(ratio.max(), 1.0, f"{msg}: worst {ratio.max():.3g} ulp at "
                                               f"{np.unravel_index(ratio.argmax(), ratio.shape)}")

    def test_layouts_dims_bases_f64(self):
        for d in (64, 80, 128):
            for base, start, n in ((10000.0, 0, 37), (500.0, 3, 1), (10000.0, 12345, 50)):
                ref = sinusoidal(np.arange(start, start + n), d, base)
                got = self.table("--positions", n, "--dim", d, "--base", base, "--start", start)
                self.assertEqual(got.dtype, np.float64)
                self.assert_close(got, ref, rtol=1e-12, atol=0, msg=f"D={d} base={base}")
            got = self.table("--positions", 21, "--dim", d, "--layout", "concat")
            self.assert_close(got, sinusoidal(np.arange(21), d, layout="concat"), rtol=1e-12,
                              atol=0, msg=f"concat D={d}")

    def test_matches_seed_pytorch_code(self):
        # The seed forms w_i as exp(-2i ln(base) / D), a few ulp from 1 / base^(2i/D);
        # at p < 500 that moves the angle by < 1e-13, hence the absolute tolerance.
        got = self.table("--positions", 500, "--dim", 64)
        self.assert_close(got, seed_torch(500, 64), rtol=0, atol=1e-12, msg="seed code")

    def test_f32_every_position_to_2_pow_20(self):
        n = 1 << 20
        got = self.table("--positions", n, "--dim", 8, dtype="f32")
        self.assert_ulp(got, sinusoidal(np.arange(n), 8), "D=8, p < 2^20")

    def test_f32_around_a_million_and_beyond(self):
        for start in (999_950, 1_600_000, 10_000_000):
            got = self.table("--positions", 100, "--dim", 128, "--start", start, dtype="f32")
            self.assert_ulp(got, sinusoidal(np.arange(start, start + 100), 128),
                            f"D=128 from p={start}")

    def test_f16_bf16(self):
        ref = sinusoidal(np.arange(300), 64)
        got = self.table("--positions", 300, "--dim", 64, dtype="f16")
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, ref.astype(np.float16))
        out = self.path("t.h5")
        self.run_ok("table", "sinusoidal", "--positions", 300, "--dim", 64, "--dtype", "bf16",
                    "-o", out)
        with h5py.File(out, "r") as f:
            ds = f["/sinusoidal"]
            off, shape = ds.id.get_offset(), ds.shape
            attrs = dict(ds.attrs)
        raw = np.fromfile(out, dtype="<u2", count=300 * 64, offset=off).reshape(shape)
        got = (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        np.testing.assert_array_equal(got, bf16_round(ref))
        self.assertEqual(attrs["kind"], "sinusoidal")
        self.assertEqual(float(attrs["base"]), 10000.0)

    def test_thread_count_invariance(self):
        blobs = []
        for j in (1, 2):
            out = self.path(f"j{j}.npy")
            self.run_ok("-j", j, "table", "sinusoidal", "--positions", 70000, "--dim", 96,
                        "-o", out)
            with open(out, "rb") as f:
                blobs.append(f.read())
        self.assertEqual(blobs[0], blobs[1])

    def test_bad_inputs(self):
        out = self.path("x.npy")
        for args, word in ((["--positions", 4, "--dim", 7], "dim"),
                           (["--positions", 0, "--dim", 8], "positions"),
                           (["--positions", -2, "--dim", 8], "positions"),
                           (["--positions", 4, "--dim", 8, "--base", 0], "base"),
                           (["--positions", 4, "--dim", 8, "--start", -1], "start"),
                           (["--positions", 4, "--dim", 8, "--dtype", "i64"], "dtype"),
                           (["--positions", 4, "--dim", 8, "--layout", "zigzag"], "layout")):
            self.assert_fails(2, "table", "sinusoidal", *args, "-o", out, match=word)
        self.assert_no_new_files([])


if __name__ == "__main__":
    unittest.main()
