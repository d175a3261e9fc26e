"""Backward of RoPE (posenc-rope(1), --inverse): the gradient of a loss with respect to
the unrotated input, for the output gradient dy, is `posenc rope --inverse` applied to dy
(times a^2 with an attention factor a, which --inverse divides out).

Reference: torch float64 autograd of a rotation written here (HF's rotate_half for the
neox pairs, adjacent pairs for gptj), angles pos * inv_freq with inv_freq = base^(-2i/d)
(linear scaling: pos / factor); tolerance 1e-13 relative to the largest gradient.
"""
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase


def rotate(x, base=10000.0, factor=1.0, style="neox", attention_factor=1.0):
    """x [b, h, s, d] float64 torch: RoPE at positions 0 .. s-1."""
    d, s = x.shape[-1], x.shape[-2]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (torch.arange(s, dtype=torch.float64) / factor)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang) * attention_factor, torch.sin(ang) * attention_factor
    if style == "neox":
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)


class RopeBackward(PosencTestCase):
    def check(self, opts, style, factor=1.0, attention_factor=1.0):
        r = np.random.default_rng(3)
        x = r.standard_normal((1, 2, 9, 8))
        dy = r.standard_normal((1, 2, 9, 8))
        X = torch.tensor(x, requires_grad=True)
        y = rotate(X, factor=factor, style=style, attention_factor=attention_factor)
        (want,) = torch.autograd.grad(y, X, torch.tensor(dy))
        out = self.path("g.npy")
        self.run_ok("rope", self.npy("dy.npy", dy), "-o", out, "--inverse", "--style", style,
                    "--dtype", "f64", *opts)
        got = np.load(out) * attention_factor ** 2
        want = want.numpy()
        self.assertLessEqual(np.abs(got - want).max(), 1e-13 * np.abs(want).max(), opts)

    def test_inverse_is_the_gradient(self):
        for style in ("neox", "gptj"):
            with self.subTest(style=style):
                self.check([], style)
                self.check(["--scaling", "linear", "--factor", "2"], style, factor=2.0)
                self.check(["--attention-factor", "1.5", "--scaling", "linear", "--factor",
                            "4"], style, factor=4.0, attention_factor=1.5)


if __name__ == "__main__":
    unittest.main()
