"""posenc attention as Gemma-3n audio attention (HF transformers
Gemma3nAudioAttention with Gemma3nAudioRelativePositionEmbedding), against HF's own
code re-implemented in torch float64 with its structure (tests/lib/
gemma3n_audio_reference.py: query blocks, key contexts, the relative shift, the
soft-cap, the local causal validity mask), random weights:

    posenc attention -q Q -k K -v V --axes bshd --window L-1,R --softcap CAP
        --per-dim-scale per_dim_scale --relative-proj pos_proj.weight
        --relative-left L-1 --relative-right R --relative-beyond zero
        --mask KEEP [b, 1, 1, T] (or --key-lengths for right padding)

with L, R = conf_attention_context_left, _right. HF's chunks of queries seeing a
context of keys reduce to this inclusive window (chunk_size changes nothing), except
for a query none of whose keys is valid: HF then averages its block's context values
(softmax of equal finfo.min), posenc gives 0 (--masked-rows zero); those rows are
checked to be 0 and left out of the comparison.

HF keeps the timing signal and q_scale in float32 buffers and takes the softmax in
float32 even in a float64 model. The comparisons at 1e-12 use a reference with the
same formulas in float64 (f32_buffers=False); test_hf_float32_buffers feeds HF's
float32-buffer values through --relative-k (per-head table) and --scale instead and
also agrees at 1e-12; test_hf_float32_softmax measures how far HF's literal float32
softmax is (below 1e-6).

Tolerances: rtol 1e-12 and atol 1e-12 * max |value| of the reference. Bad inputs: one
error line, exit 2 (options) or 3 (data), nothing written.
"""
import math
import os
import unittest

import numpy as np
import torch

from gemma3n_audio_reference import AudioAttention, blocks_to_full
from posenc_testlib import PosencTestCase


class Gemma3nAudio(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(2803)
        self.worst = {}

    def inputs(self, b, t, heads, hd):
        r = self.rng
        q, k, v = (r.standard_normal((b, t, heads, hd)) for _ in range(3))
        per_dim = r.standard_normal(hd) * 0.5
        proj = r.standard_normal((heads * hd, heads * hd)) / math.sqrt(heads * hd)
        return q, k, v, per_dim, proj

    def run_case(self, b, t, heads, hd, chunk, left, right, cap, padded, key_lengths=None,
                 f32_buffers=False, softmax_f32=False, tol=1e-12):
        q, k, v, per_dim, proj = self.inputs(b, t, heads, hd)
        if key_lengths is not None:
            padded = np.arange(t)[None, :] >= np.asarray(key_lengths)[:, None]
        model = AudioAttention(heads, heads * hd, chunk, left, right, cap,
                               torch.from_numpy(per_dim), torch.from_numpy(proj),
                               f32_buffers=f32_buffers, softmax_f32=softmax_f32)
        ctx, logits, probs, cond = model.forward(
            *(torch.from_numpy(a) for a in (q, k, v)), torch.from_numpy(padded))
        past = max(0, left - 1)
        files = {n: self.npy(n + ".npy", a) for n, a in
                 (("q", q), ("k", k), ("v", v), ("pds", per_dim), ("proj", proj))}
        args = ["attention", "-q", files["q"], "-k", files["k"], "-v", files["v"], "--axes",
                "bshd", "--window", f"{past},{right}", "--softcap", repr(cap),
                "--per-dim-scale", files["pds"], "--relative-left", str(past),
                "--relative-right", str(right), "--relative-beyond", "zero"]
        if f32_buffers:
            # HF's float32 buffers as data: the projected signals and q_scale.
            table = model.rel.sin_emb(torch.float64).numpy()
            args += ["--relative-k", self.npy("table.npy", table),
                     "--scale", repr(float(model.q_scale))]
        else:
            args += ["--relative-proj", files["proj"]]
        if key_lengths is not None:
            args += ["--key-lengths", self.npy("len.npy", np.asarray(key_lengths, np.int64))]
        else:
            args += ["--mask", self.npy("keep.npy", ~padded[:, None, None, :])]
        out = self.path("o_{}.npy")
        self.run_ok(*args, "--emit", "logits,probs,output", "-o", out)
        got = {n: np.load(out.format(n)) for n in ("logits", "probs", "output")}

        cond = cond.expand(b, heads, *cond.shape[2:])
        seen = blocks_to_full(cond.to(torch.float64), cond, t, chunk, past, 0.0).numpy() > 0
        rows = seen.any(-1)  # [b, heads, t]: the query sees some key
        self.assertTrue(rows.any())
        want_logits = blocks_to_full(logits, cond, t, chunk, past, 0.0).numpy()
        want_probs = blocks_to_full(probs, cond, t, chunk, past, 0.0).numpy()
        want_out = ctx.numpy()  # [b, t, heads, hd]
        rows_bthd = rows.transpose(0, 2, 1)  # [b, t, heads]
        label = f"t {t} chunk {chunk} left {left} right {right}"
        # Logits where a key is seen (posenc: -inf elsewhere), probs of rows that see one,
        # the output of those rows; rows that see nothing give 0.
        self.assertTrue(np.all(np.isneginf(got["logits"][~seen])), label)
        pairs = [("logits", got["logits"][seen], want_logits[seen]),
                 ("probs", got["probs"][rows], want_probs[rows]),
                 ("output", got["output"][rows_bthd], want_out[rows_bthd])]
        for name, a, w in pairs:
            scale = float(np.abs(w).max())
            err = float(np.abs(a - w).max())
            self.worst[name] = max(self.worst.get(name, 0.0), err / scale)
            self.assert_close(a, w, rtol=tol, atol=tol * scale, msg=f"{name} {label}")
        self.assertTrue(np.all(got["output"][~rows_bthd] == 0), label)
        self.assertTrue(np.all(got["probs"][~rows] == 0), label)
        return rows

    def test_config_shaped(self):
        # Gemma3nAudioConfig: chunk 12, context_left 13, context_right 0, logit cap 50
        # (hidden 1536, 8 heads); here 4 heads of 8, 30 frames (not a multiple of 12),
        # padding inside and at the end.
        b, t = 2, 30
        padded = np.zeros((b, t), bool)
        padded[0, 5] = True
        padded[1, 17:] = True
        rows = self.run_case(b, t, 4, 8, 12, 13, 0, 50.0, padded)
        self.assertFalse(rows.all())  # frames 29.. of batch 1 see no key

    def test_context_right_and_small_chunks(self):
        # A future context, chunks of 5 over 23 frames, right padding by key lengths
        # (queries far past the end see nothing).
        self.run_case(2, 23, 3, 6, 5, 4, 3, 3.0, None, key_lengths=[23, 9])
        # context_left 1 and 0: no past (max_past_horizon max(0, L - 1) = 0).
        padded = np.zeros((1, 11), bool)
        self.run_case(1, 11, 2, 4, 3, 1, 2, 1.5, padded)
        self.run_case(1, 11, 2, 4, 4, 0, 1, 2.0, padded)

    def test_hf_float32_buffers(self):
        # HF's float32 timing signal (as the per-head --relative-k table) and q_scale
        # (as --scale).
        b, t = 2, 26
        padded = np.zeros((b, t), bool)
        padded[1, 20:] = True
        self.run_case(b, t, 4, 8, 12, 13, 0, 50.0, padded, f32_buffers=True)

    def test_hf_float32_softmax(self):
        # HF's literal softmax(dtype=float32): the float64 run of posenc is within 1e-6.
        padded = np.zeros((1, 26), bool)
        self.run_case(1, 26, 4, 8, 12, 13, 0, 50.0, padded, f32_buffers=True,
                      softmax_f32=True, tol=1e-6)

    def test_float32_inputs(self):
        # float32 heads compute in float32: within 1e-5 of the float64 reference, and
        # the outputs are float32.
        q, k, v, per_dim, proj = self.inputs(1, 26, 4, 8)
        padded = np.zeros((1, 26), bool)
        model = AudioAttention(4, 32, 12, 13, 0, 50.0, torch.from_numpy(per_dim),
                               torch.from_numpy(proj), f32_buffers=False)
        want = model.forward(*(torch.from_numpy(a) for a in (q, k, v)),
                             torch.from_numpy(padded))[0].numpy()
        p = {n: self.npy(n + ".npy", a.astype(np.float32)) for n, a in
             (("q", q), ("k", k), ("v", v), ("pds", per_dim), ("proj", proj))}
        out = self.path("o32.npy")
        self.run_ok("attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "--axes", "bshd",
                    "--window", "12,0", "--softcap", "50", "--per-dim-scale", p["pds"],
                    "--relative-proj", p["proj"], "--relative-left", "12",
                    "--relative-right", "0", "--emit", "output", "-o", out)
        got = np.load(out)
        self.assertEqual(got.dtype, np.float32)
        # the reference from the float32-rounded inputs
        model = AudioAttention(4, 32, 12, 13, 0, 50.0,
                               torch.from_numpy(per_dim.astype(np.float32).astype(np.float64)),
                               torch.from_numpy(proj.astype(np.float32).astype(np.float64)),
                               f32_buffers=False)
        want = model.forward(*(torch.from_numpy(a.astype(np.float32).astype(np.float64))
                               for a in (q, k, v)), torch.from_numpy(padded))[0].numpy()
        scale = float(np.abs(want).max())
        self.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale)

    def test_streamed_bits(self):
        # A per-head --relative-k with K and V streamed in chunks: the same bytes.
        r = self.rng
        q = self.npy("sq.npy", r.standard_normal((1, 2, 64, 8)))
        k = self.npy("sk.npy", r.standard_normal((1, 2, 1600, 8)))
        v = self.npy("sv.npy", r.standard_normal((1, 2, 1600, 5)))
        t = self.npy("st.npy", r.standard_normal((14, 2, 8)))
        self.assert_streamed_bits("-q", q, "-k", k, "-v", v, "--relative-k", t,
                                  "--relative-left", "12", "--relative-right", "1",
                                  "--relative-beyond", "zero", "--softcap", "50")

    def test_per_dim_scale_and_relative_proj_stream(self):
        # Gemma-3n's scaled Q and projected table are made from Q, then K and V stream:
        # at 1M (K and V alone 3.3 MiB) the same bytes as in memory.
        r = self.rng
        q = self.npy("gq.npy", r.standard_normal((1, 2, 64, 8)))
        k = self.npy("gk.npy", r.standard_normal((1, 2, 16000, 8)))
        v = self.npy("gv.npy", r.standard_normal((1, 2, 16000, 5)))
        pds = self.npy("gpds.npy", r.standard_normal(8))
        proj = self.npy("gproj.npy", r.standard_normal((16, 6)))
        self.assert_streamed_bits("-q", q, "-k", k, "-v", v, "--per-dim-scale", pds,
                                  "--relative-proj", proj, "--relative-left", "12",
                                  "--relative-right", "1", "--relative-beyond", "zero",
                                  "--softcap", "50", budgets=("1M", "64M"))

    def test_threads_do_not_change_bits(self):
        q, k, v, per_dim, proj = self.inputs(2, 40, 4, 8)
        p = {n: self.npy(n + ".npy", a) for n, a in
             (("q", q), ("k", k), ("v", v), ("pds", per_dim), ("proj", proj))}
        outs = []
        for threads in ("1", "2"):
            out = self.path(f"j{threads}.npy")
            self.run_ok("-j", threads, "attention", "-q", p["q"], "-k", p["k"], "-v", p["v"],
                        "--axes", "bshd", "--window", "12,0", "--softcap", "50",
                        "--per-dim-scale", p["pds"], "--relative-proj", p["proj"],
                        "--relative-left", "12", "--relative-right", "0", "--emit", "output",
                        "-o", out)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])

    def test_bad_inputs(self):
        r = self.rng
        q, k, v = (self.npy(n + ".npy", r.standard_normal((1, 10, 2, 4))) for n in "qkv")
        self.npy("pds.npy", r.standard_normal(4))
        self.npy("pds5.npy", r.standard_normal(5))
        self.npy("pds_int.npy", np.arange(4))
        nan = r.standard_normal(4)
        nan[1] = np.nan
        self.npy("pds_nan.npy", nan)
        self.npy("proj.npy", r.standard_normal((8, 8)))
        self.npy("proj_odd.npy", r.standard_normal((8, 7)))
        self.npy("proj_rows.npy", r.standard_normal((6, 8)))
        self.npy("table.npy", r.standard_normal((4, 2, 4)))
        self.npy("table_heads.npy", r.standard_normal((4, 3, 4)))
        before = sorted(os.listdir(self.tmp))
        base = ["attention", "-q", q, "-k", k, "-v", v, "--axes", "bshd", "-o",
                self.path("out.npy"), "--emit", "output"]
        win = ["--relative-left", "2", "--relative-right", "1"]
        proj = ["--relative-proj", self.path("proj.npy")]
        cases = [
            (3, ["--per-dim-scale", self.path("pds5.npy")],
             r"--per-dim-scale: expected shape \(4\)"),
            (3, ["--per-dim-scale", self.path("pds_int.npy")], r"--per-dim-scale: expected a float"),
            (3, ["--per-dim-scale", self.path("pds_nan.npy")], r"--per-dim-scale: contains NaN"),
            (2, ["--per-dim-scale", self.path("pds.npy"), "--arith", "hf"],
             r"--arith hf: .*--per-dim-scale"),
            (3, ["--relative-proj", self.path("proj_odd.npy"), *win],
             r"--relative-proj: expected shape \(8, D\)"),
            (3, ["--relative-proj", self.path("proj_rows.npy"), *win],
             r"--relative-proj: expected shape \(8, D\)"),
            (2, proj, r"--relative-proj needs --relative-left and --relative-right"),
            (2, [*proj, "--relative-left", "2"], r"--relative-proj needs --relative-left"),
            (2, [*proj, *win, "--relative-k", self.path("table.npy")],
             r"--relative-proj: not with --relative-k"),
            (2, [*proj, *win, "--arith", "hf"], r"--arith hf: .*--relative-proj"),
            (2, [*proj, "--max-distance", "2"], r"--max-distance"),
            (2, [*proj, "--relative-left", "-1", "--relative-right", "0"],
             r"--relative-left: must be from 0"),
            (3, ["--relative-k", self.path("table_heads.npy"), *win],
             r"--relative-k: expected shape \(4, 2, 4\)"),
        ]
        cases.append((3, ["--per-dim-scale", self.path("nothere.npy")], r"nothere"))
        self.assert_each_fails(base, cases, before)


if __name__ == "__main__":
    unittest.main()
