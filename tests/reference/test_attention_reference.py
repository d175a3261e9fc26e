"""posenc attention against independent float64 references in torch (Debian's 1.13).

The references are written from the published formulas, not from posenc's output:
- eager attention (q k^T * scale, softmax, @ v) as in the seeds' `attention()` and HF's
  eager attention, with the mask applied properly (the seeds' code discards the
  masked_fill result and fills with -1e-9 instead of -1e9, so its mask has no effect;
  here masked scores are -inf);
- the seeds' RelativeMultiHeadAttention (Shaw): index clip(j - i, -M, M) + M,
  logits += q . rk[index] (scaled with q . k), output += sum_j p_ij rv[index];
- ALiBi slopes from Press et al.'s get_slopes, T5 buckets from HF
  `_relative_position_bucket`, HF `rotate_half` RoPE, Gemma-2 soft-capping, gpt-oss
  sinks.
Tolerances: f64 rtol 1e-10; f32 rtol 1e-5 / atol 1e-6; f16 inputs against bounds derived
from the arithmetic (tests/lib/reference_attention.py): f16 outputs of the default float64
arithmetic rounded once, and of --precision f32 within its bound.
"""
import math
import os
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_attention import U32, attention_reference
from reference_bias import get_slopes, t5_bucket
from rounding import assert_rounded_once

torch.set_default_dtype(torch.float64)

F64 = dict(rtol=1e-10, atol=1e-12)
F32 = dict(rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------
# References

def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(x, positions, base=10000.0):
    """HF apply_rotary_pos_emb on [b, h, s, d] with positions [s]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def reference(q, k, v=None, scale=None, keep=None, bias=None, softcap=None, sinks=None,
              rel_k=None, rel_v=None, max_distance=None, masked_rows="zero"):
    """Attention in float64: q [b,hq,sq,d], k [b,hk,sk,d], v [b,hk,sk,dv].

    keep: bool broadcastable to [b,hq,sq,sk]; bias: additive, same. Returns logits,
    probs, output, lse as numpy float64."""
    q, k = torch.as_tensor(q).double(), torch.as_tensor(k).double()
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1)  # HF repeat_kv: query head i -> kv head i//g
    if v is not None:
        v = torch.as_tensor(v).double().repeat_interleave(hq // hk, dim=1)
    sq, sk = q.shape[2], k.shape[2]
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    raw = q @ k.transpose(-2, -1)
    if rel_k is not None or rel_v is not None:
        qpos = torch.arange(sq) + (sk - sq)  # KV-cache alignment
        idx = torch.clamp(torch.arange(sk)[None, :] - qpos[:, None],
                          -max_distance, max_distance) + max_distance  # [sq, sk]
    if rel_k is not None:
        rk = torch.as_tensor(rel_k).double()[idx]  # [sq, sk, d]
        raw = raw + torch.einsum("bhid,ijd->bhij", q, rk)
    s = raw * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + torch.as_tensor(bias).double()
    if keep is not None:
        s = s.masked_fill(~torch.as_tensor(keep).bool(), float("-inf"))
    logits = s
    if sinks is not None:
        sink_col = torch.as_tensor(sinks).double()[None, :, None, None].expand(
            s.shape[0], hq, sq, 1)
        full = torch.cat([s, sink_col], dim=-1)
    else:
        full = s
    probs_full = torch.softmax(full, dim=-1)
    lse = torch.logsumexp(full, dim=-1)
    probs = probs_full[..., :sk]
    dead = torch.isinf(full).all(dim=-1) & (full < 0).all(dim=-1)
    if masked_rows == "zero":
        probs = torch.where(dead[..., None], torch.zeros_like(probs), probs)
    out = None
    if v is not None:
        out = probs @ v
        if rel_v is not None:
            rv = torch.as_tensor(rel_v).double()[idx]  # [sq, sk, dv]
            out = out + torch.einsum("bhij,ijd->bhid", probs, rv)
    return (logits.numpy(), probs.numpy(), None if out is None else out.numpy(), lse.numpy())


def causal_keep(sq, sk, align):
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    return j <= (i + sk - sq if align == "bottom-right" else i)


# ----------------------------------------------------------------------------------

class AttentionReference(PosencTestCase):
    rng = np.random.default_rng(20240601)

    def randn(self, *shape, dtype=np.float64):
        return self.rng.standard_normal(shape).astype(dtype)

    @staticmethod
    def read_bytes(path):
        with open(path, "rb") as f:
            return f.read()

    def save(self, name, a):
        p = self.path(name)
        np.save(p, a)
        return p

    def attn(self, q, k, v=None, *args, emit="logits,probs,output,lse", threads=None):
        """Runs posenc attention; returns a dict of the emitted arrays."""
        qp, kp = self.save("q.npy", q), self.save("k.npy", k)
        cmd = []
        if threads:
            cmd += ["-j", threads]
        cmd += ["attention", "-q", qp, "-k", kp]
        if v is not None:
            cmd += ["-v", self.save("v.npy", v)]
        out = self.path("out.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        cmd += ["--emit", emit, "-o", out, *args]
        self.run_ok(*cmd)
        with h5py.File(out, "r") as f:
            return {name: f[name][()] for name in f}

    def check(self, got, ref, tol, names=("logits", "probs", "output", "lse")):
        logits, probs, out, lse = ref
        table = dict(logits=logits, probs=probs, output=out, lse=lse)
        for n in names:
            self.assertIn(n, got)
            self.assert_close(got[n], table[n], msg=n, **tol)

    # -- the seeds' attention, fixed mask -------------------------------------------

    def test_seed_attention_with_mask_f64(self):
        q, k, v = self.randn(2, 3, 6, 8), self.randn(2, 3, 6, 8), self.randn(2, 3, 6, 8)
        mask = self.rng.integers(0, 2, size=(2, 1, 6, 6)).astype(np.int64)
        mask[..., 0] = 1  # every row keeps a key
        got = self.attn(q, k, v, "--mask", self.save("m.npy", mask))
        # The seeds' code with the mask applied (masked_fill(mask == 0, -inf)).
        tq, tk, tv = map(torch.tensor, (q, k, v))
        logits = tq @ tk.transpose(-2, -1) / math.sqrt(8)
        logits = logits.masked_fill(torch.tensor(mask) == 0, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        self.assert_close(got["probs"], probs.numpy(), **F64)
        self.assert_close(got["output"], (probs @ tv).numpy(), **F64)
        self.assertEqual(got["probs"].dtype, np.float64)

    def test_relative_position_attention_seed(self):
        # The seeds' RelativeMultiHeadAttention, one batch, M = 3, sq == sk.
        q, k, v = self.randn(1, 2, 9, 4), self.randn(1, 2, 9, 4), self.randn(1, 2, 9, 4)
        rk, rv = self.randn(7, 4), self.randn(7, 4)
        got = self.attn(q, k, v, "--relative-k", self.save("rk.npy", rk), "--relative-v",
                        self.save("rv.npy", rv), "--max-distance", 3)
        tq, tk, tv = map(torch.tensor, (q, k, v))
        dist = torch.arange(9)[None, :] - torch.arange(9)[:, None]  # [len_q, len_k] = j - i
        idx = torch.clamp(dist, -3, 3) + 3
        rk_e, rv_e = torch.tensor(rk)[idx], torch.tensor(rv)[idx]
        attn1 = tq @ tk.transpose(-2, -1)
        attn2 = torch.einsum("bhid,ijd->bhij", tq, rk_e)
        probs = torch.softmax((attn1 + attn2) / math.sqrt(4), dim=-1)
        out = probs @ tv + torch.einsum("bhij,ijd->bhid", probs, rv_e)
        self.assert_close(got["probs"], probs.numpy(), **F64)
        self.assert_close(got["output"], out.numpy(), **F64)

    def test_relative_kv_cache_alignment_f32(self):
        q, k, v = self.randn(1, 2, 3, 8, dtype=np.float32), self.randn(1, 2, 11, 8, dtype=np.float32), \
            self.randn(1, 2, 11, 6, dtype=np.float32)
        rk, rv = self.randn(9, 8, dtype=np.float32), self.randn(9, 6, dtype=np.float32)
        got = self.attn(q, k, v, "--relative-k", self.save("rk.npy", rk), "--relative-v",
                        self.save("rv.npy", rv), "--causal")
        ref = reference(q, k, v, keep=causal_keep(3, 11, "bottom-right"), rel_k=rk, rel_v=rv,
                        max_distance=4)
        self.check(got, ref, F32)

    # -- GQA, causal alignments, windows, padding ------------------------------------

    def test_gqa_causal_both_alignments_sq_ne_sk(self):
        q, k, v = self.randn(2, 6, 4, 16), self.randn(2, 2, 9, 16), self.randn(2, 2, 9, 5)
        for align in ("bottom-right", "top-left"):
            got = self.attn(q, k, v, "--causal", align)
            ref = reference(q, k, v, keep=causal_keep(4, 9, align))
            self.check(got, ref, F64)
        got = self.attn(q, k, v, "--causal")  # bare flag = bottom-right
        self.check(got, reference(q, k, v, keep=causal_keep(4, 9, "bottom-right")), F64)

    def test_windows(self):
        q, k, v = self.randn(1, 2, 7, 8, dtype=np.float32), self.randn(1, 2, 12, 8, dtype=np.float32), \
            self.randn(1, 2, 12, 8, dtype=np.float32)
        i = np.arange(7)[:, None] + 12 - 7
        j = np.arange(12)[None, :]
        for left, right in ((2, 0), (3, 1), (-1, 2), (0, -1)):
            keep = np.ones((7, 12), bool)
            if left >= 0:
                keep &= j >= i - left
            if right >= 0:
                keep &= j <= i + right
            got = self.attn(q, k, v, f"--window={left},{right}")
            self.check(got, reference(q, k, v, keep=keep), F32)
        # LEFT only: RIGHT unbounded; combined with --causal gives a sliding window.
        got = self.attn(q, k, v, "--window", "3", "--causal")
        self.check(got, reference(q, k, v, keep=(j >= i - 3) & (j <= i)), F32)

    def test_key_lengths_padding(self):
        q, k, v = self.randn(3, 2, 5, 8), self.randn(3, 2, 6, 8), self.randn(3, 2, 6, 8)
        lens = np.array([6, 2, 4], dtype=np.int32)
        keep = np.arange(6)[None, None, None, :] < lens[:, None, None, None]
        got = self.attn(q, k, v, "--key-lengths", self.save("len.npy", lens))
        self.check(got, reference(q, k, v, keep=keep), F64)

    def test_masks_bool_and_additive_broadcast(self):
        q, k, v = self.randn(2, 3, 4, 8), self.randn(2, 3, 5, 8), self.randn(2, 3, 5, 8)
        # [b, 1, 1, sk] padding-style bool mask.
        keep = self.rng.integers(0, 2, size=(2, 1, 1, 5)).astype(bool)
        keep[..., 0] = True
        got = self.attn(q, k, v, "--mask", self.save("m.npy", keep))
        self.check(got, reference(q, k, v, keep=keep), F64)
        # [h, sq, sk] additive float mask (broadcast over b).
        add = self.randn(3, 4, 5)
        add[0, 1, 2] = -np.inf
        got = self.attn(q, k, v, "--mask", self.save("a.npy", add))
        self.check(got, reference(q, k, v, bias=add), F64)
        # [sk] additive f32 mask on an f64 run.
        add1 = self.randn(5, dtype=np.float32)
        got = self.attn(q, k, v, "--mask", self.save("a1.npy", add1))
        self.check(got, reference(q, k, v, bias=add1.astype(np.float64)), F64)

    # -- biases ---------------------------------------------------------------------

    def test_alibi_variants(self):
        h, sq, sk = 6, 4, 7  # 6 heads: the non-power-of-two rule
        q, k, v = self.randn(1, h, sq, 8), self.randn(1, h, sk, 8), self.randn(1, h, sk, 8)
        m = np.array(get_slopes(h))[:, None, None]
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        variants = {
            "causal": -m * (i - j),
            "symmetric": -m * np.abs(i - j),
            "bottom-right": -m * np.abs(i + sk - sq - j),
        }
        for name, bias in variants.items():
            got = self.attn(q, k, v, "--alibi", name, "--causal")
            ref = reference(q, k, v, bias=bias[None], keep=causal_keep(sq, sk, "bottom-right"))
            self.check(got, ref, F64)
        # --alibi-max-bias generalises the 8 (ggml max_bias): slopes 2^(-4(h+1)/4) for 4 heads.
        q4, k4 = self.randn(1, 4, 3, 8), self.randn(1, 4, 3, 8)
        got = self.attn(q4, k4, None, "--alibi", "symmetric", "--alibi-max-bias", 4, emit="probs")
        m4 = (2.0 ** (-4.0 * np.arange(1, 5) / 4))[:, None, None]
        i3 = np.arange(3)
        bias = -m4 * np.abs(i3[:, None] - i3[None, :])
        self.check(got, reference(q4, k4, bias=bias[None]), F64, names=("probs",))

    def test_t5_bias_both_directions_scale_one(self):
        h, sq, sk = 2, 5, 150  # distances beyond max_distance hit the last bucket
        q, k, v = self.randn(1, h, sq, 4), self.randn(1, h, sk, 4), self.randn(1, h, sk, 4)
        emb = self.randn(32, h)
        for flag, bidir in (("--t5-bidirectional", True), ("--t5-causal", False)):
            got = self.attn(q, k, v, "--t5-bias", self.save("t5.npy", emb), flag, "--scale", 1)
            qpos = torch.arange(sq)[:, None] + (sk - sq)
            rp = torch.arange(sk)[None, :] - qpos
            bucket = t5_bucket(rp, bidir, 32, 128)
            bias = torch.tensor(emb)[bucket].permute(2, 0, 1).numpy()  # [h, sq, sk]
            self.check(got, reference(q, k, v, scale=1.0, bias=bias[None]), F64)

    def test_softcap_and_sinks(self):
        q, k, v = self.randn(2, 4, 5, 8) * 3, self.randn(2, 2, 5, 8) * 3, self.randn(2, 2, 5, 8)
        sinks = self.randn(4)
        got = self.attn(q, k, v, "--softcap", 2.0, "--sinks", self.save("s.npy", sinks),
                        "--causal")
        ref = reference(q, k, v, softcap=2.0, sinks=sinks, keep=causal_keep(5, 5, "top-left"))
        self.check(got, ref, F64)
        # softcap with an additive mask: cap first, then the bias.
        add = self.randn(5, 5)
        got = self.attn(q, k, v, "--softcap", 1.5, "--mask", self.save("a.npy", add))
        self.check(got, reference(q, k, v, softcap=1.5, bias=add), F64)

    # -- fully masked rows ----------------------------------------------------------

    def test_fully_masked_rows_zero_and_nan(self):
        q, k, v = self.randn(1, 2, 4, 8), self.randn(1, 2, 6, 8), self.randn(1, 2, 6, 8)
        keep = np.ones((4, 6), bool)
        keep[2, :] = False  # row 2 sees no key
        m = self.save("m.npy", keep)
        for emit in ("logits,probs,output,lse", "output,lse"):  # materialised and streamed
            got = self.attn(q, k, v, "--mask", m, emit=emit)
            ref = reference(q, k, v, keep=keep, masked_rows="zero")
            self.check(got, ref, F64, names=emit.split(","))
            self.assertTrue(np.all(got["output"][:, :, 2] == 0))
            self.assertTrue(np.all(np.isneginf(got["lse"][:, :, 2])))
            got = self.attn(q, k, v, "--mask", m, "--masked-rows", "nan", emit=emit)
            self.assertTrue(np.all(np.isnan(got["output"][:, :, 2])))
            self.assertFalse(np.any(np.isnan(got["output"][:, :, [0, 1, 3]])))
            if "probs" in got:
                self.assertTrue(np.all(np.isnan(got["probs"][:, :, 2])))
        # A sink keeps the row alive: probs 0 over keys, output 0, lse = the sink.
        sinks = self.randn(2)
        got = self.attn(q, k, v, "--mask", m, "--sinks", self.save("s.npy", sinks))
        self.check(got, reference(q, k, v, keep=keep, sinks=sinks), F64)

    # -- RoPE -----------------------------------------------------------------------

    def test_rope_kv_cache_positions(self):
        q, k, v = self.randn(1, 2, 3, 16), self.randn(1, 2, 8, 16), self.randn(1, 2, 8, 16)
        for start in (0, 5):
            got = self.attn(q, k, v, "--rope", "--start", start, "--causal")
            tq = hf_rope(torch.tensor(q), torch.arange(3) + start + 8 - 3)
            tk = hf_rope(torch.tensor(k), torch.arange(8) + start)
            ref = reference(tq, tk, v, keep=causal_keep(3, 8, "bottom-right"))
            self.check(got, ref, F64)
        # f32 inputs, base 500000.
        q32, k32 = q.astype(np.float32), k.astype(np.float32)
        got = self.attn(q32, k32, v.astype(np.float32), "--rope", "--base", 500000)
        tq = hf_rope(torch.tensor(q32).double(), torch.arange(5, 8), base=500000.0)
        tk = hf_rope(torch.tensor(k32).double(), torch.arange(8), base=500000.0)
        self.check(got, reference(tq, tk, v.astype(np.float32).astype(np.float64)), F32)

    def test_packed_sequences_match_per_sequence_attention(self):
        # flash-attn varlen semantics: each packed sequence is attended separately, with
        # RoPE positions restarting at 0; computed here one sequence at a time.
        cu = np.array([0, 3, 3, 7, 12], np.int32)  # an empty sequence on purpose
        s = int(cu[-1])
        q, k, v = self.randn(1, 4, s, 16), self.randn(1, 2, s, 16), self.randn(1, 2, s, 8)
        cup = self.save("cu.npy", cu)
        for rope in (False, True):
            args = ["--cu-seqlens", cup, "--causal"] + (["--rope"] if rope else [])
            got = self.attn(q, k, v, *args)
            want = {n: np.zeros_like(got[n]) for n in got}
            want["logits"][:] = -np.inf
            for a, b in zip(cu[:-1], cu[1:]):
                if a == b:
                    continue
                qd, kd, vd = q[:, :, a:b], k[:, :, a:b], v[:, :, a:b]
                if rope:
                    pos = torch.arange(b - a)
                    qd, kd = hf_rope(torch.tensor(qd), pos), hf_rope(torch.tensor(kd), pos)
                lg, pr, out, lse = reference(qd, kd, vd, keep=causal_keep(b - a, b - a,
                                                                          "bottom-right"))
                want["logits"][:, :, a:b, a:b] = lg
                want["probs"][:, :, a:b, a:b] = pr
                want["output"][:, :, a:b] = out
                want["lse"][:, :, a:b] = lse
            for n in ("probs", "output", "lse"):
                self.assert_close(got[n], want[n], msg=f"{n} rope={rope}", **F64)
            self.assertTrue(np.array_equal(np.isneginf(got["logits"]),
                                           np.isneginf(want["logits"])))
        # Boundaries that do not end at the length, or sq != sk: bad input.
        bad = self.save("cu_bad.npy", np.array([0, 3, 11], np.int32))
        self.assert_fails(3, "attention", "-q", self.save("q.npy", q), "-k",
                          self.save("k.npy", k), "--cu-seqlens", bad, "-o", self.path("x.npy"),
                          match="--cu-seqlens")
        self.assert_fails(3, "attention", "-q", self.save("q.npy", q[:, :, :5]), "-k",
                          self.save("k.npy", k), "--cu-seqlens", cup, "-o", self.path("x.npy"),
                          match="as many queries as keys")
        self.assertFalse(os.path.exists(self.path("x.npy")))

    # -- layouts, dtypes, ranks -----------------------------------------------------

    def test_bshd_axes_in_and_out(self):
        q, k, v = self.randn(2, 5, 4, 8), self.randn(2, 7, 2, 8), self.randn(2, 7, 2, 3)  # bshd
        got = self.attn(q, k, v, "--axes", "bshd", "--causal")
        tr = lambda a: np.transpose(a, (0, 2, 1, 3))
        logits, probs, out, lse = reference(tr(q), tr(k), tr(v), keep=causal_keep(5, 7, "bottom-right"))
        self.assertEqual(got["output"].shape, (2, 5, 4, 3))  # Q's axes order
        self.check(got, (logits, probs, tr(out), lse), F64)

    def test_rank3_and_rank2(self):
        q, k, v = self.randn(2, 5, 8, dtype=np.float32), self.randn(2, 6, 8, dtype=np.float32), \
            self.randn(2, 6, 4, dtype=np.float32)
        got = self.attn(q, k, v)
        logits, probs, out, lse = reference(q[:, None], k[:, None], v[:, None])
        self.check(got, (logits[:, 0], probs[:, 0], out[:, 0], lse[:, 0]), F32)
        got = self.attn(q[0], k[0], v[0], "--causal", "top-left")
        logits, probs, out, lse = reference(q[:1, None], k[:1, None], v[:1, None],
                                            keep=causal_keep(5, 6, "top-left"))
        self.check(got, (logits[0, 0], probs[0, 0], out[0, 0], lse[0, 0]), F32)

    def test_f16_inputs(self):
        q, k, v = (self.randn(1, 4, 9, 32, dtype=np.float16), self.randn(1, 2, 9, 32, dtype=np.float16),
                   self.randn(1, 2, 9, 32, dtype=np.float16))
        q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
        keep = causal_keep(9, 9, "top-left")
        # Float64 arithmetic (the default): f16 outputs and the f32 lse are its results
        # rounded once.
        got = self.attn(q, k, v, "--causal")
        self.assertEqual(got["output"].dtype, np.float16)
        self.assertEqual(got["lse"].dtype, np.float32)
        values, margins = attention_reference(q64, k64, v64, keep=keep)
        for n, dt in (("logits", "f16"), ("probs", "f16"), ("output", "f16"), ("lse", "f32")):
            assert_rounded_once(self, got[n], values[n], margins[n], dt, f"f16 inputs {n}")
        # --precision f32: f16 outputs are its results rounded once more; lse stays f32.
        # Bounds from tests/lib/reference_attention.py: every value lies between the
        # roundings of reference -+ the f32 arithmetic's (worst-case) error bound, which
        # is within an f16 ulp and exact where the bound decides the rounding.
        got = self.attn(q, k, v, "--causal", "--precision", "f32")
        values, margins = attention_reference(q64, k64, v64, keep=keep, u=U32)
        for n, dt in (("logits", "f16"), ("probs", "f16"), ("output", "f16"), ("lse", "f32")):
            assert_rounded_once(self, got[n], values[n], margins[n], dt,
                                f"f16 inputs, --precision f32 {n}", max_ambiguous=1.0)
        got = self.attn(q, k, v, "--dtype", "f64")
        self.assertEqual(got["output"].dtype, np.float64)
        self.assertEqual(got["lse"].dtype, np.float64)
        # Float64 outputs: the float64 results (within the reference's bound).
        values, margins = attention_reference(q64, k64, v64)
        for n in ("logits", "probs", "output", "lse"):
            assert_rounded_once(self, got[n], values[n], margins[n], "f64", f"--dtype f64 {n}",
                                max_ambiguous=1.0)

    # -- streamed (blockwise) path --------------------------------------------------

    def test_streamed_matches_materialised_and_reference(self):
        # sk larger than the key block (512): several blocks, some skipped by the window.
        q, k, v = (self.randn(1, 2, 40, 16, dtype=np.float32), self.randn(1, 1, 1300, 16, dtype=np.float32),
                   self.randn(1, 1, 1300, 8, dtype=np.float32))
        args = ["--causal", "--window", "700", "--sinks", self.save("s.npy", np.array([0.5, -1.0]))]
        streamed = self.attn(q, k, v, *args, emit="output,lse")
        full = self.attn(q, k, v, *args, emit="probs,output,lse")
        i = np.arange(40)[:, None] + 1300 - 40
        j = np.arange(1300)[None, :]
        ref = reference(q, k, v, keep=(j <= i) & (j >= i - 700), sinks=np.array([0.5, -1.0]))
        self.check(streamed, ref, F32, names=("output", "lse"))
        self.check(full, ref, F32, names=("probs", "output", "lse"))
        self.assert_close(streamed["output"], full["output"], rtol=1e-5, atol=1e-6)

    def test_streamed_diagonal_and_window_cut_by_row_groups(self):
        # 600 queries make items of 256 rows whose key ranges differ within a block of
        # 1024 keys (the causal diagonal, window edges): each group of 64 rows is cut to
        # its own keys. Against the float64 reference and the materialised path.
        q, k, v = (self.randn(1, 2, 600, 32, dtype=np.float32),
                   self.randn(1, 2, 1500, 32, dtype=np.float32),
                   self.randn(1, 2, 1500, 32, dtype=np.float32))
        i = np.arange(600)[:, None]
        j = np.arange(1500)[None, :]
        for args, keep in ((["--causal"], j <= i + 900),
                           (["--causal", "--window", "300"], (j <= i + 900) & (j >= i + 600)),
                           (["--causal", "top-left"], j <= i),
                           (["--window", "200,100"], (j >= i + 700) & (j <= i + 1000))):
            streamed = self.attn(q, k, v, *args, emit="output,lse")
            ref = reference(q, k, v, keep=keep)
            self.check(streamed, ref, F32, names=("output", "lse"))
            full = self.attn(q, k, v, *args, emit="probs,output,lse")
            self.assert_close(streamed["output"], full["output"], rtol=1e-5, atol=1e-6)

    def test_threads_do_not_change_bytes(self):
        q, k, v = (self.randn(1, 4, 300, 64, dtype=np.float32), self.randn(1, 2, 700, 64, dtype=np.float32),
                   self.randn(1, 2, 700, 64, dtype=np.float32))
        paths = [self.save(n, a) for n, a in (("q.npy", q), ("k.npy", k), ("v.npy", v))]
        for emit in ("probs,output,lse", "output,lse"):
            blobs = []
            for j in (1, 2):
                out = self.path(f"j{j}_{{}}.npy")
                self.run_ok("-j", j, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                            "--causal", "--emit", emit, "-o", out)
                blobs.append([self.read_bytes(out.replace("{}", e)) for e in emit.split(",")])
            self.assertEqual(blobs[0], blobs[1], emit)


    def test_gqa_decode_items_of_several_heads_keep_the_bits(self):
        # Decoding (at most 16 query rows) runs the query heads of a KV head in one work
        # item, each key block for every head in turn. Each head must get the bits it
        # gets alone: those of the same run with K and V repeated per head (MHA, one head
        # an item), with f32 and f16 K and V (widened per block), mapped in place and
        # read in chunks (--max-memory), on 1 and 2 threads; and the float64 reference.
        for sq, hq, hk in ((1, 8, 1), (3, 8, 2), (16, 6, 3)):
            q = self.randn(2, hq, sq, 32, dtype=np.float32)
            k = self.randn(2, hk, 20000, 32, dtype=np.float32)
            v = self.randn(2, hk, 20000, 16, dtype=np.float32)
            rep = hq // hk
            for kv_dtype in (np.float32, np.float16):
                kd, vd = k.astype(kv_dtype), v.astype(kv_dtype)
                paths = [self.save(f"{n}.npy", a) for n, a in (
                    ("q", q), ("k", kd), ("v", vd), ("kr", np.repeat(kd, rep, axis=1)),
                    ("vr", np.repeat(vd, rep, axis=1)))]
                blobs = {}
                for kv in ("gqa", "mha"):
                    kp, vp = (paths[1], paths[2]) if kv == "gqa" else (paths[3], paths[4])
                    for j in (1, 2):
                        for budget in ([], ["--max-memory", "10M"]):
                            out = self.path(f"{kv}{j}{len(budget)}_{{}}.npy")
                            self.run_ok("-j", j, "attention", "-q", paths[0], "-k", kp, "-v", vp,
                                        "--causal", "--window", "2000", "--emit", "output,lse",
                                        "-o", out, *budget)
                            blobs[kv, j, len(budget)] = [self.read_bytes(out.replace("{}", e))
                                                         for e in ("output", "lse")]
                first = blobs["mha", 1, 0]
                for key, got in blobs.items():
                    self.assertEqual(got, first, f"sq {sq} hq {hq} hk {hk} {kv_dtype} {key}")
                i = np.arange(sq)[:, None] + 20000 - sq
                jj = np.arange(20000)[None, :]
                ref = reference(q, kd.astype(np.float32), vd.astype(np.float32),
                                keep=(jj <= i) & (jj >= i - 2000))
                got = {"output": np.load(self.path("gqa20_output.npy")),
                       "lse": np.load(self.path("gqa20_lse.npy"))}
                self.check(got, ref, F32, names=("output", "lse"))

if __name__ == "__main__":
    unittest.main()
