"""fp8 tensors (float8_e4m3fn, float8_e5m2) through files: convert to and from fp8 on
every code, midpoint and overflow (NPY and HDF5) against the reference of
tests/lib/fp8_reference.py (written from the formats' definition, torch's rounding);
np.load and h5py read posenc's fp8 outputs as documented (NPY descr '<V1' as np.save
writes ml_dtypes' float8 arrays; HDF5 1-byte opaque type tagged with the dtype's name);
--input-dtype reads 1-byte inputs as fp8 and refuses others; inspect counts NaN codes;
compare measures fp8 ULPs; attention on fp8 Q/K/V gives the bytes of attention on the
widened float32 values, and refuses NaN codes unless --allow-nonfinite."""
import json
import os
import unittest

import h5py
import numpy as np

import fp8_reference as ref
from posenc_testlib import PosencTestCase, run

FORMATS = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def same_floats(a, b):
    """Bit equality, any NaN matching any NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(nan | (a.view(np.uint32) == b.view(np.uint32))))


def save_npy_descr(path, codes, descr):
    """Writes uint8 `codes` under the header descr `descr` (as np.save writes an
    ml_dtypes float8 array: '<V1')."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": False, "shape": codes.shape})
        f.write(np.ascontiguousarray(codes, np.uint8).tobytes())


class Convert(PosencTestCase):
    def test_npy_to_fp8_and_back_on_every_code_and_midpoint(self):
        for short, name in FORMATS.items():
            with self.subTest(fmt=short):
                x = ref.probe_values(short)
                src = self.npy(f"x_{short}.npy", x)
                out = self.path(f"c_{short}.npy")
                self.run_ok("convert", src, "--dtype", short, "-o", out)
                with open(out, "rb") as f:
                    version = np.lib.format.read_magic(f)
                    self.assertEqual(version, (1, 0))
                    _, _, dtype = np.lib.format.read_array_header_1_0(f)
                self.assertEqual(dtype.str, "|V1")  # numpy's spelling of '<V1'
                with open(out, "rb") as f:
                    self.assertIn(b"'descr': '<V1'", f.read(128))
                got = np.load(out).view(np.uint8)
                want = ref.encode(x, short)
                bad = np.nonzero(got != want)[0]
                self.assertEqual(bad.size, 0, [(float(x[i]), got[i], want[i]) for i in bad[:8]])
                back = self.path(f"b_{short}.npy")
                self.run_ok("convert", out, "--input-dtype", name, "--dtype", "f32", "-o", back)
                self.assertTrue(same_floats(np.load(back), ref.table(short)[want]))

    def test_f64_goes_through_f32_as_torch(self):
        # A float64 just above a midpoint rounds to the midpoint in float32, then to even.
        x = np.array([1.0625 + 2.0 ** -40, -(1.0625 + 2.0 ** -40)], np.float64)
        src = self.npy("x.npy", x)
        out = self.path("c.npy")
        self.run_ok("convert", src, "--dtype", "e4m3fn", "-o", out)
        got = np.load(out).view(np.uint8)
        np.testing.assert_array_equal(got, ref.encode(x.astype(np.float32), "e4m3fn"))
        self.assertEqual(got[0], 0x38)  # 1.0, the even neighbour, not 1.125

    def test_hdf5_round_trip_and_h5py_reads_it(self):
        for short, name in FORMATS.items():
            with self.subTest(fmt=short):
                x = ref.probe_values(short).reshape(-1, 2)
                src = self.npy(f"x_{short}.npy", x)
                h5 = self.path(f"o_{short}.h5")
                self.run_ok("convert", src, "--dtype", name, "-o", h5 + ":/g/x")
                with h5py.File(h5, "r") as f:
                    d = f["/g/x"]
                    t = d.id.get_type()
                    self.assertEqual(t.get_class(), h5py.h5t.OPAQUE)
                    self.assertEqual(t.get_tag(), b"NUMPY:|V1")
                    self.assertEqual(d.attrs["dtype"], name)
                    self.assertEqual(d.dtype, np.dtype("V1"))
                    codes = d[()].view(np.uint8)
                np.testing.assert_array_equal(codes, ref.encode(x, short))
                back = self.path(f"b_{short}.npy")
                # Self-describing: no --input-dtype needed.
                self.run_ok("convert", h5 + ":/g/x", "--dtype", "f32", "-o", back)
                self.assertTrue(same_floats(np.load(back), ref.table(short)[codes]))
                p = self.run_ok("inspect", "--json", h5 + ":/g/x")
                self.assertEqual(json.loads(p.stdout)["dtype"], name)

    def test_ml_dtypes_descriptors_and_bytes_read_with_input_dtype(self):
        codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
        for descr in ["<V1", "|V1", "|u1", "|i1", "<f1"]:
            with self.subTest(descr=descr):
                p = self.path("in.npy")
                save_npy_descr(p, codes, descr)
                out = self.path("o.npy")
                self.run_ok("convert", p, "--input-dtype", "e5m2", "--dtype", "f32", "-o", out)
                self.assertTrue(same_floats(np.load(out), ref.table("e5m2")[codes]))
        # h5py's opaque 1-byte data (void arrays) read the same way.
        h5 = self.path("v.h5")
        with h5py.File(h5, "w") as f:
            f["v"] = codes.view("V1")
        out = self.path("h.npy")
        self.run_ok("convert", h5 + ":/v", "--input-dtype", "e4m3fn", "--dtype", "f32", "-o", out)
        self.assertTrue(same_floats(np.load(out), ref.table("e4m3fn")[codes]))

    def test_bad_input_dtype(self):
        f32 = self.npy("f.npy", np.ones((2, 3), np.float32))
        out = self.path("o.npy")
        before = set(os.listdir(self.tmp))
        self.assert_fails(3, "convert", f32, "--input-dtype", "e4m3fn", "-o", out,
                          match="cannot read f32 elements as float8_e4m3fn")
        self.assert_fails(2, "convert", f32, "--input-dtype", "f32", "-o", out,
                          match="--input-dtype")
        self.assert_fails(2, "convert", f32, "--input-dtype", "e3m4", "-o", out,
                          match="unknown dtype")
        self.assert_fails(2, "convert", f32, "--dtype", "float8_e4m3", "-o", out,
                          match="unknown dtype")
        self.assertEqual(set(os.listdir(self.tmp)), before)


class InspectCompare(PosencTestCase):
    def test_inspect_counts_nan_codes(self):
        codes = np.array([0x00, 0x38, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x7F], np.uint8)
        p = self.path("c.npy")
        save_npy_descr(p, codes, "<V1")
        r = self.run_ok("inspect", "--json", p, "--input-dtype", "e4m3fn")
        j = json.loads(r.stdout)
        self.assertEqual(j["dtype"], "float8_e4m3fn")
        st = j["stats"]
        self.assertEqual((st["count"], st["finite"], st["nan"]), (8, 5, 3))
        self.assertEqual((st["min"], st["max"]), (-448.0, 448.0))
        codes = np.array([0x7C, 0xFC, 0x7D, 0x3C], np.uint8)
        save_npy_descr(p, codes, "<V1")
        st = json.loads(self.run_ok("inspect", "--json", p, "--input-dtype", "e5m2").stdout)["stats"]
        self.assertEqual((st["nan"], st["posinf"], st["neginf"], st["finite"]), (1, 1, 1, 1))

    def test_compare_ulps_of_fp8(self):
        rng = np.random.default_rng(3)
        for short in FORMATS:
            with self.subTest(fmt=short):
                t = ref.table(short)
                finite = np.nonzero(np.isfinite(t[:0x80]))[0]
                a = rng.choice(finite[2:-3], 50).astype(np.int64)
                steps = rng.integers(-2, 3, 50)
                b = a + steps
                sa, sb = self.path("a.npy"), self.path("b.npy")
                save_npy_descr(sa, a.astype(np.uint8), "<V1")
                save_npy_descr(sb, b.astype(np.uint8), "<V1")
                r = run("compare", "--json", "--max-ulp", "1", "--input-dtype", short, sa, sb)
                self.assertEqual(r.returncode, 1, r.stderr)
                j = json.loads(r.stdout)
                self.assertEqual(j["ulp_type"], FORMATS[short])
                self.assertEqual(j["max_ulp_diff"], int(np.abs(steps).max()))
                r = run("compare", "--json", "--max-ulp", "2", "--input-dtype", short, sa, sb)
                self.assertEqual(r.returncode, 0, r.stderr)
                # Across zero: +min subnormal and -min subnormal are 2 ULPs apart.
                save_npy_descr(sa, np.uint8([0x01]), "<V1")
                save_npy_descr(sb, np.uint8([0x81]), "<V1")
                j = json.loads(run("compare", "--json", "--max-ulp", "0", "--input-dtype",
                                   short, sa, sb).stdout)
                self.assertEqual(j["max_ulp_diff"], 2)


class Attention(PosencTestCase):
    def test_fp8_qkv_equal_widened_f32_bytes(self):
        rng = np.random.default_rng(5)
        for short, name in FORMATS.items():
            with self.subTest(fmt=short):
                t = ref.table(short)
                shape = (2, 3, 17, 8)
                ok = np.nonzero(np.isfinite(t) & (np.abs(t) <= 4))[0].astype(np.uint8)
                codes = {n: rng.choice(ok, shape) for n in "qkv"}
                f8, f32 = {}, {}
                for n, c in codes.items():
                    f8[n] = self.path(f"{n}8.npy")
                    save_npy_descr(f8[n], c, "<V1")
                    f32[n] = self.npy(f"{n}32.npy", t[c])
                for extra in [[], ["--causal"]]:
                    o8, o32 = self.path("o8.npy"), self.path("o32.npy")
                    self.run_ok("attention", "-q", f8["q"], "-k", f8["k"], "-v", f8["v"],
                                "--input-dtype", name, "--dtype", "f32", "--emit", "output", "-o", o8,
                                *extra)
                    self.run_ok("attention", "-q", f32["q"], "-k", f32["k"], "-v", f32["v"],
                                "--emit", "output", "-o", o32, *extra)
                    with open(o8, "rb") as a, open(o32, "rb") as b:
                        self.assertEqual(a.read(), b.read())
                # Default output dtype for fp8 Q: bf16 (FlashAttention-3's fp8 forward).
                o = self.path(f"o_{short}.h5")
                self.run_ok("attention", "-q", f8["q"], "-k", f8["k"], "-v", f8["v"],
                            "--input-dtype", name, "--emit", "output", "-o", o + ":/o")
                p = self.run_ok("inspect", "--json", o + ":/o")
                self.assertEqual(json.loads(p.stdout)["dtype"], "bf16")

    def test_nan_codes_are_nonfinite_inputs(self):
        shape = (1, 1, 4, 8)
        c = np.full(shape, 0x38, np.uint8)
        bad = c.copy()
        bad[0, 0, 2, 3] = 0x7F
        q, k, v = self.path("q.npy"), self.path("k.npy"), self.path("v.npy")
        save_npy_descr(q, c, "<V1")
        save_npy_descr(k, bad, "<V1")
        save_npy_descr(v, c, "<V1")
        out = self.path("o.npy")
        self.assert_fails(3, "attention", "-q", q, "-k", k, "-v", v, "--input-dtype", "e4m3fn",
                          "--dtype", "f32", "--emit", "output", "-o", out, match="NaN")
        self.assertFalse(os.path.exists(out))
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "--input-dtype", "e4m3fn",
                    "--allow-nonfinite", "--dtype", "f32", "--emit", "output", "-o", out)
        self.assertTrue(np.isnan(np.load(out)).any())


class Rope(PosencTestCase):
    def test_fp8_input_equals_widened_f32(self):
        rng = np.random.default_rng(8)
        for short, name in FORMATS.items():
            with self.subTest(fmt=short):
                t = ref.table(short)
                ok = np.nonzero(np.isfinite(t))[0].astype(np.uint8)
                codes = rng.choice(ok, (1, 2, 6, 16))
                src8 = self.path(f"x_{short}.npy")
                save_npy_descr(src8, codes, "<V1")
                src32 = self.npy(f"w_{short}.npy", t[codes])
                a, b = self.path("a.npy"), self.path("b.npy")
                h5 = self.path(f"x_{short}.h5")
                self.run_ok("convert", src8, "--input-dtype", short, "-o", h5 + ":/x")
                self.run_ok("rope", h5 + ":/x", "--dtype", "f32", "-o", a)
                self.run_ok("rope", src32, "-o", b)
                with open(a, "rb") as fa, open(b, "rb") as fb:
                    self.assertEqual(fa.read(), fb.read())
                self.run_ok("rope", h5 + ":/x", "-o", self.path(f"r_{short}.h5") + ":/r")
                p = self.run_ok("inspect", "--json", self.path(f"r_{short}.h5") + ":/r")
                self.assertEqual(json.loads(p.stdout)["dtype"], "bf16")
                self.assert_fails(2, "rope", h5 + ":/x", "--arith", "hf", "-o", a,
                                  match="fp8")


if __name__ == "__main__":
    unittest.main()
