"""HF transformers parity beyond the published configs: the config-reading rules
(priorities, defaults, bad values), HF's mask semantics (KV-cache causal alignment,
sliding_window, chunked attention), the layouts (last-R rotation, rope_interleave,
interleaved M-RoPE, 2-D RoPE from (h, w) ids, Falcon and BLOOM ALiBi, temperature
tuning) and HF's stateful dynamic / longrope frequencies under a KV cache, each
against tests/lib/hf_reference.py (written from HF's code).

Tolerances: float64 rtol 1e-12 for frequencies, 1e-10 for rotated tensors and
attention; masks and shapes exactly.
"""
import json
import os
import unittest

import h5py
import numpy as np
import torch

import hf_reference as hf
from posenc_testlib import PosencTestCase
from reference_bias import get_slopes

torch.set_default_dtype(torch.float64)
F64 = dict(rtol=1e-10, atol=1e-12)


class Case(PosencTestCase):
    rng = np.random.default_rng(7)

    def config(self, cfg, name="config.json"):
        path = self.path(name)
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def inv_freq(self, *args):
        out = self.path("inv.npy")
        self.run_ok("table", "rope", *args, "--emit", "inv-freq", "--dtype", "f64", "-o", out)
        return np.load(out)

    def rope(self, x, *args):
        inp, out = self.npy("x.npy", x), self.path("y.npy")
        self.run_ok("rope", inp, "-o", out, *args)
        return np.load(out)

    def attention(self, q, k, v, *args):
        out = self.path("att.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("attention", "-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                    self.npy("v.npy", v), *args, "--emit", "logits,probs,output", "-o", out)
        with h5py.File(out, "r") as f:
            return f["logits"][()], f["probs"][()], f["output"][()]

    def assert_attention(self, got, ref, msg=""):
        for g, r, name in zip(got, ref, ("logits", "probs", "output")):
            r = r.numpy() if isinstance(r, torch.Tensor) else r
            both = np.isneginf(g) & np.isneginf(r)
            np.testing.assert_allclose(np.where(both, 0, g), np.where(both, 0, r),
                                       err_msg=f"{msg} {name}", **F64)


BASE = {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
        "max_position_embeddings": 65536}


class ConfigRules(Case):
    def test_mla_head_dim_is_qk_rope_head_dim(self):
        cfg = self.config(dict(BASE, hidden_size=7168, num_attention_heads=128,
                               qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                               model_type="deepseek_v2", rope_theta=10000))
        got = self.inv_freq("--hf-config", cfg)
        self.assertEqual(got.shape, (32,))  # not hidden_size / heads = 56 (28 frequencies)
        t = hf.load_text_config(cfg)
        np.testing.assert_allclose(got, hf.rope_init(t)[0].numpy(), rtol=1e-12)

    def test_yarn_beta_zero_and_null_mean_the_defaults(self):
        scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}
        ref_cfg = self.config(dict(BASE, rope_scaling=scaling), "ref.json")
        ref = self.inv_freq("--hf-config", ref_cfg)
        for fast, slow in ((0, 0), (None, None), (0, None)):
            cfg = self.config(dict(BASE, rope_scaling=dict(scaling, beta_fast=fast, beta_slow=slow)))
            got = self.inv_freq("--hf-config", cfg)
            self.assertTrue(np.all(np.isfinite(got)))
            np.testing.assert_array_equal(got, ref)
            t = hf.load_text_config(cfg)
            np.testing.assert_allclose(got, hf.rope_init(t)[0].numpy(), rtol=1e-12)
        got = self.inv_freq("--hf-config", ref_cfg, "--beta-fast", 0, "--beta-slow", 0)
        np.testing.assert_array_equal(got, ref)
        self.assert_fails(2, "table", "rope", "--hf-config", ref_cfg, "--beta-fast", -1,
                          "--emit", "inv-freq", "-o", self.path("x.npy"), match="beta-fast")

    def test_top_level_original_max_and_partial_win(self):
        for typ in ("yarn", "longrope"):
            scaling = {"rope_type": typ, "factor": 4.0, "original_max_position_embeddings": 8192,
                       "partial_rotary_factor": 1.0}
            if typ == "longrope":
                scaling.update(short_factor=[1.0] * 16, long_factor=[2.0] * 16)
            cfg = self.config(dict(BASE, original_max_position_embeddings=2048,
                                   partial_rotary_factor=0.5, rope_scaling=scaling))
            t = hf.load_text_config(cfg)
            for pos in ([0, 1, 2000], [0, 3000]):  # longrope: 3000 > 2048 (top), < 8192
                ids = self.npy("ids.npy", np.array(pos, dtype=np.int64))
                out = self.path("t.npy")
                self.run_ok("table", "rope", "--hf-config", cfg, "--position-ids", ids,
                            "--emit", "cos-sin", "--dtype", "f64", "-o", out)
                inv, att = hf.rope_init(t, seq_len=max(pos) + 1)
                self.assertEqual(len(inv), 16)  # top-level partial 0.5 of 64
                cos, sin = hf.cos_sin(inv, torch.tensor(pos), att)
                np.testing.assert_allclose(np.load(out), np.stack([cos, sin]), err_msg=typ, **F64)

    def test_keyed_rope_parameters_keep_their_own_original_max(self):
        # Keyed by layer type (HF case 2): the top-level value does not apply.
        yarn = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 20000.0}
        cfg = self.config(dict(BASE, original_max_position_embeddings=2048,
                               layer_types=["sliding_attention", "full_attention"],
                               sliding_window=64,
                               rope_parameters={"full_attention": yarn,
                                                "sliding_attention": {"rope_type": "default"}}))
        t = hf.load_text_config(cfg)
        for lt in ("full_attention", "sliding_attention"):
            np.testing.assert_allclose(self.inv_freq("--hf-config", cfg, "--layer-type", lt),
                                       hf.rope_init(t, lt)[0].numpy(), rtol=1e-12, err_msg=lt)

    def test_llama3_without_original_max_uses_max_position_embeddings(self):
        cfg = self.config(dict(BASE, max_position_embeddings=8192, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}))
        t = hf.load_text_config(cfg)
        np.testing.assert_allclose(self.inv_freq("--hf-config", cfg), hf.rope_init(t)[0].numpy(),
                                   rtol=1e-12)

    def test_bad_values_and_layer_types(self):
        out = self.path("x.npy")
        for bad, word in (({"head_dim": 3e9}, "head_dim"),
                          ({"num_attention_heads": 2**40, "head_dim": None}, "num_attention_heads"),
                          ({"qk_rope_head_dim": -64}, "qk_rope_head_dim"),
                          ({"layer_types": "sliding"}, "layer_types"),
                          ({"rope_scaling": {"rope_type": "default", "mrope_section": [1, 2]}},
                           "mrope_section")):
            cfg = self.config(dict(BASE, **bad))
            self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--emit", "inv-freq",
                              "-o", out, match=word)
        cfg = self.config(dict(BASE, layer_types=["sliding_attention", "full_attention"],
                               sliding_window=8))
        self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--layer-type", "local",
                          "--emit", "inv-freq", "-o", out, match="layer.type")
        self.assert_fails(2, "table", "rope", "--dim", 64, "--layer-type", "full_attention",
                          "--emit", "inv-freq", "-o", out, match="--layer-type")
        self.assertFalse(os.path.exists(out))


class Masks(Case):
    def test_causal_with_a_kv_cache_is_bottom_right_as_in_hf(self):
        sq, sk, d = 3, 9, 8
        q, k, v = (self.rng.standard_normal((1, n, d)) for n in (sq, sk, sk))
        qpos = torch.arange(sk - sq, sk)  # HF: cache_position of the new tokens
        ref = hf.eager_attention(*(torch.from_numpy(a)[:, None] for a in (q, k, v)),
                                 d ** -0.5, hf.hf_mask(qpos, sk))
        self.assert_attention(self.attention(q, k, v, "--causal"),
                              [r[:, 0] for r in ref], "bottom-right")
        top_left = self.attention(q, k, v, "--causal", "top-left")[1]
        self.assertFalse(np.allclose(top_left, ref[1][:, 0].numpy()))

    def test_sliding_window_is_hf_sliding_window(self):
        s, d, w = 12, 8, 4
        q, k, v = (self.rng.standard_normal((1, s, d)) for _ in range(3))
        qt, kt, vt = (torch.from_numpy(a)[:, None] for a in (q, k, v))
        for causal in (True, False):
            ref = hf.eager_attention(qt, kt, vt, d ** -0.5,
                                     hf.hf_mask(torch.arange(s), s, sliding_window=w, causal=causal))
            ref = [r[:, 0] for r in ref]
            flag = ["--causal"] if causal else []
            self.assert_attention(self.attention(q, k, v, "--sliding-window", w, *flag), ref,
                                  f"causal={causal}")
            window = f"{w - 1}" if causal else f"{w - 1},{w - 1}"
            self.assert_attention(self.attention(q, k, v, "--window", window, *flag), ref,
                                  f"--window W-1 causal={causal}")

    def test_chunked_attention_with_a_kv_cache(self):
        sq, sk, d, c = 5, 13, 8, 4
        q, k, v = (self.rng.standard_normal((1, n, d)) for n in (sq, sk, sk))
        qpos = torch.arange(sk - sq, sk)
        ref = hf.eager_attention(*(torch.from_numpy(a)[:, None] for a in (q, k, v)), d ** -0.5,
                                 hf.hf_mask(qpos, sk, chunk_size=c))
        self.assert_attention(self.attention(q, k, v, "--causal", "--chunk-size", c),
                              [r[:, 0] for r in ref])

    def test_temperature_tuning(self):
        sq, sk, d = 6, 30, 8
        q, k, v = (self.rng.standard_normal((1, n, d)) for n in (sq, sk, sk))
        qpos = torch.arange(sk - sq, sk)
        qt = hf.llama4_temperature(torch.from_numpy(q)[:, :, None], qpos, 0.5, 4)[:, :, 0]
        ref = hf.eager_attention(qt[:, None], torch.from_numpy(k)[:, None],
                                 torch.from_numpy(v)[:, None], d ** -0.5, hf.hf_mask(qpos, sk))
        self.assert_attention(self.attention(q, k, v, "--causal", "--attn-temperature", 0.5, 4),
                              [r[:, 0] for r in ref])

    def test_falcon_and_bloom_alibi(self):
        h, s, d = 6, 7, 8  # 6 heads: BLOOM's slopes for a non-power of two
        q, k, v = (self.rng.standard_normal((1, h, s, d)) for _ in range(3))
        qt, kt, vt = map(torch.from_numpy, (q, k, v))
        mask = hf.hf_mask(torch.arange(s), s)
        slopes = get_slopes(h)
        ref = hf.falcon_alibi_attention(qt, kt, vt, slopes, mask)
        self.assert_attention(self.attention(q, k, v, "--causal", "--alibi", "falcon"), ref, "falcon")
        cfg = self.config({"model_type": "falcon", "alibi": True, "num_attention_heads": h,
                           "hidden_size": h * d})
        self.assert_attention(self.attention(q, k, v, "--causal", "--hf-config", cfg), ref,
                              "falcon config")
        ref = hf.eager_attention(qt, kt, vt, d ** -0.5, mask, bias=hf.bloom_alibi(slopes, s))
        self.assert_attention(self.attention(q, k, v, "--causal", "--alibi", "bloom"), ref, "bloom")


class Layouts(Case):
    def test_rotary_last(self):
        x = self.rng.standard_normal((1, 2, 5, 24))
        inv = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
        cos, sin = hf.cos_sin(torch.from_numpy(inv), torch.arange(5))
        xt = torch.from_numpy(x)
        ref = torch.cat([xt[..., :16], hf.apply_rotary_pos_emb(xt[..., 16:], cos, sin)], -1)
        got = self.rope(x, "--rotary-dim", 8, "--rotary-last")
        np.testing.assert_allclose(got, ref.numpy(), **F64)
        ref = torch.cat([xt[..., :16],
                         hf.apply_rotary_emb_complex(xt[..., 16:].transpose(1, 2),
                                                     torch.from_numpy(inv),
                                                     torch.arange(5)).transpose(1, 2)], -1)
        got = self.rope(x, "--rotary-dim", 8, "--rotary-last", "--style", "gptj")
        np.testing.assert_allclose(got, ref.numpy(), **F64)

    def test_rope_interleave(self):
        x = self.rng.standard_normal((1, 3, 6, 16))
        inv = 1.0 / 500.0 ** (np.arange(0, 16, 2) / 16)
        cos, sin = hf.cos_sin(torch.from_numpy(inv), torch.arange(6))
        ref = hf.apply_rotary_pos_emb_interleave(torch.from_numpy(x), cos, sin)
        got = self.rope(x, "--rope-interleave", "--base", 500)
        np.testing.assert_allclose(got, ref.numpy(), **F64)
        back = self.rope(got, "--rope-interleave", "--base", 500, "--inverse")
        np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("z.npy"),
                          "--rope-interleave", "--style", "gptj", match="rope.interleave")

    def test_interleaved_mrope_option(self):
        ids = self.rng.integers(0, 50, size=(3, 9)).astype(np.int64)
        x = self.rng.standard_normal((1, 2, 9, 32))
        inv = torch.from_numpy(1.0 / 10000.0 ** (np.arange(0, 32, 2) / 32))
        for il in (False, True):
            cos, sin = hf.mrope_cos_sin(inv, torch.from_numpy(ids), [6, 5, 5], il)
            ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
            flags = ["--mrope-interleaved"] if il else []
            got = self.rope(x, "--mrope-section", "6,5,5", *flags, "--position-ids",
                            self.npy("ids.npy", ids))
            np.testing.assert_allclose(got, ref.numpy(), err_msg=f"interleaved={il}", **F64)

    def test_rope2d_from_hw_ids(self):
        # Qwen2-VL vision tokens in spatial-merge order: (h, w) given per token.
        hw = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]])
        x = self.rng.standard_normal((8, 2, 80))  # [tokens, heads, head_dim 80]
        ref = hf.vision_rope(torch.from_numpy(x), torch.from_numpy(hw))
        ids = self.npy("hw.npy", hw.T.astype(np.int32))
        got = self.rope(x, "--axes", "shd", "--rope2d-ids", "--position-ids", ids, "--style", "neox")
        np.testing.assert_allclose(got, ref.numpy(), **F64)
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("z.npy"), "--axes",
                          "shd", "--rope2d-ids", match="ids")
        self.npy("flat.npy", np.arange(8))
        self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("z.npy"), "--axes",
                          "shd", "--rope2d-ids", "--position-ids", self.path("flat.npy"),
                          match="position")


class StatefulFrequencies(Case):
    """HF's dynamic_rope_update keeps state across forward calls: keys cached by an
    earlier call keep that call's frequencies. posenc is stateless: each call's
    frequencies follow its own positions (largest + 1, or --seq-len)."""

    def stateful_cfg(self, scaling):
        return self.config(dict(BASE, hidden_size=64, num_attention_heads=2,
                                max_position_embeddings=16, rope_scaling=scaling))

    def per_call(self, cfg, start, n, *extra):
        out = self.path("c.npy")
        self.run_ok("table", "rope", "--hf-config", cfg, "--start", start, "--positions", n,
                    "--emit", "cos-sin", "--dtype", "f64", "--layout", "full", *extra, "-o", out)
        return np.load(out)

    def test_dynamic_ntk_prefill_then_decode(self):
        cfg = self.stateful_cfg({"rope_type": "dynamic", "factor": 2.0})
        module = hf.StatefulRotary(hf.load_text_config(cfg))
        calls = [(0, 20), (20, 1), (21, 1), (0, 10), (0, 40), (0, 18)]
        for start, n in calls:
            cos, sin = module.forward(torch.arange(start, start + n))
            if (start, n) == (0, 18):
                # HF keeps the frequencies of seq_len 40 (18 > 16 resets nothing), posenc
                # computes those of 18 unless told --seq-len 40.
                got = self.per_call(cfg, start, n)
                self.assertFalse(np.allclose(got[0], cos.numpy()))
                got = self.per_call(cfg, start, n, "--seq-len", 40)
            else:
                got = self.per_call(cfg, start, n)
            np.testing.assert_allclose(got, np.stack([cos, sin]), err_msg=f"{start}+{n}", **F64)

    def test_longrope_switches_per_call(self):
        cfg = self.stateful_cfg({"rope_type": "longrope", "original_max_position_embeddings": 8,
                                 "short_factor": [1.0, 1.1, 1.2, 1.3] * 4,
                                 "long_factor": [2.0, 3.0, 4.0, 5.0] * 4})
        module = hf.StatefulRotary(hf.load_text_config(cfg))
        for start, n in ((0, 6), (6, 2), (8, 1), (0, 4)):
            cos, sin = module.forward(torch.arange(start, start + n))
            np.testing.assert_allclose(self.per_call(cfg, start, n), np.stack([cos, sin]),
                                       err_msg=f"{start}+{n}", **F64)


class Families(Case):
    """Model families whose config alone decides something only their modeling code
    does, each against its model's code as hf_reference.py transcribes it."""

    def cos_sin(self, cfg, pos, *extra):
        ids = self.npy("ids.npy", np.array(pos, dtype=np.int64))
        out = self.path("t.npy")
        self.run_ok("table", "rope", "--hf-config", cfg, "--position-ids", ids, "--emit",
                    "cos-sin", "--dtype", "f64", *extra, "-o", out)
        return np.load(out)

    def test_phimoe_short_and_long_mscale(self):
        # Phi-3.5-MoE's layout: top-level and inner L0 4096, no rope_theta (PhimoeConfig's
        # default 1e6); mscales that differ from each other and from longrope's
        # sqrt(1 + ln 32 / ln 4096) so that each choice shows.
        scaling = {"type": "longrope", "original_max_position_embeddings": 4096,
                   "short_factor": [1.0 + 0.01 * i for i in range(32)],
                   "long_factor": [1.5 + 0.2 * i for i in range(32)],
                   "short_mscale": 1.243163121016122, "long_mscale": 1.31}
        cfg = self.config(dict(BASE, model_type="phimoe", max_position_embeddings=131072,
                               original_max_position_embeddings=4096, rope_scaling=scaling))
        t = hf.load_text_config(cfg)
        for pos in ([0, 5, 4095], [3, 4096], [0, 70000]):
            cos, sin = hf.phimoe_cos_sin(t, pos)
            np.testing.assert_allclose(self.cos_sin(cfg, pos), np.stack([cos, sin]),
                                       err_msg=str(pos), **F64)
        # Applied to a tensor: the same factor on the rotation.
        x = self.rng.standard_normal((1, 2, 3, 64))
        cos, sin = hf.phimoe_cos_sin(t, [4100, 4101, 4102])
        ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin)
        np.testing.assert_allclose(self.rope(x, "--hf-config", cfg, "--start", 4100),
                                   ref.numpy(), **F64)
        # An explicit --attention-factor still wins.
        got = self.cos_sin(cfg, [0, 7], "--attention-factor", 2.0)
        inv, _ = hf.rope_init(t, seq_len=8)
        np.testing.assert_allclose(got, np.stack(hf.cos_sin(inv, torch.tensor([0, 7]), 2.0)),
                                   **F64)
        # PhimoeConfig.validate_rope: both mscales must be numbers.
        for bad in ({"long_mscale": None}, {"short_mscale": "1.2"}):
            cfg = self.config(dict(BASE, model_type="phimoe", max_position_embeddings=131072,
                                   rope_scaling=dict(scaling, **bad)))
            key = next(iter(bad))
            self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--emit", "inv-freq",
                              "-o", self.path("x.npy"), match=f"config.json: '{key}'")

    def test_hunyuan_dynamic_alpha(self):
        # HunYuan-7B's rope_scaling: "dynamic" with alpha 1000 and factor 1.0.
        scaling = {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                   "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}
        for mt in ("hunyuan_v1_dense", "hunyuan_v1_moe"):
            cfg = self.config(dict(BASE, model_type=mt, hidden_size=512, head_dim=128,
                                   max_position_embeddings=32768, rope_theta=10000.0,
                                   rope_scaling=scaling))
            t = hf.load_text_config(cfg)
            # Within max_position_embeddings: the static alpha base; past it, HF's
            # dynamic_rope_update grows to plain dynamic NTK (factor 1).
            for pos in ([0, 1, 100, 30000], [0, 32767], [0, 40000]):
                inv, att = hf.hunyuan_inv_freq(t, seq_len=max(pos) + 1)
                cos, sin = hf.cos_sin(inv, torch.tensor(pos), att)
                np.testing.assert_allclose(self.cos_sin(cfg, pos), np.stack([cos, sin]),
                                           err_msg=f"{mt} {pos}", **F64)
            inv, _ = hf.hunyuan_inv_freq(t)
            np.testing.assert_allclose(self.inv_freq("--hf-config", cfg), inv.numpy(),
                                       rtol=1e-12, err_msg=mt)
        # --arith hf: HF's own float32 expression, bit for bit.
        out = self.path("inv32.npy")
        self.run_ok("table", "rope", "--hf-config", cfg, "--arith", "hf", "--emit", "inv-freq",
                    "-o", out)
        base = 10000.0 * 1000.0 ** (128 / 126)
        ref = 1.0 / (base ** (torch.arange(0, 128, 2).float() / 128))
        np.testing.assert_array_equal(np.load(out), ref.numpy())
        # Without alpha the same type is plain dynamic NTK.
        cfg = self.config(dict(BASE, model_type="hunyuan_v1_dense", max_position_embeddings=64,
                               rope_scaling={"type": "dynamic", "factor": 2.0}))
        t = hf.load_text_config(cfg)
        inv, _ = hf.hunyuan_inv_freq(t, seq_len=100)
        cos, sin = hf.cos_sin(inv, torch.tensor([0, 99]))
        np.testing.assert_allclose(self.cos_sin(cfg, [0, 99]), np.stack([cos, sin]), **F64)

    def test_glm_style_pairs_of_helium_ernie_and_moonshine(self):
        x = self.rng.standard_normal((1, 2, 5, 128))
        cases = {
            "helium": dict(BASE, hidden_size=512, rope_theta=100000.0),
            "ernie4_5": dict(BASE, hidden_size=1024, num_attention_heads=16, head_dim=128),
            "ernie4_5_moe": dict(BASE, hidden_size=2560, num_attention_heads=20, head_dim=128,
                                 rope_theta=500000.0),
            # moonshine-tiny's layout: encoder_* head counts (MoonshineConfig.attribute_map),
            # partial_rotary_factor 0.9 by default: int(36 * 0.9) = 32 of 36 dims rotated.
            "moonshine": {"hidden_size": 288, "encoder_num_attention_heads": 8,
                          "decoder_num_attention_heads": 8, "encoder_num_hidden_layers": 6,
                          "decoder_num_hidden_layers": 6, "max_position_embeddings": 194,
                          "rope_theta": 10000.0},
        }
        for mt, keys in cases.items():
            cfg = self.config(dict(keys, model_type=mt))
            t = hf.load_text_config(cfg)
            d = hf.head_dim(t)
            inv, att = hf.rope_init(t, seq_len=105)
            cos, sin = hf.cos_sin(inv, torch.arange(100, 105), att)
            xt = torch.from_numpy(x[..., :d].copy())
            ref = hf.apply_rotary_pos_emb_glm(xt, cos, sin)
            got = self.rope(xt.numpy(), "--hf-config", cfg, "--start", 100)
            np.testing.assert_allclose(got, ref.numpy(), err_msg=mt, **F64)
            # Not the NeoX pairs.
            self.assertFalse(np.allclose(got, hf.apply_partial(xt, cos, sin, 2 * len(inv))),
                             mt)
        # Moonshine's head counts are read for attention too.
        cfg = self.config(dict(cases["moonshine"], model_type="moonshine"))
        q = self.rng.standard_normal((1, 8, 4, 36))
        got = self.attention(q, q, q, "--causal", "--rope", "--hf-config", cfg)
        t = hf.load_text_config(cfg)
        inv, att = hf.rope_init(t, seq_len=4)
        qr = hf.apply_rotary_pos_emb_glm(torch.from_numpy(q), *hf.cos_sin(inv, torch.arange(4)))
        ref = hf.eager_attention(qr, qr, torch.from_numpy(q), 36 ** -0.5,
                                 hf.hf_mask(torch.arange(4), 4))
        self.assert_attention(got, ref, "moonshine")

    def test_gemma3n_attention_scale_one_and_per_layer_theta(self):
        # Gemma-3n E4B's text_config keys, fewer layers, no layer_types (the class rule:
        # every 5th layer full); query_pre_attn_scalar is there but HF ignores it.
        cfg = self.config({"model_type": "gemma3n", "text_config": {
            "model_type": "gemma3n_text", "hidden_size": 2048, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 10,
            "query_pre_attn_scalar": 256, "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0, "sliding_window": 512,
            "max_position_embeddings": 32768}})
        t = hf.load_text_config(cfg)
        self.assertEqual(hf.layer_types(t)[3:5], ["sliding_attention", "full_attention"])
        sq, sk = 4, 604  # past the 512-token window
        q = self.rng.standard_normal((1, 8, sq, 256))
        k, v = (self.rng.standard_normal((1, 2, sk, 256)) for _ in range(2))
        qpos = torch.arange(sk - sq, sk)
        for lt in ("sliding_attention", "full_attention"):
            inv, att = hf.rope_init(t, lt)
            qr = hf.apply_rotary_pos_emb(torch.from_numpy(q), *hf.cos_sin(inv, qpos, att))
            kr = hf.apply_rotary_pos_emb(torch.from_numpy(k),
                                         *hf.cos_sin(inv, torch.arange(sk), att))
            window = t["sliding_window"] if lt == "sliding_attention" else None
            ref = hf.eager_attention(qr, kr, torch.from_numpy(v), hf.attention_scaling(t),
                                     hf.hf_mask(qpos, sk, sliding_window=window))
            got = self.attention(q, k, v, "--rope", "--causal", "--hf-config", cfg,
                                 "--layer-type", lt)
            self.assert_attention(got, ref, f"gemma-3n {lt}")

    def test_olmo3_legacy_rope_scaling_on_full_layers_only(self):
        # Olmo-3 7B's keys (fewer layers, no layer_types: every 4th layer full): a legacy
        # yarn rope_scaling that Olmo3Config merges into full_attention only.
        yarn = {"attention_factor": 1.2079441541679836, "beta_fast": 32, "beta_slow": 1,
                "factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "yarn"}
        keys = dict(BASE, model_type="olmo3", num_hidden_layers=8,
                    max_position_embeddings=65536, rope_scaling=yarn)
        for theta in (500000, 20000):  # 20000: sliding layers still get default_theta
            cfg = self.config(dict(keys, rope_theta=theta))
            t = hf.load_text_config(cfg)
            self.assertEqual(hf.layer_types(t)[2:4], ["sliding_attention", "full_attention"])
            pos = [0, 9, 70000]
            for lt in ("sliding_attention", "full_attention"):
                inv, att = hf.rope_init(t, lt, seq_len=max(pos) + 1)
                cos, sin = hf.cos_sin(inv, torch.tensor(pos), att)
                got = self.cos_sin(cfg, pos, "--layer-type", lt)
                np.testing.assert_allclose(got, np.stack([cos, sin]), err_msg=f"{theta} {lt}",
                                           **F64)
        # The sliding window comes with the sliding layers.
        q = self.rng.standard_normal((1, 4, 3, 64))
        got = self.attention(q, q, q, "--causal", "--hf-config", cfg, "--layer-type",
                             "sliding_attention")
        ref = hf.eager_attention(*(torch.from_numpy(q),) * 3, 64 ** -0.5,
                                 hf.hf_mask(torch.arange(3), 3, sliding_window=4096))
        self.assert_attention(got, ref, "olmo-3 sliding")

    def assert_nope_layer_type(self, cfg, lt, rotating):
        """A layer type without RoPE: no table, no rotation, and attention on it is HF's
        eager attention of unrotated q and k; the other layer type rotates."""
        out = self.path("x.npy")
        self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--layer-type", lt, "--emit",
                          "inv-freq", "-o", out, match="no RoPE")
        x = self.rng.standard_normal((1, 4, 5, 64))
        self.npy("x.npy", x)
        self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                          "--hf-config", cfg, "--layer-type", lt, match="no RoPE")
        self.assert_fails(3, "attention", "-q", self.path("x.npy"), "-k", self.path("x.npy"),
                          "--rope", "--hf-config", cfg, "--layer-type", lt, "--emit", "probs",
                          "-o", self.path("p.npy"), match="no RoPE")
        t = hf.load_text_config(cfg)
        xt = torch.from_numpy(x)
        window = t.get("sliding_window") if lt == "sliding_attention" else None
        ref = hf.eager_attention(xt, xt, xt, 64 ** -0.5,
                                 hf.hf_mask(torch.arange(5), 5, sliding_window=window))
        self.assert_attention(self.attention(x, x, x, "--causal", "--hf-config", cfg,
                                             "--layer-type", lt), ref, f"{cfg} {lt}")
        inv, _ = hf.rope_init(t, rotating)
        ref = hf.apply_rotary_pos_emb(xt, *hf.cos_sin(inv, torch.arange(5)))
        np.testing.assert_allclose(self.rope(x, "--hf-config", cfg, "--layer-type", rotating),
                                   ref.numpy(), **F64)

    def test_exaone4_and_afmoe_rotate_only_sliding_layers(self):
        for mt, extra in (("exaone4", {}), ("afmoe", {"global_attn_every_n_layers": 4,
                                                      "sliding_window": 2048})):
            cfg = self.config(dict(BASE, model_type=mt, num_hidden_layers=8, **extra))
            t = hf.load_text_config(cfg)
            types = hf.layer_types(t)
            self.assertEqual(types[2:4], ["sliding_attention", "full_attention"])
            self.assertEqual([hf.layer_rotates(t, i) for i in (2, 3)], [True, False])
            self.assert_nope_layer_type(cfg, "full_attention", "sliding_attention")
            # Unasked, the table is that of the rotating layers.
            inv, _ = hf.rope_init(t, "sliding_attention")
            np.testing.assert_allclose(self.inv_freq("--hf-config", cfg), inv.numpy(),
                                       rtol=1e-12)
        # EXAONE-4 without a sliding window (the 1.2B layout): every layer rotates.
        cfg = self.config(dict(BASE, model_type="exaone4", sliding_window=None,
                               layer_types=["full_attention"] * 2))
        t = hf.load_text_config(cfg)
        self.assertTrue(hf.layer_rotates(t, 0))
        x = self.rng.standard_normal((1, 4, 5, 64))
        inv, _ = hf.rope_init(t)
        ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), *hf.cos_sin(inv, torch.arange(5)))
        np.testing.assert_allclose(self.rope(x, "--hf-config", cfg, "--layer-type",
                                             "full_attention"), ref.numpy(), **F64)

    def test_smollm3_no_rope_layers_by_layer_index(self):
        # SmolLM3-3B's layout: every 4th layer NoPE, all layers full_attention, so the
        # layer type cannot tell; --layer N follows SmolLM3Attention.use_rope of layer N.
        cases = (dict(num_hidden_layers=8),  # the no_rope_layer_interval rule
                 dict(num_hidden_layers=4, no_rope_layers=[1, 0, 1, 1]),
                 dict(num_hidden_layers=8, use_sliding_window=True, sliding_window=3))
        x = self.rng.standard_normal((1, 4, 5, 64))
        xt = torch.from_numpy(x)
        for extra in cases:
            cfg = self.config(dict(BASE, model_type="smollm3", **extra))
            t = hf.load_text_config(cfg)
            inv, _ = hf.rope_init(t)
            self.assertEqual(float(inv[1]), 2_000_000.0 ** (-2 / 64))  # default_theta
            cos, sin = hf.cos_sin(inv, torch.arange(5))
            for i in range(t["num_hidden_layers"]):
                lt = hf.layer_types(t)[i]
                window = 3 if lt == "sliding_attention" else None
                if hf.layer_rotates(t, i):
                    ref = hf.apply_rotary_pos_emb(xt, cos, sin)
                    np.testing.assert_allclose(
                        self.rope(x, "--hf-config", cfg, "--layer", i), ref.numpy(),
                        err_msg=f"{extra} layer {i}", **F64)
                    q = ref
                else:
                    self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                                      "--hf-config", cfg, "--layer", i,
                                      match=f"layer {i} .* no RoPE")
                    self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--layer", i,
                                      "--emit", "inv-freq", "-o", self.path("t.npy"),
                                      match="no_rope_layers")
                    q = xt
                ref = hf.eager_attention(q, q, xt, 64 ** -0.5,
                                         hf.hf_mask(torch.arange(5), 5, sliding_window=window))
                rope = ["--rope"] if hf.layer_rotates(t, i) else []
                got = self.attention(x, x, x, "--causal", *rope, "--hf-config", cfg,
                                     "--layer", i)
                self.assert_attention(got, ref, f"{extra} layer {i}")
        # Out of range, or not a layer of the named type: exit 3 naming the file.
        self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                          "--hf-config", cfg, "--layer", 8, match="config.json: layer 8")
        self.assert_fails(3, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                          "--hf-config", cfg, "--layer", 3, "--layer-type", "full_attention",
                          match="config.json: layer 3 is a 'sliding_attention' layer")
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                          "--layer", 0, match="--layer")


if __name__ == "__main__":
    unittest.main()
