"""posenc inspect --slice against numpy basic indexing (the reference): random shapes and
random slice strings (negative and huge steps, bounds far outside the axis and beyond
int64, '...'), a tensor streamed in many slabs, and the errors numpy raises (IndexError:
exit 3, a step of zero: exit 2)."""
import json
import random
import unittest

import numpy as np

from posenc_testlib import PosencTestCase, run

I64_MAX = 2**63 - 1
I64_MIN = -2**63


def random_bound(rnd, n):
    r = rnd.random()
    if r < 0.25:
        return ""
    if r < 0.35:
        return str(rnd.choice([I64_MAX, I64_MIN, 10**30, -10**30, 2**62]))
    return str(rnd.randint(-2 * n - 2, 2 * n + 2))


def random_slice(rnd, shape):
    """A slicing string for `shape` and the Python index that means the same."""
    text, index = [], []
    for n in shape:
        r = rnd.random()
        if r < 0.2 and n > 0:
            i = rnd.randint(-n, n - 1)
            text.append(str(i))
            index.append(i)
            continue
        start, stop = random_bound(rnd, n), random_bound(rnd, n)
        step = rnd.choice(["", "1", "2", "3", "-1", "-2", "-3", str(I64_MAX), str(I64_MIN),
                           str(-I64_MAX), str(10**30), str(-10**30)])
        text.append(f"{start}:{stop}" + (f":{step}" if step else ""))
        index.append(slice(*(int(v) if v else None for v in (start, stop, step))))
    if text and rnd.random() < 0.25:  # trailing entries left out, or one of them as "..."
        k = rnd.randint(0, len(text) - 1)
        if rnd.random() < 0.5:
            text, index = text[:k], index[:k]
        else:
            text = text[:k] + ["..."] + text[k + 1:]
            index = index[:k] + [Ellipsis] + index[k + 1:]
    if not text:  # an empty --slice means no slice: say "..." instead
        text, index = ["..."], [Ellipsis]
    return ", ".join(text), tuple(index)


def as_float(v):
    if isinstance(v, str):
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[v]
    return float(v)


class Slices(PosencTestCase):
    def inspect(self, path, sl, *extra):
        p = self.run_ok("inspect", path, "--json", "--slice", sl, *extra)
        return json.loads(p.stdout)

    def check(self, j, want, sl):
        self.assertEqual(j["slice_shape"], list(want.shape), sl)
        # The leading values (all of them when values_complete), in C order.
        got = np.array([as_float(v) for v in j["values"]]).astype(want.dtype)
        self.assertEqual(j["values_complete"], got.size == want.size, sl)
        np.testing.assert_array_equal(got, want.ravel()[:got.size], err_msg=sl)
        st, w = j["stats"], want.astype(np.float64).ravel()
        fin = w[np.isfinite(w)]
        self.assertEqual((st["count"], st["finite"]), (w.size, fin.size), sl)
        if fin.size:
            self.assertEqual((st["min"], st["max"]), (fin.min(), fin.max()), sl)
            np.testing.assert_allclose(st["mean"], fin.mean(), rtol=1e-12, atol=1e-300)

    def test_random_slices_match_numpy(self):
        rnd = random.Random(20)
        rng = np.random.default_rng(20)
        for k in range(12):
            shape = tuple(int(s) for s in rng.integers(0 if k % 4 == 0 else 1, 7, k % 5))
            a = rng.standard_normal(shape).astype(np.float32 if k % 2 else np.float64)
            path = self.path(f"a{k}.npy")
            np.save(path, a)
            for _ in range(15):
                sl, index = random_slice(rnd, shape)
                with self.subTest(shape=shape, slice=sl):
                    self.check(self.inspect(path, sl), a[index], sl)

    def test_huge_steps_and_bounds(self):
        a = np.arange(2 * 3 * 10, dtype=np.int64).reshape(2, 3, 10)
        np.save(self.path("a.npy"), a)
        cases = {
            "0,0,1::9223372036854775807": a[0, 0, 1::I64_MAX],
            "0,0,::-9223372036854775808": a[0, 0, ::I64_MIN],
            "0,0,-9223372036854775808:9223372036854775807": a[0, 0, I64_MIN:I64_MAX],
            "0,0,9223372036854775807:-9223372036854775808:-3": a[0, 0, I64_MAX:I64_MIN:-3],
            "0,0,100000000000000000000:": a[0, 0, 10**20:],
            "-1,::-1,-100000000000000000000:-2:9223372036854775806": a[-1, ::-1, -10**20:-2:I64_MAX - 1],
            "...,8:-1:-1": a[..., 8:-1:-1],
            "0, 2, -1:-11:-4": a[0, 2, -1:-11:-4],
        }
        for sl, want in cases.items():
            with self.subTest(slice=sl):
                self.check(self.inspect(self.path("a.npy"), sl), want, sl)

    def test_many_slabs(self):
        # 18.5 MB along axis 1 ([1, 4200, 1100] f32; 16 MiB slabs): the selection spans
        # slabs, backwards and with steps larger than a slab.
        rng = np.random.default_rng(4)
        a = rng.standard_normal((1, 4200, 1100)).astype(np.float32)
        np.save(self.path("big.npy"), a)
        for sl in ["0, ::-1, ::97", "0, 4100:10:-3803, 5:9", "..., 1099", "0, 1:-1:2, ::-1",
                   "0, -9223372036854775808::4000, :2"]:
            with self.subTest(slice=sl):
                index = eval(f"np.s_[{sl}]")  # numpy's own parse of the same text
                self.check(self.inspect(self.path("big.npy"), sl), a[index], sl)

    def test_errors_where_numpy_raises(self):
        a = np.zeros((3, 4))
        np.save(self.path("a.npy"), a)
        for sl in ["0, 4", "-4", "3, 0", "0, 0, 0"]:
            with self.subTest(slice=sl):
                with self.assertRaises(IndexError):
                    a[eval(f"np.s_[{sl}]")]
                self.assert_fails(3, "inspect", self.path("a.npy"), "--slice", sl,
                                  match=r"^posenc: error: --slice '")
        with self.assertRaises(ValueError):
            a[::0]
        self.assert_fails(2, "inspect", self.path("a.npy"), "--slice", "::0",
                          match=r"--slice '::0': step is zero")
        self.assert_fails(2, "inspect", self.path("a.npy"), "--slice", "99999999999999999999",
                          match=r"outside the int64 range")
        p = run("inspect", self.path("a.npy"), "--slice", "0,0")
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    unittest.main()
