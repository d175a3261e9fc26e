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
