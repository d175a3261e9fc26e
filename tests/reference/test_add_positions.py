"""`posenc add` against independent references: the Annotated Transformer's
Embeddings (x * sqrt(d_model)) and PositionalEncoding (interleaved sin/cos buffer,
written from its code in torch float64), tensor2tensor's concatenated [sin | cos], and
learned tables as GPT-2 / BERT add them (x + wpe[position_ids]).

Checks:
- float64 to 1e-12; float32 / float16 / bfloat16 outputs equal the float64 reference
  rounded once (float32 within one ulp, 16-bit types exactly except ties within
  one ulp of the type);
- --start, sequence-first (sbd) and [s, d] inputs, a learned table of another dtype;
- streaming: with a --max-memory forcing many slabs (along b for [b, s, d], along s
  for [1, s, d]; -v reports the count) the bytes equal those of a one-slab run; NPY
  on stdin/stdout; the bytes do not depend on -j;
- bad inputs: exit 3 with one line and no output file (learned table too short or of
  the wrong width, integer or odd-width embeddings with the sinusoidal table, NaN);
  bad options: exit 2 (--scale, --base with a learned table, axes with h).
"""
import math
import os
import re
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase, run
from reference_relative import annotated_pe

F64 = dict(rtol=1e-12, atol=1e-12)


def concat_pe(n, d, start=0):
    """tensor2tensor's layout in float64: [sin(p w) | cos(p w)], w_i = 10000^(-2i/d)."""
    pos = np.arange(start, start + n, dtype=np.float64)[:, None]
    w = 1.0 / 10000.0 ** (np.arange(0, d, 2, dtype=np.float64) / d)
    return np.concatenate([np.sin(pos * w), np.cos(pos * w)], axis=1)


class TestAdd(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(7)

    def add(self, x, *args, name="x.npy"):
        np.save(self.path(name), x)
        out = self.path("y.npy")
        self.run_ok("add", self.path(name), "-o", out, *args)
        return np.load(out)

    def test_annotated_transformer_f64(self):
        x = self.rng.standard_normal((3, 20, 16))
        got = self.add(x, "--table", "sinusoidal", "--scale", "sqrt-d")
        ref = torch.from_numpy(x) * math.sqrt(16) + annotated_pe(20, 16)[None]
        self.assert_close(got, ref, **F64)
        got = self.add(x, "--table", "sinusoidal", "--scale", "0.5", "--start", "7")
        ref = torch.from_numpy(x) * 0.5 + annotated_pe(27, 16)[None, 7:]
        self.assert_close(got, ref, **F64)

    def test_concat_layout_and_rank2(self):
        x = self.rng.standard_normal((13, 10))
        got = self.add(x, "--table", "sinusoidal", "--layout", "concat", "--start", "3")
        self.assert_close(got, x + concat_pe(13, 10, 3), **F64)

    def test_sequence_first(self):
        x = self.rng.standard_normal((9, 4, 8))  # [s, b, d] as Transformer-XL / XLNet
        got = self.add(x, "--table", "sinusoidal", "--axes", "sbd")
        ref = x + annotated_pe(9, 8).numpy()[:, None, :]
        self.assert_close(got, ref, **F64)

    def test_learned_table(self):
        x = self.rng.standard_normal((2, 6, 8)).astype(np.float32)
        wpe = self.rng.standard_normal((10, 8))  # f64 table, f32 embeddings
        np.save(self.path("wpe.npy"), wpe)
        got = self.add(x, "--table", self.path("wpe.npy"), "--start", "4")
        self.assertEqual(got.dtype, np.float32)
        ref = (x.astype(np.float64) + wpe[4:10][None]).astype(np.float32)
        np.testing.assert_array_equal(got, ref)  # one rounding of the float64 sum

    def test_dtypes(self):
        x = self.rng.standard_normal((2, 30, 32)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        ref = x.astype(np.float64) * math.sqrt(32) + annotated_pe(30, 32).numpy()[None]
        for dt, ulp in (("f32", 2.0 ** -23), ("f16", 2.0 ** -10), ("bf16", 2.0 ** -7)):
            out = self.path("y.h5")  # h5py reads bf16 as float32 values
            # --force: /y of the previous dtype is replaced.
            self.run_ok("add", self.path("x.npy"), "--table", "sinusoidal", "--scale", "sqrt-d",
                        "--dtype", dt, "--force", "-o", f"{out}:/y")
            with h5py.File(out, "r") as f:
                self.assertEqual(f["y"].id.get_type().get_size(), 4 if dt == "f32" else 2)
                got = f["y"][...].astype(np.float64)
            # Rounded once: within one ulp of the type (relative), with an
            # absolute floor for float16's subnormals.
            self.assertTrue(np.all(np.abs(got - ref) <= ulp * np.abs(ref) + 2.0 ** -24), dt)

    def test_f16_input(self):
        x = self.rng.standard_normal((2, 5, 8)).astype(np.float16)
        got = self.add(x, "--table", "sinusoidal")
        self.assertEqual(got.dtype, np.float16)
        ref = (x.astype(np.float64) + annotated_pe(5, 8).numpy()[None]).astype(np.float16)
        np.testing.assert_array_equal(got, ref)


class TestStreaming(PosencTestCase):
    def slabs(self, x, *extra):
        np.save(self.path("x.npy"), x)
        p = self.run_ok("-v", "add", self.path("x.npy"), "--table", "sinusoidal", "-o",
                        self.path("one.npy"))
        p2 = self.run_ok("-v", "add", self.path("x.npy"), "--table", "sinusoidal", "-o",
                         self.path("many.npy"), *extra)
        count = int(re.search(r"(\d+) slab\(s\)", p2.stderr).group(1))
        self.assertEqual(int(re.search(r"(\d+) slab\(s\)", p.stderr).group(1)), 1)
        with open(self.path("one.npy"), "rb") as a, open(self.path("many.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        return count

    def test_along_batch(self):
        x = np.random.default_rng(1).standard_normal((16, 128, 32)).astype(np.float32)
        self.assertGreater(self.slabs(x, "--max-memory", "150K"), 4)
        ref = x.astype(np.float64) + annotated_pe(128, 32).numpy()[None]
        self.assert_close(np.load(self.path("many.npy")), ref, rtol=1e-6, atol=1e-6)

    def test_along_sequence(self):
        x = np.random.default_rng(2).standard_normal((1, 512, 64)).astype(np.float32)
        self.assertGreater(self.slabs(x, "--max-memory", "64K"), 8)
        ref = x.astype(np.float64) + annotated_pe(512, 64).numpy()[None]
        self.assert_close(np.load(self.path("many.npy")), ref, rtol=1e-6, atol=1e-6)

    def test_stdin_stdout_and_threads(self):
        x = np.random.default_rng(3).standard_normal((4, 64, 16)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        with open(self.path("x.npy"), "rb") as f:
            data = f.read()
        outs = []
        for j in ("1", "2"):
            p = run("-j", j, "add", "-", "--table", "sinusoidal", "--max-memory", "20K", "-o",
                    "-", "--force", stdin=data)
            self.assertEqual(p.returncode, 0, p.stderr)
            outs.append(p.stdout)
        self.assertEqual(outs[0], outs[1])
        with open(self.path("s.npy"), "wb") as f:
            f.write(outs[0])
        ref = x.astype(np.float64) + annotated_pe(64, 16).numpy()[None]
        self.assert_close(np.load(self.path("s.npy")), ref, rtol=1e-6, atol=1e-6)


class TestErrors(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(0)
        np.save(self.path("x.npy"), rng.standard_normal((2, 6, 8)))
        np.save(self.path("odd.npy"), rng.standard_normal((2, 6, 7)))
        np.save(self.path("ints.npy"), np.zeros((2, 6, 8), np.int32))
        np.save(self.path("rank4.npy"), rng.standard_normal((1, 2, 6, 8)))
        nan = rng.standard_normal((2, 6, 8))
        nan[1, 2, 3] = np.nan
        np.save(self.path("nan.npy"), nan)
        np.save(self.path("short.npy"), rng.standard_normal((5, 8)))
        np.save(self.path("wide.npy"), rng.standard_normal((10, 9)))
        np.save(self.path("flat.npy"), rng.standard_normal((80,)))
        with open(self.path("y.npy"), "wb") as f:
            f.write(b"keep")
        self.before = sorted(os.listdir(self.tmp))

    def fails(self, status, match, x, *args):
        self.assert_fails(status, "add", self.path(x), "-o", self.path("y.npy"),
                          *[self.path(a) if a.endswith(".npy") else a for a in args], match=match)
        self.assert_no_new_files(self.before)
        with open(self.path("y.npy"), "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_bad_input(self):
        self.fails(3, r"--table: the learned table holds 5 positions, but .* needs positions 0 "
                      r"to 5", "x.npy", "--table", "short.npy")
        self.fails(3, r"--table: the learned table holds 5 positions.* 2 to 7", "x.npy",
                   "--table", "short.npy", "--start", "2")
        self.fails(3, r"--table: expected a learned float table \[max_len, 8\]", "x.npy",
                   "--table", "wide.npy")
        self.fails(3, r"--table: expected a learned float table", "x.npy", "--table", "flat.npy")
        self.fails(3, r"even model dimension", "odd.npy", "--table", "sinusoidal")
        self.fails(3, r"expected float embeddings", "ints.npy", "--table", "sinusoidal")
        self.fails(3, r"expected embeddings of rank 3", "rank4.npy", "--table", "sinusoidal")
        self.fails(3, r"NaN or Inf", "nan.npy", "--table", "sinusoidal")

    def test_bad_options(self):
        self.fails(2, r"--scale abc", "x.npy", "--table", "sinusoidal", "--scale", "abc")
        self.fails(2, r"--scale inf", "x.npy", "--table", "sinusoidal", "--scale", "inf")
        self.fails(2, r"--base: only for --table sinusoidal", "x.npy", "--table", "short.npy",
                   "--base", "100")
        self.fails(2, r"--axes bhd", "x.npy", "--table", "sinusoidal", "--axes", "bhd")
        self.fails(2, r"--start: must be from 0", "x.npy", "--table", "sinusoidal", "--start",
                   "-1")

    def test_allow_nonfinite(self):
        self.run_ok("add", self.path("nan.npy"), "--table", "sinusoidal", "--allow-nonfinite",
                    "-o", self.path("z.npy"))
        self.assertTrue(np.isnan(np.load(self.path("z.npy"))[1, 2, 3]))


if __name__ == "__main__":
    unittest.main()
