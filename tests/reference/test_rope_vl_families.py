"""`posenc rope` with the RoPE of two multimodal families against HF transformers' own
functions, written out here in torch with the structure of the upstream code and run in
float64 (upstream computes the angles in float32; float64 is the exact answer posenc
gives):

- ERNIE-4.5-VL (modeling_ernie4_5_vl_moe.py): `Ernie4_5_VL_MoeTextRotaryEmbedding`
  (compute_default_rope_parameters' pre-permuted inv_freq, forward, recomposition_to_3d
  interleaving the h and w parts pair by pair, appending t, repeat_interleave(2)) and
  `apply_rotary_pos_emb` with `rotate_half_text`; position ids (t, h, w) [3, b, s] and
  [3, s]. posenc: `--layout ernie-vl:H,W,T --style gptj`, and `--hf-config` with a
  config shaped like baidu/ERNIE-4.5-VL-28B-A3B-PT's (transformers v5: a text_config
  with rope_parameters.mrope_section), the default [22, 22, 20] when absent.
- HunYuan-VL (modeling_hunyuan_vl.py): `HunYuanVLRotaryEmbedding` (cat(freqs, freqs)
  over every position-id row) and `apply_rotary_pos_emb_xdrope` (cos and sin split
  into chunks of 2 * section dims over the whole head, chunk i from row i, neox
  rotate_half), with `HunYuanDenseV1RotaryEmbedding`'s NTK-alpha base; 4 rows
  (position, width, height, image index) and 3 (width, height, image index). posenc:
  `--layout xdrope:S1,...,Sn`, and `--hf-config` with a legacy top-level config shaped
  like tencent/HunyuanOCR's (rope_scaling type xdrope, alpha, xdrope_section,
  attention_head_dim) and with the v5 text_config form (rope_parameters.mrope_section).

The references are in tests/lib/vl_rope_reference.py.
Tolerance: max |posenc - reference| <= 1e-12 * max |q| (float64 input and output).
Bad sections, configs and id shapes: one error line, exit 2 (usage) or 3 (input).
"""
import json
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from vl_rope_reference import (ernie_compute_default_rope_parameters, ernie_recomposition_to_3d,
                               ernie_reference, hunyuan_reference)

TOL = 1e-12


# --- configs shaped like the published ones -------------------------------------------

def ernie_vl_config(mrope_section=(22, 22, 20), rope_type="default"):
    """baidu/ERNIE-4.5-VL-28B-A3B-PT as transformers v5 writes it (text part)."""
    rope = {"rope_type": rope_type, "rope_theta": 500000.0}
    if mrope_section is not None:
        rope["mrope_section"] = list(mrope_section)
    return {
        "architectures": ["Ernie4_5_VL_MoeForConditionalGeneration"],
        "model_type": "ernie4_5_vl_moe",
        "image_token_id": 100295,
        "text_config": {
            "model_type": "ernie4_5_vl_moe_text",
            "hidden_size": 2560,
            "intermediate_size": 12288,
            "num_hidden_layers": 28,
            "num_attention_heads": 20,
            "num_key_value_heads": 4,
            "max_position_embeddings": 131072,
            "moe_k": 6,
            "moe_num_experts": 64,
            "rope_parameters": rope,
            "use_bias": False,
        },
        "vision_config": {"model_type": "ernie4_5_vl_moe_vision", "depth": 32,
                          "hidden_size": 1280, "num_heads": 16, "patch_size": 14},
    }


def hunyuan_ocr_config(section=(16, 16, 16, 16), alpha=1000.0):
    """tencent/HunyuanOCR's legacy layout: text fields at the top level, rope_scaling
    of type xdrope with alpha and xdrope_section, attention_head_dim."""
    return {
        "architectures": ["HunYuanVLForConditionalGeneration"],
        "model_type": "hunyuan_vl",
        "attention_head_dim": 128,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_hidden_layers": 24,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "rope_scaling": {"alpha": alpha, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0, "type": "xdrope",
                         "xdrope_section": list(section)},
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27, "patch_size": 16},
    }


def hunyuan_vl_v5_config(section, alpha=1000.0):
    """The transformers v5 form: HunYuanVLConfig with a text_config."""
    return {
        "model_type": "hunyuan_vl",
        "text_config": {
            "model_type": "hunyuan_vl_text",
            "head_dim": 128,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": alpha,
                                "factor": 1.0, "mrope_section": list(section)},
        },
    }


class VlCase(PosencTestCase):
    def rope(self, q, *args):
        self.npy("q.npy", q)
        self.run_ok("rope", self.path("q.npy"), "-o", self.path("y.npy"), *args)
        return np.load(self.path("y.npy"))

    def config(self, cfg, name="config.json"):
        with open(self.path(name), "w") as f:
            json.dump(cfg, f)
        return self.path(name)

    def assert_rope_close(self, y, ref, q):
        self.assertEqual(y.shape, ref.shape)
        self.assertEqual(y.dtype, np.float64)
        err = np.abs(y - ref).max()
        self.assertLessEqual(err, TOL * np.abs(q).max(), f"max abs error {err}")


class TestErnieVl(VlCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(27)

    def data(self, b, h, s, d, batch_ids=True):
        q = self.rng.standard_normal((b, h, s, d))
        shape = (3, b, s) if batch_ids else (3, s)
        ids = self.rng.integers(0, 4000, shape).astype(np.int64)
        self.npy("ids.npy", ids)
        return q, ids

    def test_layout_option(self):
        for d, sec, batch_ids in ((128, (22, 22, 20), True), (128, (22, 22, 20), False),
                                  (64, (8, 8, 16), True), (32, (0, 0, 16), True)):
            with self.subTest(d=d, sec=sec, batch_ids=batch_ids):
                q, ids = self.data(2, 3, 11, d, batch_ids)
                y = self.rope(q, "--layout", "ernie-vl:" + ",".join(map(str, sec)),
                              "--style", "gptj", "--base", "500000",
                              "--position-ids", self.path("ids.npy"))
                self.assert_rope_close(y, ernie_reference(q, ids, 500000.0, sec), q)

    def test_hf_config(self):
        for sec in ((22, 22, 20), (16, 16, 32), None):
            with self.subTest(sec=sec):
                q, ids = self.data(1, 4, 13, 128)
                cfg = self.config(ernie_vl_config(sec))
                y = self.rope(q, "--hf-config", cfg, "--position-ids", self.path("ids.npy"))
                ref = ernie_reference(q, ids, 500000.0, sec or (22, 22, 20))
                self.assert_rope_close(y, ref, q)

    def test_text_tokens_are_plain_gptj_rope(self):
        # Equal t, h, w ids (text tokens): every pair its own inv_freq at the position.
        q, _ = self.data(1, 2, 9, 128)
        ids = np.tile(np.arange(9, dtype=np.int64) + 100, (3, 1))
        self.npy("ids.npy", ids)
        cfg = self.config(ernie_vl_config())
        y = self.rope(q, "--hf-config", cfg, "--position-ids", self.path("ids.npy"))
        self.assert_rope_close(y, ernie_reference(q, ids, 500000.0, (22, 22, 20)), q)
        self.npy("pos.npy", ids[0])
        self.run_ok("rope", self.path("q.npy"), "-o", self.path("plain.npy"), "--style", "gptj",
                    "--base", "500000", "--position-ids", self.path("pos.npy"))
        self.assert_rope_close(np.load(self.path("plain.npy")), y, q)

    def test_table_angles(self):
        # `posenc table rope` with [3, s] ids: one line per token, pair j at the row the
        # layout gives it (recomposition_to_3d's angles, before cos and sin), repeated
        # for both dims of the pair (GPT-J).
        _, ids = self.data(1, 1, 6, 128, batch_ids=False)
        cfg = self.config(ernie_vl_config())
        self.run_ok("table", "rope", "--hf-config", cfg, "--position-ids", self.path("ids.npy"),
                    "--emit", "angles", "--dtype", "f64", "-o", self.path("a.npy"))
        a = np.load(self.path("a.npy"))
        inv_freq, _ = ernie_compute_default_rope_parameters(500000.0, 128, (22, 22, 20))
        freqs = torch.from_numpy(ids).to(torch.float64)[:, None, :, None] * inv_freq  # [3, 1, s, 64]
        ref = ernie_recomposition_to_3d(freqs, (22, 22, 20))[0].numpy()
        self.assertEqual(a.shape, ref.shape)
        self.assertLessEqual(np.abs(a - ref).max(), TOL * np.abs(ref).max())
        cfg = self.config(hunyuan_ocr_config(), "hunyuan.json")
        self.npy("ids4.npy", np.zeros((4, 6), np.int64))
        self.assert_fails(2, "table", "rope", "--hf-config", cfg, "--position-ids",
                          self.path("ids4.npy"), "-o", self.path("b.npy"), match="xdrope")

    def test_the_order_matters(self):
        # A test that can fail: ids with h and w swapped give other values.
        q, ids = self.data(1, 1, 7, 128)
        y = self.rope(q, "--layout", "ernie-vl:22,22,20", "--style", "gptj", "--base", "500000",
                      "--position-ids", self.path("ids.npy"))
        swapped = ernie_reference(q, ids[[0, 2, 1]], 500000.0, (22, 22, 20))
        self.assertGreater(np.abs(y - swapped).max(), 1e-3)

    def test_bad_inputs(self):
        q, _ = self.data(1, 2, 5, 128)
        self.npy("q.npy", q)
        self.npy("ids2.npy", np.zeros((2, 5), np.int64))
        run = ("rope", self.path("q.npy"), "-o", self.path("y.npy"))
        self.assert_fails(2, *run, "--layout", "ernie-vl:22,20,22", "--style", "gptj",
                          "--position-ids", self.path("ids.npy"), match="h and w")
        self.assert_fails(2, *run, "--layout", "ernie-vl:20,20,20",
                          "--position-ids", self.path("ids.npy"), match="sum")
        self.assert_fails(2, *run, "--layout", "ernie-vl:22,22", match="three counts h,w,t")
        self.assert_fails(2, *run, "--layout", "ernie-vl", match="three counts h,w,t")
        self.assert_fails(3, *run, "--layout", "ernie-vl:22,22,20",
                          "--position-ids", self.path("ids2.npy"), match=r"\[3, s\]")
        cfg = self.config(ernie_vl_config((22, 20, 22)))
        self.assert_fails(3, *run, "--hf-config", cfg, "--position-ids", self.path("ids.npy"),
                          match="must be equal")
        cfg = self.config(ernie_vl_config((20, 20, 20)))
        self.assert_fails(3, *run, "--hf-config", cfg, "--position-ids", self.path("ids.npy"),
                          match="sums to 60")
        cfg = self.config(ernie_vl_config(rope_type="linear"))
        self.assert_fails(3, *run, "--hf-config", cfg, match="default rope type")
        cfg = self.config(ernie_vl_config())
        self.assert_fails(2, *run, "--hf-config", cfg, "--layout", "sections:22,22,20",
                          "--position-ids", self.path("ids.npy"), match="ernie-vl")
        self.assertFalse(os.path.exists(self.path("y.npy")))


class TestHunyuanVl(VlCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(28)

    def data(self, rows, b, h, s, d=128):
        q = self.rng.standard_normal((b, h, s, d))
        ids = self.rng.integers(0, 3000, (rows, b, s)).astype(np.int64)
        self.npy("ids.npy", ids)
        return q, ids

    def test_layout_option(self):
        for sec in ((16, 16, 16, 16), (20, 22, 22), (32, 0, 16, 16)):
            with self.subTest(sec=sec):
                q, ids = self.data(len(sec), 2, 3, 10)
                y = self.rope(q, "--layout", "xdrope:" + ",".join(map(str, sec)),
                              "--base", "10000", "--position-ids", self.path("ids.npy"))
                self.assert_rope_close(y, hunyuan_reference(q, ids, 10000.0, 1.0, list(sec)), q)

    def test_hf_config_legacy_and_v5(self):
        cases = (("legacy 4", hunyuan_ocr_config(), (16, 16, 16, 16)),
                 ("legacy 3", hunyuan_ocr_config((20, 22, 22), alpha=50.0), (20, 22, 22)),
                 ("v5 4", hunyuan_vl_v5_config((16, 16, 16, 16)), (16, 16, 16, 16)),
                 ("v5 3", hunyuan_vl_v5_config((24, 20, 20), alpha=1.5), (24, 20, 20)))
        for name, cfg, sec in cases:
            with self.subTest(name):
                alpha = (cfg.get("rope_scaling") or cfg["text_config"]["rope_parameters"])["alpha"]
                q, ids = self.data(len(sec), 1, 4, 12)
                y = self.rope(q, "--hf-config", self.config(cfg),
                              "--position-ids", self.path("ids.npy"))
                ref = hunyuan_reference(q, ids, 10000.0, alpha, list(sec))
                self.assert_rope_close(y, ref, q)

    def test_pairs_with_different_coordinates(self):
        # xdrope gives dims k and k + D/2 different rows: not the per-pair M-RoPE of the
        # same sections (a test that can fail).
        q, ids = self.data(4, 1, 1, 6)
        y = self.rope(q, "--layout", "xdrope:16,16,16,16", "--position-ids", self.path("ids.npy"))
        self.npy("ids3.npy", ids[:3])
        self.run_ok("rope", self.path("q.npy"), "-o", self.path("m.npy"), "--mrope-section",
                    "16,24,24", "--position-ids", self.path("ids3.npy"))
        self.assertGreater(np.abs(y - np.load(self.path("m.npy"))).max(), 1e-3)

    def test_bad_inputs(self):
        q, _ = self.data(4, 1, 2, 5)
        self.npy("q.npy", q)
        self.npy("ids3.npy", np.zeros((3, 5), np.int64))
        run = ("rope", self.path("q.npy"), "-o", self.path("y.npy"))
        self.assert_fails(2, *run, "--layout", "xdrope:16,16,16,8",
                          "--position-ids", self.path("ids.npy"), match="sum")
        self.assert_fails(2, *run, "--layout", "xdrope:64", match="2 to 8 counts")
        self.assert_fails(2, *run, "--layout", "xdrope:16,16,x,16", match="2 to 8 counts")
        self.assert_fails(3, *run, "--layout", "xdrope:16,16,16,16",
                          "--position-ids", self.path("ids3.npy"), match=r"\[4, s\]")
        self.assert_fails(2, *run, "--layout", "xdrope:16,16,16,16", "--inverse",
                          "--position-ids", self.path("ids.npy"), match="split")
        cfg = hunyuan_ocr_config((16, 16, 16, 8))
        self.assert_fails(3, *run, "--hf-config", self.config(cfg),
                          "--position-ids", self.path("ids.npy"), match="sums to 56")
        cfg = hunyuan_vl_v5_config((16, 16, 16, 16))
        cfg["text_config"]["rope_parameters"]["xdrope_section"] = [32, 32]
        self.assert_fails(3, *run, "--hf-config", self.config(cfg), match="differ")
        cfg = hunyuan_vl_v5_config((16.5, 16, 16, 15.5))
        self.assert_fails(3, *run, "--hf-config", self.config(cfg), match="integral")
        self.assertFalse(os.path.exists(self.path("y.npy")))


if __name__ == "__main__":
    unittest.main()
