"""`posenc table cpmant-bucket` against HF transformers' CPM-Ant code, written out here
in torch: `CpmAntSegmentPositionEmbedding` of models/cpmant/modeling_cpmant.py (forward,
_segment_relative_position_bucket, _position_bucket: bidirectional T5 buckets with the
log part in float32 as HF computes it, over arange(keylen) - arange(querylen)):

- the buckets (forward's relative_position_bucket before the gather), self-attention as
  CpmAntModel calls it (key and query segments the same) with segment ids of several
  segments in a batch, the config defaults (segment_types 32, 512 buckets, max distance
  2048) and smaller ones, every offset from -3000 to 3000 (--seq-len, one segment), and
  cross segments (query [b, q], key [b, k]): equal exactly;
- the bias: F.embedding(bucket, relative_attention_bias).permute(0, 3, 1, 2) with a
  float64 table: equal exactly (a gather; within the brief's rtol 1e-12 a fortiori);
  float32 output equal to the float64 reference rounded once;
- bad segments, tables and options: exit 2 or 3 with one line and no output.
"""
import math
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc_testlib import PosencTestCase


class CpmAntSegmentPositionEmbedding(nn.Module):
    """HF modeling_cpmant.CpmAntSegmentPositionEmbedding, the config's fields as
    arguments and the table given (float64)."""

    def __init__(self, num_heads, num_buckets, max_distance, num_segments, table=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.num_segments = num_segments
        if table is None:
            table = torch.zeros(num_segments * num_segments + num_buckets, num_heads, dtype=torch.float64)
        self.relative_attention_bias = nn.Parameter(table, requires_grad=False)

    def buckets(self, key_pos, query_pos, key_segment, query_segment):
        """forward up to the gather."""
        with torch.no_grad():
            batch = key_pos.size(0)
            keylen = key_pos.size(1)
            querylen = query_pos.size(1)
            key_pos = key_pos.view(batch, -1, keylen)
            query_pos = query_pos.view(batch, querylen, -1)
            key_segment = key_segment.view(batch, -1, keylen)
            query_segment = query_segment.view(batch, querylen, -1)
            relative_position_bucket = self._segment_relative_position_bucket(query_segment, key_segment)
            relative_position_bucket = relative_position_bucket + self.num_buckets
            absolute_position_bucket = self._position_bucket(
                torch.arange(keylen, dtype=torch.int32)[None, :]
                - torch.arange(querylen, dtype=torch.int32)[:, None],
                num_buckets=self.num_buckets,
                max_distance=self.max_distance,
            )
            relative_position_bucket = torch.where(
                key_segment == query_segment, absolute_position_bucket[None, :, :], relative_position_bucket
            )
        return relative_position_bucket

    def forward(self, key_pos, query_pos, key_segment, query_segment):
        relative_position_bucket = self.buckets(key_pos, query_pos, key_segment, query_segment)
        embeds = F.embedding(relative_position_bucket, self.relative_attention_bias)
        embeds = embeds.permute(0, 3, 1, 2).contiguous()
        return embeds

    def _segment_relative_position_bucket(self, query_segment, key_segment):
        return query_segment * self.num_segments + key_segment

    def _position_bucket(self, relative_position, num_buckets=32, max_distance=128):
        relative_buckets = 0
        num_buckets //= 2
        relative_buckets = (relative_position > 0).to(torch.int32) * num_buckets
        relative_position = torch.abs(relative_position)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_postion_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.int32)
        relative_postion_if_large = torch.min(
            relative_postion_if_large,
            torch.full_like(relative_postion_if_large, num_buckets - 1),
        )
        relative_buckets += torch.where(is_small, relative_position.to(torch.int32), relative_postion_if_large)
        return relative_buckets


def positions(segment):
    """CpmAntModel.forward's position ids: arange(seq_length) per row."""
    return torch.arange(segment.size(1), dtype=torch.int32).repeat(segment.size(0), 1)


class CpmAntBucket(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(28)

    def table(self, *args, dtype=None):
        out = self.path("t.npy")
        self.run_ok("table", "cpmant-bucket", *args, *(("--dtype", dtype) if dtype else ()), "-o", out)
        return np.load(out)

    def segments(self, b, s, n, runs=True):
        if not runs:
            return torch.randint(0, n, (b, s), generator=self.gen)
        # Runs of segments as CPM-Ant's prompts have them (sorted segment starts).
        cuts = torch.sort(torch.randint(0, n, (b, s), generator=self.gen), dim=1).values
        return cuts

    def test_self_buckets(self):
        for b, s, nseg, nb, md in [(3, 40, 32, 512, 2048), (2, 300, 32, 512, 2048),
                                   (4, 64, 5, 32, 128), (2, 90, 3, 8, 5), (1, 17, 1, 16, 40)]:
            seg = self.segments(b, s, nseg)
            m = CpmAntSegmentPositionEmbedding(4, nb, md, nseg)
            pos = positions(seg)
            ref = m.buckets(pos, pos, seg, seg).numpy()
            args = ("--segment-ids", self.npy("s.npy", seg.numpy().astype(np.int32)))
            if (nseg, nb, md) != (32, 512, 2048):
                args += ("--segments", nseg, "--buckets", nb, "--max-distance", md)
            got = self.table(*args)
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, ref, err_msg=f"{b} {s} {nseg} {nb} {md}")
        # Interleaved segments: most pairs across segments.
        seg = self.segments(2, 50, 6, runs=False)
        m = CpmAntSegmentPositionEmbedding(4, 32, 128, 6)
        ref = m.buckets(positions(seg), positions(seg), seg, seg).numpy()
        got = self.table("--segment-ids", self.npy("s.npy", seg.numpy()), "--segments", 6,
                         "--buckets", 32, "--max-distance", 128)
        np.testing.assert_array_equal(got, ref)
        self.assertGreater((got >= 32).sum(), 1000)

    def test_every_offset(self):
        for nb, md in [(512, 2048), (32, 128), (64, 256), (4, 3)]:
            seg = torch.zeros(1, 3001, dtype=torch.long)
            m = CpmAntSegmentPositionEmbedding(1, nb, md, 1)
            ref = m.buckets(positions(seg), positions(seg), seg, seg).numpy()
            got = self.table("--seq-len", 3001, "--segments", 1, "--buckets", nb, "--max-distance", md)
            np.testing.assert_array_equal(got, ref, err_msg=f"{nb} {md}")

    def test_cross_segments(self):
        q = self.segments(2, 30, 4, runs=False)
        k = self.segments(2, 45, 4, runs=False)
        m = CpmAntSegmentPositionEmbedding(3, 32, 128, 4)
        ref = m.buckets(positions(k), positions(q), k, q).numpy()
        got = self.table("--segment-ids", self.npy("q.npy", q.numpy()), self.npy("k.npy", k.numpy()),
                         "--segments", 4, "--buckets", 32, "--max-distance", 128)
        self.assertEqual(got.shape, (2, 30, 45))
        np.testing.assert_array_equal(got, ref)
        # Not the buckets of other query segments (the test can fail).
        swapped = m.buckets(positions(k), positions(q), k, q.flip(1)).numpy()
        self.assertTrue((got != swapped).any())

    def test_bias(self):
        seg = self.segments(3, 70, 32)
        w = torch.randn(32 * 32 + 512, 6, generator=self.gen, dtype=torch.float64)
        m = CpmAntSegmentPositionEmbedding(6, 512, 2048, 32, w)
        ref = m(positions(seg), positions(seg), seg, seg).numpy()
        args = ("--segment-ids", self.npy("s.npy", seg.numpy()), "--bias-table", self.npy("w.npy", w.numpy()))
        got = self.table(*args, dtype="f64")
        self.assertEqual(got.shape, (3, 6, 70, 70))
        np.testing.assert_array_equal(got, ref)
        self.assert_close(got, ref, rtol=1e-12, atol=0)
        got = self.table(*args)
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, ref.astype(np.float32))
        # A table of 3 segments, query and key segments apart.
        q, k = self.segments(2, 20, 3, runs=False), self.segments(2, 9, 3, runs=False)
        w = torch.randn(9 + 16, 2, generator=self.gen, dtype=torch.float64)
        m = CpmAntSegmentPositionEmbedding(2, 16, 40, 3, w)
        got = self.table("--segment-ids", self.npy("q.npy", q.numpy()), self.npy("k.npy", k.numpy()),
                         "--segments", 3, "--buckets", 16, "--max-distance", 40, "--bias-table",
                         self.npy("w3.npy", w.numpy()), dtype="f64")
        np.testing.assert_array_equal(got, m(positions(k), positions(q), k, q).numpy())

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "cpmant-bucket", "-o", out)
        seg = self.npy("s.npy", np.zeros((2, 5), np.int64))
        self.assert_fails(2, *base, match="--seq-len/--segment-ids: give one of them")
        self.assert_fails(2, *base, "--seq-len", 3, "--segment-ids", seg,
                          match="--seq-len/--segment-ids: give one of them")
        self.assert_fails(2, *base, "--seq-len", 0, match="--seq-len: must be from 1 to 65536")
        self.assert_fails(2, *base, "--seq-len", 4, "--segments", 0,
                          match="--segments: must be from 1 to 4096, got 0")
        self.assert_fails(2, *base, "--seq-len", 4, "--buckets", 2, match="--buckets: must be from 4")
        self.assert_fails(2, *base, "--seq-len", 4, "--buckets", 32, "--max-distance", 8,
                          match="--buckets/--max-distance")
        self.assert_fails(2, *base, "--seq-len", 4, "--max-distance", 0,
                          match="--max-distance: must be from 1")
        bad = np.zeros((2, 5), np.int64)
        bad[1, 3] = 32
        self.assert_fails(3, *base, "--segment-ids", self.npy("b.npy", bad),
                          match=r"--segment-ids: segment 32 at \(b 1, s 3\) is outside 0 \.\. 31")
        bad[1, 3] = -1
        self.assert_fails(3, *base, "--segment-ids", seg, self.npy("b.npy", bad),
                          match=r"--segment-ids \(key, the second\): segment -1 at \(b 1, s 3\)")
        self.assert_fails(3, *base, "--segment-ids", seg, self.npy("k3.npy", np.zeros((3, 5), np.int64)),
                          match=r"--segment-ids \(key, the second\): 3 rows, but --segment-ids has 2")
        self.assert_fails(3, *base, "--segment-ids", self.npy("s1.npy", np.zeros(5, np.int64)),
                          match=r"--segment-ids: expected segments \[b, s\], got shape \(5\)")
        self.assert_fails(3, *base, "--segment-ids", self.npy("sf.npy", np.zeros((1, 5))),
                          match="--segment-ids: .*expected an integer dtype")
        self.assert_fails(3, *base, "--seq-len", 4, "--bias-table", self.npy("w.npy", np.zeros((512, 4))),
                          match=r"--bias-table: expected relative_attention_bias \(1536, heads\)")
        w = np.zeros((1536, 4))
        w[700, 2] = np.nan
        self.assert_fails(3, *base, "--seq-len", 4, "--bias-table", self.npy("w.npy", w),
                          match=r"--bias-table: entry \(700, 2\) is not finite")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
