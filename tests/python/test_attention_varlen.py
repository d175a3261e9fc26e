"""posenc.attention's FlashAttention varlen keywords (cu_seqlens_q, cu_seqlens_k with
seqused_q): against the float64 reference of tests/lib/fa_attention_reference.py
(varlen_ref: each sequence unpacked and computed on its own lengths), <= 1e-12 relative,
and the same bytes as the command line."""
import os
import subprocess
import tempfile

import numpy as np
import pytest

import posenc
from fa_attention_reference import varlen_ref


def packed(seed=3):
    rng = np.random.default_rng(seed)
    cq = np.array([0, 5, 5, 12, 15, 19, 21], np.int32)
    ck = np.array([0, 6, 9, 9, 12, 21, 32], np.int64)
    return (rng.standard_normal((21, 4, 8)), rng.standard_normal((32, 2, 8)),
            rng.standard_normal((32, 2, 6)), cq, ck)


def test_varlen_keywords():
    q, k, v, cq, ck = packed()
    uq = np.array([2, 0, 7, 1, 4, 2])
    out, lse = posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, seqused_q=uq,
                                causal=True, emit=("output", "lse"))
    want_out, want_lse = varlen_ref(q, k, v, cq, ck, uq=uq, causal=True)
    assert out.shape == (21, 4, 6) and lse.shape == (4, 21)
    assert np.abs(out - want_out).max() / np.abs(want_out).max() <= 1e-12
    empty = np.isneginf(want_lse)
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    assert np.abs(lse[~empty] - want_lse[~empty]).max() / np.abs(want_lse[~empty]).max() <= 1e-12
    # The command line's bytes.
    with tempfile.TemporaryDirectory() as tmp:
        names = {}
        for n, x in (("q", q), ("k", k), ("v", v), ("cq", cq), ("ck", ck), ("uq", uq)):
            names[n] = os.path.join(tmp, n + ".npy")
            np.save(names[n], x)
        o = os.path.join(tmp, "o_{}.npy")
        subprocess.run([os.environ.get("POSENC_BIN", "posenc"), "attention", "-q", names["q"],
                        "-k", names["k"], "-v", names["v"], "--cu-seqlens-q", names["cq"],
                        "--cu-seqlens-k", names["ck"], "--seqused-q", names["uq"], "--causal",
                        "--emit", "output,lse", "-o", o], check=True)
        assert np.load(o.format("output")).tobytes() == out.tobytes()
        assert np.load(o.format("lse")).tobytes() == lse.tobytes()
    # Default emit: the output alone.
    only = posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck)
    assert only.tobytes() == posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                              emit="output").tobytes()


def test_varlen_refusals():
    q, k, v, cq, ck = packed()
    with pytest.raises(posenc.UsageError, match="cu_seqlens_k"):
        posenc.attention(q, k, v, cu_seqlens_q=cq)
    with pytest.raises(posenc.UsageError, match="probs"):
        posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, emit="probs")
    with pytest.raises(posenc.InputError, match="cu_seqlens_q"):
        posenc.attention(q, k, v, cu_seqlens_q=cq[::-1].copy(), cu_seqlens_k=ck)


def test_varlen_with_the_flashattention_features_is_one_run_per_sequence():
    """qv, the fp8 descales [n, hk] (a row per sequence) and the FlashAttention baseline
    under cu_seqlens_q/cu_seqlens_k: each sequence computed on its own lengths, its rows the
    bytes of a call on that sequence alone, as the command line gives (qv also against the
    float64 reference, <= 1e-12 relative)."""
    q, k, v, cq, ck = packed(seed=5)
    n = len(cq) - 1
    rng = np.random.default_rng(6)
    qv = rng.standard_normal(q.shape[:2] + (v.shape[2],))
    ds = rng.uniform(0.5, 2, (3, n, k.shape[1])).astype(np.float32)
    half = {"q": q.astype(np.float16), "k": k.astype(np.float16), "v": v.astype(np.float16)}
    cases = [
        ({"q": q, "k": k, "v": v}, {"qv": qv}),
        ({"q": q, "k": k, "v": v}, {"q_descale": ds[0], "k_descale": ds[1], "v_descale": ds[2]}),
        (half, {"arith": "fa-baseline"}),
    ]
    for x, kw in cases:
        got = posenc.attention(x["q"], x["k"], x["v"], cu_seqlens_q=cq, cu_seqlens_k=ck,
                               causal=True, **kw)
        for b in range(n):
            if cq[b + 1] == cq[b]:
                continue
            one = {name: (a[b:b + 1] if name.endswith("descale") else
                          a[cq[b]:cq[b + 1]] if name == "qv" else a) for name, a in kw.items()}
            alone = posenc.attention(x["q"][cq[b]:cq[b + 1]], x["k"][ck[b]:ck[b + 1]],
                                     x["v"][ck[b]:ck[b + 1]], axes="shd", causal=True,
                                     emit="output", **one)
            assert got[cq[b]:cq[b + 1]].tobytes() == alone.tobytes(), (sorted(kw), b)
        with tempfile.TemporaryDirectory() as tmp:
            names = {}
            for name, a in [*x.items(), ("cq", cq), ("ck", ck),
                            *((n_, a) for n_, a in kw.items() if n_ != "arith")]:
                names[name] = os.path.join(tmp, name + ".npy")
                np.save(names[name], a)
            more = [w for n_ in kw if n_ != "arith"
                    for w in ("--" + n_.replace("_", "-"), names[n_])]
            if "arith" in kw:
                more += ["--arith", kw["arith"]]
            o = os.path.join(tmp, "o.npy")
            subprocess.run([os.environ.get("POSENC_BIN", "posenc"), "attention", "-q",
                            names["q"], "-k", names["k"], "-v", names["v"], "--cu-seqlens-q",
                            names["cq"], "--cu-seqlens-k", names["ck"], "--causal", *more,
                            "-o", o], check=True)
            assert np.load(o).tobytes() == got.tobytes(), sorted(kw)
    want, _ = varlen_ref(q, k, v, cq, ck, causal=True, qv=qv)
    got = posenc.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True, qv=qv)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-12
