"""`posenc attention` outputs against a float64 reference, element for element.

Claims (man page): with float64 arithmetic (`--precision f64`, or f64 queries) logits,
probs and output are the float64 results rounded once to --dtype; in float32 arithmetic
(the default for f16, bf16 and f32 queries) they are float32 results, rounded once more
for an f16 or bf16 --dtype. `--rope` rotates Q and K first (RoPE in float64), keys at
positions start + j (or their --position-ids plus start), queries at the last sq of them.

Reference: eager attention in numpy float64 (tests/lib/reference_attention.py), RoPE
from tests/lib/reference_rope.py, each value with a bound on its distance from posenc's
result in the arithmetic used (stated in those files). Float64 arithmetic leaves about
2^-40 relative, so f32, f16 and bf16 outputs must equal the reference rounded once (at
most 1e-3 of the elements within the margin of a boundary, accepted either way); in
float32 arithmetic every output must lie between the roundings of reference - margin and
reference + margin.
"""
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import SOURCE_DIR, PosencTestCase
from reference_attention import U32, attention_reference, window_keep
from reference_rope import default_inv, rope
from rounding import assert_rounded_once


class ExactAttention(PosencTestCase):
    def save(self, name, a):
        p = self.path(name)
        np.save(p, a)
        return p

    def attention(self, q, k, v, *args, emit="logits,probs,output,lse"):
        out = self.path("out.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("attention", "-q", self.save("q.npy", q), "-k", self.save("k.npy", k),
                    "-v", self.save("v.npy", v), "--emit", emit, "-o", out, *args)
        with h5py.File(out, "r") as f:
            return {name: f[name][()] for name in f}

    def check(self, got, ref, dtype, lse_dtype, msg, exact=True, max_ambiguous=1e-3):
        values, margins = ref
        for name in got:
            dt = lse_dtype if name == "lse" else dtype
            # Exact: rounded once from float64; f64 values and float32 arithmetic: within
            # the margin (every element may be "ambiguous").
            once = exact and dt != "f64"
            assert_rounded_once(self, got[name], values[name], margins[name], dt,
                                f"{msg}: {name}", max_ambiguous=max_ambiguous if once else 1.0)


class TestFloat64Arithmetic(ExactAttention):
    def test_f32_inputs_precision_f64_every_output_dtype(self):
        # GQA (4 query heads on 2 kv heads), a causal sliding window, sq != sk.
        rng = np.random.default_rng(11)
        q = rng.standard_normal((2, 4, 9, 32)).astype(np.float32)
        k = rng.standard_normal((2, 2, 13, 32)).astype(np.float32)
        v = rng.standard_normal((2, 2, 13, 24)).astype(np.float32)
        ref = attention_reference(*(a.astype(np.float64) for a in (q, k, v)),
                                  keep=window_keep(9, 13, 5, 0))
        for dt in ("f32", "f16", "bf16"):
            got = self.attention(q, k, v, "--precision", "f64", "--dtype", dt, "--causal",
                                 "--window", 5)
            self.assertEqual(set(got), {"logits", "probs", "output", "lse"})
            self.check(got, ref, dt, "f64", f"f32 inputs, f64 arithmetic, --dtype {dt}")
        # The streamed path (no logits or probs): online softmax, the same rounding.
        got = self.attention(q, k, v, "--precision", "f64", "--causal", "--window", 5,
                             emit="output,lse")
        self.check(got, ref, "f32", "f64", "f64 arithmetic, streamed")

    def test_f64_inputs_default_arithmetic(self):
        rng = np.random.default_rng(12)
        q, k, v = (rng.standard_normal(s) for s in ((1, 2, 7, 16), (1, 2, 7, 16), (1, 2, 7, 16)))
        ref = attention_reference(q, k, v)
        for dt in ("f32", "f16"):
            got = self.attention(q, k, v, "--dtype", dt)
            self.check(got, ref, dt, "f64", f"f64 inputs, --dtype {dt}")


class TestRope(ExactAttention):
    def test_rope_position_ids_with_start(self):
        # Keys at ids[b, j] + start; queries at the last sq ids of their row, + start.
        rng = np.random.default_rng(13)
        b, h, sq, sk, d = 2, 3, 5, 11, 64
        q = rng.standard_normal((b, h, sq, d)).astype(np.float32)
        k = rng.standard_normal((b, h, sk, d)).astype(np.float32)
        v = rng.standard_normal((b, h, sk, d)).astype(np.float32)
        ids = rng.integers(0, 3000, size=(b, sk)).astype(np.int64)
        start = 4
        inv = default_inv(10000.0, d)
        kpos = np.broadcast_to((ids + start)[:, None, :], (b, h, sk))
        qpos = np.broadcast_to((ids[:, -sq:] + start)[:, None, :], (b, h, sq))
        qr, mq = rope(q.astype(np.float64), qpos, inv, "neox")
        kr, mk = rope(k.astype(np.float64), kpos, inv, "neox")
        ref = attention_reference(qr, kr, v.astype(np.float64), mq=mq, mk=mk)
        args = ["--rope", "--position-ids", self.save("ids.npy", ids), "--start", start]
        got = self.attention(q, k, v, *args, "--precision", "f64")
        # Angles up to 3000 widen the RoPE margin (an ulp of doubt in each frequency):
        # about 0.2 % of the outputs are undecidable.
        self.check(got, ref, "f32", "f64", "--rope --position-ids --start, f64 arithmetic",
                   max_ambiguous=1e-2)
        # Default float32 arithmetic: within its bound (RoPE'd q, k rounded to f32 first).
        ref32 = attention_reference(qr, kr, v.astype(np.float64), u=U32,
                                    mq=mq + U32 * np.abs(qr), mk=mk + U32 * np.abs(kr))
        got = self.attention(q, k, v, *args)
        self.check(got, ref32, "f32", "f32", "--rope --position-ids --start, f32 arithmetic",
                   exact=False)
        # The ids matter (RoPE attention depends on position differences only, so --start
        # alone could not be seen here; `rope` tests it): default positions differ.
        other = self.attention(q, k, v, "--rope", "--start", start)
        self.assertGreater(np.abs(other["probs"] - got["probs"]).max(), 1e-2)

    def test_demo_job_against_the_reference(self):
        # data/demo.sh runs this command and compares it with attention on q and k that
        # posenc rotated itself; here the same run meets an independent reference.
        q, k, v = (np.load(f"{SOURCE_DIR}/data/{n}.npy") for n in ("q", "k", "v"))
        sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
        inv = default_inv(10000.0, d)
        qr, mq = rope(q.astype(np.float64), np.broadcast_to(np.arange(sk - sq, sk), q.shape[:3]),
                      inv, "neox")
        kr, mk = rope(k.astype(np.float64), np.broadcast_to(np.arange(sk), k.shape[:3]), inv,
                      "neox")
        ref = attention_reference(qr, kr, v.astype(np.float64), keep=window_keep(sq, sk, sk, 0),
                                  u=U32, mq=mq + U32 * np.abs(qr), mk=mk + U32 * np.abs(kr))
        got = self.attention(q, k, v, "--rope", "--causal", emit="probs,output,lse")
        self.check(got, ref, "f32", "f32", "demo job", exact=False)


if __name__ == "__main__":
    unittest.main()
