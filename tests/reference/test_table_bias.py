"""`posenc table alibi | relative | t5-bucket` against independent references:
Press's get_slopes (attention_with_linear_biases), the bias formulas of
rope-landscape.md §6, tensor2tensor's clipped relative index, and HF T5's
_relative_position_bucket in torch.

Tolerances: integer tables equal exactly; ALiBi f64 rtol 1e-12, f32 within one float32
ulp of the float64 value.
"""
import math
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_bias import get_slopes, t5_bucket


def ggml_slopes(n, max_bias):
    n2 = 2 ** math.floor(math.log2(n))
    m0 = 2.0 ** (-max_bias / n2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n2)
    return [m0 ** (h + 1) if h < n2 else m1 ** (2 * (h - n2) + 1) for h in range(n)]


def alibi(slopes, q, k, variant):
    m = np.array(slopes)[:, None, None]
    i = np.arange(q)[None, :, None]
    j = np.arange(k)[None, None, :]
    if variant == "causal":
        b = np.where(j > i, -np.inf, -m * (i - j))
    elif variant == "fairseq":
        b = np.where(j > i, -np.inf, m * j + 0 * i)
    elif variant == "symmetric":
        b = -m * np.abs(i - j)
    else:  # bottom-right, flash-attn
        b = -m * np.abs(i + k - q - j)
    return b.astype(np.float64)


class Bias(PosencTestCase):
    def table(self, kind, *args, name="t.npy"):
        out = self.path(name)
        self.run_ok("table", kind, *args, "-o", out)
        return np.load(out)

    def test_slopes_any_head_count(self):
        for n in (1, 2, 3, 5, 8, 12, 16, 20, 24, 33, 64, 80):
            got = self.table("alibi", "--heads", n, "--dtype", "f64")
            self.assertEqual(got.shape, (n,))
            self.assert_close(got, get_slopes(n), rtol=1e-12, atol=0, msg=f"heads={n}")
            got32 = self.table("alibi", "--heads", n)
            ref = np.array(get_slopes(n))
            ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
            self.assertTrue((np.abs(got32.astype(np.float64) - ref) <= ulp).all(), n)
        np.testing.assert_array_equal(self.table("alibi", "--heads", 8, "--dtype", "f64"),
                                      [2.0 ** -k for k in range(1, 9)])
        for n, mb in ((12, 16.0), (5, 4.0)):
            got = self.table("alibi", "--heads", n, "--max-bias", mb, "--dtype", "f64")
            self.assert_close(got, ggml_slopes(n, mb), rtol=1e-12, atol=0, msg=f"max_bias {mb}")

    def test_bias_matrices(self):
        for n, q, k in ((12, 7, 7), (20, 5, 9), (5, 9, 4)):
            slopes = get_slopes(n)
            for variant in ("causal", "symmetric", "fairseq", "bottom-right"):
                got = self.table("alibi", "--heads", n, "--q-len", q, "--k-len", k,
                                 "--variant", variant, "--dtype", "f64")
                ref = alibi(slopes, q, k, variant)
                self.assertEqual(got.shape, (n, q, k))
                np.testing.assert_array_equal(np.isinf(got), np.isinf(ref), variant)
                fin = np.isfinite(ref)
                self.assert_close(got[fin], ref[fin], rtol=1e-12, atol=0,
                                  msg=f"{variant} H={n} Q={q} K={k}")
        # With lengths, the default is causal.
        got = self.table("alibi", "--heads", 4, "--q-len", 3, "--dtype", "f64")
        np.testing.assert_array_equal(got, alibi(get_slopes(4), 3, 3, "causal"))

    def test_relative(self):
        for q, k, m in ((7, 7, 3), (5, 11, 2), (9, 4, 0), (6, 6, 100)):
            i = np.arange(q)[:, None]
            j = np.arange(k)[None, :]
            got = self.table("relative", "--q-len", q, "--k-len", k, "--max-distance", m)
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, np.clip(j - i, -m, m) + m)
            got = self.table("relative", "--q-len", q, "--k-len", k, "--max-distance", m,
                             "--sign", "q-k", "--dtype", "i32")
            self.assertEqual(got.dtype, np.int32)
            np.testing.assert_array_equal(got, np.clip(i - j, -m, m) + m)

    def test_t5_buckets(self):
        for q, k, nb, md, bidi in ((200, 300, 32, 128, True), (300, 200, 32, 128, False),
                                   (64, 513, 64, 256, True), (40, 41, 8, 20, False),
                                   (1, 1000, 32, 128, True)):
            ctx = torch.arange(q, dtype=torch.long)[:, None]
            mem = torch.arange(k, dtype=torch.long)[None, :]
            ref = t5_bucket(mem - ctx, bidi, nb, md).numpy()
            args = ["--q-len", q, "--k-len", k, "--buckets", nb, "--max-distance", md,
                    "--bidirectional" if bidi else "--causal"]
            got = self.table("t5-bucket", *args)
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, ref, f"{args}")
        # defaults: 32 buckets, max distance 128, bidirectional
        got = self.table("t5-bucket", "--q-len", 50, "--k-len", 60, "--dtype", "u8")
        ref = t5_bucket(torch.arange(60)[None, :] - torch.arange(50)[:, None]).numpy()
        self.assertEqual(got.dtype, np.uint8)
        np.testing.assert_array_equal(got, ref)

    def test_bad_inputs(self):
        out = self.path("x.npy")
        cases = [
            ("alibi", ["--heads", 0], "heads"),
            ("alibi", ["--heads", 4, "--q-len", 0], "q-len"),
            ("alibi", ["--heads", 4, "--variant", "slopes", "--q-len", 3], "slopes"),
            ("alibi", ["--heads", 4, "--variant", "causal"], "q-len"),
            ("alibi", ["--heads", 4, "--dtype", "i64"], "dtype"),
            ("relative", ["--q-len", 4, "--k-len", 4, "--max-distance", -1], "max-distance"),
            ("relative", ["--q-len", 4, "--max-distance", 200, "--dtype", "i8"], "dtype"),
            ("relative", ["--q-len", -4, "--max-distance", 2], "q-len"),
            ("t5-bucket", ["--q-len", 4, "--buckets", 2], "buckets"),
            ("t5-bucket", ["--q-len", 4, "--causal", "--bidirectional"], "causal"),
            ("t5-bucket", ["--q-len", 4, "--k-len", 0], "k-len"),
        ]
        for kind, args, word in cases:
            self.assert_fails(2, "table", kind, *args, "-o", out, match=word)
        self.assert_no_new_files([])


if __name__ == "__main__":
    unittest.main()
