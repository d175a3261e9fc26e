"""--part I/N on rope, table and convert, and `posenc join`: N parts run by GNU parallel
and joined are byte for byte the whole run (read back with h5py / numpy), and parts that
do not make one whole are refused with one error line, exit 3 and no output."""
import os
import shutil
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase

HAVE_PARALLEL = shutil.which("parallel") is not None


class PartRange(PosencTestCase):
    def test_shares_follow_the_documented_formula(self):
        # [floor(I*R/N), floor((I+1)*R/N)) along the first axis with extent != 1.
        x = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
        src = self.npy("x.npy", x)
        for n in (1, 2, 3, 7, 9):
            for i in range(n):
                out = self.path(f"p{n}_{i}.h5")
                self.run_ok("convert", src, "-o", out + ":/x", "--part", f"{i}/{n}")
                a, b = i * 7 // n, (i + 1) * 7 // n
                with h5py.File(out, "r") as f:
                    d = f["x"]
                    np.testing.assert_array_equal(d[...], x[a:b])
                    if n > 1:
                        self.assertEqual(int(d.attrs["part_index"]), i)
                        self.assertEqual(int(d.attrs["part_count"]), n)
                        self.assertEqual(int(d.attrs["part_axis"]), 0)
                        self.assertEqual(list(d.attrs["part_offset"]), [a, 0])
                        self.assertEqual(list(d.attrs["part_total_shape"]), [7, 3])

    def test_bad_part_values_are_usage_errors(self):
        src = self.npy("x.npy", np.zeros((4, 2), np.float32))
        before = os.listdir(self.tmp)
        for bad in ("4/4", "0/0", "-1/4", "1", "a/b", "1/", "/4", "2/1"):
            self.assert_fails(2, "convert", src, "-o", self.path("o.npy"), "--part", bad,
                              match="--part")
        self.assert_no_new_files(before)


@unittest.skipUnless(HAVE_PARALLEL, "GNU parallel is not installed")
class ParallelParts(PosencTestCase):
    """Parts run concurrently by GNU parallel, then joined, equal the whole run."""

    def parallel(self, template, n):
        p = subprocess.run(["parallel", "--halt", "now,fail=1", template, ":::",
                            *map(str, range(n))], capture_output=True, cwd=self.tmp,
                           env=dict(os.environ, BIN=BIN))
        self.assertEqual(p.returncode, 0, p.stderr.decode())

    def assert_same_h5(self, a, b, name):
        with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
            da, db = fa[name], fb[name]
            self.assertEqual(da.dtype, db.dtype)
            self.assertEqual(da.shape, db.shape)
            self.assertEqual(da[...].tobytes(), db[...].tobytes())

    def test_rope_parts_joined_equal_whole(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((5, 4, 33, 16)).astype(np.float32)  # b h s d, b cut
        src = self.npy("q.npy", x)
        self.run_ok("rope", src, "-o", self.path("whole.h5") + ":/q")
        self.run_ok("rope", src, "-o", self.path("whole.npy"))
        n = 3
        self.parallel('"$BIN" rope q.npy -o part{}.h5:/q --part {}/' + str(n), n)
        parts = [self.path(f"part{i}.h5") + ":/q" for i in reversed(range(n))]  # any order
        self.run_ok("join", *parts, "-o", self.path("joined.h5") + ":/q")
        self.assert_same_h5(self.path("joined.h5"), self.path("whole.h5"), "q")
        self.run_ok("join", *parts, "-o", self.path("virtual.h5") + ":/g/q", "--virtual")
        with h5py.File(self.path("virtual.h5"), "r") as f, \
                h5py.File(self.path("whole.h5"), "r") as w:
            self.assertTrue(f["g/q"].is_virtual)
            self.assertEqual(f["g/q"][...].tobytes(), w["q"][...].tobytes())
        # NPY parts carry no record: joined in the order given.
        self.parallel('"$BIN" rope q.npy -o part{}.npy --part {}/' + str(n), n)
        self.run_ok("join", *[self.path(f"part{i}.npy") for i in range(n)], "-o",
                    self.path("joined.npy"))
        with open(self.path("joined.npy"), "rb") as a, open(self.path("whole.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_rope_along_s_with_unit_batch(self):
        # [1, s, h, d] (bshd): the cut axis is s, so positions must continue across parts.
        x = np.random.default_rng(2).standard_normal((1, 50, 2, 8)).astype(np.float16)
        src = self.npy("k.npy", x)
        self.run_ok("rope", src, "--axes", "bshd", "-o", self.path("whole.h5") + ":/k")
        self.parallel('"$BIN" rope k.npy --axes bshd -o p{}.h5:/k --part {}/4', 4)
        self.run_ok("join", *[self.path(f"p{i}.h5") + ":/k" for i in range(4)], "-o",
                    self.path("joined.h5") + ":/k")
        self.assert_same_h5(self.path("joined.h5"), self.path("whole.h5"), "k")

    def test_table_parts_joined_equal_whole(self):
        for j, kind in enumerate((["sinusoidal", "--positions", "1000", "--dim", "64"],
                     ["rope", "--positions", "777", "--dim", "32", "--emit", "cos",
                      "--scaling", "dynamic", "--factor", "2", "--original-max-pos", "256"])):
            self.run_ok("table", *kind, "-o", self.path(f"whole{j}.h5") + ":/t")
            args = " ".join(kind)
            self.parallel('"$BIN" table ' + args + f' -o t{j}_{{}}.h5:/t --part {{}}/5', 5)
            self.run_ok("join", *[self.path(f"t{j}_{i}.h5") + ":/t" for i in range(5)], "-o",
                        self.path(f"joined{j}.h5") + ":/t")
            self.assert_same_h5(self.path(f"joined{j}.h5"), self.path(f"whole{j}.h5"), "t")
            with h5py.File(self.path(f"joined{j}.h5"), "r") as f:
                self.assertNotIn("part_index", f["t"].attrs)

    def test_convert_parts_joined_equal_whole(self):
        x = np.random.default_rng(3).standard_normal((23, 7)).astype(np.float64)
        self.npy("x.npy", x)
        self.parallel('"$BIN" convert x.npy --dtype f16 -o c{}.h5:/x --part {}/4', 4)
        self.run_ok("join", *[self.path(f"c{i}.h5") + ":/x" for i in range(4)], "-o",
                    self.path("joined.npy"))
        np.testing.assert_array_equal(np.load(self.path("joined.npy")), x.astype(np.float16))

    def test_attention_batch_parts_joined_equal_whole(self):
        rng = np.random.default_rng(4)
        for n in "qkv":
            self.npy(n + ".npy", rng.standard_normal((5, 4, 16, 8)).astype(np.float32))
        self.run_ok("attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v",
                    self.path("v.npy"), "--causal", "-o", self.path("whole.h5"))
        self.parallel('"$BIN" attention -q q.npy -k k.npy -v v.npy --causal -o a{}.h5 '
                      '--part {}/3', 3)
        for name in ("probs", "output"):
            self.run_ok("join", *[self.path(f"a{i}.h5") + ":/" + name for i in range(3)], "-o",
                        self.path("joined.h5") + ":/" + name)
            self.assert_same_h5(self.path("joined.h5"), self.path("whole.h5"), name)
        self.assert_fails(2, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                          "--mask", self.path("q.npy"), "-o", self.path("m.h5"), "--part", "0/2",
                          match="--part: not with --mask")


class JoinErrors(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.x = np.arange(40, dtype=np.float32).reshape(10, 4)
        self.src = self.npy("x.npy", self.x)
        for i in range(4):
            self.run_ok("convert", self.src, "-o", self.path(f"p{i}.h5") + ":/x",
                        "--part", f"{i}/4")

    def parts(self, *idx):
        return [self.path(f"p{i}.h5") + ":/x" for i in idx]

    def fails(self, match, *args):
        before = os.listdir(self.tmp)
        self.assert_fails(3, "join", *args, "-o", self.path("out.h5") + ":/x", match=match)
        self.assert_no_new_files(before)

    def test_missing_part(self):
        self.fails(r"1 of 4 missing \(part 2\)", *self.parts(0, 1, 3))

    def test_duplicate_part(self):
        self.fails("both part 1 of 4", *self.parts(0, 1, 1, 2, 3))

    def test_parts_of_different_runs(self):
        self.run_ok("convert", self.src, "-o", self.path("q1.h5") + ":/x", "--part", "1/3")
        self.fails("part of 3, but .* part of 4", *self.parts(0), self.path("q1.h5") + ":/x")

    def test_dtype_mismatch(self):
        self.run_ok("convert", self.src, "--dtype", "f64", "-o", self.path("d3.h5") + ":/x",
                    "--part", "3/4")
        self.fails("is f64, but .* is f32", *self.parts(0, 1, 2), self.path("d3.h5") + ":/x")

    def test_whole_of_another_shape(self):
        y = self.npy("y.npy", np.zeros((10, 5), np.float32))
        self.run_ok("convert", y, "-o", self.path("s3.h5") + ":/x", "--part", "3/4")
        self.fails("whole cut along axis", *self.parts(0, 1, 2), self.path("s3.h5") + ":/x")

    def test_tampered_offset(self):
        with h5py.File(self.path("p2.h5"), "a") as f:
            f["x"].attrs["part_offset"] = np.array([4.0, 0.0])
        self.fails("should have shape", *self.parts(0, 1, 2, 3))

    def test_not_a_part(self):
        self.run_ok("convert", self.src, "-o", self.path("plain.h5") + ":/x")
        self.fails("not a part of a --part run", *self.parts(0, 1, 2), self.path("plain.h5") + ":/x")

    def test_npy_parts_must_agree_outside_the_axis(self):
        a = self.npy("a.npy", np.zeros((3, 4), np.float32))
        b = self.npy("b.npy", np.zeros((3, 5), np.float32))
        before = os.listdir(self.tmp)
        self.assert_fails(3, "join", a, b, "-o", self.path("ab.npy"), match="differs")
        self.assert_no_new_files(before)

    def test_virtual_needs_hdf5(self):
        self.assert_fails(2, "join", *self.parts(0, 1, 2, 3), "-o", self.path("o.npy"),
                          "--virtual", match="--virtual")

    def test_existing_output_untouched(self):
        with open(self.path("out.h5"), "wb") as f:
            f.write(b"old")
        self.assert_fails(3, "join", *self.parts(0, 1, 3), "-o", self.path("out.h5") + ":/x")
        with open(self.path("out.h5"), "rb") as f:
            self.assertEqual(f.read(), b"old")


class MappedInputTruncated(PosencTestCase):
    def cut_while_mapped(self, ref, path, keep, what):
        # The output is a FIFO read slowly, so posenc is mid-run (input mapped, a few
        # slabs ahead of the reader) when the input file is cut to `keep` bytes.
        fifo = self.path("out.fifo")
        os.mkfifo(fifo)
        p = subprocess.Popen([BIN, "rope", ref, "-o", fifo, "--axes", "shd"],
                             stderr=subprocess.PIPE)
        with open(fifo, "rb") as f:
            f.read(1 << 20)
            os.truncate(path, keep)
            while f.read(1 << 20):
                pass
        err = p.communicate()[1].decode()
        self.assertEqual(p.returncode, 3, err)
        self.assertEqual(err.strip().splitlines(),
                         [f"posenc: error: {what}: input file shrank while being read"])

    def test_input_truncated_while_mapped_is_one_error_line(self):
        src = self.npy("big.npy", np.ones((64, 1024, 256), np.float32))  # 64 MiB
        self.cut_while_mapped(src, src, 128, src)

    def test_hdf5_input_truncated_while_mapped_is_one_error_line(self):
        # A contiguous dataset is mapped from its file like an NPY file.
        src = self.path("big.h5")
        with h5py.File(src, "w") as f:
            f["x"] = np.ones((64, 1024, 256), np.float32)
        self.cut_while_mapped(src + ":/x", src, 4096, f"{src}: dataset '/x'")

if __name__ == "__main__":
    unittest.main()
