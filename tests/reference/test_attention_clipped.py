"""posenc attention --clipped-bias [--clipped-symmetric]: Phi-4-multimodal audio's
clipped-distance per-head bias against HF's own code, re-implemented here in torch
float64 with the structure of transformers' models/phi4_multimodal/
modeling_phi4_multimodal.py: Phi4MultimodalAudioRelativeAttentionBias.forward
(relative_position = memory - context, masked_fill to [-max_distance, max_distance - 1],
abs() when bias_symmetric else + num_buckets // 2, bias_values embedding, permute) added
as the attention mask of eager attention (q @ k^T * scaling + mask, softmax, @ v).

Tolerances: float64 results within rtol 1e-12 and atol 1e-12 * max |value| of the
reference. Bad inputs: one error line, exit 2 (options) or 3 (data), nothing written.
"""
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F

from posenc_testlib import PosencTestCase


class RelativeAttentionBias:
    """Phi4MultimodalAudioRelativeAttentionBias with a given bias_values table."""

    def __init__(self, bias_values, max_distance, symmetric):
        self.max_distance = max_distance
        self.symmetric = symmetric
        self.num_buckets = self.max_distance
        if not symmetric:
            self.num_buckets *= 2
        self.bias_values = bias_values  # nn.Embedding(num_buckets, heads).weight

    def forward(self, x):
        # instantiate bias compatible with shape of x
        max_pos = x.size(1)
        context_position = torch.arange(max_pos, dtype=torch.long)[:, None]
        memory_position = torch.arange(max_pos, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        # clipping to a maximum distance using ops that play well with ONNX export
        relative_position = relative_position.masked_fill(relative_position < -self.max_distance, -self.max_distance)
        relative_position = relative_position.masked_fill(
            relative_position > self.max_distance - 1, self.max_distance - 1
        )

        # mapping from relative position to index in the bias parameter
        bias_idx = relative_position
        bias_idx = bias_idx.abs() if self.symmetric else bias_idx + self.num_buckets // 2

        att_bias = F.embedding(bias_idx, self.bias_values)
        att_bias = att_bias.permute(2, 0, 1).unsqueeze(0)

        return att_bias


def eager(q, k, v, mask):
    # eager_attention_forward without dropout: q @ k^T * scaling + mask, softmax, @ v.
    logits = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5) + mask
    probs = torch.softmax(logits, dim=-1)
    return logits.numpy(), probs.numpy(), torch.matmul(probs, v).numpy()


class ClippedBias(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(281)

    def check(self, b, heads, s, d, max_distance, symmetric):
        r = self.rng
        q, k, v = (r.standard_normal((b, heads, s, d)) for _ in range(3))
        rows = max_distance if symmetric else 2 * max_distance
        table = r.standard_normal((rows, heads))
        mask = RelativeAttentionBias(torch.from_numpy(table), max_distance, symmetric).forward(
            torch.zeros(b, s, 1))
        ref = eager(*(torch.from_numpy(a) for a in (q, k, v)), mask)
        p = {n: self.npy(n + ".npy", a) for n, a in (("q", q), ("k", k), ("v", v),
                                                     ("t", table))}
        out = self.path("o_{}.npy")
        extra = ["--clipped-symmetric"] if symmetric else []
        self.run_ok("attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "--clipped-bias",
                    p["t"], *extra, "--emit", "logits,probs,output", "-o", out)
        for name, want in zip(("logits", "probs", "output"), ref):
            self.assert_close(np.load(out.format(name)), want, rtol=1e-12,
                              atol=1e-12 * float(np.abs(want).max()),
                              msg=f"{name} s {s} M {max_distance} symmetric {symmetric}")

    def test_asymmetric(self):
        # Phi-4-multimodal's audio config: bias_max_distance 1000, bias_symmetric False;
        # here distances beyond M on both sides.
        self.check(2, 4, 30, 8, 6, False)
        self.check(1, 2, 40, 4, 1000, False)

    def test_symmetric(self):
        self.check(1, 3, 12, 8, 12, True)
        self.check(2, 2, 5, 4, 9, True)

    def test_streamed_bits(self):
        # 1,600 keys: two key blocks of 1,024, each its own chunk at 800K.
        r = self.rng
        q = self.npy("sq.npy", r.standard_normal((1, 2, 64, 8)))
        k = self.npy("sk.npy", r.standard_normal((1, 2, 1600, 8)))
        v = self.npy("sv.npy", r.standard_normal((1, 2, 1600, 5)))
        t = self.npy("st.npy", r.standard_normal((20, 2)))
        self.assert_streamed_bits("-q", q, "-k", k, "-v", v, "--clipped-bias", t)

    def test_bad_inputs(self):
        r = self.rng
        q, k, v = (self.npy(n + ".npy", r.standard_normal((1, 2, 10, 4))) for n in "qkv")
        self.npy("t3.npy", r.standard_normal((8, 3)))
        self.npy("odd.npy", r.standard_normal((7, 2)))
        self.npy("sym.npy", r.standard_normal((6, 2)))
        self.npy("t5.npy", r.standard_normal((32, 2)))
        before = sorted(os.listdir(self.tmp))
        base = ["attention", "-q", q, "-k", k, "-v", v, "-o", self.path("out.npy"), "--emit",
                "output"]
        cases = [
            (3, ["--clipped-bias", self.path("t3.npy")],
             r"--clipped-bias: expected shape \(2M, 2\)"),
            (3, ["--clipped-bias", self.path("odd.npy")], r"--clipped-bias: expected shape"),
            (3, ["--clipped-bias", self.path("sym.npy"), "--clipped-symmetric"],
             r"symmetric table of 6 rows has no row for distance -6"),
            (2, ["--clipped-symmetric"], r"--clipped-symmetric: needs --clipped-bias"),
            (2, ["--clipped-bias", self.path("sym.npy"), "--t5-bias", self.path("t5.npy")],
             r"one relative bias table at a time"),
            (2, ["--clipped-bias", self.path("sym.npy"), "--arith", "hf"], r"--arith hf"),
        ]
        self.assert_each_fails(base, cases, before)


if __name__ == "__main__":
    unittest.main()
