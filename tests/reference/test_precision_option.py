"""`--precision` as the man page documents it, checked tightly enough that ignoring the
option fails (kept apart from the other tests so that a successor option, such as a
framework-arithmetic switch, can take these checks over).

- `rope --precision f32`: "the float64 frequency rounded to f32, the angle as an f32
  product of f32 position and frequency, cos and sin and the attention factor in f32,
  and the rotation in f32", the result rounded once more for f16 or bf16. Reference in
  numpy float32, operation by operation. A float32 cos or sin is not correctly rounded
  (glibc's cosf and sinf err by up to 0.56 ulp), so where libm's float64 value lies within
  0.1 f32 ulp of the midpoint of two f32 values either may be used; every output must
  equal, bit for bit, the result of one of those choices, on every RoPE kernel variant.
- `table rope --precision f32`: angles formed in f32 as above, cos and sin of that angle
  evaluated in float64 and rounded once to the output type.
- `attention --precision f64` on f32 inputs: outputs are the float64 results rounded
  once, as the default gives them (the exact test is in test_exact_attention.py; here:
  `--precision f32` on the same inputs differs). `--precision f32` on f64 inputs: float32
  arithmetic, within its error bound of the reference and measurably off the float64
  result.
"""
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase
from reference_attention import U32, U64, attention_reference
from reference_rope import default_inv, mcos, msin, pair_index, yarn_inv
from rounding import EPS64, VECTORISED, assert_rounded_once, report_skipped_variants, round_to

F32 = np.float32


def f32_candidates(v):
    """The f32 values a float32 cos or sin with an error below 0.6 ulp (glibc's cosf and
    sinf: 0.56) may return for the float64 value v: the nearest, and the other neighbour
    when v lies within 0.1 ulp of the midpoint between them."""
    near = v.astype(F32)
    other = np.where(v > near.astype(np.float64), np.nextafter(near, F32(np.inf)),
                     np.nextafter(near, F32(-np.inf)))
    ulp = np.abs(other.astype(np.float64) - near.astype(np.float64))
    mid_distance = np.abs(np.abs(v - near.astype(np.float64)) - ulp / 2)
    return near, np.where(mid_distance < 0.1 * ulp, other, near)


def rope_f32(x32, pos, inv, style, af=1.0):
    """The rotation in f32 (numpy float32 ufuncs, one rounding per operation): angle
    f32(p) * f32(w), cos and sin in f32 times the f32 attention factor, products and
    sums. Returns the candidate outputs [4, ...] (every choice of cos and sin among
    their f32 candidates)."""
    a = (np.asarray(pos, dtype=np.int64).astype(F32)[..., None] * inv.astype(F32))
    a = a.astype(np.float64)
    cs = [[c * F32(af) for c in f32_candidates(f(a))] for f in (mcos, msin)]
    a_idx, b_idx = pair_index(style, 2 * len(inv))
    xa, xb = x32[..., a_idx], x32[..., b_idx]
    out = []
    for c in cs[0]:
        for s in cs[1]:
            y = x32.copy()
            y[..., a_idx] = xa * c - xb * s
            y[..., b_idx] = xb * c + xa * s
            out.append(y)
    return np.stack(out)


class RopePrecisionF32(PosencTestCase):
    @classmethod
    def setUpClass(cls):
        cls.variants = report_skipped_variants(BIN, "test_precision_option")

    def test_rope_f32_arithmetic_bit_for_bit(self):
        rng = np.random.default_rng(21)
        shape = (2, 40, 3, 64)  # bshd
        x = (rng.standard_normal(shape) * 3).astype(F32)
        np.save(self.path("x.npy"), x)
        np.save(self.path("x16.npy"), x.astype(np.float16))
        pos = np.broadcast_to(np.arange(1000, 1040)[None, :, None], shape[:-1])
        for style, r, scaling in (("neox", 64, []), ("gptj", 32, []),
                                  ("neox", 64, ["--scaling", "yarn", "--factor", 4,
                                                "--original-max-pos", 512])):
            if scaling:
                inv, af = yarn_inv(10000.0, r, 4.0, 512)
            else:
                inv, af = default_inv(10000.0, r), 1.0
            args = ["--axes", "bshd", "--start", 1000, "--style", style, "--rotary-dim", r,
                    *scaling]
            cand = rope_f32(x, pos, inv, style, af)
            cand16 = rope_f32(x.astype(np.float16).astype(F32), pos, inv, style, af)
            # The option has teeth: the float64 rotation rounded to f32 differs a lot.
            y64 = self.rope_f64_reference(x, pos, inv, style, af)
            self.assertGreater(np.count_nonzero(y64 != cand[0]), cand[0].size // 10)
            for isa, env in self.variants:
                for src, out, c in (("x.npy", "f32", cand), ("x.npy", "f16", cand),
                                    ("x.npy", "bf16", cand), ("x16.npy", "f16", cand16)):
                    got = self.run_rope(src, out, args, env).astype(np.float64)
                    want = round_to(c.astype(np.float64), out)
                    bad = ~(got[None] == want).any(0)
                    self.assertFalse(bad.any(), f"kernel {isa}, {style} R={r} {scaling} {src} -> "
                                     f"{out}: {bad.sum()} of {bad.size} outputs are none of "
                                     f"the f32 candidates, first at "
                                     f"{np.unravel_index(np.argmax(bad), bad.shape)}")

    @staticmethod
    def rope_f64_reference(x, pos, inv, style, af):
        from reference_rope import rope
        y, _ = rope(x.astype(np.float64), pos, inv, style, af)
        return y.astype(F32)

    def run_rope(self, src, out, args, env):
        o = self.path("y.h5")
        if os.path.exists(o):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(o)
        self.run_ok("rope", self.path(src), "-o", o + ":/y", "--precision", "f32", "--dtype",
                    out, *args, env=env)
        with h5py.File(o, "r") as f:
            return f["y"][()]

    def test_a_vectorised_kernel_variant_was_tested(self):
        ran = [isa for isa, _ in self.variants]
        self.assertTrue(any(isa in VECTORISED for isa in ran), f"only {ran} ran")


class TablePrecisionF32(PosencTestCase):
    def test_angles_in_f32_cos_rounded_once(self):
        n, start, d = 64, 70_000, 64
        inv = default_inv(10000.0, d)
        a32 = np.arange(start, start + n).astype(F32)[:, None] * inv.astype(F32)
        a = a32.astype(np.float64)
        c = mcos(a)
        # An f64 angle differs from the f32 one by up to 2e-3 here: no overlap.
        a64 = np.arange(start, start + n, dtype=np.float64)[:, None] * inv
        self.assertGreater(np.abs(mcos(a64) - c).max(), 1e-4)
        for dt in ("f32", "f16", "bf16", "f64"):
            out = self.path(f"t_{dt}.h5")
            if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
                os.remove(out)
            self.run_ok("table", "rope", "--positions", n, "--start", start, "--dim", d,
                        "--emit", "cos", "--half-width", "--precision", "f32", "--dtype", dt,
                        "-o", out + ":/t")
            with h5py.File(out, "r") as f:
                got = f["t"][()]
            assert_rounded_once(self, got, c, 4 * EPS64 * np.abs(c), dt,
                                f"table rope --precision f32 --dtype {dt}",
                                max_ambiguous=1.0 if dt == "f64" else 1e-3)


class AttentionPrecision(PosencTestCase):
    def attention(self, q, k, v, *args):
        for name, a in (("q", q), ("k", k), ("v", v)):
            np.save(self.path(f"{name}.npy"), a)
        out = self.path("out.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v",
                    self.path("v.npy"), "--emit", "probs,output,lse", "-o", out, *args)
        with h5py.File(out, "r") as f:
            return {n: f[n][()] for n in f}

    def test_precision_f64_on_f32_inputs(self):
        rng = np.random.default_rng(22)
        q, k, v = (rng.standard_normal((1, 2, 24, 64)).astype(F32) for _ in range(3))
        values, margins = attention_reference(*(a.astype(np.float64) for a in (q, k, v)))
        got = self.attention(q, k, v, "--precision", "f64")
        self.assertEqual(got["lse"].dtype, np.float32)
        for n in ("probs", "output", "lse"):
            assert_rounded_once(self, got[n], values[n], margins[n], "f32", f"--precision f64 {n}")
        # Float32 arithmetic gives other bits: the option is not a no-op.
        fast = self.attention(q, k, v, "--precision", "f32")
        self.assertEqual(fast["lse"].dtype, np.float32)
        self.assertGreater(np.count_nonzero(fast["output"] != got["output"]), 100)

    def test_precision_f32_on_f64_inputs(self):
        rng = np.random.default_rng(23)
        q, k, v = (rng.standard_normal((1, 2, 24, 64)) for _ in range(3))
        got = self.attention(q, k, v, "--precision", "f32")
        self.assertEqual(got["output"].dtype, np.float64)
        self.assertEqual(got["lse"].dtype, np.float64)
        v32, m32 = attention_reference(q, k, v, u=U32)
        v64, m64 = attention_reference(q, k, v, u=U64)
        for n in ("probs", "output"):
            assert_rounded_once(self, got[n], v32[n], m32[n], "f64", f"--precision f32 {n}",
                                max_ambiguous=1.0)
            # Float32 arithmetic: well outside the float64 bound somewhere.
            self.assertGreater(np.count_nonzero(np.abs(got[n] - v64[n]) > 1000 * m64[n]), 10, n)


if __name__ == "__main__":
    unittest.main()
