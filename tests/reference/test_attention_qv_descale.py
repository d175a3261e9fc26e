"""posenc attention's FlashAttention-3 test features against FA's attention_ref semantics
rewritten in torch (tests/lib/fa_attention_qv_reference.py): --qv, the fp8 descales
--q-descale/--k-descale/--v-descale, --p-dtype (intermediate_dtype) and --arith
fa-baseline (the PyTorch baseline, upcast=False, reorder_ops=True).

Tolerances:
- qv, descales, p-dtype (float64 arithmetic): max error <= 1e-12 relative to the largest
  reference value; -j 1 and -j 2 give the same bytes, and so does a run over several key
  blocks (2,600 keys) under a small --max-memory.
- fa-baseline: the reference rounds each op with torch's .to(dtype); both sum the
  einsums exactly before rounding to float32 and the dtype, so they agree bit for bit
  (a float64 sum could round differently only on an exact float32 midpoint).
"""
import os
import unittest

import numpy as np
import torch

from fa_attention_qv_reference import attention_baseline, attention_ref_fa
from posenc_testlib import PosencTestCase, load_torch, out_ref, save_torch


def data(b=2, sq=6, sk=9, h=4, hk=2, d=8, dv=6, seed=0):
    rng = np.random.default_rng(seed)
    return dict(q=rng.standard_normal((b, sq, h, d)), k=rng.standard_normal((b, sk, hk, d)),
                v=rng.standard_normal((b, sk, hk, dv)), qv=rng.standard_normal((b, sq, h, dv)),
                q_descale=rng.uniform(0.25, 3, (b, hk)), k_descale=rng.uniform(0.25, 3, (b, hk)),
                v_descale=rng.uniform(0.25, 3, (b, hk)))


class QvDescale(PosencTestCase):
    def posenc(self, x, extra, tag="r", jobs=None, budget=None):
        paths = {n: self.npy(f"{tag}_{n}.npy", a) for n, a in x.items()}
        out = self.path(f"{tag}_{{}}.npy")
        pre = ["-j", str(jobs)] if jobs else []
        more = ["--max-memory", budget] if budget else []
        args = [a if not (isinstance(a, str) and a.startswith("@")) else paths[a[1:]]
                for a in extra]
        self.run_ok(*pre, "attention", "-q", paths["q"], "-k", paths["k"], "-v", paths["v"],
                    "--axes", "bshd", "--emit", "output,lse", "-o", out, *args, *more)
        got = []
        for name in ("output", "lse"):
            with open(out.format(name), "rb") as f:
                got.append((np.load(out.format(name)), f.read()))
        return got

    def check(self, x, extra, label, streamed=False, **ref):
        want_out, want_lse, _ = attention_ref_fa(x["q"], x["k"], x["v"], **ref)
        (out, out_b), (lse, lse_b) = self.posenc(x, extra)
        scale = max(np.abs(want_out).max(), 1.0)
        self.assertLessEqual(np.abs(out - want_out).max() / scale, 1e-12, label)
        fin = ~np.isneginf(want_lse)
        np.testing.assert_array_equal(np.isneginf(lse), ~fin, label)
        self.assertLessEqual(np.abs(lse[fin] - want_lse[fin]).max(initial=0) /
                             max(np.abs(want_lse[fin]).max(initial=1), 1), 1e-12, label)
        for jobs in (1, 2):
            got = self.posenc(x, extra, tag=f"j{jobs}", jobs=jobs)
            self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label}: -j {jobs}")
        if streamed:
            got = self.posenc(x, extra, tag="s", budget="2M")
            self.assertEqual((got[0][1], got[1][1]), (out_b, lse_b), f"{label}: budget")

    def test_qv_gqa(self):
        x = data()
        self.check(x, ["--qv", "@qv"], "qv", qv=x["qv"])
        self.check(x, ["--qv", "@qv", "--causal", "--softcap", "3"], "qv causal softcap",
                   qv=x["qv"], causal=True, softcap=3.0)
        self.check(x, ["--qv", "@qv", "--scale", "0.3"], "qv scale", qv=x["qv"], scale=0.3)

    def test_qv_seqused_and_window(self):
        x = data(b=3, sq=7, sk=10, seed=3)
        x["su_q"] = np.array([7, 3, 0], dtype=np.int64)
        x["su_k"] = np.array([10, 4, 6], dtype=np.int64)
        self.check(x, ["--qv", "@qv", "--seqused-q", "@su_q", "--seqused-k", "@su_k",
                       "--window", "3,1"], "qv seqused", qv=x["qv"],
                   seqused_q=x["su_q"], seqused_k=x["su_k"], window=(3, 1))

    def test_qv_several_key_blocks(self):
        # 2,600 keys: three key blocks of the online softmax.
        x = data(b=1, sq=5, sk=2600, h=2, hk=1, d=4, dv=4, seed=5)
        self.check(x, ["--qv", "@qv", "--window", "900,3"], "qv long", streamed=True,
                   qv=x["qv"], window=(900, 3))

    def test_qv_packed_sequences(self):
        # --cu-seqlens 0,4,10: each sequence attends within itself, as two runs would.
        x = data(b=1, sq=10, sk=10, seed=12)
        x["cu"] = np.array([0, 4, 10], dtype=np.int64)
        (out, _), (lse, _) = self.posenc(x, ["--qv", "@qv", "--causal", "--cu-seqlens", "@cu"])
        for lo, hi in ((0, 4), (4, 10)):
            part = {n: x[n][:, lo:hi] for n in ("q", "k", "v", "qv")}
            want_out, want_lse, _ = attention_ref_fa(part["q"], part["k"], part["v"],
                                                     qv=part["qv"], causal=True)
            self.assertLessEqual(np.abs(out[:, lo:hi] - want_out).max(), 1e-12)
            self.assertLessEqual(np.abs(lse[:, :, lo:hi] - want_lse).max(), 1e-12)

    def test_descales(self):
        x = data(seed=1)
        ds = dict(q_descale=x["q_descale"], k_descale=x["k_descale"], v_descale=x["v_descale"])
        flags = ["--q-descale", "@q_descale", "--k-descale", "@k_descale", "--v-descale",
                 "@v_descale"]
        self.check(x, flags, "descales", **ds)
        self.check(x, flags + ["--qv", "@qv", "--causal"], "descales qv", qv=x["qv"],
                   causal=True, **ds)
        self.check(x, ["--k-descale", "@k_descale"], "k descale", k_descale=x["k_descale"])

    def test_descales_f16_inputs(self):
        # f16 inputs: the products in float32 (the upcast reference keeps them there).
        x = data(seed=2)
        for n in ("q", "k", "v"):
            x[n] = x[n].astype(np.float16)
        x["q_descale"] = x["q_descale"].astype(np.float32)
        want_out, _, _ = attention_ref_fa(x["q"], x["k"], x["v"], q_descale=x["q_descale"],
                                          v_descale=x["v_descale"])
        (out, _), _ = self.posenc(x, ["--q-descale", "@q_descale", "--v-descale",
                                      "@v_descale", "--dtype", "f64"])
        self.assertLessEqual(np.abs(out - want_out).max() / np.abs(want_out).max(), 1e-12)

    def test_p_dtype(self):
        x = data(seed=4)
        for p in ("f32", "f16", "bf16", "e4m3fn", "e5m2"):
            self.check(x, ["--p-dtype", p], f"p {p}", p_dtype=p)
        self.check(x, ["--p-dtype", "e4m3fn", "--qv", "@qv", "--causal"], "p qv",
                   p_dtype="e4m3fn", qv=x["qv"], causal=True)

    def test_bad_inputs(self):
        x = data(seed=6)
        p = {n: self.npy(f"{n}.npy", a) for n, a in x.items()}
        bad = {"ds_shape": np.ones((2, 4)), "ds_zero": np.array([[1.0, 0.0], [1, 1]]),
               "ds_nan": np.array([[1.0, np.nan], [1, 1]]), "qv_shape": np.ones((2, 6, 4, 5))}
        bp = {n: self.npy(f"{n}.npy", a) for n, a in bad.items()}
        base = ["attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "--axes", "bshd",
                "-o", self.path("out_{}.npy")]
        for flag, ref, match in [("--q-descale", bp["ds_shape"], "q.descale"),
                                 ("--k-descale", bp["ds_zero"], "k.descale"),
                                 ("--v-descale", bp["ds_nan"], "v.descale"),
                                 ("--qv", bp["qv_shape"], "qv")]:
            self.assert_fails(3, *base, flag, ref, match=match)
        self.assertEqual(sorted(f for f in os.listdir(self.tmp)
                                if f.startswith("out_")), [])
        self.assert_fails(2, *base, "--p-dtype", "f8")
        self.assert_fails(2, *base, "--qv", p["qv"], "--arith", "hf")
        self.assert_fails(2, *base, "--arith", "fa-baseline", "--alibi")


class FaBaseline(PosencTestCase):
    def check(self, x, dtype, extra, label, **ref):
        opts = {k: ref.pop(k) for k in list(ref) if k in ("causal", "softcap", "p_dtype")}
        t = {n: torch.from_numpy(np.asarray(x[n], dtype=np.float32)).to(dtype)
             for n in ("q", "k", "v", "qv")}
        refs = {n: save_torch(self, f"{label}_{n}".replace(" ", "_"), t[n]) for n in t}
        ds = {n: self.npy(f"{label}_{n}.npy".replace(" ", "_"), x[n].astype(np.float32))
              for n in ("q_descale", "k_descale", "v_descale")}
        args = [refs.get(a[1:], ds.get(a[1:])) if a.startswith("@") else a for a in extra]
        o = out_ref(self, f"{label}_out".replace(" ", "_"), dtype)
        self.run_ok("attention", "-q", refs["q"], "-k", refs["k"], "-v", refs["v"], "--axes",
                    "bshd", "--arith", "fa-baseline", "--emit", "output", "-o", o, *args)
        got = load_torch(o, dtype)
        kw = {n: (t["qv"] if n == "qv" else torch.from_numpy(x[n].astype(np.float32)))
              for n in ref}
        want, _ = attention_baseline(t["q"], t["k"], t["v"], **kw, **opts)
        self.assertEqual(got.dtype, dtype, label)
        diff = (got.float() - want.float()).abs().max().item()
        self.assertEqual(diff, 0.0, f"{label}: max difference {diff}")
        return got

    def test_baseline_dtypes(self):
        x = data(seed=7)
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            self.check(x, dtype, [], f"plain {dtype}")
            self.check(x, dtype, ["--qv", "@qv", "--causal", "--softcap", "2.5"],
                       f"qv {dtype}", qv=True, causal=True, softcap=2.5)
            self.check(x, dtype, ["--q-descale", "@q_descale", "--k-descale", "@k_descale",
                                  "--v-descale", "@v_descale", "--p-dtype", "e4m3fn"],
                       f"descale {dtype}", q_descale=True, k_descale=True, v_descale=True,
                       p_dtype="e4m3fn")

    def test_baseline_probs_and_threads(self):
        # f16: the emitted probs are the baseline's P (before --p-dtype), and -j 1 and
        # -j 2 write the same bytes.
        x = data(seed=13)
        t = {n: torch.from_numpy(x[n].astype(np.float32)).half() for n in ("q", "k", "v")}
        refs = {n: save_torch(self, f"pj_{n}", t[n]) for n in t}
        outs = []
        for jobs in (1, 2):
            o = self.path(f"pj{jobs}_{{}}.npy")
            self.run_ok("-j", str(jobs), "attention", "-q", refs["q"], "-k", refs["k"], "-v",
                        refs["v"], "--axes", "bshd", "--arith", "fa-baseline", "--causal",
                        "--p-dtype", "e5m2", "--emit", "probs,output", "-o", o)
            outs.append([open(o.format(n), "rb").read() for n in ("probs", "output")])
        self.assertEqual(outs[0], outs[1])
        want_out, want_p = attention_baseline(t["q"], t["k"], t["v"], causal=True,
                                              p_dtype="e5m2")
        np.testing.assert_array_equal(np.load(self.path("pj1_probs.npy")), want_p.numpy())
        np.testing.assert_array_equal(np.load(self.path("pj1_output.npy")), want_out.numpy())

    def test_baseline_is_not_the_reference(self):
        # The baseline's error against the float64 reference is that of f16 arithmetic.
        x = data(seed=8)
        got = self.check(x, torch.float16, [], "err")
        ref, _, _ = attention_ref_fa(
            torch.from_numpy(x["q"].astype(np.float32)).half().double().numpy(),
            torch.from_numpy(x["k"].astype(np.float32)).half().double().numpy(),
            torch.from_numpy(x["v"].astype(np.float32)).half().double().numpy())
        err = np.abs(got.double().numpy() - ref).max()
        self.assertGreater(err, 0)
        self.assertLess(err, 1e-2)


if __name__ == "__main__":
    unittest.main()
