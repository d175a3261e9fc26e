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


@pytest.mark.parametrize("causal,sq,sk,d", [(False, 128, 200, 64), (True, 113, 203, 128),
                                           (True, 256, 256, 64)])
def test_f32_mode_meets_flash_attention_rule(causal, sq, sk, d):
    # FlashAttention's verdict (hopper/test_flash_attn.py), the compute dtype being f32:
    # |g - g_ref| <= 2 |g_pt - g_ref| + 2 |g_ref + 0.3 - 0.3 - g_ref| (in f32), g_ref
    # from float64 autograd, g_pt from torch's float32 eager autograd.
    g = np.random.default_rng(sq + sk)
    q, k, v, do = (g.standard_normal(s).astype(np.float32) for s in
                   ((2, 4, sq, d), (2, 2, sk, d), (2, 2, sk, d), (2, 4, sq, d)))

    def eager(dtype):
        Q, K, V = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v))
        s = (Q @ K.repeat_interleave(2, 1).transpose(-1, -2)) / d ** 0.5
        if causal:
            keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
            s = s.masked_fill(~keep, float("-inf"))
        o = torch.softmax(s, -1) @ V.repeat_interleave(2, 1)
        return torch.autograd.grad(o, (Q, K, V), torch.tensor(do, dtype=dtype))

    ref, pt = eager(torch.float64), eager(torch.float32)
    got = posenc.attention(q, k, v, grad_output=do, causal=causal, precision="f32")
    for name, a, r, p in zip(("dq", "dk", "dv"), got, ref, pt):
        r32 = r.float()
        atol = 2 * float((r32 + 0.3 - 0.3 - r32).abs().max())
        err = float((torch.from_numpy(a).double() - r).abs().max())
        err_pt = float((p.double() - r).abs().max())
        assert err <= 2 * err_pt + atol, (name, err, err_pt, atol)


def test_t5_table_gradient_matches_torch_autograd():
    # HF T5 bucketing written out for 8 buckets, max_distance 6, encoder (bidirectional):
    # half the buckets per sign, exact below 2, logarithmic up to 6.
    def bucket(rel):
        out = 4 if rel > 0 else 0
        n = abs(rel)
        if n < 2:
            return out + n
        large = 2 + int(np.log(n / 2) / np.log(6 / 2) * 2)
        return out + min(large, 3)
    q, k, v, do = (torch.tensor(a) for a in inputs(5))
    table = torch.tensor(np.random.default_rng(6).standard_normal((8, 4)))
    dq, dt5 = posenc.attention(q, k, v, grad_output=do, t5_bias=table, t5_buckets=8,
                               t5_max_distance=6, scale=1.0, emit=("dq", "dt5_bias"))
    Q, T = q.clone().requires_grad_(), table.clone().requires_grad_()
    idx = torch.tensor([[bucket(j - (i + 3)) for j in range(9)] for i in range(6)])
    s = Q @ k.repeat_interleave(2, 1).transpose(-1, -2) + T[idx].permute(2, 0, 1)[None]
    o = torch.softmax(s, -1) @ v.repeat_interleave(2, 1)
    want = torch.autograd.grad(o, (Q, T), do)
    assert dt5.shape == (8, 4)
    for got, ref in zip((dq, dt5), want):
        assert (got - ref).abs().max() <= 1e-12 * ref.abs().max()


def test_rope_gradients_are_with_respect_to_the_unrotated_inputs(tmp_path):
    # The command's bytes (checked against torch autograd through a rotation in
    # tests/reference/test_attention_backward_rope.py), from the keyword.
    q, k, v, do = inputs(7)
    got = posenc.attention(q, k, v, grad_output=do, rope=True, causal=True, style="gptj",
                           attention_factor=1.25, emit=("dq", "dk"))
    paths = []
    for name, a in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(tmp_path / f"{name}.npy", a)
        paths.append(str(tmp_path / f"{name}.npy"))
    out = str(tmp_path / "g_{}.npy")
    subprocess.run([BIN, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                    "--grad-output", paths[3], "-o", out, "--emit", "dq,dk", "--rope",
                    "--causal", "--style", "gptj", "--attention-factor", "1.25"], check=True)
    for name, g in zip(("dq", "dk"), got):
        assert g.tobytes() == np.load(out.format(name)).tobytes(), name
    plain = posenc.attention(q, k, v, grad_output=do, causal=True, emit=("dq",))
    assert not np.array_equal(plain[0], got[0])


def test_qv_gradients_match_torch_autograd():
    # FlashAttention-3's qv: scores scale (q.k + qv.v), scale 1/sqrt(d + dv); dqv, and dv
    # gains the qv term's part. Silently ignored before (the gradients lacked the term).
    q, k, v, do = (torch.tensor(a) for a in inputs(5))
    qv = torch.tensor(np.random.default_rng(6).standard_normal((2, 4, 6, 5)))
    got = posenc.attention(q, k, v, qv=qv, grad_output=do, causal=True,
                           emit=("dq", "dk", "dv", "dqv"))
    Q, K, V, QV = (t.clone().requires_grad_() for t in (q, k, v, qv))
    Vg = V.repeat_interleave(2, 1)
    s = (Q @ K.repeat_interleave(2, 1).transpose(-1, -2) + QV @ Vg.transpose(-1, -2)) / 13 ** 0.5
    s = s.masked_fill(~torch.ones(6, 9, dtype=torch.bool).tril(3), float("-inf"))
    want = torch.autograd.grad(torch.softmax(s, -1) @ Vg, (Q, K, V, QV), do)
    for g, ref in zip(got, want):
        assert (g - ref).abs().max() <= 1e-12 * ref.abs().max()
    with pytest.raises(posenc.UsageError, match="dqv: needs qv"):
        posenc.attention(q, k, v, grad_output=do, emit=("dq", "dqv"))
    with pytest.raises(posenc.UsageError, match="descale"):
        posenc.attention(q, k, v, qv=qv, grad_output=do, q_descale=np.ones((2, 2)))


def test_shaw_table_gradients_match_torch_autograd():
    # Shaw's relative_k / relative_v [2M+1, d]: rel = clip(j - i, -M, M) + M.
    g = np.random.default_rng(8)
    q, k, v, do = (torch.tensor(g.standard_normal(s)) for s in
                   ((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 3), (1, 2, 6, 3)))
    rk, rv = torch.tensor(g.standard_normal((5, 4))), torch.tensor(g.standard_normal((5, 3)))
    got = posenc.attention(q, k, v, grad_output=do, relative_k=rk, relative_v=rv,
                           emit=("dq", "dk", "dv", "drelative_k", "drelative_v"))
    Q, K, V, RK, RV = (t.clone().requires_grad_() for t in (q, k, v, rk, rv))
    idx = torch.as_tensor(np.clip(np.arange(6)[None, :] - np.arange(6)[:, None], -2, 2) + 2)
    s = (Q @ K.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", Q, RK[idx])) / 2.0
    p = torch.softmax(s, -1)
    o = p @ V + torch.einsum("bhij,ijd->bhid", p, RV[idx])
    want = torch.autograd.grad(o, (Q, K, V, RK, RV), do)
    for x, ref in zip(got, want):
        assert (x - ref).abs().max() <= 1e-12 * ref.abs().max()
    with pytest.raises(posenc.UsageError, match="drelative_v needs"):
        posenc.attention(q, k, v, grad_output=do, relative_k=rk, emit=("dq", "drelative_v"))


def test_varlen_gradients_are_each_sequences():
    # FlashAttention's varlen form: each sequence's rows the bytes of its own backward,
    # the sinks' gradient the sum over the sequences, the rows of an empty one 0.
    g = np.random.default_rng(9)
    cq, ck = np.array([0, 4, 4, 9], np.int32), np.array([0, 5, 7, 12], np.int64)
    q, k = g.standard_normal((9, 4, 8)), g.standard_normal((12, 2, 8))
    v, do = g.standard_normal((12, 2, 6)), g.standard_normal((9, 4, 6))
    sinks = np.array([0.3, -0.5, 1.0, 0.0])
    names = ("dq", "dk", "dv", "dsinks", "lse")
    got = posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, grad_output=do,
                           causal=True, sinks=sinks, emit=names)
    assert not got[1][5:7].any() and not got[2][5:7].any()  # keys without queries
    dsinks = 0.0
    for b in (0, 2):
        one = posenc.attention(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]],
                               grad_output=do[cq[b]:cq[b + 1]], axes="shd", causal=True,
                               sinks=sinks, emit=names)
        assert np.array_equal(got[0][cq[b]:cq[b + 1]], one[0])
        assert np.array_equal(got[1][ck[b]:ck[b + 1]], one[1])
        assert np.array_equal(got[2][ck[b]:ck[b + 1]], one[2])
        assert np.array_equal(got[4][:, cq[b]:cq[b + 1]], one[4])
        dsinks = dsinks + one[3]
    assert np.array_equal(got[3], dsinks)
