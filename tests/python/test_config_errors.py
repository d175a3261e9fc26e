"""The Python module judges a value read from a HF config (hf_config=) as that key of that
file (posenc.InputError naming the file and the key), and a keyword as the keyword
(posenc.UsageError), as the command does; M-RoPE without position ids is HF's text
default (torch reference of Qwen2-VL's apply_multimodal_rotary_pos_emb)."""
import json
import os

import numpy as np
import pytest
import torch

import hf_reference as hf
import posenc

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
LLAMA = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
         "rope_theta": 10000.0}


def config(tmp_path, **keys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **keys}))
    return str(path)


def test_odd_head_dim_of_the_config_is_an_input_error(tmp_path):
    cfg = config(tmp_path, head_dim=3)
    with pytest.raises(posenc.InputError,
                       match=r"config\.json: 'head_dim': .*even head dimension, got 3"):
        posenc.table.rope(positions=4, hf_config=cfg)
    # A head dimension given by the caller wins over the config's and is not judged as it.
    posenc.table.rope(positions=4, hf_config=cfg, dim=8)
    with pytest.raises(posenc.UsageError, match=r"^dim: .*even head dimension, got 3"):
        posenc.table.rope(positions=4, dim=3)


def test_tiny_rope_theta_of_the_config_is_an_input_error(tmp_path):
    cfg = config(tmp_path, head_dim=128, rope_theta=1e-320)
    q = np.ones((1, 4, 3, 128), np.float32)
    with pytest.raises(posenc.InputError, match=r"config\.json: 'rope_theta': 1e-320 is too small"):
        posenc.rope(q, hf_config=cfg)
    with pytest.raises(posenc.InputError, match=r"config\.json: 'rope_theta': "):
        posenc.table.rope(positions=4, hf_config=cfg)
    # The same base as a keyword is the caller's.
    with pytest.raises(posenc.UsageError, match=r"^base: 1e-320 is too small"):
        posenc.rope(q, base=1e-320)
    # Replaced by a keyword, the config's value is not used.
    posenc.rope(q, hf_config=cfg, base=10000.0)


def test_angles_beyond_f32_name_the_configs_rope_theta(tmp_path):
    cfg = config(tmp_path, head_dim=8, rope_theta=1e-100)
    q = np.ones((1, 4, 3, 8), np.float32)
    with pytest.raises(posenc.InputError, match=r"config\.json: 'rope_theta': frequency 1e\+50"):
        posenc.rope(q, hf_config=cfg, precision="f32")
    with pytest.raises(posenc.InputError, match=r"^base: frequency 1e\+50"):
        posenc.rope(q, base=1e-100, precision="f32")


def test_rope_type_without_factor_is_an_input_error(tmp_path):
    cfg = config(tmp_path, head_dim=8, rope_scaling={"rope_type": "linear"})
    with pytest.raises(posenc.InputError, match=r"config\.json: 'rope_type': needs factor"):
        posenc.table.rope(positions=4, hf_config=cfg)


@pytest.mark.parametrize("name,interleaved", [("qwen2-vl-7b-instruct.json", False),
                                              ("qwen3-vl-4b-instruct.json", True)])
def test_mrope_without_position_ids_is_hfs_text_default(name, interleaved):
    cfg = os.path.join(DATA, name)
    t = hf.load_text_config(cfg)
    inv, _ = hf.rope_init(t)
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 128))
    ids = torch.arange(3, 9)[None].expand(3, -1)  # start 3 on every axis
    cos, sin = hf.mrope_cos_sin(inv, ids, hf.rope_parameters(t)["mrope_section"], interleaved)
    ref = hf.apply_rotary_pos_emb(torch.from_numpy(x), cos, sin).numpy()
    got = posenc.rope(x, hf_config=cfg, start=3)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_attention_values_of_the_config_are_named_as_its_keys(tmp_path):
    q = np.ones((1, 4, 3, 8))
    # DeepSeek's scale qk_head_dim^-0.5 * (0.1 mscale_all_dim ln(factor) + 1)^2 is infinite.
    cfg = config(tmp_path, model_type="deepseek_v3", hidden_size=32, qk_rope_head_dim=4,
                 qk_nope_head_dim=4, v_head_dim=8,
                 rope_scaling={"rope_type": "yarn", "factor": 2.0, "mscale_all_dim": 1e300,
                               "original_max_position_embeddings": 16})
    with pytest.raises(posenc.InputError, match=r"config\.json: 'mscale_all_dim' must be a value "
                                                r"giving a positive finite score scale"):
        posenc.attention(q, q, q, hf_config=cfg)
    # A config's soft-capping refused by arith="hf" names the key, not the keyword.
    cfg = config(tmp_path, hidden_size=32, attn_logit_softcapping=30.0)
    with pytest.raises(posenc.UsageError, match=r"has no soft-capping \(\S*config\.json: "
                                                r"'attn_logit_softcapping'; use arith exact\)$"):
        posenc.attention(q, q, q, hf_config=cfg, arith="hf")
    cfg = config(tmp_path, model_type="ministral3", hidden_size=32,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                  "llama_4_scaling_beta": 0.1,
                                  "original_max_position_embeddings": 16})
    with pytest.raises(posenc.UsageError, match=r"config\.json: 'llama_4_scaling_beta' scales the "
                                                r"queries already"):
        posenc.attention(q, q, q, hf_config=cfg, attn_temperature=(0.1, 4))
