"""`posenc attention --qv QV --grad-output dO`: dq, dk, dv and dqv with FlashAttention-3's
qv term, against torch float64 autograd of an eager attention written here (not
posenc's forward).

Claim (posenc-attention(1), GRADIENTS): with qv the scores are scale (q.k + qv.v), scale
1/sqrt(d + dv) by default (attention_ref in FlashAttention's hopper/test_util.py, V
repeated over the group as K is); dqv is the gradient with respect to qv and dv gains
the qv term's part (dS^T qv scale) besides P^T dO, each rounded once; GQA, causal (both
alignments), soft-cap, sinks, bshd, --rope (dq with respect to the unrotated Q); the
same bytes at -j1 and -j2. Tolerance: each gradient's largest error at most 1e-12 of
its largest magnitude.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase, run
from test_attention_backward_rope import rotate

REL = 1e-12


def eager_qv(q, k, v, qv, scale, causal=None, softcap=0.0, sinks=None):
    """FlashAttention's attention_ref with qv, in float64 torch (bhsd)."""
    hq, hk = q.shape[1], k.shape[1]
    K = k.repeat_interleave(hq // hk, 1)
    V = v.repeat_interleave(hq // hk, 1)
    s = (q * scale) @ K.transpose(-1, -2) + (qv * scale) @ V.transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    if causal:
        shift = sk - sq if causal == "bottom-right" else 0
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + shift
        s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        col = sinks[None, :, None, None].expand(*s.shape[:-1], 1)
        return torch.softmax(torch.cat([s, col], -1), -1)[..., :sk] @ V
    return torch.softmax(s, -1) @ V


def arrays(b, hq, hk, sq, sk, d, dv, seed=3):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s) for s in ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, dv),
                                           (b, hq, sq, dv), (b, hq, sq, dv))]


class AttentionBackwardQv(PosencTestCase):
    def grads(self, q, k, v, qv, do, *args, emit="dq,dk,dv,dqv", j=None, axes=None):
        names = ("q", "k", "v", "qv", "do")
        if axes == "bshd":
            q, k, v, qv, do = (a.transpose(0, 2, 1, 3) for a in (q, k, v, qv, do))
        p = [self.npy(n + ".npy", a) for n, a in zip(names, (q, k, v, qv, do))]
        out = self.path("g_{}.npy")
        pre = ["-j", str(j)] if j else []
        extra = ["--axes", axes] if axes else []
        self.run_ok(*pre, "attention", "-q", p[0], "-k", p[1], "-v", p[2], "--qv", p[3],
                    "--grad-output", p[4], "-o", out, "--emit", emit, *extra, *args)
        got = {n: np.load(out.format(n)) for n in emit.split(",")}
        if axes == "bshd":
            got = {n: (g.transpose(0, 2, 1, 3) if g.ndim == 4 else g) for n, g in got.items()}
        return got

    def check(self, got, want):
        for name, ref in want.items():
            ref = ref.detach().numpy()
            self.assertEqual(got[name].shape, ref.shape, name)
            err = np.abs(got[name] - ref).max()
            top = np.abs(ref).max()
            self.assertLessEqual(err, REL * top, f"{name}: {err / top:.3g} relative")

    def case(self, shape, *args, causal=None, softcap=0.0, sinks=None, scale=None, axes=None,
             rope=False):
        b, hq, hk, sq, sk, d, dv = shape
        q, k, v, qv, do = arrays(*shape)
        extra = list(args)
        if sinks is not None:
            extra += ["--sinks", self.npy("sinks.npy", np.asarray(sinks))]
        got = self.grads(q, k, v, qv, do, *extra,
                         emit="dq,dk,dv,dqv" + (",dsinks" if sinks is not None else ""),
                         axes=axes)
        Q, K, V, QV = (torch.tensor(a, requires_grad=True) for a in (q, k, v, qv))
        S = None if sinks is None else torch.tensor(sinks, dtype=torch.float64,
                                                    requires_grad=True)
        Qa, Ka = Q, K
        if rope:  # neox over all of d, keys at j, queries at sk - sq + i
            Qa = rotate(Q, np.arange(sk - sq, sk), d, "neox")
            Ka = rotate(K, np.arange(sk), d, "neox")
        o = eager_qv(Qa, Ka, V, QV, scale or 1 / (d + dv) ** 0.5, causal, softcap, S)
        inputs = (Q, K, V, QV) + ((S,) if S is not None else ())
        want = dict(zip(("dq", "dk", "dv", "dqv", "dsinks"),
                        torch.autograd.grad(o, inputs, torch.tensor(do))))
        self.check(got, want)
        return got

    def test_mha(self):
        self.case((2, 2, 2, 5, 7, 8, 4))

    def test_gqa_causal_both_alignments(self):
        self.case((1, 4, 2, 6, 9, 8, 5), "--causal", causal="bottom-right")
        self.case((1, 4, 2, 6, 9, 8, 5), "--causal", "top-left",
                  causal="top-left")

    def test_mqa_softcap_sinks_scale(self):
        self.case((2, 3, 1, 4, 6, 6, 6), "--softcap", "2.0", "--scale", "0.3", softcap=2.0,
                  scale=0.3, sinks=[0.2, -1.0, 0.5])

    def test_bshd_and_several_tiles(self):
        # sq, sk > 128: the f64 tiles are 128 x 128, so several tiles add up.
        self.case((1, 2, 1, 150, 260, 16, 8), "--causal", causal="bottom-right", axes="bshd")

    def test_rope(self):
        self.case((1, 2, 2, 5, 8, 8, 4), "--rope", "--causal", causal="bottom-right",
                  rope=True)

    def test_default_emit_has_dqv_and_threads_agree(self):
        q, k, v, qv, do = arrays(1, 4, 2, 140, 200, 8, 4)
        emit = "dq,dk,dv,softmax_d,lse,dqv"
        one = self.grads(q, k, v, qv, do, "--causal", emit=emit, j=1)
        two = self.grads(q, k, v, qv, do, "--causal", emit=emit, j=2)
        for n in one:
            self.assertEqual(one[n].tobytes(), two[n].tobytes(), n)
        p = [self.npy(n + ".npy", a) for n, a in zip(("q", "k", "v", "qv", "do"),
                                                      (q, k, v, qv, do))]
        out = self.path("d_{}.npy")
        self.run_ok("attention", "-q", p[0], "-k", p[1], "-v", p[2], "--qv", p[3],
                    "--grad-output", p[4], "--causal", "-o", out)
        for n in emit.split(","):
            self.assertEqual(np.load(out.format(n)).tobytes(), one[n].tobytes(), n)

    def test_float32_rounded_once(self):
        q, k, v, qv, do = (a.astype(np.float32) for a in arrays(1, 2, 1, 5, 6, 8, 4))
        got = self.grads(q, k, v, qv, do, "--causal")
        # softmax_d and lse stay float64 with qv, as without it, for any output type.
        for extra in ([], ["--qv"]):
            names = [self.npy(n + ".npy", a) for n, a in zip(("q", "k", "v", "qv", "do"),
                                                              (q, k, v, qv, do))]
            out = self.path("t_{}.npy")
            self.run_ok("attention", "-q", names[0], "-k", names[1], "-v", names[2],
                        "--grad-output", names[4], "--emit", "dq,softmax_d,lse", "-o", out,
                        *(["--qv", names[3]] if extra else []))
            self.assertEqual(np.load(out.format("dq")).dtype, np.float32, extra)
            for n in ("softmax_d", "lse"):
                self.assertEqual(np.load(out.format(n)).dtype, np.float64, (extra, n))
        Q, K, V, QV = (torch.tensor(a, dtype=torch.float64, requires_grad=True)
                       for a in (q, k, v, qv))
        o = eager_qv(Q, K, V, QV, 1 / 12 ** 0.5, "bottom-right")
        want = torch.autograd.grad(o, (Q, K, V, QV), torch.tensor(do, dtype=torch.float64))
        for n, w in zip(("dq", "dk", "dv", "dqv"), want):
            self.assertEqual(got[n].dtype, np.float32, n)
            np.testing.assert_array_equal(got[n], w.numpy().astype(np.float32), err_msg=n)

    def test_refused(self):
        q, k, v, qv, do = arrays(1, 2, 2, 3, 4, 8, 4)
        p = {n: self.npy(n + ".npy", a) for n, a in zip(("q", "k", "v", "qv", "do"),
                                                        (q, k, v, qv, do))}
        p["bad"] = self.npy("bad.npy", qv[:, :, :, :3])
        p["ds"] = self.npy("ds.npy", np.ones((1, 2)))
        out = self.path("r_{}.npy")
        base = ["attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "--grad-output", p["do"],
                "-o", out]
        for extra, status, what in (
                (["--emit", "dq,dqv"], 2, "--emit dqv: needs --qv"),
                (["--qv", p["qv"], "--q-descale", p["ds"]], 2, "--q-descale"),
                (["--qv", p["qv"], "--p-dtype", "bf16"], 2, "--p-dtype"),
                (["--qv", p["bad"]], 3, "qv: shape")):
            r = run(*base, *extra)
            self.assertEqual(r.returncode, status, (extra, r.stderr))
            self.assertIn(what, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertFalse([f for f in os.listdir(self.tmp) if f.startswith("r_")])


if __name__ == "__main__":
    unittest.main()
