"""posenc.attention's FlashAttention KV-cache keywords (cache_seqlens, page_table, k_new,
rotary_cos, ...): against the float64 reference of tests/lib/fa_kvcache_reference.py
(<= 1e-12 relative), the caches updated in place as flash_attn_with_kvcache updates them
(torch tensors and numpy arrays, the same memory), update_cache=False leaving them as they
were, and a paged cache giving the bytes of the contiguous one."""
import numpy as np
import pytest
import torch

import posenc
from fa_kvcache_reference import kv_reference


def data(seed=5, b=2, S=32, hk=2, h=4, d=16, s_new=2, sq=2):
    r = np.random.default_rng(seed)
    q = r.standard_normal((b, sq, h, d))
    kc = r.standard_normal((b, S, hk, d))
    vc = r.standard_normal((b, S, hk, d))
    kn = r.standard_normal((b, s_new, hk, d))
    vn = r.standard_normal((b, s_new, hk, d))
    ang = r.uniform(0, 2 * np.pi, (S + 4, 4))
    return q, kc, vc, kn, vn, np.cos(ang), np.sin(ang)


def test_kvcache_keywords_torch_in_place():
    q, kc, vc, kn, vn, cos, sin = data()
    seqlens = np.array([3, 20], np.int32)
    want_out, want_lse, want_k, want_v = kv_reference(
        q, kc, vc, seqlens, kn, vn, cos=cos, sin=sin, interleaved=True, causal=True)
    kt, vt = torch.from_numpy(kc.copy()), torch.from_numpy(vc.copy())
    out, lse = posenc.attention(
        torch.from_numpy(q), kt, vt, cache_seqlens=torch.from_numpy(seqlens),
        k_new=torch.from_numpy(kn), v_new=torch.from_numpy(vn), rotary_cos=cos,
        rotary_sin=sin, rotary_interleaved=True, causal=True, emit=("output", "lse"))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 2, 4, 16)
    assert np.abs(out.numpy() - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())
    assert np.abs(lse.numpy() - want_lse).max() <= 1e-12 * max(1, np.abs(want_lse).max())
    np.testing.assert_array_equal(kt.numpy(), want_k)  # in place, as FlashAttention
    np.testing.assert_array_equal(vt.numpy(), want_v)


def test_update_cache_false_and_paged_bytes():
    q, kc, vc, kn, vn, cos, sin = data(seed=6)
    seqlens = np.array([7, 0], np.int64)
    k0, v0 = kc.copy(), vc.copy()
    out = posenc.attention(q, kc, vc, cache_seqlens=seqlens, k_new=kn, v_new=vn,
                           update_cache=False, window=(4, 0))
    np.testing.assert_array_equal(kc, k0)
    np.testing.assert_array_equal(vc, v0)
    # Paged: pages of 8 in reverse order.
    pages = lambda c: np.ascontiguousarray(c.reshape(8, 8, 2, 16)[::-1])
    table = (7 - np.arange(8)).reshape(2, 4).astype(np.int32)
    kp, vp = pages(kc), pages(vc)
    got = posenc.attention(q, kp, vp, cache_seqlens=seqlens, k_new=kn, v_new=vn,
                           page_table=table, window=(4, 0))
    assert got.tobytes() == out.tobytes()
    want_out, _, want_k, _ = kv_reference(q, kc, vc, seqlens, kn, vn, window=(4, 0))
    np.testing.assert_array_equal(kp, pages(want_k))
    assert np.abs(got - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())


def test_read_only_cache_needs_no_writable_arrays():
    q, kc, vc, kn, vn, _, _ = data(seed=7)
    kc.flags.writeable = False
    out = posenc.attention(q, kc, vc, cache_seqlens=np.array([5, 9]))
    want_out = kv_reference(q, kc, vc, np.array([5, 9]))[0]
    assert np.abs(out - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())
    with pytest.raises(posenc.UsageError, match="in place"):
        posenc.attention(q, kc, vc, cache_seqlens=np.array([5, 9]), k_new=kn, v_new=vn)
    with pytest.raises(posenc.InputError, match="cache_seqlens"):
        posenc.attention(q, kc, vc, cache_seqlens=np.array([5, 33]))


def test_nonfinite_rows_past_the_lengths_are_not_read():
    # A cache allocated with torch.empty may hold anything past cache_seqlens; NaN or Inf in
    # a row an entry uses is an InputError naming the cache.
    q, kc, vc, _, _, _, _ = data(seed=8)
    kc[:, 20:] = np.nan
    vc[:, 20:] = np.inf
    out = posenc.attention(q, kc, vc, cache_seqlens=np.array([4, 20]))
    assert np.isfinite(out).all()
    kc[1, 5, 0, 3] = np.inf
    with pytest.raises(posenc.InputError, match="k_cache.*entry 1"):
        posenc.attention(q, kc, vc, cache_seqlens=np.array([4, 20]))


def test_bf16_rotary_tables_used_as_their_values():
    q, kc, vc, kn, vn, cos, sin = data(seed=9, sq=1)
    cos_t, sin_t = (torch.from_numpy(x).to(torch.bfloat16) for x in (cos, sin))
    seqlens = np.array([6, 11], np.int32)
    want_out, _, want_k, _ = kv_reference(q, kc, vc, seqlens, kn, vn,
                                          cos=cos_t.double().numpy(), sin=sin_t.double().numpy())
    kt = kc.copy()
    out = posenc.attention(q, kt, vc.copy(), cache_seqlens=seqlens, k_new=kn, v_new=vn,
                           rotary_cos=cos_t, rotary_sin=sin_t)
    np.testing.assert_array_equal(kt, want_k)
    assert np.abs(out - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())


def test_kvcache_qv_and_descales_and_refusals():
    # FA3's qv and descales honoured as the CLI honours them; options the KV step cannot
    # honour refused (UsageError), the caches left as they were.
    q, kc, vc, kn, vn, cos, sin = data(seed=9)
    r = np.random.default_rng(9)
    qv = r.standard_normal(q.shape)
    kd, vd = (r.uniform(0.5, 2.0, (2, 2)).astype(np.float32) for _ in range(2))
    seqlens = np.array([7, 11], np.int32)
    want_out = kv_reference(q, kc, vc, seqlens, kn, vn, qv=qv, k_descale=kd, v_descale=vd,
                            causal=True)[0]
    k1, v1 = kc.copy(), vc.copy()
    out = posenc.attention(q, k1, v1, cache_seqlens=seqlens, k_new=kn, v_new=vn, qv=qv,
                           k_descale=kd, v_descale=vd, causal=True)
    assert np.abs(out - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())
    for kw in (dict(p_dtype="bf16"), dict(arith="fa-baseline")):
        k2, v2 = kc.copy(), vc.copy()
        with pytest.raises(posenc.UsageError, match="not with a KV cache"):
            posenc.attention(q, k2, v2, cache_seqlens=seqlens, k_new=kn, v_new=vn, **kw)
        np.testing.assert_array_equal(k2, kc)


def test_cu_seqlens_k_new_packed_new_keys():
    # Packed new keys (FlashAttention's varlen k/v with cu_seqlens_k_new): entry 0 three
    # tokens, entry 1 none; torch tensors updated in place; bad offsets an InputError, the
    # keyword without k_new a UsageError, the caches left as they were.
    q, kc, vc, _, _, cos, sin = data(seed=10)
    r = np.random.default_rng(10)
    kn, vn = r.standard_normal((3, 2, 16)), r.standard_normal((3, 2, 16))
    cu = np.array([0, 3, 3], np.int64)
    seqlens = np.array([4, 9], np.int32)
    want_out, want_lse, want_k, want_v = kv_reference(
        q, kc, vc, seqlens, kn, vn, cos=cos, sin=sin, causal=True, cu_new=cu)
    kt, vt = torch.from_numpy(kc.copy()), torch.from_numpy(vc.copy())
    out, lse = posenc.attention(
        torch.from_numpy(q), kt, vt, cache_seqlens=seqlens, k_new=torch.from_numpy(kn),
        v_new=torch.from_numpy(vn), cu_seqlens_k_new=torch.from_numpy(cu), rotary_cos=cos,
        rotary_sin=sin, causal=True, emit=("output", "lse"))
    assert np.abs(out.numpy() - want_out).max() <= 1e-12 * max(1, np.abs(want_out).max())
    assert np.abs(lse.numpy() - want_lse).max() <= 1e-12 * max(1, np.abs(want_lse).max())
    np.testing.assert_array_equal(kt.numpy(), want_k)
    np.testing.assert_array_equal(vt.numpy(), want_v)
    k1, v1 = kc.copy(), vc.copy()
    with pytest.raises(posenc.InputError, match="cu_seqlens_k_new"):
        posenc.attention(q, k1, v1, cache_seqlens=seqlens, k_new=kn, v_new=vn,
                         cu_seqlens_k_new=np.array([0, 2, 2], np.int32))
    with pytest.raises(posenc.UsageError, match="cu_seqlens_k_new"):
        posenc.attention(q, k1, v1, cache_seqlens=seqlens, cu_seqlens_k_new=cu)
    np.testing.assert_array_equal(k1, kc)
    np.testing.assert_array_equal(v1, vc)
