"""posenc.attention(..., grad_output=dO) with LongT5's transient-global side keys
(global_kv, global_block_size, global_bias): dq, dk, dv and the gradients of the side
keys, side values and side bias table (dglobal_k, dglobal_v, dglobal_bias). The side
term is written here from HF LongT5TransientGlobalAttention in torch float64 (its
_make_global_fixed_block_ids, _make_side_relative_position_ids, compute_side_bias:
score (i, g) = q_i.kg_g + global_relative_attention_bias[bucket(g - block(i))], side
mask eq(attention_mask, global_segment_ids)) beside the local keys (T5 bias, window,
padding keys masked), softmax over both, and differentiated by autograd; the side keys
are inputs here as in posenc (HF makes them from K and V of the block sums). Masks
are -inf where HF adds -1e10; padding queries keep posenc's rows (their side keys those
HF's eq gives them). The gradients agree to 1e-12 of each tensor's largest magnitude.
The command gives the same bytes at -j1 and -j2, streamed (within --max-memory) as in
memory, and refuses a side gradient without its input (exit 2, one line)."""
import os
import subprocess

import numpy as np
import pytest
import torch

import posenc
from grad_check import check
from longt5_reference import global_fixed_block_ids, side_relative_position_ids
from reference_bias import t5_bucket

BIN = os.environ.get("POSENC_BIN")
B, HQ, HK, D, DV = 2, 4, 2, 8, 5
NAMES = ("dq", "dk", "dv", "dglobal_k", "dglobal_v", "dglobal_bias")


def reference(q, k, v, kg, vg, t5, gb, lengths, gbs, window, buckets, max_distance):
    """HF's transient-global scores over the local keys and the side keys, -inf masked."""
    s = q.shape[2]
    mask = torch.zeros(B, s, dtype=torch.int64)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    rep = lambda x: x.repeat_interleave(HQ // HK, 1)
    # Local keys: T5's bucket(j - i), padding keys and the window masked.
    rel = torch.arange(s)[None, :] - torch.arange(s)[:, None]
    local = q @ rep(k).transpose(-1, -2)
    local = local + t5[t5_bucket(rel, True, buckets, max_distance)].permute(2, 0, 1)[None]
    keep = mask[:, None, None, :] != 0
    if window is not None:
        keep = keep & (rel.abs() <= window)[None, None]
    local = local.masked_fill(~keep, float("-inf"))
    # HF compute_side_bias: eq(mask, global_segment_ids) and the bias by g - block(i).
    _, seg = global_fixed_block_ids(mask, gbs)
    side_mask = torch.eq(mask[..., None], seg[:, None, :])[:, None, ...]
    side_rel = side_relative_position_ids(mask, gbs)
    side_bias = gb[t5_bucket(side_rel, True, buckets, max_distance)].permute(0, 3, 1, 2)
    side = q @ rep(kg).transpose(-1, -2) + side_bias
    side = side.masked_fill(~side_mask, float("-inf"))
    p = torch.softmax(torch.cat([local, side], -1), -1)
    return p[..., :s] @ rep(v) + p[..., s:] @ rep(vg)


@pytest.mark.parametrize("s,gbs,lengths,window,bias", [
    (13, 3, (13, 8), None, True),   # orphans of a partial block, padding
    (16, 4, (16, 16), 3, True),     # local window, every block full
    (11, 5, (11, 4), None, False),  # no side bias; the second entry has no full block
])
def test_global_kv_gradients_match_torch_autograd(s, gbs, lengths, window, bias):
    g = np.random.default_rng(40 + s)
    n, buckets, max_distance = s // gbs, 8, 12
    t = lambda *shape: torch.tensor(g.standard_normal(shape))
    q, k, v, do = t(B, HQ, s, D), t(B, HK, s, D), t(B, HK, s, DV), t(B, HQ, s, DV)
    kg, vg, t5, gb = t(B, HK, n, D), t(B, HK, n, DV), t(buckets, HQ), t(buckets, HQ)
    names = NAMES if bias else NAMES[:-1]
    kw = dict(scale=1.0, t5_bias=t5, t5_buckets=buckets, t5_max_distance=max_distance,
              key_lengths=np.array(lengths), global_kv=(kg, vg), global_block_size=gbs)
    if window is not None:
        kw["window"] = (window, window)
    if bias:
        kw["global_bias"] = gb
    got = posenc.attention(q, k, v, grad_output=do, emit=names, **kw)
    Q, K, V, KG, VG, GB = (x.clone().requires_grad_() for x in (q, k, v, kg, vg, gb))
    o = reference(Q, K, V, KG, VG, t5, GB if bias else torch.zeros_like(gb), lengths, gbs,
                  window, buckets, max_distance)
    want = torch.autograd.grad(o, (Q, K, V, KG, VG, GB)[:len(names)], do)
    check(got, want, names)


def test_side_gradient_without_its_input_is_a_usage_error():
    g = np.random.default_rng(50)
    q, k, v, do = (g.standard_normal(sh) for sh in
                   ((1, 2, 6, D), (1, 2, 6, D), (1, 2, 6, DV), (1, 2, 6, DV)))
    with pytest.raises(posenc.UsageError, match="dglobal_k and dglobal_v need global_kv$"):
        posenc.attention(q, k, v, grad_output=do, emit=("dq", "dglobal_v"))
    kg, vg = g.standard_normal((1, 2, 2, D)), g.standard_normal((1, 2, 2, DV))
    with pytest.raises(posenc.UsageError, match="dglobal_bias needs global_bias$"):
        posenc.attention(q, k, v, grad_output=do, emit=("dq", "dglobal_bias"),
                         global_kv=(kg, vg), global_block_size=3)


@pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")
class TestCommand:
    def grads(self, tmp_path, tag, args, emit, threads):
        r = subprocess.run([BIN, "-j", str(threads), "attention", "-q", "q.npy", "-k", "k.npy",
                            "-v", "v.npy", "--grad-output", "do.npy", "--emit", ",".join(emit),
                            "-o", f"{tag}_{{}}.npy", *args],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return {n: np.load(tmp_path / f"{tag}_{n}.npy") for n in emit}

    def test_threads_and_streaming_give_the_same_bytes(self, tmp_path):
        # 4,096 tokens, 256 side keys (G 16): K 2 MiB and V 1 MiB in float64. In memory
        # the backward needs 38.9 MiB with the inputs (exit 3 at --max-memory 35M with K
        # and V in a layout that cannot be streamed); streamed, 21.7 MiB besides the
        # forward's 12.4 MiB block of keys, within 35M.
        g = np.random.default_rng(51)
        s, n = 4096, 256
        arrays = dict(q=(1, 4, s, 32), k=(1, 2, s, 32), v=(1, 2, s, 16), do=(1, 4, s, 16),
                      kg=(1, 2, n, 32), vg=(1, 2, n, 16), t5=(32, 4), gb=(32, 4))
        for name, shape in arrays.items():
            np.save(tmp_path / f"{name}.npy", g.standard_normal(shape))
        np.save(tmp_path / "len.npy", np.array([4000]))
        args = ["--window", "64,64", "--t5-bias", "t5.npy", "--key-lengths", "len.npy",
                "--global-kv", "kg.npy", "vg.npy", "--global-block-size", "16",
                "--global-bias", "gb.npy"]
        emit = list(NAMES)
        mem = self.grads(tmp_path, "mem", args, emit, 1)
        two = self.grads(tmp_path, "two", args, emit, 2)
        streamed = self.grads(tmp_path, "s", args + ["--max-memory", "35M"], emit, 2)
        for name in emit:
            assert two[name].tobytes() == mem[name].tobytes(), name
            assert streamed[name].tobytes() == mem[name].tobytes(), name
        # The same budget in memory (Q, K, V and dO in bshd: K and V cannot be streamed)
        # is refused, nothing written.
        for name in ("q", "k", "v", "do", "kg", "vg"):
            np.save(tmp_path / f"{name}_t.npy",
                    np.ascontiguousarray(np.load(tmp_path / f"{name}.npy").transpose(0, 2, 1, 3)))
        bshd = [a.replace("g.npy", "g_t.npy") for a in args]
        r = subprocess.run([BIN, "attention", "-q", "q_t.npy", "-k", "k_t.npy", "-v", "v_t.npy",
                            "--grad-output", "do_t.npy", "--axes", "bshd", "--emit",
                            ",".join(emit), "-o", "t_{}.npy", "--max-memory", "35M", *bshd],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
        assert not list(tmp_path.glob("t_*"))

    def test_side_gradient_without_its_input_exits_2(self, tmp_path):
        g = np.random.default_rng(52)
        for name, shape in dict(q=(1, 2, 6, D), k=(1, 2, 6, D), v=(1, 2, 6, DV),
                                do=(1, 2, 6, DV)).items():
            np.save(tmp_path / f"{name}.npy", g.standard_normal(shape))
        r = subprocess.run([BIN, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                            "--grad-output", "do.npy", "--emit", "dq,dglobal_k",
                            "-o", "g_{}.npy"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "dglobal_k and dglobal_v need --global-kv" in r.stderr
        assert not list(tmp_path.glob("g_*"))
