"""`posenc attention` outputs against a float64 reference, element for element.

Claims (man page): float64 arithmetic is the default for every input dtype: logits,
probs and output are the float64 results rounded once to --dtype (Q's dtype by default),
lse rounded once to f32 (f64 when the output type is f64), on every path (in memory,
streamed in place or in chunks, bshd, packed sequences, ALiBi, T5); in float32 arithmetic
(`--precision f32`, the opt-in for speed) they are float32 results, rounded once more
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
from reference_attention import U32, U64, attention_reference, window_keep
from reference_bias import get_slopes, t5_bucket
from reference_rope import default_inv, rope
from rounding import assert_rounded_once


def biased_reference(q, k, v, bias, keep=None, scale=None, bias_margin=0.0):
    """attention_reference with an additive bias [.., sq, sk] (within bias_margin of
    its exact value), in float64: the bounds of reference_attention.py, the bias adding
    one rounding to each logit."""
    values, margins = attention_reference(q, k, v, scale=scale)
    s = values["logits"] + bias
    ms = margins["logits"] + bias_margin + 2 * U64 * np.abs(s)
    if keep is not None:
        keep = np.broadcast_to(keep, s.shape)
        s, ms = np.where(keep, s, -np.inf), np.where(keep, ms, 0.0)
    hq, sk = q.shape[1], k.shape[-2]
    v = np.repeat(v, hq // k.shape[1], axis=1)
    top = s.max(-1, keepdims=True)
    z = np.exp(s - top).sum(-1, keepdims=True)
    p = np.exp(s - top) / z
    row = ms.max(-1, keepdims=True)
    mp = p * (2 * row + (sk + 8) * 2 * U64)
    lse = (top + np.log(z))[..., 0]
    return ({"logits": s, "probs": p, "output": p @ v, "lse": lse},
            {"logits": ms, "probs": mp,
             "output": mp @ np.abs(v) + (sk + 4) * 2 * U64 * (p @ np.abs(v)),
             "lse": row[..., 0] + (sk + 8) * 2 * U64 * (1 + np.abs(lse))})


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
            self.check(got, ref, dt, "f32", f"f32 inputs, f64 arithmetic, --dtype {dt}")
        # The streamed path (no logits or probs): online softmax, the same rounding.
        got = self.attention(q, k, v, "--precision", "f64", "--causal", "--window", 5,
                             emit="output,lse")
        self.check(got, ref, "f32", "f32", "f64 arithmetic, streamed")

    def test_f64_inputs_default_arithmetic(self):
        rng = np.random.default_rng(12)
        q, k, v = (rng.standard_normal(s) for s in ((1, 2, 7, 16), (1, 2, 7, 16), (1, 2, 7, 16)))
        ref = attention_reference(q, k, v)
        for dt in ("f32", "f16"):
            got = self.attention(q, k, v, "--dtype", dt)
            self.check(got, ref, dt, "f32", f"f64 inputs, --dtype {dt}")
        self.check(self.attention(q, k, v), ref, "f64", "f64", "f64 inputs")


class TestDefaultArithmetic(ExactAttention):
    """No option: f32, f16 and bf16 inputs computed in float64 and rounded once."""

    def inputs(self, seed, hq=4, hk=2, sq=9, sk=13, d=32, dv=24):
        rng = np.random.default_rng(seed)
        return (rng.standard_normal((2, hq, sq, d)).astype(np.float32),
                rng.standard_normal((2, hk, sk, d)).astype(np.float32),
                rng.standard_normal((2, hk, sk, dv)).astype(np.float32))

    def test_f32_inputs_every_output_rounded_once(self):
        q, k, v = self.inputs(41)
        ref = attention_reference(*(a.astype(np.float64) for a in (q, k, v)),
                                  keep=window_keep(9, 13, 5, 0))
        got = self.attention(q, k, v, "--causal", "--window", 5)
        self.check(got, ref, "f32", "f32", "f32 inputs, default arithmetic")
        # The same without logits and probs: the online softmax over the keys of the
        # mapped files, widened to f64 block by block.
        got = self.attention(q, k, v, "--causal", "--window", 5, emit="output,lse")
        self.check(got, ref, "f32", "f32", "f32 inputs, default arithmetic, streamed")

    def test_f32_inputs_streamed_paths_rounded_once(self):
        # sk of several key blocks, in place (mapped, read) and in chunks (a budget
        # below K and V), and bshd (strided rows).
        rng = np.random.default_rng(42)
        q = rng.standard_normal((1, 4, 3, 64)).astype(np.float32)
        k = rng.standard_normal((1, 2, 5000, 64)).astype(np.float32)
        v = rng.standard_normal((1, 2, 5000, 64)).astype(np.float32)
        ref = attention_reference(*(a.astype(np.float64) for a in (q, k, v)))
        for name, args, env in (("mapped", [], None), ("read", [], {"POSENC_KV_IO": "read"}),
                                ("chunks", ["--max-memory", "4M"], {"POSENC_KV_IO": "map"})):
            out = self.path("o.h5")
            if os.path.exists(out):
                os.remove(out)
            self.run_ok("attention", "-q", self.save("q.npy", q), "-k", self.save("k.npy", k),
                        "-v", self.save("v.npy", v), "--emit", "output,lse", "-o", out, *args,
                        env=env)
            with h5py.File(out, "r") as f:
                got = {n: f[n][()] for n in f}
            # The reference's worst-case bound leaves a few outputs near 0 undecided.
            self.check(got, ref, "f32", "f32", f"decode, {name}", max_ambiguous=0.05)
        tr = (0, 2, 1, 3)
        got = self.attention(*(np.ascontiguousarray(a.transpose(tr)) for a in (q, k, v)),
                             "--axes", "bshd", emit="output,lse")
        got["output"] = got["output"].transpose(tr)
        self.check(got, ref, "f32", "f32", "decode, bshd", max_ambiguous=0.05)

    def test_f16_and_bf16_inputs_rounded_once(self):
        q, k, v = self.inputs(43)
        for dt in ("f16", "bf16"):
            if dt == "f16":
                low = [a.astype(np.float16) for a in (q, k, v)]
                refs = [self.save(f"{n}16.npy", a) for n, a in zip("qkv", low)]
                ref = attention_reference(*(a.astype(np.float64) for a in low))
            else:
                refs = []
                for n, a in zip("qkv", (q, k, v)):
                    refs.append(self.path(f"{n}.h5") + ":/x")
                    self.run_ok("convert", self.save(f"{n}32.npy", a), "--dtype", "bf16", "-o",
                                refs[-1], "--force")
                with_bf16 = []
                for r in refs:
                    with h5py.File(r.split(":")[0], "r") as f:
                        with_bf16.append(f["x"][()].astype(np.float64))
                ref = attention_reference(*with_bf16)
            for emit in ("logits,probs,output,lse", "output,lse"):
                out = self.path(f"o{dt}.h5")
                if os.path.exists(out):
                    os.remove(out)
                self.run_ok("attention", "-q", refs[0], "-k", refs[1], "-v", refs[2],
                            "--emit", emit, "-o", out)
                with h5py.File(out, "r") as f:
                    got = {n: f[n][()] for n in f}
                self.check(got, ref, dt, "f32", f"{dt} inputs, default arithmetic, {emit}")

    def test_packed_sequences_alibi_t5_rounded_once(self):
        q, k, v = self.inputs(44, sq=12, sk=12)
        q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
        seg = np.repeat(np.arange(3), [5, 3, 4])
        keep = (seg[:, None] == seg[None, :]) & np.tri(12, dtype=bool)
        cu = self.save("cu.npy", np.array([0, 5, 8, 12], np.int32))
        got = self.attention(q, k, v, "--cu-seqlens", cu, "--causal")
        self.check(got, attention_reference(q64, k64, v64, keep=keep), "f32", "f32",
                   "packed sequences")
        # ALiBi (4 heads: slopes 2^-2, 2^-4, ..., exact) and T5 buckets (f32 table, exact).
        i, j = np.arange(12)[:, None], np.arange(12)[None, :]
        slopes = np.array(get_slopes(4))[:, None, None]
        got = self.attention(q, k, v, "--alibi", "symmetric", "--causal")
        ref = biased_reference(q64, k64, v64, -slopes * np.abs(i - j), keep=np.tri(12) > 0)
        self.check(got, ref, "f32", "f32", "ALiBi")
        emb = np.random.default_rng(45).standard_normal((32, 4)).astype(np.float32)
        got = self.attention(q, k, v, "--t5-bias", self.save("t5.npy", emb), "--t5-bidirectional",
                             "--scale", 1)
        import torch
        bucket = t5_bucket(torch.tensor(j - i), True, 32, 128).numpy()
        bias = emb.astype(np.float64)[bucket].transpose(2, 0, 1)
        self.check(got, biased_reference(q64, k64, v64, bias, scale=1.0), "f32", "f32", "T5")


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
        self.check(got, ref, "f32", "f32", "--rope --position-ids --start, f64 arithmetic",
                   max_ambiguous=1e-2)
        # The default is that arithmetic: the same bits.
        default = self.attention(q, k, v, *args)
        for n in got:
            np.testing.assert_array_equal(default[n], got[n], f"default {n}")
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
                                  mq=mq, mk=mk)
        got = self.attention(q, k, v, "--rope", "--causal", emit="probs,output,lse")
        self.check(got, ref, "f32", "f32", "demo job", max_ambiguous=1e-2)


if __name__ == "__main__":
    unittest.main()
