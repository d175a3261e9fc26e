"""HDF5 interop: files h5py writes are read exactly; files posenc writes are what h5py
expects (float16, groups, compression, attributes); bad files fail cleanly."""
import filecmp
import json
import unittest

import h5py
import numpy as np

from posenc_testlib import PosencTestCase


def inspect_json(tc, ref, *extra):
    p = tc.run_ok("inspect", ref, "--json", "--head", "100000", *extra)
    return json.loads(p.stdout)


def slurp(path):
    with open(path, "rb") as fh:
        return fh.read()


def as_float(v):
    if isinstance(v, str):
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[v]
    return float(v)


class ReadH5pyFiles(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(7)
        self.arrays = {}
        base = rng.standard_normal((6, 5, 4)) * 3
        for name, dt in [("f16le", "<f2"), ("f16be", ">f2"), ("f32le", "<f4"), ("f32be", ">f4"),
                         ("f64le", "<f8"), ("f64be", ">f8")]:
            self.arrays[name] = base.astype(dt)
        for dt in ["i1", "i2", "<i4", ">i8", "u1", "<u2", ">u4", "u8"]:
            self.arrays["int_" + dt.strip("<>")] = rng.integers(0, 100, (7, 3)).astype(dt)
        self.arrays["i64_extreme"] = np.array([np.iinfo(np.int64).min, -1, np.iinfo(np.int64).max])
        self.arrays["bool"] = rng.random((4, 4)) > 0.5
        self.arrays["scalar"] = np.float64(2.5)
        self.file = self.path("in.h5")
        with h5py.File(self.file, "w") as f:
            for name, a in self.arrays.items():
                f[name] = a
            self.chunked = rng.standard_normal((130, 17)).astype(np.float32)
            f.create_dataset("deep/er/chunked", data=self.chunked, chunks=(16, 17),
                             compression="gzip", compression_opts=6, shuffle=True)
            f["deep/er/chunked"].attrs["theta"] = 10000.0
            f["deep/er/chunked"].attrs["style"] = "neox"
            f["deep/er/chunked"].attrs["count"] = np.int64(-3)
            f["deep/er/chunked"].attrs["factors"] = np.array([1.0, 0.5])

    def test_values_and_dtypes_exact(self):
        for name, a in self.arrays.items():
            with self.subTest(name=name):
                j = inspect_json(self, f"{self.file}:/{name}")
                self.assertEqual(j["shape"], list(np.shape(a)))
                a = np.asarray(a)
                if a.dtype == bool:
                    self.assertEqual(j["dtype"], "bool")
                    self.assertEqual(j["values"], a.ravel().tolist())
                    continue
                kind = {"f": "f", "i": "i", "u": "u"}[a.dtype.kind]
                self.assertEqual(j["dtype"], f"{kind}{a.dtype.itemsize * 8}")
                if kind == "f":
                    got = np.array([as_float(v) for v in j["values"]], dtype=a.dtype.newbyteorder("="))
                    np.testing.assert_array_equal(got, a.ravel())
                else:
                    self.assertEqual(j["values"], [int(v) for v in a.ravel()])
                self.assertEqual(j["stats"]["count"], a.size)
                if a.dtype.itemsize > 1:
                    order = "big-endian" if a.dtype.byteorder == ">" else "little-endian"
                    self.assertIn(order, j["storage"])

    def test_stats_match_numpy(self):
        for name in ["f16be", "f32le", "f64be", "int_i2"]:
            with self.subTest(name=name):
                a = self.arrays[name].astype(np.float64)
                j = inspect_json(self, f"{self.file}:/{name}")["stats"]
                self.assertEqual(j["min"], a.min())
                self.assertEqual(j["max"], a.max())
                np.testing.assert_allclose(j["mean"], a.mean(), rtol=1e-12)
                np.testing.assert_allclose(j["std"], a.std(), rtol=1e-12)

    def test_chunked_gzip_shuffle_and_attributes(self):
        j = inspect_json(self, f"{self.file}:/deep/er/chunked")
        np.testing.assert_array_equal(np.array(j["values"], dtype=np.float32), self.chunked.ravel())
        self.assertIn("chunked (16, 17)", j["storage"])
        self.assertIn("gzip 6", j["storage"])
        self.assertIn("shuffle", j["storage"])
        self.assertEqual(sorted(j["attrs"]), ["count", "factors", "style", "theta"])
        self.assertEqual(j["attrs"]["theta"], 10000.0)
        self.assertEqual(j["attrs"]["style"], "neox")
        self.assertEqual(j["attrs"]["count"], -3)
        self.assertEqual(j["attrs"]["factors"], [1.0, 0.5])

    def test_slices_read_rows_like_numpy(self):
        a = self.chunked
        for sl, expect in [("5", a[5]), ("-3:", a[-3:]), ("10:100:7, 3:9", a[10:100:7, 3:9]),
                           ("::-40, -1", a[::-40, -1]), ("...,2", a[..., 2]),
                           ("129:0:-50", a[129:0:-50])]:
            with self.subTest(slice=sl):
                j = inspect_json(self, f"{self.file}:/deep/er/chunked", "--slice", sl)
                self.assertEqual(j["slice_shape"], list(expect.shape))
                np.testing.assert_array_equal(np.array(j["values"], dtype=np.float32),
                                              expect.ravel())

    def test_bare_file_lists_datasets(self):
        p = self.run_ok("inspect", self.file, "--json")
        j = json.loads(p.stdout)
        names = {d["name"]: d for d in j["datasets"]}
        self.assertIn("/deep/er/chunked", names)
        self.assertEqual(names["/deep/er/chunked"]["shape"], [130, 17])
        self.assertEqual(names["/f16be"]["dtype"], "f16")
        self.assertEqual(len(names), len(self.arrays) + 1)


class MappedDatasets(PosencTestCase):
    """RoPE maps a dataset stored as its bytes (contiguous, no filters, little-endian)
    from the file, as it maps an NPY file; the rest goes through libhdf5. Either way the
    output is byte for byte the output of the same tensor given as NPY."""

    def test_mapped_and_read_give_the_npy_bytes(self):
        x = np.random.default_rng(3).standard_normal((96, 4, 32)).astype(np.float32)
        f = self.path("in.h5")
        with h5py.File(f, "w", userblock_size=4096) as h:
            h["f32"] = x  # mapped (truncating the file mid-run tells: test_part_join)
            h["f16"] = x.astype(np.float16)
            h["f64"] = x.astype(np.float64)
            h.create_dataset("be", data=x.astype(">f4"))
            h.create_dataset("chunked", data=x, chunks=(8, 4, 32))
            h.create_dataset("gzip", data=x, compression="gzip")
            # Contiguous data at an odd offset is read through libhdf5, not mapped: the
            # kernels load whole elements (UBSan builds check).
            h["pad"] = np.arange(7, dtype=np.int8)
            h["odd"] = x.astype(np.float64)
        with h5py.File(f) as h:
            self.assertNotEqual(h["odd"].id.get_offset() % 8, 0)
        for name, dtype in [("f32", np.float32), ("f16", np.float16), ("f64", np.float64),
                            ("be", np.float32), ("chunked", np.float32), ("gzip", np.float32),
                            ("odd", np.float64)]:
            with self.subTest(name=name):
                src = self.path(f"{name}.npy")
                np.save(src, x.astype(dtype))
                want, got = self.path(f"{name}_want.npy"), self.path(f"{name}_got.h5")
                self.run_ok("rope", src, "-o", want, "--axes", "shd")
                self.run_ok("rope", f"{f}:/{name}", "-o", f"{got}:/out", "--axes", "shd")
                with h5py.File(got) as h:
                    out = h["out"][...]
                self.assertEqual(out.dtype, dtype)
                self.assertEqual(out.tobytes(), np.load(want).tobytes())


class BadHdf5Inputs(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.file = self.path("bad.h5")
        with h5py.File(self.path("other.h5"), "w") as f:
            f["x"] = np.arange(3.0)
        with h5py.File(self.file, "w") as f:
            f["g/q"] = np.arange(4.0)
            f["g/k"] = np.arange(4.0)
            f["text"] = "hello"
            f["compound"] = np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")])
            f["ext"] = h5py.ExternalLink(self.path("other.h5"), "/x")
            f.create_dataset("lzf", data=np.arange(100.0), compression="lzf")
            f.create_dataset("cplx", data=np.arange(3) * 1j)
            # Float types that are not the IEEE layouts: overlapping fields, another
            # exponent bias (libhdf5 converts these in software, inconsistently).
            for name, edit in (("overlap", lambda t: t.set_fields(63, 56, 7, 0, 52)),
                               ("ebias", lambda t: t.set_ebias(1000))):
                t = h5py.h5t.IEEE_F64LE.copy()
                edit(t)
                d = h5py.h5d.create(f.id, name.encode(), t, h5py.h5s.create_simple((4,)))
                d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(4.0))
        with open(self.path("plain.h5"), "w") as fh:
            fh.write("not an hdf5 file\n")

    def test_each_bad_input_is_one_line_exit_3(self):
        f = self.file
        cases = [
            (f"{self.path('plain.h5')}:/x", r"not an HDF5 file"),
            (f"{self.path('missing.h5')}:/x", r"missing\.h5.*No such file"),
            (f"{f}:/g/v", r"no dataset '/g/v' \(datasets: /compound, /cplx, /ebias, /g/k, /g/q"),
            (f"{f}:/g", r"'/g' is a group, not a dataset"),
            (f"{f}:/text", r"dataset '/text'.*unsupported type class string"),
            (f"{f}:/compound", r"unsupported type class compound"),
            (f"{f}:/cplx", r"unsupported type class compound"),
            (f"{f}:/overlap", r"unsupported 8-byte float type \(expected the IEEE layout"),
            (f"{f}:/ebias", r"unsupported 8-byte float type \(expected the IEEE layout"),
            (f"{f}:/ext", r"'/ext' is an external link"),
            (f"{f}:/lzf", r"'/lzf' is compressed with filter 32000.*not available"),
        ]
        for ref, pattern in cases:
            with self.subTest(ref=ref):
                self.assert_fails(3, "inspect", ref, match=pattern)

    def test_bad_slices(self):
        ref = f"{self.file}:/g/q"
        self.assert_fails(2, "inspect", ref, "--slice", "1:x", match=r"--slice '1:x'")
        self.assert_fails(2, "inspect", ref, "--slice", "::0", match=r"step is zero")
        self.assert_fails(3, "inspect", ref, "--slice", "4", match=r"index 4 is out of range for axis 0 with size 4")
        self.assert_fails(3, "inspect", ref, "--slice", "0,0", match=r"2 axes given for shape \(4,\)")


class WriteForH5py(PosencTestCase):
    """posenc writes (through `convert`), h5py reads."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(3)
        self.x = (rng.standard_normal((33, 8)) * 10).astype(np.float32)
        self.npy = self.path("x.npy")
        np.save(self.npy, self.x)

    def test_float16_groups_and_exact_values(self):
        out = self.path("o.h5")
        self.run_ok("convert", self.npy, "-o", f"{out}:/a/b/c", "--dtype", "f16")
        with h5py.File(out, "r") as f:
            d = f["a/b/c"]
            self.assertIsInstance(f["a/b"], h5py.Group)
            self.assertEqual(d.dtype, np.float16)
            np.testing.assert_array_equal(d[...], self.x.astype(np.float16))

    def test_bf16_reads_as_float32_with_exact_values(self):
        out = self.path("b.h5")
        self.run_ok("convert", self.npy, "-o", f"{out}:/b", "--dtype", "bf16")
        # bfloat16 = the top 16 bits of float32, rounded to nearest even.
        u = self.x.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        expect = r.astype(np.uint32).view(np.float32)
        with h5py.File(out, "r") as f:
            self.assertEqual(f["b"].dtype, np.float32)  # h5py 3.7 has no bfloat16
            self.assertEqual(f["b"].id.get_type().get_size(), 2)
            np.testing.assert_array_equal(f["b"][...], expect)

    def test_compression_and_dtypes(self):
        out = self.path("c.h5")
        self.run_ok("convert", self.npy, "-o", f"{out}:/c", "--compression", "5", "--dtype", "f64")
        with h5py.File(out, "r") as f:
            d = f["c"]
            self.assertEqual(d.compression, "gzip")
            self.assertEqual(d.compression_opts, 5)
            self.assertTrue(d.shuffle)
            self.assertEqual(d.dtype, np.float64)
            np.testing.assert_array_equal(d[...], self.x.astype(np.float64))
        b = self.path("bool.npy")
        np.save(b, self.x > 0)
        self.run_ok("convert", b, "-o", f"{out}:/bool")
        with h5py.File(out, "r") as f:
            self.assertEqual(f["bool"].dtype, np.bool_)
            np.testing.assert_array_equal(f["bool"][...], self.x > 0)

    def test_recorded_parameters_are_h5py_attributes(self):
        # `table` records its parameters through the HDF5 writer's attributes.
        out = self.path("t.h5")
        self.run_ok("table", "rope", "--positions", "4", "--dim", "8", "-o", f"{out}:/g/t")
        j = inspect_json(self, f"{out}:/g/t")
        with h5py.File(out, "r") as f:
            attrs = dict(f["g/t"].attrs)
        self.assertTrue(attrs)
        self.assertEqual(sorted(attrs), sorted(j["attrs"]))
        kinds = set()
        for k, v in attrs.items():
            if isinstance(v, str):
                kinds.add("str")
            elif isinstance(v, np.floating):
                self.assertEqual(v.dtype, np.float64)
                kinds.add("float")
            elif isinstance(v, np.integer):
                self.assertEqual(v.dtype, np.int64)
                kinds.add("int")
            else:
                self.fail(f"attribute {k} has unexpected type {type(v)}")
            self.assertEqual(j["attrs"][k], v.item() if hasattr(v, "item") else v)
        self.assertEqual(kinds, {"str", "float", "int"})

    def test_identical_runs_are_byte_identical(self):
        a, b = self.path("1.h5"), self.path("2.h5")
        self.run_ok("convert", self.npy, "-o", f"{a}:/x", "--compression", "4")
        self.run_ok("convert", self.npy, "-o", f"{b}:/x", "--compression", "4")
        self.assertTrue(filecmp.cmp(a, b, shallow=False))

    def test_failed_write_leaves_target_untouched(self):
        out = self.path("keep.h5")
        with h5py.File(out, "w") as f:
            f["old"] = np.arange(3.0)
        before = slurp(out)
        with open(self.path("bad.npy"), "wb") as fh:
            fh.write(b"\x93NUMPY garbage")
        self.assert_fails(3, "convert", self.path("bad.npy"), "-o", f"{out}:/new")
        self.assertEqual(slurp(out), before)
        self.assert_no_new_files(["x.npy", "bad.npy", "keep.h5"])
        self.assert_fails(4, "convert", self.npy, "-o", self.path("no/such/dir/y.h5") + ":/x")


if __name__ == "__main__":
    unittest.main()
