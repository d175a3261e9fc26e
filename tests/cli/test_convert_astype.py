"""posenc convert --dtype against numpy's astype where numpy defines the result: every
integer pair (wrapping modulo 2^bits), 64-bit values beyond 2^53, integers to floats
(one rounding), floats to integers inside the target range (truncation), and bool."""
import unittest

import numpy as np

from posenc_testlib import PosencTestCase

INTS = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
        "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


class Astype(PosencTestCase):
    def convert(self, a, dtype):
        np.save(self.path("in.npy"), a)
        self.run_ok("convert", self.path("in.npy"), "-o", self.path("out.npy"), "--dtype", dtype)
        return np.load(self.path("out.npy"))

    def test_integers_wrap_like_numpy(self):
        rng = np.random.default_rng(1)
        for src_name, src in INTS.items():
            info = np.iinfo(src)
            a = np.concatenate([rng.integers(info.min, info.max, 200, dtype=src, endpoint=True),
                                np.array([info.min, info.max, 0, 1], dtype=src)])
            for dst_name, dst in INTS.items():
                with self.subTest(src=src_name, dst=dst_name):
                    got = self.convert(a, dst_name)
                    self.assertEqual(got.dtype, dst)
                    np.testing.assert_array_equal(got, a.astype(dst))

    def test_integers_to_floats_round_once(self):
        # 2^60 + 2^36 + 1 is just above a float32 midpoint; rounding through float64
        # first would lose the +1 and round the tie down to 2^60.
        a = np.array([2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**53 + 1, 12345], np.int64)
        u = np.array([2**64 - 1, 2**63 + 2**39 + 1], np.uint64)
        for name, dt in FLOATS.items():
            with self.subTest(dst=name):
                np.testing.assert_array_equal(self.convert(a, name), a.astype(dt))
                np.testing.assert_array_equal(self.convert(u, name), u.astype(dt))

    def test_floats_to_integers_in_range_truncate(self):
        rng = np.random.default_rng(2)
        for src_name, src in FLOATS.items():
            for dst_name, dst in list(INTS.items()) + [("bool", np.bool_)]:
                with self.subTest(src=src_name, dst=dst_name):
                    if dst is np.bool_:
                        a = np.array([0.0, -0.0, 0.5, -3, np.nan, np.inf], src)
                    else:
                        info = np.iinfo(dst)
                        lo, hi = max(float(info.min), -6e4), min(float(info.max), 6e4)
                        a = rng.uniform(lo, hi, 300).astype(src)
                        a = a[(a > info.min - 1) & (a < info.max + 1)]
                    np.testing.assert_array_equal(self.convert(a, dst_name), a.astype(dst))


if __name__ == "__main__":
    unittest.main()
