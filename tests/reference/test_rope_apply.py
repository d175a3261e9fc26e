"""`posenc rope` against independent float64 references written from the seeds'
three RoPE implementations (interleaved q*cos + q2*sin with repeat_interleave, Meta's
complex freqs_cis, HF rotate_half) and HF's frequency formulas re-implemented in numpy.

Tolerances: f64 output rtol/atol 1e-12; f32 and f16 outputs equal to the float64
reference rounded once (tests/lib/rounding.py; the exhaustive checks per kernel variant
are in test_exact_rope.py); --precision f32 vs a torch float32 HF-style computation
within 4 f32 ulp of the largest input.
"""
import json
import os
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase, run
from rounding import assert_rounded_once


def inv_freq_default(dim, base=10000.0):
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def angles(pos, inv):
    return np.asarray(pos, dtype=np.float64)[..., None] * inv


# --- the seeds' three implementations, in float64, written for these tests ----------

def rope_hf_rotate_half(x, ang, af=1.0):
    """HF: x*cos + rotate_half(x)*sin with cos/sin = cat(freqs, freqs). ang [..., s, R/2]."""
    x = torch.from_numpy(x)
    a = torch.from_numpy(ang)
    emb = torch.cat([a, a], -1)
    cos, sin = emb.cos() * af, emb.sin() * af
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return (x * cos + rot * sin).numpy()


def rope_meta_complex(x, ang):
    """Meta llama: view pairs (2i, 2i+1) as complex numbers, multiply by e^{i θ}."""
    xc = torch.view_as_complex(torch.from_numpy(x).reshape(*x.shape[:-1], -1, 2).contiguous())
    a = torch.from_numpy(ang)
    f = torch.polar(torch.ones_like(a), a)
    return torch.view_as_real(xc * f).flatten(-2).numpy()


def rope_interleaved_seed(x, ang):
    """The seed's sinusoidal form: q*cos_pos + q2*sin_pos with q2 = [-q1, q0, -q3, q2, ...]."""
    x = torch.from_numpy(x)
    a = torch.from_numpy(ang)
    cos_pos = a.cos().repeat_interleave(2, dim=-1)
    sin_pos = a.sin().repeat_interleave(2, dim=-1)
    q2 = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).reshape(x.shape)
    return (x * cos_pos + q2 * sin_pos).numpy()


def partial(fn, x, ang, r, **kw):
    y = x.copy()
    y[..., :r] = fn(np.ascontiguousarray(x[..., :r]), ang, **kw)
    return y


class RopeCase(PosencTestCase):
    def save(self, name, a):
        p = self.path(name)
        np.save(p, a)
        return p

    def rope(self, x, *args, name="x.npy", out="y.npy"):
        src = self.save(name, x)
        dst = self.path(out)
        self.run_ok("rope", src, "-o", dst, *args)
        return np.load(dst)


class TestConventions(RopeCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(1)
        self.x = rng.standard_normal((2, 3, 7, 16))  # bhsd
        self.ang = angles(np.arange(7), inv_freq_default(16))

    def test_neox_matches_hf_rotate_half(self):
        y = self.rope(self.x, "--style", "neox")
        self.assert_close(y, rope_hf_rotate_half(self.x, self.ang), 1e-12, 1e-12)
        y2 = self.rope(self.x, "--style", "half", out="y2.npy")
        np.testing.assert_array_equal(y, y2)

    def test_gptj_matches_meta_complex_and_seed_interleaved(self):
        y = self.rope(self.x, "--style", "gptj")
        self.assert_close(y, rope_meta_complex(self.x, self.ang), 1e-12, 1e-12)
        self.assert_close(y, rope_interleaved_seed(self.x, self.ang), 1e-12, 1e-12)
        y2 = self.rope(self.x, "--style", "interleaved", out="y2.npy")
        np.testing.assert_array_equal(y, y2)

    def test_f32_output_rounded_once(self):
        x32 = self.x.astype(np.float32)
        y = self.rope(x32, "--style", "gptj")
        self.assertEqual(y.dtype, np.float32)
        ref = rope_meta_complex(x32.astype(np.float64), self.ang)
        # torch's float64 cos/sin and complex product: within 1e-15 relative of the exact
        # rotation (positions < 7), far inside half an f32 ulp.
        assert_rounded_once(self, y, ref, 1e-15 * (np.abs(ref) + 1e-300) + 1e-15, "f32",
                            "gptj f32", max_ambiguous=1e-3)
        y64 = self.rope(x32, "--dtype", "f64", out="y64.npy")
        self.assertEqual(y64.dtype, np.float64)
        self.assert_close(y64, rope_hf_rotate_half(x32.astype(np.float64), self.ang), 1e-12, 1e-12)

    def test_f16_rounded_once(self):
        x16 = (self.x * 3).astype(np.float16)
        y = self.rope(x16)
        self.assertEqual(y.dtype, np.float16)
        ref = rope_hf_rotate_half(x16.astype(np.float64), self.ang)
        assert_rounded_once(self, y, ref, 1e-15 * np.abs(ref) + 1e-15, "f16", "f16 -> f16")
        # f32 input to f16 output: rounded once from the exact rotation.
        y2 = self.rope(self.x.astype(np.float32), "--dtype", "f16", out="y2.npy")
        self.assertEqual(y2.dtype, np.float16)
        ref2 = rope_hf_rotate_half(self.x.astype(np.float32).astype(np.float64), self.ang)
        assert_rounded_once(self, y2, ref2, 1e-15 * np.abs(ref2) + 1e-15, "f16", "f32 -> f16")

    def test_precision_f32_matches_torch_float32_hf(self):
        # HF's float32 code in torch. Its cos and sin are not posenc's (each within about
        # an ulp), so outputs may differ by a few ulp: atol 4 f32 ulp of the largest |x|.
        # At positions near 30000 the float64 rotation is 100 times further away, so a
        # run that ignored --precision f32 fails (checked bit for bit in
        # test_precision_option.py).
        x32 = self.x.astype(np.float32)
        y = self.rope(x32, "--precision", "f32", "--start", "30000")
        xt = torch.from_numpy(x32)
        inv = torch.from_numpy(inv_freq_default(16).astype(np.float32))
        pos = torch.arange(30000, 30007, dtype=torch.float32)
        freqs = (inv[None, :, None] @ pos[None, None, :]).transpose(1, 2)[0]
        emb = torch.cat([freqs, freqs], -1)
        rot = torch.cat([-xt[..., 8:], xt[..., :8]], -1)
        ref = (xt * emb.cos() + rot * emb.sin()).numpy()
        atol = 4 * 2.0 ** -23 * float(np.abs(x32).max())
        np.testing.assert_allclose(y, ref, rtol=0, atol=atol)
        y64 = rope_hf_rotate_half(x32.astype(np.float64), angles(np.arange(30000, 30007),
                                                                 inv_freq_default(16)))
        self.assertGreater(np.abs(y64 - ref).max(), 100 * atol)

    def test_bshd_and_other_orders(self):
        ref = rope_hf_rotate_half(self.x, self.ang)
        xs = np.ascontiguousarray(self.x.transpose(0, 2, 1, 3))  # bshd
        y = self.rope(xs, "--axes", "bshd")
        self.assert_close(y, ref.transpose(0, 2, 1, 3), 1e-12, 1e-12)
        xd = np.ascontiguousarray(self.x.transpose(2, 0, 3, 1))  # s b d h: d not last
        y = self.rope(xd, "--axes", "sbdh", out="y2.npy")
        self.assert_close(y, ref.transpose(2, 0, 3, 1), 1e-12, 1e-12)

    def test_partial_rotary(self):
        y = self.rope(self.x, "--rotary-dim", "8")
        ang8 = angles(np.arange(7), inv_freq_default(8))
        self.assert_close(y, partial(rope_hf_rotate_half, self.x, ang8, 8), 1e-12, 1e-12)
        y2 = self.rope(self.x, "--partial", "0.5", "--style", "gptj", out="y2.npy")
        self.assert_close(y2, partial(rope_meta_complex, self.x, ang8, 8), 1e-12, 1e-12)

    def test_inverse_round_trip(self):
        y = self.rope(self.x, "--start", "100")
        back = self.rope(y, "--start", "100", "--inverse", name="y_in.npy", out="back.npy")
        self.assert_close(back, self.x, 1e-12, 1e-12)
        x32 = self.x.astype(np.float32)
        y = self.rope(x32, "--style", "gptj", name="x32.npy", out="y32.npy")
        back = self.rope(y, "--style", "gptj", "--inverse", name="y32_in.npy", out="b32.npy")
        self.assert_close(back, x32, 1e-6, 1e-6)

    def test_relative_position_property(self):
        # <rope(q, m), rope(k, n)> depends only on m - n.
        rng = np.random.default_rng(2)
        q, k = rng.standard_normal(16), rng.standard_normal(16)
        pairs = [(3, 0), (10, 7), (40, 37), (1000, 997)]
        ids = np.array([p for mn in pairs for p in mn], dtype=np.int64)
        x = np.stack([q if i % 2 == 0 else k for i in range(len(ids))])
        self.save("ids.npy", ids)
        for style in ("neox", "gptj"):
            y = self.rope(x, "--style", style, "--position-ids", self.path("ids.npy"))
            dots = [float(y[2 * i] @ y[2 * i + 1]) for i in range(len(pairs))]
            for d in dots[1:]:
                self.assertAlmostEqual(d, dots[0], places=10)


class TestPositions(RopeCase):
    def setUp(self):
        super().setUp()
        self.x = np.random.default_rng(3).standard_normal((2, 6, 8))  # bsd
        self.inv = inv_freq_default(8)

    def test_start_offset(self):
        y = self.rope(self.x, "--start", "17")
        self.assert_close(y, rope_hf_rotate_half(self.x, angles(np.arange(17, 23), self.inv)),
                          1e-12, 1e-12)

    def test_position_ids_s_and_bs_any_int_dtype(self):
        ids = np.array([5, 0, 9, 9, 2, 300], dtype=np.int16)
        self.save("ids.npy", ids)
        y = self.rope(self.x, "--position-ids", self.path("ids.npy"))
        self.assert_close(y, rope_hf_rotate_half(self.x, angles(ids, self.inv)), 1e-12, 1e-12)
        ids2 = np.array([[0, 1, 2, 3, 4, 5], [7, 3, 1, 0, 1000000, 2]], dtype=np.uint32)
        self.save("ids2.npy", ids2)
        y = self.rope(self.x, "--position-ids", self.path("ids2.npy"), "--style", "gptj",
                      out="y2.npy")
        self.assert_close(y, rope_meta_complex(self.x, angles(ids2, self.inv)), 1e-12, 1e-9)

    def test_cu_seqlens_restart_per_document(self):
        x = np.random.default_rng(4).standard_normal((10, 4, 8))  # packed tokens: s h d
        self.save("cu.npy", np.array([0, 3, 3, 8, 10], dtype=np.int32))
        y = self.rope(x, "--axes", "shd", "--cu-seqlens", self.path("cu.npy"))
        pos = np.array([0, 1, 2, 0, 1, 2, 3, 4, 0, 1])
        ang = angles(pos, self.inv)[:, None, :]  # broadcast over heads
        self.assert_close(y, rope_hf_rotate_half(x, np.broadcast_to(ang, (10, 4, 4)).copy()),
                          1e-12, 1e-12)


def yarn_inv(d, base, s, l0, beta_fast=32.0, beta_slow=1.0):
    inv = inv_freq_default(d, base)

    def corr(n_rot):
        return d * np.log(l0 / (n_rot * 2 * np.pi)) / (2 * np.log(base))
    low, high = max(np.floor(corr(beta_fast)), 0), min(np.ceil(corr(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    extrap = 1 - ramp
    return (inv / s) * (1 - extrap) + inv * extrap, 0.1 * np.log(s) + 1


def llama3_inv(d, base, s, l0, lff=1.0, hff=4.0):
    inv = inv_freq_default(d, base)
    wl = 2 * np.pi / inv
    low_wl, high_wl = l0 / lff, l0 / hff
    smooth = (l0 / wl - lff) / (hff - lff)
    out = np.where(wl > low_wl, inv / s, inv)
    mid = (wl >= high_wl) & (wl <= low_wl)
    return np.where(mid, (1 - smooth) * inv / s + smooth * inv, out)


class TestScaling(RopeCase):
    def setUp(self):
        super().setUp()
        self.x = np.random.default_rng(5).standard_normal((40, 16))  # sd
        self.pos = np.arange(40)

    def check(self, inv, af, *args):
        y = self.rope(self.x, *args)
        self.assert_close(y, rope_hf_rotate_half(self.x, angles(self.pos, inv), af), 1e-12, 1e-12)

    def test_linear(self):
        self.check(inv_freq_default(16) / 4, 1.0, "--scaling", "linear", "--factor", "4")

    def test_dynamic_ntk(self):
        # seq_len 40 > max_pos 16: base' = base * (s*L/max_pos - (s-1))^(d/(d-2))
        b = 10000.0 * (2 * 40 / 16 - 1) ** (16 / 14)
        self.check(inv_freq_default(16, b), 1.0, "--scaling", "dynamic", "--factor", "2",
                   "--max-pos", "16")

    def test_yarn_with_attention_factor(self):
        inv, af = yarn_inv(16, 10000.0, 8.0, 64)
        self.check(inv, af, "--scaling", "yarn", "--factor", "8", "--original-max-pos", "64")

    def test_longrope_short_and_long(self):
        short = np.linspace(1.0, 2.0, 8)
        long = np.linspace(1.5, 6.0, 8)
        af = np.sqrt(1 + np.log(4) / np.log(16))
        sl, ll = ",".join(map(repr, short)), ",".join(map(repr, long))
        base_args = ["--scaling", "longrope", "--factor", "4", "--short-factor", sl,
                     "--long-factor", ll]
        # 40 positions > L0 = 16: long factors.
        self.check(inv_freq_default(16) / long, af, *base_args, "--original-max-pos", "16")
        # 40 positions <= L0 = 64: short factors.
        af64 = np.sqrt(1 + np.log(4) / np.log(64))
        self.check(inv_freq_default(16) / short, af64, *base_args, "--original-max-pos", "64")

    def test_llama3_and_hf_config(self):
        inv = llama3_inv(16, 500000.0, 8.0, 64)
        self.check(inv, 1.0, "--base", "500000", "--scaling", "llama3", "--factor", "8",
                   "--original-max-pos", "64", "--low-freq-factor", "1", "--high-freq-factor", "4")
        cfg = {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 500000.0,
               "max_position_embeddings": 1024,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}
        with open(self.path("config.json"), "w") as f:
            json.dump(cfg, f)
        self.check(inv, 1.0, "--hf-config", self.path("config.json"))


def proportional_inv(head_dim, prf, base=10000.0, factor=1.0):
    """HF v5 "proportional" (Gemma-4): int(prf * head_dim // 2) frequencies over the
    head dimension, zero-padded to head_dim // 2, divided by the factor."""
    n = int(prf * head_dim // 2)
    inv = 1.0 / base ** (np.arange(0, 2 * n, 2, dtype=np.float64) / head_dim)
    return np.concatenate([inv, np.zeros(head_dim // 2 - n)]) / factor


class TestProportional(RopeCase):
    def test_proportional_rotates_the_whole_head(self):
        x = np.random.default_rng(9).standard_normal((1, 30, 2, 32))  # bshd
        pos = np.arange(30)
        inv = proportional_inv(32, 0.25, 1e6, 2.0)
        want = rope_hf_rotate_half(x.transpose(0, 2, 1, 3), angles(pos, inv)).transpose(0, 2, 1, 3)
        y = self.rope(x, "--axes", "bshd", "--scaling", "proportional", "--partial", "0.25",
                      "--base", "1e6", "--factor", "2")
        self.assert_close(y, want, 1e-12, 1e-12)
        # Pairs (j, j + 16) for j < 4, the rest unchanged; --partial alone pairs (j, j + 4)
        # within the first 8 dims, a different result.
        self.assertTrue(np.array_equal(y[..., 4:16], x[..., 4:16]))
        self.assertTrue(np.array_equal(y[..., 20:], x[..., 20:]))
        plain = self.rope(x, "--axes", "bshd", "--partial", "0.25", "--base", "1e6",
                          "--scaling", "linear", "--factor", "2", out="p.npy")
        self.assertGreater(np.abs(plain - y).max(), 0.1)
        # From a v5 config keyed by layer type.
        cfg = {"head_dim": 32, "rope_parameters": {
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1e6, "factor": 2.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
        with open(self.path("config.json"), "w") as f:
            json.dump(cfg, f)
        y2 = self.rope(x, "--axes", "bshd", "--hf-config", self.path("config.json"),
                       out="y2.npy")
        self.assertTrue(np.array_equal(y2, y))
        # The table: zero frequencies after the first four.
        tab = self.path("inv.npy")
        self.run_ok("table", "rope", "--positions", "2", "--dim", "32", "--scaling",
                    "proportional", "--partial", "0.25", "--base", "1e6", "--factor", "2",
                    "--emit", "inv-freq", "--dtype", "f64", "-o", tab)
        self.assert_close(np.load(tab), inv, 1e-15, 0)


class TestMultiDim(RopeCase):
    def test_rope2d_matches_seed_complex_2d(self):
        # Seed 003: freqs over arange(0, dim, 4)/dim, x positions t % W then y = t // W,
        # cat([x-freqs, y-freqs]) in the complex (interleaved) form; theta defaults to 100.
        H, W, D = 3, 4, 16
        x = np.random.default_rng(6).standard_normal((2, H * W, D))
        f = 1.0 / 100.0 ** (np.arange(0, D, 4)[: D // 4] / D)
        t = np.arange(H * W)
        ang = np.concatenate([np.outer(t % W, f), np.outer(t // W, f)], -1)
        y = self.rope(x, "--rope2d", str(H), str(W), "--style", "gptj")
        self.assert_close(y, rope_meta_complex(x, ang), 1e-12, 1e-12)
        ang_yx = np.concatenate([np.outer(t // W, f), np.outer(t % W, f)], -1)
        y = self.rope(x, "--rope2d", str(H), str(W), "--order", "yx", out="y2.npy")
        self.assert_close(y, rope_hf_rotate_half(x, ang_yx), 1e-12, 1e-12)

    def test_mrope_sections_qwen2vl(self):
        # Qwen2-VL: position_ids [3, s]; cos = cat(chunks of cat(freqs,freqs) split by
        # mrope_section*2, chunk i taken from component i % 3).
        D, S = 16, 9
        sec = [2, 3, 3]
        x = np.random.default_rng(7).standard_normal((S, D))
        ids = np.stack([np.arange(S), np.arange(S) // 3, np.arange(S) % 3 + 5]).astype(np.int64)
        self.save("ids.npy", ids)
        inv = torch.from_numpy(inv_freq_default(D))
        freqs = torch.from_numpy(ids.astype(np.float64))[..., None] * inv  # [3, s, 8]
        emb = torch.cat([freqs, freqs], -1)
        cos = torch.cat([m[i % 3] for i, m in enumerate(emb.cos().split(sec * 2, -1))], -1)
        sin = torch.cat([m[i % 3] for i, m in enumerate(emb.sin().split(sec * 2, -1))], -1)
        xt = torch.from_numpy(x)
        ref = (xt * cos + torch.cat([-xt[..., 8:], xt[..., :8]], -1) * sin).numpy()
        y = self.rope(x, "--mrope-section", "2,3,3", "--position-ids", self.path("ids.npy"))
        self.assert_close(y, ref, 1e-12, 1e-12)


class TestIO(RopeCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(8)
        self.q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
        self.k = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
        self.ang = angles(np.arange(5), inv_freq_default(8))

    def test_hdf5_in_and_out(self):
        with h5py.File(self.path("model.h5"), "w") as f:
            f.create_dataset("/layer0/q", data=self.q)
            f.create_dataset("/layer0/k", data=self.k)
        self.run_ok("rope", self.path("model.h5") + ":/layer0/q", self.path("model.h5") + ":/layer0/k",
                    "-o", self.path("out.h5") + ":/q", "-o", self.path("out.h5") + ":/k")
        with h5py.File(self.path("out.h5"), "r") as f:
            q, k = f["/q"][()], f["/k"][()]
        self.assert_close(q, rope_hf_rotate_half(self.q.astype(np.float64), self.ang), 1e-6, 1e-6)
        self.assert_close(k, rope_hf_rotate_half(self.k.astype(np.float64), self.ang), 1e-6, 1e-6)

    def test_several_inputs_and_stdin_to_stdout(self):
        self.save("q.npy", self.q)
        self.save("k.npy", self.k)
        self.run_ok("rope", self.path("q.npy"), self.path("k.npy"), "-o", self.path("qr.npy"),
                    "-o", self.path("kr.npy"), "--style", "gptj")
        self.assert_close(np.load(self.path("kr.npy")),
                          rope_meta_complex(self.k.astype(np.float64), self.ang), 1e-6, 1e-6)
        with open(self.path("q.npy"), "rb") as f:
            p = run("rope", "-", "-o", "-", "--style", "gptj", stdin=f.read())
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(self.path("qr.npy"), "rb") as f:
            self.assertEqual(p.stdout, f.read())

    def test_streaming_gives_the_in_memory_bytes(self):
        x = np.random.default_rng(9).standard_normal((512, 16, 64)).astype(np.float32)  # 2 MiB
        self.save("big.npy", x)
        self.run_ok("rope", self.path("big.npy"), "-o", self.path("mem.npy"), "--axes", "shd")
        self.run_ok("rope", self.path("big.npy"), "-o", self.path("str.npy"), "--axes", "shd",
                    "--max-memory", "96K", "-v")
        with open(self.path("mem.npy"), "rb") as a, open(self.path("str.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        p = run("-v", "rope", self.path("big.npy"), "-o", self.path("s2.npy"), "--axes", "shd",
                "--max-memory", "96K")
        self.assertRegex(p.stderr, r"\b(1[0-9]|[2-9][0-9]|[1-9][0-9]{2,}) slab")
        self.assertNotIn("\r", p.stderr)  # no progress line when stderr is not a terminal


class TestBadInput(RopeCase):
    def setUp(self):
        super().setUp()
        self.save("x.npy", np.random.default_rng(10).standard_normal((2, 3, 5, 8)))
        self.x = self.path("x.npy")
        with open(self.path("old.npy"), "wb") as f:
            f.write(b"keep me")

    def fails(self, status, *args, match=None):
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(status, "rope", self.x, "-o", self.path("new.npy"), *args, match=match)
        self.assert_fails(status, "rope", self.x, "-o", self.path("old.npy"), *args, match=match)
        self.assert_no_new_files(before)
        with open(self.path("old.npy"), "rb") as f:
            self.assertEqual(f.read(), b"keep me")

    def test_options(self):
        self.fails(2, "--rotary-dim", "3", match="rotary")
        self.fails(2, "--rotary-dim", "10", match="rotary")
        self.fails(2, "--axes", "bhxd", match="--axes")
        self.fails(2, "--axes", "bhss", match="--axes")
        self.fails(2, "--mrope-section", "1,1", match="mrope")
        self.fails(2, "--max-memory", "lots", match="max-memory")

    def test_data(self):
        self.fails(3, "--axes", "bsd", match="x.npy")
        self.save("ids.npy", np.arange(4))
        self.fails(3, "--position-ids", self.path("ids.npy"), match="position-ids")
        self.save("neg.npy", np.array([0, 1, -2, 3, 4]))
        self.fails(3, "--position-ids", self.path("neg.npy"), match="negative")
        self.save("cu.npy", np.array([0, 2, 4], dtype=np.int32))
        self.fails(3, "--cu-seqlens", self.path("cu.npy"), match="cu-seqlens")
        self.fails(3, "--rope2d", "2", "3", match="rope2d")

    def test_nonfinite_refused_unless_allowed(self):
        x = np.random.default_rng(11).standard_normal((4, 8))
        x[2, 7] = np.inf
        self.save("x.npy", x)
        self.fails(3, match="NaN or Inf")
        self.run_ok("rope", self.x, "-o", self.path("y.npy"), "--allow-nonfinite")
        self.assertTrue(np.isinf(np.load(self.path("y.npy"))[2]).any())

    def test_all_or_nothing_with_several_outputs(self):
        bad = np.zeros((5, 8))
        bad[1, 1] = np.nan
        self.save("bad.npy", bad)
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(3, "rope", self.x, self.path("bad.npy"), "-o", self.path("a.npy"),
                          "-o", self.path("b.npy"), match="bad.npy")
        self.assert_no_new_files(before)


if __name__ == "__main__":
    unittest.main()
