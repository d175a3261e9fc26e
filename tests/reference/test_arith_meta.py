"""`posenc rope --arith meta` against Meta's llama code run in Debian's torch on the CPU
(tests/lib/framework_rope_ref.py: precompute_freqs_cis, apply_rotary_emb, and
llama-models' apply_scaling for Llama 3.1), on [b, s, h, d] tensors as Meta's code takes
them. Partial rotary applies Meta's code to the first R dims (a contiguous copy).

Tolerance: 0 ulp for f32, bf16, f16 and f64 inputs, positions up to 131071, and head sizes
whose complex inner loop has a tail (d/2 not a multiple of 8; one head, where torch runs
one loop over the whole sequence).
"""
import os
import unittest

import numpy as np
import torch

import framework_rope_ref as ref
from posenc_testlib import (PosencTestCase, bit_mismatches, load_torch, out_ref, save_torch)

ref.set_threads()
LLAMA31 = ["--base", "500000", "--scaling", "llama3", "--factor", "8", "--original-max-pos",
           "8192"]


class MetaRope(PosencTestCase):
    def posenc(self, x, start, *args):
        src = save_torch(self, "x", x)
        out = out_ref(self, "y", x.dtype)
        self.run_ok("rope", src, "-o", out, "--axes", "bshd", "--arith", "meta", "--start",
                    str(start), *args)
        return load_torch(out, x.dtype)

    def meta(self, x, start, rotary=None, theta=10000.0, scaled=False):
        b, s, h, d = x.shape
        r = rotary or d
        freqs_cis = ref.precompute_freqs_cis(r, start + s, theta, use_scaled=scaled)[start:start + s]
        xr = x[..., :r].contiguous()
        return torch.cat([ref.apply_rotary_emb(xr, freqs_cis), x[..., r:]], -1)

    def test_llama2_and_tails(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            for shape in ((2, 40, 3, 128), (1, 70, 1, 36), (2, 30, 4, 36), (1, 33, 1, 6),
                          (2, 40, 1, 20), (1, 20, 2, 10)):
                x = (torch.randn(*shape, generator=torch.Generator().manual_seed(2)) * 3).to(dtype)
                start = 131071 - shape[1] + 1
                with self.subTest(dtype=str(dtype), shape=shape):
                    self.assertEqual(bit_mismatches(self.posenc(x, start), self.meta(x, start)), 0)

    def test_llama31_scaling(self):
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(1, 64, 4, 128, generator=torch.Generator().manual_seed(4)) * 3).to(dtype)
            for start in (0, 131071 - 63):
                with self.subTest(dtype=str(dtype), start=start):
                    got = self.posenc(x, start, *LLAMA31)
                    want = self.meta(x, start, theta=500000.0, scaled=True)
                    self.assertEqual(bit_mismatches(got, want), 0)

    def test_partial_rotary(self):
        for dtype in (torch.float32, torch.bfloat16):
            for shape, r in (((1, 50, 2, 64), 32), ((1, 50, 1, 64), 20)):
                x = (torch.randn(*shape, generator=torch.Generator().manual_seed(6)) * 3).to(dtype)
                with self.subTest(dtype=str(dtype), shape=shape, rotary=r):
                    got = self.posenc(x, 1000, "--rotary-dim", str(r))
                    self.assertEqual(bit_mismatches(got, self.meta(x, 1000, rotary=r)), 0)

    def test_table_is_freqs_cis(self):
        fc = ref.precompute_freqs_cis(128, 131072, 500000.0, use_scaled=True)[-300:]
        out = self.path("t.npy")
        self.run_ok("table", "rope", "--dim", "128", "--positions", "300", "--start",
                    str(131072 - 300), "--arith", "meta", "--emit", "cos-sin", "--layout", "half",
                    "--dtype", "f32", "-o", out, *LLAMA31)
        t = torch.from_numpy(np.load(out))
        self.assertEqual(bit_mismatches(t[0], torch.view_as_real(fc)[..., 0].contiguous()), 0)
        self.assertEqual(bit_mismatches(t[1], torch.view_as_real(fc)[..., 1].contiguous()), 0)


class MetaErrors(PosencTestCase):
    def test_refused(self):
        x = self.path("x.npy")
        np.save(x, np.ones((4, 8), np.float32))
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "meta", "--scaling",
                          "yarn", "--factor", "4", "--original-max-pos", "4096", match="yarn")
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "meta", "--style",
                          "neox", match="gptj")
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "meta",
                          "--attention-factor", "1.2", match="attention factor")
        self.assertFalse(os.path.exists(self.path("y.npy")))


if __name__ == "__main__":
    unittest.main()
