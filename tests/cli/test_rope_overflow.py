"""Non-finite results of finite inputs are refused by `posenc rope` as by `posenc
attention`: exit 3, one line naming the option, and no output file.

Parameters whose angles, cos and sin or attention factor overflow the working arithmetic
(f64, or f32 under --precision f32) are refused before anything is read or written:
--freq-scale, --factor, --inv-freq, --attention-factor (also under --inverse), --angles.
An attention factor that overflows only for some values of the input (an f64 input) is
found where the kernel reports its results, whatever --allow-nonfinite says; a value
rounded to a narrower output type still overflows to Inf as convert's does.
"""
import os
import unittest

import numpy as np

from posenc_testlib import PosencTestCase

SHAPE = (1, 2, 8, 8)  # positions 0..7, 4 frequency pairs


class RopeOverflow(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal(SHAPE)
        self.npy("x32.npy", self.x.astype(np.float32))
        self.npy("x64.npy", self.x)
        self.inputs = ["x32.npy", "x64.npy"]

    def refused(self, args, match, inputs="x32.npy"):
        """`posenc rope` exits 3 with one line matching `match`; no file appears."""
        before = list(self.inputs)
        p = self.assert_fails(3, "rope", self.path(inputs), "-o", self.path("y.npy"), *args,
                              match=match)
        self.assert_no_new_files(before)
        return p

    def rotated(self, args, inputs="x32.npy"):
        self.run_ok("rope", self.path(inputs), "-o", self.path("ok.npy"), *args)
        y = np.load(self.path("ok.npy"))
        os.remove(self.path("ok.npy"))
        return y

    def test_each_option_is_named_and_nothing_is_written(self):
        self.npy("inv.npy", np.array([[1e308, 1.0, 0.1, 0.01]]))
        self.inputs.append("inv.npy")
        angles = r"gives angles beyond the f64 arithmetic's range \(1\.79769e\+308\)"
        cases = [
            (["--freq-scale", "1e308"], r"^posenc: error: --freq-scale: frequency 1e\+308 "
                                        r"\(angle 0\) times positions up to 7 " + angles),
            (["--scaling", "linear", "--factor", "1e-308"], r"--factor: frequency 1e\+308 .*"
                                                            + angles),
            (["--inv-freq", self.path("inv.npy")], r"--inv-freq: frequency 1e\+308 .*" + angles),
            (["--attention-factor", "1e308"],
             r"--attention-factor: 1e\+308 times values of f32 \(up to 3\.40282e\+38\) "
             r"overflows the f64 arithmetic"),
            (["--attention-factor", "1e-320", "--inverse"],
             r"--attention-factor: the inverse's 1 / 9\.99989e-321 times values of f32 .*f64"),
            (["--precision", "f32", "--scaling", "linear", "--factor", "1e-39"],
             r"--factor: frequency 1e\+39 .*beyond the f32 arithmetic's range"),
            (["--precision", "f32", "--attention-factor", "1e39"],
             r"--attention-factor: 1e\+39 .*overflows the f32 arithmetic"),
        ]
        for args, match in cases:
            for extra in ([], ["--allow-nonfinite"]):
                with self.subTest(args=args + extra):
                    self.refused(args + extra, match)

    def test_a_scaled_frequency_that_is_not_finite_is_a_usage_error(self):
        # A parameter alone, like a --factor whose frequencies are not finite: exit 2.
        self.npy("inv.npy", np.array([[10.0, 1.0, 0.1, 0.01]]))
        self.inputs.append("inv.npy")
        p = self.assert_fails(2, "rope", self.path("x32.npy"), "-o", self.path("y.npy"),
                              "--inv-freq", self.path("inv.npy"), "--freq-scale", "1e308",
                              match=r"--freq-scale: 1e\+308 times frequency 10 is not finite")
        self.assert_no_new_files(self.inputs)

    def test_the_bound_is_the_largest_position_times_the_largest_frequency(self):
        # Positions up to 7 and inv_freq[0] = 1: 7 * 2.5e307 = 1.75e308 is finite, and its
        # cos and sin are; 7 * 2.6e307 = 1.82e308 is not.
        y = self.rotated(["--freq-scale", "2.5e307"], inputs="x64.npy")
        self.assertTrue(np.isfinite(y).all())
        self.refused(["--freq-scale", "2.6e307"], r"--freq-scale: .*positions up to 7",
                     inputs="x64.npy")
        # --start moves the positions: 0..7 become 1..8 (7 * 2.3e307 is finite, 8 * 2.3e307
        # is not).
        self.rotated(["--freq-scale", "2.3e307"], inputs="x64.npy")
        self.refused(["--freq-scale", "2.3e307", "--start", "1"],
                     r"--freq-scale: .*positions up to 8", inputs="x64.npy")

    def test_explicit_angles_beyond_f32_under_precision_f32(self):
        a = np.zeros((8, 4))
        a[3, 1] = 1e39
        self.npy("angles.npy", a)
        self.inputs.append("angles.npy")
        self.refused(["--angles", self.path("angles.npy"), "--precision", "f32"],
                     r"--angles: 1e\+39 is beyond the f32 arithmetic's range")
        y = self.rotated(["--angles", self.path("angles.npy")], inputs="x64.npy")
        self.assertTrue(np.isfinite(y).all())

    def test_a_factor_that_overflows_some_f64_values_is_found_in_the_output(self):
        # f64 values times 1e300: those above 1.8e8 overflow f64. f32 values times 1e260
        # cannot (3.4e38 * 1e260 is finite), nor f64 values times 2 here.
        match = (r"--attention-factor: 1e\+300 makes the rotation of .*x64\.npy overflow the "
                 r"f64 arithmetic")
        x = self.x.copy()
        x[0, 1, 5, 2] = 1e10
        self.npy("x64.npy", x)
        for extra in ([], ["--allow-nonfinite"]):
            with self.subTest(extra=extra):
                self.refused(["--attention-factor", "1e300", *extra], match, inputs="x64.npy")
        y = self.rotated(["--attention-factor", "1e260", "--dtype", "f64"], inputs="x32.npy")
        self.assertTrue(np.isfinite(y).all())
        y = self.rotated(["--attention-factor", "2"], inputs="x64.npy")
        self.assertTrue(np.isfinite(y).all())

    def test_nonfinite_inputs_allowed_are_not_checked_for_overflow(self):
        x = self.x.copy()
        x[0, 0, 0, 0] = np.nan
        self.npy("nan64.npy", x)
        self.inputs.append("nan64.npy")
        self.refused(["--attention-factor", "2"], r"input contains NaN or Inf", "nan64.npy")
        y = self.rotated(["--attention-factor", "2", "--allow-nonfinite"], inputs="nan64.npy")
        self.assertEqual(np.isnan(y).sum(), 2)  # the pair of the NaN

    def test_rounding_to_a_narrower_type_still_overflows_to_inf(self):
        # 60000 at 45 degrees (angle pi/4 from --angles): 84853 is beyond f16's range;
        # the f64 rotation rounds to Inf, as convert rounds such a value.
        a = np.zeros((8, 4))
        a[0, 0] = np.pi / 4
        self.npy("angles.npy", a)
        x = np.zeros(SHAPE, np.float16)
        x[0, 0, 0, 0] = x[0, 0, 0, 4] = 60000
        self.npy("x16.npy", x)
        y = self.rotated(["--angles", self.path("angles.npy")], inputs="x16.npy")
        self.assertEqual(y[0, 0, 0, 4], np.inf)

    def test_attention_refuses_the_same_rope_parameters(self):
        for args, match in [(["--scaling", "linear", "--factor", "1e-308"], r"--factor: "),
                            (["--attention-factor", "1e308"], r"--attention-factor: ")]:
            with self.subTest(args=args):
                q = self.path("x32.npy")
                self.assert_fails(3, "attention", "-q", q, "-k", q, "-v", q, "-o",
                                  self.path("o.npy"), "--emit", "output", "--rope", *args,
                                  match=match)
                self.assert_no_new_files(self.inputs)


if __name__ == "__main__":
    unittest.main()
