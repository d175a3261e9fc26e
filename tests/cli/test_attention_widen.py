"""`posenc attention` with f16 or bf16 K and V: used in place of their mapped files and
widened to f32 one key block at a time (src/ops/widen.hpp, vectorised, the variant
picked as for the RoPE kernels). Widening is exact, so the output must be byte for
byte the one computed from the same values stored as f32, for every variant
(POSENC_ROPE_ISA=base, avx2, avx512), for decode (sq 1) and small sq, bhsd and bshd,
grouped heads, in place and in chunks; and attention by a float64 numpy reference."""
import os
import unittest

import numpy as np

from posenc_testlib import PosencTestCase, to_bf16_values

VARIANTS = ("base", "avx2", "avx512")


class AttentionWidenTest(PosencTestCase):
    def make(self, dtype, hq, hk, sq, sk, d=64, axes="bhsd", seed=0):
        """Q (f32 NPY), K and V stored as `dtype` (f16 NPY or bf16 HDF5) and the same
        values as f32 NPY. Returns (q, k_low, v_low, k_f32, v_f32, arrays)."""
        rng = np.random.default_rng(seed)

        def shape(h, s):
            return (1, h, s, d) if axes == "bhsd" else (1, s, h, d)

        q = self.npy("q.npy", rng.standard_normal(shape(hq, sq)).astype(np.float32))
        refs, exact = [], {}
        for name in ("k", "v"):
            x = rng.standard_normal(shape(hk, sk)).astype(np.float32)
            x = x.astype(np.float16).astype(np.float32) if dtype == "f16" else to_bf16_values(x)
            exact[name] = x
            f32 = self.npy(f"{name}32.npy", x)
            if dtype == "f16":
                low = self.npy(f"{name}16.npy", x.astype(np.float16))
            else:  # numpy has no bf16: posenc writes it, from values it holds exactly
                low = self.path(f"{name}.h5") + f":/{name}"
                self.run_ok("convert", f32, "--dtype", "bf16", "-o", low, "--force")
            refs.append((low, f32))
        return q, refs[0][0], refs[1][0], refs[0][1], refs[1][1], exact

    def check(self, dtype, hq, hk, sq, sk, axes="bhsd"):
        q, kl, vl, k32, v32, exact = self.make(dtype, hq, hk, sq, sk, axes=axes)
        extra = ["--axes", axes]
        want = self.output_lse_bytes(q, k32, v32, "f32", *extra)
        what = f"{dtype} hq {hq} hk {hk} sq {sq} sk {sk} {axes}"
        for isa in VARIANTS:
            for threads in ("1", "2"):
                got = self.output_lse_bytes(q, kl, vl, f"{isa}{threads}", "-j", threads, *extra,
                                     env={"POSENC_ROPE_ISA": isa})
                self.assertTrue(got == want, f"{what}: {isa} -j {threads} differs from f32")
        # In chunks (a budget below K and V, so they are not mapped, that holds a chunk of
        # one key block: 1024 keys of K and V as stored and converted to the f64
        # arithmetic), the same bytes.
        kv_bytes = 2 * hk * sk * 64 * 2
        one_block = 1024 * 2 * hk * 64 * (2 + 8)
        self.assertLess(one_block, kv_bytes, "K and V too short for a budget below them")
        budget = f"{(kv_bytes + one_block) // 2048}K"
        chunked = self.output_lse_bytes(q, kl, vl, "chunked", "--max-memory", budget, *extra)
        self.assertTrue(chunked == want, f"{what}: chunked differs from f32")
        # And it is attention: float64 numpy on the same values.
        qa = np.load(q).astype(np.float64)
        ka, va = exact["k"].astype(np.float64), exact["v"].astype(np.float64)
        if axes == "bshd":
            qa, ka, va = (x.transpose(0, 2, 1, 3) for x in (qa, ka, va))
        ka, va = (np.repeat(x, hq // hk, axis=1) for x in (ka, va))
        s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(qa.shape[-1])
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ va
        if axes == "bshd":
            ref = ref.transpose(0, 2, 1, 3)
        out = np.load(self.path("f32_output.npy"))
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5, err_msg=what)

    def test_f16_decode(self):
        self.check("f16", hq=4, hk=2, sq=1, sk=9000)
        self.check("f16", hq=4, hk=4, sq=1, sk=9001, axes="bshd")

    def test_f16_small_sq(self):
        self.check("f16", hq=2, hk=1, sq=16, sk=17000)

    def test_bf16_decode(self):
        self.check("bf16", hq=4, hk=2, sq=1, sk=9000)
        self.check("bf16", hq=2, hk=2, sq=3, sk=9217, axes="bshd")

    def test_f16_decode_f32_arithmetic(self):
        # Under --precision f32 with AVX-512, f16 K and V are used in place and widened in
        # registers by the products (heads four, two and one at a time; keys past the
        # last group of 4 or 8, d with a group of 4 first, dv not a multiple of 16 and
        # blocks seen in part taking the other ways): the bytes of the same values stored
        # as f32 for every variant and thread count, and attention by float64 numpy.
        for hq, hk, sk, d, dv, extra in ((6, 2, 9001, 68, 80, ()),
                                         (4, 4, 4099, 128, 72, ("--window", "3000,0")),
                                         (8, 1, 2053, 32, 16, ())):
            rng = np.random.default_rng(sk)
            q = self.npy("q.npy", rng.standard_normal((1, hq, 1, d)).astype(np.float32))
            k = rng.standard_normal((1, hk, sk, d)).astype(np.float16)
            v = rng.standard_normal((1, hk, sk, dv)).astype(np.float16)
            kl, vl = self.npy("k16.npy", k), self.npy("v16.npy", v)
            k32 = self.npy("k32.npy", k.astype(np.float32))
            v32 = self.npy("v32.npy", v.astype(np.float32))
            args = ("--precision", "f32", *extra)
            want = self.output_lse_bytes(q, k32, v32, "f32", *args)
            what = f"hq {hq} hk {hk} sk {sk} d {d} dv {dv} {' '.join(extra)}"
            for isa in VARIANTS:
                for threads in ("1", "2"):
                    got = self.output_lse_bytes(q, kl, vl, f"{isa}{threads}", "-j", threads,
                                                *args, env={"POSENC_ROPE_ISA": isa})
                    self.assertTrue(got == want, f"{what}: {isa} -j {threads} differs from f32")
            qa = np.load(q).astype(np.float64)
            ka, va = (np.repeat(x.astype(np.float64), hq // hk, axis=1) for x in (k, v))
            s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(d)
            if extra:  # keys within 3000 before the query (at sk - 1), bottom-right
                s[..., : sk - 1 - 3000] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            ref = (p / p.sum(-1, keepdims=True)) @ va
            out = np.load(self.path("f32_output.npy"))
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-6, err_msg=what)
        # NaN or Inf named as before.
        for name in ("k", "v"):
            bad = (k if name == "k" else v).copy()
            bad[0, hk - 1, sk - 5, 3] = np.inf if name == "k" else np.nan
            path = self.npy(f"{name}16.npy", bad)
            for isa in VARIANTS:
                self.assert_fails(3, "attention", "-q", q, "-k", kl, "-v", vl, "--emit",
                                  "output", "--precision", "f32", "-o", self.path("bad.npy"),
                                  match=rf"^posenc: error: {name}: contains NaN or Inf",
                                  env={"POSENC_ROPE_ISA": isa})
            self.npy(f"{name}16.npy", k if name == "k" else v)
            del path

    def test_nonfinite_f16_keys_named(self):
        q, kl, vl, _, _, exact = self.make("f16", hq=2, hk=2, sq=1, sk=4000)
        for name, path in (("k", kl), ("v", vl)):
            x = exact[name].astype(np.float16)
            x[0, 1, 3000, 5] = np.inf if name == "k" else np.nan
            np.save(path, x)
            for isa in VARIANTS:
                self.assert_fails(3, "attention", "-q", q, "-k", kl, "-v", vl, "--emit",
                                  "output", "-o", self.path("bad.npy"),
                                  match=rf"^posenc: error: {name}: contains NaN or Inf",
                                  env={"POSENC_ROPE_ISA": isa})
            np.save(path, exact[name].astype(np.float16))
        self.assertFalse(os.path.exists(self.path("bad.npy")))

    def test_budget_counts_no_widened_copy(self):
        # Probs keep the whole run in memory. K and V as f16 (2 MiB) are widened per key
        # block, so a 3 MiB budget holds the run (a whole f32 copy would need 4 MiB
        # more); as f64 (8 MiB) they are converted whole into float32 arithmetic (4 MiB
        # more), which 11 MiB does not hold and 13 MiB does.
        rng = np.random.default_rng(3)
        q = self.npy("q.npy", rng.standard_normal((1, 2, 1, 64)).astype(np.float32))
        kv = rng.standard_normal((1, 2, 4096, 64))
        k16 = self.npy("k16.npy", kv.astype(np.float16))
        v16 = self.npy("v16.npy", kv[:, ::-1].astype(np.float16))
        out = self.path("p.npy")
        self.run_ok("attention", "-q", q, "-k", k16, "-v", v16, "--emit", "probs", "-o", out,
                    "--max-memory", "3M")
        k64, v64 = self.npy("k64.npy", kv), self.npy("v64.npy", kv[:, ::-1].copy())
        self.assert_fails(3, "attention", "-q", q, "-k", k64, "-v", v64, "--emit", "probs",
                          "-o", self.path("refused.npy"), "--precision", "f32",
                          "--max-memory", "11M",
                          match=r"^posenc: error: probs would need .* > --max-memory")
        self.assertFalse(os.path.exists(self.path("refused.npy")))
        self.run_ok("attention", "-q", q, "-k", k64, "-v", v64, "--emit", "probs", "-o",
                    self.path("f64.npy"), "--precision", "f32", "--max-memory", "13M")


if __name__ == "__main__":
    unittest.main()
