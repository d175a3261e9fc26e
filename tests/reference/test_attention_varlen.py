"""posenc attention's FlashAttention varlen form (--cu-seqlens-q/--cu-seqlens-k, with
--seqused-q/--seqused-k) against a torch float64 reference written from FA's semantics
(flash_attn_varlen_func; hopper/test_flash_attn.py test_flash_attn_varlen_output unpads
each sequence and judges it with attention_ref): each sequence unpacked and computed on
its own lengths, its masks (causal in both alignments, windows, chunks floored at p = i
+ sk_b - sq_b, sink tokens) and ALiBi aligned to them (construct_local_mask and
construct_chunk_mask of tests/lib/fa_attention_reference.py).

Tolerance: float64 max error <= 1e-12 relative to the largest reference value; rows with
no key (empty sequences, rows past seqused_q, empty windows) exact zeros with lse -inf.
Also: a sequence's rows are the bytes of a run on it alone; -j 1 and -j 2 and a small
--max-memory give the same bytes; bad boundaries exit 3 and write nothing.
"""
import io
import os
import unittest

import numpy as np

from fa_attention_reference import attention_ref, seq_ref, varlen_ref
from posenc_testlib import PosencTestCase


class Varlen(PosencTestCase):
    LQ = [5, 0, 7, 3, 4, 2]
    LK = [6, 3, 0, 3, 9, 11]

    def packed(self, h=4, hk=2, d=8, dv=6, seed=0):
        rng = np.random.default_rng(seed)
        cq = np.concatenate([[0], np.cumsum(self.LQ)]).astype(np.int32)
        ck = np.concatenate([[0], np.cumsum(self.LK)]).astype(np.int64)
        q = rng.standard_normal((cq[-1], h, d))
        k = rng.standard_normal((ck[-1], hk, d))
        v = rng.standard_normal((ck[-1], hk, dv))
        return q, k, v, cq, ck

    def posenc(self, q, k, v, cq, ck, *extra, tag="r", pre=()):
        files = [self.npy(f"{tag}_{n}.npy", x) for n, x in
                 (("q", q), ("k", k), ("v", v), ("cq", cq), ("ck", ck))]
        out = self.path(f"{tag}_{{}}.npy")
        self.run_ok(*pre, "attention", "-q", files[0], "-k", files[1], "-v", files[2],
                    "--cu-seqlens-q", files[3], "--cu-seqlens-k", files[4], "--emit",
                    "output,lse", "-o", out, *extra)
        got = []
        for name in ("output", "lse"):
            with open(out.format(name), "rb") as f:
                got.append((np.load(out.format(name)), f.read()))
        return got

    def check(self, extra, label, uq=None, uk=None, alone=True, **ref):
        q, k, v, cq, ck = self.packed(seed=len(label))
        lens = []
        if uq is not None:
            lens += ["--seqused-q", self.npy("uq.npy", np.array(uq, np.int64))]
        if uk is not None:
            lens += ["--seqused-k", self.npy("uk.npy", np.array(uk, np.int32))]
        want_out, want_lse = varlen_ref(q, k, v, cq, ck, uq, uk, **ref)
        (out, out_b), (lse, lse_b) = self.posenc(q, k, v, cq, ck, *extra, *lens)
        self.assertEqual(out.shape, want_out.shape, label)
        self.assertEqual(lse.shape, want_lse.shape, label)  # FA's varlen [h, total_q]
        self.assertLessEqual(np.abs(out - want_out).max() / np.abs(want_out).max(), 1e-12, label)
        empty = np.isneginf(want_lse)
        np.testing.assert_array_equal(np.isneginf(lse), empty, label)
        self.assertLessEqual(np.abs(lse[~empty] - want_lse[~empty]).max() /
                             np.abs(want_lse[~empty]).max(), 1e-12, label)
        self.assertTrue((out[empty.T] == 0).all(), label)
        for jobs in ("1", "2"):
            got = self.posenc(q, k, v, cq, ck, *extra, *lens, tag=f"j{jobs}", pre=("-j", jobs))
            self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label} -j {jobs}")
        got = self.posenc(q, k, v, cq, ck, *extra, *lens, "--max-memory", "2M", tag="m")
        self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label} --max-memory")
        if not alone:
            return
        # Each sequence: the bytes of a run on its own used rows.
        for b in range(len(cq) - 1):
            nq = cq[b + 1] - cq[b] if uq is None else uq[b]
            nk = ck[b + 1] - ck[b] if uk is None else uk[b]
            if nq == 0:
                continue
            qp = self.npy(f"a{b}_q.npy", q[cq[b]:cq[b] + nq])
            kp = self.npy(f"a{b}_k.npy", k[ck[b]:ck[b] + nk])
            vp = self.npy(f"a{b}_v.npy", v[ck[b]:ck[b] + nk])
            alone = [str(min(int(x), nk)) if i and extra[i - 1] == "--sink-tokens" else x
                     for i, x in enumerate(extra)]
            o1, l1 = self.output_lse_bytes(qp, kp, vp, f"a{b}", "--axes", "shd", *alone)
            self.assertEqual(np.ascontiguousarray(out[cq[b]:cq[b] + nq]).tobytes(),
                             np.load(io.BytesIO(o1)).tobytes(), f"{label} sequence {b}")
            self.assertEqual(np.ascontiguousarray(lse[:, cq[b]:cq[b] + nq]).tobytes(),
                             np.load(io.BytesIO(l1)).tobytes(), f"{label} sequence {b}")

    def test_masks_align_to_each_sequence(self):
        self.check([], "none")
        self.check(["--causal"], "causal", causal=True)
        self.check(["--causal", "top-left"], "causal top-left", causal="top-left")
        self.check(["--window", "2,1"], "window", window=(2, 1))
        self.check(["--chunk-size", "3"], "chunk", chunk=3)
        self.check(["--causal", "--window", "2,0", "--sink-tokens", "1"], "sink",
                   causal=True, window=(2, None), sink=1)
        self.check(["--alibi", "bottom-right"], "alibi", alibi=True)

    def test_seqused(self):
        uq, uk = [3, 0, 7, 3, 0, 1], [6, 1, 0, 2, 9, 0]
        self.check(["--causal"], "seqused causal", uq=uq, uk=uk, causal=True)
        self.check(["--chunk-size", "2", "--window", "1,-1"], "seqused chunk", uq=uq, uk=uk,
                   chunk=2, window=(1, None))
        self.check([], "seqused_q alone", uq=uq, alone=False)

    def test_qv_and_descales(self):
        # FA-3's qv packed as q ([total_q, h, dv]) and fp8 descales [n, hk], one row per
        # sequence: qv against the reference, descales as one run per sequence.
        q, k, v, cq, ck = self.packed(seed=11)
        qv = np.random.default_rng(12).standard_normal(q.shape[:2] + (v.shape[2],))
        want_out, _ = varlen_ref(q, k, v, cq, ck, causal=True, qv=qv)
        (out, _), _ = self.posenc(q, k, v, cq, ck, "--causal", "--qv", self.npy("qv.npy", qv))
        self.assertLessEqual(np.abs(out - want_out).max() / np.abs(want_out).max(), 1e-12)
        n = len(cq) - 1
        ds = np.random.default_rng(13).uniform(0.5, 2, (3, n, k.shape[1])).astype(np.float32)
        names = ("--q-descale", "--k-descale", "--v-descale")
        args = [x for i, name in enumerate(names) for x in (name, self.npy(f"d{i}.npy", ds[i]))]
        (out, _), (lse, _) = self.posenc(q, k, v, cq, ck, "--causal", *args, tag="ds")
        for b in range(n):
            if cq[b + 1] == cq[b]:
                continue
            one = [x for i, name in enumerate(names)
                   for x in (name, self.npy(f"d{i}_{b}.npy", ds[i, b:b + 1]))]
            o1, l1 = self.output_lse_bytes(
                self.npy(f"b{b}_q.npy", q[cq[b]:cq[b + 1]]), self.npy(f"b{b}_k.npy", k[ck[b]:ck[b + 1]]),
                self.npy(f"b{b}_v.npy", v[ck[b]:ck[b + 1]]), f"b{b}", "--axes", "shd", "--causal", *one)
            self.assertEqual(out[cq[b]:cq[b + 1]].tobytes(), np.load(io.BytesIO(o1)).tobytes())
            self.assertEqual(np.ascontiguousarray(lse[:, cq[b]:cq[b + 1]]).tobytes(),
                             np.load(io.BytesIO(l1)).tobytes())
        self.assertFalse(np.array_equal(out, self.posenc(q, k, v, cq, ck, "--causal", tag="nd")[0][0]))

    def test_fa_baseline_per_sequence(self):
        # --arith fa-baseline (FA's PyTorch baseline) per sequence: the bytes of a run on
        # each sequence alone, in f16 and in f64 (whose lse is f32 under the baseline).
        for dtype in (np.float16, np.float64):
            q, k, v, cq, ck = (x.astype(dtype) if x.dtype.kind == "f" else x
                               for x in self.packed(seed=17))
            (out, _), (lse, _) = self.posenc(q, k, v, cq, ck, "--causal", "--arith",
                                             "fa-baseline", tag=f"fb{dtype.__name__}")
            for b in range(len(cq) - 1):
                if cq[b + 1] == cq[b]:
                    continue
                o1, l1 = self.output_lse_bytes(
                    self.npy(f"f{b}_q.npy", q[cq[b]:cq[b + 1]]),
                    self.npy(f"f{b}_k.npy", k[ck[b]:ck[b + 1]]),
                    self.npy(f"f{b}_v.npy", v[ck[b]:ck[b + 1]]), f"f{b}", "--axes", "shd",
                    "--causal", "--arith", "fa-baseline")
                self.assertEqual(out[cq[b]:cq[b + 1]].tobytes(), np.load(io.BytesIO(o1)).tobytes())
                self.assertEqual(np.ascontiguousarray(lse[:, cq[b]:cq[b + 1]]).tobytes(),
                                 np.load(io.BytesIO(l1)).tobytes())

    def test_fa_reference_on_one_sequence(self):
        # The per-sequence reference agrees with FA's own attention_ref (bshd, b = 1).
        rng = np.random.default_rng(7)
        q, k, v = rng.standard_normal((9, 4, 8)), rng.standard_normal((5, 2, 8)), \
            rng.standard_normal((5, 2, 8))
        for ref in (dict(causal=True), dict(chunk=2), dict(window=(1, 2))):
            a_out, a_lse = seq_ref(q, k, v, **ref)
            b_out, b_lse = attention_ref(q[None], k[None], v[None], **ref)
            np.testing.assert_allclose(a_out, b_out[0], rtol=0, atol=1e-14)
            np.testing.assert_array_equal(np.isneginf(a_lse), np.isneginf(b_lse[0]))

    def test_bad_input(self):
        q, k, v, cq, ck = self.packed()
        args = ["attention", "-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                self.npy("v.npy", v), "-o", self.path("o_{}.npy")]
        cqp, ckp = self.npy("cq.npy", cq), self.npy("ck.npy", ck)
        both = ["--cu-seqlens-q", cqp, "--cu-seqlens-k", ckp]
        bad = lambda name, a: ["--cu-seqlens-q", self.npy(name, np.array(a)),
                               "--cu-seqlens-k", ckp]
        n = len(self.LQ)
        cases = [
            (3, bad("b1.npy", [1, 5, 5, 12, 15, 19, 21]), r"--cu-seqlens-q: must start at 0"),
            (3, bad("b2.npy", [0, 5, 4, 12, 15, 19, 21]), r"--cu-seqlens-q: .*not decrease"),
            (3, bad("b3.npy", [0, 5, 5, 12, 15, 19, 20]), r"--cu-seqlens-q: ends at 20"),
            (3, bad("b4.npy", [0, 5, 21]), r"--cu-seqlens-k: 6 sequences, --cu-seqlens-q has 2"),
            (3, bad("b5.npy", np.array(cq, np.float64)), r"--cu-seqlens-q: expected int32"),
            (3, [*both, "--seqused-q", self.npy("u1.npy", np.array([6] + [0] * (n - 1)))],
             r"--seqused-q: length 6 of sequence 0 is outside \[0, 5\]"),
            (3, [*both, "--seqused-k", self.npy("u2.npy", np.zeros(n - 1, np.int64))],
             r"--seqused-k: expected 6 integers"),
            (3, [*both, "--q-descale", self.npy("qd.npy", np.ones((1, 2), np.float32))],
             r"--q-descale: expected one row per sequence, \[6, hk\]"),
            (3, [*both, "--qv", self.npy("qv.npy", np.ones((20, 4, 6)))],
             r"--qv: expected packed rows as q"),
            (2, ["--cu-seqlens-q", cqp], r"--cu-seqlens-q: needs --cu-seqlens-k"),
            (2, [*both, "--mask", self.npy("m.npy", np.ones((21, 22), bool))],
             r"--cu-seqlens-q: not with mask"),
            (2, [*both, "--key-lengths", self.npy("kl.npy", np.array([1]))],
             r"--cu-seqlens-q: not with --key-lengths"),
            (2, [*both, "--cu-seqlens", cqp], r"--cu-seqlens-q: not with --cu-seqlens"),
            (2, [*both, "--arith", "hf"], r"--cu-seqlens-q: not with arith hf"),
            (2, [*both, "--rope"], r"--cu-seqlens-q: not with rope"),
            (2, [*both, "--axes", "bsd"], r"--axes bsd: --cu-seqlens-q packs"),
            (2, [*both, "--part", "0/2"], r"--part: not with --cu-seqlens-q"),
            (2, [*both, "--emit", "probs"], r"--emit: probs not with"),
        ]
        self.assert_each_fails(args, cases, sorted(os.listdir(self.tmp)))


if __name__ == "__main__":
    unittest.main()
