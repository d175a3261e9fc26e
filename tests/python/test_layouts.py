"""posenc.rope with RoPE layouts (layout, inv_freq, freq_scale, coords, angles, real
position_ids, style "tiled") against the vision families' HF code of tests/lib/
vision_rope_reference.py, in float64: max abs difference 1e-12 * max |reference|."""

import numpy as np
import pytest
import torch

import posenc
from vision_rope_reference import dinov3, lightglue, pixtral, vjepa2, vjepa2_rotate


def close(got, ref):
    ref = ref.numpy()
    assert got.shape == ref.shape
    assert np.max(np.abs(np.asarray(got) - ref)) <= 1e-12 * np.max(np.abs(ref))


def rng():
    return np.random.default_rng(2027)


def test_pixtral_from_ids_and_from_grid():
    x = rng().standard_normal((1, 2, 12, 32))
    ids = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij")).reshape(2, -1)
    ref = pixtral(torch.from_numpy(x), torch.from_numpy(ids), max_width=4)
    close(posenc.rope(x, layout="even-odd", position_ids=ids), ref)
    close(posenc.rope(x, layout="even-odd", coords="grid:3,4"), ref)


def test_dinov3_centres_prefix_and_real_coordinates():
    x = rng().standard_normal((2, 2, 3 + 12, 16))
    ref = dinov3(torch.from_numpy(x), 3, 4, prefix=3)
    got = posenc.rope(x, layout="axial", coords="centres:3,4", prefix_tokens=3,
                      freq_scale="2pi", base=100)
    close(got, ref)
    np.testing.assert_array_equal(got[:, :, :3], x[:, :, :3])
    # The same coordinates as a float tensor (torch), prefix tokens at 0.
    ch = (np.arange(3) + 0.5) / 3 * 2 - 1
    cw = (np.arange(4) + 0.5) / 4 * 2 - 1
    c = np.stack(np.meshgrid(ch, cw, indexing="ij")).reshape(2, -1)
    c = np.concatenate([np.zeros((2, 3)), c], axis=1)
    got = posenc.rope(torch.from_numpy(x), layout="axial", position_ids=torch.from_numpy(c),
                      freq_scale=2 * np.pi, base=100)
    close(got.numpy(), ref)


def test_vjepa2_chunks_and_tiled_in_place():
    x = rng().standard_normal((1, 2, 2 * 3 * 3, 64))
    ref = vjepa2(torch.from_numpy(x), 2, 3)
    close(posenc.rope(x, layout="chunks", coords="grid:2,3,3"), ref)
    y = x[0, :, :5, :16].copy()[None]
    pos = torch.arange(5, dtype=torch.float64)[None, None].expand(1, 2, 5)
    ref = vjepa2_rotate(torch.from_numpy(y), pos)
    posenc.rope(y, style="tiled", out=y)
    close(y, ref)


def test_lightglue_matrix_and_angles():
    r = rng()
    kp = r.uniform(-1, 1, (9, 2))
    w = r.standard_normal((8, 2))
    x = r.standard_normal((1, 1, 9, 16))
    ref, proj = lightglue(torch.from_numpy(x), torch.from_numpy(kp), torch.from_numpy(w))
    close(posenc.rope(x, style="gptj", inv_freq=w.T, position_ids=kp.T), ref)
    close(posenc.rope(x, style="gptj", angles=proj.numpy()), ref)


@pytest.mark.parametrize("kw, match", [
    ({"layout": "spiral"}, "layout"),
    ({"layout": "axial", "inv_freq": np.ones((2, 4))}, "inv_freq"),
    ({"prefix_tokens": 1}, "coords only"),
    ({"coords": "grid:2,x"}, "coords"),
    ({"layout": "axial", "rope2d": (2, 2)}, "layout"),
    ({"style": "tiled", "inverse": True}, "inverse"),
])
def test_refusals(kw, match):
    x = rng().standard_normal((1, 1, 4, 8))
    with pytest.raises(posenc.UsageError, match=match):
        posenc.rope(x, **kw)


def test_bad_data_is_an_input_error():
    x = rng().standard_normal((1, 1, 4, 8))
    with pytest.raises(posenc.InputError, match="angles"):
        posenc.rope(x, angles=np.zeros((4, 3)))
    with pytest.raises(posenc.InputError, match="does not match"):
        posenc.rope(x, layout="axial", coords="grid:3,3")


def test_ernie_vl_and_hunyuan_vl_presets():
    # tests/lib/vl_rope_reference.py: HF's ERNIE-4.5-VL and HunYuan-VL functions.
    from vl_rope_reference import ernie_reference, hunyuan_reference
    r = rng()
    x = r.standard_normal((2, 3, 9, 128))
    ids = r.integers(0, 4000, (3, 2, 9)).astype(np.int64)
    got = posenc.rope(x, layout="ernie-vl:22,22,20", style="gptj", base=500000,
                      position_ids=ids)
    close(got, torch.from_numpy(ernie_reference(x, ids, 500000.0, (22, 22, 20))))
    ids4 = r.integers(0, 4000, (4, 2, 9)).astype(np.int64)
    got = posenc.rope(x, layout="xdrope:16,16,16,16", position_ids=ids4)
    close(got, torch.from_numpy(hunyuan_reference(x, ids4, 10000.0, 1.0, [16, 16, 16, 16])))
    with pytest.raises(posenc.UsageError):
        posenc.rope(x, layout="ernie-vl:22,20,22", style="gptj", position_ids=ids)
