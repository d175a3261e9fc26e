"""Bytes that pass through `convert` (same dtype) and `join` unchanged go file to file
(copy_file_range, TensorSink::copy_slab) from NPY files and contiguous HDF5 datasets into
NPY outputs: the result is the input's bytes behind a fresh header (checked with numpy
and h5py), with --part shares, along a later slab axis, into a pipe (the buffered copy)
and on tmpfs; an input that ends before its data is one error line, exit 3, and the
existing output stays as it was."""
import os
import shutil
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase


class CopyRawTest(PosencTestCase):
    def assert_npy(self, path, want):
        got = np.load(path)
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.shape, want.shape)
        self.assertEqual(got.tobytes(), np.ascontiguousarray(want).tobytes())

    def test_convert_whole_and_parts(self):
        rng = np.random.default_rng(0)
        for dtype in (np.float32, np.float16, np.int64):
            x = (rng.standard_normal((301, 7, 5)) * 100).astype(dtype)
            src = self.npy("x.npy", x)
            out = self.path("y.npy")
            self.run_ok("convert", src, "-o", out, "--force")
            self.assert_npy(out, x)
            for i in range(3):
                part = self.path(f"p{i}.npy")
                self.run_ok("convert", src, "-o", part, "--part", f"{i}/3")
                self.assert_npy(part, x[i * 301 // 3:(i + 1) * 301 // 3])

    def test_convert_along_a_later_slab_axis(self):
        x = np.arange(1 * 3000 * 4, dtype=np.float32).reshape(1, 3000, 4)
        src = self.npy("x.npy", x)
        self.run_ok("convert", src, "-o", self.path("y.npy"))
        self.assert_npy(self.path("y.npy"), x)
        self.run_ok("convert", src, "-o", self.path("p.npy"), "--part", "1/2")
        self.assert_npy(self.path("p.npy"), x[:, 1500:])

    def test_convert_from_contiguous_hdf5(self):
        x = np.random.default_rng(1).standard_normal((513, 33)).astype(np.float32)
        with h5py.File(self.path("x.h5"), "w") as f:
            f.create_dataset("d", data=x)  # contiguous: stored as its bytes
            f.create_dataset("c", data=x, chunks=(64, 33), compression="gzip")
        for name in ("d", "c"):
            out = self.path(f"{name}.npy")
            self.run_ok("convert", self.path("x.h5") + ":/" + name, "-o", out)
            self.assert_npy(out, x)

    @unittest.skipUnless(shutil.which("strace"), "needs strace")
    def test_the_kernel_copies(self):
        # Into a regular file the data go by copy_file_range, all of them in one call
        # here; the header (128 bytes) by write().
        x = np.random.default_rng(5).standard_normal((4096, 16)).astype(np.float32)
        src = self.npy("x.npy", x)
        log = self.path("strace.txt")
        # LeakSanitizer cannot run under ptrace: an ASan build is traced without it.
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
        subprocess.run(["strace", "-f", "-o", log, "-e", "trace=copy_file_range", BIN,
                        "convert", src, "-o", self.path("y.npy")], check=True, env=env)
        with open(log) as f:
            calls = [line for line in f if "copy_file_range(" in line]
        self.assertEqual(len(calls), 1, calls)
        self.assertRegex(calls[0], rf"\(\d+, \[128\], \d+, NULL, {x.nbytes}, 0\) = {x.nbytes}$")
        self.assert_npy(self.path("y.npy"), x)

    def test_convert_into_a_pipe(self):
        x = np.random.default_rng(2).standard_normal((2000, 64)).astype(np.float32)
        src = self.npy("x.npy", x)
        p = subprocess.run([BIN, "convert", src, "-o", "-"], capture_output=True, check=True)
        with open(src, "rb") as f:
            self.assertEqual(p.stdout, f.read())

    def test_convert_on_tmpfs(self):
        if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
            self.skipTest("no writable /dev/shm")
        import tempfile
        d = tempfile.mkdtemp(dir="/dev/shm")
        try:
            x = np.random.default_rng(3).standard_normal((1000, 16)).astype(np.float16)
            np.save(os.path.join(d, "x.npy"), x)
            for where in (d, self.tmp):  # same file system, and ext4 or whatever /tmp is
                out = os.path.join(where, "y.npy")
                self.run_ok("convert", os.path.join(d, "x.npy"), "-o", out, "--force")
                self.assert_npy(out, x)
        finally:
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)

    def test_join_npy_and_hdf5_parts(self):
        x = np.random.default_rng(4).standard_normal((100, 6)).astype(np.float32)
        parts = []
        for i, (a, b) in enumerate(((0, 33), (33, 66), (66, 100))):
            parts.append(self.npy(f"p{i}.npy", x[a:b]))
        self.run_ok("-q", "join", *parts, "-o", self.path("j.npy"))
        self.assert_npy(self.path("j.npy"), x)
        h5 = []
        for i in range(3):
            ref = self.path(f"h{i}.h5") + ":/x"
            self.run_ok("convert", self.path("j.npy"), "-o", ref, "--part", f"{i}/3")
            h5.append(ref)
        self.run_ok("join", *reversed(h5), "-o", self.path("k.npy"))
        self.assert_npy(self.path("k.npy"), x)

    def test_truncated_input_leaves_the_output_alone(self):
        x = np.arange(4096 * 8, dtype=np.float32).reshape(4096, 8)
        src = self.npy("x.npy", x)
        size = os.path.getsize(src)
        with open(src, "r+b") as f:
            f.truncate(size - 1000)
        have = size - 1000 - (size - x.nbytes)
        out = self.path("y.npy")
        with open(out, "wb") as f:
            f.write(b"old")
        self.assert_fails(3, "convert", src, "-o", out, "--force",
                          match=rf"truncated data: expected {x.nbytes} bytes, got {have}$")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"old")
        self.assert_fails(3, "join", src, "-o", self.path("j.npy"), "-q",
                          match=rf"truncated data: expected {x.nbytes} bytes, got {have}$")
        self.assertFalse(os.path.exists(self.path("j.npy")))


if __name__ == "__main__":
    unittest.main()
