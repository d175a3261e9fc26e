"""`--arith hf` against HF transformers' own code path run in Debian's torch on the CPU
(tests/lib/framework_rope_ref.py: the v5 RoPE init functions, LlamaRotaryEmbedding with
dynamic_rope_update, apply_rotary_pos_emb, eager_attention_forward).

Tolerance: 0 ulp, every bit, for the frequencies, angles, cos/sin tables, the rotated
tensors (f32, bf16, f16, f64; both pair layouts; partial rotary; positions up to 131071) and
eager attention, matmuls included, for f32 (OpenBLAS sgemm as torch calls it) and for
bf16 products below 400 multiply-adds (torch's own loop). The one exception is a larger
bf16 matmul, which torch hands to oneDNN: posenc forms the float64 product rounded once
to bf16, the attention test replaces those (only those) by that product, and a
separate test bounds the difference from torch's own: |delta logits| <= 2^-8 * scale *
sum_i |q_i k_i|, in under 0.2 % of the elements of each output.
"""
import json
import os
import unittest

import numpy as np
import torch

import framework_rope_ref as ref
from posenc_testlib import (PosencTestCase, bit_mismatches, load_torch, out_ref,
                            save_torch)

ref.set_threads()
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]

RNG = np.random.default_rng(12)
LONG_FACTOR = [float(v) for v in np.round(RNG.uniform(1.0, 30.0, 48), 4)]
SHORT_FACTOR = [float(v) for v in np.round(RNG.uniform(1.0, 1.2, 48), 4)]

# name, head dim, posenc options, HF rope_parameters, max_position_embeddings
CASES = [
    ("default", 128, [], {"rope_type": "default", "rope_theta": 10000.0}, 4096),
    ("llama3.1", 128,
     ["--base", "500000", "--scaling", "llama3", "--factor", "8", "--original-max-pos", "8192",
      "--low-freq-factor", "1", "--high-freq-factor", "4"],
     {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072),
    ("linear-partial", 80, ["--scaling", "linear", "--factor", "4", "--partial", "0.4"],
     {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0, "partial_rotary_factor": 0.4},
     4096),
    ("dynamic", 96, ["--scaling", "dynamic", "--factor", "2", "--max-pos", "4096"],
     {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 4096),
    ("yarn-qwen2.5", 128,
     ["--base", "1000000", "--scaling", "yarn", "--factor", "4", "--original-max-pos", "32768"],
     {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
      "original_max_position_embeddings": 32768}, 131072),
    ("yarn-deepseek", 64,
     ["--scaling", "yarn", "--factor", "40", "--original-max-pos", "4096", "--mscale", "0.707",
      "--mscale-all-dim", "1", "--beta-fast", "32", "--beta-slow", "1", "--no-truncate"],
     {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 0.707,
      "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
      "original_max_position_embeddings": 4096}, 163840),
    ("longrope-phi3", 96,
     ["--scaling", "longrope", "--original-max-pos", "4096", "--max-pos", "131072",
      "--short-factor", ",".join(map(str, SHORT_FACTOR)),
      "--long-factor", ",".join(map(str, LONG_FACTOR))],
     {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT_FACTOR,
      "long_factor": LONG_FACTOR, "original_max_position_embeddings": 4096}, 131072),
    ("proportional-gemma4", 256,
     ["--base", "1000000", "--scaling", "proportional", "--partial", "0.25", "--factor", "8"],
     {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25,
      "factor": 8.0}, 131072),
]


def positions(n, top):
    """n sorted distinct positions in [0, top], ending at top."""
    p = np.sort(RNG.choice(top, size=n - 1, replace=False))
    return np.append(p, top).astype(np.int64)


def hf_tables(case, pos, dtype):
    """HF's cos, sin (in `dtype`) and freqs for position_ids `pos` [s]."""
    _, d, _, params, max_pos = case
    rotary = ref.RotaryEmbedding(ref.Config(d, dict(params), max_pos))
    pid = torch.from_numpy(pos)[None, :]
    cos, sin = rotary.forward(torch.zeros(1, dtype=dtype), pid)
    freqs = (rotary.inv_freq[None, :, None].float() @ pid[:, None, :].float()).transpose(1, 2)
    return cos[0], sin[0], freqs[0], rotary.inv_freq


class HfRope(PosencTestCase):
    def rope(self, case, x, pos, style="neox", extra=()):
        name, _, args, _, _ = case
        ids = self.path("ids.npy")
        np.save(ids, pos)
        src = save_torch(self, "x", x)
        out = out_ref(self, "y", x.dtype)
        self.run_ok("rope", src, "-o", out, "--arith", "hf", "--style", style, "--position-ids",
                    ids, *args, *extra)
        return load_torch(out, x.dtype)

    def check_case(self, case, pos, styles=("neox",)):
        d = case[1]
        for dtype in DTYPES:
            x = (torch.randn(1, 3, len(pos), d, generator=torch.Generator().manual_seed(7)) * 4).to(dtype)
            cos, sin, _, _ = hf_tables(case, pos, dtype)
            for style in styles:
                with self.subTest(case=case[0], dtype=str(dtype), style=style, top=int(pos[-1])):
                    apply = ref.apply_rotary_pos_emb if style == "neox" else ref.apply_rotary_pos_emb_interleaved
                    expected = apply(x, cos[None], sin[None])
                    got = self.rope(case, x, pos, style)
                    self.assertEqual(bit_mismatches(got, expected), 0)

    def test_every_scaling_long_positions(self):
        for case in CASES:
            self.check_case(case, positions(300, 131071))

    def test_short_sequences(self):
        # Below max_position_embeddings dynamic NTK keeps its init frequencies; below L0
        # longrope uses the short factors.
        for case in CASES:
            if case[0] in ("dynamic", "longrope-phi3"):
                self.check_case(case, positions(200, 3000))

    def test_interleaved_form(self):
        for case in (CASES[1], CASES[2], CASES[5]):
            self.check_case(case, positions(150, 131071), styles=("gptj",))

    def test_kv_cache_start(self):
        case = CASES[1]
        x = (torch.randn(1, 2, 64, 128, generator=torch.Generator().manual_seed(3)) * 2).to(torch.bfloat16)
        start = 131071 - 63
        cos, sin, _, _ = hf_tables(case, np.arange(start, start + 64), torch.bfloat16)
        src = save_torch(self, "x", x)
        out = out_ref(self, "y", x.dtype)
        self.run_ok("rope", src, "-o", out, "--arith", "hf", "--start", str(start), *case[2])
        self.assertEqual(bit_mismatches(load_torch(out, x.dtype),
                                        ref.apply_rotary_pos_emb(x, cos[None], sin[None])), 0)


class HfErnie(PosencTestCase):
    # Ernie4_5's and Ernie4_5_MoE's apply_rotary_pos_emb (modeling_ernie4_5*.py): GLM
    # pairs, q.float() * cos + rotate_half(q).float() * sin in float32, then
    # .to(original_dtype); the dense model's rotary embedding returns cos, sin cast to
    # q's dtype, the MoE's keeps them float32.
    CASE = ("ernie", 128, [], {"rope_type": "default", "rope_theta": 500000.0}, 131072)

    def ernie_apply(self, x, cos, sin):
        cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)[None]
        sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)[None]
        rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        return ((x.float() * cos) + (rot.float() * sin)).to(x.dtype)

    def test_float32_rotation_bit_for_bit(self):
        with open(os.path.join(os.environ["POSENC_SOURCE_DIR"], "tests", "data",
                               "ernie-4.5-0.3b.json")) as f:
            cfg = json.load(f)
        pos = positions(120, 131071)
        ids = self.path("ids.npy")
        np.save(ids, pos)
        for model_type in ("ernie4_5", "ernie4_5_moe"):
            path = self.path(f"{model_type}.json")
            with open(path, "w") as f:
                json.dump(dict(cfg, model_type=model_type), f)
            for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
                x = (torch.randn(1, 2, len(pos), 128, generator=torch.Generator().manual_seed(5))
                     * 4).to(dtype)
                trig = dtype if model_type == "ernie4_5" else torch.float32
                cos, sin, _, _ = hf_tables(self.CASE, pos, trig)
                want = self.ernie_apply(x, cos, sin)
                src, out = save_torch(self, "x", x), out_ref(self, "y", dtype)
                self.run_ok("rope", src, "-o", out, "--arith", "hf", "--position-ids", ids,
                            "--hf-config", path)
                got = load_torch(out, dtype)
                with self.subTest(model_type=model_type, dtype=str(dtype)):
                    self.assertEqual(bit_mismatches(got, want), 0)
                    if dtype in (torch.bfloat16, torch.float16):
                        # Not the rounding of each operation in the storage type.
                        glm = ref.apply_rotary_pos_emb_interleaved(x, cos.to(dtype)[None],
                                                                   sin.to(dtype)[None])
                        self.assertGreater(bit_mismatches(got, glm), 0)


class HfTables(PosencTestCase):
    def table(self, case, emit, pos):
        ids = self.path("ids.npy")
        np.save(ids, pos)
        out = self.path("t.npy")
        self.run_ok("table", "rope", "--dim", str(case[1]), "--arith", "hf", "--position-ids", ids,
                    "--emit", emit, "--dtype", "f32", "-o", out, *case[2])
        return torch.from_numpy(np.load(out))

    def test_tables_bit_for_bit(self):
        pos = positions(500, 131071)
        for case in CASES:
            cos, sin, freqs, inv = hf_tables(case, pos, torch.float32)
            with self.subTest(case=case[0]):
                self.assertEqual(bit_mismatches(self.table(case, "inv-freq", pos), inv.float()), 0)
                half = freqs.shape[-1]
                self.assertEqual(bit_mismatches(self.table(case, "angles", pos)[:, :half], freqs), 0)
                got = self.table(case, "cos-sin", pos)
                self.assertEqual(bit_mismatches(got[0], cos), 0)
                self.assertEqual(bit_mismatches(got[1], sin), 0)

    def test_bf16_table_is_hfs_cast(self):
        case = CASES[1]
        pos = positions(100, 131071)
        cos, _, _, _ = hf_tables(case, pos, torch.bfloat16)
        ids = self.path("ids.npy")
        np.save(ids, pos)
        out = self.path("t.h5") + ":/y"
        self.run_ok("table", "rope", "--dim", "128", "--arith", "hf", "--position-ids", ids,
                    "--emit", "cos", "--dtype", "bf16", "-o", out, *case[2])
        self.assertEqual(bit_mismatches(load_torch(out, torch.bfloat16), cos), 0)


def round_once(x64, dtype):
    """float64 -> dtype with one rounding (torch's double -> bf16 goes through float)."""
    if dtype == torch.bfloat16:
        m, e = np.frexp(x64.numpy())
        return torch.from_numpy(np.ldexp(np.rint(np.ldexp(m, 8)), e - 8)).to(torch.bfloat16)
    return x64.to(dtype)


def hf_matmul(a, b):
    """torch.matmul, except that a bf16 product of 400 multiply-adds or more (torch: oneDNN,
    float32 sums in its own order) is the float64 product rounded once, as posenc forms it."""
    if a.dtype == torch.bfloat16 and a.shape[-2] * a.shape[-1] * b.shape[-1] >= 400:
        return round_once(a.double() @ b.double(), a.dtype)
    return torch.matmul(a, b)


class HfAttention(PosencTestCase):
    SHAPES = [(2, 4, 2, 37, 53, 64), (1, 2, 1, 5, 300, 96), (1, 4, 4, 64, 64, 128), (1, 2, 1, 3, 5, 16)]

    def run_attention(self, q, k, v, *extra):
        refs = [save_torch(self, n, t) for n, t in (("q", q), ("k", k), ("v", v))]
        out = self.path("o.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("attention", "-q", refs[0], "-k", refs[1], "-v", refs[2], "--arith", "hf",
                    "--emit", "logits,probs,output", "-o", out, *extra)
        return [load_torch(f"{out}:/{n}", q.dtype)
                for n in ("logits", "probs", "output")]

    def inputs(self, shape, dtype, seed):
        b, hq, hk, sq, sk, d = shape
        g = torch.Generator().manual_seed(seed)
        return [(torch.randn(*s, generator=g) * 1.5).to(dtype)
                for s in ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, d))]

    def causal_padded_mask(self, shape, lengths, dtype):
        b, _, _, sq, sk, _ = shape
        i = torch.arange(sq)[:, None] + (sk - sq)
        j = torch.arange(sk)[None, :]
        allowed = (j <= i)[None, None] & (j[None, None] < torch.tensor(lengths)[:, None, None, None])
        return ref.eager_mask(allowed, dtype)

    def test_elementwise_steps_bit_for_bit(self):
        for shape in self.SHAPES:
            for dtype in (torch.float32, torch.bfloat16):
                q, k, v = self.inputs(shape, dtype, 5)
                lengths = [shape[4] - 3 * n for n in range(shape[0])]
                klen = self.path("klen.npy")
                np.save(klen, np.array(lengths, np.int64))
                with self.subTest(shape=shape, dtype=str(dtype)):
                    got = self.run_attention(q, k, v, "--causal", "--key-lengths", klen)
                    want = ref.eager_attention_forward(
                        q, k, v, self.causal_padded_mask(shape, lengths, dtype), shape[5] ** -0.5,
                        shape[1] // shape[2], matmul=hf_matmul)
                    for name, g, w in zip(("logits", "probs", "output"), got, want):
                        self.assertEqual(bit_mismatches(g.to(dtype), w), 0, name)

    def test_with_rope(self):
        case = CASES[1]
        shape = (1, 4, 2, 16, 40, 128)
        q, k, v = self.inputs(shape, torch.bfloat16, 9)
        start = 131072 - 40
        cos, sin, _, _ = hf_tables(case, np.arange(start, start + 40), torch.bfloat16)
        qr = ref.apply_rotary_pos_emb(q, cos[None, -16:], sin[None, -16:])
        kr = ref.apply_rotary_pos_emb(k, cos[None], sin[None])
        got = self.run_attention(q, k, v, "--rope", "--start", str(start), "--causal", *case[2])
        allowed = torch.arange(40)[None, :] <= torch.arange(16)[:, None] + 24
        want = ref.eager_attention_forward(qr, kr, v, ref.eager_mask(allowed[None, None], q.dtype),
                                           128 ** -0.5, 2, matmul=hf_matmul)
        for name, g, w in zip(("logits", "probs", "output"), got, want):
            self.assertEqual(bit_mismatches(g, w), 0, name)

    def test_window_chunk_and_temperature_bit_for_bit(self):
        # The options HF's layers take from their configs (Mistral/Gemma sliding layers,
        # Llama-4 chunked and NoPE layers) under --arith hf, against HF's eager path with
        # HF's own masks (sliding_window_overlay, chunked_overlay on cache positions) and
        # Llama4TextAttention's query temperature, computed by torch.
        b, hq, hk, sq, sk, d = 1, 4, 2, 24, 70, 64
        qpos = torch.arange(sk - sq, sk)[:, None]  # cache_position of the new tokens
        kv = torch.arange(sk)[None, :]
        cases = [
            (("--causal", "--sliding-window", "9"), (kv <= qpos) & (kv > qpos - 9), None),
            (("--sliding-window", "9"), (kv > qpos - 9) & (kv < qpos + 9), None),
            (("--causal", "--chunk-size", "16"), (kv <= qpos) & (kv // 16 == qpos // 16), None),
            (("--causal", "--attn-temperature", "0.1", "8"), kv <= qpos, (0.1, 8.0)),
            (("--causal", "--llama4-scaling", "0.1", "16"), kv <= qpos, ("llama4", 0.1, 16)),
        ]
        for dtype in (torch.float32, torch.bfloat16):
            q, k, v = self.inputs((b, hq, hk, sq, sk, d), dtype, 21)
            for flags, allowed, temp in cases:
                qt = q
                if temp is not None and temp[0] == "llama4":
                    # Ministral3Attention: _get_llama_4_attn_scale(cache_position, beta,
                    # original_max_position_embeddings).to(query_states.dtype).
                    _, beta, period = temp
                    scales = 1 + beta * torch.log(1 + torch.floor(qpos[:, 0] / period))
                    qt = q * scales.unsqueeze(-1).to(dtype)
                    self.assertFalse(torch.equal(qt, q))
                elif temp is not None:
                    attn_scale, floor_scale = temp
                    scales = (torch.log1p(torch.floor((qpos[:, 0].float() + 1.0) / floor_scale))
                              * attn_scale + 1.0)
                    qt = (q * scales.view(1, 1, -1, 1)).to(dtype)
                    self.assertFalse(torch.equal(qt, q))
                with self.subTest(flags=flags, dtype=str(dtype)):
                    got = self.run_attention(q, k, v, *flags)
                    want = ref.eager_attention_forward(
                        qt, k, v, ref.eager_mask(allowed[None, None], dtype), d ** -0.5,
                        hq // hk, matmul=hf_matmul)
                    for name, g, w in zip(("logits", "probs", "output"), got, want):
                        self.assertEqual(bit_mismatches(g.to(dtype), w), 0, name)
                    # Not the plain causal result the option used to be ignored for.
                    plain = self.run_attention(q, k, v, "--causal")
                    self.assertGreater(bit_mismatches(plain[2], got[2]), 0)

    def test_bf16_matmul_bound_against_torch(self):
        # torch's oneDNN bf16 matmul against posenc's once-rounded float64 product.
        for shape in self.SHAPES + [(1, 4, 4, 16, 2048, 128)]:
            q, k, v = self.inputs(shape, torch.bfloat16, 11)
            got = self.run_attention(q, k, v)
            want = ref.eager_attention_forward(q, k, v, None, shape[5] ** -0.5, shape[1] // shape[2])
            g, w = got[0].double(), want[0].double()
            kk = ref.repeat_kv(k, shape[1] // shape[2]).double()
            mag = (q.double().abs() @ kk.abs().transpose(2, 3)) * shape[5] ** -0.5
            with self.subTest(shape=shape):
                self.assertTrue(bool((torch.abs(g - w) <= 2.0 ** -8 * mag).all()))
                for a, b in zip(got, want):
                    self.assertLess(bit_mismatches(a, b), 2e-3 * a.numel())


def gapped_ids(rows, n, top, batch=1, seed=0):
    """[rows, batch, n] sorted position ids with gaps in [0, top] (some above 2^24, where
    float32(position) rounds, when top is large)."""
    r = np.random.default_rng(seed)
    return np.sort(r.choice(top + 1, size=(rows, batch, n)), axis=-1).astype(np.int64)


def qwen2_vl_config(d, section, interleaved=False, rope_type="default", **extra):
    """A text config of Qwen2-VL (or Qwen3-VL with interleaved sections) for the
    references: rope_parameters with HF's keys."""
    params = {"rope_type": rope_type, "rope_theta": 1000000.0, **extra}
    return ref.Config(d, params, 32768), (list(section) if interleaved else None)


class HfMrope(PosencTestCase):
    # Qwen2VLRotaryEmbedding + apply_multimodal_rotary_pos_emb (Qwen2-VL, Qwen2.5-VL,
    # Qwen2.5-Omni's thinker and talker), Qwen3VLTextRotaryEmbedding with
    # apply_interleaved_mrope + apply_rotary_pos_emb (Qwen3-VL), transcribed in
    # tests/lib/framework_rope_ref.py: the [3, b, s] ids times inv_freq as a float32
    # matmul, cos and sin in float32 cast to q's dtype, the rotation in q's dtype.
    D = 128

    def posenc(self, x, ids, section, interleaved, extra=(), arith="hf"):
        np.save(self.path("ids.npy"), ids)
        src, out = save_torch(self, "x", x), out_ref(self, "y", x.dtype)
        self.run_ok("rope", src, "-o", out, "--arith", arith, "--base", "1000000",
                    "--mrope-section", ",".join(map(str, section)), "--position-ids",
                    self.path("ids.npy"), *(["--mrope-interleaved"] if interleaved else []),
                    *extra)
        return load_torch(out, x.dtype)

    def hf(self, x, ids, section, interleaved, **params):
        cfg, il = qwen2_vl_config(x.shape[-1], section, interleaved, **params)
        emb = ref.MultimodalRotaryEmbedding(cfg, interleaved=il)
        cos, sin = emb.forward(x, torch.from_numpy(ids))
        if interleaved:
            return ref.apply_rotary_pos_emb(x, cos, sin)
        return ref.apply_multimodal_rotary_pos_emb(x, cos, sin, list(section))

    def check(self, section, interleaved, ids, heads=2, seed=3):
        b, s = ids.shape[-2], ids.shape[-1]
        for dtype in DTYPES:
            x = (torch.randn(b, heads, s, self.D, generator=torch.Generator().manual_seed(seed))
                 * 4).to(dtype)
            with self.subTest(section=section, interleaved=interleaved, dtype=str(dtype), s=s,
                              top=int(ids.max())):
                got = self.posenc(x, ids, section, interleaved)
                want = self.hf(x, ids, section, interleaved)
                self.assertEqual(bit_mismatches(got, want), 0)

    def test_qwen2_vl_sections_bit_for_bit(self):
        for s, top in ((5000, 40_000_000), (37, 4096), (300, 131071)):
            self.check((16, 24, 24), False, gapped_ids(3, s, top, seed=s))
        self.check((16, 24, 24), False, gapped_ids(3, 200, 9000, batch=2, seed=8))

    def test_qwen3_vl_interleaved_bit_for_bit(self):
        for s, top in ((4500, 30_000_000), (64, 2048)):
            self.check((24, 20, 20), True, gapped_ids(3, s, top, seed=s))
        self.check((24, 20, 20), True, gapped_ids(3, 100, 5000, batch=2, seed=9))

    def test_sections_across_sleef_vectors(self):
        # Sections that split an 8-lane vector (20, 22, 22): torch's cos of a value
        # depends on the other lanes of its vector (SLEEF reduces every lane the slow way
        # when one is large), and Qwen2-VL takes cos and sin of each axis's whole row
        # before it picks the sections.
        ids = gapped_ids(3, 2000, 30_000_000, seed=31)
        self.check((20, 22, 22), False, ids)
        x = (torch.randn(1, 2, 2000, self.D, generator=torch.Generator().manual_seed(3))
             * 4).to(torch.float32)
        want = self.hf(x, ids, (20, 22, 22), False)
        # Not the same angles with cos and sin taken after the pick.
        emb = ref.MultimodalRotaryEmbedding(qwen2_vl_config(self.D, (20, 22, 22))[0])
        freqs = torch.from_numpy(ids).float()[..., None] * emb.inv_freq
        picked = torch.cat([m[i % 3] for i, m in enumerate(freqs.split([20, 22, 22], -1))], -1)
        merged = torch.cat((picked, picked), -1)[0]
        self.assertGreater(bit_mismatches(want, ref.apply_rotary_pos_emb(
            x, merged.cos()[None], merged.sin()[None])), 0)

    def test_text_tokens_and_scaling(self):
        # [s] ids: every axis the same position (HF's text tokens); YaRN's attention
        # factor multiplies cos and sin in float32 as Qwen2VLRotaryEmbedding does.
        pos = positions(400, 131071)
        ids3 = np.broadcast_to(pos, (3, 1, len(pos))).copy()
        for dtype in (torch.bfloat16, torch.float32):
            x = (torch.randn(1, 2, len(pos), self.D, generator=torch.Generator().manual_seed(4))
                 * 4).to(dtype)
            got = self.posenc(x, pos, (16, 24, 24), False)
            self.assertEqual(bit_mismatches(got, self.hf(x, ids3, (16, 24, 24), False)), 0)
            yarn = ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "32768"]
            got = self.posenc(x, ids3, (16, 24, 24), False, yarn)
            want = self.hf(x, ids3, (16, 24, 24), False, rope_type="yarn", factor=4.0,
                           original_max_position_embeddings=32768)
            self.assertEqual(bit_mismatches(got, want), 0)

    def test_the_sections_matter(self):
        # A test that can fail: HF's M-RoPE differs from posenc's exact answer and from
        # the other section form.
        ids = gapped_ids(3, 300, 1_000_000, seed=2)
        x = (torch.randn(1, 1, 300, self.D, generator=torch.Generator().manual_seed(5))
             * 4).to(torch.bfloat16)
        got = self.posenc(x, ids, (16, 24, 24), False)
        self.assertGreater(bit_mismatches(got, self.hf(x, ids, (16, 24, 24), True)), 0)
        exact = self.posenc(x, ids, (16, 24, 24), False, arith="exact")
        self.assertGreater(bit_mismatches(got, exact), 0)


class HfMropeConfigs(PosencTestCase):
    # The published configs (tests/data): `rope --hf-config` and `table rope --hf-config`
    # under --arith hf against the transcribed rotary embeddings with their values.
    CONFIGS = (("qwen2-vl-7b-instruct.json", (16, 24, 24), False, 1000000.0),
               ("qwen3-vl-4b-instruct.json", (24, 20, 20), True, 5000000.0))

    def config(self, name):
        return os.path.join(os.environ["POSENC_SOURCE_DIR"], "tests", "data", name)

    def hf_cos_sin(self, ids, section, interleaved, theta, dtype):
        """cos, sin [b, s, 128] as the rotation applies them (the sections picked)."""
        cfg = ref.Config(128, {"rope_type": "default", "rope_theta": theta}, 32768)
        emb = ref.MultimodalRotaryEmbedding(cfg, interleaved=list(section) if interleaved else None)
        cos, sin = emb.forward(torch.zeros(1, dtype=dtype), torch.from_numpy(ids))
        if not interleaved:
            pick = lambda t: torch.cat([m[i % 3] for i, m in
                                        enumerate(t.split(list(section) * 2, dim=-1))], dim=-1)
            cos, sin = pick(cos), pick(sin)
        return cos, sin

    def test_rope_and_tables_from_configs(self):
        ids = gapped_ids(3, 700, 20_000_000, seed=21)
        np.save(self.path("ids.npy"), ids[:, 0])
        for name, section, il, theta in self.CONFIGS:
            cfg = self.config(name)
            with self.subTest(config=name, what="table"):
                out = self.path("t.npy")
                self.run_ok("table", "rope", "--hf-config", cfg, "--arith", "hf", "--position-ids",
                            self.path("ids.npy"), "--emit", "cos-sin", "--dtype", "f32", "-o", out)
                got = torch.from_numpy(np.load(out))
                cos, sin = self.hf_cos_sin(ids, section, il, theta, torch.float32)
                self.assertEqual(bit_mismatches(got[0], cos[0]), 0)
                self.assertEqual(bit_mismatches(got[1], sin[0]), 0)
            for dtype in (torch.bfloat16, torch.float32):
                x = (torch.randn(1, 2, 700, 128, generator=torch.Generator().manual_seed(2))
                     * 4).to(dtype)
                cos, sin = self.hf_cos_sin(ids, section, il, theta, dtype)
                src, out = save_torch(self, "x", x), out_ref(self, "y", dtype)
                self.run_ok("rope", src, "-o", out, "--arith", "hf", "--hf-config", cfg,
                            "--position-ids", self.path("ids.npy"))
                with self.subTest(config=name, dtype=str(dtype)):
                    want = ref.apply_rotary_pos_emb(x, cos, sin)
                    self.assertEqual(bit_mismatches(load_torch(out, dtype), want), 0)

    def test_tables_of_other_layouts_refused(self):
        np.save(self.path("ids.npy"), np.zeros((3, 4), np.int64))
        for arith, cfg, match in (("meta", self.CONFIGS[0][0], "--arith meta: M-RoPE"),
                                  ("hf", "ernie-4.5-vl.json", "ernie-vl layout")):
            path = self.config(cfg) if arith == "meta" else self.path(cfg)
            if arith == "hf":
                with open(path, "w") as f:
                    json.dump({"model_type": "ernie4_5_vl_moe", "text_config": {
                        "model_type": "ernie4_5_vl_moe_text", "hidden_size": 256,
                        "num_attention_heads": 2, "max_position_embeddings": 4096,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                                            "mrope_section": [22, 22, 20]}}}, f)
            self.assert_fails(2, "table", "rope", "--hf-config", path, "--arith", arith,
                              "--position-ids", self.path("ids.npy"), "-o", self.path("t.npy"),
                              match=match)


class HfVision(PosencTestCase):
    # The vision towers' RoPE, transcribed in tests/lib/framework_rope_ref.py:
    # Qwen2-VL's VisionRotaryEmbedding(head_dim / 2) on rot_pos_emb's (h, w) ids in
    # spatial-merge order with apply_rotary_pos_emb_vision (float32, then q's dtype;
    # Qwen2.5-VL's and Qwen3-VL's towers are the same code); Pixtral's
    # PixtralRotaryEmbedding on position_ids_in_meshgrid's h * max_width + w with
    # apply_rotary_pos_emb (q's dtype); DINOv3's patch-centre angles with its
    # apply_rotary_pos_emb, the prefix tokens left as they are.
    def rope(self, x, *args):
        src, out = save_torch(self, "x", x), out_ref(self, "y", x.dtype)
        self.run_ok("rope", src, "-o", out, "--arith", "hf", *args)
        return load_torch(out, x.dtype)

    def inputs(self, heads, n, d, dtype, seed=6):
        return (torch.randn(1, heads, n, d, generator=torch.Generator().manual_seed(seed))
                * 4).to(dtype)

    def test_qwen2_vl_vision_bit_for_bit(self):
        d = 80  # Qwen2-VL's vision head dim (1280 / 16)
        for t, h, w in ((1, 6, 8), (2, 50, 46)):  # 48 and 4600 patches
            (cos, sin), pos_hw = ref.qwen2_vl_rot_pos_emb(d, [(t, h, w)], 2)
            ids = pos_hw.T.contiguous().numpy()
            np.save(self.path("hw.npy"), ids)
            for dtype in DTYPES:
                x = self.inputs(3, len(pos_hw), d, dtype)
                want = ref.apply_rotary_pos_emb_vision(x[0].transpose(0, 1), cos, sin)
                want = want.transpose(0, 1)[None]
                with self.subTest(grid=(t, h, w), dtype=str(dtype), form="ids"):
                    got = self.rope(x, "--layout", "axial", "--position-ids", self.path("hw.npy"))
                    self.assertEqual(bit_mismatches(got, want), 0)
                if t == 1:
                    with self.subTest(grid=(t, h, w), dtype=str(dtype), form="grid"):
                        got = self.rope(x, "--layout", "axial", "--coords", f"grid:{h},{w}",
                                        "--merge-window", "2")
                        self.assertEqual(bit_mismatches(got, want), 0)
                if dtype in (torch.bfloat16, torch.float16):
                    # Not the rounding of each operation in the storage type.
                    storage = ref.apply_rotary_pos_emb(x, cos.to(dtype)[None], sin.to(dtype)[None])
                    self.assertGreater(bit_mismatches(got, storage), 0)

    def test_rows_not_a_multiple_of_8_pairs(self):
        # R/2 = 36: torch's 8-lane vectors of cos(cat((emb, emb))) take the last 4 angles
        # of a row with its first 4 (SLEEF's cos of a lane depends on its vector's other
        # lanes when one is large); large (h, w) ids make some lanes large. posenc forms
        # the first half's cos and sin as torch does, which the first R/2 dims use; the
        # second half's copies may differ in the last bit (see posenc-rope(1)).
        d, n = 72, 600
        pos_hw = torch.from_numpy(np.random.default_rng(40).integers(0, 3000, (n, 2)))
        cos, sin = ref.vision_cos_sin(d, pos_hw)
        np.save(self.path("hw.npy"), pos_hw.T.contiguous().numpy())
        for dtype in (torch.float32, torch.bfloat16):
            x = self.inputs(2, n, d, dtype)
            want = ref.apply_rotary_pos_emb_vision(x[0].transpose(0, 1), cos, sin)
            got = self.rope(x, "--layout", "axial", "--position-ids", self.path("hw.npy"))
            want = want.transpose(0, 1)[None]
            self.assertEqual(bit_mismatches(got[..., : d // 2], want[..., : d // 2]), 0)
        # Not cos and sin of each row alone (a partial last vector padded with zeros).
        half = torch.cat([ref.VisionRotaryEmbedding(d // 2).forward(3000)[pos_hw[:, 0]],
                          ref.VisionRotaryEmbedding(d // 2).forward(3000)[pos_hw[:, 1]]], -1)
        alone = torch.stack([torch.cos(r.clone()) for r in half])
        self.assertGreater(bit_mismatches(alone, cos[:, : d // 2]), 0)

    def test_pixtral_bit_for_bit(self):
        d, side = 64, 80  # Pixtral-12B: head_dim 64, image_size 1024 / patch_size 16
        emb = ref.PixtralRotaryEmbedding(d, 10000.0, side)
        for h, w in ((7, 9), (64, 70)):
            hh, ww = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            pid = (hh * side + ww).flatten()
            for dtype in DTYPES:
                x = self.inputs(2, h * w, d, dtype)
                cos, sin = emb.forward(x, pid)
                want = ref.apply_rotary_pos_emb(x, cos[None], sin[None])
                with self.subTest(grid=(h, w), dtype=str(dtype)):
                    got = self.rope(x, "--layout", "even-odd", "--coords", f"grid:{h},{w}")
                    self.assertEqual(bit_mismatches(got, want), 0)
        # Two images in one sequence: their (h, w) ids as rows.
        ids = torch.cat([torch.stack(torch.meshgrid(torch.arange(a), torch.arange(b),
                                                    indexing="ij"), 0).reshape(2, -1)
                         for a, b in ((5, 6), (70, 66))], 1)
        np.save(self.path("hw.npy"), ids.numpy())
        x = self.inputs(2, ids.shape[1], d, torch.bfloat16)
        cos, sin = emb.forward(x, ids[0] * side + ids[1])
        got = self.rope(x, "--layout", "even-odd", "--position-ids", self.path("hw.npy"))
        self.assertEqual(bit_mismatches(got, ref.apply_rotary_pos_emb(x, cos[None], sin[None])), 0)

    def test_dinov3_bit_for_bit(self):
        for d, (h, w), prefix in ((64, (14, 14), 5), (96, (70, 64), 1)):
            emb = ref.DINOv3ViTRopePositionEmbedding(d, 100.0)
            for dtype in DTYPES:
                x = self.inputs(2, prefix + h * w, d, dtype)
                cos, sin = emb.forward(h, w, dtype)
                want = ref.dinov3_apply_rotary_pos_emb(x, cos, sin)
                with self.subTest(d=d, grid=(h, w), dtype=str(dtype)):
                    got = self.rope(x, "--layout", "axial", "--coords", f"centres:{h},{w}",
                                    "--prefix-tokens", str(prefix), "--freq-scale", "2pi",
                                    "--base", "100")
                    self.assertEqual(bit_mismatches(got, want), 0)


class HfErrors(PosencTestCase):
    def test_bad_combinations(self):
        x = self.path("x.npy")
        np.save(x, np.ones((4, 8), np.float32))
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "hf", "--precision",
                          "f32", match="--precision")
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "fast",
                          match="--arith")
        np.save(self.path("i.npy"), np.ones((4, 8), np.int32))
        self.assert_fails(3, "rope", self.path("i.npy"), "-o", self.path("y.npy"), "--arith", "hf",
                          match="float")
        self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "meta", "--rope2d",
                          "2", "2", "--style", "gptj", match="exactly")
        q = self.path("q.npy")
        np.save(q, np.ones((1, 2, 4, 8), np.float32))
        self.assert_fails(2, "attention", "-q", q, "-k", q, "-v", q, "-o", self.path("o.h5"),
                          "--arith", "hf", "--alibi", match="alibi")
        self.assert_fails(2, "attention", "-q", q, "-k", q, "-o", self.path("o.h5"),
                          "--arith", "hf", "--emit", "lse", match="lse")
        self.assert_fails(2, "attention", "-q", q, "-k", q, "-o", self.path("o.h5"),
                          "--arith", "ggml", match="hf only")
        np.save(self.path("k16.npy"), np.ones((1, 2, 4, 8), np.float16))
        self.assert_fails(3, "attention", "-q", q, "-k", self.path("k16.npy"), "-o",
                          self.path("o.h5"), "--arith", "hf", match="dtype")
        self.assertEqual(os.listdir(self.tmp).count("y.npy"), 0)
        self.assertEqual(os.listdir(self.tmp).count("o.h5"), 0)

    def test_layouts_without_hf_float32_code(self):
        # Each layout --arith hf does not reproduce: exit 2 naming it, no output.
        x = self.path("x.npy")
        np.save(x, np.ones((1, 1, 6, 16), np.float32))
        for name, rows in (("i3", 3), ("i4", 4), ("i2", 2)):
            np.save(self.path(name + ".npy"), np.zeros((rows, 6), np.int64))
        np.save(self.path("r2.npy"), np.full((2, 6), 0.5))
        np.save(self.path("w.npy"), np.ones((2, 8)))
        ids = lambda name: ("--position-ids", self.path(name + ".npy"))
        cases = [
            (("--layout", "chunks:3", *ids("i3")), "chunks layout"),
            (("--layout", "ernie-vl:2,2,4", "--style", "gptj", *ids("i3")), "ernie-vl layout"),
            (("--layout", "xdrope:2,2,2,2", *ids("i4")), "xdrope layout"),
            (("--inv-freq", self.path("w.npy"), *ids("i2")), "matrix layout"),
            (("--layout", "axial", "--coords", "grid:2,3", "--freq-scale", "3"),
             "axial layout with the frequency scale 3"),
            (("--layout", "axial", "--coords", "centres:2,3"), "axial layout with patch centres"),
            (("--layout", "even-odd", "--coords", "centres:2,3", "--freq-scale", "2pi"),
             "even-odd layout with patch centres"),
            (("--mrope-section", "2,3,3", "--style", "gptj", *ids("i3")), "Qwen2-VL's M-RoPE"),
            (("--mrope-section", "2,3,3", "--mrope-interleaved", "--style", "gptj", *ids("i3")),
             "Qwen3-VL's interleaved M-RoPE"),
            (("--layout", "even-odd", "--coords", "grid:2,3", "--style", "gptj"), "Pixtral"),
            (("--layout", "axial", "--coords", "grid:2,3", "--scaling", "linear", "--factor", "2"),
             "Qwen2-VL's vision RoPE has no RoPE scaling"),
            (("--layout", "axial", *ids("r2")), "real coordinates"),
        ]
        for flags, match in cases:
            with self.subTest(flags=flags):
                self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", "hf", *flags,
                                  match=match)
        for arith in ("meta", "ggml"):
            self.assert_fails(2, "rope", x, "-o", self.path("y.npy"), "--arith", arith,
                              "--style", "gptj", "--mrope-section", "2,3,3", *ids("i3"),
                              match="M-RoPE sections")
        self.assertEqual(os.listdir(self.tmp).count("y.npy"), 0)


if __name__ == "__main__":
    unittest.main()
