import numpy as np
import posenc


def toy_rope(x, base=10000.0):
    """The kernel under test: HF's rotate_half RoPE in float32."""
    s, d = x.shape[-2:]
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float32) / d)
    ang = np.arange(s, dtype=np.float32)[:, None] * inv
    cos = np.cos(np.concatenate([ang, ang], axis=-1))
    sin = np.sin(np.concatenate([ang, ang], axis=-1))
    rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * cos + rotated * sin


def test_toy_rope_matches_posenc():
    x = np.random.default_rng(0).standard_normal((1, 8, 128, 64)).astype(np.float32)
    want = posenc.rope(x, dtype=np.float64)  # correctly rounded, float64
    posenc.compare(toy_rope(x), want, atol=1e-4, rtol=1e-4).check()


def test_posenc_rotates_a_torch_tensor_in_place():
    import torch

    q = torch.randn(1, 128, 8, 64)  # flash-attn's [b, s, h, d]
    k = q.clone()
    posenc.rope(q, axes="bshd", out=q)  # rotates q's own memory
    assert not torch.equal(q, k)
    posenc.rope(q, axes="bshd", inverse=True, out=q)
    posenc.compare(q, k, atol=1e-5).check()
