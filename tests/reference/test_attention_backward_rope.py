"""`posenc attention --rope --grad-output dO`: the gradients with respect to the
unrotated Q and K (and V), RoPE applied inside attention.

Claim (posenc-attention(1), GRADIENTS): dq and dk are those of the rotated inputs
rotated back by the transpose of RoPE's map (its inverse direction, times the attention
factor a, since the map is a R), each rounded once; dv, softmax_d and lse as without
RoPE.

Reference: torch float64 autograd through a rotation and an eager attention written
here (HF's rotate_half pairs for neox, adjacent pairs for gptj, partial rotary leaving
the last dims, linear scaling, an attention factor), keys at positions start + j and
queries at start + sk - sq + i (the KV-cache alignment). Tolerance: each gradient's
largest error at most 1e-12 of its largest magnitude.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

REL = 1e-12


def rotate(x, pos, rdim, style, base=10000.0, factor=1.0, af=1.0):
    """x [b, h, s, d] float64 torch, rotated at positions pos [s] over its first rdim dims."""
    inv = 1.0 / base ** (torch.arange(0, rdim, 2, dtype=torch.float64) / rdim)
    ang = (torch.as_tensor(pos, dtype=torch.float64) / factor)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang) * af, torch.sin(ang) * af
    xr, rest = x[..., :rdim], x[..., rdim:]
    if style == "neox":
        x1, x2 = xr[..., : rdim // 2], xr[..., rdim // 2:]
        y = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        y = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    return torch.cat([y, rest], -1)


def attention(q, k, v, causal):
    hq, hk = q.shape[1], k.shape[1]
    K = k.repeat_interleave(hq // hk, 1)
    V = v.repeat_interleave(hq // hk, 1)
    s = (q @ K.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = s.shape[-2:]
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ V


class AttentionBackwardRope(PosencTestCase):
    def check(self, shape, args, style="neox", rdim=None, start=0, factor=1.0, af=1.0,
              causal=True, dtype="f64"):
        b, hq, hk, sq, sk, d = shape
        rdim = rdim or d
        r = np.random.default_rng(7)
        arrays = [r.standard_normal(s) for s in
                  ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, d), (b, hq, sq, d))]
        Q, K, V = (torch.tensor(a, requires_grad=True) for a in arrays[:3])
        kpos = np.arange(sk) + start
        qpos = kpos[sk - sq:]
        o = attention(rotate(Q, qpos, rdim, style, factor=factor, af=af),
                      rotate(K, kpos, rdim, style, factor=factor, af=af), V, causal)
        want = torch.autograd.grad(o, (Q, K, V), torch.tensor(arrays[3]))
        paths = [self.npy(f"{n}.npy", a) for n, a in zip(("q", "k", "v", "do"), arrays)]
        out = self.path("g_{}.npy")
        self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                    "--grad-output", paths[3], "-o", out, "--emit", "dq,dk,dv", "--rope",
                    "--style", style, "--dtype", dtype, *(["--causal"] if causal else []),
                    *args)
        for name, ref in zip(("dq", "dk", "dv"), want):
            got, ref = np.load(out.format(name)), ref.numpy()
            self.assertEqual(got.shape, ref.shape, name)
            err = np.abs(got - ref).max()
            self.assertLessEqual(err, REL * np.abs(ref).max(), f"{name} {args}: {err:.3g}")

    def test_pairings_and_scalings(self):
        for style in ("neox", "gptj"):
            with self.subTest(style=style):
                self.check((1, 2, 2, 9, 9, 8), [], style)
                self.check((2, 4, 2, 5, 12, 16), ["--scaling", "linear", "--factor", "2"],
                           style, factor=2.0)
                self.check((1, 2, 1, 7, 7, 12), ["--attention-factor", "1.3", "--rotary-dim",
                                                 "8", "--start", "5"],
                           style, rdim=8, start=5, af=1.3, causal=False)

    def test_rounded_once_to_f32(self):
        # The f32 outputs are the float64 gradients rounded once.
        r = np.random.default_rng(1)
        arrays = [r.standard_normal((1, 2, 6, 8)) for _ in range(4)]
        paths = [self.npy(f"{n}.npy", a) for n, a in zip(("q", "k", "v", "do"), arrays)]
        outs = {}
        for dtype in ("f64", "f32"):
            out = self.path(dtype + "_{}.npy")
            self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                        "--grad-output", paths[3], "-o", out, "--emit", "dq,dk,lse", "--rope",
                        "--attention-factor", "1.7", "--dtype", dtype)
            outs[dtype] = {n: np.load(out.format(n)) for n in ("dq", "dk", "lse")}
        for n in ("dq", "dk", "lse"):
            self.assertEqual(outs["f32"][n].dtype, np.float32, n)
            np.testing.assert_array_equal(outs["f32"][n], outs["f64"][n].astype(np.float32), n)

    def test_framework_arithmetic_refused(self):
        r = np.random.default_rng(2)
        paths = [self.npy(f"{n}.npy", r.standard_normal((1, 1, 4, 8)).astype(np.float32))
                 for n in ("q", "k", "v", "do")]
        before = set(os.listdir(self.tmp))
        self.assert_fails(2, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                          "--grad-output", paths[3], "-o", self.path("g_{}.npy"), "--rope",
                          "--arith", "hf", match="exact")
        self.assertEqual(set(os.listdir(self.tmp)), before)

if __name__ == "__main__":
    unittest.main()
