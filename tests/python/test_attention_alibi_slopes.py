"""posenc.attention(alibi_slopes=...) (FlashAttention's alibi_slopes [hq] or [b, hq])
against the torch float64 rewrite of FA's ALiBi in tests/lib/fa_alibi_reference.py:
float64 within 1e-12 of the largest reference value; bad slopes raise the module's
exceptions (the numbers across forms, varlen, the KV cache and the backward are
tests/reference/test_attention_alibi_slopes.py's)."""

import numpy as np
import pytest

import posenc
from fa_alibi_reference import reference


def data(seed=12, b=2, sq=5, sk=8, h=4, hk=2, d=8):
    r = np.random.default_rng(seed)
    return (r.standard_normal((b, sq, h, d)), r.standard_normal((b, sk, hk, d)),
            r.standard_normal((b, sk, hk, d)), r.random((b, h)) * 0.3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_entry", [False, True])
def test_keyword_matches_the_reference(causal, per_entry):
    q, k, v, slopes = data()
    s = slopes if per_entry else slopes[0]
    out, lse = posenc.attention(q, k, v, axes="bshd", causal=causal, alibi_slopes=s,
                                emit=("output", "lse"))
    want_out, want_lse, _ = reference(q, k, v, s, causal=causal)
    assert np.abs(out - want_out).max() <= 1e-12 * np.abs(want_out).max()
    assert np.abs(lse - want_lse).max() <= 1e-12 * np.abs(want_lse).max()


def test_refusals():
    q, k, v, slopes = data(seed=13)
    with pytest.raises(posenc.InputError, match="alibi_slopes"):
        posenc.attention(q, k, v, axes="bshd", alibi_slopes=slopes[:, :3])
    with pytest.raises(posenc.InputError, match="alibi_slopes"):
        posenc.attention(q, k, v, axes="bshd", alibi_slopes=np.full(4, np.nan))
    with pytest.raises(posenc.UsageError, match="alibi"):
        posenc.attention(q, k, v, axes="bshd", alibi_slopes=slopes, arith="hf")
    with pytest.raises(posenc.UsageError, match="alibi_max_bias"):
        posenc.attention(q, k, v, axes="bshd", alibi_slopes=slopes, alibi=True,
                         alibi_max_bias=4)
