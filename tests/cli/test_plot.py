"""`posenc plot` and `analyze --plot`: pictures checked by decoding them.

- PNG (decoded with Debian's python3-pil): image size; the colour at the centre of every
  heatmap cell equals the documented colour map (control points interpolated linearly
  in sRGB, rounded) at entry floor(t * 256) of its 256-entry table, t the value's
  position in the colour range (±1 per channel); blank cells grey; line colours.
- SVG parsed as XML: the svg root with the requested size, a raster image for the
  heatmap, glyphs for the text, strokes in the series colours.
- PDF: a PDF without /CreationDate.
- Determinism: the same bytes from two runs (a second apart) for PNG, SVG and PDF.
- Terminal, under a pseudo-terminal of a set size: 24-bit colour escapes with the
  colour map's exact colours for known cells, half blocks / braille, lines fitting the
  window; plain ASCII with NO_COLOR and TERM=dumb, and when standard output is a pipe.
- Errors: one line, documented status, no partial file, an existing file untouched.
"""
import fcntl
import math
import os
import pty
import re
import struct
import subprocess
import termios
import time
import unittest
import xml.etree.ElementTree as ET

import numpy as np
from PIL import Image

from posenc_testlib import BIN, PosencTestCase

DIVERGING = [0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7, 0xfddbc7, 0xf4a582,
             0xd6604d, 0xb2182b, 0x67001f]
SEQUENTIAL = [0x440154, 0x482878, 0x3e4989, 0x31688e, 0x26828e, 0x1f9e89, 0x35b779, 0x6ece58,
              0xb5de2b, 0xfde725]
PALETTE = [0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728]
BLANK = (200, 200, 200)


def rgb(h):
    return ((h >> 16) & 255, (h >> 8) & 255, h & 255)


def cmap(points, t):
    """The documented colour map: linear in sRGB between evenly spaced points."""
    t = min(max(t, 0.0), 1.0)
    pos = t * (len(points) - 1)
    i = min(int(pos), len(points) - 2)
    f = pos - i
    a, b = rgb(points[i]), rgb(points[i + 1])
    return tuple(int(math.floor(x + (y - x) * f + 0.5)) for x, y in zip(a, b))


def image_color(points, t):
    """What a PNG shows: entry floor(t * 256) of the 256-entry table."""
    return cmap(points, min(int(t * 256), 255) / 255)


def frame(img):
    """Pixel bounds (left, top, right, bottom) of the heatmap: the rows and columns left
    of the colour bar that are (almost) entirely non-white (no map colour is white)."""
    a = np.asarray(img.convert("RGB")).astype(int)
    h, w, _ = a.shape
    ink = (a.min(axis=2) < 250)[:, : int(w * 0.85)]
    rows = np.where(ink.sum(axis=1) > 0.6 * w * 0.74)[0]
    top, bottom = rows.min(), rows.max()
    cols = np.where(ink[top:bottom + 1].sum(axis=0) > 0.95 * (bottom - top))[0]
    right = cols.min()
    while right + 1 in cols:
        right += 1
    return cols.min(), top, right, bottom


def cell_colors(img, nrows, ncols):
    left, top, right, bottom = frame(img)
    a = np.asarray(img.convert("RGB")).astype(int)
    out = np.zeros((nrows, ncols, 3), int)
    for r in range(nrows):
        for c in range(ncols):
            x = int(left + (c + 0.5) * (right - left) / ncols)
            y = int(top + (r + 0.5) * (bottom - top) / nrows)
            out[r, c] = a[y, x]
    return out


def run_pty(args, env=None, size=(30, 100)):
    """Runs posenc with standard output on a pseudo-terminal of size (rows, cols)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    full = dict(os.environ)
    full.pop("NO_COLOR", None)
    full.update({"TERM": "xterm-256color"})
    full.update(env or {})
    p = subprocess.Popen([BIN, *map(str, args)], stdout=slave, stderr=subprocess.PIPE,
                         env=full)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = p.stderr.read().decode()
    p.stderr.close()
    p.wait(timeout=60)
    return p.returncode, b"".join(chunks).decode("utf-8"), err


ESC = re.compile(r"\x1b\[[0-9;]*m")


class Heatmap(PosencTestCase):
    def save(self, name, a):
        np.save(self.path(name), np.asarray(a))
        return self.path(name)

    def png(self, *args):
        out = self.path("out.png")
        self.run_ok("plot", *args, "-o", out)
        return Image.open(out)

    def test_signed_data_diverging_symmetric(self):
        a = np.array([[-2.0, -1.0, -0.3, 0.0], [0.4, 1.0, 1.5, 2.0], [0.1, -1.7, 0.9, -0.05]])
        img = self.png(self.save("a.npy", a))
        self.assertEqual(img.size, (960, 720))
        got = cell_colors(img, 3, 4)
        for (r, c), v in np.ndenumerate(a):
            exp = image_color(DIVERGING, (v + 2.0) / 4.0)
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"cell {r},{c} value {v}")

    def test_probabilities_sequential_with_blank_and_size(self):
        a = np.array([[0.1, 0.2, 0.7], [0.5, np.nan, 0.5], [0.0, 0.0, 1.0]], np.float32)
        img = self.png(self.save("p.npy", a), "--width", "500", "--height", "400")
        self.assertEqual(img.size, (500, 400))
        got = cell_colors(img, 3, 3)
        for (r, c), v in np.ndenumerate(a):
            exp = BLANK if np.isnan(v) else image_color(SEQUENTIAL, float(v))
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"cell {r},{c}")
        # The colour bar (a smooth gradient) shows both ends of the map right of the frame.
        arr = np.asarray(img).astype(int)
        right = frame(img)[2]
        bar = arr[:, right + 3:].reshape(-1, 3)
        for end in (SEQUENTIAL[0], SEQUENTIAL[-1]):
            self.assertLessEqual(np.abs(bar - rgb(end)).max(axis=1).min(), 6, hex(end))

    def test_log_vmin_vmax_and_cmap(self):
        a = np.array([[1e-4, 1e-3, 1e-2], [1e-1, 1.0, 10.0]])
        p = self.save("l.npy", a)
        got = cell_colors(self.png(p, "--log"), 2, 3)
        for (r, c), v in np.ndenumerate(a):
            exp = image_color(SEQUENTIAL, (math.log10(v) + 4) / 5)
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"log cell {r},{c}")
        got = cell_colors(self.png(p, "--vmin", "0.001", "--vmax", "0.1", "--cmap",
                                   "diverging"), 2, 3)
        for (r, c), v in np.ndenumerate(a):
            exp = image_color(DIVERGING, (min(max(v, 1e-3), 0.1) - 1e-3) / (0.1 - 1e-3))
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"clamped cell {r},{c}")

    def test_slice_of_4d_probs_and_hdf5_table(self):
        rng = np.random.default_rng(0)
        x = rng.random((2, 3, 4, 5))
        got = cell_colors(self.png(self.save("x.npy", x), "--slice", "1,2"), 4, 5)
        sel = x[1, 2]
        lo, hi = sel.min(), sel.max()
        for (r, c), v in np.ndenumerate(sel):
            exp = image_color(SEQUENTIAL, (v - lo) / (hi - lo))
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1)
        # A posenc table straight from HDF5 (the PE heatmap of the issue).
        self.run_ok("table", "sinusoidal", "--positions", "6", "--dim", "4", "--dtype", "f64",
                    "-o", self.path("pe.h5") + ":/pe")
        import h5py
        with h5py.File(self.path("pe.h5"), "r") as f:
            pe = f["pe"][()]
        got = cell_colors(self.png(self.path("pe.h5") + ":/pe"), 6, 4)
        m = np.abs(pe).max()
        for (r, c), v in np.ndenumerate(pe):
            exp = image_color(DIVERGING, (v + m) / (2 * m))
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1)


    def test_near_constant_data_one_colour(self):
        """Values that agree to a millionth (rounding noise, as a softmax over equal
        scores leaves) get one colour, the middle of the map, log scale or not; the
        documented escape: --vmin/--vmax still spread them."""
        x = np.float32(1 / 3)
        up = np.nextafter(x, np.float32(1))
        a = np.where(np.indices((6, 6)).sum(axis=0) % 2 == 0, x, up).astype(np.float32)
        p = self.save("flat.npy", a)
        for extra in (("--log",), ()):
            got = cell_colors(self.png(p, *extra), 6, 6).reshape(-1, 3)
            exp = image_color(SEQUENTIAL, 0.5)
            self.assertLessEqual(np.abs(got - exp).max(), 1, f"{extra}: {np.unique(got, axis=0)}")
        # float64 data a few ulps apart (log10 rounds them either way) too.
        b = np.full((5, 5), 0.1)
        b[::2] = np.nextafter(0.1, 1.0)
        got = cell_colors(self.png(self.save("flat64.npy", b), "--log"), 5, 5).reshape(-1, 3)
        self.assertLessEqual(np.abs(got - image_color(SEQUENTIAL, 0.5)).max(), 1)
        # Given ends are honoured, however narrow.
        lo, hi = float(x), float(up)
        got = cell_colors(self.png(p, "--vmin", repr(lo), "--vmax", repr(hi)), 6, 6)
        for (r, c), v in np.ndenumerate(a):
            exp = image_color(SEQUENTIAL, 0.0 if v == x else 1.0)
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"cell {r},{c}")
        # A spread of 1e-5 is data, not noise: it spans the map.
        c = 1.0 + 1e-5 * np.arange(4.0).reshape(2, 2)
        got = cell_colors(self.png(self.save("small.npy", c)), 2, 2)
        for (r, k), v in np.ndenumerate(c):
            exp = image_color(SEQUENTIAL, (v - c.min()) / (c.max() - c.min()))
            self.assertLessEqual(np.abs(got[r, k] - exp).max(), 1, f"cell {r},{k}")

    def test_titles_keep_the_plot_margin(self):
        """A subtitle too long to centre starts level with the plot box and ends as far
        from the right edge: the page's margins are background (white)."""
        h5 = self.path("y.h5")
        self.run_ok("table", "rope", "--positions", "16", "--dim", "32", "--emit", "cos",
                    "--scaling", "yarn", "--factor", "4", "--original-max-pos", "8",
                    "-o", h5 + ":/cos")
        for size in ((640, 480), (960, 720), (400, 300)):
            img = self.png(h5 + ":/cos", "--width", size[0], "--height", size[1])
            a = np.asarray(img.convert("RGB")).astype(int)
            left, top, _, _ = frame(img)
            ink = a[: top - 2].min(axis=2) < 200  # the text above the box
            rows = np.where(ink.any(axis=1))[0]
            self.assertGreater(len(rows), 0)
            # The subtitle: the lowest band of text above the box.
            bottom = rows.max()
            start = bottom
            while start - 1 in rows:
                start -= 1
            cols = np.where(ink[start:bottom + 1].any(axis=0))[0]
            w = size[0]
            self.assertGreater(cols.max() - cols.min(), w / 3, f"{size}: a subtitle is drawn")
            self.assertGreaterEqual(cols.min(), left - 1, f"{size}: left margin")
            self.assertLessEqual(cols.max(), w - left + 1, f"{size}: right margin")


class Lines(PosencTestCase):
    def test_one_d_and_several_tensors(self):
        np.save(self.path("up.npy"), np.linspace(0, 1, 50))
        np.save(self.path("down.npy"), np.linspace(1, 0, 50))
        out = self.path("l.png")
        self.run_ok("plot", self.path("up.npy"), self.path("down.npy"), "-o", out)
        a = np.asarray(Image.open(out)).astype(int)
        for k, rising in ((0, True), (1, False)):
            ys, xs = np.where(np.abs(a - rgb(PALETTE[k])).max(axis=2) <= 20)
            self.assertGreater(len(xs), 100, f"series {k} drawn")
            # Exclude the legend (top right): the curve's left end and right end.
            left_y = ys[xs < xs.min() + 10].mean()
            right_y = ys[(xs > 600) & (xs < 700)].mean()
            self.assertEqual(left_y > right_y, rising, f"series {k} direction")

    def test_rows_cols_and_svg(self):
        a = np.arange(12, dtype=np.float64).reshape(3, 4)
        np.save(self.path("m.npy"), a)
        out = self.path("c.svg")
        self.run_ok("plot", self.path("m.npy"), "--cols", "1,3", "--x-col", "0",
                    "--width", "640", "--height", "480", "-o", out)
        root = ET.parse(out).getroot()
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
        self.assertEqual((root.get("width"), root.get("height")), ("640pt", "480pt"))
        uses = root.findall(".//{http://www.w3.org/2000/svg}use")
        self.assertGreater(len(uses), 20)  # title, labels, ticks and legend as glyphs
        strokes = set()
        for el in root.iter():
            m = re.search(r"stroke:rgb\(([\d.]+)%,([\d.]+)%,([\d.]+)%\)", el.get("style", ""))
            if m:
                strokes.add(tuple(round(float(v) * 2.55) for v in m.groups()))
        self.assertIn(rgb(PALETTE[0]), strokes)
        self.assertIn(rgb(PALETTE[1]), strokes)
        self.assertNotIn(rgb(PALETTE[2]), strokes)
        # A heatmap in SVG is one embedded raster image.
        self.run_ok("plot", self.path("m.npy"), "-o", self.path("h.svg"))
        imgs = ET.parse(self.path("h.svg")).getroot().findall(
            ".//{http://www.w3.org/2000/svg}image")
        self.assertEqual(len(imgs), 1)

    def test_analyze_table_plots_named_columns(self):
        import h5py
        out = self.path("d.h5")
        self.run_ok("analyze", "decay", "--dim", "16", "--bases", "100,10000",
                    "--max-distance", "40", "--emit", "bound", "-o", out + ":/d")
        with h5py.File(out, "r") as f:
            self.assertEqual(f["d"].attrs["columns"],
                             "distance,bound[base=100],bound[base=10000]")
        self.run_ok("plot", out + ":/d", "-o", self.path("d.png"))
        a = np.asarray(Image.open(self.path("d.png"))).astype(int)
        for k in range(2):
            self.assertTrue((np.abs(a - rgb(PALETTE[k])).max(axis=2) <= 20).any())


class Files(PosencTestCase):
    def test_deterministic_bytes_and_pdf_metadata(self):
        np.save(self.path("a.npy"), np.arange(20.0).reshape(4, 5) - 7)
        for ext in ("png", "svg", "pdf"):
            outs = []
            for k in range(2):
                out = self.path(f"{k}.{ext}")
                self.run_ok("plot", self.path("a.npy"), "-o", out)
                with open(out, "rb") as fh:
                    outs.append(fh.read())
                if k == 0:
                    time.sleep(1.1)  # a clock in the file would now differ
            self.assertEqual(outs[0], outs[1], ext)
        with open(self.path("0.pdf"), "rb") as fh:
            pdf = fh.read()
        self.assertTrue(pdf.startswith(b"%PDF-"))
        self.assertNotIn(b"/CreationDate", pdf)
        self.assertNotIn(b"/ModDate", pdf)
        with open(self.path("0.png"), "rb") as fh:
            self.assertNotIn(b"tIME", fh.read())
        # analyze --plot too.
        for k in range(2):
            self.run_ok("analyze", "wavelengths", "--dim", "32", "--factor", "4",
                        "--original-max-pos", "512", "--plot", self.path(f"w{k}.pdf"))
        with open(self.path("w0.pdf"), "rb") as a, open(self.path("w1.pdf"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_errors_leave_no_file(self):
        np.save(self.path("a.npy"), np.ones((2, 3)))
        np.save(self.path("c.npy"), np.ones((2, 3, 4)))
        a, c = self.path("a.npy"), self.path("c.npy")
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(2, "plot", a, "-o", self.path("x.jpg"), match=r"unknown image type '\.jpg'")
        self.assert_fails(3, "plot", c, "-o", self.path("x.png"), match="choose at most two axes")
        self.assert_fails(3, "plot", a, "--slice", "0,0", "-o", self.path("x.png"),
                          match="single value")
        self.assert_fails(3, "plot", a, "--rows", "5", "-o", self.path("x.png"),
                          match="not in the selection")
        self.assert_fails(2, "plot", a, "--rows", "0", "--cols", "0", "-o", self.path("x.png"))
        self.assert_fails(2, "plot", a, "--vmin", "2", "--vmax", "1", "-o", self.path("x.png"),
                          match="--vmin/--vmax")
        self.assert_fails(3, "plot", self.path("none.npy"), "-o", self.path("x.png"))
        self.assert_fails(2, "plot", a, "--slice", "0,,1", "-o", self.path("x.png"),
                          match="--slice")
        self.assert_fails(2, "plot", a, "--rows", "0", "--label", "a", "--label", "b",
                          "-o", self.path("x.png"), match="--label")
        np.save(self.path("neg.npy"), -np.ones((2, 2)))
        before.append("neg.npy")
        self.assert_fails(3, "plot", self.path("neg.npy"), "--log", "-o", self.path("x.png"),
                          match="positive")
        self.assert_fails(4, "plot", a, "-o", self.path("missing/x.png"))
        self.assert_no_new_files(before)
        # An existing picture survives a failed run; --no-clobber keeps it too.
        out = self.path("keep.png")
        with open(out, "wb") as fh:
            fh.write(b"old")
        self.assert_fails(3, "plot", c, "-o", out)
        self.assert_fails(4, "plot", a, "--no-clobber", "-o", out)
        self.assert_fails(4, "analyze", "decay", "--dim", "8", "--max-distance", "4",
                          "--no-clobber", "--plot", out)
        with open(out, "rb") as fh:
            self.assertEqual(fh.read(), b"old")

    def test_stdout_image(self):
        np.save(self.path("a.npy"), np.ones((2, 3)))
        p = self.run_ok("plot", self.path("a.npy"), "-o", "-", "--format", "svg")
        self.assertTrue(p.stdout.startswith(b"<?xml"))
        code, _, err = run_pty(["plot", self.path("a.npy"), "-o", "-", "--format", "png"])
        self.assertEqual(code, 2, err)
        self.assertIn("terminal", err)


class Terminal(PosencTestCase):
    def test_heatmap_colours_under_a_pty(self):
        a = np.array([[-1.0, 0.0, 1.0], [0.5, -0.5, 0.25]])
        np.save(self.path("a.npy"), a)
        code, out, err = run_pty(["plot", self.path("a.npy")], size=(20, 60))
        self.assertEqual(code, 0, err)
        self.assertIn("\u2580", out)  # upper half blocks
        fg = {tuple(map(int, m)) for m in re.findall(r"\x1b\[38;2;(\d+);(\d+);(\d+)m", out)}
        bg = {tuple(map(int, m)) for m in re.findall(r"\x1b\[48;2;(\d+);(\d+);(\d+)m", out)}
        for v in a.ravel():
            self.assertIn(cmap(DIVERGING, (v + 1) / 2), fg & bg, f"value {v}")
        lines = out.rstrip("\r\n").split("\n")
        self.assertLessEqual(len(lines), 19)
        for line in lines:
            self.assertLessEqual(len(ESC.sub("", line.rstrip("\r"))), 60)
        # The first plot line has row 0 on top and bottom: cells -1, 0, 1 in order.
        first = lines[1]
        colors = re.findall(r"\x1b\[38;2;(\d+);(\d+);(\d+)m", first)
        self.assertEqual([tuple(map(int, c)) for c in colors],
                         [cmap(DIVERGING, t) for t in (0.0, 0.5, 1.0)])

    def test_chart_braille_and_window_size(self):
        np.save(self.path("s.npy"), np.sin(np.linspace(0, 6, 200)))
        np.save(self.path("c.npy"), np.cos(np.linspace(0, 6, 200)))
        code, out, err = run_pty(["plot", self.path("s.npy"), self.path("c.npy")],
                                 size=(24, 80))
        self.assertEqual(code, 0, err)
        self.assertTrue(any(0x2801 <= ord(ch) <= 0x28FF for ch in out), "braille dots")
        for k in range(2):
            self.assertIn("\x1b[38;2;{};{};{}m".format(*rgb(PALETTE[k])), out)
        lines = out.rstrip("\r\n").split("\n")
        self.assertLessEqual(len(lines), 23)
        self.assertTrue(all(len(ESC.sub("", ln.rstrip("\r"))) <= 80 for ln in lines))
        code, wide, _ = run_pty(["plot", self.path("s.npy")], size=(40, 150))
        self.assertGreater(max(len(ESC.sub("", ln)) for ln in wide.split("\n")), 120)

    def test_plain_ascii_without_colour(self):
        a = np.arange(12.0).reshape(3, 4)
        np.save(self.path("a.npy"), a)
        for env in ({"NO_COLOR": "1"}, {"TERM": "dumb"}):
            code, out, err = run_pty(["plot", self.path("a.npy"), "--slice", "1:,1:"],
                                     env=env, size=(20, 60))
            self.assertEqual(code, 0, err)
            self.assertNotIn("\x1b", out, env)
            self.assertTrue(out.isascii(), env)
            # Real index labels: rows 1..2 and columns 1..3 of the tensor.
            self.assertRegex(out, r"\n1 \.")
            self.assertRegex(out, r"\n  1 +2 +3 ")
            # The sequential ramp: smallest value first character, largest the last.
            self.assertIn("[.,:-=+*#%@]", out)
        # Not a terminal (a pipe): ASCII as well, and analyze --plot - draws there.
        p = self.run_ok("plot", self.path("a.npy"))
        self.assertTrue(p.stdout.isascii())
        self.assertNotIn(b"\x1b", p.stdout)
        p = self.run_ok("analyze", "decay", "--dim", "16", "--max-distance", "50",
                        "--plot", "-")
        self.assertIn(b"RoPE long-term decay", p.stdout)

    def test_heatmap_ticks_name_the_rows_drawn(self):
        """More rows and columns than the window: the drawing shows rows and columns
        evenly spaced from the first to the last (rounded to the nearest), one per
        character; the ticks read their tensor indices, from 0 to the last."""
        rng = np.random.default_rng(3)
        z = rng.random((300, 200))
        np.save(self.path("z.npy"), z)
        out = self.run_ok("plot", self.path("z.npy"),
                          env={"COLUMNS": "80", "LINES": "24"}).stdout.decode()
        lines = out.rstrip("\n").split("\n")
        ticks_at = next(i for i, ln in enumerate(lines) if "(rows:" in ln)
        margin = len("299") + 1
        grid = [ln[margin:] for ln in lines[1:ticks_at]]
        labels = [ln[:margin].strip() for ln in lines[1:ticks_at]]
        n = len(grid[0])
        self.assertLess(n, 200)
        self.assertLess(len(grid), 300)
        rows = np.floor(np.linspace(0, 299, len(grid)) + 0.5).astype(int)
        cols = np.floor(np.linspace(0, 199, n) + 0.5).astype(int)
        self.assertEqual([lb for lb in labels if lb],
                         ["0", str(rows[len(grid) // 2]), "299"])
        self.assertEqual(lines[ticks_at].split()[:3], ["0", str(cols[n // 2]), "199"])
        ramp = ".,:-=+*#%@"
        t = (z - z.min()) / (z.max() - z.min())
        exp = ["".join(ramp[min(9, int(t[r, c] * 10))] for c in cols) for r in rows]
        self.assertEqual(grid, exp)
        # In colour (two rows per character) the first line is row 0 too.
        code, col, err = run_pty(["plot", self.path("z.npy")], size=(24, 80))
        self.assertEqual(code, 0, err)
        plain = [ESC.sub("", ln.rstrip("\r")) for ln in col.rstrip("\r\n").split("\n")]
        self.assertEqual(plain[1].split()[0], "0")
        ticks = next(ln for ln in plain if "(rows:" in ln).split()
        self.assertEqual((ticks[0], ticks[2]), ("0", "199"))

    def test_near_constant_heatmap_is_one_character(self):
        a = np.full((4, 6), 0.1)
        a[:, ::2] = np.nextafter(0.1, 1.0)
        np.save(self.path("a.npy"), a)
        out = self.run_ok("plot", self.path("a.npy"), "--log",
                          env={"COLUMNS": "80", "LINES": "12"}).stdout.decode()
        lines = out.rstrip("\n").split("\n")
        ticks_at = next(i for i, ln in enumerate(lines) if "(rows:" in ln)
        grid = "".join(ln[2:] for ln in lines[1:ticks_at])
        self.assertEqual(set(grid), {".,:-=+*#%@"[5]}, out)  # position 0.5
        self.assertIn("near-constant", lines[-1])

    def chart(self, *args):
        """An ASCII chart (standard output a pipe) 80 x 24: the y tick labels by line,
        and the whole text."""
        out = self.run_ok("plot", *args, env={"COLUMNS": "80", "LINES": "24"}).stdout.decode()
        ticks = [m.group(1) for m in re.finditer(r"^ *(\S+) \|", out, re.M)]
        return ticks, out

    def test_chart_ticks_say_zero_where_they_mean_it(self):
        x = np.linspace(0, 6, 200)
        y = np.sin(x)  # max 0.99998, min -0.99992: the padded range is not symmetric
        np.save(self.path("s.npy"), y)
        ticks, _ = self.chart(self.path("s.npy"))
        self.assertEqual(len(ticks), 3, ticks)
        pad = 0.03 * (y.max() - y.min())  # 6% of the half range above and below
        self.assertAlmostEqual(float(ticks[0]), y.max() + pad, places=3)
        self.assertEqual(ticks[1], "0")
        self.assertAlmostEqual(float(ticks[2]), y.min() - pad, places=3)
        # A middle that is not 0 keeps its value.
        np.save(self.path("u.npy"), np.linspace(0, 1, 50))
        ticks, out = self.chart(self.path("u.npy"))
        self.assertEqual(ticks[1], "0.5")
        # x ticks of indices 0..49: 0, 24.5 and 49.
        self.assertRegex(out, r"\n +0 +24\.5 +49\n +axis 0\n$")

    def test_charts_name_axes_as_heatmaps_do(self):
        h5 = self.path("t.h5")
        self.run_ok("table", "sinusoidal", "--positions", "16", "--dim", "8", "-o", h5 + ":/pe")
        heat = self.run_ok("plot", h5 + ":/pe", env={"COLUMNS": "120", "LINES": "24"}).stdout.decode()
        self.assertIn("(rows: position (axis 0), columns: dimension (axis 1))", heat)
        _, col = self.chart(h5 + ":/pe", "--slice", ":,1")
        self.assertRegex(col, r"\n +0 .* 15\n +position \(axis 0\)\n$")
        _, row = self.chart(h5 + ":/pe", "--rows", "3")
        self.assertRegex(row, r" dimension \(axis 1\)\n\* row 3\n$")
        np.save(self.path("v.npy"), np.zeros((2, 5)))
        _, plain = self.chart(self.path("v.npy"), "--slice", "1")
        self.assertRegex(plain, r" axis 1\n$")
        _, xcol = self.chart(self.path("v.npy"), "--cols", "1", "--x-col", "0")
        self.assertRegex(xcol, r" column 0\n\* column 1\n$")


def svg_paths(path):
    """(style, [(x, y), ...]) of every path of an SVG cairo wrote (M/L commands)."""
    out = []
    for el in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}path"):
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", el.get("d", ""))]
        out.append((el.get("style", ""), list(zip(nums[0::2], nums[1::2])), el.get("transform")))
    return out


class Legend(PosencTestCase):
    def assert_legend_clear(self, *inputs):
        """The legend's box (its white background) holds no point of any curve (each
        segment sampled every 0.25 pt). Inputs are names in self.tmp, the labels."""
        out = self.path("c.svg")
        self.run_ok("plot", *inputs, "-o", out, cwd=self.tmp)
        paths = svg_paths(out)
        boxes = [p for s, p, _ in paths if "fill:rgb(100%,100%,100%)" in s]
        self.assertEqual(len(boxes), 1, "one legend background")
        xs, ys = zip(*boxes[0])
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        # The curves (the legend's line samples have round caps).
        curves = [p for s, p, _ in paths
                  if "stroke-width:2" in s and "linecap:butt" in s and "fill:none" in s]
        self.assertGreaterEqual(len(curves), 2)
        for pts in curves:
            for (ax, ay), (bx, by) in zip(pts, pts[1:]):
                n = max(1, int(math.hypot(bx - ax, by - ay) * 4))
                for k in range(n + 1):
                    x, y = ax + (bx - ax) * k / n, ay + (by - ay) * k / n
                    self.assertFalse(x0 < x < x1 and y0 < y < y1,
                                     f"curve point ({x:.1f}, {y:.1f}) under the legend "
                                     f"[{x0:.1f}, {x1:.1f}] x [{y0:.1f}, {y1:.1f}]")
        return (x0, x1, y0, y1), curves

    def test_legend_covers_no_curve(self):
        x = np.linspace(0, 20, 400)
        for name, v in (("up", np.linspace(0, 1, 50)), ("down", np.linspace(1, 0, 50)),
                        ("sin", np.sin(x)), ("cos", np.cos(x)), ("rise", x ** 2)):
            np.save(self.path(name + ".npy"), v)
        # Every corner holds a curve: the legend goes outside, right of the plot box.
        (x0, _, _, _), curves = self.assert_legend_clear("up.npy", "down.npy")
        self.assertGreaterEqual(x0, max(px for pts in curves for px, _ in pts))
        self.assert_legend_clear("sin.npy", "cos.npy")
        # A free corner (top left: x^2 rises to the right) takes it, inside the box.
        (x0, _, _, _), curves = self.assert_legend_clear("rise.npy", "sin.npy")
        self.assertLess(x0, max(px for pts in curves for px, _ in pts) / 2)
        # Too wide to go beside the box: inside, the curves kept below it.
        long = "a-rather-long-name-for-a-tensor-file-" * 2
        for name in ("up", "down"):
            os.rename(self.path(name + ".npy"), self.path(long + name + ".npy"))
        (x0, _, y0, _), curves = self.assert_legend_clear(long + "up.npy", long + "down.npy")
        self.assertLess(x0, max(px for pts in curves for px, _ in pts))


if __name__ == "__main__":
    unittest.main()
