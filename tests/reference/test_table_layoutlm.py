"""`posenc table layoutlm-bucket` against HF transformers' LayoutLMv2 code, written out
here in torch:

- the buckets: `relative_position_bucket` of modeling_layoutlmv2 (LayoutLMv3's is the
  same function; bidirectional, its log part in float32 as HF computes it) over
  rel_pos_mat = c.unsqueeze(-2) - c.unsqueeze(-1), for 1-D positions (arange and
  position_ids with gaps and a batch; rel_pos_bins 32, max_rel_pos 128 and others) and
  the boxes' x = bbox[:, :, 0] and y = bbox[:, :, 3] (rel_2d_pos_bins 64,
  max_rel_2d_pos 256), every offset from -3000 to 3000 among them: equal exactly;
- the bias: `LayoutLMv2Encoder._calculate_1d_position_embeddings` (rel_pos_bias.weight.t()
  [rel_pos].permute(0, 3, 1, 2)) and `_calculate_2d_position_embeddings` (x bias + y
  bias) with float64 weights: equal exactly (a gather and, for xy, one addition, as HF);
  float32 output equal to the float64 reference rounded once;
- bad boxes, positions, weights and options: exit 3 or 2 with one line and no output.
"""
import math
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """HF modeling_layoutlmv2.relative_position_bucket."""
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += (relative_position > 0).long() * num_buckets
        n = torch.abs(relative_position)
    else:
        n = torch.max(-relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    ret += torch.where(is_small, n, val_if_large)
    return ret


def buckets_1d(position_ids, bins=32, max_rel_pos=128):
    """The rel_pos of LayoutLMv2Encoder._calculate_1d_position_embeddings."""
    rel_pos_mat = position_ids.unsqueeze(-2) - position_ids.unsqueeze(-1)
    return relative_position_bucket(rel_pos_mat, num_buckets=bins, max_distance=max_rel_pos)


def bias_1d(position_ids, weight, bins=32, max_rel_pos=128):
    """LayoutLMv2Encoder._calculate_1d_position_embeddings, weight = rel_pos_bias.weight."""
    rel_pos = buckets_1d(position_ids, bins, max_rel_pos)
    return weight.t()[rel_pos].permute(0, 3, 1, 2).contiguous()


def buckets_2d(bbox, bins=64, max_rel_2d_pos=256):
    """The rel_pos_x and rel_pos_y of _calculate_2d_position_embeddings."""
    position_coord_x = bbox[:, :, 0]
    position_coord_y = bbox[:, :, 3]
    rel_pos_x_2d_mat = position_coord_x.unsqueeze(-2) - position_coord_x.unsqueeze(-1)
    rel_pos_y_2d_mat = position_coord_y.unsqueeze(-2) - position_coord_y.unsqueeze(-1)
    rel_pos_x = relative_position_bucket(rel_pos_x_2d_mat, num_buckets=bins, max_distance=max_rel_2d_pos)
    rel_pos_y = relative_position_bucket(rel_pos_y_2d_mat, num_buckets=bins, max_distance=max_rel_2d_pos)
    return rel_pos_x, rel_pos_y


def bias_2d(bbox, wx, wy, bins=64, max_rel_2d_pos=256):
    """LayoutLMv2Encoder._calculate_2d_position_embeddings (rel_pos_x_bias.weight = wx,
    rel_pos_y_bias.weight = wy)."""
    rel_pos_x, rel_pos_y = buckets_2d(bbox, bins, max_rel_2d_pos)
    rel_pos_x = wx.t()[rel_pos_x].permute(0, 3, 1, 2).contiguous()
    rel_pos_y = wy.t()[rel_pos_y].permute(0, 3, 1, 2).contiguous()
    return rel_pos_x + rel_pos_y


def random_boxes(gen, b, s):
    x0 = torch.randint(0, 1000, (b, s), generator=gen)
    y0 = torch.randint(0, 1000, (b, s), generator=gen)
    w = torch.randint(0, 200, (b, s), generator=gen)
    h = torch.randint(0, 60, (b, s), generator=gen)
    return torch.stack([x0, y0, torch.clamp(x0 + w, max=1000), torch.clamp(y0 + h, max=1000)], -1)


class LayoutlmBucket(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(3)

    def table(self, *args, dtype=None):
        out = self.path("t.npy")
        self.run_ok("table", "layoutlm-bucket", *args, *(("--dtype", dtype) if dtype else ()),
                    "-o", out)
        return np.load(out)

    def test_1d_arange(self):
        for s, bins, md in [(1, 32, 128), (7, 32, 128), (300, 32, 128), (200, 16, 40), (90, 8, 5)]:
            args = ("--seq-len", s) + (("--buckets", bins, "--max-distance", md)
                                       if (bins, md) != (32, 128) else ())
            got = self.table(*args)
            ref = buckets_1d(torch.arange(s)[None], bins, md).numpy()
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, ref, err_msg=f"{s} {bins} {md}")

    def test_every_offset(self):
        # Rows (0, v) for v from -3000 to 3000: every offset and its negative.
        v = torch.arange(-3000, 3001)
        pos = torch.stack([torch.zeros_like(v), v], 1)
        for bins, md in [(32, 128), (64, 256), (128, 1000), (4, 3)]:
            got = self.table("--position-ids", self.npy("p.npy", pos.numpy()), "--buckets", bins,
                             "--max-distance", md)
            ref = buckets_1d(pos, bins, md).numpy()
            np.testing.assert_array_equal(got, ref, err_msg=f"{bins} {md}")

    def test_1d_position_ids_and_bias(self):
        ids = torch.stack([torch.arange(40), torch.arange(40) * 7 - 50,
                           torch.randint(0, 512, (40,), generator=self.gen)])
        path = self.npy("p.npy", ids.numpy().astype(np.int32))
        np.testing.assert_array_equal(self.table("--position-ids", path), buckets_1d(ids).numpy())
        w = torch.randn(12, 32, generator=self.gen, dtype=torch.float64)
        ref = bias_1d(ids, w).numpy()
        got = self.table("--position-ids", path, "--bias-table", self.npy("w.npy", w.numpy()),
                         dtype="f64")
        self.assertEqual(got.shape, (3, 12, 40, 40))
        np.testing.assert_array_equal(got, ref)
        got = self.table("--position-ids", path, "--bias-table", self.npy("w.npy", w.numpy()))
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, ref.astype(np.float32))

    def test_2d_buckets(self):
        bbox = random_boxes(self.gen, 3, 50)
        path = self.npy("b.npy", bbox.numpy())
        rx, ry = buckets_2d(bbox)
        np.testing.assert_array_equal(self.table("--bbox", path, "--axis", "x"), rx.numpy())
        np.testing.assert_array_equal(self.table("--bbox", path, "--axis", "y"), ry.numpy())
        rx, ry = buckets_2d(bbox, 32, 100)
        np.testing.assert_array_equal(
            self.table("--bbox", path, "--axis", "y", "--buckets", 32, "--max-distance", 100),
            ry.numpy())

    def test_2d_bias(self):
        bbox = random_boxes(self.gen, 2, 33)
        path = self.npy("b.npy", bbox.numpy())
        wx = torch.randn(4, 64, generator=self.gen, dtype=torch.float64)
        wy = torch.randn(4, 64, generator=self.gen, dtype=torch.float64)
        px, py = self.npy("wx.npy", wx.numpy()), self.npy("wy.npy", wy.numpy())
        got = self.table("--bbox", path, "--axis", "xy", "--bias-table", px, py, dtype="f64")
        np.testing.assert_array_equal(got, bias_2d(bbox, wx, wy).numpy())
        # One axis alone: the gather of its weight.
        rx, _ = buckets_2d(bbox)
        got = self.table("--bbox", path, "--axis", "x", "--bias-table", px, dtype="f64")
        np.testing.assert_array_equal(got, wx.t()[rx].permute(0, 3, 1, 2).numpy())
        # Not the y bias (the test can fail).
        self.assertGreater(np.abs(got - bias_2d(bbox, wx, wy).numpy()).max(), 0.1)

    def test_bias_as_attention_mask(self):
        # The 1-D bias as LayoutLMv2's attention adds it: softmax(q k^T / sqrt(d) + rel_pos).
        ids = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 3, 9, 30, 31, 200]])
        w = torch.randn(3, 32, generator=self.gen, dtype=torch.float64)
        q, k = (torch.randn(2, 3, 6, 8, generator=self.gen, dtype=torch.float64) for _ in range(2))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + bias_1d(ids, w), -1)
        bias = self.path("bias.npy")
        self.run_ok("table", "layoutlm-bucket", "--position-ids", self.npy("p.npy", ids.numpy()),
                    "--bias-table", self.npy("w.npy", w.numpy()), "--dtype", "f64", "-o", bias)
        out = self.path("p.npy")
        self.run_ok("attention", "-q", self.npy("q.npy", q.numpy()), "-k", self.npy("k.npy", k.numpy()),
                    "--mask", bias, "--emit", "probs", "--dtype", "f64", "-o", out)
        self.assert_close(np.load(out), probs.numpy(), rtol=1e-12, atol=1e-14)

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "layoutlm-bucket", "-o", out)
        box = self.npy("b.npy", np.zeros((1, 3, 4), np.int64))
        w = self.npy("w.npy", np.zeros((2, 64)))
        self.assert_fails(2, *base, match="--seq-len/--position-ids: give one of them")
        self.assert_fails(2, *base, "--seq-len", 0, match="--seq-len: must be from 1 to 65536")
        self.assert_fails(2, *base, "--seq-len", 4, "--buckets", 2,
                          match="--buckets: must be from 4")
        self.assert_fails(2, *base, "--seq-len", 4, "--buckets", 32, "--max-distance", 8,
                          match="--buckets/--max-distance: need at least 4 buckets and "
                          "--max-distance above 8")
        self.assert_fails(2, *base, "--seq-len", 4, "--max-distance", -1,
                          match="--max-distance: must be from 1")
        self.assert_fails(2, *base, "--bbox", box, match="--bbox: needs --axis x, y or xy")
        self.assert_fails(2, *base, "--axis", "x", match="--bbox: needed for axis x")
        self.assert_fails(2, *base, "--axis", "x", "--bbox", box, "--seq-len", 3,
                          match="--seq-len: is for axis 1d")
        self.assert_fails(2, *base, "--axis", "xy", "--bbox", box,
                          match="--axis xy: needs --bias-table WX WY")
        self.assert_fails(2, *base, "--axis", "x", "--bbox", box, "--bias-table", w, w,
                          match="--bias-table: two weights are for --axis xy")
        self.assert_fails(2, *base, "--axis", "z", "--bbox", box)
        self.assert_fails(3, *base, "--axis", "x", "--bbox", self.npy("b3.npy", np.zeros((1, 3, 3), np.int64)),
                          match=r"--bbox: expected boxes \[b, s, 4\], got shape \(1, 3, 3\)")
        self.assert_fails(3, *base, "--axis", "x", "--bbox", self.npy("bf.npy", np.zeros((1, 3, 4))),
                          match="--bbox: .*expected an integer dtype")
        big = np.zeros((1, 3, 4), np.int64)
        big[0, 1, 3] = 2 ** 41
        self.assert_fails(3, *base, "--axis", "y", "--bbox", self.npy("big.npy", big),
                          match=r"--bbox: entry of row 0, token 1 is 2199023255552")
        self.assert_fails(3, *base, "--position-ids", self.npy("p.npy", np.zeros(3, np.int64)),
                          match=r"--position-ids: expected positions \[b, s\], got shape \(3\)")
        self.assert_fails(3, *base, "--axis", "x", "--bbox", box, "--bias-table",
                          self.npy("w32.npy", np.zeros((2, 32))),
                          match=r"--bias-table: expected a weight \(heads, 64\)")
        nan = np.zeros((2, 64))
        nan[1, 5] = np.nan
        self.assert_fails(3, *base, "--axis", "xy", "--bbox", box, "--bias-table", w,
                          self.npy("nan.npy", nan),
                          match=r"--bias-table \(y, the second\): entry \(1, 5\) is not finite")
        self.assert_fails(3, *base, "--axis", "xy", "--bbox", box, "--bias-table", w,
                          self.npy("w3.npy", np.zeros((3, 64))),
                          match=r"--bias-table \(y, the second\): 3 heads, but --bias-table has 2")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
