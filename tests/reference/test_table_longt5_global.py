"""posenc table longt5-global: LongT5's transient-global index maps against HF's own
functions re-implemented in torch in tests/lib/longt5_reference.py
(_make_global_fixed_block_ids with its float32 i / G, _make_side_relative_position_ids):
block ids [b, s], global segment ids [b, s // G] and side relative positions
[b, s, s // G], exactly (integers). Bad inputs: one error line, exit 2 (options) or 3
(data), nothing written.
"""
import os
import unittest

import numpy as np
import torch

from longt5_reference import global_fixed_block_ids, side_relative_position_ids
from posenc_testlib import PosencTestCase

MAPS = ("block-ids", "segment-ids", "side-positions")


class LongT5GlobalTable(PosencTestCase):
    def reference(self, mask, g):
        m = torch.from_numpy(mask)
        ids, seg = global_fixed_block_ids(m, g)
        side = side_relative_position_ids(m, g)
        return dict(zip(MAPS, (ids.numpy(), seg.numpy(), side.numpy())))

    def check(self, mask, g, source):
        want = self.reference(mask, g)
        for emit in MAPS:
            out = self.path(f"{emit}.npy")
            self.run_ok("table", "longt5-global", *source, "--global-block-size", str(g),
                        "--emit", emit, "-o", out)
            got = np.load(out)
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, want[emit], err_msg=f"{emit} G {g}")

    def test_masks(self):
        r = np.random.default_rng(6)
        for b, s, g in [(3, 37, 5), (2, 64, 16), (4, 26, 4), (2, 9, 3)]:
            mask = np.ones((b, s), np.int64)
            for row in range(1, b):  # right padding, then holes
                mask[row, int(r.integers(1, s)):] = 0
            mask[-1, r.integers(0, s, 3)] = 0
            with self.subTest(s=s, g=g):
                self.check(mask, g, ["--attention-mask", self.npy("mask.npy", mask)])

    def test_seq_len_and_float32_block_ids(self):
        # G 25 and 47: HF's float32 cumsum moves some tokens into the block before.
        for s, g in [(450, 25), (1000, 47), (100, 16), (7, 16)]:
            with self.subTest(s=s, g=g):
                want = self.reference(np.ones((1, s), np.int64), g)
                out = self.path("ids.npy")
                self.run_ok("table", "longt5-global", "--seq-len", str(s), "--global-block-size",
                            str(g), "-o", out)
                np.testing.assert_array_equal(np.load(out), want["block-ids"])
        ids = np.load(self.path("ids.npy"))
        self.assertTrue((ids == -1).all())  # 7 tokens, G 16: no full block

    def test_bad_inputs(self):
        self.npy("m3.npy", np.ones((1, 2, 3), np.int64))
        self.npy("m2.npy", np.array([[1, 2, 1]], np.int64))
        self.npy("mf.npy", np.ones((1, 4)))
        self.npy("m.npy", np.ones((1, 4), np.int64))
        before = sorted(os.listdir(self.tmp))
        out = ["-o", self.path("out.npy")]
        t = ["table", "longt5-global"]
        cases = [
            (2, t + ["--seq-len", "8", "--global-block-size", "0"] + out,
             r"--global-block-size 0: must be from 1"),
            (2, t + ["--seq-len", "0"] + out, r"--seq-len 0: must be from 1"),
            (2, t + out, r"give one"),
            (2, t + ["--seq-len", "4", "--attention-mask", self.path("m.npy")] + out, r"give one"),
            (2, t + ["--seq-len", "4", "--emit", "nope"] + out, r"--emit"),
            (2, t + ["--seq-len", "4", "--global-block-size", "8", "--emit", "segment-ids"] + out,
             r"no global block"),
            (3, t + ["--attention-mask", self.path("m3.npy")] + out, r"expected \[b, s\]"),
            (3, t + ["--attention-mask", self.path("m2.npy")] + out, r"value 2 at \(b 0, s 1\)"),
            (3, t + ["--attention-mask", self.path("mf.npy")] + out, r"integer dtype"),
        ]
        self.assert_each_fails([], cases, before)


if __name__ == "__main__":
    unittest.main()
