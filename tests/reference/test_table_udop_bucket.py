"""`posenc table udop-bucket` against HF transformers' UDOP relative biases, written out
here in torch:

- the buckets: `RelativePositionBias1D`, `RelativePositionBiasHorizontal` and
  `RelativePositionBiasVertical` (`get_relative_position`: memory - context positions
  times scaling_factor, .to(torch.long); T5's bidirectional buckets, UDOP's
  `get_relative_position_bucket`, its log part in float32), over token positions and the boxes' centres
  bbox[:, :, [0, 2]].mean(-1) and bbox[:, :, [1, 3]].mean(-1), with float32 boxes (HF's
  arithmetic in float32, as posenc does for a float32 file) and float64 boxes, default
  and other scaling factors, buckets and distances: equal exactly;
- the bias: relative_attention_bias(bucket).permute(0, 3, 1, 2) of each module and
  `RelativePositionBiasAggregated` (x = bias(...) + x over 1d, horizontal, vertical):
  equal exactly in float64;
- bad boxes, weights and options: exit 3 or 2 with one line and no output.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_bias import t5_bucket  # T5's _relative_position_bucket, which UDOP's file repeats


class UdopBias:
    """One of HF's RelativePositionBias modules: prepare_input, get_relative_position,
    get_bucket and forward (prefix_bucket and augmentation off, as UDOP's defaults)."""

    def __init__(self, kind, weight=None, num_buckets=32, scaling_factor=None, max_distance=None):
        self.kind = kind
        self.num_buckets = num_buckets
        self.scaling_factor = scaling_factor or (1 if kind == "1d" else 100)
        self.max_distance = max_distance or (128 if kind == "1d" else 100)
        self.weight = weight

    def prepare_input(self, seq_len, bbox):
        if self.kind == "1d":
            return self.get_relative_position(torch.arange(seq_len, dtype=torch.long)[None, :])
        cols = [0, 2] if self.kind == "horizontal" else [1, 3]
        return self.get_relative_position(bbox[:, :, cols].mean(dim=-1))

    def get_relative_position(self, positions):
        context_position = positions[:, :, None]
        memory_position = positions[:, None, :]
        relative_position = memory_position - context_position
        relative_position *= self.scaling_factor
        return relative_position.to(torch.long)

    def get_bucket(self, seq_len, bbox):
        return t5_bucket(self.prepare_input(seq_len, bbox), True, self.num_buckets,
                         self.max_distance)

    def forward(self, seq_len, bbox):
        values = torch.nn.functional.embedding(self.get_bucket(seq_len, bbox), self.weight)
        return values.permute([0, 3, 1, 2])


def boxes(b, s, seed, dtype):
    """Normalised boxes as UDOP's processor gives them: corners in [0, 1], x0 <= x1."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 1, (b, s, 2))
    hi = np.minimum(lo + rng.uniform(0, 0.3, (b, s, 2)), 1.0)
    out = np.concatenate([lo, hi], axis=-1).astype(dtype)
    out[0, :3] = out[0, 3]  # equal centres: offset 0
    return out


class UdopBucket(PosencTestCase):
    def table(self, *args, name="t.npy", dtype="i64"):
        out = self.path(name)
        self.run_ok("table", "udop-bucket", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_buckets(self):
        for s, kw, args in [(40, {}, []), (300, {"num_buckets": 64, "max_distance": 256},
                                          ["--buckets", 64, "--max-distance", 256])]:
            ref = UdopBias("1d", **kw).get_bucket(s, None).numpy()
            got = self.table("--seq-len", s, *args)
            self.assertEqual(got.shape, (1, s, s))
            np.testing.assert_array_equal(got, ref)
        for dt in (np.float32, np.float64):
            box = boxes(3, 50, 1, dt)
            p = self.npy("box.npy", box)
            for kind in ("horizontal", "vertical"):
                for kw, args in [({}, []), ({"scaling_factor": 1000, "max_distance": 500},
                                            ["--scaling-factor", 1000, "--max-distance", 500])]:
                    ref = UdopBias(kind, **kw).get_bucket(0, torch.from_numpy(box)).numpy()
                    got = self.table("--axis", kind, "--bbox", p, *args)
                    np.testing.assert_array_equal(got, ref, err_msg=f"{kind} {dt} {kw}")

    def test_float32_truncation_follows_hf(self):
        # Centres whose scaled differences land next to an integer: float32 and float64
        # arithmetic truncate some of them differently, and a float32 file follows HF's
        # float32.
        s = 64
        x = np.arange(s, dtype=np.float64) * 0.07 + 0.01
        box = np.zeros((1, s, 4))
        box[0, :, 0] = box[0, :, 2] = x
        box32 = box.astype(np.float32)
        ref32 = UdopBias("horizontal").get_bucket(0, torch.from_numpy(box32)).numpy()
        ref64 = UdopBias("horizontal").get_bucket(0, torch.from_numpy(box)).numpy()
        self.assertTrue((ref32 != ref64).any(), "the case must tell the arithmetics apart")
        np.testing.assert_array_equal(
            self.table("--axis", "horizontal", "--bbox", self.npy("b32.npy", box32)), ref32)
        np.testing.assert_array_equal(
            self.table("--axis", "horizontal", "--bbox", self.npy("b64.npy", box)), ref64)

    def test_bias_and_aggregate(self):
        torch.manual_seed(0)
        box = boxes(2, 30, 5, np.float32)
        t = torch.from_numpy(box)
        w = [torch.randn(32, 4, dtype=torch.float64) for _ in range(3)]
        paths = [self.npy(f"w{k}.npy", w[k].numpy()) for k in range(3)]
        bb = self.npy("box.npy", box)
        for k, kind in enumerate(("1d", "horizontal", "vertical")):
            ref = UdopBias(kind, w[k]).forward(30, t).numpy()
            args = ["--seq-len", 30] if kind == "1d" else ["--axis", kind, "--bbox", bb]
            got = self.table(*args, "--bias-table", paths[k], dtype="f64")
            np.testing.assert_array_equal(got, ref, err_msg=kind)
        x = 0.0
        for k, kind in enumerate(("1d", "horizontal", "vertical")):
            x = UdopBias(kind, w[k]).forward(30, t) + x
        got = self.table("--axis", "all", "--bbox", bb, "--bias-table", *paths, dtype="f64")
        self.assertEqual(got.shape, (2, 4, 30, 30))
        np.testing.assert_array_equal(got, x.numpy())

    def test_errors(self):
        out = self.path("x.npy")
        box = self.npy("box.npy", boxes(1, 4, 0, np.float32))
        bad = self.npy("bad.npy", np.zeros((1, 4, 3)))
        w = self.npy("w.npy", np.zeros((32, 2)))
        wbad = self.npy("wbad.npy", np.zeros((16, 2)))
        nan = self.npy("nan.npy", np.full((1, 4, 4), np.nan))
        cases = [
            (2, ["--axis", "horizontal"], "--bbox: needed"),
            (2, ["--seq-len", 4, "--bbox", box], "--seq-len: not with bbox"),
            (2, ["--axis", "all", "--bbox", box, "--bias-table", w], "three weights"),
            (2, ["--axis", "all", "--bbox", box, "--scaling-factor", 10, "--bias-table", w, w, w],
             "each module's HF default"),
            (2, ["--seq-len", 4, "--buckets", 2], "--buckets: must be from 4"),
            (2, ["--axis", "vertical", "--bbox", box, "--scaling-factor", -1], "--scaling-factor: must be above 0"),
            (2, ["--axis", "diagonal", "--seq-len", 4], "--axis"),
            (3, ["--axis", "vertical", "--bbox", bad], "--bbox: expected boxes"),
            (3, ["--axis", "vertical", "--bbox", nan], "must be finite"),
            (3, ["--seq-len", 4, "--bias-table", wbad], "--bias-table: expected a weight"),
        ]
        for code, args, match in cases:
            self.assert_fails(code, "table", "udop-bucket", *args, "-o", out, match=match)
            self.assertFalse(os.path.exists(out), args)


if __name__ == "__main__":
    unittest.main()
