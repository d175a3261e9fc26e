"""Text encodings: CSV/TSV/JSON round trips checked with Python's own parsers, the
readable table, and malformed text input."""
import json
import math
import re
import unittest

import numpy as np

from posenc_testlib import PosencTestCase


def sig_digits(s):
    """Significant digits in a decimal float text ('1.25e-05' -> 3)."""
    mant = re.split(r"[eE]", s)[0].lstrip("+-").replace(".", "").lstrip("0")
    return len(mant.rstrip("0")) or 1


def from_json(v):
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
    return v


class TextOutput(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(11)
        vals = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200),
                               [0.1, 1 / 3, 1e-45, 3.4028235e38, -0.0, 16777217.0]])
        self.f32 = vals.astype(np.float32)
        self.f64 = rng.standard_normal((20, 7)) * 1e5
        np.save(self.path("f32.npy"), self.f32)
        np.save(self.path("f64.npy"), self.f64)

    def convert(self, src, dst, *extra):
        self.run_ok("convert", self.path(src), "-o", self.path(dst), *extra)
        with open(self.path(dst)) as fh:
            return fh.read()

    def test_csv_f32_is_exact_and_shortest(self):
        lines = self.convert("f32.npy", "f32.csv").splitlines()
        self.assertEqual(len(lines), self.f32.size)  # rank 1: one value per line
        for text, v in zip(lines, self.f32):
            # Reads back as the same float32, with no more digits than numpy's shortest
            # float32 repr (a widened double would need up to 17).
            self.assertEqual(np.float32(float(text)).tobytes(), v.tobytes(), text)
            self.assertLessEqual(sig_digits(text),
                                 sig_digits(np.format_float_scientific(v, unique=True)), text)

    def test_tsv_f64_grid_exact(self):
        lines = self.convert("f64.npy", "f64.tsv").splitlines()
        grid = np.array([[float(x) for x in ln.split("\t")] for ln in lines])
        np.testing.assert_array_equal(grid, self.f64)

    def test_nonfinite_csv_and_json(self):
        a = np.array([[1.5, np.nan], [np.inf, -np.inf]], dtype=np.float32)
        np.save(self.path("nf.npy"), a)
        csv = self.convert("nf.npy", "nf.csv")
        self.assertEqual(csv, "1.5,nan\ninf,-inf\n")
        got = np.array([[float(x) for x in ln.split(",")] for ln in csv.splitlines()])
        np.testing.assert_array_equal(got, a)
        j = json.loads(self.convert("nf.npy", "nf.json"))  # strict JSON: no bare NaN
        self.assertEqual(j["shape"], [2, 2])
        self.assertEqual(j["dtype"], "f32")
        self.assertEqual(j["data"][0][1], "NaN")
        got = np.array([[from_json(v) for v in row] for row in j["data"]])
        np.testing.assert_array_equal(got, a)

    def test_json_any_rank_ints_and_bools(self):
        i = np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]).reshape(3, 1, 1)
        np.save(self.path("i.npy"), i)
        j = json.loads(self.convert("i.npy", "i.json"))
        self.assertEqual(j["dtype"], "i64")
        self.assertEqual(np.array(j["data"]).tolist(), i.tolist())
        b = np.array([True, False])
        np.save(self.path("b.npy"), b)
        self.assertEqual(json.loads(self.convert("b.npy", "b.json"))["data"], [True, False])
        self.assertEqual(self.convert("b.npy", "b.csv"), "1\n0\n")

    def test_csv_refuses_rank_3(self):
        np.save(self.path("r3.npy"), np.zeros((2, 2, 2)))
        self.assert_fails(2, "convert", self.path("r3.npy"), "-o", self.path("r3.csv"),
                          match=r"r3\.csv.*\(2, 2, 2\)")
        self.assert_no_new_files(["f32.npy", "f64.npy", "r3.npy"])

    def test_text_table(self):
        a = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
        np.save(self.path("t.npy"), a)
        out = self.run_ok("convert", self.path("t.npy"), "-o", "-", "--to", "text").stdout.decode()
        self.assertIn("[1, :, :]", out)
        rows = [ln.split() for ln in out.splitlines() if re.match(r"^\d+\s", ln)]
        # Each data row: its row index then the values of that row.
        values = [int(x) for r in rows for x in r[1:]]
        self.assertEqual(values, a.ravel().tolist())
        big = np.arange(100 * 100, dtype=np.float64).reshape(100, 100)
        np.save(self.path("big.npy"), big)
        out = self.run_ok("convert", self.path("big.npy"), "-o", "-", "--to", "text").stdout.decode()
        self.assertIn("showing the first and last 3", out)
        self.assertLess(len(out.splitlines()), 12)
        self.assertIn("9999", out)

    def test_text_vector_wraps_at_80_columns(self):
        """A rank-1 tensor too wide for one 80-column row is wrapped, each line led by the
        index of its first value (numpy prints such vectors wrapped too); a short one is
        still one row under its indices."""
        v = np.arange(100, dtype=np.float64) * 1.25 - 7
        np.save(self.path("v.npy"), v)
        out = self.run_ok("convert", self.path("v.npy"), "-o", "-", "--to", "text").stdout.decode()
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^# shape \(100,\), f64, (\d+) values a line, led by the "
                         r"first one's index$")
        per_line = int(re.search(r"f64, (\d+) values", lines[0]).group(1))
        self.assertGreater(per_line, 1)
        self.assertTrue(all(len(ln) <= 80 for ln in lines), lines)  # the header too
        got = []
        for ln in lines[1:]:
            first, *values = ln.split()
            self.assertEqual(int(first), len(got))
            self.assertLessEqual(len(values), per_line)
            got += [float(x) for x in values]
        self.assertEqual(got, v.tolist())
        # Of a slice, the lines are led by the tensor's own indices.
        out = self.run_ok("inspect", self.path("v.npy"), "--slice", "3:100:2").stdout.decode()
        rows = [ln.split() for ln in out.split("values\n", 1)[1].splitlines() if ln.strip()]
        self.assertEqual(int(rows[0][0]), 3)
        self.assertEqual(float(rows[0][1]), v[3])
        self.assertEqual(int(rows[1][0]), 3 + 2 * (len(rows[0]) - 1))
        self.assertEqual(float(rows[1][1]), v[int(rows[1][0])])
        # Short: one row under a header of indices.
        np.save(self.path("s.npy"), np.array([0.5, 0.25, 0.125]))
        out = self.run_ok("convert", self.path("s.npy"), "-o", "-", "--to", "text").stdout.decode()
        self.assertEqual(out, "# shape (3,), f64\n     0     1      2\n0  0.5  0.25  0.125\n")


class TextInput(PosencTestCase):
    def write(self, name, text):
        with open(self.path(name), "w") as fh:
            fh.write(text)
        return self.path(name)

    def to_npy(self, src):
        out = self.path("out.npy")
        self.run_ok("convert", src, "-o", out)
        return np.load(out)

    def test_csv_tsv_parse_like_python(self):
        text = "# header\n0.1,-2e-308,1e308\n+3,nan,-inf\n"
        got = self.to_npy(self.write("a.csv", text))
        self.assertEqual(got.dtype, np.float64)
        expect = np.array([[0.1, -2e-308, 1e308], [3.0, np.nan, -np.inf]])
        np.testing.assert_array_equal(got, expect)
        got = self.to_npy(self.write("a.tsv", "1\t2\r\n3\t4\r\n"))
        np.testing.assert_array_equal(got, [[1.0, 2.0], [3.0, 4.0]])
        got = self.to_npy(self.write("c.csv", "5\n6\n7\n"))
        self.assertEqual(got.shape, (3,))

    def test_json_input_keeps_dtype_and_shape(self):
        src = self.write("a.json", json.dumps(
            {"shape": [2, 2], "dtype": "f32", "data": [[0.1, "NaN"], ["-Infinity", 2]]}))
        got = self.to_npy(src)
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, np.array([[0.1, np.nan], [-np.inf, 2]], np.float32))

    def test_malformed_text_input(self):
        cases = [
            ("r.csv", "1,2,3\n4,5\n", r"r\.csv: line 2 has 2 values, line 1 has 3"),
            ("n.csv", "1,2\n3,abc\n", r"n\.csv: line 2, column 3: 'abc' is not a number"),
            ("e.csv", "1,,2\n", r"e\.csv: line 1, column 3: empty value"),
            ("j.json", '{"data": [[1, 2], [3]]}', r"j\.json: \"data\"\[1\]: expected a list of 2"),
            ("s.json", '{"data": [1, "x"]}', r"s\.json: .*\"x\" is not a number"),
            ("b.json", '{"data": [1, 2', r"b\.json: invalid JSON"),
        ]
        for name, text, pattern in cases:
            with self.subTest(name=name):
                self.assert_fails(3, "convert", self.write(name, text), "-o",
                                  self.path("out.npy"), match=pattern)


if __name__ == "__main__":
    unittest.main()
