"""`posenc rope --arith ggml` against ggml's own CPU rope code (ggml-cpu/ops.cpp and
ggml.c), compiled by the build as ggml's CPU backend is built by default
(tests/reference/ggml_rope_ref.cpp, GCC -O3 -march=native), with the op parameters
llama.cpp derives from a HF config: freq_scale = 1/factor (linear, yarn), ext_factor 1
for yarn, attn_factor = attention factor / (1 + 0.1 ln factor) when it differs from
YaRN's default, llama3's rope_freqs as convert_hf_to_gguf.py computes them (in torch
here), longrope's factor lists as float32 freq_factors.

Tolerance: 0 ulp (f32 and f16 storage, normal and neox modes, partial rotary, inverse,
positions up to 131071).
"""
import math
import os
import subprocess
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

REF = os.environ.get("POSENC_GGML_REF", "")


def cpu_has_fma():
    try:
        with open("/proc/cpuinfo") as f:
            return " fma " in f.read()
    except OSError:
        return False


def llama3_rope_freqs(base, dim, factor, lff, hff, l0):
    """convert_hf_to_gguf.py's rope_freqs for llama3 scaling."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    low_freq_wavelen = l0 / lff
    high_freq_wavelen = l0 / hff
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (l0 / wavelen - lff) / (hff - lff)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(rope_factors, dtype=torch.float32).numpy()


def f32(x):
    return float(np.float32(x))


RNG = np.random.default_rng(5)
LONG = np.round(RNG.uniform(1.0, 20.0, 64), 4)

# name, posenc options, op parameters {freq_base, freq_scale, ext_factor, attn_factor,
# beta_fast, beta_slow, n_ctx_orig}, freq_factors
CASES = [
    ("none", ["--base", "10000"], dict(freq_base=10000.0), None),
    ("linear", ["--scaling", "linear", "--factor", "4"],
     dict(freq_base=10000.0, freq_scale=f32(np.float32(1) / np.float32(4))), None),
    ("llama3.1", ["--base", "500000", "--scaling", "llama3", "--factor", "8", "--original-max-pos",
                  "8192"],
     dict(freq_base=500000.0), llama3_rope_freqs(500000.0, 128, 8.0, 1.0, 4.0, 8192)),
    ("yarn", ["--base", "1000000", "--scaling", "yarn", "--factor", "4", "--original-max-pos",
              "32768"],
     dict(freq_base=1000000.0, freq_scale=f32(np.float32(1) / np.float32(4)), ext_factor=1.0,
          n_ctx_orig=32768), None),
    ("yarn-mscale", ["--scaling", "yarn", "--factor", "40", "--original-max-pos", "4096",
                     "--mscale", "0.707", "--mscale-all-dim", "1"],
     dict(freq_base=10000.0, freq_scale=f32(np.float32(1) / np.float32(40)), ext_factor=1.0,
          n_ctx_orig=4096,
          attn_factor=f32((0.1 * 0.707 * math.log(40) + 1) / (0.1 * math.log(40) + 1)
                          / (0.1 * math.log(40) + 1))), None),
    ("longrope", ["--scaling", "longrope", "--original-max-pos", "4096", "--attention-factor",
                  "1.19", "--long-factor", ",".join(map(str, LONG)),
                  "--short-factor", ",".join(["1"] * 64)],
     dict(freq_base=10000.0, attn_factor=f32(1.19)), LONG.astype(np.float32)),
]


@unittest.skipUnless(REF and cpu_has_fma(),
                     "needs the ggml reference built for an x86-64 CPU with FMA")
class GgmlRope(PosencTestCase):
    def reference(self, x, pos, n_dims, mode, op, ff, forward=True):
        b, s, h, d = x.shape
        x.tofile(self.path("in.bin"))
        pos.astype(np.int32).tofile(self.path("pos.bin"))
        ffarg = "-"
        if ff is not None:
            ff.astype(np.float32).tofile(self.path("ff.bin"))
            ffarg = self.path("ff.bin")
        p = dict(freq_base=10000.0, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0,
                 beta_fast=32.0, beta_slow=1.0, n_ctx_orig=0)
        p.update(op)
        subprocess.run(
            [REF, "f16" if x.dtype == np.float16 else "f32", str(mode), str(n_dims), str(d),
             str(h), str(s), str(b), repr(p["freq_base"]), repr(p["freq_scale"]),
             repr(p["ext_factor"]), repr(p["attn_factor"]), repr(p["beta_fast"]),
             repr(p["beta_slow"]), str(p["n_ctx_orig"]), "1" if forward else "0",
             self.path("in.bin"), self.path("pos.bin"), ffarg, self.path("out.bin")], check=True)
        return np.fromfile(self.path("out.bin"), dtype=x.dtype).reshape(x.shape)

    def posenc(self, x, pos, n_dims, mode, args, inverse=False):
        np.save(self.path("x.npy"), x)
        np.save(self.path("ids.npy"), pos)
        self.run_ok("rope", self.path("x.npy"), "-o", self.path("y.npy"), "--axes", "bshd",
                    "--arith", "ggml", "--style", "gptj" if mode == 0 else "neox",
                    "--rotary-dim", str(n_dims), "--position-ids", self.path("ids.npy"), *args,
                    *(["--inverse"] if inverse else []))
        return np.load(self.path("y.npy"))

    def check(self, name, args, op, ff, dtype, mode, n_dims, d=128, inverse=False, s=160):
        pos = np.sort(RNG.choice(131071, size=s - 1, replace=False))
        pos = np.append(pos, 131071).astype(np.int64)
        x = (RNG.standard_normal((1, s, 2, d)) * 3).astype(dtype)
        if ff is not None:
            ff = ff[: n_dims // 2]
        want = self.reference(x, pos, n_dims, mode, op, ff, forward=not inverse)
        got = self.posenc(x, pos, n_dims, mode, args, inverse)
        view = np.uint16 if dtype == np.float16 else np.uint32
        with self.subTest(case=name, dtype=dtype.__name__, mode=mode, n_dims=n_dims,
                          inverse=inverse):
            self.assertEqual(int((got.view(view) != want.view(view)).sum()), 0)

    def test_every_mapping_both_modes_both_types(self):
        for name, args, op, ff in CASES:
            for dtype in (np.float32, np.float16):
                for mode in (0, 2):
                    self.check(name, args, op, ff, dtype, mode, 128)

    def test_partial_rotary_and_vector_tails(self):
        # n_dims/2 mod 4 != 0 exercises the f32 normal-mode epilogue that does not fuse.
        for n_dims, d in ((64, 128), (30, 32), (12, 16), (6, 8), (4, 4)):
            for dtype in (np.float32, np.float16):
                for mode in (0, 2):
                    self.check("none", ["--base", "10000"], dict(freq_base=10000.0), None, dtype,
                               mode, n_dims, d)

    def test_yarn_partial(self):
        self.check("yarn", CASES[3][1], CASES[3][2], None, np.float32, 2, 64, d=96)

    def test_inverse_is_ggml_rope_back(self):
        for dtype in (np.float32, np.float16):
            self.check("yarn", CASES[3][1], CASES[3][2], None, dtype, 0, 128, inverse=True)


class GgmlErrors(PosencTestCase):
    def test_refused(self):
        x = self.path("x.npy")
        np.save(x, np.ones((4, 8), np.float32))
        np.save(self.path("d.npy"), np.ones((4, 8), np.float64))
        self.assert_fails(3, "rope", self.path("d.npy"), "-o", self.path("y.npy"), "--arith",
                          "ggml", match="f32 or f16")
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "ggml", "--scaling",
                          "dynamic", "--factor", "2", "--max-pos", "4096", match="dynamic")
        self.assert_fails(2, "table", "rope", "--dim", "8", "--arith", "ggml", "--emit",
                          "inv-freq", "-o", self.path("t.npy"), match="inv-freq")
        np.save(self.path("ids.npy"), np.array([0, 1, 2, 2**31], np.int64))
        self.assert_fails(3, "rope", x, "-o", self.path("y.npy"), "--arith", "ggml",
                          "--position-ids", self.path("ids.npy"), match="int32")
        self.assertFalse(os.path.exists(self.path("y.npy")))
        self.assertFalse(os.path.exists(self.path("t.npy")))


if __name__ == "__main__":
    unittest.main()
