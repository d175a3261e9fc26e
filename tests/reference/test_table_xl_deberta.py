"""`posenc table xl-relative` and `posenc table deberta-bucket` against independent torch
references written from HF transformers (tests/lib/reference_relative.py).

Checks:
- xl-relative for Transformer-XL (pos_seq klen-1 .. 0, clamp_len), XLNet bidirectional
  (klen .. -qlen+1) and unidirectional (klen .. 0), with and without clamp_len: float64
  output to 1e-12 against the references run in float64; float32 output against HF's
  own float32 computation within |angle| * 2^-22 (HF forms the angle in float32);
- deberta-bucket equals HF build_relative_position (make_log_bucket_position in
  torch's float32 arithmetic) exactly, for bucket counts smaller and larger than the
  sequence, odd counts, no buckets, and every distance up to 20000 for several
  (position_buckets, max_relative_positions);
- bad parameters: exit 2; a dtype that cannot hold the negative positions: exit 2.
"""
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_relative import build_relative_position, transfo_xl_pos_emb, xlnet_pos_emb


class TestXlRelative(PosencTestCase):
    def table(self, *args, dtype="f64"):
        out = self.path("t.npy")
        self.run_ok("table", "xl-relative", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_forms_f64(self):
        for q, k, d, clamp in [(4, 7, 8, 0), (1, 9, 16, 0), (6, 6, 10, 3), (5, 12, 32, 8)]:
            ref = transfo_xl_pos_emb(k, d, clamp, torch.float64)
            got = self.table("--q-len", q, "--k-len", k, "--dim", d, "--clamp-len", clamp)
            self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg=f"transfo-xl {q} {k} {d}")
            for form in ("bi", "uni"):
                ref = xlnet_pos_emb(q, k, d, form, clamp if clamp else -1, torch.float64)
                got = self.table("--q-len", q, "--k-len", k, "--dim", d, "--form",
                                 f"xlnet-{form}", "--clamp-len", clamp)
                self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg=f"xlnet-{form} {q} {k}")

    def test_hf_float32(self):
        q, k, d = 64, 200, 64
        got = self.table("--q-len", q, "--k-len", k, "--dim", d, "--form", "xlnet-bi", dtype="f32")
        ref = xlnet_pos_emb(q, k, d, "bi", -1, torch.float32).numpy()
        # HF rounds position * inv_freq to float32: an error up to |angle| * 2^-23.
        bound = (k + 1) * 2.0 ** -22
        self.assertEqual(got.dtype, np.float32)
        self.assertLess(np.abs(got.astype(np.float64) - ref).max(), bound)

    def test_errors(self):
        self.assert_fails(2, "table", "xl-relative", "--k-len", 4, "--dim", 7, "-o",
                          self.path("t.npy"), match="dim")
        self.assert_fails(2, "table", "xl-relative", "--k-len", 4, "--dim", 8, "--clamp-len",
                          -1, "-o", self.path("t.npy"), match="--clamp-len")
        self.assert_fails(2, "table", "xl-relative", "--dim", 8, "-o", self.path("t.npy"),
                          match="--q-len/--k-len")


class TestDebertaBucket(PosencTestCase):
    def table(self, *args):
        out = self.path("t.npy")
        self.run_ok("table", "deberta-bucket", *args, "-o", out)
        return np.load(out)

    def test_grid(self):
        cases = [(9, 9, 4, 8), (40, 40, 16, 24), (300, 200, 32, 100), (7, 13, 5, 10),
                 (50, 50, 33, 40), (12, 30, -1, 6), (600, 600, 256, 512), (20, 20, 2, 3),
                 (20, 20, 3, 5)]
        for q, k, pb, mp in cases:
            ref = build_relative_position(q, k, pb, mp)[0].numpy()
            got = self.table("--q-len", q, "--k-len", k, "--position-buckets", pb,
                             "--max-relative-positions", mp)
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, ref, err_msg=f"{q} {k} {pb} {mp}")

    def test_long_distances(self):
        # Every distance 0..20000 in both directions, where float32 rounding of the log
        # decides the bucket.
        for pb, mp in [(256, 512), (64, 1000), (128, 4096), (31, 77), (512, 24528)]:
            for q, k in [(20001, 1), (1, 20001)]:
                ref = build_relative_position(q, k, pb, mp)[0].numpy()
                got = self.table("--q-len", q, "--k-len", k, "--position-buckets", pb,
                                 "--max-relative-positions", mp)
                np.testing.assert_array_equal(got, ref, err_msg=f"{q} {k} {pb} {mp}")

    def test_errors(self):
        out = self.path("t.npy")
        self.assert_fails(2, "table", "deberta-bucket", "--q-len", 4, "--position-buckets", 1,
                          "-o", out, match="--position-buckets: must be at least 2")
        self.assert_fails(2, "table", "deberta-bucket", "--q-len", 4, "--position-buckets", 8,
                          "--max-relative-positions", 5, "-o", out,
                          match="--max-relative-positions: must exceed")
        self.assert_fails(2, "table", "deberta-bucket", "--q-len", 4, "--dtype", "u8", "-o", out,
                          match="cannot hold the smallest value -3")
        self.assertEqual(self.table("--q-len", 3, "--position-buckets", 0).tolist(),
                         [[0, -1, -2], [1, 0, -1], [2, 1, 0]])


if __name__ == "__main__":
    unittest.main()
