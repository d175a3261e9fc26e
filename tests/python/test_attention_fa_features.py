"""posenc.attention's FlashAttention-3 test features (qv, q_descale, k_descale,
v_descale, p_dtype, arith="fa-baseline") against the torch rewrite of FA's attention_ref
in tests/lib/fa_attention_qv_reference.py: float64 within 1e-12 of the largest reference
value; the baseline bit for bit (both round each op the same way)."""

import numpy as np
import pytest
import torch

import posenc
from fa_attention_qv_reference import attention_baseline, attention_ref_fa


def data(seed=9, b=2, sq=6, sk=9, h=4, hk=2, d=8, dv=6):
    rng = np.random.default_rng(seed)
    return dict(q=rng.standard_normal((b, sq, h, d)), k=rng.standard_normal((b, sk, hk, d)),
                v=rng.standard_normal((b, sk, hk, dv)), qv=rng.standard_normal((b, sq, h, dv)),
                q_descale=rng.uniform(0.25, 3, (b, hk)), k_descale=rng.uniform(0.25, 3, (b, hk)),
                v_descale=rng.uniform(0.25, 3, (b, hk)))


def test_keywords_match_the_reference():
    x = data()
    kw = dict(qv=x["qv"], q_descale=x["q_descale"], k_descale=x["k_descale"],
              v_descale=x["v_descale"], p_dtype="bf16")
    out, lse = posenc.attention(x["q"], x["k"], x["v"], axes="bshd", causal=True,
                                emit=("output", "lse"), **kw)
    want_out, want_lse, _ = attention_ref_fa(x["q"], x["k"], x["v"], causal=True, **kw)
    assert np.abs(out - want_out).max() <= 1e-12 * np.abs(want_out).max()
    assert np.abs(lse - want_lse).max() <= 1e-12 * np.abs(want_lse).max()


def test_fa_baseline_bits():
    x = data(seed=10)
    t = {n: torch.from_numpy(x[n].astype(np.float32)).half() for n in ("q", "k", "v", "qv")}
    got = posenc.attention(t["q"].numpy(), t["k"].numpy(), t["v"].numpy(), axes="bshd",
                           qv=t["qv"].numpy(), emit="output", arith="fa-baseline", softcap=2.0)
    want, _ = attention_baseline(t["q"], t["k"], t["v"], qv=t["qv"], softcap=2.0)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.numpy())


def test_refusals():
    x = data(seed=11)
    with pytest.raises(posenc.InputError, match="k_descale"):
        posenc.attention(x["q"], x["k"], x["v"], axes="bshd", k_descale=-x["k_descale"])
    with pytest.raises(posenc.UsageError, match="p_dtype"):
        posenc.attention(x["q"], x["k"], x["v"], axes="bshd", p_dtype="f8")
    with pytest.raises(posenc.UsageError, match="arith"):
        posenc.attention(x["q"], x["k"], x["v"], axes="bshd", qv=x["qv"], arith="hf")
