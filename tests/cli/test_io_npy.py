"""NPY input and output of the posenc binary, checked against numpy itself.

numpy writes every variant posenc must read (dtypes in both byte orders, C and Fortran
order, format versions 1.0/2.0/3.0, rank 0, zero-size); posenc converts them and numpy
checks the values exactly. posenc's own NPY output must be byte-identical to np.save.
Malformed files of each class must fail with exit 3 and one error line, create nothing
and leave an existing output untouched.
"""
import hashlib
import io
import os
import struct
import subprocess
import unittest
import warnings

import numpy as np

from posenc_testlib import BIN, PosencTestCase

DTYPES = ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "|i1", "<i2", ">i2", "<i4", ">i4",
          "<i8", ">i8", "|u1", "<u2", ">u2", "<u4", ">u4", "<u8", ">u8", "|b1"]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = rng.standard_normal(shape) * 100
    elif dt.kind == "b":
        a = rng.integers(0, 2, shape)
    else:
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, shape, endpoint=True, dtype=np.int64 if info.min < 0
                         else np.uint64)
    return np.asarray(a).astype(dt)


def write_npy(path, arr, version=None):
    with open(path, "wb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.lib.format.write_array(f, arr, version=version)


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


class ReadsWhatNumpyWrites(PosencTestCase):
    def test_every_dtype_byte_order_and_layout(self):
        for i, dt in enumerate(DTYPES):
            for order in "CF":
                with self.subTest(dtype=dt, order=order):
                    a = sample(dt, (3, 4, 5), seed=i)
                    a = np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)
                    src, out = self.path(f"in{i}{order}.npy"), self.path(f"out{i}{order}.npy")
                    np.save(src, a)
                    self.run_ok("convert", src, "-o", out)
                    b = np.load(out)
                    # Same values, same dtype in native order, C order.
                    self.assertEqual(b.dtype, a.dtype.newbyteorder("="))
                    self.assertTrue(b.flags.c_contiguous)
                    np.testing.assert_array_equal(b, a)

    def test_convert_to_f64_matches_numpy_astype(self):
        for i, dt in enumerate(["<f2", ">f4", "<i8", ">u2", "|b1", "|i1"]):
            with self.subTest(dtype=dt):
                a = sample(dt, (5, 6), seed=10 + i)
                src, out = self.path("in.npy"), self.path("out.npy")
                np.save(src, a)
                self.run_ok("convert", src, "-o", out, "--dtype", "f64")
                b = np.load(out)
                self.assertEqual(b.dtype, np.float64)
                np.testing.assert_array_equal(b, a.astype(np.float64))

    def test_format_versions(self):
        a = sample("<f4", (4, 3), seed=3)
        for version in [(1, 0), (2, 0), (3, 0)]:
            with self.subTest(version=version):
                src, out = self.path("v.npy"), self.path("o.npy")
                write_npy(src, a, version)
                with open(src, "rb") as f:
                    self.assertEqual(f.read(8)[6:], bytes(version))
                self.run_ok("convert", src, "-o", out)
                np.testing.assert_array_equal(np.load(out), a)

    def test_rank0_and_zero_size(self):
        for shape in [(), (0,), (2, 0, 3), (0, 4), (1,)]:
            with self.subTest(shape=shape):
                a = sample("<f8", shape, seed=4)
                src, out = self.path("z.npy"), self.path("zo.npy")
                np.save(src, a)
                self.run_ok("convert", src, "-o", out)
                b = np.load(out)
                self.assertEqual(b.shape, shape)
                np.testing.assert_array_equal(b, a)
                self.assertEqual(md5(out), md5(src))

    def test_legacy_16_byte_alignment_and_high_header_byte(self):
        # Old writers aligned to 16; a 15-D header has HEADER_LEN 182 (low byte >= 0x80).
        a = sample("<f4", (2, 3), seed=5)
        d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}"
        h = d + " " * (16 - (10 + len(d) + 1) % 16) + "\n"
        src = self.path("old.npy")
        with open(src, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + a.tobytes())
        self.run_ok("convert", src, "-o", self.path("o.npy"))
        np.testing.assert_array_equal(np.load(self.path("o.npy")), a)
        b = sample("<f4", (1,) * 14 + (5,), seed=6)
        np.save(self.path("hi.npy"), b)
        with open(self.path("hi.npy"), "rb") as f:
            self.assertGreaterEqual(f.read(10)[8], 0x80)
        self.run_ok("convert", self.path("hi.npy"), "-o", self.path("o2.npy"))
        np.testing.assert_array_equal(np.load(self.path("o2.npy")), b)

    def test_data_at_an_odd_offset(self):
        # A header padded to an odd length puts the data at an odd offset (numpy reads
        # it); rope then reads the file instead of mapping it (the kernels load whole
        # elements: UBSan builds check), with the bytes of the aligned file's run.
        a = sample("<f8", (64, 2, 16), seed=7)
        d = "{'descr': '<f8', 'fortran_order': False, 'shape': (64, 2, 16)}"
        h = d + " " * (3 - (10 + len(d) + 1) % 8 + 8) + "\n"
        self.assertEqual((10 + len(h)) % 8, 3)
        odd = self.path("odd.npy")
        with open(odd, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + a.tobytes())
        np.testing.assert_array_equal(np.load(odd), a)
        aligned = self.npy("aligned.npy", a)
        self.run_ok("rope", odd, "-o", self.path("o_odd.npy"), "--axes", "shd")
        self.run_ok("rope", aligned, "-o", self.path("o_aligned.npy"), "--axes", "shd")
        with open(self.path("o_odd.npy"), "rb") as f1, open(self.path("o_aligned.npy"), "rb") as f2:
            self.assertEqual(f1.read(), f2.read())


class WritesLikeNpSave(PosencTestCase):
    def check_identical(self, a, name):
        ref, src, out = self.path(name + "_ref.npy"), self.path(name + "_src.npy"), \
            self.path(name + "_out.npy")
        np.save(ref, np.ascontiguousarray(a))
        # The source differs in layout so posenc really rewrites the header.
        write_npy(src, np.asfortranarray(a.astype(a.dtype.newbyteorder(">"))), (2, 0))
        self.run_ok("convert", src, "-o", out)
        with open(ref, "rb") as f1, open(out, "rb") as f2:
            self.assertEqual(f2.read(), f1.read(), f"{name}: bytes differ from np.save")

    def test_shapes_ndim_1_to_16(self):
        for nd in range(1, 17):
            shape = tuple([3] + [1] * (nd - 2) + [2]) if nd > 1 else (5,)
            with self.subTest(ndim=nd):
                self.check_identical(sample("<f4", shape, seed=nd), f"nd{nd}")

    def test_dtypes(self):
        for i, dt in enumerate(["<f2", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4",
                                "<u8", "|b1"]):
            with self.subTest(dtype=dt):
                self.check_identical(sample(dt, (4, 3), seed=20 + i), f"dt{i}")

    def test_headers_crossing_64_byte_boundaries(self):
        # Growth padding depends on the digits of shape[0]; long dims push the header
        # from 128 to 192 bytes and beyond.
        for shape in [(0,), (1234567890123, 0), (0, 99999999999, 7), (10 ** 18, 0),
                      (2,) + (1,) * 20 + (3,), (7,) + (12345,) * 3 + (0,)]:
            with self.subTest(shape=shape):
                a = np.zeros(shape, np.float32)
                ref, out = self.path("r.npy"), self.path("o.npy")
                np.save(ref, a)
                self.run_ok("convert", ref, "-o", out)
                with open(ref, "rb") as f1, open(out, "rb") as f2:
                    self.assertEqual(f2.read(), f1.read())

    def test_dtype_conversion_output(self):
        a = sample("<f8", (6, 7), seed=30)
        src, out = self.path("s.npy"), self.path("o.npy")
        np.save(src, a)
        for dt, npdt in [("f32", np.float32), ("f16", np.float16), ("i32", np.int32)]:
            with self.subTest(dtype=dt):
                self.run_ok("convert", src, "-o", out, "--dtype", dt)
                expect = a.astype(npdt)  # round to nearest even / truncate, like numpy
                np.save(self.path("ref.npy"), expect)
                self.assertEqual(md5(out), md5(self.path("ref.npy")))

    def test_bf16_to_npy_is_refused(self):
        src = self.path("s.npy")
        np.save(src, sample("<f4", (3,), seed=1))
        self.assert_fails(2, "convert", src, "-o", self.path("o.npy"), "--dtype", "bf16",
                          match=r"NPY has no bfloat16.*--dtype f32")
        self.assert_no_new_files(["s.npy"])


class Streams(PosencTestCase):
    def test_pipe_stdin_to_stdout(self):
        a = sample("<f4", (50, 30), seed=7)
        src = self.path("p.npy")
        np.save(src, a)
        p = subprocess.run(f"cat '{src}' | '{BIN}' convert - -o - > '{self.path('o.npy')}'",
                           shell=True, capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(md5(self.path("o.npy")), md5(src))

    def test_short_reads_from_a_slow_pipe(self):
        a = sample(">f8", (40, 9), seed=8)
        buf = io.BytesIO()
        np.save(buf, np.asfortranarray(a))
        data = buf.getvalue()
        proc = subprocess.Popen([BIN, "convert", "-", "-o", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Feed odd-sized pieces with flushes, so reads return short counts.
        import threading

        def feed():
            for i in range(0, len(data), 37):
                proc.stdin.write(data[i:i + 37])
                proc.stdin.flush()
            proc.stdin.close()

        t = threading.Thread(target=feed)
        t.start()
        out = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait()
        t.join()
        proc.stdout.close()
        proc.stderr.close()
        self.assertEqual(proc.returncode, 0, err)
        np.testing.assert_array_equal(np.load(io.BytesIO(out)), a)

    def test_stdin_truncated_and_trailing(self):
        buf = io.BytesIO()
        np.save(buf, np.arange(10, dtype=np.float32))
        data = buf.getvalue()
        self.assert_fails(3, "convert", "-", "-o", self.path("o.npy"), stdin=data[:-1],
                          match=r"standard input: truncated data: expected 40 bytes, got 39")
        self.assert_fails(3, "convert", "-", "-o", self.path("o.npy"), stdin=data + b"\0",
                          match=r"standard input: unexpected trailing bytes")
        self.assert_no_new_files([])

    def test_broken_pipe_exits_4(self):
        src = self.path("big.npy")
        np.save(src, np.zeros((2000, 1000)))
        p = subprocess.run(f"'{BIN}' convert '{src}' -o - | head -c 100 > /dev/null; "
                           f"echo ${{PIPESTATUS[0]}} >&2",
                           shell=True, executable="/bin/bash", capture_output=True)
        lines = p.stderr.decode().strip().splitlines()
        self.assertEqual(lines[-1], "4", p.stderr)
        self.assertEqual(lines[:-1], ["posenc: error: cannot write to standard output: Broken pipe"])


def npy_bytes(dict_text, data=b"", version=(1, 0), hlen=None):
    h = dict_text
    lenfmt = "<H" if version[0] == 1 else "<I"
    total = 6 + 2 + struct.calcsize(lenfmt) + len(h) + 1
    h = h + " " * ((64 - total % 64) % 64) + "\n"
    n = len(h) if hlen is None else hlen
    return b"\x93NUMPY" + bytes(version) + struct.pack(lenfmt, n) + h.encode("latin1") + data


GOOD_DICT = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"
DATA = np.arange(12, dtype="<f4").tobytes()

BAD_FILES = {
    "empty": (b"", "empty input"),
    "short_magic": (b"\x93NUMPY\x01", "truncated magic"),
    "bad_magic": (b"\x93numpy\x01\x00" + b" " * 200, "not an NPY file"),
    "hdf5_as_npy": (b"\x89HDF\r\n\x1a\n" + b"\0" * 200, "this is an HDF5 file"),
    "version_1_1": (npy_bytes(GOOD_DICT, DATA, (1, 1)), "unsupported NPY version 1.1"),
    "version_0_0": (npy_bytes(GOOD_DICT, DATA, (0, 0)), "unsupported NPY version 0.0"),
    "version_2_2": (npy_bytes(GOOD_DICT, DATA, (2, 2)), "unsupported NPY version 2.2"),
    "version_255": (npy_bytes(GOOD_DICT, DATA, (255, 255)), "unsupported NPY version 255.255"),
    "header_too_large": (b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xfffffff0) + b"{",
                         "too large"),
    "header_beyond_file": (npy_bytes(GOOD_DICT, b"", hlen=4000), "beyond the end of the file"),
    "missing_key": (npy_bytes("{'descr': '<f4', 'shape': (3, 4), }", DATA),
                    "missing key 'fortran_order'"),
    "extra_key": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), "
                            "'x': 1}", DATA), "unexpected key 'x'"),
    "fortran_order_0": (npy_bytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 4), }",
                                  DATA), "fortran_order must be True or False"),
    "non_int_dim": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 'a'), }",
                              DATA), "shape must hold integers"),
    "negative_dim": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }",
                               DATA), "negative dimension"),
    "huge_dim": (npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (4611686018427387904, 4), }", DATA), "too large"),
    "truncated_data": (npy_bytes(GOOD_DICT, DATA[:-1]),
                       "truncated data: expected 48 bytes, got 47"),
    "trailing_bytes": (npy_bytes(GOOD_DICT, DATA + b"junk"), "unexpected 4 trailing bytes"),
    "object_dtype": (npy_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }",
                               b"\x80\x02" + b"\0" * 22), "unsupported dtype '\\|O'"),
    "unicode_dtype": (npy_bytes("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }",
                                b"\0" * 12), "unsupported dtype '<U3'"),
    "complex_dtype": (npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                                b"\0" * 8), "unsupported dtype '<c8'"),
    "structured": (npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, "
                             "'shape': (1,), }", b"\0" * 4), "structured"),
}


class BadInputs(PosencTestCase):
    def test_each_class_exit_3_nothing_written(self):
        out = self.path("out.npy")
        with open(out, "wb") as f:
            f.write(b"precious")
        before = md5(out)
        for name, (data, fragment) in BAD_FILES.items():
            with self.subTest(case=name):
                src = self.path(name + ".npy")
                with open(src, "wb") as f:
                    f.write(data)
                p = self.assert_fails(3, "convert", src, "-o", out)
                self.assertIn(name + ".npy", p.stderr)
                self.assertRegex(p.stderr, fragment)
                self.assertEqual(md5(out), before)
                # Through a pipe too (no file size known in advance).
                p = self.assert_fails(3, "convert", "-", "-o", out, stdin=data)
                self.assertEqual(md5(out), before)
        self.assert_no_new_files(["out.npy"] + [n + ".npy" for n in BAD_FILES])

    def test_numpy_rejects_the_same_files(self):
        # numpy is stricter or equal on all but negative dims and trailing bytes, which it
        # documents as quirks; posenc refuses those too.
        for name, (data, _) in BAD_FILES.items():
            if name in ("negative_dim", "trailing_bytes", "object_dtype", "unicode_dtype",
                        "complex_dtype", "structured"):
                continue
            with self.subTest(case=name):
                with self.assertRaises(Exception):
                    np.load(io.BytesIO(data), allow_pickle=False)

    def test_missing_input_and_directory(self):
        self.assert_fails(3, "convert", self.path("nope.npy"), "-o", self.path("o.npy"),
                          match=r"cannot open '.*nope\.npy': No such file or directory")
        os.mkdir(self.path("d.npy"))
        self.assert_fails(3, "convert", self.path("d.npy"), "-o", self.path("o.npy"),
                          match=r"Is a directory")
        self.assert_no_new_files(["d.npy"])


if __name__ == "__main__":
    unittest.main()
