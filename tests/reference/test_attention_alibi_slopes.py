"""posenc attention --alibi-slopes (FlashAttention's alibi_slopes [hq] or [b, hq]) against
an independent torch float64 reference written from FlashAttention's public semantics:

- the kernel (csrc/flash_attn/src/mask.h, alibi.h): with a causal mask and no left
  window it adds slope * j to the scores (its softmax_lse includes it); otherwise it
  subtracts slope * |i + sk_b - sq_b - j|, sk_b and sq_b the entry's own lengths
  (seqused_k/q, the KV cache's keys, a varlen sequence's lengths);
- the test suite's attn_bias_from_alibi_slopes (tests/test_flash_attn.py): the same
  non-causal form (key_padding_mask.sum, query_padding_mask.sum per entry), and under
  causal slope * (j - sk + 1), a row constant away from the kernel's: the same
  probabilities and output, checked here too;
- the slope of entry b, head h is slopes[b, h] (or slopes[h]); the bias is added after
  the scale (the kernel divides the slope by softmax_scale before adding it to q.k).

Gradients (dq, dk, dv) against torch float64 autograd of the same reference.
Tolerance: float64, max error <= 1e-12 relative to the largest reference value.
"""
import os
import unittest

import numpy as np

from fa_alibi_reference import reference
from posenc_testlib import PosencTestCase, run


def rel_err(got, want):
    return np.abs(got - want).max(initial=0) / max(np.abs(want).max(initial=0), 1.0)


class AlibiSlopes(PosencTestCase):
    def data(self, b=2, sq=5, sk=9, h=4, hk=2, d=8, dv=6, seed=3):
        r = np.random.default_rng(seed)
        q = r.standard_normal((b, sq, h, d))
        k = r.standard_normal((b, sk, hk, d))
        v = r.standard_normal((b, sk, hk, dv))
        slopes = r.random((b, h)) * 0.3  # FA's tests: torch.rand(batch, nheads) * 0.3
        return q, k, v, slopes

    def run_posenc(self, tag, q, k, v, slopes, *extra, emit="output,lse,probs"):
        paths = [self.npy(f"{tag}_{n}.npy", x) for n, x in
                 (("q", q), ("k", k), ("v", v), ("s", slopes))]
        out = self.path(f"{tag}_{{}}.npy")
        self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2], "--axes",
                    "bshd", "--alibi-slopes", paths[3], "--emit", emit, "-o", out, *extra)
        return [np.load(out.format(n)) for n in emit.split(",")]

    def check(self, label, got, want):
        for name, g, w in zip(("output", "lse", "probs", "dq", "dk", "dv"), got, want):
            fin = np.isfinite(w)
            np.testing.assert_array_equal(np.isfinite(g), fin, f"{label}: {name}")
            self.assertLessEqual(rel_err(g[fin], w[fin]), 1e-12, f"{label}: {name}")

    def test_forward_forms(self):
        q, k, v, slopes = self.data()
        for label, extra, ref in [
            ("non-causal", [], {}),
            ("causal", ["--causal"], {"causal": True}),
            ("causal top-left", ["--causal", "top-left"], {"top_left": True}),
            ("window", ["--window", "2,1"], {"window": (2, 1)}),
            ("causal, left window", ["--causal", "--window", "3,0"],
             {"causal": True, "window": (3, 0)}),
        ]:
            for shape, s in (("[b, hq]", slopes), ("[hq]", slopes[0])):
                got = self.run_posenc("f", q, k, v, s, *extra)
                self.check(f"{label} {shape}", got, reference(q, k, v, s, **ref))
        # More queries than keys (bottom-right: negative positions), and FA's test form
        # under causal: the same output and probabilities as the kernel's.
        q, k, v, slopes = self.data(sq=7, sk=4, seed=4)
        for extra, ref in (([], {}), (["--causal"], {"causal": True})):
            got = self.run_posenc("g", q, k, v, slopes, *extra)
            self.check(f"sq > sk {extra}", got, reference(q, k, v, slopes, **ref))
            fa = reference(q, k, v, slopes, fa_test_form=True, **ref)
            for g, w in ((got[0], fa[0]), (got[2], fa[2])):
                self.assertLessEqual(rel_err(g, w), 1e-12, f"sq > sk {extra}: FA's test form")

    def test_same_bytes_across_threads_and_streaming(self):
        # 2,600 keys: key blocks of 1,024, K and V read in chunks under --max-memory.
        q, k, v, slopes = self.data(b=2, sq=20, sk=2600, d=4, dv=4, seed=14)
        uk = np.array([2600, 1500])
        files = ["--seqused-k", self.npy("su.npy", uk)]
        want = reference(q, k, v, slopes, seqused_k=uk)
        runs = []
        for pre, more in ((["-j", "1"], []), (["-j", "2"], []), ([], ["--max-memory", "800K"])):
            tag = f"t{len(runs)}"
            paths = [self.npy(f"{tag}_{n}.npy", x) for n, x in
                     (("q", q), ("k", k), ("v", v), ("s", slopes))]
            out = self.path(f"{tag}_{{}}.npy")
            self.run_ok(*pre, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                        "--axes", "bshd", "--alibi-slopes", paths[3], "--emit", "output,lse",
                        "-o", out, *files, *more)
            runs.append([open(out.format(n), "rb").read() for n in ("output", "lse")])
            self.check(f"{pre} {more}", [np.load(out.format(n)) for n in ("output", "lse")],
                       want[:2])
        self.assertEqual(runs[0], runs[1])
        self.assertEqual(runs[0], runs[2])

    def test_seqused_is_each_entrys_alignment(self):
        # FA's reference: sk, sq = key_padding_mask.sum, query_padding_mask.sum per entry.
        q, k, v, slopes = self.data(b=3, sq=6, sk=8, seed=5)
        uq, uk = np.array([6, 3, 4]), np.array([8, 5, 2])
        files = ["--seqused-q", self.npy("uq.npy", uq), "--seqused-k", self.npy("uk.npy", uk)]
        for extra, ref in (([], {}), (["--causal"], {"causal": True}),
                           (["--window", "1,2"], {"window": (1, 2)})):
            got = self.run_posenc("u", q, k, v, slopes, *files, *extra)
            want = reference(q, k, v, slopes, seqused_q=uq, seqused_k=uk, **ref)
            self.check(f"seqused {extra}", got, want)

    def test_replaces_the_generated_slopes_of_the_variant(self):
        q, k, v, slopes = self.data(seed=6)
        # --alibi symmetric: -m |i - j| with the given m (the reference's window-free
        # non-causal form at sq = sk).
        q = q[:, :5]
        k, v = k[:, :5], v[:, :5]
        got = self.run_posenc("a", q, k, v, slopes, "--alibi", "symmetric")
        self.check("symmetric", got, reference(q, k, v, slopes))

    def test_varlen(self):
        r = np.random.default_rng(8)
        lq, lk = [3, 0, 5], [6, 2, 4]
        cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
        ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        h, hk, d = 4, 2, 8
        q = r.standard_normal((cq[-1], h, d))
        k = r.standard_normal((ck[-1], hk, d))
        v = r.standard_normal((ck[-1], hk, d))
        slopes = r.random((3, h)) * 0.3
        paths = [self.npy(f"v_{n}.npy", x) for n, x in
                 (("q", q), ("k", k), ("v", v), ("s", slopes), ("cq", cq), ("ck", ck))]
        for extra, ref in (([], {}), (["--causal"], {"causal": True})):
            out = self.path("v_{}.npy")
            self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                        "--alibi-slopes", paths[3], "--cu-seqlens-q", paths[4],
                        "--cu-seqlens-k", paths[5], "--emit", "output,lse", "-o", out, *extra)
            got_o, got_l = np.load(out.format("output")), np.load(out.format("lse"))
            for e in range(3):
                qs, ks = slice(cq[e], cq[e + 1]), slice(ck[e], ck[e + 1])
                if lq[e] == 0:
                    continue
                o, l, _ = reference(q[None, qs], k[None, ks], v[None, ks], slopes[e], **ref)
                self.check(f"varlen {extra} seq {e}", [got_o[qs], got_l[:, qs]], [o[0], l[0]])

    def test_kvcache_step(self):
        # flash_attn_with_kvcache(alibi_slopes=...): keys [0, cache_seqlens + s_new), the
        # queries at the end (bottom-right), each entry's own length.
        r = np.random.default_rng(9)
        b, S, hk, h, d, sq, s_new = 2, 12, 2, 4, 8, 3, 2
        kc = r.standard_normal((b, S, hk, d))
        vc = r.standard_normal((b, S, hk, d))
        kn = r.standard_normal((b, s_new, hk, d))
        vn = r.standard_normal((b, s_new, hk, d))
        q = r.standard_normal((b, sq, h, d))
        seqlens = np.array([4, 9], dtype=np.int32)
        slopes = r.random((b, h)) * 0.3
        kf, vf = kc.copy(), vc.copy()
        for e in range(b):
            kf[e, seqlens[e]:seqlens[e] + s_new] = kn[e]
            vf[e, seqlens[e]:seqlens[e] + s_new] = vn[e]
        used = seqlens + s_new
        paths = [self.npy(f"c_{n}.npy", x) for n, x in
                 (("q", q), ("k", kc), ("v", vc), ("kn", kn), ("vn", vn), ("sl", seqlens),
                  ("s", slopes))]
        for extra, ref in (([], {}), (["--causal"], {"causal": True})):
            out = self.path("c_{}.npy")
            self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                        "--k-new", paths[3], "--v-new", paths[4], "--cache-seqlens", paths[5],
                        "--alibi-slopes", paths[6], "--emit", "output,lse", "-o", out, *extra)
            want = reference(q, kf, vf, slopes, seqused_k=used, **ref)
            self.check(f"kvcache {extra}", [np.load(out.format("output")),
                                            np.load(out.format("lse"))], want[:2])

    def test_backward(self):
        q, k, v, slopes = self.data(seed=10)
        do = np.random.default_rng(11).standard_normal((2, 5, 4, 6))
        uk = np.array([9, 6])
        for extra, ref in (([], {}), (["--causal"], {"causal": True}),
                           (["--seqused-k", self.npy("bk.npy", uk)], {"seqused_k": uk})):
            paths = [self.npy(f"b_{n}.npy", x) for n, x in
                     (("q", q), ("k", k), ("v", v), ("s", slopes), ("do", do))]
            out = self.path("b_{}.npy")
            self.run_ok("attention", "-q", paths[0], "-k", paths[1], "-v", paths[2], "--axes",
                        "bshd", "--alibi-slopes", paths[3], "--grad-output", paths[4],
                        "--emit", "dq,dk,dv", "-o", out, *extra)
            want = reference(q, k, v, slopes, grad=do, **ref)
            got = [np.load(out.format(n)) for n in ("dq", "dk", "dv")]
            for name, g, w in zip(("dq", "dk", "dv"), got, want[3:]):
                self.assertLessEqual(rel_err(g, w), 1e-12, f"backward {extra}: {name}")

    def test_bad_slopes(self):
        q, k, v, slopes = self.data()
        base = ["attention", "-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                self.npy("v.npy", v), "--axes", "bshd", "-o", self.path("o_{}.npy")]
        nan = slopes.copy()
        nan[1, 2] = np.nan
        for status, bad, more in [
            (3, slopes[:, :3], []),                      # [b, 3]: not hq
            (3, slopes[:1], []),                         # [1, hq] for a batch of 2
            (3, np.ones((2, 4, 1)), []),                 # rank 3
            (3, nan, []),
            (3, np.arange(8, dtype=np.int32).reshape(2, 4), []),  # not float
            (2, slopes, ["--arith", "hf"]),
            (2, slopes, ["--arith", "fa-baseline"]),
            (2, slopes, ["--alibi", "--alibi-max-bias", "4"]),
            (2, slopes, ["--part", "0/2"]),
        ]:
            p = run(*base, "--alibi-slopes", self.npy("bad.npy", bad), *more)
            self.assertEqual(p.returncode, status, (bad.shape, more, p.stderr))
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn("alibi", lines[0])
            self.assertFalse(any(n.startswith("o_") for n in os.listdir(self.tmp)),
                             p.stderr)


if __name__ == "__main__":
    unittest.main()
