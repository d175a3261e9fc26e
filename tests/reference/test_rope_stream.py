"""`posenc rope` streaming of tensors whose leading axes have extent 1 ([1, s, h, d] with
axes bshd, [1, h, s, d] with bhsd): slabs run along the first axis whose extent is not
1 (s, resp. h), for NPY files, NPY on stdin/stdout and HDF5 datasets, in and out.

Checks:
- with a --max-memory that forces many slabs (-v reports the count), the output is
  byte-identical to the run without --max-memory (one slab for these few-MB tensors),
  and equal to a float64 numpy evaluation of HF's rotate_half RoPE (f32 output:
  rtol 1e-6, atol 1e-6), with --start shifting every position;
- the peak RSS of a 64 MiB [1, s, h, d] f32 input streamed with --max-memory 16M
  (/usr/bin/time -f %M) stays below the RSS of the same binary on a tiny input plus the
  limit plus 8 MiB (HDF5's own buffers, allocator slack); reading it in one piece
  would need more than 128 MiB (input and output).
"""
import io
import os
import re
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase, run

MIB = 1 << 20


def rope_rotate_half(x, positions, seq_axis, base=10000.0):
    """HF rotate_half in float64: x*cos(emb) + rotate_half(x)*sin(emb), emb = [θ, θ],
    θ_j = p * base^(-2j/D), p the position of the vector along `seq_axis`."""
    x = x.astype(np.float64)
    d = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)  # [s, d]
    shape = [1] * x.ndim
    shape[seq_axis] = emb.shape[0]
    shape[-1] = d
    cos = np.cos(emb).reshape(shape)
    sin = np.sin(emb).reshape(shape)
    h = d // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


def slab_count(stderr):
    m = re.search(r"(\d+) slab\(s\) of \d+ row\(s\) along axis (\d+)", stderr)
    if m is None:
        raise AssertionError(f"no slab report in: {stderr!r}")
    return int(m.group(1)), int(m.group(2))


class TestLeadingUnitAxes(PosencTestCase):
    # (axes, shape, slab axis, --max-memory forcing many slabs)
    CASES = [
        ("bshd", (1, 512, 8, 64), 1, "64K"),   # 1 MiB; one s entry = 2 KiB in + out + table
        ("bhsd", (1, 16, 256, 64), 1, "320K"),  # 1 MiB; one head = 64 KiB in + out + table
    ]

    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(20240611)

    def check_case(self, axes, shape, axis, limit, start):
        x = self.rng.standard_normal(shape).astype(np.float32)
        np.save(self.path("x.npy"), x)
        with h5py.File(self.path("x.h5"), "w") as f:
            f.create_dataset("/g/x", data=x)
        common = ["--axes", axes, "--start", str(start)]

        # In memory: one slab.
        p = self.run_ok("-v", "rope", self.path("x.npy"), "-o", self.path("mem.npy"), *common)
        self.assertEqual(slab_count(p.stderr), (1, axis))
        with open(self.path("mem.npy"), "rb") as f:
            mem = f.read()
        y = np.load(self.path("mem.npy"))
        seq_axis = axes.index("s")
        expected = rope_rotate_half(x, start + np.arange(shape[seq_axis]), seq_axis)
        self.assert_close(y, expected, 1e-6, 1e-6, f"{axes} {shape} start {start}")
        self.assertEqual(y.dtype, np.float32)

        stream = ["--max-memory", limit] + common
        # NPY file -> NPY file.
        p = self.run_ok("-v", "rope", self.path("x.npy"), "-o", self.path("s.npy"), *stream)
        n, got_axis = slab_count(p.stderr)
        self.assertEqual(got_axis, axis)
        self.assertGreaterEqual(n, 8, p.stderr)
        with open(self.path("s.npy"), "rb") as f:
            self.assertEqual(f.read(), mem)

        # NPY on stdin -> NPY on stdout.
        with open(self.path("x.npy"), "rb") as f:
            p = run("rope", "-", "-o", "-", *stream, stdin=f.read())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, mem)

        # NPY -> HDF5, HDF5 -> HDF5, HDF5 -> NPY: the same values; HDF5 files written in
        # slabs and in one piece are the same bytes. (New files each case: an HDF5
        # output would otherwise be added to the previous case's file.)
        for name in ("mem.h5", "a.h5", "b.h5", "z.h5"):
            if os.path.exists(self.path(name)):
                os.remove(self.path(name))
        self.run_ok("rope", self.path("x.npy"), "-o", self.path("mem.h5") + ":/y", *common)
        self.run_ok("rope", self.path("x.npy"), "-o", self.path("a.h5") + ":/y", *stream)
        self.run_ok("rope", self.path("x.h5") + ":/g/x", "-o", self.path("b.h5") + ":/y", *stream)
        self.run_ok("rope", self.path("x.h5") + ":/g/x", "-o", self.path("c.npy"), *stream)
        with open(self.path("c.npy"), "rb") as f:
            self.assertEqual(f.read(), mem)
        with open(self.path("mem.h5"), "rb") as f:
            mem_h5 = f.read()
        for name in ("a.h5", "b.h5"):
            with h5py.File(self.path(name), "r") as f:
                z = f["/y"][()]
            self.assertEqual(z.dtype, np.float32)
            self.assertEqual(z.tobytes(), y.tobytes(), name)
            with open(self.path(name), "rb") as f:
                self.assertEqual(f.read(), mem_h5, name)

        # Compressed HDF5 output (chunks cut by the slabs) holds the same values.
        self.run_ok("rope", self.path("x.h5") + ":/g/x", "-o", self.path("z.h5") + ":/y",
                    "--compression", "4", *stream)
        with h5py.File(self.path("z.h5"), "r") as f:
            self.assertEqual(f["/y"][()].tobytes(), y.tobytes())

    def test_bshd_slabs_along_s(self):
        axes, shape, axis, limit = self.CASES[0]
        self.check_case(axes, shape, axis, limit, start=0)
        self.check_case(axes, shape, axis, limit, start=1000)

    def test_bhsd_slabs_along_h(self):
        axes, shape, axis, limit = self.CASES[1]
        self.check_case(axes, shape, axis, limit, start=7)

    def test_two_unit_axes_slab_along_s(self):
        # [1, 1, s, d] bhsd: both b and h have extent 1, slabs run along s.
        self.check_case("bhsd", (1, 1, 2048, 128), 2, "64K", start=3)

    def test_json_output_gathers_the_slabs(self):
        # Text sinks collect slabs along s of a [1, s, d] tensor into one document.
        x = self.rng.standard_normal((1, 64, 16))
        np.save(self.path("x.npy"), x)
        self.run_ok("rope", self.path("x.npy"), "-o", self.path("mem.json"), "--axes", "bsd")
        p = self.run_ok("-v", "rope", self.path("x.npy"), "-o", self.path("s.json"), "--axes",
                        "bsd", "--max-memory", "2K")
        self.assertGreaterEqual(slab_count(p.stderr)[0], 8, p.stderr)
        with open(self.path("mem.json"), "rb") as a, open(self.path("s.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_one_entry_too_large_is_a_usage_error(self):
        x = self.rng.standard_normal((1, 4, 256, 64)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        with open(self.path("old.npy"), "wb") as f:
            f.write(b"keep")
        before = sorted(os.listdir(self.tmp))
        # One head needs 64 KiB in + 64 KiB out + its table: more than 100 KiB.
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("old.npy"),
                          "--max-memory", "100K", match=r"x\.npy.*axis 1 \(h\).*100\.0 KiB")
        self.assert_no_new_files(before)
        with open(self.path("old.npy"), "rb") as f:
            self.assertEqual(f.read(), b"keep")


class TestRowsCutIntoParts(PosencTestCase):
    """A mapped NPY input whose rows along the slab axis exceed a slab (1 MiB of output:
    [b, h, s, d] along b) is rotated in parts of rows along the next axis and written in
    place: the file holds the bytes of the uncut rows (standard output, which cannot be
    written in place, gets them), with -j 1 and -j 2, and the float64 rotation."""

    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(20261206)

    def check(self, axes, shape, *args, ids=None):
        x = self.rng.standard_normal(shape).astype(np.float32)
        np.save(self.path("x.npy"), x)
        common = ["--axes", axes, *args]
        if ids is not None:
            np.save(self.path("ids.npy"), ids)
            common += ["--position-ids", self.path("ids.npy")]
        whole = self.run_ok("rope", self.path("x.npy"), "-o", "-", *common).stdout
        for j in ("1", "2"):
            self.run_ok("-j", j, "rope", self.path("x.npy"), "-o", self.path("y.npy"), *common)
            with open(self.path("y.npy"), "rb") as f:
                self.assertEqual(f.read(), whole, f"{axes} {shape} {args} -j {j}")
        return x, np.load(self.path("y.npy"))

    def test_bhsd_rows_cut_along_h(self):
        # Rows of 2 MiB (8 heads of 256 KiB): parts of 4 heads.
        x, y = self.check("bhsd", (2, 8, 1024, 64), "--start", "5")
        self.assert_close(y, rope_rotate_half(x, 5 + np.arange(1024), 2), 1e-6, 1e-6, "bhsd")
        # -v states the slabs as they are cut: 2 rows of 2 parts of 4 heads each; a row
        # that fits a slab is streamed whole.
        note = self.run_ok("-v", "rope", self.path("x.npy"), "-o", self.path("y.npy"), "--axes",
                           "bhsd").stderr
        self.assertIn("4 slab(s) of 4/8 of a row along axis 0 (b)", note)
        np.save(self.path("small.npy"), x[:, :2, :64])
        note = self.run_ok("-v", "rope", self.path("small.npy"), "-o", self.path("y.npy"),
                           "--axes", "bhsd").stderr
        self.assertIn("1 slab(s) of 2 row(s) along axis 0 (b)", note)

    def test_bshd_rows_cut_along_s(self):
        # [b, s, h, d] with b > 1: rows of 2 MiB cut along s, each part its own positions.
        x, y = self.check("bshd", (2, 2048, 4, 64))
        self.assert_close(y, rope_rotate_half(x, np.arange(2048), 1), 1e-6, 1e-6, "bshd")
        self.check("bshd", (2, 2048, 4, 64), "--style", "gptj", "--dtype", "f64")
        self.check("bshd", (3, 3000, 4, 64), "--rotary-dim", "32", "--dtype", "f16")

    def test_rows_cut_along_b_with_positions_per_batch(self):
        # [h, b, s, d]: rows along h cut along b, whose entries have their own positions.
        ids = np.stack([np.arange(2048) + 100 * k for k in range(4)]).astype(np.int64)
        x, y = self.check("hbsd", (4, 4, 2048, 64), ids=ids)
        for b in range(4):
            self.assert_close(y[:, b], rope_rotate_half(x[:, b], ids[b], 1), 1e-6, 1e-6,
                              f"hbsd batch {b}")

    def test_d_not_last_and_framework_arithmetic(self):
        # d before h: the working copies move it last per part. --arith hf keeps whole rows.
        self.check("bsdh", (2, 1024, 64, 8))
        self.check("bhsd", (2, 8, 1024, 64), "--arith", "hf")

    def test_shares_of_the_job_start_inside_the_tensor(self):
        # --part I/N streams rows [first, last) of b: cut rows are placed from the share's
        # first row; the shares put together are the whole.
        x = self.rng.standard_normal((5, 8, 1024, 64)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        whole = np.load(io.BytesIO(self.run_ok("rope", self.path("x.npy"), "-o", "-", "--axes",
                                               "bhsd").stdout))
        shares = []
        for i in range(3):
            self.run_ok("rope", self.path("x.npy"), "-o", self.path(f"p{i}.npy"), "--axes", "bhsd",
                        "--part", f"{i}/3")
            shares.append(np.load(self.path(f"p{i}.npy")))
        self.assertEqual(np.concatenate(shares).tobytes(), whole.tobytes())
        self.assert_close(whole, rope_rotate_half(x, np.arange(1024), 2), 1e-6, 1e-6)

    def test_d_not_last_any_element_size(self):
        # The working copies with d moved last are transposed in tiles: extents that are
        # no multiple of a tile, elements of 2, 4 and 8 bytes (f16, f32, f64 outputs).
        for dtype, tol in (("f32", 1e-6), ("f64", 1e-6), ("f16", 1e-3)):
            x, y = self.check("bhds", (2, 3, 40, 1000), "--dtype", dtype)
            ref = rope_rotate_half(np.moveaxis(x, 2, 3), np.arange(1000), 2)
            self.assert_close(np.moveaxis(y, 3, 2), ref, tol, tol, f"bhds {dtype}")


@unittest.skipUnless(os.access("/usr/bin/time", os.X_OK), "needs /usr/bin/time")
class TestRowsCutPeakMemory(PosencTestCase):
    def test_16mib_rows_need_no_16mib_buffers(self):
        # [4, 32, 1024, 128] f32 bhsd: 64 MiB in rows of 16 MiB. Whole rows took two
        # 16 MiB output buffers and 16 MiB of the mapped input at a time.
        x = np.random.default_rng(6).standard_normal((4, 32, 1024, 128)).astype(np.float32)
        np.save(self.path("big.npy"), x)
        np.save(self.path("tiny.npy"), x[:, :, :4])
        rc, base, err = peak_rss_kib(["rope", self.path("tiny.npy"), "-o", self.path("t.npy"),
                                      "--axes", "bhsd"])
        self.assertEqual(rc, 0, err)
        rc, peak, err = peak_rss_kib(["rope", self.path("big.npy"), "-o", self.path("a.npy"),
                                      "--axes", "bhsd"])
        self.assertEqual(rc, 0, err)
        self.assertLess(peak, base + 12 * 1024, f"peak RSS {peak} KiB, tiny input {base} KiB")
        y = np.load(self.path("a.npy"), mmap_mode="r")
        self.assert_close(y[3, 31], rope_rotate_half(x[3, 31], np.arange(1024), 0), 1e-6, 1e-6)


class TestMaxMemoryUnits(PosencTestCase):
    """--max-memory takes binary units as GNU sort -S, the same for rope and attention."""

    def test_sizes(self):
        # One entry along s is 2 x 1.2 MB plus its table: more than any limit below, so
        # the error message reports the parsed limit.
        np.save(self.path("x.npy"), np.zeros((1, 2, 1, 300000), np.float32))
        for text, shown in [("0.5M", "512.0 KiB"), ("0.5MiB", "512.0 KiB"),
                            ("524288", "512.0 KiB"), ("512k", "512.0 KiB"),
                            ("512KB", "512.0 KiB"), ("512kib", "512.0 KiB"), ("1K", "1.0 KiB"),
                            ("1000", "1000 bytes"), ("1000B", "1000 bytes")]:
            self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                              "--axes", "bshd", "--max-memory", text,
                              match=rf"limit of {re.escape(shown)}$")
        for bad in ["lots", "", "0", "1e9", "-5", "5 M", "9E", "1.5X", "K", "8T8"]:
            said = "empty value" if bad == "" else "expected a size"
            self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                              "--max-memory", bad, match=f"--max-memory: {said}")
            self.assert_fails(2, "attention", "-q", self.path("x.npy"), "-k", self.path("x.npy"),
                              "-o", self.path("y.npy"), "--max-memory", bad,
                              match=f"--max-memory: {said}")
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("y.npy"),
                          "--max-memory", "8388608T", match="too large")


def peak_rss_kib(args, stdin_path=None, stdout_path=None):
    """Runs posenc under /usr/bin/time -f %M; returns (returncode, peak RSS in KiB, stderr)."""
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    stdout = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        p = subprocess.run(["/usr/bin/time", "-f", "RSS %M", BIN, *args], stdin=stdin,
                           stdout=stdout, stderr=subprocess.PIPE, timeout=300)
    finally:
        if stdin_path:
            stdin.close()
        if stdout_path:
            stdout.close()
    err = p.stderr.decode("utf-8", "replace")
    m = re.search(r"RSS (\d+)\s*$", err)
    if m is None:
        raise AssertionError(f"no RSS from /usr/bin/time: {err!r}")
    return p.returncode, int(m.group(1)), err


@unittest.skipUnless(os.access("/usr/bin/time", os.X_OK), "needs /usr/bin/time")
class TestPeakMemory(PosencTestCase):
    LIMIT_MIB = 16
    SLACK_MIB = 8

    def test_64mib_input_streams_below_the_limit(self):
        shape = (1, 16384, 8, 128)  # f32: 64 MiB
        x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
        np.save(self.path("big.npy"), x)
        with h5py.File(self.path("big.h5"), "w") as f:
            f.create_dataset("/x", data=x)
        np.save(self.path("tiny.npy"), x[:, :4])
        with h5py.File(self.path("tiny.h5"), "w") as f:
            f.create_dataset("/x", data=x[:, :4])
        # Baselines: the same commands on a tiny input (libhdf5 is loaded only by HDF5 runs).
        bounds = {}
        for fmt_, src, dst in (("npy", "tiny.npy", "t.npy"), ("h5", "tiny.h5:/x", "t.h5:/y")):
            rc, base, err = peak_rss_kib(["rope", self.path(src), "-o", self.path(dst),
                                          "--axes", "bshd"])
            self.assertEqual(rc, 0, err)
            bounds[fmt_] = base + (self.LIMIT_MIB + self.SLACK_MIB) * 1024
        lim = ["--axes", "bshd", "--max-memory", f"{self.LIMIT_MIB}M"]
        runs = {
            "npy -> npy": (["rope", self.path("big.npy"), "-o", self.path("a.npy"), *lim], None,
                           None),
            "stdin -> stdout": (["rope", "-", "-o", "-", *lim], self.path("big.npy"),
                                self.path("b.npy")),
            "h5 -> h5": (["rope", self.path("big.h5") + ":/x", "-o", self.path("c.h5") + ":/y",
                          *lim], None, None),
        }
        for name, (args, stdin_path, stdout_path) in runs.items():
            rc, peak, err = peak_rss_kib(args, stdin_path, stdout_path)
            self.assertEqual(rc, 0, f"{name}: {err}")
            bound = bounds["h5" if name.startswith("h5") else "npy"]
            self.assertLess(peak, bound,
                            f"{name}: peak RSS {peak} KiB, bound {bound} KiB, limit "
                            f"{self.LIMIT_MIB} MiB")
        # The streamed results are the rotation, not just any bytes.
        y = np.load(self.path("a.npy"), mmap_mode="r")
        with open(self.path("a.npy"), "rb") as f1, open(self.path("b.npy"), "rb") as f2:
            self.assertEqual(f1.read(), f2.read())
        with h5py.File(self.path("c.h5"), "r") as f:
            self.assertEqual(f["/y"][0, 8000:8100].tobytes(), y[0, 8000:8100].tobytes())
        part = slice(16000, 16384)
        self.assert_close(y[:, part], rope_rotate_half(x[:, part], np.arange(16000, 16384), 1),
                          1e-6, 1e-6)


if __name__ == "__main__":
    unittest.main()
