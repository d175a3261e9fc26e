"""posenc convert: format round trips checked with numpy/h5py, dtype conversion checked
against numpy's astype, and the output guarantees (atomic, --no-clobber, unwritable
folders, /dev/full, binary refused on a terminal, SIGTERM leaves no temporary file).
"""
import hashlib
import json
import os
import pty
import signal
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


class Formats(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(42)
        self.a = (rng.standard_normal((5, 7)) * 10).astype(np.float32)
        self.src = self.path("a.npy")
        np.save(self.src, self.a)

    def test_npy_h5_npy(self):
        self.run_ok("convert", self.src, "-o", self.path("a.h5:/grp/x"))
        with h5py.File(self.path("a.h5"), "r") as f:
            np.testing.assert_array_equal(f["/grp/x"][()], self.a)
            self.assertEqual(f["/grp/x"].dtype, np.float32)
        self.run_ok("convert", self.path("a.h5:/grp/x"), "-o", self.path("b.npy"))
        self.assertEqual(md5(self.path("b.npy")), md5(self.src))

    def test_h5py_file_to_npy(self):
        b = np.arange(24, dtype=">f8").reshape(2, 3, 4)
        with h5py.File(self.path("in.h5"), "w") as f:
            f["d"] = b
        self.run_ok("convert", self.path("in.h5:/d"), "-o", self.path("o.npy"))
        np.testing.assert_array_equal(np.load(self.path("o.npy")), b)

    def test_csv_tsv_json_round_trips_are_exact(self):
        for ext in ["csv", "tsv", "json"]:
            with self.subTest(fmt=ext):
                self.run_ok("convert", self.src, "-o", self.path("a." + ext))
                self.run_ok("convert", self.path("a." + ext), "-o", self.path("back.npy"),
                            "--dtype", "f32")
                np.testing.assert_array_equal(np.load(self.path("back.npy")), self.a)
        # The CSV is what numpy reads, values shortest round-trip.
        np.testing.assert_array_equal(
            np.loadtxt(self.path("a.csv"), delimiter=",", dtype=np.float32), self.a)
        with open(self.path("a.json")) as f:
            j = json.load(f)
        self.assertEqual(j["shape"], [5, 7])
        np.testing.assert_array_equal(np.array(j["data"], np.float32), self.a)

    def test_to_overrides_extension(self):
        self.run_ok("convert", self.src, "-o", self.path("a.dat"), "--to", "csv")
        np.testing.assert_array_equal(
            np.loadtxt(self.path("a.dat"), delimiter=",", dtype=np.float32), self.a)
        p = self.run_ok("convert", self.src, "-o", "-", "--to", "json")
        np.testing.assert_array_equal(np.array(json.loads(p.stdout)["data"], np.float32), self.a)

    def test_dtype_conversions_match_numpy(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal(1000) * 1000
        x[:4] = [0.5, -0.5, 2.5, -7.9]
        np.save(self.path("x.npy"), x)
        for dt, npdt in [("f32", np.float32), ("f16", np.float16), ("i16", np.int16),
                         ("i64", np.int64), ("f64", np.float64)]:
            with self.subTest(dtype=dt):
                self.run_ok("convert", self.path("x.npy"), "-o", self.path("y.npy"),
                            "--dtype", dt)
                y = np.load(self.path("y.npy"))
                self.assertEqual(y.dtype, npdt)
                np.testing.assert_array_equal(y, x.astype(npdt))

    def test_bf16_via_hdf5_rounds_to_nearest_even(self):
        x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 1e-40, 65504.0], np.float64)
        np.save(self.path("x.npy"), x)
        self.run_ok("convert", self.path("x.npy"), "-o", self.path("b.h5:/b"), "--dtype", "bf16")
        self.run_ok("convert", self.path("b.h5:/b"), "-o", self.path("back.npy"), "--dtype", "f64")
        # Reference: round f64 to 8 significant bits, ties to even, via f32 bit tricks
        # (the values are exact in f32, so no double rounding).
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        expect = r.astype(np.uint32).view(np.float32).astype(np.float64)
        np.testing.assert_array_equal(np.load(self.path("back.npy")), expect)

    def test_narrowing_rounds_once(self):
        # f64 and f32 to f16 against numpy's own conversion (one rounding, from the
        # double's bits), and to bf16 against a rounding to 8 significant bits done on
        # the double's integer bits here, on the values where rounding is hard: the
        # midpoints between neighbouring f16 and bf16 values, and values 1 ulp and
        # 2^-30 (below half a float's ulp, which rounding through float first would
        # make ties) from them; enough of them (over 300,000) for every vector loop.
        rng = np.random.default_rng(4)
        h = np.arange(0, 0x7BFF, dtype=np.uint16).view(np.float16).astype(np.float64)
        b = (np.arange(0x0080, 0x7F7F, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
        cases = [rng.standard_normal(1000) * 1000]
        for grid in (h, b):
            mid = (grid[:-1] + grid[1:]) / 2
            cases += [mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf),
                      mid * (1 + 2.0**-30), mid * (1 - 2.0**-30)]
        x = np.concatenate(cases)
        x = np.concatenate([x, -x[::7]])
        # Values beyond the f16 range are still checked against numpy (Inf), and against
        # the bf16 reference as long as they stay within bf16's normal range.
        np.save(self.path("x64.npy"), x)
        np.save(self.path("x32.npy"), x.astype(np.float32))
        for src, ref in (("x64", x), ("x32", x.astype(np.float32))):
            with self.subTest(src=src, to="f16"):
                self.run_ok("convert", self.path(src + ".npy"), "-o", self.path("h.npy"),
                            "--dtype", "f16")
                got = np.load(self.path("h.npy")).view(np.uint16)
                with np.errstate(over="ignore"):  # beyond f16: Inf, as wanted
                    want = ref.astype(np.float16).view(np.uint16)
                bad = np.flatnonzero(got != want)
                self.assertEqual(bad.size, 0, f"{bad.size} differ, first at {ref[bad[:1]]}")
            with self.subTest(src=src, to="bf16"):
                self.run_ok("convert", self.path(src + ".npy"), "-o", self.path("b.h5:/b"),
                            "--dtype", "bf16", "--force")
                self.run_ok("convert", self.path("b.h5:/b"), "-o", self.path("back.npy"),
                            "--dtype", "f64")
                u = ref.astype(np.float64).view(np.uint64)
                keep, rem = u & ~np.uint64((1 << 45) - 1), u & np.uint64((1 << 45) - 1)
                half = np.uint64(1 << 44)
                up = (rem > half) | ((rem == half) & (((keep >> np.uint64(45)) & np.uint64(1)) == 1))
                want = np.where(up, keep + np.uint64(1 << 45), keep).view(np.float64)
                got = np.load(self.path("back.npy"))
                bad = np.flatnonzero(got != want)
                self.assertEqual(bad.size, 0, f"{bad.size} differ, first at {ref[bad[:1]]}")
        # The edges, written out: overflow to Inf, the largest finite, NaN and signed zero.
        edges = np.array([65519.99, 65520.0, -70000.0, np.nan, -np.nan, -0.0, 2.0**-26,
                          3 * 2.0**-26, 1e39, -np.inf])
        np.save(self.path("e.npy"), edges)
        self.run_ok("convert", self.path("e.npy"), "-o", self.path("eh.npy"), "--dtype", "f16")
        self.assertEqual(np.load(self.path("eh.npy")).view(np.uint16).tolist(),
                         [0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x8000, 0x0000, 0x0001,
                          0x7C00, 0xFC00])

    def test_large_file_streams(self):
        # 48 MB: several 16 MiB slabs; the result must be byte-identical to np.save.
        big = np.arange(6_000_000, dtype=np.float64).reshape(3000, 2000)
        np.save(self.path("big.npy"), big)
        self.run_ok("convert", self.path("big.npy"), "-o", self.path("big2.npy"))
        self.assertEqual(md5(self.path("big2.npy")), md5(self.path("big.npy")))

    def test_rank3_to_csv_refused_before_writing(self):
        np.save(self.path("r3.npy"), np.zeros((2, 2, 2)))
        self.assert_fails(2, "convert", self.path("r3.npy"), "-o", self.path("r3.csv"),
                          match=r"r3\.csv: CSV/TSV hold tensors of rank 0 to 2, got shape \(2, 2, 2\)")
        self.assertFalse(os.path.exists(self.path("r3.csv")))

    def test_usage_errors(self):
        self.assert_fails(2, "convert", self.src, "-o", self.path("x.foo"), match=r"x\.foo")
        self.assert_fails(2, "convert", self.src, "-o", self.path("x.h5"),
                          match=r"x\.h5: name a dataset, e.g\. .*x\.h5:/data")
        self.assert_fails(2, "convert", self.src, "-o", self.path("x.npy"), "--dtype", "f13",
                          match=r"--dtype")
        self.assert_fails(2, "convert", self.src, "-o", self.path("x.npy"), "--to", "xml")
        self.assert_fails(2, "convert", self.src)
        self.assert_fails(2, "convert", self.src, "-o", "-", "--to", "h5",
                          match="standard output")
        self.assert_no_new_files(["a.npy"])


class OutputSafety(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.src = self.path("a.npy")
        np.save(self.src, np.arange(100, dtype=np.float64))

    def test_existing_output_replaced_atomically_with_its_mode(self):
        out = self.path("o.npy")
        with open(out, "wb") as f:
            f.write(b"old")
        os.chmod(out, 0o640)
        self.run_ok("convert", self.src, "-o", out)
        self.assertEqual(md5(out), md5(self.src))
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o640)
        self.assert_no_new_files(["a.npy", "o.npy"])

    def test_new_output_mode_follows_umask(self):
        out = self.path("n.npy")
        p = subprocess.run(f"umask 027; '{BIN}' convert '{self.src}' -o '{out}'", shell=True)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o640)

    @unittest.skipIf(UNDER_ASAN, "LeakSanitizer does not run under strace")
    def test_sync_flushes_before_rename_only_when_asked(self):
        # strace shows the system calls: fsync of the temporary, then the rename.
        def calls(*extra):
            out = self.path("s.npy")
            p = subprocess.run(["strace", "-f", "-e", "trace=fsync,fdatasync,rename",
                                BIN, "convert", self.src, "-o", out, *extra],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(md5(out), md5(self.src))
            return [line for line in p.stderr.splitlines() if "sync(" in line or "rename(" in line]
        with_sync = calls("--sync")
        self.assertTrue(any("fsync(" in c for c in with_sync), with_sync)
        self.assertTrue(any("rename(" in c for c in with_sync), with_sync)
        first_sync = next(i for i, c in enumerate(with_sync) if "fsync(" in c)
        first_rename = next(i for i, c in enumerate(with_sync) if "rename(" in c)
        self.assertLess(first_sync, first_rename)
        self.assertFalse(any("sync(" in c for c in calls()))

    def test_no_clobber(self):
        out = self.path("o.npy")
        with open(out, "wb") as f:
            f.write(b"old")
        self.assert_fails(4, "convert", self.src, "-o", out, "--no-clobber",
                          match=r"o\.npy' already exists \(--no-clobber\)")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"old")
        self.run_ok("convert", self.src, "-o", self.path("new.npy"), "--no-clobber")
        self.assert_no_new_files(["a.npy", "o.npy", "new.npy"])

    def test_missing_or_unwritable_folder(self):
        self.assert_fails(4, "convert", self.src, "-o", self.path("nodir/o.npy"),
                          match=r"cannot create '.*nodir/o\.npy': no such directory: .*nodir/$")
        self.assert_fails(4, "convert", self.src, "-o", self.path("a.npy/o.npy"),
                          match=r"cannot create '.*a\.npy/o\.npy': not a directory: .*a\.npy$")
        if os.geteuid() != 0:  # root ignores permission bits
            os.mkdir(self.path("ro"), 0o555)
            self.assert_fails(4, "convert", self.src, "-o", self.path("ro/o.npy"),
                              match=r"Permission denied")
            os.rmdir(self.path("ro"))
        self.assert_fails(4, "convert", self.src, "-o", "/proc/posenc-test.npy",
                          match=r"cannot create '/proc/posenc-test\.npy'")
        self.assert_no_new_files(["a.npy"])

    def test_dev_full(self):
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        self.assert_fails(4, "convert", self.src, "-o", "/dev/full",
                          match=r"cannot write '/dev/full': No space left on device")
        self.assert_fails(4, "convert", self.src, "-o", "/dev/full", "--to", "csv",
                          match=r"No space left on device")
        self.assert_no_new_files(["a.npy"])

    def test_binary_to_terminal_refused(self):
        master, slave = pty.openpty()
        try:
            for args, want in [(["-o", "-"], 2), (["-o", "-", "--force"], 0),
                               (["-o", "-", "--to", "text"], 0), (["-o", "-", "--to", "csv"], 0)]:
                with self.subTest(args=args):
                    p = subprocess.run([BIN, "convert", self.src, *args], stdout=slave,
                                       stderr=subprocess.PIPE, timeout=60)
                    self.assertEqual(p.returncode, want, p.stderr)
                    if want == 2:
                        self.assertEqual(
                            p.stderr.decode().strip(),
                            "posenc: error: refusing to write binary data to a terminal "
                            "(standard output); use -o FILE, --to text, or --force")
                    # Drain what reached the terminal so the pty never fills.
                    os.set_blocking(master, False)
                    try:
                        while os.read(master, 65536):
                            pass
                    except (BlockingIOError, OSError):
                        pass
        finally:
            os.close(master)
            os.close(slave)

    def test_sigterm_during_write_leaves_no_temp(self):
        # The input arrives through a pipe that we stall half-way, so the temporary
        # output file exists and is being written when the signal arrives.
        data = np.arange(3_000_000, dtype=np.float64).reshape(3000, 1000)
        np.save(self.path("big.npy"), data)
        with open(self.path("big.npy"), "rb") as f:
            raw = f.read()
        out = self.path("o.npy")
        with open(out, "wb") as f:
            f.write(b"old")
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig):
                proc = subprocess.Popen([BIN, "convert", "-", "-o", out], stdin=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                proc.stdin.write(raw[: len(raw) // 2])
                proc.stdin.flush()
                self.signal_while_writing(proc, "o.npy", sig)
                proc.stdin.close()
                proc.stderr.close()
                self.assert_no_new_files(["a.npy", "big.npy", "o.npy"])
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), b"old")


if __name__ == "__main__":
    unittest.main()
