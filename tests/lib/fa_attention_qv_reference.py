"""FlashAttention-3's attention_ref (hopper/test_util.py) features beyond the masks,
rewritten in torch from its public semantics: qv, the fp8 descales, intermediate_dtype
(P rounded before P.V) and the PyTorch baseline (upcast=False, reorder_ops=True).

Layout bshd as FA: q [b, sq, h, d], k, v [b, sk, h_k, d / dv], qv [b, sq, h, dv],
descales [b, h_k].
- descale: x = (x.float() * descale).to(x.dtype), q_descale repeated over the group and
  applied to qv too; under the upcast reference x.dtype is float32 already.
- scale 1/sqrt(d + dv) with qv; scores = (q scale) k^T + (qv scale) v^T.
- intermediate_dtype: P.to(dtype).to(P.dtype) (P float32 in the reference).
"""
import math

import numpy as np
import torch

import fp8_reference
from fa_attention_reference import masked_set


def round_p(p, p_dtype):
    """P (float64 torch) rounded as attention_ref's P.to(dtype), from float32."""
    p32 = p.float()
    if p_dtype in ("e4m3fn", "e5m2"):
        codes = fp8_reference.encode(p32.numpy(), p_dtype)
        return torch.from_numpy(fp8_reference.table(p_dtype)[codes].astype(np.float64))
    t = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[p_dtype]
    return p32.to(t).double()


def _descale(x, ds, group, to):
    """(x.float() * descale[b, h // group]).to(to); x [b, s, h, d], ds [b, h_k]."""
    if ds is None:
        return x
    ds = torch.as_tensor(ds).float().repeat_interleave(group, dim=1)[:, None, :, None]
    return (x.float() * ds).to(to)


def attention_ref_fa(q, k, v, qv=None, q_descale=None, k_descale=None, v_descale=None,
                     causal=False, window=(None, None), chunk=0, seqused_q=None,
                     seqused_k=None, scale=None, softcap=0.0, p_dtype=None):
    """The upcast reference computed in float64 (descale products in float32 as FA):
    output [b, sq, h, dv], lse [b, h, sq], probs [b, h, sq, sk] (numpy)."""
    q, k, v = (torch.as_tensor(x) for x in (q, k, v))
    qv = torch.as_tensor(qv) if qv is not None else None
    h, hk = q.shape[2], k.shape[2]
    g = h // hk
    if q_descale is not None:
        q = _descale(q, q_descale, g, torch.float32)
        qv = _descale(qv, q_descale, g, torch.float32) if qv is not None else None
    k = _descale(k, k_descale, 1, torch.float32) if k_descale is not None else k
    v = _descale(v, v_descale, 1, torch.float32) if v_descale is not None else v
    q, k, v = q.double(), k.double(), v.double()
    qv = qv.double() if qv is not None else None
    b, sq, _, d = q.shape
    sk, dv = k.shape[1], v.shape[3]
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    if scale is None:
        scale = 1 / math.sqrt(d if qv is None else d + dv)
    scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    if qv is not None:
        scores = scores + torch.einsum("bthd,bshd->bhts", qv * scale, v)
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    masked = masked_set(b, sq, sk, causal, window, chunk, seqused_q, seqused_k)
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    empty = masked.all(dim=-1, keepdim=True)
    p = torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)
    pr = round_p(p, p_dtype) if p_dtype else p
    out = torch.einsum("bhts,bshd->bthd", pr, v)
    return out.numpy(), lse.numpy(), p.numpy()


def attention_baseline(q, k, v, qv=None, q_descale=None, k_descale=None, v_descale=None,
                       causal=False, window=(None, None), chunk=0, seqused_q=None,
                       seqused_k=None, scale=None, softcap=0.0, p_dtype=None):
    """attention_ref(upcast=False, reorder_ops=True) in q's dtype T (a torch tensor), each
    op's result rounded to T with .to(T) as CUDA computes it: element-wise ops in
    float32, einsums accumulated exactly (float64 here) and rounded to float32 then T,
    softmax exact then float32 then T. Returns output [b, sq, h, dv] (T) and probs."""
    T = q.dtype
    h, hk = q.shape[2], k.shape[2]
    g = h // hk
    if q_descale is not None:
        q = _descale(q, q_descale, g, T)
        qv = _descale(qv, q_descale, g, T) if qv is not None else None
    k = _descale(k, k_descale, 1, T) if k_descale is not None else k
    v = _descale(v, v_descale, 1, T) if v_descale is not None else v
    b, sq, _, d = q.shape
    sk, dv = k.shape[1], v.shape[3]
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    if scale is None:
        scale = 1 / math.sqrt(d if qv is None else d + dv)
    s32 = torch.tensor(scale, dtype=torch.float32)

    def gemm(eq, a, b_):
        return torch.einsum(eq, a.double(), b_.double()).float().to(T)

    ks = (k.float() * s32).to(T)
    scores = gemm("bthd,bshd->bhts", q, ks)
    if qv is not None:
        qvs = (qv.float() * s32).to(T)
        scores = (scores.float() + gemm("bthd,bshd->bhts", qvs, v).float()).to(T)
    if softcap > 0:
        cap = torch.tensor(softcap, dtype=torch.float32)
        scores = (scores.float() * (1 / cap)).to(T)
        scores = torch.tanh(scores.double()).float().to(T)
        scores = (scores.float() * cap).to(T)
    masked = masked_set(b, sq, sk, causal, window, chunk, seqused_q, seqused_k)
    scores = scores.masked_fill(masked, float("-inf"))
    empty = masked.all(dim=-1, keepdim=True)
    p = torch.softmax(scores.double(), dim=-1).float().to(T).masked_fill(empty, 0.0)
    pr = round_p(p.double(), p_dtype).float().to(T) if p_dtype else p
    out = gemm("bhts,bshd->bthd", pr, v)
    return out, p
