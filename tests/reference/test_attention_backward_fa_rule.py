"""`posenc attention --grad-output dO --precision f32` judged by FlashAttention's own
verdict for its backward (tests/test_flash_attn.py, test_flash_attn_output): with g_ref
the float64 gradients and g_pt those of PyTorch's eager attention in the low precision
(here torch float32 autograd), a kernel's gradient g passes when

    |g - g_ref|max <= 2 |g_pt - g_ref|max + atol,  atol = 2 |g_ref + 0.3 - 0.3 - g_ref|max

(atol in the kernel's dtype: float32 here), for dq, dk and dv. FA's test shapes: its
(seqlen_q, seqlen_k) pairs, head dims from 59 to 256, MHA, GQA and MQA, causal or not,
sliding windows; fewer batch entries and heads than FA's 4 x 9 to stay fast. The eager
attention (bhsd, -inf masking, softmax, matmul) is written here, not posenc's.
"""
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

# (b, hq, hk, sq, sk, d, causal, window): FA's seqlen pairs and head dims.
CASES = [
    (2, 3, 3, 113, 203, 59, False, None),
    (2, 3, 1, 128, 217, 64, True, None),
    (1, 4, 2, 108, 256, 128, True, None),
    (1, 2, 2, 512, 256, 96, False, (64, 32)),
    (1, 2, 1, 1023, 1024, 128, True, None),
    (1, 2, 2, 256, 512, 256, True, None),
    (1, 2, 2, 1024, 1023, 40, False, None),
]


def eager_grads(q, k, v, do, causal, window, dtype):
    """dq, dk, dv of an eager attention in `dtype` (torch autograd), bottom-right causal
    and windows as FlashAttention (query i at position i + sk - sq)."""
    Q, K, V = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v))
    hq, hk, sq, sk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    Kr, Vr = K.repeat_interleave(hq // hk, 1), V.repeat_interleave(hq // hk, 1)
    s = (Q @ Kr.transpose(-1, -2)) * (1.0 / np.sqrt(q.shape[-1]))
    pos = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        keep &= j <= pos
    if window is not None:
        keep &= (j >= pos - window[0]) & (j <= pos + window[1])
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    p = p.masked_fill(~keep.any(-1, keepdim=True), 0.0)  # rows with no key: 0, as FA's reference
    o = p @ Vr
    return [g.double().numpy() for g in
            torch.autograd.grad(o, (Q, K, V), torch.tensor(do, dtype=dtype))]


class AttentionBackwardFaRule(PosencTestCase):
    def test_f32_gradients_pass_flash_attention_rule(self):
        for n, (b, hq, hk, sq, sk, d, causal, window) in enumerate(CASES):
            with self.subTest(case=n, shape=(b, hq, hk, sq, sk, d), causal=causal,
                              window=window):
                r = np.random.default_rng(n)
                q = r.standard_normal((b, hq, sq, d)).astype(np.float32)
                k = r.standard_normal((b, hk, sk, d)).astype(np.float32)
                v = r.standard_normal((b, hk, sk, d)).astype(np.float32)
                do = r.standard_normal((b, hq, sq, d)).astype(np.float32)
                ref = eager_grads(q, k, v, do, causal, window, torch.float64)
                pt = eager_grads(q, k, v, do, causal, window, torch.float32)
                paths = [self.npy(f"{x}.npy", a) for x, a in
                         (("q", q), ("k", k), ("v", v), ("do", do))]
                out = self.path("g_{}.npy")
                args = ["attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                        "--grad-output", paths[3], "--precision", "f32", "--emit",
                        "dq,dk,dv", "-o", out]
                if causal:
                    args.append("--causal")
                if window is not None:
                    args += ["--window", f"{window[0]},{window[1]}"]
                self.run_ok(*args)
                for name, g_ref, g_pt in zip(("dq", "dk", "dv"), ref, pt):
                    g = np.load(out.format(name))
                    self.assertEqual(g.dtype, np.float32, name)
                    ref32 = g_ref.astype(np.float32)
                    atol = 2 * float(np.abs(ref32 + np.float32(0.3) - np.float32(0.3) - ref32).max())
                    err = np.abs(g.astype(np.float64) - g_ref).max()
                    bound = 2 * np.abs(g_pt - g_ref).max() + atol
                    self.assertLessEqual(err, bound, f"{name}: {err:.3g} > {bound:.3g}")


if __name__ == "__main__":
    unittest.main()
