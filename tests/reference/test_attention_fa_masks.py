"""posenc attention's masks against FlashAttention's test reference (attention_ref,
construct_local_mask, construct_chunk_mask of hopper/test_util.py), rewritten in torch
float64 in tests/lib/fa_attention_reference.py from FA's public semantics.

Tolerance: float64 max error <= 1e-12 relative to the largest reference value; rows FA
defines as empty (no visible key, padded queries) must be exact zeros with lse -inf.
Each case also runs with -j 1 and -j 2, and streamed (K and V read in chunks under a
small --max-memory, with small key blocks), all the same bytes.
"""
import os
import unittest

import numpy as np

from fa_attention_reference import attention_ref
from posenc_testlib import PosencTestCase, run


class FaMasks(PosencTestCase):
    def data(self, b, sq, sk, h=2, hk=1, d=8, dv=8, seed=0):
        rng = np.random.default_rng(seed)
        q = rng.standard_normal((b, sq, h, d))
        k = rng.standard_normal((b, sk, hk, d))
        v = rng.standard_normal((b, sk, hk, dv))
        return q, k, v

    def posenc(self, q, k, v, *extra, tag="r", jobs=None, streamed=False):
        """output [b, sq, h, dv] and lse [b, h, sq] of posenc attention in bshd, and their
        bytes."""
        qp, kp, vp = (self.npy(f"{tag}_{n}.npy", x) for n, x in (("q", q), ("k", k), ("v", v)))
        out = self.path(f"{tag}_{{}}.npy")
        pre = ["-j", str(jobs)] if jobs else []
        more = ["--max-memory", "800K"] if streamed else []
        self.run_ok(*pre, "attention", "-q", qp, "-k", kp, "-v", vp, "--axes", "bshd",
                    "--emit", "output,lse", "-o", out, *extra, *more)
        got = []
        for name in ("output", "lse"):
            with open(out.format(name), "rb") as f:
                raw = f.read()
            got.append((np.load(out.format(name)), raw))
        return got

    def check(self, q, k, v, extra, label, **ref):
        want_out, want_lse = attention_ref(q, k, v, **ref)
        (out, out_b), (lse, lse_b) = self.posenc(q, k, v, *extra)
        scale = max(np.abs(want_out).max(), 1.0)
        self.assertLessEqual(np.abs(out - want_out).max() / scale, 1e-12, label)
        empty = np.isneginf(want_lse)
        np.testing.assert_array_equal(np.isneginf(lse), empty, label)
        self.assertLessEqual(np.abs(lse[~empty] - want_lse[~empty]).max(initial=0) /
                             max(np.abs(want_lse[~empty]).max(initial=1), 1), 1e-12, label)
        # Rows FA defines as empty: exact zeros.
        rows = np.transpose(empty, (0, 2, 1))  # [b, sq, h]
        self.assertTrue((out[rows] == 0).all(), label)
        for jobs in (1, 2):
            got = self.posenc(q, k, v, *extra, tag=f"j{jobs}", jobs=jobs)
            self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label}: -j {jobs}")
        got = self.posenc(q, k, v, *extra, tag="s", streamed=True)
        self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label}: streamed")
        return out, lse

    def test_chunk_floors_negative_positions(self):
        # 8 queries over 3 keys, chunks of 2, bottom-right: query 4 sits at position -1,
        # in chunk [-2, -1] (floor), and sees no key; truncation put it in chunk 0.
        q, k, v = self.data(1, 8, 3)
        out, lse = self.check(q, k, v, ["--chunk-size", "2"], "chunk 2", chunk=2)
        self.assertTrue((out[0, 4] == 0).all())
        self.assertTrue(np.isneginf(lse[0, :, 4]).all())
        self.assertTrue((out[0, 5] != 0).all())

    def test_streamed_across_key_blocks(self):
        # 2,600 keys: three key blocks of 1,024, read in chunks at 800K.
        q, k, v = self.data(1, 40, 2600, d=4, dv=4, seed=5)
        self.check(q, k, v, ["--chunk-size", "700", "--window", "900,3"], "long",
                   chunk=700, window=(900, 3))

    def test_chunk_grid(self):
        # FA's grid: more queries than keys and fewer, chunks with windows and causal.
        for sq, sk, chunk, extra, ref in [
            (799 % 40 + 13, 3, 5, [], {}),
            (37, 11, 4, ["--causal"], dict(causal=True)),
            (9, 30, 7, ["--window", "5,2"], dict(window=(5, 2))),
            (30, 9, 3, ["--window", "4,-1"], dict(window=(4, None))),
            (16, 16, 5, ["--causal", "--window", "3,0"], dict(causal=True, window=(3, None))),
        ]:
            q, k, v = self.data(2, sq, sk, seed=sq + sk)
            self.check(q, k, v, ["--chunk-size", str(chunk), *extra],
                       f"sq {sq} sk {sk} chunk {chunk} {extra}", chunk=chunk, **ref)

    def test_no_keys(self):
        # K and V with no keys: every row empty (output 0, lse -inf), in memory, streamed,
        # at any -j, under --arith hf, with logits and probs of 0 columns.
        q, k, v = self.data(2, 5, 0)
        self.check(q, k, v, [], "sk 0")
        self.check(q, k, v, ["--causal", "--chunk-size", "2"], "sk 0 chunk", causal=True,
                   chunk=2)
        qp, kp, vp = (self.npy(f"e_{n}.npy", x) for n, x in (("q", q), ("k", k), ("v", v)))
        out = self.path("e_{}.npy")
        self.run_ok("attention", "-q", qp, "-k", kp, "-v", vp, "--axes", "bshd", "--emit",
                    "logits,probs,output", "-o", out)
        self.assertEqual(np.load(out.format("probs")).shape, (2, 2, 5, 0))
        self.assertTrue((np.load(out.format("output")) == 0).all())
        self.run_ok("attention", "-q", qp, "-k", kp, "-v", vp, "--axes", "bshd", "--emit",
                    "output", "--arith", "hf", "-o", out)
        self.assertTrue((np.load(out.format("output")) == 0).all())

    def test_empty_entries(self):
        # A batch entry with no keys (--key-lengths 0) and an empty packed sequence.
        q, k, v = self.data(2, 6, 6, seed=3)
        lens = self.npy("lens.npy", np.array([4, 0], dtype=np.int64))
        self.check(q, k, v, ["--key-lengths", lens], "key lengths 4, 0",
                   seqused_k=[4, 0], seqused_q=[6, 6])
        q, k, v = self.data(1, 9, 9, seed=4)
        cu = [0, 3, 3, 9, 9]
        want = np.zeros((1, 9, 2, 8))
        want_lse = np.full((1, 2, 9), -np.inf)
        for a, e in zip(cu[:-1], cu[1:]):
            if e > a:
                o, l = attention_ref(q[:, a:e], k[:, a:e], v[:, a:e], causal=True)
                want[:, a:e], want_lse[:, :, a:e] = o, l
        (out, _), (lse, _) = self.posenc(q, k, v, "--causal", "--cu-seqlens",
                                         self.npy("cu.npy", np.array(cu, dtype=np.int64)))
        self.assertLessEqual(np.abs(out - want).max(), 1e-12)
        self.assertLessEqual(np.abs(lse - want_lse)[np.isfinite(want_lse)].max(), 1e-12)

    def test_logits_of_rows_without_keys(self):
        # An entry with no key (f32 K and V widened as read, or used in place): its logits
        # are all -inf and its probs 0, as those of any masked score.
        rng = np.random.default_rng(2)
        q, k = (rng.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(2))
        args = ["-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                self.npy("v.npy", k), "--key-lengths",
                self.npy("kl.npy", np.array([0, 5], dtype=np.int64))]
        for dtype in (np.float32, np.float64):
            for n in ("q", "k", "v"):
                self.npy(f"{n}.npy", np.load(self.path(f"{n}.npy")).astype(dtype))
            out = self.path("l_{}.npy")
            self.run_ok("attention", *args, "--emit", "logits,probs,output", "-o", out)
            logits, probs = np.load(out.format("logits")), np.load(out.format("probs"))
            self.assertTrue(np.isneginf(logits[0]).all(), dtype)
            self.assertTrue((probs[0] == 0).all(), dtype)
            self.assertTrue(np.isfinite(logits[1, :, :, 0]).all(), dtype)

    def test_sink_tokens(self):
        # FA's construct_local_mask: j < sink_token_length joins the window's left side;
        # its right side, causal, chunks (ORed after) and padding still apply.
        for sq, sk, n, extra, ref in [
            (12, 12, 2, ["--causal", "--window", "3,0"], dict(causal=True, window=(3, None))),
            (6, 20, 3, ["--window", "4,1"], dict(window=(4, 1))),
            (20, 6, 1, ["--causal", "--window", "1,-1"], dict(causal=True, window=(1, None))),
            (16, 16, 4, ["--window", "2,2", "--chunk-size", "6"], dict(window=(2, 2), chunk=6)),
            (9, 9, 3, ["--causal", "--window", "2,0", "--chunk-size", "4"],
             dict(causal=True, window=(2, None), chunk=4)),
            (10, 14, 5, ["--causal"], dict(causal=True)),
            (10, 14, 14, ["--window", "0,0"], dict(window=(0, 0))),
        ]:
            q, k, v = self.data(2, sq, sk, seed=sq * sk + n)
            self.check(q, k, v, ["--sink-tokens", str(n), *extra],
                       f"sq {sq} sk {sk} sinks {n} {extra}", sink_token_length=n, **ref)
        # HF's sliding window is the window W-1 (causal): the same sink tokens.
        q, k, v = self.data(1, 15, 15, seed=9)
        self.check(q, k, v, ["--sink-tokens", "2", "--sliding-window", "4", "--causal"],
                   "sliding window 4", sink_token_length=2, causal=True, window=(3, None))

    def test_sink_tokens_streamed_and_packed(self):
        q, k, v = self.data(1, 30, 2600, d=4, dv=4, seed=6)
        self.check(q, k, v, ["--sink-tokens", "5", "--causal", "--window", "1500,0"],
                   "long", sink_token_length=5, causal=True, window=(1500, None))
        # Packed sequences: the first N keys of each sequence.
        q, k, v = self.data(1, 14, 14, seed=12)
        cu = [0, 6, 6, 14]
        want = np.zeros((1, 14, 2, 8))
        for a, e in zip(cu[:-1], cu[1:]):
            if e > a:
                want[:, a:e] = attention_ref(q[:, a:e], k[:, a:e], v[:, a:e], causal=True,
                                             window=(1, None), sink_token_length=2)[0]
        (out, _), _ = self.posenc(q, k, v, "--causal", "--window", "1,0", "--sink-tokens", "2",
                                  "--cu-seqlens",
                                  self.npy("cu.npy", np.array(cu, dtype=np.int64)))
        self.assertLessEqual(np.abs(out - want).max(), 1e-12)

    def test_sink_tokens_errors(self):
        q, k, v = self.data(1, 4, 3)
        args = ["attention", "-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                self.npy("v.npy", v), "--axes", "bshd", "-o", self.path("o_{}.npy")]
        before = sorted(os.listdir(self.tmp))
        self.assert_each_fails(args, [
            (3, ["--sink-tokens", "4", "--window", "1,0"], r"--sink-tokens 4: .*3 keys"),
            (2, ["--sink-tokens", "-1"], r"--sink-tokens -1: must be >= 0"),
            (2, ["--sink-tokens", "99999999999999999999"], r"--sink-tokens"),
        ], before)

    def test_seqused_aligns_each_entry(self):
        # FA's padding masks: each entry aligned to its own sk_b - sq_b; padded query rows
        # output 0 (lse -inf); against the reference, and against one run per entry (the
        # same bytes).
        b, sq, sk = 4, 11, 9
        used_q, used_k = [11, 3, 7, 0], [9, 2, 9, 5]
        cases = [
            (["--causal"], dict(causal=True)),
            (["--causal", "top-left"], None),
            (["--window", "2,1"], dict(window=(2, 1))),
            (["--chunk-size", "3"], dict(chunk=3)),
            (["--causal", "--window", "2,0", "--sink-tokens", "1"],
             dict(causal=True, window=(2, None), sink_token_length=1)),
        ]
        q, k, v = self.data(b, sq, sk, seed=21)
        lens = ["--seqused-q", self.npy("uq.npy", np.array(used_q, dtype=np.int64)),
                "--seqused-k", self.npy("uk.npy", np.array(used_k, dtype=np.int64))]
        for extra, ref in cases:
            label = f"seqused {extra}"
            if ref is not None:
                out, lse = self.check(q, k, v, [*extra, *lens], label, seqused_q=used_q,
                                      seqused_k=used_k, **ref)
            else:
                (out, _), (lse, _) = self.posenc(q, k, v, *extra, *lens)
            for e in range(b):
                self.assertTrue((out[e, used_q[e]:] == 0).all(), label)
                self.assertTrue(np.isneginf(lse[e, :, used_q[e]:]).all(), label)
                if used_q[e] == 0:
                    continue
                (o1, _), (l1, _) = self.posenc(q[e:e + 1, :used_q[e]], k[e:e + 1, :used_k[e]],
                                               v[e:e + 1, :used_k[e]], *extra, tag=f"e{e}")
                self.assertEqual(o1[0].tobytes(), out[e, :used_q[e]].tobytes(), f"{label} {e}")
                self.assertEqual(l1[0].tobytes(), np.ascontiguousarray(
                    lse[e, :, :used_q[e]]).tobytes(), f"{label} {e}")

    def test_seqused_errors(self):
        q, k, v = self.data(2, 4, 3)
        args = ["attention", "-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                self.npy("v.npy", v), "--axes", "bshd", "-o", self.path("o_{}.npy")]
        lens = self.npy("l.npy", np.array([1, 2], dtype=np.int64))
        before = sorted(os.listdir(self.tmp))
        self.assert_each_fails(args, [
            (3, ["--seqused-q", self.npy("b.npy", np.array([5, 1]))], r"--seqused-q: .*outside"),
            (3, ["--seqused-k", self.npy("c.npy", np.array([1, 2, 3]))], r"--seqused-k: expected 2"),
            (2, ["--seqused-k", lens, "--key-lengths", lens], r"--seqused-k: not with"),
            (2, ["--seqused-q", lens, "--arith", "hf", "--emit", "output"], r"--seqused-q"),
            (2, ["--seqused-q", lens, "--rope"], r"--seqused-q: not with"),
            (2, ["--seqused-q", lens, "--part", "0/2"], r"--part"),
        ], sorted(os.listdir(self.tmp)))


if __name__ == "__main__":
    unittest.main()
