"""A value read from a HF config.json is judged as that key of that file (exit 3, the file
and the key named), a value given as an option as that option (exit 2): the range checks
of the RoPE parameters know where each value came from. Also the notes and hints a
newcomer coming from HF needs: HF option names point to posenc's, a config whose head
count the input does not have gets a note."""
import json
import math
import unittest

import numpy as np

from posenc_testlib import PosencTestCase

LLAMA = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 10000.0}


class ConfigValueErrors(PosencTestCase):
    def config(self, **keys):
        path = self.path("config.json")
        with open(path, "w") as f:
            json.dump({**LLAMA, **keys}, f)
        return path

    def table(self, *args):
        return ["table", "rope", "--positions", "4", "-o", self.path("t.npy"), *args]

    def test_odd_head_dim_of_the_config_names_the_key(self):
        cfg = self.config(head_dim=3)
        self.assert_fails(3, *self.table("--hf-config", cfg),
                          match=r"^posenc: error: \S*config\.json: 'head_dim': RoPE rotates "
                                r"pairs of dims and needs an even head dimension, got 3")

    def test_odd_head_dim_from_hidden_size_names_both_keys(self):
        cfg = self.config(hidden_size=12, num_attention_heads=4)
        self.assert_fails(3, *self.table("--hf-config", cfg),
                          match=r"^posenc: error: \S*config\.json: 'hidden_size / "
                                r"num_attention_heads': .*even head dimension, got 3")

    def test_odd_dim_option_names_the_option(self):
        self.assert_fails(2, *self.table("--dim", "3"),
                          match=r"^posenc: error: --dim: .*even head dimension, got 3")
        cfg = self.config(head_dim=8)
        self.assert_fails(2, *self.table("--hf-config", cfg, "--dim", "3"),
                          match=r"^posenc: error: --dim: .*even head dimension, got 3")

    def test_an_option_replaces_the_bad_config_value(self):
        cfg = self.config(head_dim=3)
        self.run_ok(*self.table("--hf-config", cfg, "--dim", "8"))
        cfg = self.config(head_dim=128, rope_theta=1e-320)
        self.run_ok(*self.table("--hf-config", cfg, "--base", "10000"))

    def test_tiny_rope_theta_of_the_config_names_the_key(self):
        # 1 / theta^(126/128) overflows float64 for theta = 1e-320.
        cfg = self.config(head_dim=128, rope_theta=1e-320)
        self.assert_fails(3, *self.table("--hf-config", cfg),
                          match=r"^posenc: error: \S*config\.json: 'rope_theta': 1e-320 is too "
                                r"small: .* overflows")
        q = self.npy("q.npy", np.ones((1, 4, 3, 128), np.float32))
        self.assert_fails(3, "rope", q, "-o", self.path("y.npy"), "--hf-config", cfg,
                          match=r"^posenc: error: \S*config\.json: 'rope_theta': ")

    def test_angles_beyond_f32_name_the_configs_rope_theta(self):
        # rope_theta 1e-100: inverse frequency 1e50 for pair 2 of 8 dims, beyond float32.
        cfg = self.config(head_dim=8, rope_theta=1e-100)
        q = self.npy("q.npy", np.ones((1, 4, 3, 8), np.float32))
        self.assert_fails(3, "rope", q, "-o", self.path("y.npy"), "--hf-config", cfg,
                          "--precision", "f32",
                          match=r"^posenc: error: \S*config\.json: 'rope_theta': frequency "
                                r"1e\+50 .* beyond the f32 arithmetic's range")
        self.assert_fails(3, "rope", q, "-o", self.path("y.npy"), "--hf-config", cfg,
                          "--precision", "f32", "--base", "1e-100",
                          match=r"^posenc: error: --base: frequency 1e\+50 ")

    def test_longrope_list_that_does_not_fit_rotary_dim_names_the_key(self):
        # The config's short_factor fits its own 8 dims (4 pairs), not --rotary-dim 4.
        cfg = self.config(head_dim=8, max_position_embeddings=64,
                          rope_scaling={"rope_type": "longrope", "factor": 2.0,
                                        "original_max_position_embeddings": 32,
                                        "short_factor": [1, 1, 1, 1], "long_factor": [2, 2, 2, 2]})
        self.run_ok(*self.table("--hf-config", cfg))
        self.assert_fails(3, *self.table("--hf-config", cfg, "--rotary-dim", "4"),
                          match=r"^posenc: error: \S*config\.json: 'short_factor': expected 2 "
                                r"values \(rotary dim / 2\), got 4")
        self.assert_fails(2, *self.table("--dim", "8", "--scaling", "longrope", "--factor", "2",
                                         "--original-max-pos", "32", "--short-factor", "1,1,1"),
                          match=r"^posenc: error: --short-factor: expected 4 values")

    def test_tiny_base_option_names_the_option(self):
        self.assert_fails(2, *self.table("--dim", "128", "--base", "1e-320"),
                          match=r"^posenc: error: --base: 1e-320 is too small: .* overflows")

    def test_rope_type_without_what_it_needs_names_the_config(self):
        cfg = self.config(head_dim=8, rope_scaling={"rope_type": "linear"})
        self.assert_fails(3, *self.table("--hf-config", cfg),
                          match=r"^posenc: error: \S*config\.json: 'rope_type': needs factor")
        cfg = self.config(head_dim=8, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
        self.assert_fails(3, *self.table("--hf-config", cfg),
                          match=r"^posenc: error: \S*config\.json: 'rope_type': needs max_pos")
        # The same variant given as an option is the option's.
        cfg = self.config(head_dim=8)
        self.assert_fails(2, *self.table("--hf-config", cfg, "--scaling", "linear"),
                          match=r"^posenc: error: --scaling linear: needs --factor")


class AttentionConfigValues(PosencTestCase):
    def test_attention_multiplier_is_judged_as_the_configs_key(self):
        cfg = self.path("config.json")
        q = self.npy("q.npy", np.ones((1, 4, 3, 8)))
        for m in (-1, 0):
            with open(cfg, "w") as f:
                json.dump({"model_type": "granite", "hidden_size": 32, "num_attention_heads": 4,
                           "attention_multiplier": m}, f)
            self.assert_fails(3, "attention", "-q", q, "-k", q, "-v", q, "--hf-config", cfg,
                              "--emit", "output", "-o", self.path("o.npy"),
                              match=r"^posenc: error: \S*config\.json: 'attention_multiplier' "
                                    r"must be a positive number, got " + str(m))

    def attention(self, config, *args, q_shape=(1, 4, 3, 8), k_shape=None):
        cfg = self.path("config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        q = self.npy("q.npy", np.ones(q_shape))
        k = self.npy("k.npy", np.ones(k_shape or q_shape))
        return ["attention", "-q", q, "-k", k, "-v", k, "--emit", "output",
                "-o", self.path("o.npy"), "--hf-config", cfg, *args]

    def test_deepseek_mscale_all_dim_is_judged_as_the_configs_key(self):
        # scale = qk_head_dim^-0.5 * (0.1 mscale_all_dim ln(factor) + 1)^2: infinite for
        # 1e300 (was "--scale inf", exit 2), 0 for -10 with factor e (was the default scale).
        for m, factor in ((1e300, 2.0), (-10, math.e)):
            cfg = {"model_type": "deepseek_v3", "hidden_size": 32, "num_attention_heads": 4,
                   "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8,
                   "rope_scaling": {"rope_type": "yarn", "factor": factor, "mscale_all_dim": m,
                                    "original_max_position_embeddings": 16}}
            self.assert_fails(3, *self.attention(cfg),
                              match=r"^posenc: error: \S*config\.json: 'mscale_all_dim' must be "
                                    r"a value giving a positive finite score scale, got ")

    def test_bad_attention_values_of_the_config_name_the_key(self):
        base = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4}
        sliding = {"layer_types": ["sliding_attention"], "num_hidden_layers": 1}
        for keys, key in (({**sliding, "sliding_window": -1}, "sliding_window"),
                          ({**sliding, "sliding_window": 0}, "sliding_window"),
                          ({"query_pre_attn_scalar": 0}, "query_pre_attn_scalar"),
                          ({"attn_logit_softcapping": -1}, "attn_logit_softcapping"),
                          ({"layer_types": ["chunked_attention"], "num_hidden_layers": 1,
                            "attention_chunk_size": -3}, "attention_chunk_size")):
            self.assert_fails(3, *self.attention({**base, **keys}),
                              match=r"^posenc: error: \S*config\.json: '" + key + "' must be ")

    def test_the_same_bad_values_as_options_name_the_option(self):
        cfg = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4}
        for args, option in ((["--sliding-window", "-1"], "--sliding-window"),
                             (["--scale", "0"], "--scale"), (["--softcap", "-1"], "--softcap"),
                             (["--chunk-size", "-3"], "--chunk-size")):
            self.assert_fails(2, *self.attention(cfg, *args),
                              match=r"^posenc: error: " + option + " ")

    def test_head_counts_and_dims_that_differ_from_the_config_name_file_and_key(self):
        cfg = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16}
        self.assert_fails(3, *self.attention(cfg, q_shape=(1, 4, 3, 8), k_shape=(1, 2, 3, 8)),
                          match=r"^posenc: error: q: shape \(1, 4, 3, 8\) has 8 dims on axis d, "
                                r"but \S*config\.json \(head_dim\) says 16")
        cfg["head_dim"] = 8
        self.assert_fails(3, *self.attention(cfg),
                          match=r"^posenc: error: k: shape \(1, 4, 3, 8\) has 4 heads on axis h, "
                                r"but \S*config\.json \(num_key_value_heads\) says 2")

    def test_arith_hf_names_the_configs_softcap_and_alibi_not_an_option(self):
        # HF's eager attention (--arith hf) computes neither; the config gave them, so the
        # refusal names its key (it named --softcap and --alibi, options not given).
        llama = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4}
        for cfg, what, key in (({**llama, "attn_logit_softcapping": 30.0}, "soft-capping",
                                 "attn_logit_softcapping"),
                                ({**llama, "model_type": "falcon", "alibi": True}, "ALiBi", "alibi"),
                                ({"model_type": "bloom", "hidden_size": 32, "n_head": 4}, "ALiBi",
                                 "model_type")):
            self.assert_fails(2, *self.attention(cfg, "--arith", "hf"),
                              match=r"^posenc: error: --arith hf: HF's eager attention has no "
                                    + what + r" \(\S*config\.json: '" + key + "'; use --arith exact\)")
        for option in (["--softcap", "5"], ["--alibi"]):
            self.assert_fails(2, *self.attention(llama, "--arith", "hf", *option),
                              match=r"^posenc: error: --arith hf: HF's eager attention has no "
                                    + option[0] + "$")

    def test_query_scaling_option_against_the_configs_names_both(self):
        ministral = {"model_type": "ministral3", "hidden_size": 32, "num_attention_heads": 4,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "llama_4_scaling_beta": 0.1,
                                         "original_max_position_embeddings": 16}}
        self.assert_fails(2, *self.attention(ministral, "--attn-temperature", "0.1", "4"),
                          match=r"^posenc: error: --attn-temperature: \S*config\.json: "
                                r"'llama_4_scaling_beta' scales the queries already")
        llama4 = {"model_type": "llama4_text", "hidden_size": 32, "num_attention_heads": 4,
                  "num_hidden_layers": 1, "no_rope_layers": [0], "attn_temperature_tuning": True,
                  "attn_scale": 0.1, "floor_scale": 8192}
        self.assert_fails(2, *self.attention(llama4, "--llama4-scaling", "0.1", "16"),
                          match=r"^posenc: error: --llama4-scaling: \S*config\.json: "
                                r"'attn_temperature_tuning' scales the queries already")
        llama = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4}
        self.assert_fails(2, *self.attention(llama, "--llama4-scaling", "0.1", "16",
                                             "--attn-temperature", "0.1", "4"),
                          match=r"^posenc: error: --llama4-scaling and --attn-temperature: ")


class HfNamesAndNotes(PosencTestCase):
    def test_hf_option_names_point_to_posencs(self):
        for cmd, wrong, right in ((["rope", "q.npy", "-o", "y.npy"], "--theta", "--base"),
                                  (["rope", "q.npy", "-o", "y.npy"], "--rope-theta", "--base"),
                                  (["table", "rope"], "--rope_theta", "--base"),
                                  (["table", "rope"], "--max-position-embeddings", "--max-pos"),
                                  (["table", "rope"], "--partial-rotary-factor", "--partial"),
                                  (["table", "rope"], "--rope-type", "--scaling")):
            self.assert_fails(2, *cmd, wrong, "5",
                              match=rf"unknown option '{wrong}' \(did you mean {right}\? HF's "
                                    r"\w+ is posenc's " + right + r"\)")

    def test_verbose_prints_only_the_arithmetic_that_applies(self):
        q = self.npy("q.npy", np.ones((1, 2, 3, 8), np.float32))
        p = self.run_ok("-v", "rope", q, "-o", self.path("y.h5"), "--arith", "hf")
        self.assertIn("arith = hf", p.stderr)
        self.assertNotIn("precision", p.stderr)
        p = self.run_ok("-v", "rope", q, "-o", self.path("z.h5"))
        self.assertIn("rope_precision = f64", p.stderr)
        self.assertNotIn("arith = ", p.stderr)
        p = self.run_ok("-v", "table", "rope", "--dim", "8", "--positions", "3", "--arith", "hf",
                        "-o", self.path("t.h5"))
        self.assertIn("arith = hf", p.stderr)
        self.assertNotIn("precision", p.stderr)

    def test_head_count_other_than_the_configs_gets_a_note(self):
        cfg = self.path("config.json")
        with open(cfg, "w") as f:
            json.dump({"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
                       "num_key_value_heads": 4, "rope_theta": 1e6}, f)
        q = self.npy("q.npy", np.ones((1, 32, 3, 128), np.float32))
        p = self.run_ok("rope", q, "-o", self.path("y.npy"), "--hf-config", cfg)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertRegex(lines[0], r"^posenc: note: \S*q\.npy has 32 heads \(axis h\), but "
                                   r"\S*config\.json says num_attention_heads 28 and "
                                   r"num_key_value_heads 4")
        # The model's query and key/value head counts, other axes orders, --quiet: no note.
        for heads, axes in ((28, []), (4, []), (28, ["--axes", "bshd"])):
            shape = (1, 3, heads, 128) if axes else (1, heads, 3, 128)
            x = self.npy("x.npy", np.ones(shape, np.float32))
            p = self.run_ok("rope", x, "-o", self.path("y.npy"), "--hf-config", cfg, *axes)
            self.assertEqual(p.stderr, "")
        p = self.run_ok("-q", "rope", q, "-o", self.path("y.npy"), "--hf-config", cfg)
        self.assertEqual(p.stderr, "")

    def test_table_rope_records_rope_start_as_rope_does(self):
        import h5py
        self.run_ok("table", "rope", "--dim", "8", "--positions", "3", "--start", "7",
                    "-o", self.path("t.h5"))
        q = self.npy("q.npy", np.ones((3, 8)))
        self.run_ok("rope", q, "--start", "7", "-o", self.path("y.h5"))
        with h5py.File(self.path("t.h5"), "r") as t, h5py.File(self.path("y.h5"), "r") as y:
            self.assertEqual(t["rope_cos_sin"].attrs["rope_start"], 7)
            self.assertNotIn("start", t["rope_cos_sin"].attrs)
            self.assertEqual(y["data"].attrs["rope_start"], 7)


if __name__ == "__main__":
    unittest.main()
