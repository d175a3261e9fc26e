"""posenc compare: exit status and report checked against numpy's own isclose, nulp_diff
and argmax computations on the same files.
"""
import json
import unittest

import numpy as np
from numpy.testing._private.utils import nulp_diff

from posenc_testlib import PosencTestCase, run


class Compare(PosencTestCase):
    def save(self, name, arr):
        p = self.path(name)
        np.save(p, arr)
        return p

    def compare(self, a, b, *extra):
        p = run("compare", a, b, "--json", *extra)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        return p.returncode, json.loads(p.stdout)

    def test_exact_match(self):
        x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
        a, b = self.save("a.npy", x), self.save("b.npy", x)
        p = run("compare", a, b)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.decode().rstrip().endswith("match"))
        rc, j = self.compare(a, b)
        self.assertEqual((rc, j["match"], j["mismatches"], j["total"]), (0, True, 0, 20))
        self.assertEqual(j["max_abs_diff"], 0.0)
        self.assertEqual(j["max_ulp_diff"], 0)

    def test_tolerance_boundary_matches_numpy_isclose(self):
        rng = np.random.default_rng(1)
        b = rng.standard_normal(1000) * 10
        a = b + rng.standard_normal(1000) * 1e-4
        pa, pb = self.save("a.npy", a), self.save("b.npy", b)
        for rtol, atol in [(1e-5, 1e-5), (1e-6, 1e-4), (0.0, 2e-4), (1e-3, 0.0)]:
            with self.subTest(rtol=rtol, atol=atol):
                rc, j = self.compare(pa, pb, "--rtol", rtol, "--atol", atol)
                want = np.count_nonzero(~np.isclose(a, b, rtol=rtol, atol=atol))
                self.assertEqual(j["mismatches"], want)
                self.assertEqual(rc, 0 if want == 0 else 1)
        d = np.abs(a - b)
        self.assertEqual(j["max_abs_diff"], d.max())
        self.assertEqual(j["max_abs_diff_index"], [int(np.argmax(d))])
        rel = d / np.abs(b)
        self.assertEqual(j["max_rel_diff"], rel.max())
        self.assertEqual(j["max_rel_diff_index"], [int(np.argmax(rel))])

    def test_just_inside_and_just_outside(self):
        b = np.array([1.0, 100.0, 0.0])
        atol, rtol = 1e-3, 1e-2
        tol = atol + rtol * np.abs(b)
        inside = b + tol * (1 - 1e-9)
        outside = b + tol * (1 + 1e-9)
        pb = self.save("b.npy", b)
        rc, j = self.compare(self.save("in.npy", inside), pb, "--rtol", rtol, "--atol", atol)
        self.assertEqual((rc, j["mismatches"]), (0, 0))
        rc, j = self.compare(self.save("out.npy", outside), pb, "--rtol", rtol, "--atol", atol)
        self.assertEqual((rc, j["mismatches"]), (1, 3))
        self.assertEqual(j["first_mismatch_index"], [0])

    def test_default_tolerances_follow_the_less_precise_dtype(self):
        b = np.linspace(-3, 3, 50)
        # Off by 1e-6 relative: fine for f32 (rtol 1.3e-6) but not for f64 (1e-7).
        a = b * (1 + 1e-6) + 2e-7
        rc32, j32 = self.compare(self.save("a32.npy", a.astype(np.float32)),
                                 self.save("b64.npy", b))
        self.assertEqual((j32["rtol"], j32["atol"]), (1.3e-6, 1e-5))
        want = np.count_nonzero(~np.isclose(a.astype(np.float32).astype(np.float64), b,
                                            rtol=1.3e-6, atol=1e-5))
        self.assertEqual(j32["mismatches"], want)
        rc64, j64 = self.compare(self.save("a64.npy", a), self.save("b64.npy", b))
        self.assertEqual((j64["rtol"], j64["atol"]), (1e-7, 1e-7))
        self.assertEqual(j64["mismatches"],
                         np.count_nonzero(~np.isclose(a, b, rtol=1e-7, atol=1e-7)))
        self.assertEqual(rc64, 1)
        rc16, j16 = self.compare(self.save("a16.npy", a.astype(np.float16)), self.save("b.npy", b))
        self.assertEqual((j16["rtol"], j16["atol"]), (1e-3, 1e-5))
        self.assertEqual(j16["ulp_type"], "f16")

    def test_integers_compare_exactly(self):
        a = np.arange(10, dtype=np.int32)
        b = a.copy()
        b[7] += 1
        rc, j = self.compare(self.save("a.npy", a), self.save("b.npy", b.astype(np.int64)))
        self.assertEqual((rc, j["mismatches"], j["first_mismatch_index"]), (1, 1, [7]))
        self.assertEqual(j["max_ulp_diff"], 1)

    def test_nan_handling(self):
        a = np.array([1.0, np.nan, np.nan, 2.0, np.inf, -np.inf])
        b = np.array([1.0, np.nan, 0.0, np.nan, np.inf, np.inf])
        pa, pb = self.save("a.npy", a), self.save("b.npy", b)
        rc, j = self.compare(pa, pb)
        want = np.count_nonzero(~np.isclose(a, b, equal_nan=False))
        self.assertEqual((rc, j["mismatches"]), (1, want))
        self.assertEqual((j["nan_a"], j["nan_b"], j["nan_mismatches"]), (2, 2, 2))
        rc, j = self.compare(pa, pb, "--equal-nan")
        self.assertEqual(j["mismatches"], np.count_nonzero(~np.isclose(a, b, equal_nan=True)))
        # NaN against NaN alone matches only with --equal-nan.
        n = self.save("n.npy", np.array([np.nan, 1.0]))
        self.assertEqual(run("compare", n, n).returncode, 1)
        self.assertEqual(run("compare", n, n, "--equal-nan").returncode, 0)

    def test_ulp_counts_match_numpy_nulp_diff(self):
        rng = np.random.default_rng(5)
        for dt in [np.float16, np.float32, np.float64]:
            with self.subTest(dtype=dt.__name__):
                b = (rng.standard_normal(500) * 50).astype(dt)
                steps = rng.integers(-6, 7, 500)
                a = b.copy()
                for i, s in enumerate(steps):  # walk s representable values away
                    for _ in range(abs(int(s))):
                        a[i] = np.nextafter(a[i], dt(np.inf) if s > 0 else dt(-np.inf))
                a[:3] = [dt(0.0), dt(-0.0), -np.finfo(dt).tiny]
                b[:3] = [dt(-0.0), np.finfo(dt).smallest_subnormal, np.finfo(dt).tiny]
                pa, pb = self.save("a.npy", a), self.save("b.npy", b)
                ulps = nulp_diff(a, b)
                maxulp = int(ulps.max())
                rc, j = self.compare(pa, pb, "--max-ulp", maxulp)
                self.assertEqual(j["max_ulp_diff"], maxulp)
                self.assertEqual(j["max_ulp_diff_index"], [int(np.argmax(ulps))])
                self.assertEqual((rc, j["mismatches"]), (0, 0))
                rc, j = self.compare(pa, pb, "--max-ulp", 3)
                self.assertEqual(j["mismatches"], int(np.count_nonzero(ulps > 3)))
                self.assertEqual(rc, 1)
        # Mixed precision: ULPs are counted in the less precise type (b rounded to f32).
        b64 = rng.standard_normal(200)
        a32 = b64.astype(np.float32)
        a32[::3] = np.nextafter(a32[::3], np.float32(np.inf))
        rc, j = self.compare(self.save("a32.npy", a32), self.save("b64.npy", b64), "--max-ulp", 1)
        self.assertEqual(j["ulp_type"], "f32")
        self.assertEqual(j["max_ulp_diff"], int(nulp_diff(a32, b64.astype(np.float32)).max()))
        self.assertEqual(rc, 0)

    def test_ulp_or_tolerance(self):
        # Near zero the ULP distance is huge but --atol covers it.
        a = np.array([1e-30, 1.0], np.float32)
        b = np.array([-1e-30, np.nextafter(np.float32(1), np.float32(2))], np.float32)
        pa, pb = self.save("a.npy", a), self.save("b.npy", b)
        self.assertEqual(run("compare", pa, pb, "--max-ulp", 1).returncode, 1)
        self.assertEqual(run("compare", pa, pb, "--max-ulp", 1, "--atol", 1e-20).returncode, 0)

    def test_shape_mismatch_is_a_difference(self):
        pa = self.save("a.npy", np.zeros((2, 3)))
        pb = self.save("b.npy", np.zeros((3, 2)))
        p = run("compare", pa, pb)
        self.assertEqual(p.returncode, 1)
        self.assertIn("shapes differ: (2, 3) vs (3, 2)", p.stdout.decode())
        rc, j = self.compare(pa, pb)
        self.assertEqual((rc, j["match"], j["shapes_equal"]), (1, False, False))
        self.assertEqual(j["a"]["shape"], [2, 3])

    def test_report_text(self):
        b = np.array([[1.0, 2.0], [3.0, 4.0]])
        a = b.copy()
        a[1, 0] = 3.5
        p = run("compare", self.save("a.npy", a), self.save("b.npy", b))
        self.assertEqual(p.returncode, 1)
        out = p.stdout.decode()
        self.assertIn("max abs diff: 0.5 at (1, 0): a = 3.5, b = 3", out)
        self.assertIn("mismatches: 1 of 4", out)
        self.assertTrue(out.rstrip().endswith("differ"))

    def test_quiet_and_formats(self):
        x = np.arange(6.0).reshape(2, 3)
        pa = self.save("a.npy", x)
        self.run_ok("convert", pa, "-o", self.path("a.h5:/x"))
        self.run_ok("convert", pa, "-o", self.path("a.csv"))
        p = run("-q", "compare", self.path("a.h5:/x"), self.path("a.csv"))
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, b"", ""))
        p = run("compare", pa, self.save("b.npy", x + 1), "-q")
        self.assertEqual((p.returncode, p.stdout), (1, b""))

    def test_bad_input_and_usage(self):
        pa = self.save("a.npy", np.zeros(3))
        with open(self.path("bad.npy"), "wb") as f:
            f.write(b"\x93NUMPY\x09\x00")
        self.assert_fails(3, "compare", pa, self.path("bad.npy"), match=r"bad\.npy")
        self.assert_fails(3, "compare", pa, self.path("missing.npy"), match=r"missing\.npy")
        self.assert_fails(2, "compare", pa)
        self.assert_fails(2, "compare", pa, pa, "--rtol", "-1")
        self.assert_fails(2, "compare", pa, pa, "--max-ulp", "x")


if __name__ == "__main__":
    unittest.main()
