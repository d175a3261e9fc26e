"""`--hf-version`: a config read as a transformers 4.x release reads it, against
references written from those releases' modeling_rope_utils.py (tests/lib/
hf_reference_4x.py) and v5's (hf_reference.py); the note on stderr when the release
that wrote a config would read it otherwise; the rules printed by -v; bad versions.

Tolerances: float64 inverse frequencies rtol 1e-12, cos/sin tables rtol 1e-10 (as in
test_hf_configs.py).
"""
import json
import math
import os

import numpy as np
import torch

import hf_reference as hf
import hf_reference_4x as hf4
from posenc_testlib import PosencTestCase, SOURCE_DIR

torch.set_default_dtype(torch.float64)
DATA = os.path.join(SOURCE_DIR, "tests", "data")

# Qwen2.5's model card: "add the following to config.json to enable YaRN".
QWEN_YARN = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}


def published(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


class HfVersions(PosencTestCase):
    def config(self, cfg, name="config.json"):
        path = self.path(name)
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def inv_freq(self, path, *args):
        out = self.path("inv.npy")
        self.run_ok("table", "rope", "--hf-config", path, "--emit", "inv-freq", *args,
                    "--dtype", "f64", "-o", out)
        return np.load(out)

    def cos(self, path, positions, *args):
        ids, out = self.npy("ids.npy", np.array(positions, dtype=np.int64)), self.path("c.npy")
        self.run_ok("table", "rope", "--hf-config", path, "--position-ids", ids, "--emit", "cos",
                    *args, "--dtype", "f64", "-o", out)
        return np.load(out)

    def test_qwen25_yarn_recipe_by_release(self):
        cfg = published("qwen2.5-7b-instruct.json")
        cfg["rope_scaling"] = QWEN_YARN
        path = self.config(cfg)
        t = hf.load_text_config(path)
        positions = [0, 1, 4095, 40000, 131071]
        plain = hf._default(1e6, 128)
        for version, args in (((5, 0), []), ((4, 45), ["--hf-version", "4.45"]),
                              ((4, 51), ["--hf-version", "4.51.3"]),
                              ((4, 55), ["--hf-version", "4.55"]),
                              ((4, 56), ["--hf-version", "4.56"]),
                              ((4, 57), ["--hf-version", "v4.57.1"]),
                              ((5, 0), ["--hf-version", "5"])):
            inv, att = hf4.rope_init(t, version)
            np.testing.assert_allclose(self.inv_freq(path, *args), inv.numpy(), rtol=1e-12, atol=0,
                                       err_msg=str(version))
            cos, _ = hf.cos_sin(inv, torch.tensor(positions), att)
            np.testing.assert_allclose(self.cos(path, positions, *args), cos.numpy(), rtol=1e-10,
                                       atol=1e-13, err_msg=str(version))
            scaled = not (4, 51) <= version <= (4, 55)
            # 4.51-4.55 take factor = 32768 / 32768: plain RoPE, attention factor 1.
            self.assertEqual(bool(np.abs(inv.numpy() - plain.numpy()).max() > 1e-9), scaled)
            self.assertAlmostEqual(att, 0.1 * math.log(4) + 1 if scaled else 1.0, places=12)

    def test_deepseek_v3_form_a_reads_max_position_embeddings(self):
        # DeepSeek-V3 (max 163840, L0 4096, factor 40, mscale 1/1): 4.50 computes the
        # correction range from max_position_embeddings and an attention factor
        # 0.1 ln 40 + 1; 4.51 on from L0, with mscale / mscale_all_dim = 1.
        path = os.path.join(DATA, "deepseek-v3.json")
        t = hf.load_text_config(path)
        got = {}
        for version in ((4, 50), (4, 51), (4, 56)):
            inv, att = hf4.rope_init(t, version)
            arg = f"{version[0]}.{version[1]}"
            got[version] = self.inv_freq(path, "--hf-version", arg)
            np.testing.assert_allclose(got[version], inv.numpy(), rtol=1e-12, atol=0, err_msg=arg)
            c = self.cos(path, [7, 100000], "--hf-version", arg)
            cos, _ = hf.cos_sin(inv, torch.tensor([7, 100000]), att)
            np.testing.assert_allclose(c, cos.numpy(), rtol=1e-10, atol=1e-13, err_msg=arg)
        self.assertGreater(np.abs(got[(4, 50)] - got[(4, 51)]).max(), 1e-6)
        np.testing.assert_array_equal(got[(4, 51)], self.inv_freq(path))

    def test_gpt_oss_truncate_read_from_455(self):
        path = os.path.join(DATA, "gpt-oss-120b.json")
        t = hf.load_text_config(path)
        for version in ((4, 54), (4, 55)):
            inv, _ = hf4.rope_init(t, version)
            got = self.inv_freq(path, "--hf-version", f"4.{version[1]}")
            np.testing.assert_allclose(got, inv.numpy(), rtol=1e-12, atol=0, err_msg=str(version))
        self.assertFalse(np.array_equal(self.inv_freq(path, "--hf-version", "4.54"),
                                        self.inv_freq(path, "--hf-version", "4.55")))

    def test_longrope_factor_and_l0_by_release(self):
        # Phi-3 style: a top-level L0 overrides rope_scaling's factor in 4.x; v5 keeps an
        # explicit factor and takes the ratio only without one.
        cfg = published("phi-4-mini-instruct.json")
        cfg["rope_scaling"] = dict(cfg["rope_scaling"], factor=16.0)
        path = self.config(cfg)
        t = hf.load_text_config(path)
        for version, args in (((4, 50), ["--hf-version", "4.50"]), ((5, 0), [])):
            for seq in (100, 5000):
                inv, att = hf4.rope_init(t, version, seq_len=seq)
                got = self.cos(path, [3, seq - 1], *args)
                cos, _ = hf.cos_sin(inv, torch.tensor([3, seq - 1]), att)
                np.testing.assert_allclose(got, cos.numpy(), rtol=1e-10, atol=1e-13,
                                           err_msg=f"{version} {seq}")
        self.assertNotAlmostEqual(hf4.rope_init(t, (4, 50), 5000)[1],
                                  hf4.rope_init(t, (5, 0), 5000)[1], places=6)

    def test_note_when_the_writing_release_reads_it_otherwise(self):
        cfg = published("qwen2.5-7b-instruct.json")
        cfg["rope_scaling"] = QWEN_YARN
        cfg["transformers_version"] = "4.51.3"
        path = self.config(cfg)
        out = self.path("c.npy")
        base = ["table", "rope", "--hf-config", path, "--positions", "8", "-o", out]
        r = self.run_ok(*base)
        notes = [line for line in r.stderr.splitlines() if "note:" in line]
        self.assertEqual(len(notes), 1, r.stderr)
        self.assertIn("4.51", notes[0])
        self.assertIn("--hf-version 4.51", notes[0])
        self.assertEqual(self.run_ok("-q", *base).stderr, "")
        self.assertEqual(self.run_ok(*base, "--hf-version", "4.51").stderr, "")
        # Written by a release with v5's reading of this config: no note.
        cfg["transformers_version"] = "4.57.0"
        self.config(cfg)
        self.assertEqual(self.run_ok(*base).stderr, "")
        # -v prints the rules applied.
        r = self.run_ok("-v", *base, "--hf-version", "4.51")
        self.assertIn("transformers 4.51 rules:", r.stderr)
        self.assertIn("yarn factor: max_position_embeddings / original_max_position_embeddings",
                      r.stderr)

    def test_refusals(self):
        path = os.path.join(DATA, "qwen2.5-7b-instruct.json")
        out = self.path("c.npy")
        for bad in ("4.42", "3.9", "6.0", "abc", "4.", "4.51x", "", "45", "4.51.3.", "99999.1"):
            r = self.assert_fails(2, "table", "rope", "--hf-config", path, "--positions", "4",
                                  "--hf-version", bad, "-o", out)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("--hf-version", r.stderr)
        self.assert_fails(2, "table", "rope", "--dim", "8", "--positions", "4", "--hf-version", "4.51",
                          "-o", out,
                          match="needs --hf-config")
        # 4.x releases do not read v5's rope_parameters: refused, not read as plain RoPE.
        v5 = self.config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
                          "max_position_embeddings": 64,
                          "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                              "rope_theta": 10000.0}}, "v5.json")
        self.assert_fails(3, "table", "rope", "--hf-config", v5, "--positions", "4",
                          "--hf-version", "4.57", "-o", out, match="rope_parameters")
        self.assertFalse(os.path.exists(out))
