"""posenc attention --t5-bias ... --wavlm-gate X W B C: WavLM's gated relative position
bias against HF's own code, re-implemented here in torch float64 with the structure of
transformers' models/wavlm/modeling_wavlm.py: WavLMAttention.compute_bias and
_relative_positions_bucket (the bucket bias from rel_attn_embed), the gate of
WavLMAttention.forward (gru_rel_pos_linear over each head's slice of hidden_states,
.view(..., 2, 4).sum(-1), sigmoid, gate_a * (gate_b * gru_rel_pos_const - 1.0) + 2.0,
times the bias) and torch_multi_head_self_attention (F.multi_head_attention_forward: q,
k, v = in_proj(hidden_states), scores = bias + (q * scaling) @ k^T, softmax, @ v). posenc
is given the projected q, k, v, the bucket table and the gate's tensors.

Tolerances: float64 results within rtol 1e-12 and atol 1e-12 * max |value| of the
reference. Bad inputs: one error line, exit 2 (options) or 3 (data), nothing written.
"""
import math
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F

from posenc_testlib import PosencTestCase


class WavLMAttention:
    """The parts of HF's WavLMAttention that make the gated bias (float64 weights)."""

    def __init__(self, rng, embed_dim, num_heads, num_buckets, max_distance):
        t = lambda *s: torch.from_numpy(rng.standard_normal(s))
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.rel_attn_embed = t(num_buckets, num_heads)  # nn.Embedding weight
        self.gru_rel_pos_linear_w = t(8, self.head_dim)
        self.gru_rel_pos_linear_b = t(8)
        self.gru_rel_pos_const = t(1, num_heads, 1, 1)
        self.in_proj_weight = t(3 * embed_dim, embed_dim) / math.sqrt(embed_dim)
        self.in_proj_bias = t(3 * embed_dim)

    def gru_rel_pos_linear(self, x):
        return F.linear(x, self.gru_rel_pos_linear_w, self.gru_rel_pos_linear_b)

    # WavLMAttention.compute_bias.
    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_positions_bucket(relative_position)
        values = F.embedding(relative_position_bucket, self.rel_attn_embed)
        values = values.permute([2, 0, 1])
        return values

    # WavLMAttention._relative_positions_bucket.
    def _relative_positions_bucket(self, relative_positions):
        num_buckets = self.num_buckets // 2

        relative_buckets = (relative_positions > 0).to(torch.long) * num_buckets
        relative_positions = torch.abs(relative_positions)

        max_exact = num_buckets // 2
        is_small = relative_positions < max_exact

        relative_positions_if_large = torch.log(relative_positions.float() / max_exact)
        relative_positions_if_large = relative_positions_if_large / math.log(self.max_distance / max_exact)
        relative_positions_if_large = relative_positions_if_large * (num_buckets - max_exact)
        relative_position_if_large = (max_exact + relative_positions_if_large).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )

        relative_buckets += torch.where(is_small, relative_positions, relative_position_if_large)
        return relative_buckets

    # WavLMAttention.forward (the gate) and torch_multi_head_self_attention.
    def forward(self, hidden_states):
        bsz, tgt_len, _ = hidden_states.size()
        position_bias = self.compute_bias(tgt_len, tgt_len)
        position_bias = (
            position_bias.unsqueeze(0).repeat(bsz, 1, 1, 1).view(bsz * self.num_heads, tgt_len, tgt_len)
        )
        # 1) get reshape hidden_states
        gated_hidden_states = hidden_states.view(hidden_states.shape[:-1] + (self.num_heads, -1))
        gated_hidden_states = gated_hidden_states.permute(0, 2, 1, 3)
        # 2) project hidden states
        relative_position_proj = self.gru_rel_pos_linear(gated_hidden_states)
        relative_position_proj = relative_position_proj.view(gated_hidden_states.shape[:-1] + (2, 4)).sum(-1)
        # 3) compute gate for position bias from projected hidden states
        gate_a, gate_b = torch.sigmoid(relative_position_proj).chunk(2, dim=-1)
        gate_output = gate_a * (gate_b * self.gru_rel_pos_const - 1.0) + 2.0
        # 4) apply gate to position bias to compute gated position_bias
        gated_position_bias = gate_output.view(bsz * self.num_heads, -1, 1) * position_bias
        gated_position_bias = gated_position_bias.view((-1, tgt_len, tgt_len))
        # F.multi_head_attention_forward (no dropout, no bias_k/v): in_proj, scaling,
        # baddbmm(attn_mask, q, k^T), softmax, bmm with v.
        q, k, v = F.linear(hidden_states, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        heads = lambda x: x.view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        qs = q.reshape(bsz * self.num_heads, tgt_len, -1) * (float(self.head_dim) ** -0.5)
        logits = torch.baddbmm(gated_position_bias, qs,
                               k.reshape(bsz * self.num_heads, tgt_len, -1).transpose(-2, -1))
        probs = torch.softmax(logits, dim=-1)
        out = torch.bmm(probs, v.reshape(bsz * self.num_heads, tgt_len, -1))
        shape = lambda t: t.reshape(bsz, self.num_heads, *t.shape[1:]).numpy()
        return (q.numpy(), k.numpy(), v.numpy()), (shape(logits), shape(probs), shape(out))


class GatedBias(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(280)

    def layer(self, b, s, heads, head_dim, buckets, max_distance):
        m = WavLMAttention(self.rng, heads * head_dim, heads, buckets, max_distance)
        x = torch.from_numpy(self.rng.standard_normal((b, s, heads * head_dim)))
        (q, k, v), ref = m.forward(x)
        p = {n: self.npy(n + ".npy", a) for n, a in (
            ("q", q), ("k", k), ("v", v), ("x", x.numpy()), ("t5", m.rel_attn_embed.numpy()),
            ("w", m.gru_rel_pos_linear_w.numpy()), ("b", m.gru_rel_pos_linear_b.numpy()),
            ("c", m.gru_rel_pos_const.numpy()))}
        return p, ref

    def args(self, p, buckets, max_distance):
        return ["attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "--t5-bias", p["t5"],
                "--t5-buckets", str(buckets), "--t5-max-distance", str(max_distance),
                "--wavlm-gate", p["x"], p["w"], p["b"], p["c"]]

    def check(self, b, s, heads, head_dim, buckets, max_distance):
        p, ref = self.layer(b, s, heads, head_dim, buckets, max_distance)
        out = self.path("o_{}.npy")
        self.run_ok(*self.args(p, buckets, max_distance), "--emit", "logits,probs,output",
                    "-o", out)
        for name, want in zip(("logits", "probs", "output"), ref):
            got = np.load(out.format(name))
            self.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(np.abs(want).max()),
                              msg=f"{name} s {s} buckets {buckets}")

    def test_wavlm_base_buckets(self):
        # WavLM's config: num_buckets 320, max_bucket_distance 800; distances past both
        # the exact range (80) and the max distance.
        self.check(2, 40, 4, 8, 320, 800)
        self.check(1, 300, 2, 6, 320, 800)

    def test_small_buckets(self):
        self.check(1, 50, 3, 4, 16, 20)

    def test_streamed_bits(self):
        # 1,600 keys: two key blocks of 1,024, each its own chunk at 800K.
        r = self.rng
        arrays = {"q": (1, 2, 64, 8), "k": (1, 2, 1600, 8), "v": (1, 2, 1600, 5),
                  "t5": (32, 2), "x": (1, 64, 6), "w": (8, 3), "b": (8,), "c": (2,)}
        p = {n: self.npy(n + ".npy", r.standard_normal(s)) for n, s in arrays.items()}
        self.assert_streamed_bits("-q", p["q"], "-k", p["k"], "-v", p["v"], "--t5-bias", p["t5"],
                                  "--wavlm-gate", p["x"], p["w"], p["b"], p["c"])

    def test_bad_inputs(self):
        p, _ = self.layer(1, 10, 2, 4, 16, 20)
        r = self.rng
        self.npy("x9.npy", r.standard_normal((1, 9, 8)))
        self.npy("x7.npy", r.standard_normal((1, 10, 7)))
        self.npy("w5.npy", r.standard_normal((8, 5)))
        self.npy("b7.npy", r.standard_normal(7))
        self.npy("c3.npy", r.standard_normal(3))
        before = sorted(os.listdir(self.tmp))
        base = self.args(p, 16, 20) + ["-o", self.path("out.npy"), "--emit", "output"]
        at = base.index("--wavlm-gate") + 1

        def swap(i, name):
            a = list(base)
            a[at + i] = self.path(name)
            return a
        cases = [
            (3, swap(0, "x9.npy"), r"gate_input: expected the hidden states"),
            (3, swap(0, "x7.npy"), r"gate_input: .*multiple of the 2 heads"),
            (3, swap(1, "w5.npy"), r"gate_weight: expected shape \(8, 4\)"),
            (3, swap(2, "b7.npy"), r"gate_bias: expected shape \(8,\)"),
            (3, swap(3, "c3.npy"), r"gate_const: expected 2 values"),
            (2, base + ["--arith", "hf"], r"--arith hf"),
            (2, [a for i, a in enumerate(base) if i not in (
                base.index("--t5-bias"), base.index("--t5-bias") + 1)], r"give --t5-bias"),
        ]
        self.assert_each_fails([], cases, before)


if __name__ == "__main__":
    unittest.main()
