"""Published model configs (tests/data, see its README) through `--hf-config` alone,
against references that follow HF transformers v5's code (tests/lib/hf_reference.py):
rope tables, RoPE applied to tensors in each model's layout (GLM pairs of Helium and
ERNIE-4.5, HunYuan's NTK alpha, the NoPE layers of AFMoE and SmolLM3), and attention
with each model's scale, soft-cap, sliding window, sinks, chunking and temperature.

Tolerances: float64 outputs rtol 1e-12 for frequency tables and 1e-10 for rotated
tensors and attention (against float64 torch); float32 tables rtol 1e-6.
"""
import json
import os
import unittest

import h5py
import numpy as np
import torch

import hf_reference as hf
from posenc_testlib import PosencTestCase, SOURCE_DIR

torch.set_default_dtype(torch.float64)
DATA = os.path.join(SOURCE_DIR, "tests", "data")
F64 = dict(rtol=1e-10, atol=1e-12)


def data(name):
    return os.path.join(DATA, name)


class HfConfigCase(PosencTestCase):
    rng = np.random.default_rng(11)

    def table(self, cfg, *args):
        out = self.path("t.npy")
        self.run_ok("table", "rope", "--hf-config", data(cfg), *args, "--dtype", "f64", "-o", out)
        return np.load(out)

    def rope(self, cfg, x, *args, axes=None):
        inp, out = self.npy("x.npy", x), self.path("y.npy")
        extra = ["--axes", axes] if axes else []
        self.run_ok("rope", inp, "-o", out, "--hf-config", data(cfg), *extra, *args)
        return np.load(out)

    def attention(self, cfg, q, k, v, *args):
        qp, kp, vp = self.npy("q.npy", q), self.npy("k.npy", k), self.npy("v.npy", v)
        out = self.path("att.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("attention", "-q", qp, "-k", kp, "-v", vp, "--hf-config", data(cfg), *args,
                    "--emit", "logits,probs,output", "-o", out)
        with h5py.File(out, "r") as f:
            return (f["logits"][()], f["probs"][()], f["output"][()], dict(f["output"].attrs))

    def assert_attention(self, got, ref, msg):
        for g, r, name in zip(got[:3], ref, ("logits", "probs", "output")):
            r = r.numpy()
            self.assertEqual(g.shape, r.shape, f"{msg} {name}")
            both_inf = np.isneginf(g) & np.isneginf(r)
            np.testing.assert_allclose(np.where(both_inf, 0, g), np.where(both_inf, 0, r),
                                       err_msg=f"{msg} {name}", **F64)


class RopeTables(HfConfigCase):
    CONFIGS = ["llama-3.1-8b.json", "qwen2.5-7b-instruct.json", "qwen2-vl-7b-instruct.json",
               "qwen3-vl-4b-instruct.json", "phi-3-vision-128k-language.json",
               "phi-4-mini-instruct.json", "deepseek-v3.json", "gpt-oss-120b.json",
               "gemma-2-27b.json", "gemma-3-27b-it.json", "gemma-4-e4b.json",
               "llama-4-scout-17b-16e-instruct.json"]

    def test_inv_freq_of_every_published_config(self):
        for cfg in self.CONFIGS:
            t = hf.load_text_config(data(cfg))
            types = sorted(set(hf.layer_types(t)))
            if t["model_type"] == "llama4_text":
                types = ["chunked_attention"]  # NoPE layers have no table
            for lt in types:
                inv, _ = hf.rope_init(t, lt)
                args = ["--layer-type", lt] if len(types) > 1 else []
                got = self.table(cfg, "--emit", "inv-freq", *args)
                np.testing.assert_allclose(got, inv.numpy(), rtol=1e-12, atol=0,
                                           err_msg=f"{cfg} {lt}")

    def test_attention_factor_and_table_length_from_the_config_alone(self):
        # Qwen2.5: HF's table spans max_position_embeddings (32768).
        got = self.table("qwen2.5-7b-instruct.json", "--emit", "cos")
        t = hf.load_text_config(data("qwen2.5-7b-instruct.json"))
        inv, att = hf.rope_init(t)
        cos, _ = hf.cos_sin(inv, torch.arange(32768), att)
        self.assertEqual(got.shape, (32768, 128))
        np.testing.assert_allclose(got, cos.numpy(), rtol=1e-12, atol=1e-15)
        # Attention factors of yarn (gpt-oss) and longrope (Phi-3, long factors past L0).
        for cfg, pos in (("gpt-oss-120b.json", [0, 5, 4095, 70000]),
                         ("phi-3-vision-128k-language.json", [3, 5000]),
                         ("deepseek-v3.json", [0, 1, 100000])):
            ids = self.npy("ids.npy", np.array(pos, dtype=np.int64))
            got = self.table(cfg, "--position-ids", ids, "--emit", "cos-sin")
            t = hf.load_text_config(data(cfg))
            inv, att = hf.rope_init(t, seq_len=max(pos) + 1)
            cos, sin = hf.cos_sin(inv, torch.tensor(pos), att)
            np.testing.assert_allclose(got, np.stack([cos.numpy(), sin.numpy()]), rtol=1e-10,
                                       atol=1e-13, err_msg=cfg)


class RopeLayouts(HfConfigCase):
    def test_llama31_and_phi4_partial(self):
        x = self.rng.standard_normal((1, 2, 6, 128))
        for cfg in ("llama-3.1-8b.json", "phi-4-mini-instruct.json"):
            t = hf.load_text_config(data(cfg))
            inv, att = hf.rope_init(t, seq_len=4106)
            cos, sin = hf.cos_sin(inv, torch.arange(4100, 4106), att)
            ref = hf.apply_partial(torch.from_numpy(x), cos, sin, 2 * len(inv))
            got = self.rope(cfg, x, "--start", 4100)
            np.testing.assert_allclose(got, ref.numpy(), err_msg=cfg, **F64)

    def test_deepseek_v3_mla_q_and_k_pe(self):
        # q heads are [q_nope (128) | q_pe (64)]; HF rotates q_pe with
        # apply_rotary_pos_emb_interleave and concatenates.
        t = hf.load_text_config(data("deepseek-v3.json"))
        q = self.rng.standard_normal((1, 3, 5, 192))
        inv, att = hf.rope_init(t, seq_len=5)
        cos, sin = hf.cos_sin(inv, torch.arange(5), att)
        qt = torch.from_numpy(q)
        ref = torch.cat([qt[..., :128], hf.apply_rotary_pos_emb_interleave(qt[..., 128:], cos, sin)], -1)
        got = self.rope("deepseek-v3.json", q)
        np.testing.assert_allclose(got, ref.numpy(), **F64)
        # The shared k_pe head alone (64 dims) is rotated whole.
        kpe = self.rng.standard_normal((1, 1, 5, 64))
        ref = hf.apply_rotary_pos_emb_interleave(torch.from_numpy(kpe), cos, sin)
        np.testing.assert_allclose(self.rope("deepseek-v3.json", kpe), ref.numpy(), **F64)
        # --inverse undoes it.
        back = self.rope("deepseek-v3.json", got, "--inverse")
        np.testing.assert_allclose(back, q, rtol=1e-12, atol=1e-12)

    def test_qwen2_vl_and_qwen3_vl_mrope(self):
        ids = np.stack([np.array([0, 1, 2, 3, 3, 3, 3, 7]), np.array([0, 1, 2, 3, 3, 4, 4, 8]),
                        np.array([0, 1, 2, 3, 4, 3, 4, 9])]).astype(np.int64)
        x = self.rng.standard_normal((1, 2, 8, 128))
        for cfg, il in (("qwen2-vl-7b-instruct.json", False), ("qwen3-vl-4b-instruct.json", True)):
            t = hf.load_text_config(data(cfg))
            rp = hf.rope_parameters(t)
            inv, _ = hf.rope_init(t)
            cos, sin = hf.mrope_cos_sin(inv, torch.from_numpy(ids), rp["mrope_section"], il)
            ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
            got = self.rope(cfg, x, "--position-ids", self.npy("ids.npy", ids))
            np.testing.assert_allclose(got, ref.numpy(), err_msg=cfg, **F64)
            # The table of the same ids is the merged cos/sin HF applies.
            tab = self.table(cfg, "--position-ids", self.npy("ids.npy", ids), "--emit", "cos-sin")
            np.testing.assert_allclose(tab, np.stack([cos.numpy(), sin.numpy()]), err_msg=cfg, **F64)

    def test_mrope_without_position_ids_is_hfs_text_default(self):
        # Qwen2-VL's get_rope_index without images or videos: position_ids = arange
        # (plus the cache offset) on all three axes; --start is that offset, and packed
        # sequences restart their positions at each boundary.
        x = self.rng.standard_normal((1, 4, 6, 128))
        for cfg, il in (("qwen2-vl-7b-instruct.json", False), ("qwen3-vl-4b-instruct.json", True)):
            t = hf.load_text_config(data(cfg))
            rp = hf.rope_parameters(t)
            inv, _ = hf.rope_init(t)
            for args, pos in ((["--start", "5"], torch.arange(5, 11)),
                              ([], torch.arange(6)),
                              (["--cu-seqlens", self.npy("cu.npy", np.array([0, 2, 6]))],
                               torch.tensor([0, 1, 0, 1, 2, 3]))):
                ids = pos[None].expand(3, -1)
                cos, sin = hf.mrope_cos_sin(inv, ids, rp["mrope_section"], il)
                ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
                got = self.rope(cfg, x, *args)
                np.testing.assert_allclose(got, ref.numpy(), err_msg=f"{cfg} {args}", **F64)

    def test_llama4_complex_pairs(self):
        t = hf.load_text_config(data("llama-4-scout-17b-16e-instruct.json"))
        inv, _ = hf.rope_init(t, "chunked_attention")
        x = self.rng.standard_normal((1, 7, 3, 128))  # Llama-4's [b, s, h, d]
        ref = hf.apply_rotary_emb_complex(torch.from_numpy(x), inv, torch.arange(7))
        got = self.rope("llama-4-scout-17b-16e-instruct.json", x, axes="bshd")
        np.testing.assert_allclose(got, ref.numpy(), **F64)

    def test_per_layer_rope_gemma3_and_gemma4(self):
        for cfg, lt, d in (("gemma-3-27b-it.json", "sliding_attention", 128),
                           ("gemma-3-27b-it.json", "full_attention", 128),
                           ("gemma-4-e4b.json", "sliding_attention", 256),
                           ("gemma-4-e4b.json", "full_attention", 512)):
            t = hf.load_text_config(data(cfg))
            inv, att = hf.rope_init(t, lt)
            cos, sin = hf.cos_sin(inv, torch.arange(2000, 2004), att)
            x = self.rng.standard_normal((1, 1, 4, d))
            ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
            got = self.rope(cfg, x, "--layer-type", lt, "--start", 2000)
            np.testing.assert_allclose(got, ref.numpy(), err_msg=f"{cfg} {lt}", **F64)


class Attention(HfConfigCase):
    def test_gemma2_scale_and_softcap(self):
        t = hf.load_text_config(data("gemma-2-27b.json"))
        q = self.rng.standard_normal((1, 32, 5, 128)) * 4
        k = self.rng.standard_normal((1, 16, 5, 128)) * 4
        v = self.rng.standard_normal((1, 16, 5, 128))
        got = self.attention("gemma-2-27b.json", q, k, v, "--causal", "--layer-type",
                             "full_attention")
        mask = hf.hf_mask(torch.arange(5), 5)
        ref = hf.eager_attention(*map(torch.from_numpy, (q, k, v)),
                                 t["query_pre_attn_scalar"] ** -0.5, mask,
                                 softcap=t["attn_logit_softcapping"])
        self.assert_attention(got, ref, "gemma-2")

    def test_gpt_oss_sliding_layer_with_rope_and_sinks(self):
        # 160 tokens past the 128-token window; one head (no h axis) of 64 dims.
        t = hf.load_text_config(data("gpt-oss-120b.json"))
        s = 160
        q, k, v = (self.rng.standard_normal((1, s, 64)) for _ in range(3))
        sinks = self.rng.standard_normal(1)
        got = self.attention("gpt-oss-120b.json", q, k, v, "--rope", "--causal", "--layer-type",
                             "sliding_attention", "--sinks", self.npy("sinks.npy", sinks))
        inv, att = hf.rope_init(t, seq_len=s)
        cos, sin = hf.cos_sin(inv, torch.arange(s), att)
        qr, kr = (hf.apply_rotary_pos_emb(torch.from_numpy(a)[:, None], cos, sin)
                  for a in (q, k))
        mask = hf.hf_mask(torch.arange(s), s, sliding_window=t["sliding_window"])
        ref = hf.eager_attention(qr, kr, torch.from_numpy(v)[:, None], 64 ** -0.5, mask,
                                 sinks=torch.from_numpy(sinks))
        self.assert_attention(got, tuple(r[:, 0] for r in ref), "gpt-oss")

    def test_gemma3_sliding_layer_with_kv_cache(self):
        # 4 queries after 1100 cached keys: the 1024-token window cuts the early keys.
        t = hf.load_text_config(data("gemma-3-27b-it.json"))
        sq, sk = 4, 1104
        q = self.rng.standard_normal((1, sq, 128))
        k, v = self.rng.standard_normal((1, sk, 128)), self.rng.standard_normal((1, sk, 128))
        got = self.attention("gemma-3-27b-it.json", q, k, v, "--rope", "--causal",
                             "--layer-type", "sliding_attention")
        inv, att = hf.rope_init(t, "sliding_attention")
        qpos = torch.arange(sk - sq, sk)
        qr = hf.apply_rotary_pos_emb(torch.from_numpy(q)[:, None], *hf.cos_sin(inv, qpos, att))
        kr = hf.apply_rotary_pos_emb(torch.from_numpy(k)[:, None],
                                     *hf.cos_sin(inv, torch.arange(sk), att))
        mask = hf.hf_mask(qpos, sk, sliding_window=t["sliding_window"])
        ref = hf.eager_attention(qr, kr, torch.from_numpy(v)[:, None],
                                 t["query_pre_attn_scalar"] ** -0.5, mask)
        self.assert_attention(got, tuple(r[:, 0] for r in ref), "gemma-3 sliding")

    def test_deepseek_v3_mla_attention(self):
        t = hf.load_text_config(data("deepseek-v3.json"))
        s = 6
        q = self.rng.standard_normal((1, 128, s, 192))
        k = self.rng.standard_normal((1, 128, s, 192))
        v = self.rng.standard_normal((1, 128, s, 128))
        got = self.attention("deepseek-v3.json", q, k, v, "--rope", "--causal")
        inv, att = hf.rope_init(t, seq_len=s)
        cos, sin = hf.cos_sin(inv, torch.arange(s), att)

        def rot(a):
            a = torch.from_numpy(a)
            return torch.cat([a[..., :128], hf.apply_rotary_pos_emb_interleave(a[..., 128:], cos, sin)], -1)

        ref = hf.eager_attention(rot(q), rot(k), torch.from_numpy(v), hf.deepseek_scaling(t),
                                 hf.hf_mask(torch.arange(s), s))
        self.assert_attention(got, ref, "deepseek-v3")
        self.assertAlmostEqual(got[3]["scale"], hf.deepseek_scaling(t), delta=1e-15)

    def test_llama4_nope_layer_temperature_and_chunked_layer(self):
        t = hf.load_text_config(data("llama-4-scout-17b-16e-instruct.json"))
        sq, sk = 4, 8194  # queries at positions 8190..8193 cross floor_scale 8192
        q = self.rng.standard_normal((1, sq, 128))
        k, v = self.rng.standard_normal((1, sk, 128)), self.rng.standard_normal((1, sk, 128))
        got = self.attention("llama-4-scout-17b-16e-instruct.json", q, k, v, "--causal",
                             "--layer-type", "full_attention")
        qpos = torch.arange(sk - sq, sk)
        qt = hf.llama4_temperature(torch.from_numpy(q)[:, :, None], qpos, t["attn_scale"],
                                   t["floor_scale"])[:, :, 0]
        ref = hf.eager_attention(qt[:, None], torch.from_numpy(k)[:, None],
                                 torch.from_numpy(v)[:, None], 128 ** -0.5, hf.hf_mask(qpos, sk))
        self.assert_attention(got, tuple(r[:, 0] for r in ref), "llama-4 NoPE")
        # Chunked layers: attention_chunk_size from the config.
        got = self.attention("llama-4-scout-17b-16e-instruct.json", q[:, :, :], k[:, :20],
                             v[:, :20], "--causal", "--layer-type", "chunked_attention")
        self.assertEqual(got[3]["chunk_size"], 8192)
        # The NoPE layers refuse RoPE.
        self.assert_fails(3, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                          "--hf-config", data("llama-4-scout-17b-16e-instruct.json"),
                          "--layer-type", "full_attention", "--rope", "-o", self.path("x.npy"),
                          "--emit", "probs", match="no RoPE")

    def test_ministral3_llama4_query_scaling(self):
        # Devstral-Small-2 (ministral3): every query times 1 + 0.1 log(1 + floor(p / 8192)),
        # the period being rope_parameters' original_max_position_embeddings.
        cfg = "devstral-small-2-24b-text.json"
        t = hf.load_text_config(data(cfg))
        rp = t["rope_parameters"]
        sq, sk = 4, 8194  # queries at positions 8190..8193 cross the period
        q = self.rng.standard_normal((1, sq, 128))
        k, v = self.rng.standard_normal((1, sk, 128)), self.rng.standard_normal((1, sk, 128))
        got = self.attention(cfg, q, k, v, "--causal")
        self.assertEqual(got[3]["llama4_scaling_beta"], 0.1)
        self.assertEqual(got[3]["llama4_scaling_period"], 8192)
        qpos = torch.arange(sk - sq, sk)
        qt = hf.llama4_attn_scale(torch.from_numpy(q)[:, :, None], qpos,
                                  rp["llama_4_scaling_beta"],
                                  rp["original_max_position_embeddings"])[:, :, 0]
        ref = hf.eager_attention(qt[:, None], torch.from_numpy(k)[:, None],
                                 torch.from_numpy(v)[:, None], 128 ** -0.5, hf.hf_mask(qpos, sk))
        self.assert_attention(got, tuple(r[:, 0] for r in ref), "ministral3")
        # An explicit --llama4-scaling wins over the config's.
        got2 = self.attention(cfg, q, k, v, "--causal", "--llama4-scaling", "0.5", "4096")
        self.assertEqual(got2[3]["llama4_scaling_period"], 4096)
        # HF fails on a ministral3 config without the key; posenc refuses it (exit 3).
        with open(data(cfg)) as f:
            broken = json.load(f)
        del broken["text_config"]["rope_parameters"]["llama_4_scaling_beta"]
        path = self.path("broken.json")
        with open(path, "w") as f:
            json.dump(broken, f)
        self.assert_fails(3, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                          "--hf-config", path, "--emit", "probs", "-o", self.path("x.npy"),
                          match="llama_4_scaling_beta")

    def test_gemma4_scale_one_on_both_layer_types(self):
        # Gemma4TextAttention: self.scaling = 1.0; full layers have global_head_dim 512.
        t = hf.load_text_config(data("gemma-4-e4b.json"))
        self.assertEqual(hf.attention_scaling(t), 1.0)
        for lt, d in (("sliding_attention", 256), ("full_attention", 512)):
            q = self.rng.standard_normal((1, 8, 5, d))
            k, v = (self.rng.standard_normal((1, 2, 5, d)) for _ in range(2))
            got = self.attention("gemma-4-e4b.json", q, k, v, "--rope", "--causal",
                                 "--layer-type", lt)
            inv, att = hf.rope_init(t, lt)
            cos, sin = hf.cos_sin(inv, torch.arange(5), att)
            qr, kr = (hf.apply_rotary_pos_emb(torch.from_numpy(a), cos, sin) for a in (q, k))
            ref = hf.eager_attention(qr, kr, torch.from_numpy(v), 1.0,
                                     hf.hf_mask(torch.arange(5), 5))
            self.assert_attention(got, ref, f"gemma-4 {lt}")
            self.assertEqual(got[3]["scale"], 1.0)

    def test_head_counts_checked_against_the_config(self):
        q = self.rng.standard_normal((1, 4, 3, 128))
        k = self.rng.standard_normal((1, 4, 3, 128))
        self.npy("q.npy", q)
        self.npy("k.npy", k)
        self.assert_fails(3, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                          "--hf-config", data("llama-3.1-8b.json"), "--emit", "probs",
                          "-o", self.path("p.npy"), match="num_attention_heads")
        self.assertFalse(os.path.exists(self.path("p.npy")))


class PublishedFamilies(HfConfigCase):
    """Families whose modeling code, not only the rope init, decides the numbers: each
    published config through --hf-config alone against that family's code as
    hf_reference.py transcribes it."""

    def cos_sin(self, cfg, pos, *extra):
        ids = self.npy("ids.npy", np.array(pos, dtype=np.int64))
        return self.table(cfg, "--position-ids", ids, "--emit", "cos-sin", *extra)

    def test_helium_and_ernie_rotate_glm_pairs(self):
        # HeliumAttention / Ernie4_5Attention: GLM's interleaved pairs over the whole
        # 128-dim head; Helium's rope_theta 1e5, ERNIE's 5e5 (an integer in the file).
        x = self.rng.standard_normal((1, 3, 5, 128))
        for cfg in ("helium-1-preview-2b.json", "ernie-4.5-0.3b.json"):
            t = hf.load_text_config(data(cfg))
            self.assertEqual(hf.head_dim(t), 128)
            inv, att = hf.rope_init(t, seq_len=4101)
            np.testing.assert_allclose(self.table(cfg, "--emit", "inv-freq"), inv.numpy(),
                                       rtol=1e-12, atol=0, err_msg=cfg)
            cos, sin = hf.cos_sin(inv, torch.arange(4096, 4101), att)
            ref = hf.apply_rotary_pos_emb_glm(torch.from_numpy(x), cos, sin)
            got = self.rope(cfg, x, "--start", 4096)
            np.testing.assert_allclose(got, ref.numpy(), err_msg=cfg, **F64)
            # Not the NeoX halves a Llama-shaped reading would give.
            neox = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
            self.assertFalse(np.allclose(got, neox.numpy()), cfg)
        # Attention with --rope rotates the same pairs; ERNIE's heads are head_dim 128,
        # not hidden_size / heads = 64, with 16 query heads on 2 KV heads.
        for cfg, hq, hk in (("helium-1-preview-2b.json", 20, 20), ("ernie-4.5-0.3b.json", 16, 2)):
            t = hf.load_text_config(data(cfg))
            q = self.rng.standard_normal((1, hq, 6, 128))
            k, v = (self.rng.standard_normal((1, hk, 6, 128)) for _ in range(2))
            inv, att = hf.rope_init(t, seq_len=6)
            cos, sin = hf.cos_sin(inv, torch.arange(6), att)
            qr, kr = (hf.apply_rotary_pos_emb_glm(torch.from_numpy(a), cos, sin) for a in (q, k))
            ref = hf.eager_attention(qr, kr, torch.from_numpy(v), 128 ** -0.5,
                                     hf.hf_mask(torch.arange(6), 6))
            got = self.attention(cfg, q, k, v, "--rope", "--causal")
            self.assert_attention(got, ref, cfg)

    def test_hunyuan_mt_ntk_alpha(self):
        # HunYuanDenseV1RotaryEmbedding: base 1e4 * alpha ** (d / (d - 2)) with alpha 1e5;
        # within max_position_embeddings (32768) the static base, past it HF's
        # dynamic_rope_update (factor 1.0).
        cfg = "hunyuan-mt-7b.json"
        t = hf.load_text_config(data(cfg))
        inv, _ = hf.hunyuan_inv_freq(t)
        np.testing.assert_allclose(self.table(cfg, "--emit", "inv-freq"), inv.numpy(),
                                   rtol=1e-12, atol=0)
        self.assertAlmostEqual(float(inv[1]) ** -64 / (1e4 * 1e5 ** (128 / 126)), 1.0, places=9)
        for pos in ([0, 1, 100, 30000], [0, 32767], [5, 40000]):
            inv, att = hf.hunyuan_inv_freq(t, seq_len=max(pos) + 1)
            cos, sin = hf.cos_sin(inv, torch.tensor(pos), att)
            np.testing.assert_allclose(self.cos_sin(cfg, pos), np.stack([cos, sin]),
                                       err_msg=str(pos), **F64)
        # Applied to q with 32 heads, NeoX halves.
        x = self.rng.standard_normal((1, 32, 3, 128))
        inv, att = hf.hunyuan_inv_freq(t, seq_len=20003)
        ref = hf.apply_rotary_pos_emb(torch.from_numpy(x),
                                      *hf.cos_sin(inv, torch.arange(20000, 20003), att))
        np.testing.assert_allclose(self.rope(cfg, x, "--start", 20000), ref.numpy(), **F64)
        # --arith hf: HunYuanDenseV1RotaryEmbedding's float32 expression, bit for bit.
        out = self.path("inv32.npy")
        self.run_ok("table", "rope", "--hf-config", data(cfg), "--arith", "hf", "--emit",
                    "inv-freq", "-o", out)
        base = 10000.0 * 100000.0 ** (128 / 126)
        np.testing.assert_array_equal(
            np.load(out), (1.0 / (base ** (torch.arange(0, 128, 2).float() / 128))).numpy())

    def test_trinity_nano_rotates_only_sliding_layers(self):
        # AfmoeConfig: no layer_types in the file, every 4th of 56 layers full
        # (global_attn_every_n_layers 4); AfmoeAttention rotates only the local layers.
        cfg = "trinity-nano-preview.json"
        t = hf.load_text_config(data(cfg))
        types = hf.layer_types(t)
        self.assertEqual(len(types), 56)
        self.assertEqual(types.count("full_attention"), 14)
        inv, att = hf.rope_init(t, "sliding_attention")
        for args in ([], ["--layer-type", "sliding_attention"], ["--layer", "2"]):
            np.testing.assert_allclose(self.table(cfg, "--emit", "inv-freq", *args),
                                       inv.numpy(), rtol=1e-12, atol=0, err_msg=str(args))
        out = self.path("none.npy")
        for args in (["--layer-type", "full_attention"], ["--layer", "55"]):
            self.assert_fails(3, "table", "rope", "--hf-config", data(cfg), *args,
                              "--emit", "inv-freq", "-o", out, match="no RoPE")
        self.assertFalse(os.path.exists(out))
        # Attention, GQA 8:2 heads of 128: a sliding layer rotates q and k and masks
        # keys past the 2048-token window; a full layer is causal and unrotated, and
        # refuses --rope.
        sq, sk = 3, 2052
        q = self.rng.standard_normal((1, 8, sq, 128))
        k, v = (self.rng.standard_normal((1, 2, sk, 128)) for _ in range(2))
        qpos = torch.arange(sk - sq, sk)
        for layer in (2, 3):
            lt = types[layer]
            rotates = hf.layer_rotates(t, layer)
            self.assertEqual(rotates, lt == "sliding_attention")
            qt, kt = torch.from_numpy(q), torch.from_numpy(k)
            if rotates:
                qt = hf.apply_rotary_pos_emb(qt, *hf.cos_sin(inv, qpos, att))
                kt = hf.apply_rotary_pos_emb(kt, *hf.cos_sin(inv, torch.arange(sk), att))
            window = t["sliding_window"] if lt == "sliding_attention" else None
            ref = hf.eager_attention(qt, kt, torch.from_numpy(v), hf.attention_scaling(t),
                                     hf.hf_mask(qpos, sk, sliding_window=window))
            rope = ["--rope"] if rotates else []
            got = self.attention(cfg, q, k, v, "--causal", *rope, "--layer", str(layer))
            self.assert_attention(got, ref, f"trinity layer {layer}")
        self.assert_fails(3, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                          "--hf-config", data(cfg), "--layer", "3", "--rope", "--emit",
                          "probs", "-o", self.path("p.npy"), match="no RoPE")
        self.assertFalse(os.path.exists(self.path("p.npy")))


    def test_smollm3_no_rope_every_fourth_layer(self):
        # SmolLM3-3B-Base publishes no_rope_layer_interval 4 and no no_rope_layers:
        # SmolLM3Config builds [1, 1, 1, 0] * 9; every layer is full_attention, so only
        # --layer N tells a NoPE layer. rope_theta 5e6 from the file (class default 2e6).
        cfg = "smollm3-3b-base.json"
        t = hf.load_text_config(data(cfg))
        self.assertEqual(set(hf.layer_types(t)), {"full_attention"})
        nope = [i for i in range(36) if not hf.layer_rotates(t, i)]
        self.assertEqual(nope, list(range(3, 36, 4)))
        inv, att = hf.rope_init(t, seq_len=70001)
        self.assertAlmostEqual(float(inv[1]), 5_000_000.0 ** (-2 / 128), places=14)
        np.testing.assert_allclose(self.table(cfg, "--emit", "inv-freq"), inv.numpy(),
                                   rtol=1e-12, atol=0)
        x = self.rng.standard_normal((1, 16, 4, 128))
        cos, sin = hf.cos_sin(inv, torch.arange(70000 - 3, 70001), att)
        ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
        for layer in (0, 2, 4, 34):
            np.testing.assert_allclose(self.rope(cfg, x, "--start", 70000 - 3, "--layer",
                                                 str(layer)), ref.numpy(),
                                       err_msg=f"layer {layer}", **F64)
        os.remove(self.path("y.npy"))
        for layer in (3, 35):
            self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                              "--hf-config", data(cfg), "--layer", str(layer),
                              match=f"layer {layer} .* no RoPE")
            self.assert_fails(3, "table", "rope", "--hf-config", data(cfg), "--layer",
                              str(layer), "--emit", "inv-freq", "-o", self.path("t.npy"),
                              match="no_rope_layers")
        self.assertFalse(os.path.exists(self.path("y.npy")))
        # Attention on a NoPE layer: q and k as they are, causal, scale 128^-0.5 (GQA 16:4).
        q = self.rng.standard_normal((1, 16, 5, 128))
        k, v = (self.rng.standard_normal((1, 4, 5, 128)) for _ in range(2))
        ref = hf.eager_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                 128 ** -0.5, hf.hf_mask(torch.arange(5), 5))
        self.assert_attention(self.attention(cfg, q, k, v, "--causal", "--layer", "7"), ref,
                              "smollm3 layer 7")

    def test_moonshine_partial_glm_pairs_from_rope_parameters(self):
        # A v5-written Moonshine config: partial_rotary_factor 0.62 inside rope_parameters,
        # head_dim 416 / 8 = 52, int(52 * 0.62) = 32 dims rotated in GLM pairs, 20 passed;
        # pad_head_dim_to_multiple_of pads q, k, v with zeros around attention at the
        # unpadded scale 52^-0.5, which leaves the numbers as they are.
        cfg = "moonshine-shisa-realtime-asr-0.92b.json"
        t = hf.load_text_config(data(cfg))
        self.assertEqual(hf.head_dim(t), 52)
        inv, att = hf.rope_init(t, seq_len=105)
        self.assertEqual(len(inv), 16)
        np.testing.assert_allclose(self.table(cfg, "--emit", "inv-freq"), inv.numpy(),
                                   rtol=1e-12, atol=0)
        x = self.rng.standard_normal((1, 8, 5, 52))
        cos, sin = hf.cos_sin(inv, torch.arange(100, 105), att)
        ref = hf.apply_rotary_pos_emb_glm(torch.from_numpy(x), cos, sin)
        got = self.rope(cfg, x, "--start", 100)
        np.testing.assert_allclose(got, ref.numpy(), **F64)
        np.testing.assert_array_equal(got[..., 32:], x[..., 32:])
        self.assertFalse(np.allclose(got, hf.apply_partial(torch.from_numpy(x), cos, sin,
                                                           32).numpy()))
        q = self.rng.standard_normal((1, 8, 4, 52))
        k, v = (self.rng.standard_normal((1, 8, 4, 52)) for _ in range(2))
        cos, sin = hf.cos_sin(inv, torch.arange(4), att)
        qr, kr = (hf.apply_rotary_pos_emb_glm(torch.from_numpy(a), cos, sin) for a in (q, k))
        ref = hf.eager_attention(qr, kr, torch.from_numpy(v), hf.attention_scaling(t),
                                 hf.hf_mask(torch.arange(4), 4))
        got = self.attention(cfg, q, k, v, "--rope", "--causal")
        self.assert_attention(got, ref, "moonshine")
        self.assertAlmostEqual(got[3]["scale"], 52 ** -0.5, delta=1e-15)

if __name__ == "__main__":
    unittest.main()
