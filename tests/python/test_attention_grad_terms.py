"""posenc.attention(..., grad_output=dO) through score terms beyond T5's and Shaw's:
Phi-4-multimodal audio's clipped-distance bias, SAM / ViTDet's decomposed relative
positions, Gemma-3n audio's per-dimension query scale and projected relative keys, and
WavLM's gate on the T5 bias, with their tables' gradients. Each term is written here from its HF formula in torch
float64 and differentiated by autograd; the gradients agree to 1e-12 of each tensor's
largest magnitude (GQA, causal and not). The command gives the same bytes at -j1 and
-j2, streamed (within --max-memory) as in memory, and refuses a table gradient without
its table (exit 2, one line)."""
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from grad_check import check

BIN = os.environ.get("POSENC_BIN")
B, HQ, HK, D, DV = 2, 4, 2, 8, 5


def inputs(sq, sk, seed):
    g = np.random.default_rng(seed)
    return [torch.tensor(g.standard_normal(s)) for s in
            ((B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV), (B, HQ, sq, DV))]


def attend(s, v, causal):
    """softmax over keys (bottom-right causal as posenc's --causal) times V of the group."""
    sq, sk = s.shape[-2:]
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v.repeat_interleave(HQ // HK, 1)


def scores(q, k, scale):
    return (q @ k.repeat_interleave(HQ // HK, 1).transpose(-1, -2)) * scale


# HF Phi4MultimodalAudioRelativeAttentionBias: relative_position = j - i clipped to
# [-M, M - 1], abs() for bias_symmetric, else + M; bias_values(idx) [i, j, h] added to the
# scores (queries at the end of the keys: i + sk - sq).
def clipped_index(sq, sk, m, symmetric):
    rel = np.arange(sk)[None, :] - (np.arange(sq)[:, None] + sk - sq)
    rel = np.clip(rel, -m, m - 1)
    return torch.as_tensor(np.abs(rel) if symmetric else rel + m)


@pytest.mark.parametrize("causal,symmetric", [(False, False), (True, False), (True, True)])
def test_clipped_bias_gradients_match_torch_autograd(causal, symmetric):
    sq, sk = 6, 9
    q, k, v, do = inputs(sq, sk, 11)
    rows = 10 if symmetric else 6  # symmetric: M >= sk; asymmetric: M = 3 clips
    table = torch.tensor(np.random.default_rng(12).standard_normal((rows, HQ)))
    names = ("dq", "dk", "dv", "dclipped_bias")
    got = posenc.attention(q, k, v, grad_output=do, clipped_bias=table,
                           clipped_symmetric=symmetric, causal=causal, emit=names)
    Q, K, V, T = (t.clone().requires_grad_() for t in (q, k, v, table))
    m = rows if symmetric else rows // 2
    bias = T[clipped_index(sq, sk, m, symmetric)].permute(2, 0, 1)[None]
    o = attend(scores(Q, K, D ** -0.5) + bias, V, causal)
    check(got, torch.autograd.grad(o, (Q, K, V, T), do), names)


# HF SamVisionAttention.get_rel_pos / add_decomposed_rel_pos, as written there.
def get_rel_pos(q_size, k_size, rel_pos):
    max_rel_dist = int(2 * max(q_size, k_size) - 1)
    resized = F.interpolate(rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1),
                            size=max_rel_dist, mode="linear")
    resized = resized.reshape(-1, max_rel_dist).permute(1, 0)
    q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
    k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
    rel = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
    return resized[rel.long()]


def add_decomposed_rel_pos(attn, query, rel_pos_h, rel_pos_w, q_size, k_size):
    (qh, qw), (kh, kw) = q_size, k_size
    rh, rw = get_rel_pos(qh, kh, rel_pos_h), get_rel_pos(qw, kw, rel_pos_w)
    n, _, dim = query.shape
    r_q = query.reshape(n, qh, qw, dim)
    rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, rh)
    rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, rw)
    attn = attn.reshape(n, qh, qw, kh, kw) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
    return attn.reshape(n, qh * qw, kh * kw)


@pytest.mark.parametrize("causal,lh,lw", [(False, 4, 5), (True, 5, 5), (False, 7, 3)])
def test_decomposed_rel_pos_gradients_match_torch_autograd(causal, lh, lw):
    # Queries on a 2 x 3 grid, keys on 3 x 3; tables resized to 5 rows (lh, lw != 5) or
    # used as given.
    (qh, qw), (kh, kw) = (2, 3), (3, 3)
    q, k, v, do = inputs(qh * qw, kh * kw, 13)
    g = np.random.default_rng(14)
    rh, rw = torch.tensor(g.standard_normal((lh, D))), torch.tensor(g.standard_normal((lw, D)))
    names = ("dq", "dk", "dv", "drel_pos_h", "drel_pos_w")
    got = posenc.attention(q, k, v, grad_output=do, decomposed_rel_pos=(rh, rw), grid=(qh, qw),
                           key_grid=(kh, kw), causal=causal, emit=names)
    Q, K, V, RH, RW = (t.clone().requires_grad_() for t in (q, k, v, rh, rw))
    s = scores(Q, K, D ** -0.5)  # HF: (query * scale) @ key^T, the terms from the query
    s = add_decomposed_rel_pos(s.reshape(B * HQ, qh * qw, kh * kw),
                               Q.reshape(B * HQ, qh * qw, D), RH, RW, (qh, qw), (kh, kw))
    o = attend(s.reshape(B, HQ, qh * qw, kh * kw), V, causal)
    check(got, torch.autograd.grad(o, (Q, K, V, RH, RW), do), names)


@pytest.mark.parametrize("causal", [False, True])
def test_per_dim_scale_gradients_match_torch_autograd(causal):
    # HF Gemma3nAudioAttention: q * q_scale * softplus(per_dim_scale), q_scale =
    # head_dim^-0.5 / softplus(0); one entry above softplus's threshold (20).
    q, k, v, do = inputs(6, 9, 15)
    w = torch.tensor(np.random.default_rng(16).standard_normal(D))
    w[1] = 21.0
    names = ("dq", "dk", "dv", "dper_dim_scale")
    got = posenc.attention(q, k, v, grad_output=do, per_dim_scale=w, causal=causal, emit=names)
    Q, K, V, W = (t.clone().requires_grad_() for t in (q, k, v, w))
    q_scale = D ** -0.5 / F.softplus(torch.tensor(0.0, dtype=torch.float64))
    o = attend(scores(Q * q_scale * F.softplus(W), K, 1.0), V, causal)
    check(got, torch.autograd.grad(o, (Q, K, V, W), do), names)


def test_relative_proj_gradients_match_torch_autograd():
    # Gemma-3n's relative keys: per head, table[t] = W timing(t) over the window's
    # query-minus-key distances t = i - j from -1 (right 1) to 2 (left 2), clipped there,
    # score (i, j) += q'_i . table[clip(i - j)].
    sq = sk = 7
    q, k, v, do = inputs(sq, sk, 17)
    g = np.random.default_rng(18)
    chans = 6
    w = torch.tensor(g.standard_normal((HQ * D, chans)))
    pds = torch.tensor(g.standard_normal(D))
    names = ("dq", "dk", "dv", "drelative_proj", "dper_dim_scale")
    got = posenc.attention(q, k, v, grad_output=do, relative_proj=w, per_dim_scale=pds,
                           relative_left=2, relative_right=1, emit=names)
    Q, K, V, W, P = (t.clone().requires_grad_() for t in (q, k, v, w, pds))

    def timing(t):  # tensor2tensor's get_timing_signal_1d, min timescale 1, max 1e4
        half = chans // 2
        inv = torch.exp(torch.arange(half, dtype=torch.float64) * -(np.log(1e4) / (half - 1)))
        return torch.cat([torch.sin(t * inv), torch.cos(t * inv)])

    dist = np.arange(sq)[:, None] - np.arange(sk)[None, :]  # i - j
    table = torch.stack([W @ timing(float(t)) for t in range(-1, 3)]).reshape(4, HQ, D)
    q_scale = D ** -0.5 / F.softplus(torch.tensor(0.0, dtype=torch.float64))
    qs = Q * q_scale * F.softplus(P)
    rel = table[torch.as_tensor(np.clip(dist, -1, 2) + 1)]  # [i, j, h, d]
    s = scores(qs, K, 1.0) + torch.einsum("bhid,ijhd->bhij", qs, rel)
    o = attend(s, V, False)
    check(got, torch.autograd.grad(o, (Q, K, V, W, P), do), names)


@pytest.mark.parametrize("causal", [False, True])
def test_wavlm_gate_gradients_match_torch_autograd(causal):
    # HF WavLMAttention: the T5 bias (8 buckets, max distance 6, bidirectional) times each
    # row's gate a (g c - 1) + 2, a and g the sigmoids of the two sums of four of
    # gru_rel_pos_linear over the head's slice of the hidden states.
    def bucket(rel):
        out = 4 if rel > 0 else 0
        n = abs(rel)
        if n < 2:
            return out + n
        return out + min(2 + int(np.log(n / 2) / np.log(6 / 2) * 2), 3)
    sq, sk, e = 6, 9, 3
    q, k, v, do = inputs(sq, sk, 22)
    g = np.random.default_rng(23)
    table, x, w, b, c = (torch.tensor(g.standard_normal(s)) for s in
                         ((8, HQ), (B, sq, HQ * e), (8, e), (8,), (HQ,)))
    names = ("dq", "dk", "dv", "dt5_bias", "dgate_input", "dgate_weight", "dgate_bias",
             "dgate_const")
    got = posenc.attention(q, k, v, grad_output=do, t5_bias=table, t5_buckets=8,
                           t5_max_distance=6, wavlm_gate=(x, w, b, c), causal=causal,
                           emit=names)
    Q, K, V, T, X, W, Bb, C = (t.clone().requires_grad_() for t in (q, k, v, table, x, w, b, c))
    idx = torch.tensor([[bucket(j - (i + sk - sq)) for j in range(sk)] for i in range(sq)])
    position_bias = T[idx].permute(2, 0, 1)[None]  # [1, h, i, j]
    gated = X.view(B, sq, HQ, e).permute(0, 2, 1, 3)
    proj = torch.nn.functional.linear(gated, W, Bb).view(B, HQ, sq, 2, 4).sum(-1)
    gate_a, gate_b = torch.sigmoid(proj).chunk(2, dim=-1)
    gate = gate_a * (gate_b * C.view(1, HQ, 1, 1) - 1.0) + 2.0  # [b, h, i, 1]
    o = attend(scores(Q, K, D ** -0.5) + gate * position_bias, V, causal)
    check(got, torch.autograd.grad(o, (Q, K, V, T, X, W, Bb, C), do), names)


def test_table_gradient_without_its_table_is_a_usage_error():
    q, k, v, do = inputs(6, 9, 19)
    for name, message in (("dclipped_bias", "dclipped_bias needs clipped_bias$"),
                          ("drel_pos_w", "drel_pos_w needs decomposed_rel_pos$"),
                          ("dper_dim_scale", "dper_dim_scale needs per_dim_scale$"),
                          ("drelative_proj", "drelative_proj needs relative_proj$"),
                          ("dgate_bias", r"dgate_\* need wavlm_gate$")):
        with pytest.raises(posenc.UsageError, match=message):
            posenc.attention(q, k, v, grad_output=do, emit=("dq", name))


@pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")
class TestCommand:
    def grads(self, tmp_path, tag, args, emit, threads=None):
        pre = ["-j", str(threads)] if threads else []
        r = subprocess.run([BIN, *pre, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                            "--grad-output", "do.npy", "--emit", ",".join(emit),
                            "-o", f"{tag}_{{}}.npy", *args],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return {n: np.load(tmp_path / f"{tag}_{n}.npy") for n in emit}

    def save(self, tmp_path, **arrays):
        for name, a in arrays.items():
            np.save(tmp_path / f"{name}.npy", np.asarray(a))

    def test_threads_and_streaming_give_the_same_bytes(self, tmp_path):
        # K 4 MiB, V 2 MiB: --max-memory 4M streams them (posenc-attention(1),
        # GRADIENTS); 8 x 8 queries against a 64 x 128 key grid.
        g = np.random.default_rng(20)
        self.save(tmp_path, q=g.standard_normal((1, 4, 64, 32)),
                  k=g.standard_normal((1, 2, 8192, 32)), v=g.standard_normal((1, 2, 8192, 16)),
                  do=g.standard_normal((1, 4, 64, 16)), clip=g.standard_normal((64, 4)),
                  rh=g.standard_normal((90, 32)), rw=g.standard_normal((255, 32)),
                  pds=g.standard_normal(32), rproj=g.standard_normal((4 * 32, 6)))
        cases = (
            (["--causal", "--clipped-bias", "clip.npy"], ["dq", "dk", "dv", "dclipped_bias"]),
            (["--decomposed-rel-pos", "rh.npy", "rw.npy", "--grid", "8", "8", "--key-grid",
              "64", "128"], ["dq", "dk", "dv", "drel_pos_h", "drel_pos_w"]),
            # Gemma-3n: the scaled Q and the projected table made from Q, K and V streamed.
            (["--causal", "--per-dim-scale", "pds.npy"], ["dq", "dk", "dv", "dper_dim_scale"]),
            (["--per-dim-scale", "pds.npy", "--relative-proj", "rproj.npy", "--relative-left",
              "2", "--relative-right", "1"],
             ["dq", "dk", "dv", "dper_dim_scale", "drelative_proj"]),
        )
        for args, emit in cases:
            mem = self.grads(tmp_path, "mem", args, emit, threads=1)
            two = self.grads(tmp_path, "two", args, emit, threads=2)
            streamed = self.grads(tmp_path, "s", args + ["--max-memory", "4M"], emit, threads=2)
            for n in emit:
                assert two[n].tobytes() == mem[n].tobytes(), (args[0], n)
                assert streamed[n].tobytes() == mem[n].tobytes(), (args[0], n)

    def test_table_gradient_without_its_table_exits_2(self, tmp_path):
        g = np.random.default_rng(21)
        q, k, v, do = inputs(6, 9, 21)
        self.save(tmp_path, q=q, k=k, v=v, do=do, clip=g.standard_normal((6, HQ)))
        r = subprocess.run([BIN, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                            "--grad-output", "do.npy", "--emit", "dq,dclipped_bias",
                            "-o", "g_{}.npy"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "dclipped_bias needs --clipped-bias" in r.stderr
        assert not list(tmp_path.glob("g_*"))
        # Gemma-3n's inputs within a budget too small even to stream: refused (exit 3).
        self.save(tmp_path, pds=g.standard_normal(D))
        r = subprocess.run([BIN, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                            "--grad-output", "do.npy", "--per-dim-scale", "pds.npy",
                            "--max-memory", "4K", "-o", "g_{}.npy"],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
        assert not list(tmp_path.glob("g_*"))
