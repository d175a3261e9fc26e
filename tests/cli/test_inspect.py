"""posenc inspect: statistics against numpy (computed in f64), NaN/Inf counts, numpy
basic slicing, JSON output, text output."""
import json
import unittest

import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run


def as_float(v):
    if isinstance(v, str):
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[v]
    return float(v)


def peak_rss_kib(*args):
    """Runs posenc from a fresh Python process; returns its peak RSS (KiB) and stdout."""
    code = ("import resource, subprocess, sys; "
            "p = subprocess.run(sys.argv[1:], capture_output=True, check=True); "
            "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) "
            "+ '\\n' + p.stdout.decode())")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", code, BIN, *map(str, args)],
                       capture_output=True, check=True, text=True)
    rss, out = p.stdout.split("\n", 1)
    return int(rss), out


class Inspect(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(5)
        self.a = (rng.standard_normal((3, 4, 5, 6)) * 4 + 1).astype(np.float32)
        self.npy = self.path("a.npy")
        np.save(self.npy, self.a)

    def js(self, ref, *extra):
        return json.loads(self.run_ok("inspect", ref, "--json", *extra).stdout)

    def check_stats(self, st, a):
        a = np.asarray(a, dtype=np.float64).ravel()
        fin = a[np.isfinite(a)]
        self.assertEqual(st["count"], a.size)
        self.assertEqual(st["finite"], fin.size)
        self.assertEqual(st["nan"], int(np.isnan(a).sum()))
        self.assertEqual(st["posinf"], int(np.isposinf(a).sum()))
        self.assertEqual(st["neginf"], int(np.isneginf(a).sum()))
        self.assertEqual(st["min"], fin.min())
        self.assertEqual(st["max"], fin.max())
        np.testing.assert_allclose(st["mean"], fin.mean(), rtol=1e-12)
        np.testing.assert_allclose(st["std"], fin.std(), rtol=1e-12)

    def test_stats_match_numpy(self):
        j = self.js(self.npy, "--stats")
        self.assertEqual(j["shape"], [3, 4, 5, 6])
        self.assertEqual(j["dtype"], "f32")
        self.assertIn("NPY", j["storage"])
        self.check_stats(j["stats"], self.a)
        a64 = self.a.astype(np.float64)
        np.testing.assert_allclose(j["stats"]["sum"], a64.sum(), rtol=1e-12)
        self.assertEqual(j["stats"]["absmax"], np.abs(a64).max())
        self.assertEqual(tuple(j["stats"]["argmin"]), np.unravel_index(a64.argmin(), a64.shape))
        self.assertEqual(tuple(j["stats"]["argmax"]), np.unravel_index(a64.argmax(), a64.shape))
        # Leading values: the first 10 in C order, exact.
        self.assertEqual(len(j["values"]), 10)
        np.testing.assert_array_equal(np.array(j["values"], np.float32), self.a.ravel()[:10])
        j = self.js(self.npy, "--head", "3")
        self.assertEqual(len(j["values"]), 3)
        self.assertFalse(j["values_complete"])

    def test_nan_and_inf_are_counted_not_averaged(self):
        b = np.array([[1.0, np.nan, 2.0], [np.inf, -np.inf, np.nan], [-3.0, 0.5, 7.25]])
        np.save(self.path("b.npy"), b)
        j = self.js(self.path("b.npy"))
        self.check_stats(j["stats"], b)
        np.testing.assert_array_equal(np.array([as_float(v) for v in j["values"]]), b.ravel())
        allnan = np.full(4, np.nan)
        np.save(self.path("n.npy"), allnan)
        st = self.js(self.path("n.npy"))["stats"]
        self.assertEqual((st["nan"], st["finite"], st["mean"], st["min"]), (4, 0, None, None))

    def test_slices_like_numpy(self):
        a = self.a
        cases = {
            "0,:,:4": a[0, :, :4],
            "-1": a[-1],
            "1:3, ::2, -2:, 5": a[1:3, ::2, -2:, 5],
            "::-1, 1, ..., ::-3": a[::-1, 1, ..., ::-3],
            "..., 0": a[..., 0],
            "2:100, 10:": a[2:100, 10:],
            ":": a[:],
            "[0, 1]": a[0, 1],
        }
        for sl, expect in cases.items():
            with self.subTest(slice=sl):
                j = self.js(self.npy, "--slice", sl)
                self.assertEqual(j["slice_shape"], list(expect.shape))
                self.assertEqual(j["values_complete"], True)
                np.testing.assert_array_equal(np.array(j["values"], np.float32).reshape(expect.shape),
                                              expect)
                if expect.size:
                    self.check_stats(j["stats"], expect)

    def test_large_tensor_streams_in_slabs(self):
        rng = np.random.default_rng(1)
        big = rng.standard_normal((2600, 2000)).astype(np.float32)  # 20.8 MB: several slabs
        big[1234, 5] = np.nan
        np.save(self.path("big.npy"), big)
        j = self.js(self.path("big.npy"))
        self.check_stats(j["stats"], big)
        j = self.js(self.path("big.npy"), "--slice", "2599:0:-1299, 7")
        np.testing.assert_array_equal(np.array(j["values"], np.float32), big[2599:0:-1299, 7])

    def test_leading_unit_axes_read_in_rows(self):
        # [1, s, h, d] (and an HDF5 copy): --slice reads only the selected entries of s,
        # and statistics stream along s, so peak memory stays far below the 64 MiB tensor.
        import h5py
        rng = np.random.default_rng(3)
        a = rng.standard_normal((1, 2048, 32, 256)).astype(np.float32)
        np.save(self.path("q.npy"), a)
        with h5py.File(self.path("q.h5"), "w") as f:
            f["q"] = a
        for ref in (self.path("q.npy"), self.path("q.h5") + ":/q"):
            rss, out = peak_rss_kib("inspect", ref, "--json", "--slice", "0,1500,3,:4")
            np.testing.assert_array_equal(np.array(json.loads(out)["values"], np.float32),
                                          a[0, 1500, 3, :4])
            self.assertTrue(UNDER_ASAN or rss < 40 * 1024, (rss, ref))
            rss, out = peak_rss_kib("inspect", ref, "--json")
            self.check_stats(json.loads(out)["stats"], a)
            self.assertTrue(UNDER_ASAN or rss < 100 * 1024, (rss, ref))

    def test_text_output_and_stdin(self):
        with open(self.npy, "rb") as fh:
            p = run("inspect", "-", "--slice", "0, 0", stdin=fh.read())
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode()
        for word in ["shape    (3, 4, 5, 6)", "dtype    f32", "NPY 1.0", "mean", "std",
                     "NaN 0", "slice    [0, 0] -> (5, 6)"]:
            self.assertIn(word, out)
        # The selection is printed as a grid: 5 rows of 6 values after a column header.
        rows = [ln.split() for ln in out.splitlines() if ln.startswith("    ")]
        got = np.array([[float(x) for x in r[1:]] for r in rows[1:]], dtype=np.float32)
        np.testing.assert_array_equal(got, self.a[0, 0])

    def test_errors(self):
        self.assert_fails(3, "inspect", self.path("missing.npy"), match=r"missing\.npy")
        self.assert_fails(2, "inspect", self.npy, "--slice", "0,,1", match=r"--slice")
        self.assert_fails(2, "inspect", self.npy, "--slice", "1:2:3:4", match=r"--slice")
        self.assert_fails(3, "inspect", self.npy, "--slice", "0,4", match=r"axis 1 with size 4")
        self.assert_fails(3, "inspect", self.npy, "--slice", "0,0,0,0,0", match=r"5 axes")
        self.assert_fails(2, "inspect", self.npy, "--head", "-1")


if __name__ == "__main__":
    unittest.main()
