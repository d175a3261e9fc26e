"""--slice on convert and compare, index lists in the slice syntax, inspect's labels and
a piped producer drained by a consumer that needs part of it.

References: numpy indexing (basic slicing, and np.ix_ for the per-axis index lists),
np.load / np.isclose / np.unravel_index; never posenc's own earlier output.
"""
import json
import os
import random
import subprocess
import unittest

import numpy as np

from posenc_testlib import BIN, PosencTestCase, run


def numpy_index(text):
    """numpy's own parse of a --slice text as a tuple of per-axis entries (brackets
    around the whole text are numpy's a[...])."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        depth = 0
        for i, c in enumerate(t):
            depth += {"[": 1, "]": -1}.get(c, 0)
            if depth == 0:
                break
        if i == len(t) - 1:
            t = t[1:-1]
    index = eval(f"np.s_[{t},]") if t else ()
    return index


def outer(a, index):
    """a[index] where every list picks entries of its own axis independently."""
    # Expand "..." to whole axes, then apply each entry on its own axis, right to left so
    # that dropped axes do not shift the ones still to come.
    n_explicit = sum(1 for i in index if i is not Ellipsis)
    full = []
    for i in index:
        if i is Ellipsis:
            full += [slice(None)] * (a.ndim - n_explicit)
        else:
            full.append(i)
    full += [slice(None)] * (a.ndim - len(full))
    out = a
    for ax in reversed(range(a.ndim)):
        i = full[ax]
        sl = [slice(None)] * out.ndim
        if isinstance(i, list):
            out = np.take(out, np.array(i, dtype=np.int64), axis=ax)
        else:
            sl[ax] = i
            out = out[tuple(sl)]
    return out


def random_list_slice(rnd, shape):
    """A slicing text with ints, ranges and index lists for `shape`."""
    parts = []
    for n in shape:
        r = rnd.random()
        if r < 0.4 and n > 0:
            k = rnd.randint(0, 4)
            parts.append("[" + ",".join(str(rnd.randint(-n, n - 1)) for _ in range(k)) + "]")
        elif r < 0.55 and n > 0:
            parts.append(str(rnd.randint(-n, n - 1)))
        else:
            step = rnd.choice(["", ":2", ":-1", ":3"])
            parts.append(f"{rnd.choice(['', '1', '-2'])}:{rnd.choice(['', '5', '-1'])}{step}")
    if not parts:
        return "..."
    text = ",".join(parts)
    # A text that is one bracketed list would be read as numpy's a[...] brackets: wrap it.
    return f"[{text}]" if text.startswith("[") and text.index("]") == len(text) - 1 else text


class ConvertSlice(PosencTestCase):
    def test_basic_slices_match_numpy(self):
        rng = np.random.default_rng(1)
        a = rng.standard_normal((4, 5, 6)).astype(np.float32)
        src = self.npy("a.npy", a)
        for sl in ["0", "1:3", "::-1, 2", "..., ::2", "-1, -1, -1", "1:1", "0, :, [5,0,5]",
                   "[3,0], 1:4, [1,3]", "1, [1,4], 0", "[], 0", "[[2, 0, 2]]"]:
            with self.subTest(slice=sl):
                out = self.path("out.npy")
                self.run_ok("convert", src, "--slice", sl, "-o", out)
                want = outer(a, numpy_index(sl))
                got = np.load(out)
                self.assertEqual(got.shape, want.shape)
                self.assertEqual(got.dtype, want.dtype)
                np.testing.assert_array_equal(got, want)

    def test_random_list_slices_and_dtype(self):
        rnd = random.Random(7)
        rng = np.random.default_rng(7)
        for k in range(6):
            shape = tuple(int(s) for s in rng.integers(1, 6, 1 + k % 4))
            a = rng.standard_normal(shape)
            src = self.npy(f"a{k}.npy", a)
            for _ in range(8):
                sl = random_list_slice(rnd, shape)
                with self.subTest(shape=shape, slice=sl):
                    out = self.path("o.npy")
                    self.run_ok("convert", src, "--slice", sl, "--dtype", "f32", "-o", out)
                    want = outer(a, numpy_index(sl)).astype(np.float32)
                    got = np.load(out)
                    self.assertEqual(got.shape, want.shape, sl)
                    np.testing.assert_array_equal(got, want, err_msg=sl)

    def test_many_slabs_from_a_pipe_and_to_hdf5(self):
        # 18 MB [1, 4200, 1100] f32 streams along axis 1 in 16 MiB slabs.
        rng = np.random.default_rng(3)
        a = rng.standard_normal((1, 4200, 1100)).astype(np.float32)
        src = self.npy("big.npy", a)
        sl = "0, [4100, 3, 17, 4100], 5:9"
        self.run_ok("convert", src, "--slice", sl, "-o", self.path("f.npy"))
        np.testing.assert_array_equal(np.load(self.path("f.npy")), outer(a, numpy_index(sl)))
        with open(src, "rb") as f:
            data = f.read()
        # A stream goes forward only: an increasing list works (repeats too) ...
        sl = "0, [3, 17, 4100, 4100], 5:9"
        p = run("convert", "-", "--slice", sl, "-o", self.path("p.npy"), stdin=data)
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_array_equal(np.load(self.path("p.npy")), outer(a, numpy_index(sl)))
        # ... and one that goes back further than a slab is an input error.
        self.assert_fails(3, "convert", "-", "--slice", "0, [4100, 3]", "-o",
                          self.path("q.npy"), stdin=data,
                          match=r"stream, read forward only, .* goes back to entry 3 of axis 1 "
                                r"after entry 4100: put the index list in increasing order")
        self.assertFalse(os.path.exists(self.path("q.npy")))
        self.run_ok("convert", src, "--slice", "0, ::-7, [1, 0]", "-o", self.path("o.h5:/x"))
        import h5py
        with h5py.File(self.path("o.h5"), "r") as f:
            np.testing.assert_array_equal(f["x"][...], a[0, ::-7][:, [1, 0]])

    def test_text_output_of_a_slice(self):
        a = np.arange(12.0).reshape(3, 4)
        src = self.npy("a.npy", a)
        self.run_ok("convert", src, "--slice", "[2,0], 1:3", "-o", self.path("o.csv"))
        np.testing.assert_array_equal(np.loadtxt(self.path("o.csv"), delimiter=","),
                                      a[[2, 0]][:, 1:3])

    def test_errors(self):
        src = self.npy("a.npy", np.zeros((3, 4)))
        before = os.listdir(self.tmp)
        out = self.path("out.npy")
        for sl, status, pattern in [
            ("0, 4", 3, r"--slice '0, 4': index 4 is out of range for axis 1 with size 4 "
                        r"\(.*a\.npy has shape \(3, 4\)\)"),
            ("0, [1, -5]", 3, r"index -5 is out of range for axis 1 with size 4"),
            ("0, [1, 9223372036854775807]", 3, r"out of range"),
            ("0, [1, 99999999999999999999]", 2, r"outside the int64 range"),
            ("0, [1, 2", 2, r"--slice '0, \[1, 2': '\[' without '\]'"),
            ("0, 1]", 2, r"'\]' without '\['"),
            ("0, [[1]]", 2, r"nested"),
            ("0, [1:2]", 2, r"lists hold integers"),
            ("0, [1,,2]", 2, r"empty entry"),
            ("0, x[1]", 2, r"bad axis"),
            ("0, 0, 0", 3, r"3 axes given for shape \(3, 4\) \("),
            ("[0, 1, 2]", 3, r"3 axes given .*write a list on the first axis as \[\[i,j,\.\.\.\]\]"),
            ("::0", 2, r"step is zero"),
        ]:
            with self.subTest(slice=sl):
                self.assert_fails(status, "convert", src, "--slice", sl, "-o", out, match=pattern)
                self.assert_no_new_files(before)


class CompareSlice(PosencTestCase):
    def test_indices_are_in_a(self):
        rng = np.random.default_rng(5)
        a = rng.standard_normal((3, 6, 8))
        b = a.copy()
        b[2, 4, 7] += 1.0   # inside the slice below
        b[2, 1, 3] += 0.5   # inside too, smaller
        b[0, 0, 0] += 9.0   # outside: must not count
        pa, pb = self.npy("a.npy", a), self.npy("b.npy", b)
        sl = "2, [1, 4, 5], 3:"
        p = run("compare", pa, pb, "--slice", sl, "--json")
        self.assertEqual(p.returncode, 1, p.stderr)
        j = json.loads(p.stdout)
        sa, sb = outer(a, numpy_index(sl)), outer(b, numpy_index(sl))
        close = np.isclose(sa, sb, rtol=1e-7, atol=1e-7)
        self.assertEqual(j["total"], sa.size)
        self.assertEqual(j["mismatches"], int((~close).sum()))
        self.assertEqual(j["a"]["slice_shape"], list(sa.shape))
        # The selection's flat index, mapped back to a's coordinates by hand.
        rows, cols = [1, 4, 5], list(range(3, 8))
        d = np.abs(sa - sb)
        r, c = np.unravel_index(np.argmax(d), d.shape)
        self.assertEqual(j["max_abs_diff_index"], [2, rows[r], cols[c]])
        r, c = np.unravel_index(np.argmin(close), close.shape)
        self.assertEqual(j["first_mismatch_index"], [2, rows[r], cols[c]])
        self.assertEqual(j["first_mismatch_index"], [2, 1, 3])
        self.assertEqual(j["max_abs_diff_index"], [2, 4, 7])
        # Text report: the same index.
        p = run("compare", pa, pb, "--slice", sl)
        self.assertEqual(p.returncode, 1)
        self.assertIn("max abs diff: 1", p.stdout.decode())
        self.assertIn("at (2, 4, 7)", p.stdout.decode())
        # The part without differences matches.
        p = run("compare", pa, pb, "--slice", "1")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr)

    def test_different_shapes_same_selection(self):
        # A long table against a short reference: both sliced the same way.
        a = np.arange(40.0).reshape(10, 4)
        pa, pb = self.npy("a.npy", a), self.npy("b.npy", a[:3])
        self.assertEqual(run("compare", pa, pb).returncode, 1)
        p = run("compare", pa, pb, "--slice", ":3, [3, 0]")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr)
        # Negative indices resolve against each side's own shape.
        p = run("compare", pa, pb, "--slice", "-1", "--json")
        self.assertEqual(p.returncode, 1)
        j = json.loads(p.stdout)
        self.assertTrue(j["shapes_equal"])
        self.assertEqual(j["first_mismatch_index"], [9, 0])

    def test_errors(self):
        pa = self.npy("a.npy", np.zeros((3, 4)))
        pb = self.npy("b.npy", np.zeros((5, 4)))
        self.assert_fails(3, "compare", pa, pb, "--slice", "4",
                          match=r"--slice '4': index 4 is out of range for axis 0 with size 3 "
                                r"\(.*a\.npy has shape \(3, 4\)\)")
        self.assert_fails(3, "compare", pb, pa, "--slice", "[[0, 3]]",
                          match=r"index 3 is out of range .*a\.npy has shape")
        self.assert_fails(2, "compare", pa, pb, "--slice", "[0,")


class InspectLists(PosencTestCase):
    def test_lists_match_ix(self):
        a = np.arange(2 * 5 * 6, dtype=np.int64).reshape(2, 5, 6)
        src = self.npy("a.npy", a)
        for sl, want in [("1,[1,4],0", a[1][[1, 4], 0]),
                         ("[1,0,1], [4,-1], [0, 5, 2]", a[np.ix_([1, 0, 1], [4, -1], [0, 5, 2])]),
                         ("..., [-1, 0]", a[..., [-1, 0]]),
                         ("[], 0", a[[], 0])]:
            with self.subTest(slice=sl):
                j = json.loads(self.run_ok("inspect", src, "--json", "--slice", sl).stdout)
                self.assertEqual(j["slice_shape"], list(want.shape))
                self.assertEqual(j["values"], want.ravel().tolist())

    def test_rows_carry_their_own_indices(self):
        a = np.arange(8 * 6, dtype=np.int64).reshape(8, 6) * 10
        src = self.npy("a.npy", a)
        out = self.run_ok("inspect", src, "--slice", "5:8, [4, 1]").stdout.decode()
        grid = out[out.index("values"):].splitlines()[1:]
        self.assertEqual(grid[0].split(), ["4", "1"])             # column labels
        self.assertEqual([g.split()[0] for g in grid[1:]], ["5", "6", "7"])  # row labels
        self.assertEqual(grid[1].split()[1:], [str(a[5, 4]), str(a[5, 1])])
        # 3-D: the heading names the real index of the leading axis.
        b = np.arange(4 * 2 * 3).reshape(4, 2, 3)
        out = self.run_ok("inspect", self.npy("b.npy", b), "--slice", "[[3, 1]]").stdout.decode()
        self.assertIn("[3, :, :]", out)
        self.assertIn("[1, :, :]", out)
        self.assertNotIn("[0, :, :]", out)
        # --stats argmax: the tensor's own index.
        j = json.loads(self.run_ok("inspect", src, "--json", "--stats", "--slice", "2:5, ::-2")
                       .stdout)
        self.assertEqual(j["stats"]["argmax"], [4, 5])
        self.assertEqual(j["stats"]["argmin"], [2, 1])


class PlotLists(PosencTestCase):
    def test_heatmap_needs_even_spacing(self):
        src = self.npy("a.npy", np.arange(60.0).reshape(3, 4, 5))
        self.assert_fails(2, "plot", src, "--slice", "0,[3,0,1],:", "-o", self.path("h.svg"),
                          match=r"--slice: a heatmap needs evenly spaced indices")
        self.assertFalse(os.path.exists(self.path("h.svg")))
        # An evenly spaced list is a range: the heatmap is drawn.
        self.run_ok("plot", src, "--slice", "0,[3,1],:", "-o", self.path("h.svg"))
        self.assertGreater(os.path.getsize(self.path("h.svg")), 0)


class PipeDrain(PosencTestCase):
    def pipe(self, producer, consumer):
        p1 = subprocess.Popen([BIN, *producer], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p2 = subprocess.Popen([BIN, *consumer], stdin=p1.stdout, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        p1.stdout.close()
        out2, err2 = p2.communicate(timeout=300)
        err1 = p1.stderr.read()
        p1.wait(timeout=300)
        p1.stderr.close()
        return p1.returncode, err1.decode(), p2.returncode, out2, err2.decode()

    def test_consumer_of_one_row_drains_the_producer(self):
        # 4096 x 512 f32 = 8 MiB through the pipe; inspect needs row 0 only.
        rc1, err1, rc2, out, err2 = self.pipe(
            ["table", "rope", "--positions", "4096", "--dim", "512", "--emit", "cos", "-o", "-"],
            ["inspect", "-", "--slice", "0, :4", "--json"])
        self.assertEqual((rc1, err1), (0, ""))
        self.assertEqual((rc2, err2), (0, ""))
        self.assertEqual(json.loads(out)["values"], [1.0, 1.0, 1.0, 1.0])

    def test_compare_of_different_shapes_drains(self):
        ref = self.npy("ref.npy", np.zeros((3, 3), dtype=np.float32))
        rc1, err1, rc2, out, err2 = self.pipe(
            ["table", "rope", "--positions", "4096", "--dim", "512", "--emit", "cos", "-o", "-"],
            ["compare", "-", ref])
        self.assertEqual((rc1, err1), (0, ""))
        self.assertEqual(rc2, 1, err2)
        self.assertIn("shapes differ", out.decode())


if __name__ == "__main__":
    unittest.main()
