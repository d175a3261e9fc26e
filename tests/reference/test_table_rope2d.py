"""`posenc table rope2d` against the 2-D seed's construction (precompute_freqs_cis_2d:
freqs = 1/theta^(arange(0, D, 4)[:D/4] / D), t_x = idx % W, t_y = idx // W,
cat([x-part, y-part])), rewritten in numpy (libm sin/cos through math) and checked once
more against the seed's torch.polar form in float64.

Tolerances: f64 rtol 1e-12 (1e-12 absolute against torch.polar, whose vectorised sin/cos
are not correctly rounded); f32 within one float32 ulp of the float64 value.
"""
import math
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

_sin = np.frompyfunc(math.sin, 1, 1)
_cos = np.frompyfunc(math.cos, 1, 1)


def angles(h, w, d, theta=100.0, order="xy"):
    f = np.array([1.0 / math.pow(theta, k / d) for k in range(0, d, 4)][: d // 4])
    t = np.arange(h * w)
    tx, ty = (t % w).astype(np.float64), (t // w).astype(np.float64)
    ax, ay = tx[:, None] * f, ty[:, None] * f
    return np.concatenate([ax, ay] if order == "xy" else [ay, ax], axis=1)


def seed_polar(h, w, d, theta=100.0):
    """The seed's freqs_cis (complex, [H*W, D/2]), in float64."""
    fx = 1.0 / (theta ** (torch.arange(0, d, 4, dtype=torch.float64)[: d // 4] / d))
    t = torch.arange(h * w, dtype=torch.float64)
    tx, ty = t % w, torch.div(t, w, rounding_mode="floor")
    cx = torch.polar(torch.ones(h * w, d // 4, dtype=torch.float64), torch.outer(tx, fx))
    cy = torch.polar(torch.ones(h * w, d // 4, dtype=torch.float64), torch.outer(ty, fx))
    return torch.cat([cx, cy], dim=-1).numpy()


def full(x, style):
    return np.repeat(x, 2, axis=-1) if style == "gptj" else np.concatenate([x, x], -1)


class Rope2d(PosencTestCase):
    def table(self, *args, dtype="f64"):
        out = self.path("t.npy")
        self.run_ok("table", "rope2d", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_against_seed(self):
        for h, w, d in ((3, 5, 16), (4, 4, 64), (7, 2, 128)):
            a = angles(h, w, d)
            c = _cos(a).astype(np.float64)
            s = _sin(a).astype(np.float64)
            args = ["--height", h, "--width", w, "--dim", d]
            got = self.table(*args, "--emit", "cos-sin")
            self.assertEqual(got.shape, (2, h * w, d))
            self.assert_close(got, np.stack([full(c, "gptj"), full(s, "gptj")]), rtol=1e-12,
                              atol=0, msg=f"{h}x{w} D={d}")
            z = seed_polar(h, w, d)
            self.assert_close(got[0][:, 0::2], z.real, rtol=0, atol=1e-12, msg="seed real")
            self.assert_close(got[1][:, 0::2], z.imag, rtol=0, atol=1e-12, msg="seed imag")
            got = self.table(*args, "--emit", "angles", "--half-width")
            self.assert_close(got, a, rtol=1e-12, atol=0, msg="angles half")
            got = self.table(*args, "--emit", "sin", "--style", "neox")
            self.assert_close(got, full(s, "neox"), rtol=1e-12, atol=0, msg="neox sin")
            got = self.table(*args, "--emit", "cos", dtype="f32")
            ref = full(c, "gptj")
            ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
            self.assertTrue((np.abs(got.astype(np.float64) - ref) <= ulp).all(), "f32 cos")

    def test_order_base_and_inv_freq(self):
        a = angles(6, 3, 32, theta=10000.0, order="yx")
        got = self.table("--height", 6, "--width", 3, "--dim", 32, "--base", 10000,
                         "--order", "yx", "--emit", "angles", "--layout", "half")
        self.assert_close(got, a, rtol=1e-12, atol=0, msg="yx")
        got = self.table("--height", 1, "--width", 1, "--dim", 32, "--emit", "inv-freq")
        self.assert_close(got, [1.0 / math.pow(100.0, k / 32) for k in range(0, 32, 4)],
                          rtol=1e-12, atol=0, msg="inv-freq")

    def test_bad_inputs(self):
        out = self.path("x.npy")
        for args, word in ((["--height", 2, "--width", 2, "--dim", 18], "dim"),
                           (["--height", 0, "--width", 2, "--dim", 16], "height"),
                           (["--height", 2, "--width", -1, "--dim", 16], "width"),
                           (["--height", 2, "--width", 2, "--dim", 16, "--emit", "x"], "emit"),
                           (["--height", 2, "--width", 2, "--dim", 16, "--style", "x"], "style")):
            self.assert_fails(2, "table", "rope2d", *args, "-o", out, match=word)
        self.assert_no_new_files([])


if __name__ == "__main__":
    unittest.main()
