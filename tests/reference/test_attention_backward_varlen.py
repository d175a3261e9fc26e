"""`posenc attention --grad-output dO` in FlashAttention's varlen form (--cu-seqlens-q,
--cu-seqlens-k, with --seqused-q/--seqused-k): dq, dk, dv, softmax_d and lse of packed
Q [total_q, h, d], K and V [total_k, hk, d/dv] against torch float64 autograd of a varlen
attention written here: each sequence unpacked and computed on its own lengths, its masks
(causal in both alignments, windows) aligned to them (FlashAttention's
construct_local_mask, seq_masked in tests/lib/fa_attention_reference.py), rows past seqused and of
empty sequences with gradient 0 and lse -inf.

Tolerance: float64, the largest error of each tensor at most 1e-12 of its largest
magnitude; float32 (the default for float32 inputs), each value within half a float32
ulp of the float64 reference (rounded once; 1e-6 of an ulp of slack for the reference's
own float64 error), softmax_d and lse staying float64. Also: a sequence's rows are the bytes of a backward run on it alone;
-j 1 and -j 2 give the same bytes; what the varlen backward cannot do exits 2.
"""
import os
import unittest

import numpy as np
import torch

from fa_attention_reference import seq_masked
from posenc_testlib import PosencTestCase, run

REL = 1e-12
NAMES = ["dq", "dk", "dv", "softmax_d", "lse"]


def seq_attention(q, k, v, causal=None, window=(None, None)):
    """One sequence, q [sq, h, d], k, v [sk, hk, d] (torch float64): output [sq, h, dv]
    and lse [h, sq], query i at position i + sk - sq; rows without a key give 0."""
    sq, h, d = q.shape
    sk, hk = k.shape[0], k.shape[1]
    K = k.repeat_interleave(h // hk, dim=1)
    V = v.repeat_interleave(h // hk, dim=1)
    s = torch.einsum("thd,shd->hts", q / np.sqrt(d), K)
    m = seq_masked(sq, sk, causal, window)
    s = s.masked_fill(m, float("-inf"))
    mx = s.detach().amax(-1, keepdim=True) if sk else torch.zeros(h, sq, 1, dtype=s.dtype)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s - mx)
    z = e.sum(-1, keepdim=True)
    zs = torch.where(z > 0, z, torch.ones_like(z))
    o = torch.einsum("hts,shd->thd", e / zs, V)
    lse = torch.where(z > 0, torch.log(zs) + mx, torch.full_like(z, float("-inf")))[..., 0]
    return o, lse


def varlen_grads(q, k, v, do, cq, ck, uq, uk, **ref):
    """Torch float64 autograd of the packed varlen attention: dq, dk, dv, softmax_d, lse."""
    Q, K, V = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    dO = torch.tensor(do, dtype=torch.float64)
    h = q.shape[1]
    out = torch.zeros(q.shape[0], h, v.shape[2], dtype=torch.float64)
    lse = torch.full((h, q.shape[0]), float("-inf"), dtype=torch.float64)
    for b in range(len(cq) - 1):
        nq, nk = uq[b], uk[b]
        if nq == 0:
            continue
        o, l = seq_attention(Q[cq[b]:cq[b] + nq], K[ck[b]:ck[b] + nk], V[ck[b]:ck[b] + nk],
                             **ref)
        out = out.index_put((torch.arange(cq[b], cq[b] + nq),), o)
        lse[:, cq[b]:cq[b] + nq] = l.detach()
    dq, dk, dv = torch.autograd.grad(out, [Q, K, V], dO)
    D = (dO * out.detach()).sum(-1).T  # [h, total_q]
    return {"dq": dq.numpy(), "dk": dk.numpy(), "dv": dv.numpy(), "softmax_d": D.numpy(),
            "lse": lse.numpy()}


class VarlenBackward(PosencTestCase):
    LQ = [3, 0, 5, 4, 6]
    LK = [4, 3, 5, 0, 9]

    def packed(self, seed, h=4, hk=2, d=8, dv=6):
        r = np.random.default_rng(seed)
        cq = np.concatenate([[0], np.cumsum(self.LQ)]).astype(np.int32)
        ck = np.concatenate([[0], np.cumsum(self.LK)]).astype(np.int64)
        q = r.standard_normal((cq[-1], h, d))
        k = r.standard_normal((ck[-1], hk, d))
        v = r.standard_normal((ck[-1], hk, dv))
        do = r.standard_normal((cq[-1], h, dv))
        return q, k, v, do, cq, ck

    def grads(self, tag, q, k, v, do, *args, pre=()):
        paths = [self.npy(f"{tag}_{n}.npy", a) for n, a in
                 (("q", q), ("k", k), ("v", v), ("do", do))]
        out = self.path(f"{tag}_g_{{}}.npy")
        self.run_ok(*pre, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                    "--grad-output", paths[3], "-o", out, *args)
        got = {}
        for n in NAMES:
            with open(out.format(n), "rb") as f:
                got[n] = (np.load(out.format(n)), f.read())
        return got

    def varlen(self, tag, q, k, v, do, cq, ck, uq, uk, args, pre=()):
        lens = ["--cu-seqlens-q", self.npy(f"{tag}_cq.npy", cq),
                "--cu-seqlens-k", self.npy(f"{tag}_ck.npy", ck)]
        if uq is not None:
            lens += ["--seqused-q", self.npy(f"{tag}_uq.npy", np.array(uq, np.int64))]
        if uk is not None:
            lens += ["--seqused-k", self.npy(f"{tag}_uk.npy", np.array(uk, np.int32))]
        return self.grads(tag, q, k, v, do, *lens, *args, pre=pre)

    def check(self, label, args, uq=None, uk=None, dtype=np.float64, seed=0, **ref):
        q, k, v, do, cq, ck = self.packed(seed)
        n = len(cq) - 1
        used_q = uq if uq is not None else [int(cq[b + 1] - cq[b]) for b in range(n)]
        used_k = uk if uk is not None else [int(ck[b + 1] - ck[b]) for b in range(n)]
        q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
        want = varlen_grads(q, k, v, do, cq, ck, used_q, used_k, **ref)
        got = self.varlen(label, q, k, v, do, cq, ck, uq, uk, args, pre=("-j", "1"))
        for name, ref_t in want.items():
            g = got[name][0]
            self.assertEqual(g.shape, ref_t.shape, f"{label}: {name}")
            # softmax_d and lse stay float64 (as the backward of one run gives them).
            rounded = dtype != np.float64 and name not in ("softmax_d", "lse")
            self.assertEqual(g.dtype, np.float32 if rounded else np.float64, f"{label}: {name}")
            fin = np.isfinite(ref_t)
            np.testing.assert_array_equal(np.isfinite(g), fin, err_msg=f"{label}: {name}")
            err = np.abs(g[fin].astype(np.float64) - ref_t[fin])
            if not rounded:
                top = max(np.abs(ref_t[fin]).max(initial=0), 1e-300)
                self.assertLessEqual(err.max(initial=0), REL * top, f"{label}: {name}")
            else:  # rounded once: within half an ulp of the float64 value
                ulp = np.spacing(np.abs(ref_t[fin]).astype(np.float32)).astype(np.float64)
                bad = err > 0.5 * ulp * (1 + 1e-6) + 1e-300
                self.assertFalse(bad.any(), f"{label}: {name}: {err[bad][:3]} {ulp[bad][:3]}")
        # Rows of unused and empty sequences: exactly 0 (lse -inf).
        for b in range(n):
            self.assertTrue(not got["dq"][0][cq[b] + used_q[b]:cq[b + 1]].any(), label)
            self.assertTrue(not got["dk"][0][ck[b] + used_k[b]:ck[b + 1]].any(), label)
            if used_q[b] == 0:
                self.assertTrue(not got["dk"][0][ck[b]:ck[b + 1]].any(), label)
        # -j 2: the same bytes.
        two = self.varlen(label + "_j2", q, k, v, do, cq, ck, uq, uk, args, pre=("-j", "2"))
        for name in NAMES:
            self.assertEqual(got[name][1], two[name][1], f"{label}: {name} -j 2")
        # Each sequence's rows: the bytes of a backward run on it alone.
        for b in range(n):
            nq, nk = used_q[b], used_k[b]
            if nq == 0 or nk == 0:
                continue
            sl = lambda x, c, m: x[c[b]:c[b] + m]
            one = self.grads(f"{label}_b{b}", sl(q, cq, nq), sl(k, ck, nk), sl(v, ck, nk),
                             sl(do, cq, nq), "--axes", "shd", *args)
            for name, c, m in (("dq", cq, nq), ("dk", ck, nk), ("dv", ck, nk)):
                np.testing.assert_array_equal(got[name][0][c[b]:c[b] + m], one[name][0],
                                              err_msg=f"{label}: {name} of sequence {b}")
            for name in ("softmax_d", "lse"):
                np.testing.assert_array_equal(got[name][0][:, cq[b]:cq[b] + nq], one[name][0],
                                              err_msg=f"{label}: {name} of sequence {b}")

    def test_plain_gqa_empty(self):
        self.check("plain", [])

    def test_causal_both_alignments(self):
        self.check("causal", ["--causal"], causal=True, seed=1)
        self.check("topleft", ["--causal", "top-left"], causal="top-left", seed=2)

    def test_window(self):
        self.check("window", ["--window", "2,1"], window=(2, 1), seed=3)

    def test_seqused(self):
        self.check("seqused", ["--causal"], uq=[2, 0, 5, 3, 4], uk=[3, 2, 5, 0, 7],
                   causal=True, seed=4)
        self.check("seqused_k", ["--window", "3,0"], uk=[4, 1, 2, 0, 6], window=(3, 0),
                   seed=5)

    def test_float32_rounded_once(self):
        self.check("f32", ["--causal"], causal=True, dtype=np.float32, seed=6)

    def test_refused(self):
        q, k, v, do, cq, ck = self.packed(7)
        files = [self.npy(f"r_{n}.npy", a) for n, a in
                 (("q", q), ("k", k), ("v", v), ("do", do), ("cq", cq), ("ck", ck))]
        base = ["attention", "-q", files[0], "-k", files[1], "-v", files[2], "--grad-output",
                files[3], "--cu-seqlens-q", files[4], "--cu-seqlens-k", files[5]]
        out = self.path("r_{}.npy")
        for extra, word in ((["--mask", self.npy("m.npy", np.ones((4, 9), bool))], "mask"),
                            (["--rope"], "rope")):
            r = run(*base, "-o", out, *extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(word, r.stderr)
            self.assertFalse(os.path.exists(out.format("dq")))


if __name__ == "__main__":
    unittest.main()
