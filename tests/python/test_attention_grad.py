"""posenc.attention(..., grad_output=dO): the gradients against torch float64 autograd
of an eager attention (written here), torch tensors in and out, the bytes of
`posenc attention --grad-output`, and bad arguments as UsageError / InputError."""
import os
import subprocess

import numpy as np
import pytest
import torch

import posenc

BIN = os.environ.get("POSENC_BIN")


def inputs(seed=4):
    g = np.random.default_rng(seed)
    return (g.standard_normal((2, 4, 6, 8)), g.standard_normal((2, 2, 9, 8)),
            g.standard_normal((2, 2, 9, 5)), g.standard_normal((2, 4, 6, 5)))


def test_gradients_match_torch_autograd():
    q, k, v, do = (torch.tensor(a) for a in inputs())
    sinks = torch.tensor([0.3, -0.5, 1.0, 0.0], dtype=torch.float64)
    dq, dk, dv, dsinks = posenc.attention(q, k, v, grad_output=do, causal=True, softcap=3.0,
                                          sinks=sinks, emit=("dq", "dk", "dv", "dsinks"))
    assert isinstance(dq, torch.Tensor) and dq.dtype == torch.float64
    Q, K, V, S = (t.clone().requires_grad_() for t in (q, k, v, sinks))
    s = (Q @ K.repeat_interleave(2, 1).transpose(-1, -2)) / 8 ** 0.5
    s = 3.0 * torch.tanh(s / 3.0)
    keep = torch.ones(6, 9, dtype=torch.bool).tril(3)
    s = s.masked_fill(~keep, float("-inf"))
    col = S[None, :, None, None].expand(2, 4, 6, 1)
    p = torch.softmax(torch.cat([s, col], -1), -1)[..., :9]
    o = p @ V.repeat_interleave(2, 1)
    want = torch.autograd.grad(o, (Q, K, V, S), do)
    for got, ref in zip((dq, dk, dv, dsinks), want):
        assert (got - ref).abs().max() <= 1e-12 * ref.abs().max()


@pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")
def test_same_bytes_as_the_command(tmp_path):
    q, k, v, do = inputs()
    for name, a in zip(("q", "k", "v", "do"), (q, k, v, do)):
        np.save(tmp_path / f"{name}.npy", a)
    names = ("dq", "dk", "dv", "softmax_d", "lse")
    r = subprocess.run([BIN, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                        "--grad-output", "do.npy", "--window", "2,1", "-o", "g_{}.npy"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = posenc.attention(q, k, v, grad_output=do, window=(2, 1), emit=names)
    for name, g in zip(names, got):
        want = np.load(tmp_path / f"g_{name}.npy")
        assert g.dtype == want.dtype and np.array_equal(g, want)


def test_bad_arguments():
    q, k, v, do = inputs()
    with pytest.raises(posenc.UsageError, match="needs v"):
        posenc.attention(q, k, None, grad_output=do)
    with pytest.raises(posenc.UsageError, match="probs"):
        posenc.attention(q, k, v, grad_output=do, emit="probs")
    with pytest.raises(posenc.InputError, match="shape"):
        posenc.attention(q, k, v, grad_output=do[..., :3])
    with pytest.raises(posenc.UsageError, match="arith"):
        posenc.attention(q, k, v, grad_output=do, arith="hf")
