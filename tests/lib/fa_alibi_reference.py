"""FlashAttention's ALiBi with given slopes (alibi_slopes [h] or [b, h]), written in torch
float64 from FA's public semantics, for judging posenc attention --alibi-slopes:

- the kernel (csrc/flash_attn/src/mask.h, alibi.h): with a causal mask and no left
  window it adds slope * j to the scores (its softmax_lse includes it); otherwise it
  subtracts slope * |i + sk_b - sq_b - j|, sk_b and sq_b the entry's own lengths
  (seqused_k/q, the KV cache's keys, a varlen sequence's lengths);
- the test suite's attn_bias_from_alibi_slopes (tests/test_flash_attn.py): the same
  non-causal form (key_padding_mask.sum, query_padding_mask.sum per entry), and under
  causal slope * (j - sk + 1) (fa_test_form), a row constant away from the kernel's;
- the bias is added after the scale (the kernel divides the slope by softmax_scale
  before adding it to q.k).
"""
import math

import numpy as np
import torch

from fa_attention_reference import masked_set


def reference(q, k, v, slopes, causal=False, window=(None, None), seqused_q=None,
              seqused_k=None, fa_test_form=False, top_left=False, grad=None):
    """Output [b, sq, h, dv], lse [b, h, sq], probs [b, h, sq, sk] (numpy float64), and
    with grad (dO) the gradients dq, dk, dv. bshd; slopes [h] or [b, h]."""
    q, k, v = (torch.tensor(x, dtype=torch.float64, requires_grad=grad is not None)
               for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(h // hk, dim=2)
    vv = v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), kk)
    sl = torch.as_tensor(np.broadcast_to(slopes, (b, h)).copy(), dtype=torch.float64)
    row = torch.arange(sq)[:, None]
    col = torch.arange(sk)[None, :]
    bias = torch.zeros(b, h, sq, sk, dtype=torch.float64)
    causal_form = (causal or top_left) and window[0] is None
    for e in range(b):
        sq_b = sq if seqused_q is None else int(seqused_q[e])
        sk_b = sk if seqused_k is None else int(seqused_k[e])
        if causal_form:
            f = (col - sk_b + 1 if fa_test_form else col).expand(sq, sk).double()
        else:
            f = -(row + sk_b - sq_b - col).abs().double()
        bias[e] = sl[e][:, None, None] * f
    s = s + bias
    if top_left:
        masked = (col > row).expand(b, 1, sq, sk)
    else:
        masked = masked_set(b, sq, sk, causal, window, 0, seqused_q, seqused_k)
    s = s.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = masked.all(dim=-1, keepdim=True)
    p = torch.softmax(s, dim=-1).masked_fill(empty, 0.0)
    out = torch.einsum("bhts,bshd->bthd", p, vv)
    res = [out.detach().numpy(), lse.detach().numpy(), p.detach().numpy()]
    if grad is not None:
        res += [g.numpy() for g in torch.autograd.grad(out, (q, k, v), torch.tensor(grad))]
    return res
