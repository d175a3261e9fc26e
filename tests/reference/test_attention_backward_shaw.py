"""`posenc attention --relative-k RK --relative-v RV --grad-output dO`: dq, dk, dv and the
tables' gradients drelative_k, drelative_v, against torch float64 autograd of an eager
Shaw attention written here (not posenc's forward).

Claim (posenc-attention(1), GRADIENTS): with Shaw's tables the score gains scale
q_i.rk[rel(i, j)] and the output sum_j p_ij rv[rel(i, j)], rel = clip(j - i, -L, R) + L
(or zero beyond the window with --relative-beyond zero; d = i - j with --relative-sign
q-k); the gradients of Q, K, V and of both tables (summed over the pairs of each row,
the heads and the batch; per head for a [rows, hq, d] key table), each rounded once;
GQA, causal, soft-cap; -j1 equals -j2. Tolerance: each gradient's largest error at most
1e-12 of its largest magnitude.
"""
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

REL = 1e-12


def rel_rows(sq, sk, left, right, sign="k-q", zero_beyond=False):
    """[sq, sk] row indices (-1: the pair takes no row, zero beyond the window)."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    d = (j - i) if sign == "k-q" else (i - j)
    if zero_beyond:
        return np.where((d >= -left) & (d <= right), d + left, -1)
    return np.clip(d, -left, right) + left


def eager_shaw(q, k, v, rk, rv, idx, causal=False, softcap=0.0):
    hq, hk = q.shape[1], k.shape[1]
    K = k.repeat_interleave(hq // hk, 1)
    V = v.repeat_interleave(hq // hk, 1)
    scale = q.shape[-1] ** -0.5
    ix = torch.as_tensor(np.where(idx < 0, 0, idx))
    on = torch.as_tensor(idx >= 0, dtype=torch.float64)
    if rk.dim() == 2:
        rkg = rk[ix] * on[..., None]  # [sq, sk, d]
        qr = torch.einsum("bhid,ijd->bhij", q, rkg)
    else:  # per head [rows, hq, d]
        rkg = rk[ix] * on[..., None, None]  # [sq, sk, hq, d]
        qr = torch.einsum("bhid,ijhd->bhij", q, rkg)
    s = scale * (q @ K.transpose(-1, -2) + qr)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, -1)
    o = p @ V
    if rv is not None:
        o = o + torch.einsum("bhij,ijd->bhid", p, rv[ix] * on[..., None])
    return o


class AttentionBackwardShaw(PosencTestCase):
    def case(self, shape, left, right, *args, sign="k-q", zero=False, per_head=False,
             with_v=True, causal=False, softcap=0.0, j=None, seed=2):
        b, hq, hk, s, d, dv = shape
        r = np.random.default_rng(seed)
        rows = left + right + 1
        q, k, v, do = (r.standard_normal(x) for x in ((b, hq, s, d), (b, hk, s, d),
                                                       (b, hk, s, dv), (b, hq, s, dv)))
        rk = r.standard_normal((rows, hq, d) if per_head else (rows, d))
        rv = r.standard_normal((rows, dv))
        p = {n: self.npy(n + ".npy", a) for n, a in (("q", q), ("k", k), ("v", v), ("do", do),
                                                     ("rk", rk), ("rv", rv))}
        names = ["dq", "dk", "dv", "drelative_k"] + (["drelative_v"] if with_v else [])
        extra = ["--relative-k", p["rk"], "--relative-left", str(left), "--relative-right",
                 str(right), "--relative-sign", sign]
        if with_v:
            extra += ["--relative-v", p["rv"]]
        if zero:
            extra += ["--relative-beyond", "zero"]
        out = self.path("g_{}.npy")
        pre = ["-j", str(j)] if j else []
        self.run_ok(*pre, "attention", "-q", p["q"], "-k", p["k"], "-v", p["v"],
                    "--grad-output", p["do"], "-o", out, "--emit", ",".join(names), *extra,
                    *args)
        got = {n: np.load(out.format(n)) for n in names}
        T = [torch.tensor(a, requires_grad=True) for a in (q, k, v, rk, rv)]
        idx = rel_rows(s, s, left, right, sign, zero)
        o = eager_shaw(*T[:4], T[4] if with_v else None, idx, causal, softcap)
        want = torch.autograd.grad(o, T if with_v else T[:4], torch.tensor(do))
        for n, w in zip(names, want):
            w = w.numpy()
            self.assertEqual(got[n].shape, w.shape, n)
            err = np.abs(got[n] - w).max()
            self.assertLessEqual(err, REL * np.abs(w).max(), f"{n}: {err / np.abs(w).max():.3g}")
        return got

    def test_shared_tables(self):
        self.case((2, 2, 2, 7, 8, 4), 3, 3)

    def test_gqa_causal_asymmetric_window(self):
        self.case((1, 4, 2, 9, 8, 6), 4, 2, "--causal", causal=True)

    def test_zero_beyond_and_q_minus_k_softcap(self):
        self.case((1, 2, 1, 8, 4, 4), 2, 2, "--softcap", "3", zero=True, softcap=3.0)
        self.case((1, 2, 2, 8, 4, 4), 3, 2, sign="q-k", with_v=False)

    def test_per_head_key_table(self):
        self.case((1, 3, 1, 6, 4, 5), 2, 2, per_head=True)

    def test_several_tiles_and_threads(self):
        # s 150 > the 128-key tiles of the float64 arithmetic.
        one = self.case((1, 2, 1, 150, 8, 8), 16, 16, "--causal", causal=True, j=1)
        two = self.case((1, 2, 1, 150, 8, 8), 16, 16, "--causal", causal=True, j=2)
        for n in one:
            self.assertEqual(one[n].tobytes(), two[n].tobytes(), n)


if __name__ == "__main__":
    unittest.main()
