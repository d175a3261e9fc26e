"""posenc compare --by / --top: the per-group error table (one, two or more axes: per
(head, position, dim) with --by h,s,d), the worst group and elements, the table
written with -o in every format and drawn with --plot, checked against numpy computations
of the same statistics on a kernel output with planted errors (growing with position in
one head on a few dimension pairs)."""
import json
import os
import xml.dom.minidom

import numpy as np

from posenc_testlib import UNDER_ASAN, PosencTestCase, run, run_measured

RTOL, ATOL = 1e-5, 1e-6
COLUMNS = ["count", "mismatches", "max_abs", "max_rel", "max_ulp", "max_tol_ratio"]


def planted(shape=(2, 6, 512, 128), head=3, start=300, pairs=range(60, 64), seed=0):
    """b: a reference; a: b with an error growing with position from `start` in `head`
    on the neox pairs `pairs` (dims j and j + D/2), and 1-ulp noise elsewhere."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(shape).astype(np.float32)
    a = b.copy()
    noise = rng.random(shape) < 0.05
    a[noise] = np.nextafter(a[noise], np.float32(np.inf))
    half = shape[-1] // 2
    dims = [j for p in pairs for j in (p, p + half)]
    s = np.arange(start, shape[2])
    grow = (1e-5 * (s - start + 1) ** 1.5).astype(np.float32)
    for j in dims:
        a[:, head, start:, j] += grow[None, :] * np.float32(1.0 + 0.01 * j)
    return a, b


def f32_ulps(a, b):
    """Distance in float32 units in the last place: positions on the line of floats
    (sign-magnitude bits made two's complement), +0 and -0 the same point."""
    def line(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(line(a) - line(b)).astype(np.float64)


def stats(a, b, keys, ngroups):
    """numpy's statistics per group: keys[i] is the group of element i (flat)."""
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    d = np.abs(a64 - b64)
    bad = ~np.isclose(a64, b64, rtol=RTOL, atol=ATOL)
    rel = d / np.abs(b64)
    ulp = f32_ulps(a.ravel(), b.ravel())
    ratio = d / (ATOL + RTOL * np.abs(b64))
    out = np.zeros((ngroups, 6))
    out[:, 0] = np.bincount(keys, minlength=ngroups)
    out[:, 1] = np.bincount(keys, weights=bad, minlength=ngroups)
    for c, v in ((2, d), (3, rel), (4, ulp), (5, ratio)):
        m = np.full(ngroups, -1.0)
        np.maximum.at(m, keys, v)
        out[:, c] = m
    return out


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


class CompareBy(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.a, self.b = planted()
        self.pa, self.pb = self.npy("a.npy", self.a), self.npy("b.npy", self.b)

    def compare(self, *extra, status=1):
        p = run("compare", self.pa, self.pb, "--rtol", RTOL, "--atol", ATOL, *extra)
        self.assertEqual(p.returncode, status, p.stderr)
        return p

    def test_by_head_and_position_matches_numpy(self):
        j = json.loads(self.compare("--by", "h,s", "--json").stdout)
        by = j["by"]
        self.assertEqual(by["axes"], ["h", "s"])
        self.assertEqual(by["axis_numbers"], [1, 2])
        self.assertEqual(by["columns"], ["h", "s"] + COLUMNS)
        _, H, S, _ = self.a.shape
        idx = np.indices(self.a.shape)
        want = stats(self.a, self.b, (idx[1] * S + idx[2]).ravel(), H * S)
        rows = np.array(by["rows"], dtype=np.float64)
        self.assertEqual(rows.shape, (H * S, 8))
        np.testing.assert_array_equal(rows[:, 0], np.repeat(np.arange(H), S))
        np.testing.assert_array_equal(rows[:, 1], np.tile(np.arange(S), H))
        np.testing.assert_array_equal(rows[:, 2:4], want[:, 0:2])
        # Maxima are the same float64 operations, so equal; rel and ratio to 1 ulp.
        np.testing.assert_array_equal(rows[:, 4], want[:, 2])
        np.testing.assert_array_equal(rows[:, 6], want[:, 4])
        np.testing.assert_allclose(rows[:, 5], want[:, 3], rtol=1e-15)
        np.testing.assert_allclose(rows[:, 7], want[:, 5], rtol=1e-15)
        self.assertEqual(by["mismatches_at"]["h"], [[3, 3]])
        first = int(np.nonzero(want[3 * S:, 1])[0][0])
        self.assertEqual(by["mismatches_at"]["s"], [[first, S - 1]])
        self.assertGreaterEqual(first, 300)
        self.assertEqual(sum(r[3] for r in by["rows"]), j["mismatches"])

    def test_any_number_of_axes_matches_numpy(self):
        # Small enough that every (head, position, dim) group is a row of the JSON.
        a, b = planted(shape=(2, 4, 48, 16), head=2, start=30, pairs=range(5, 7), seed=3)
        pa, pb = self.npy("a3.npy", a), self.npy("b3.npy", b)
        B, H, S, D = a.shape
        idx = np.indices(a.shape)
        neox = idx[3] % (D // 2)
        for by, keys, sizes in (
                ("h,s,d", (idx[1] * S + idx[2]) * D + idx[3], (H, S, D)),
                ("s,pair,h", (idx[2] * (D // 2) + neox) * H + idx[1], (S, D // 2, H)),
                ("b,h,s,d", np.arange(a.size).reshape(a.shape), (B, H, S, D))):
            with self.subTest(by=by):
                p = run("compare", pa, pb, "--rtol", RTOL, "--atol", ATOL, "--by", by, "--json")
                self.assertEqual(p.returncode, 1, p.stderr)
                j = json.loads(p.stdout)["by"]
                names = by.split(",")
                self.assertEqual(j["columns"], names + COLUMNS)
                n = int(np.prod(sizes))
                want = stats(a, b, keys.ravel(), n)
                rows = np.array(j["rows"], dtype=np.float64)
                self.assertEqual(rows.shape, (n, len(names) + 6))
                # The axes' indices: C order over the axes as given, the last fastest.
                np.testing.assert_array_equal(rows[:, :len(names)],
                                              np.indices(sizes).reshape(len(sizes), -1).T)
                k = len(names)
                np.testing.assert_array_equal(rows[:, k:k + 3], want[:, 0:3])
                np.testing.assert_array_equal(rows[:, k + 4], want[:, 4])
                np.testing.assert_allclose(rows[:, k + 3], want[:, 3], rtol=1e-15)
                np.testing.assert_allclose(rows[:, k + 5], want[:, 5], rtol=1e-15)
                # The worst group as a tuple of its indices, the first of the largest ratio.
                worst = int(np.argmax(want[:, 5]))
                self.assertEqual(j["worst_group"]["index"],
                                 [int(i) for i in np.unravel_index(worst, sizes)])
                self.assertEqual(j["worst_group"]["mismatches"], want[worst, 1])
                self.assertEqual(j["groups_with_mismatches"], int(np.count_nonzero(want[:, 1])))
        # The text report names the worst (head, position, dim) as a tuple; -o writes the
        # same table; a picture of three axes is refused.
        want = stats(a, b, ((idx[1] * S + idx[2]) * D + idx[3]).ravel(), H * S * D)
        worst = int(np.argmax(want[:, 5]))
        h, s_, d = np.unravel_index(worst, (H, S, D))
        p = run("compare", pa, pb, "--rtol", RTOL, "--atol", ATOL, "--by", "h,s,d",
                "-o", self.path("t.npy"))
        self.assertEqual(p.returncode, 1, p.stderr)
        line = next(l for l in p.stdout.decode().splitlines() if l.startswith("groups with"))
        self.assertTrue(line.startswith(
            f"groups with mismatches: {np.count_nonzero(want[:, 1])} of {H * S * D}; "
            f"worst (h, s, d) = ({h}, {s_}, {d}): "
            f"{int(want[worst, 1])} of {int(want[worst, 0])} differ, ratio "), line)
        table = np.load(self.path("t.npy"))
        np.testing.assert_array_equal(table[:, 3:6], want[:, 0:3])
        self.assert_fails(2, "compare", pa, pb, "--by", "h,s,d", "--plot", self.path("x.png"),
                          match="--plot: draws a breakdown of one or two axes")
        self.assertFalse(os.path.exists(self.path("x.png")))

    def test_pairs_neox_and_gptj(self):
        D = self.a.shape[-1]
        for style, pair_of in (("neox", np.arange(D) % (D // 2)),
                               ("gptj", np.arange(D) // 2)):
            with self.subTest(style=style):
                j = json.loads(self.compare("--by", "pair", "--pairs", style, "--json").stdout)
                keys = np.broadcast_to(pair_of, self.a.shape).ravel()
                want = stats(self.a, self.b, keys, D // 2)
                rows = np.array(j["by"]["rows"])
                np.testing.assert_array_equal(rows[:, 0], np.arange(D // 2))
                np.testing.assert_array_equal(rows[:, 1:3], want[:, 0:2])
                np.testing.assert_array_equal(rows[:, 3], want[:, 2])
                hit = np.nonzero(want[:, 1])[0]
                if style == "neox":
                    self.assertEqual(j["by"]["mismatches_at"]["pair"], [[60, 63]])
                else:  # dims 60..63 and 124..127 are gptj pairs 30, 31, 62, 63
                    self.assertEqual(list(hit), [30, 31, 62, 63])
                    self.assertEqual(j["by"]["mismatches_at"]["pair"], [[30, 31], [62, 63]])

    def test_rotary_dim_pairs_and_passthrough(self):
        # neox with R = 64: dims < 64 pair j % 32; dims 64.. pair 32 + (j - 64) // 2.
        D, R = self.a.shape[-1], 64
        j_ = np.arange(D)
        pair_of = np.where(j_ < R, j_ % (R // 2), R // 2 + (j_ - R) // 2)
        j = json.loads(self.compare("--by", "pair", "--rotary-dim", R, "--json").stdout)
        keys = np.broadcast_to(pair_of, self.a.shape).ravel()
        want = stats(self.a, self.b, keys, R // 2 + (D - R) // 2)
        rows = np.array(j["by"]["rows"])
        np.testing.assert_array_equal(rows[:, 2], want[:, 1])

    def test_top_matches_numpy_ranking(self):
        j = json.loads(self.compare("--top", "25", "--json").stdout)
        a64, b64 = self.a.astype(np.float64).ravel(), self.b.astype(np.float64).ravel()
        d = np.abs(a64 - b64)
        ratio = d / (ATOL + RTOL * np.abs(b64))
        order = np.lexsort((np.arange(d.size), -d, -ratio))[:25]
        got = [np.ravel_multi_index(w["index"], self.a.shape) for w in j["worst"]]
        self.assertEqual(got, list(order))
        for w, k in zip(j["worst"], order):
            self.assertEqual((w["a"], w["b"]), (a64[k], b64[k]))
            self.assertEqual(w["tol_ratio"], ratio[k])
            self.assertEqual(w["mismatch"], bool(ratio[k] > 1))
        self.assertEqual(j["worst"][0]["index"][1], 3)  # head 3
        # Fewer mismatches than N: matching elements follow, marked as such.
        x = self.npy("x.npy", np.array([1.0, 2.0, 3.0], np.float32))
        y = self.npy("y.npy", np.array([1.0, 2.5, 3.0], np.float32))
        p = run("compare", x, y, "--top", "3")
        self.assertEqual(p.returncode, 1)
        lines = p.stdout.decode().splitlines()
        i = next(k for k, s in enumerate(lines) if s.startswith("worst 3 by"))
        self.assertIn("(1,): a = 2, b = 2.5", lines[i + 1])
        self.assertTrue(lines[i + 2].endswith("(matches)") and lines[i + 3].endswith("(matches)"))
        self.assertIn("(0,)", lines[i + 2])  # ties (ratio 0, |a - b| 0) in index order

    def test_text_report(self):
        out = self.compare("--by", "h").stdout.decode().splitlines()
        self.assertEqual(out[-1], "differ")
        self.assertIn("mismatches at: h 3", out)
        head = next(k for k, s in enumerate(out) if s.split()[:2] == ["h", "count"])
        self.assertEqual(len(out[head + 1:-1]), 6)  # one line per head
        self.assertEqual(out[head + 4].split()[0:1], ["3"])
        # A match keeps exit status 0 and reports no mismatches.
        p = run("compare", self.pb, self.pb, "--by", "s,d")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mismatches at: s none; d none", p.stdout.decode())

    def test_output_formats(self):
        import h5py
        j = json.loads(self.compare("--by", "b,h", "--json").stdout)
        want = np.array(j["by"]["rows"], dtype=np.float64)
        cols = ",".join(j["by"]["columns"])
        self.compare("--by", "b,h", "-o", self.path("t.npy"))
        np.testing.assert_array_equal(np.load(self.path("t.npy")), want)
        self.compare("--by", "b,h", "-o", self.path("t.h5") + ":/err/bh")
        with h5py.File(self.path("t.h5"), "r") as f:
            np.testing.assert_array_equal(f["err/bh"][...], want)
            self.assertEqual(f["err/bh"].attrs["columns"], cols)
            self.assertEqual(f["err/bh"].attrs["by"], "b,h")
        self.compare("--by", "b,h", "-o", self.path("t.csv"))
        text = read(self.path("t.csv")).splitlines()
        data = [l for l in text if not l.startswith("#")]
        got = np.array([[float(x) for x in l.split(",")] for l in data if l[0].isdigit()])
        np.testing.assert_array_equal(got, want)
        self.compare("--by", "b,h", "-o", self.path("t.json"))
        with open(self.path("t.json")) as f:
            tj = json.load(f)
        self.assertEqual(tj["shape"], list(want.shape))
        np.testing.assert_array_equal(np.array(tj["data"], dtype=np.float64).reshape(want.shape),
                                      want)
        # A pair axis records the pairing; -q writes the table and prints nothing.
        p = run("-q", "compare", self.pa, self.pb, "--by", "pair", "--pairs", "gptj",
                "-o", self.path("t.h5") + ":/pairs")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (1, b"", ""))
        with h5py.File(self.path("t.h5"), "r") as f:
            self.assertEqual(f["pairs"].attrs["pairs"], "gptj")
            self.assertEqual(f["pairs"].shape, (64, 7))
            self.assertIn("err/bh", f)
        # -o - puts the table on stdout and the report on stderr.
        p = self.compare("--by", "h", "-o", "-")
        self.assertTrue(p.stdout.startswith(b"\x93NUMPY"))
        self.assertIn("mismatches at: h 3", p.stderr)

    def test_plot_files(self):
        for name in ("err.png", "err.svg"):
            with self.subTest(name=name):
                p = self.compare("--by", "s,pair", "--plot", self.path(name))
                self.assertNotIn("count", p.stdout.decode())  # table not printed
                data = read(self.path(name), "rb")
                if name.endswith(".png"):
                    self.assertTrue(data.startswith(b"\x89PNG\r\n\x1a\n"))
                    self.assertIn(b"IEND", data[-16:])
                else:
                    xml.dom.minidom.parseString(data)
        self.compare("--by", "s", "--plot", self.path("curve.png"))
        self.assertTrue(read(self.path("curve.png"), "rb").startswith(b"\x89PNG"))
        # The terminal drawing.
        p = self.compare("--by", "s", "--plot", "-", "--color", "never")
        self.assertIn("largest |a - b| by s", p.stdout.decode())
        # No difference at all still draws (no log scale then).
        p = run("compare", self.pb, self.pb, "--by", "h,s", "--plot", self.path("zero.png"))
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_bad_values(self):
        before = sorted(os.listdir(self.tmp))
        a, b = self.pa, self.pb
        for args in (["--by", "x"], ["--by", "h,h"], ["--by", "h,s,h"], ["--by", ""],
                     ["--by", "s,2"], ["--by", "d,pair"], ["--by", "h", "--top", "0"],
                     ["--by", "h", "--top", "-1"], ["--by", "h", "--top", "2000000"],
                     ["--by", "h", "--pairs", "rotate"], ["--by", "h", "--pairs", "neox"],
                     ["-o", self.path("t.npy")], ["--plot", self.path("t.png")],
                     ["--axes", "bhsd"], ["--by", "h", "--axes", "bhsx"],
                     ["--by", "h", "-o", "-", "--plot", "-"],
                     ["--by", "pair", "--rotary-dim", "7"], ["--by", "pair", "--rotary-dim", "0"],
                     ["--by", "s,d", "-o", self.path("t.npy")],  # 65536 rows: fine
                     ):
            with self.subTest(args=args):
                if args[-1] == self.path("t.npy") and args[1] == "s,d":
                    self.compare(*args)
                    os.remove(self.path("t.npy"))
                    continue
                self.assert_fails(2, "compare", a, b, *args)
        for args in (["--by", "9"], ["--by", "-5"], ["--by", "h", "--axes", "bsd"],
                     ["--by", "pair", "--rotary-dim", "130"], ["--by", "pair", "--slice", "...,:64"]):
            with self.subTest(args=args):
                self.assert_fails(3, "compare", a, b, *args)
        self.assert_no_new_files(before)
        v = self.npy("v.npy", np.zeros(5, np.float32))
        self.assert_fails(3, "compare", v, v, "--by", "s", match="has no axis 's'")
        self.assert_fails(3, "compare", v, v, "--by", "pair", match="even extent")
        self.assert_fails(2, "compare", a, b, "--by", "h,h", match="--by: axis 'h' is named twice")

    def test_slice_reports_a_coordinates(self):
        j = json.loads(self.compare("--by", "s", "--slice", "0,3,400:420", "--json").stdout)
        rows = np.array(j["by"]["rows"])
        np.testing.assert_array_equal(rows[:, 0], np.arange(400, 420))
        sel_a, sel_b = self.a[0, 3, 400:420], self.b[0, 3, 400:420]
        bad = ~np.isclose(sel_a.astype(np.float64), sel_b.astype(np.float64), rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(rows[:, 2], bad.sum(axis=1))
        # --top reports A's indices too.
        j = json.loads(self.compare("--top", "1", "--slice", "0,3,400:420", "--json").stdout)
        d = np.abs(sel_a.astype(np.float64) - sel_b.astype(np.float64))
        ratio = d / (ATOL + RTOL * np.abs(sel_b.astype(np.float64)))
        s, k = np.unravel_index(np.argmax(ratio), ratio.shape)
        self.assertEqual(j["worst"][0]["index"], [0, 3, 400 + int(s), int(k)])

    def test_shapes_differ(self):
        c = self.npy("c.npy", self.b[:, :, :10])
        before = sorted(os.listdir(self.tmp))
        p = run("compare", self.pa, c, "--by", "h", "--top", "2", "--json", "-o",
                self.path("t.npy"))
        self.assertEqual(p.returncode, 1, p.stderr)
        j = json.loads(p.stdout)
        self.assertFalse(j["shapes_equal"])
        self.assertNotIn("by", j)
        self.assertEqual(j["worst"], [])
        self.assert_no_new_files(before)


class CompareByStreamed(PosencTestCase):
    def test_several_slabs_any_thread_count_and_stdin(self):
        # 49 MB a side: several 16 MiB slabs (along h), so the breakdown spans slabs.
        a, b = planted(shape=(1, 16, 3000, 256), head=5, start=2000, pairs=range(120, 124),
                       seed=2)
        pa, pb = self.npy("a.npy", a), self.npy("b.npy", b)
        outs = []
        for threads in ("1", "2"):
            rc, out, err, rss = run_measured("-j", threads, "compare", pa, pb, "--rtol", RTOL,
                                             "--atol", ATOL, "--by", "h,pair", "--top", "5",
                                             "--json")
            self.assertEqual(rc, 1, err)
            # Two slabs and the program, against 98 MB of input (RSS means nothing
            # under AddressSanitizer).
            self.assertTrue(UNDER_ASAN or rss < 64 * 1024, rss)
            outs.append(out)
        self.assertEqual(outs[0], outs[1])
        j = json.loads(outs[0])
        idx = np.indices(a.shape)
        want = stats(a, b, (idx[1] * 128 + idx[3] % 128).ravel(), 16 * 128)
        rows = np.array(j["by"]["rows"])
        np.testing.assert_array_equal(rows[:, 2:5], want[:, 0:3])
        np.testing.assert_allclose(rows[:, 7], want[:, 5], rtol=1e-15)
        self.assertEqual(j["by"]["mismatches_at"], {"h": [[5, 5]], "pair": [[120, 123]]})
        self.assertTrue(all(w["index"][1] == 5 and w["index"][2] >= 2000 for w in j["worst"]))
        with open(pa, "rb") as f:
            p = run("compare", "-", pb, "--rtol", RTOL, "--atol", ATOL, "--by", "h,pair",
                    "--top", "5", "--json", stdin=f.read())
        self.assertEqual(p.returncode, 1, p.stderr)
        js = json.loads(p.stdout)
        self.assertEqual((js["by"], js["worst"]), (j["by"], j["worst"]))


if __name__ == "__main__":
    import unittest
    unittest.main()
