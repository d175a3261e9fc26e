"""Errors that help: each names what is wrong (the input and its shape, the missing
folder, the datasets a file holds, a header row), exits with the documented status,
and leaves no output file behind."""
import os
import re
import unittest

import h5py
import numpy as np

from posenc_testlib import PosencTestCase


class InputErrors(PosencTestCase):
    def test_odd_head_dim_blames_the_input(self):
        src = self.npy("q.npy", np.zeros((2, 4, 7), dtype=np.float32))
        before = os.listdir(self.tmp)
        p = self.assert_fails(3, "rope", src, "-o", self.path("out.npy"),
                              match=r"q\.npy: head dim \(axis d\) of shape \(2, 4, 7\) is 7, "
                                    r"which is odd")
        self.assertIn("--rotary-dim", p.stderr)
        self.assertIn("partial", p.stderr)
        self.assertIn("axes (bsd)", p.stderr)
        self.assert_no_new_files(before)
        # The suggested fix works.
        self.run_ok("rope", src, "--rotary-dim", "6", "-o", self.path("out.npy"))
        # An odd width the user asked for is still a usage error about that option.
        src8 = self.npy("k.npy", np.zeros((2, 4, 8), dtype=np.float32))
        self.assert_fails(2, "rope", src8, "--rotary-dim", "5", "-o", self.path("o2.npy"),
                          match=r"--rotary-dim")
        self.assertFalse(os.path.exists(self.path("o2.npy")))
        # A table of an odd --dim: that option is the problem, with the same fix.
        self.assert_fails(2, "table", "rope", "--positions", "4", "--dim", "7",
                          "-o", self.path("t.npy"),
                          match=r"--dim: RoPE rotates pairs of dims and needs an even head "
                                r"dimension, got 7; rotate an even part of it with "
                                r"--rotary-dim \(e\.g\. 6\)$")
        self.assertFalse(os.path.exists(self.path("t.npy")))

    def test_odd_head_dim_in_attention_rope_blames_q(self):
        x = np.random.default_rng(0).standard_normal((1, 2, 4, 7)).astype(np.float32)
        src = self.npy("x.npy", x)
        before = os.listdir(self.tmp)
        p = self.assert_fails(3, "attention", "-q", src, "-k", src, "-v", src, "--rope",
                              "--emit", "output", "-o", self.path("o.npy"),
                              match=r"q: head dim \(axis d\) of shape \(1, 2, 4, 7\) is 7, "
                                    r"which is odd")
        self.assertIn("--rotary-dim", p.stderr)
        self.assert_no_new_files(before)
        # The fix it names: rotate the first 6 dims, attention over all 7 (numpy).
        self.run_ok("attention", "-q", src, "-k", src, "-v", src, "--rope", "--rotary-dim", "6",
                    "--emit", "output", "-o", self.path("o.npy"))
        inv = 1.0 / 10000.0 ** (np.arange(0, 6, 2) / 6)
        ang = np.arange(4)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        xd = x.astype(np.float64)
        r = xd[..., :6]
        rot = np.concatenate([-r[..., 3:], r[..., :3]], -1)
        xr = np.concatenate([r * cos + rot * sin, xd[..., 6:]], -1)
        s = xr @ xr.transpose(0, 1, 3, 2) / np.sqrt(7)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        np.testing.assert_allclose(np.load(self.path("o.npy")), pr @ xd, rtol=1e-5, atol=1e-6)

    def test_missing_output_folder_is_named(self):
        src = self.npy("a.npy", np.zeros((2, 3), dtype=np.float32))
        before = os.listdir(self.tmp)
        for out in ["out/a.npy", "out/a.h5:/x", "out/a.csv"]:
            with self.subTest(out=out):
                self.assert_fails(4, "convert", src, "-o", out, cwd=self.tmp,
                                  match=r"cannot create 'out/a\.(npy|h5|csv)': "
                                        r"no such directory: out/$")
        self.assert_fails(4, "table", "sinusoidal", "--positions", "4", "--dim", "4",
                          "-o", self.path("no/such/t.npy"),
                          match=r"no such directory: .*/no/such/$")
        # A file where the folder should be.
        with open(self.path("f"), "w") as f:
            f.write("x")
        self.assert_fails(4, "convert", src, "-o", "f/a.npy", cwd=self.tmp,
                          match=r"not a directory: f$")
        self.assert_no_new_files(before + ["f"])

    def test_hdf5_file_without_dataset_lists_them(self):
        path = self.path("model.h5")
        with h5py.File(path, "w") as f:
            f["q"] = np.zeros((2, 8), dtype=np.float32)
            f.create_group("layers")
            for i in range(25):
                f[f"layers/k{i:02d}"] = np.zeros((i + 1,), dtype=np.float64)
        before = os.listdir(self.tmp)
        p = self.assert_fails(2, "convert", path, "-o", self.path("o.npy"),
                              match=r"model\.h5: name a dataset, e.g. .*model\.h5:/data; "
                                    r".*model\.h5 holds ")
        with h5py.File(path, "r") as f:
            names = []
            f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset)
                         else None)
        shown = p.stderr.strip().split(" holds ", 1)[1]
        listed = re.findall(r"(?:^|, )(/[\w/]+) \(", shown)
        self.assertEqual(len(listed), 20)  # capped at 20 names
        self.assertTrue(shown.endswith("and 6 more"), shown)
        self.assertTrue(set(listed) <= set(names), listed)
        self.assertIn("/layers/k00 (1,) f64", shown)
        self.assert_no_new_files(before)
        # A small file: every dataset, with shape and dtype.
        small = self.path("small.h5")
        with h5py.File(small, "w") as f:
            f["x"] = np.zeros((3, 4), dtype=np.float32)
        p = self.assert_fails(2, "compare", small, small, match=r"small\.h5 holds /x \(3, 4\) "
                                                                r"f32$")
        self.assert_fails(2, "inspect", small, "--slice", "0",
                          match=r"--slice needs a dataset: .*small\.h5:/NAME; .*small\.h5 holds "
                                r"/x \(3, 4\) f32$")
        # A missing file: no listing, just the reference.
        self.assert_fails(2, "inspect", self.path("none.h5") + ":", "--slice", "0")

    def test_csv_header_row_gets_a_hint(self):
        path = self.path("t.csv")
        with open(path, "w") as f:
            f.write("pos,dim0,dim1\n0,1.0,0.5\n1,0.9,0.4\n")
        before = os.listdir(self.tmp)
        self.assert_fails(3, "convert", path, "-o", self.path("o.npy"),
                          match=r"t\.csv: line 1, column 1: 'pos' is not a number \(field 1\); "
                                r"this looks like a header row: remove it or start it with '#'")
        self.assert_no_new_files(before)
        # The hint's fix works, and numpy reads the same values.
        with open(path, "w") as f:
            f.write("# pos,dim0,dim1\n0,1.0,0.5\n1,0.9,0.4\n")
        self.run_ok("convert", path, "-o", self.path("o.npy"))
        np.testing.assert_array_equal(np.load(self.path("o.npy")),
                                      np.loadtxt(path, delimiter=",", comments="#"))
        # A bad value further down is not called a header.
        with open(path, "w") as f:
            f.write("0,1.0\n1,abc\n")
        p = self.assert_fails(3, "convert", path, "-o", self.path("o2.npy"),
                              match=r"line 2, column 3: 'abc' is not a number")
        self.assertNotIn("header", p.stderr)


if __name__ == "__main__":
    unittest.main()
