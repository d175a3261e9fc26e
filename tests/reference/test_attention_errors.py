"""posenc attention: bad input and output naming, end to end.

Every bad input gives one `posenc: error:` line, the documented exit status (3 for
inconsistent data, 2 for bad options) and writes nothing (an existing output is left
untouched). Output naming: one file per tensor in --emit order, a {} pattern, or one
HDF5 file with a dataset per tensor. Values are checked against numpy (float64).
"""
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import PosencTestCase


def softmax_ref(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p, p @ v


class AttentionErrors(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(7)
        self.arrays = {
            "q": rng.standard_normal((1, 4, 5, 8)),
            "k": rng.standard_normal((1, 2, 6, 8)),
            "v": rng.standard_normal((1, 2, 6, 3)),
            "k3": rng.standard_normal((1, 3, 6, 8)),  # 3 heads do not divide 4
            "kd": rng.standard_normal((1, 2, 6, 7)),  # d 7 != 8
            "v7": rng.standard_normal((1, 2, 7, 3)),  # length 7 != 6
            "mask_bad": np.ones((3, 6), bool),         # (3, 6) vs (1, 4, 5, 6)
            "mask_ok": np.ones((4, 1, 6), bool),
        }
        for name, a in self.arrays.items():
            np.save(self.path(name + ".npy"), a)
        self.before = sorted(os.listdir(self.tmp))

    def p(self, name):
        return self.path(name + ".npy")

    def fails(self, status, *args, match=None):
        out = self.path("out.h5")
        with open(out, "wb") as f:
            f.write(b"keep me")
        self.assert_fails(status, "attention", *args, "-o", out, match=match)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"keep me")  # existing output untouched
        os.remove(out)
        self.assert_no_new_files(self.before)

    def test_bad_inputs_exit_3(self):
        q, k, v = self.p("q"), self.p("k"), self.p("v")
        self.fails(3, "-q", q, "-k", self.p("k3"), "-v", v, match="heads")
        self.fails(3, "-q", q, "-k", self.p("kd"), "-v", v, match="head dim")
        self.fails(3, "-q", q, "-k", k, "-v", self.p("v7"), match="v: shape")
        self.fails(3, "-q", q, "-k", k, "-v", v, "--mask", self.p("mask_bad"), match="broadcast")
        self.fails(3, "-q", q, "-k", k, "-v", v, "--max-memory", "1k", match="would need")
        self.fails(3, "-q", self.path("missing.npy"), "-k", k)

    def test_bad_options_exit_2(self):
        q, k, v = self.p("q"), self.p("k"), self.p("v")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--scale", "0", match="--scale")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--scale", "-1", match="--scale")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--emit", "probs,weights", match="weights")
        self.fails(2, "-q", q, "-k", k, "--emit", "output", match="output")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--causal", "diagonal", match="--causal")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--window", "a,3", match="--window")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--masked-rows", "inf")
        self.fails(2, "-q", q, "-k", k, "-v", v, "--softcap", "0", match="--softcap")

    def test_nonfinite_inputs(self):
        a = self.arrays
        q, k, v = self.p("q"), self.p("k"), self.p("v")
        for name, val in [("q", np.nan), ("k", np.inf), ("v", -np.inf)]:
            bad = a[name].astype(np.float32)
            bad[0, 1, 2, 0] = val
            np.save(self.p(name + "_bad"), bad)
        # A float mask: -inf masks a score, NaN and +inf are errors.
        mask = np.zeros((1, 1, 5, 6), np.float32)
        mask[..., 0] = -np.inf
        np.save(self.p("mask_inf"), mask)
        mask[0, 0, 1, 1] = np.nan
        np.save(self.p("mask_nan"), mask)
        self.before = sorted(os.listdir(self.tmp))
        for name in ["q", "k", "v"]:
            refs = {"q": q, "k": k, "v": v, name: self.p(name + "_bad")}
            self.fails(3, "-q", refs["q"], "-k", refs["k"], "-v", refs["v"],
                       match=rf"^posenc: error: {name}: contains NaN or Inf .*--allow-nonfinite")
        # The RoPE step refuses them too, pointing at the same option.
        self.fails(3, "-q", self.p("q_bad"), "-k", k, "-v", v, "--rope",
                   match="--allow-nonfinite")
        self.fails(3, "-q", q, "-k", k, "-v", v, "--mask", self.p("mask_nan"),
                   match=r"--mask: contains NaN or \+Inf")
        kk = np.repeat(a["k"], 2, axis=1)
        vv = np.repeat(a["v"], 2, axis=1)
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "--mask", self.p("mask_inf"),
                    "--emit", "probs", "-o", self.path("m.npy"))
        probs, _ = softmax_ref(a["q"], kk[..., 1:, :], vv[..., 1:, :])
        got = np.load(self.path("m.npy"))
        self.assert_close(got[..., 1:], probs, rtol=1e-10, atol=1e-12)
        self.assertTrue((got[..., 0] == 0).all())
        # Allowed: NaN propagates like torch's eager softmax (the row of the NaN query
        # is NaN, other rows are finite and correct).
        self.run_ok("attention", "-q", self.p("q_bad"), "-k", k, "-v", v, "--allow-nonfinite",
                    "--emit", "output", "-o", self.path("n.npy"))
        got = np.load(self.path("n.npy"))
        qb = np.load(self.p("q_bad")).astype(np.float64)
        _, want = softmax_ref(qb, kk, vv)
        self.assertTrue(np.isnan(got[0, 1, 2]).all())
        finite = ~np.isnan(want)
        self.assertEqual(int(finite.sum()), want.size - 3)
        self.assert_close(got[finite], want[finite], rtol=1e-5, atol=1e-6)

    def test_max_memory_message(self):
        r = self.assert_fails(3, "attention", "-q", self.p("q"), "-k", self.p("k"), "--emit",
                              "probs", "--max-memory", "100", "-o", self.path("x.npy"))
        self.assertRegex(r.stderr, r"probs would need .* > --max-memory 100 bytes")

    def test_output_naming(self):
        q, k, v = self.p("q"), self.p("k"), self.p("v")
        a = self.arrays
        kk = np.repeat(a["k"], 2, axis=1)
        vv = np.repeat(a["v"], 2, axis=1)
        probs, out = softmax_ref(a["q"], kk, vv)
        # One HDF5 file, a dataset per tensor, parameters as attributes.
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "-o", self.path("o.h5"))
        with h5py.File(self.path("o.h5"), "r") as f:
            self.assertEqual(sorted(f), ["output", "probs"])
            self.assert_close(f["probs"][()], probs, rtol=1e-10, atol=1e-12)
            self.assert_close(f["output"][()], out, rtol=1e-10, atol=1e-12)
            self.assertAlmostEqual(float(f["probs"].attrs["scale"]), 1 / np.sqrt(8))
        # An HDF5 group.
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "--emit", "lse,output", "-o",
                    self.path("g.h5") + ":/layer0")
        with h5py.File(self.path("g.h5"), "r") as f:
            self.assertEqual(sorted(f["layer0"]), ["lse", "output"])
        # One file per tensor in --emit order.
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "--emit", "output,probs",
                    "-o", self.path("a.npy"), "-o", self.path("b.npy"))
        self.assert_close(np.load(self.path("a.npy")), out, rtol=1e-10, atol=1e-12)
        self.assert_close(np.load(self.path("b.npy")), probs, rtol=1e-10, atol=1e-12)
        # A pattern.
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "-o", self.path("r_{}.npy"))
        self.assert_close(np.load(self.path("r_probs.npy")), probs, rtol=1e-10, atol=1e-12)
        self.assert_close(np.load(self.path("r_output.npy")), out, rtol=1e-10, atol=1e-12)
        # Probs only without V; a broadcast mask that is fine.
        self.run_ok("attention", "-q", q, "-k", k, "--mask", self.p("mask_ok"), "-o",
                    self.path("p.npy"))
        self.assert_close(np.load(self.path("p.npy")), probs, rtol=1e-10, atol=1e-12)
        # Two tensors, one non-HDF5 output: a usage error, nothing written.
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(2, "attention", "-q", q, "-k", k, "-v", v, "-o", self.path("one.npy"),
                          match="2 tensors")
        self.assert_no_new_files(before)


if __name__ == "__main__":
    unittest.main()
