"""LongT5's encoder attention against HF's own code, re-implemented in torch float64 in
tests/lib/longt5_reference.py (LongT5LocalAttention, LongT5TransientGlobalAttention
and the module functions they call, step for step):

- local attention is existing options: --scale 1 --window R,R (R = local_radius; HF's
  3-block windows with _mask_local_attention_mask keep |i - j| < block_len = R + 1)
  --t5-bias (compute_bias(block_len) gives bucket(j - i) for every key of the 3
  blocks) and the padding of the attention mask as --key-lengths or a boolean --mask
  over keys;
- transient-global attention adds --global-kv KG VG (HF's k and v of the normed global
  aggregates) --global-block-size G --global-bias (global_relative_attention_bias):
  the side keys are columns s .. s + n - 1 of the probs.

LongT5 uses them in the encoder only (bidirectional buckets; its decoder is T5's
attention). Padding: HF's rows of padding queries softmax scores that are all -1e10
(every key masked) and mean nothing; posenc's differ, so the comparison covers the
rows of real tokens. HF masks with -1e10 added, posenc with -inf: the masked
exponentials are 0 either way.

Tolerances: probs and output within rtol 1e-12 and atol 1e-12 * max |value| of the
reference (measured max abs errors are printed with -v). HF's literal softmax of
scores.float() (float32) is within 1e-6 of the float64 one: the cast is the only
difference. Bad inputs: one error line, exit 2 (options) or 3 (data), nothing written.
"""
import os
import sys
import unittest

import numpy as np
import torch

from longt5_reference import LongT5Layer, global_fixed_block_ids
from posenc_testlib import PosencTestCase

VERBOSE = "-v" in sys.argv


class LongT5Attention(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(28)

    def layer(self, heads, d_kv, radius, buckets=32, max_distance=128, global_block_size=None):
        return LongT5Layer(self.gen, 16, heads, d_kv, radius, buckets, max_distance,
                           global_block_size)

    def inputs(self, b, s):
        return torch.randn(b, s, 16, generator=self.gen, dtype=torch.float64)

    def run_case(self, m, hidden, attention_mask, padding, tglobal,
                 emit=("logits", "probs", "output")):
        """posenc's probs and output for HF's layer `m` on `hidden`; `padding` is
        "lengths" (right padding as --key-lengths) or "mask" (a boolean --mask [b, 1, 1,
        s]). Returns (reference dict, posenc dict)."""
        ref = m.forward(hidden, attention_mask, tglobal)
        f = lambda name, t: self.npy(name, t.numpy())
        args = ["attention", "-q", f("q.npy", ref["q"]), "-k", f("k.npy", ref["k"]),
                "-v", f("v.npy", ref["v"]), "--scale", "1",
                "--window", f"{m.block_len - 1},{m.block_len - 1}",
                "--t5-bias", f("t5.npy", m.relative_attention_bias),
                "--t5-buckets", str(m.buckets), "--t5-max-distance", str(m.max_distance)]
        if padding == "lengths":
            args += ["--key-lengths", self.npy("len.npy", attention_mask.sum(1).numpy())]
        else:
            args += ["--mask", self.npy("mask.npy", attention_mask.numpy()[:, None, None, :] != 0)]
        if tglobal:
            args += ["--global-kv", f("kg.npy", ref["side_k"]), f("vg.npy", ref["side_v"]),
                     "--global-block-size", str(m.global_block_size),
                     "--global-bias", f("gb.npy", m.global_relative_attention_bias)]
        out = self.path("o_{}.npy")
        self.run_ok(*args, "--emit", ",".join(emit), "-o", out)
        return ref, {name: np.load(out.format(name)) for name in emit}, args

    def compare(self, ref, got, attention_mask, what):
        s = attention_mask.shape[1]
        rows = attention_mask.numpy() != 0  # [b, s]: real tokens
        want = {"output": ref["output"].numpy()}
        for name in ("probs", "logits"):
            want[name] = ref[name].numpy()
            if ref["side_" + name] is not None:
                want[name] = np.concatenate([want[name], ref["side_" + name].numpy()], axis=-1)
        for name, g in got.items():
            w = want[name]
            self.assertEqual(g.shape, w.shape, f"{what}: {name}")
            g, w = g.transpose(0, 2, 1, 3)[rows], w.transpose(0, 2, 1, 3)[rows]
            if name == "logits":
                # Masked alike (-inf; HF's -1e10), the others compared below.
                np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=what)
                g, w = g[np.isfinite(w)], w[np.isfinite(w)]
            err = float(np.abs(g - w).max())
            if VERBOSE:
                print(f"{what}: {name} max abs error {err:.3g} (max |ref| "
                      f"{float(np.abs(w).max()):.3g})", file=sys.stderr)
            self.assert_close(g, w, rtol=1e-12, atol=1e-12 * float(np.abs(w).max()),
                              msg=f"{what}: {name}")
        if "probs" in got:
            # The probs of real tokens sum to 1 over local and side keys together.
            sums = got["probs"].transpose(0, 2, 1, 3)[rows].sum(-1)
            np.testing.assert_allclose(sums, 1.0, rtol=0, atol=1e-12)
            self.assertEqual(got["probs"].shape[-1], s + (0 if ref["side_k"] is None
                                                          else ref["side_k"].shape[2]))

    def mask(self, b, s, lengths):
        m = torch.zeros(b, s, dtype=torch.int64)
        for i, n in enumerate(lengths):
            m[i, :n] = 1
        return m

    def test_local(self):
        # (b, s, heads, d_kv, local_radius, buckets, max_distance, lengths): s not a
        # multiple of the block length, right padding; radius 20 with 8 buckets reaches
        # the log-spaced buckets and max_distance.
        for b, s, heads, d, radius, nb, md, lengths in [
                (2, 23, 3, 4, 4, 32, 128, (23, 17)),
                (1, 60, 2, 8, 20, 8, 12, (60,)),
                (3, 31, 2, 4, 6, 16, 20, (31, 5, 30))]:
            for padding in ("lengths", "mask"):
                with self.subTest(s=s, radius=radius, padding=padding):
                    m = self.layer(heads, d, radius, nb, md)
                    am = self.mask(b, s, lengths)
                    ref, got, _ = self.run_case(m, self.inputs(b, s), am, padding, False)
                    self.compare(ref, got, am, f"local s {s} radius {radius} {padding}")

    def test_local_mask_with_holes(self):
        # Padding that is not at the end: HF masks those keys anywhere in the window.
        m = self.layer(2, 4, 3)
        am = self.mask(2, 19, (19, 19))
        am[0, 4:6] = 0
        am[1, 0] = 0
        am[1, 12] = 0
        ref, got, _ = self.run_case(m, self.inputs(2, 19), am, "mask", False)
        self.compare(ref, got, am, "local, mask with holes")

    def test_transient_global(self):
        # (b, s, heads, d_kv, radius, G, lengths): s not a multiple of block_len nor of
        # G; padded sequences whose last tokens are orphans of a partial global block;
        # a sequence shorter than G (no full block: every side key masked).
        for b, s, heads, d, radius, gbs, lengths in [
                (2, 37, 2, 4, 3, 5, (37, 29)),
                (1, 64, 3, 4, 7, 16, (64,)),
                (3, 26, 2, 6, 2, 4, (26, 11, 3))]:
            for padding in ("lengths", "mask"):
                with self.subTest(s=s, G=gbs, padding=padding):
                    m = self.layer(heads, d, radius, global_block_size=gbs)
                    am = self.mask(b, s, lengths)
                    ref, got, _ = self.run_case(m, self.inputs(b, s), am, padding, True)
                    self.compare(ref, got, am, f"tglobal s {s} G {gbs} {padding}")

    def test_transient_global_float32_block_ids(self):
        # G 25: HF's float32 cumsum puts token 425 in block 16, not floor(425 / 25) = 17;
        # posenc follows HF.
        ids, _ = global_fixed_block_ids(torch.ones(1, 450, dtype=torch.int64), 25)
        self.assertEqual(int(ids[0, 425]), 16)
        m = self.layer(1, 4, 2, global_block_size=25)
        am = self.mask(1, 450, (450,))
        ref, got, _ = self.run_case(m, self.inputs(1, 450), am, "lengths", True)
        self.compare(ref, got, am, "tglobal G 25")

    def test_transient_global_mask_with_holes(self):
        m = self.layer(2, 4, 3, global_block_size=4)
        am = self.mask(2, 30, (30, 30))
        am[0, 7] = 0   # the end of block 1 is padding: block 1 is not full
        am[1, 10:14] = 0
        ref, got, _ = self.run_case(m, self.inputs(2, 30), am, "mask", True)
        self.compare(ref, got, am, "tglobal, mask with holes")

    def test_hf_float32_softmax_is_the_only_difference(self):
        m = self.layer(2, 4, 3, global_block_size=4)
        am = self.mask(2, 30, (30, 21))
        hidden = self.inputs(2, 30)
        ref, got, _ = self.run_case(m, hidden, am, "lengths", True)
        literal = m.forward(hidden, am, True, f32_softmax=True)
        rows = am.numpy() != 0
        o = literal["output"].numpy().transpose(0, 2, 1, 3)[rows]
        err = float(np.abs(got["output"].transpose(0, 2, 1, 3)[rows] - o).max())
        if VERBOSE:
            print(f"HF's float32 softmax: output max abs difference {err:.3g}", file=sys.stderr)
        self.assertLess(err, 1e-6)
        self.assertGreater(err, 1e-12)  # the float32 softmax does round

    def test_output_alone_and_streamed_bits(self):
        # --emit output alone (the output written as items end) agrees with the
        # reference; output and lse are the same bytes in memory and streamed (1,600
        # keys: two key blocks, each its own chunk at 10M, where one block needs about
        # 9.3 MiB with the outputs, Q and the tiles, and two 10.4 MiB; K and V in place
        # at 64M).
        m = self.layer(2, 4, 3, global_block_size=8)
        am = self.mask(2, 40, (40, 33))
        ref, got, _ = self.run_case(m, self.inputs(2, 40), am, "lengths", True, emit=("output",))
        self.compare(ref, got, am, "tglobal, output alone")
        r = np.random.default_rng(28)
        s, n = 1600, 100
        arrays = {"q": (1, 2, s, 64), "k": (1, 2, s, 64), "v": (1, 2, s, 64),
                  "kg": (1, 2, n, 64), "vg": (1, 2, n, 64), "t5": (32, 2), "gb": (32, 2)}
        p = {k: self.npy(k + ".npy", r.standard_normal(sh)) for k, sh in arrays.items()}
        self.npy("len.npy", np.array([1500]))
        self.assert_streamed_bits("-q", p["q"], "-k", p["k"], "-v", p["v"], "--scale", "1",
                                  "--window", "127,127", "--t5-bias", p["t5"],
                                  "--key-lengths", self.path("len.npy"),
                                  "--global-kv", p["kg"], p["vg"], "--global-block-size", "16",
                                  "--global-bias", p["gb"], budgets=("10M", "64M"))

    def test_bad_inputs(self):
        m = self.layer(2, 4, 3, global_block_size=5)
        am = self.mask(1, 12, (12,))
        _, _, args = self.run_case(m, self.inputs(1, 12), am, "lengths", True)
        r = np.random.default_rng(3)
        self.npy("kg3.npy", r.standard_normal((1, 2, 3, 4)))
        self.npy("vg5.npy", r.standard_normal((1, 2, 2, 5)))
        self.npy("gb3.npy", r.standard_normal((32, 3)))
        self.npy("kgi.npy", np.ones((1, 2, 2, 4), dtype=np.int32))
        nan = r.standard_normal((1, 2, 2, 4))
        nan[0, 1, 1, 2] = np.nan
        self.npy("kgnan.npy", nan)
        self.npy("fmask.npy", np.zeros((1, 1, 1, 12)))
        self.npy("qmask.npy", np.ones((1, 1, 12, 12), dtype=bool))
        self.npy("q8.npy", r.standard_normal((1, 2, 8, 4)))
        before = sorted(os.listdir(self.tmp))
        base = args + ["-o", self.path("out.npy"), "--emit", "output"]
        at = base.index("--global-kv")

        def without(*names):
            a = list(base)
            for name in names:
                i = a.index(name)
                del a[i:i + (3 if name == "--global-kv" else 2)]
            return a

        def swap(i, name):
            a = list(base)
            a[at + 1 + i] = self.path(name)
            return a
        cases = [
            (2, without("--global-block-size"), r"--global-kv: needs --global-block-size"),
            (2, without("--global-block-size") + ["--global-block-size", "0"],
             r"--global-block-size 0: must be from 1"),
            (2, without("--global-block-size") + ["--global-block-size", "-3"],
             r"--global-block-size -3"),
            (2, without("--global-kv"), r"--global-block-size/--global-bias: only with "
                                        r"--global-kv"),
            (2, without("--global-kv", "--global-block-size"), r"only with --global-kv"),
            (2, [a for i, a in enumerate(without("-v")) if a != "output" and a != "--emit"],
             r"--global-kv: needs -v"),
            (2, without("--t5-bias", "--t5-buckets", "--t5-max-distance") + ["--arith", "hf"],
             r"--arith hf: HF's eager attention has no --global-kv"),
            (2, base + ["--softcap", "5"], r"global_k: not with softcap"),
            (2, base + ["--part", "1/2"], r"--part: not with .*--global-kv"),
            (3, swap(0, "kg3.npy"), r"global_k: expected shape \(1, 2, 2, 4\)"),
            (3, swap(1, "vg5.npy"), r"global_v: expected shape \(1, 2, 2, 4\)"),
            (3, swap(0, "kgi.npy"), r"global_k: expected a float tensor"),
            (3, swap(0, "kgnan.npy"), r"global_k: contains NaN"),
            (3, base[:base.index("--global-bias") + 1] + [self.path("gb3.npy")]
             + base[base.index("--global-bias") + 2:], r"global-bias: expected shape \(32, 2\)"),
            (3, base + ["--mask", self.path("fmask.npy")], r"mask: with global_k"),
            (3, base + ["--mask", self.path("qmask.npy")], r"mask: with global_k"),
            (3, base[:2] + [self.path("q8.npy")] + base[3:], r"self-attention"),
        ]
        self.assert_each_fails([], cases, before)


if __name__ == "__main__":
    unittest.main()
