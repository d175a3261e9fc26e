"""posenc.attention against the float64 eager reference of
tests/lib/reference_attention.py (with its error bounds) and torch's eager attention;
options pass through to the library."""
import numpy as np
import torch

import posenc
from reference_attention import U32, U64, attention_reference, window_keep
from reference_rope import default_inv, rope as rope_ref


def qkv(shape_q=(2, 4, 7, 16), hk=2, sk=11, dv=16, seed=0):
    g = np.random.default_rng(seed)
    b, hq, sq, d = shape_q
    return (g.standard_normal(shape_q), g.standard_normal((b, hk, sk, d)),
            g.standard_normal((b, hk, sk, dv)))


def within(got, ref, margin, u, dtype_eps):
    bound = margin + dtype_eps * np.abs(ref) + 1e-300
    assert np.all(np.abs(np.asarray(got, np.float64) - ref) <= bound)


def test_default_emit_probs_output_f64():
    q, k, v = qkv()
    probs, out = posenc.attention(q, k, v)
    ref, m = attention_reference(q, k, v)
    within(probs, ref["probs"], m["probs"], U64, 2.0 ** -53)
    within(out, ref["output"], m["output"], U64, 2.0 ** -53)


def test_causal_window_emit_list_f32():
    q, k, v = qkv()
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    logits, lse, out = posenc.attention(q32, k32, v32, causal=True, window=(3, 0),
                                        emit=("logits", "lse", "output"))
    assert logits.dtype == np.float32 and out.dtype == np.float32
    keep = window_keep(7, 11, 3, 0)
    ref, m = attention_reference(*(a.astype(np.float64) for a in (q32, k32, v32)), keep=keep,
                                 u=U32)
    finite = np.isfinite(ref["logits"])
    assert np.array_equal(np.isfinite(logits), finite)
    within(logits[finite], ref["logits"][finite], m["logits"][finite], U32, 2.0 ** -24)
    within(lse, ref["lse"], m["lse"], U32, 2.0 ** -24)
    within(out, ref["output"], m["output"], U32, 2.0 ** -24)


def test_single_emit_returns_array_and_torch_in_out():
    q, k, v = (torch.from_numpy(a) for a in qkv(seed=3))
    out = posenc.attention(q, k, v, emit="output", scale=0.5)
    assert isinstance(out, torch.Tensor)
    # torch's eager attention (HF's repeat_kv for the grouped heads), float64
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    want = torch.softmax(q @ kr.transpose(-1, -2) * 0.5, dim=-1) @ vr
    ref, m = attention_reference(q.numpy(), k.numpy(), v.numpy(), scale=0.5)
    within(out.numpy(), ref["output"], m["output"], U64, 2.0 ** -53)
    assert torch.allclose(out, want, rtol=0, atol=1e-12)


def test_rope_inside_attention_equals_rope_then_attention():
    q, k, v = qkv(shape_q=(1, 2, 6, 32), hk=2, sk=6, dv=32, seed=5)
    got = posenc.attention(q, k, v, rope=True, base=1000.0, emit="output")
    qr, mq = rope_ref(q, np.broadcast_to(np.arange(6)[:, None], (1, 2, 6, 1))[..., 0],
                      default_inv(1000.0, 32), "neox")
    kr, mk = rope_ref(k, np.broadcast_to(np.arange(6)[:, None], (1, 2, 6, 1))[..., 0],
                      default_inv(1000.0, 32), "neox")
    ref, m = attention_reference(qr, kr, v, mq=mq, mk=mk)
    within(got, ref["output"], m["output"], U64, 2.0 ** -53)


def test_alibi_and_mask_and_key_lengths_reach_the_library():
    q, k, v = qkv(seed=7)
    base = posenc.attention(q, k, v, emit="logits")
    with_alibi = posenc.attention(q, k, v, emit="logits", alibi="symmetric")
    assert not np.allclose(base, with_alibi)
    keep = np.ones((7, 11), bool)
    keep[:, 5] = False
    masked = posenc.attention(q, k, v, emit="probs", mask=keep)
    assert np.all(masked[..., 5] == 0)
    lengths = posenc.attention(q, k, v, emit="probs", key_lengths=np.array([4, 11]))
    assert np.all(lengths[0, ..., 4:] == 0) and np.all(lengths[1] > 0)


def test_bf16_outputs_torch():
    q, k, v = (torch.from_numpy(a).to(torch.bfloat16) for a in qkv(seed=9))
    out = posenc.attention(q, k, v, emit="output")
    assert out.dtype == torch.bfloat16
    ref, m = attention_reference(*(a.to(torch.float64).numpy() for a in (q, k, v)), u=U32)
    within(out.float().numpy(), ref["output"], m["output"], U32, 2.0 ** -8)
