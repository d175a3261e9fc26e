"""--part I/N on rope, table and convert, and `posenc join`: N parts run by GNU parallel
and joined are byte for byte the whole run (read back with h5py / numpy), and parts that
do not make one whole are refused with one error line, exit 3 and no output."""
import os
import resource
import shutil
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run

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
                        self.assertEqual(d.attrs["part_inputs"], os.path.realpath(src))

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
        # posenc's own reader refuses it, and says what reads it instead.
        self.assert_fails(3, "inspect", self.path("virtual.h5") + ":/g/q",
                          match=r"virtual\.h5: dataset '/g/q' is a virtual dataset \(refused: it "
                          r"reads other files; h5py reads it, and 'posenc join' without "
                          r"--virtual writes a copy posenc reads\)$")
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
        shutil.copy(self.path("p1.h5"), self.path("p1copy.h5"))
        self.fails("both part 1 of 4", *self.parts(0, 1), self.path("p1copy.h5") + ":/x",
                   *self.parts(2, 3))

    def test_same_part_file_twice(self):
        # Another spelling of the same file is the same part.
        again = os.path.join(self.tmp, ".", "p1.h5") + ":/x"
        self.fails("the same part .* given twice", *self.parts(0, 1), again, *self.parts(2, 3))

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


class JoinProvenance(PosencTestCase):
    """Parts of different runs agree in shape and dtype but not in what they hold: every
    recorded attribute but part_index/part_offset must match, else exit 3 naming it."""

    TABLE = ["table", "rope", "--positions", "10", "--dim", "8", "--emit", "cos"]

    def part(self, name, args, i, n=2, dataset="/t"):
        ref = self.path(name) + ":" + dataset
        self.run_ok(*args, "-o", ref, "--part", f"{i}/{n}")
        return ref

    def refused(self, attr, a, b):
        before = os.listdir(self.tmp)
        self.assert_fails(3, "join", a, b, "-o", self.path("out.h5") + ":/t",
                          match=rf"^posenc: error: \S+ and \S+ are parts of different runs: "
                                rf"attribute '{attr}' is .* in {a} but .* in {b}$")
        self.assert_no_new_files(before)

    def test_tables_of_other_parameters_are_refused(self):
        p0 = self.part("c0.h5", self.TABLE, 0)
        for attr, args in (("rope_theta", self.TABLE + ["--base", "500000"]),
                           ("emit", ["table", "rope", "--positions", "10", "--dim", "8",
                                     "--emit", "sin"]),
                           ("kind", ["table", "sinusoidal", "--positions", "10", "--dim", "8"]),
                           ("rope_start", self.TABLE + ["--start", "3"]),
                           ("rope_style", self.TABLE + ["--style", "gptj"])):
            other = self.part(f"{attr}.h5", args, 1)
            with h5py.File(self.path("c0.h5"), "r") as f0, \
                    h5py.File(self.path(f"{attr}.h5"), "r") as f1:
                self.assertEqual(f0["t"].shape, f1["t"].shape)  # only provenance tells
                self.assertEqual(f0["t"].dtype, f1["t"].dtype)
            self.refused(attr, p0, other)

    def test_rope_parts_of_other_start_or_style_are_refused(self):
        src = self.npy("q.npy", np.random.default_rng(5).standard_normal((4, 2, 6, 8))
                       .astype(np.float32))
        p0 = self.part("r0.h5", ["rope", src], 0)
        self.refused("rope_start", p0, self.part("r1.h5", ["rope", src, "--start", "7"], 1))
        self.refused("rope_style", p0, self.part("r2.h5", ["rope", src, "--style", "gptj"], 1))
        self.run_ok("join", p0, self.part("r3.h5", ["rope", src], 1), "-o",
                    self.path("ok.h5") + ":/t")

    def test_parts_of_other_inputs_are_refused(self):
        # Same command, same parameters, another input: only part_inputs tells.
        rng = np.random.default_rng(6)
        q = self.npy("q.npy", rng.standard_normal((4, 2, 6, 8)).astype(np.float32))
        k = self.npy("k.npy", rng.standard_normal((4, 2, 6, 8)).astype(np.float32))
        v = self.npy("v.npy", rng.standard_normal((4, 2, 6, 8)).astype(np.float32))
        self.refused("part_inputs", self.part("q0.h5", ["rope", q], 0),
                     self.part("k1.h5", ["rope", k], 1))
        self.refused("part_inputs", self.part("cq0.h5", ["convert", q], 0),
                     self.part("ck1.h5", ["convert", k], 1))
        self.refused("part_inputs", self.part("a0.h5", ["attention", "-q", q, "-k", k], 0,
                                              dataset="/probs"),
                     self.part("a1.h5", ["attention", "-q", q, "-k", v], 1, dataset="/probs"))
        # Another spelling of the same input (relative, through a link) is the same input.
        os.symlink(q, self.path("link.npy"))
        whole = self.path("whole.h5")
        self.run_ok("rope", q, "-o", whole + ":/t")
        p1 = self.path("q1.h5") + ":/t"
        self.run_ok("rope", "link.npy", "-o", p1, "--part", "1/2", cwd=self.tmp)
        self.run_ok("join", p1, self.path("q0.h5") + ":/t", "-o", self.path("j.h5") + ":/t")
        with h5py.File(self.path("q0.h5"), "r") as f0, h5py.File(self.path("j.h5"), "r") as j, \
                h5py.File(whole, "r") as w:
            self.assertEqual(f0["t"].attrs["part_inputs"], os.path.realpath(q))
            self.assertNotIn("part_inputs", j["t"].attrs)
            self.assertEqual(j["t"][...].tobytes(), w["t"][...].tobytes())

    def test_part_without_part_inputs_joins_with_one_that_has_it(self):
        # A part written before part_inputs was recorded still joins with a newer one.
        x = self.npy("x.npy", np.arange(12, dtype=np.float32).reshape(6, 2))
        parts = [self.part(f"x{i}.h5", ["convert", x], i) for i in range(2)]
        with h5py.File(self.path("x0.h5"), "a") as f:
            del f["t"].attrs["part_inputs"]
        self.run_ok("join", *parts, "-o", self.path("whole.npy"))
        np.testing.assert_array_equal(np.load(self.path("whole.npy")), np.load(x))

    def test_old_parts_without_new_attributes_join_when_the_rest_agrees(self):
        # Parts written before an attribute existed lack it on every part: they join, and
        # the whole carries what they record.
        parts = [self.part(f"o{i}.h5", self.TABLE, i) for i in range(2)]
        for i in range(2):
            with h5py.File(self.path(f"o{i}.h5"), "a") as f:
                del f["t"].attrs["rope_style"]
        self.run_ok("join", *parts, "-o", self.path("whole.h5") + ":/t")
        with h5py.File(self.path("whole.h5"), "r") as f:
            self.assertNotIn("rope_style", f["t"].attrs)
            self.assertEqual(f["t"].attrs["emit"], "cos")
        # One part without it, the other with it: not the same record.
        with h5py.File(self.path("o1.h5"), "a") as f:
            f["t"].attrs["rope_style"] = "neox"
        self.refused("rope_style", *parts)


def h5_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class JoinIntoExistingFile(PosencTestCase):
    """The whole added to an existing HDF5 file, also one of the part files: the dataset
    is there afterwards (read by h5py) and everything the file held is kept."""

    def setUp(self):
        super().setUp()
        self.x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
        self.src = self.npy("x.npy", self.x)
        for i in range(3):
            self.run_ok("convert", self.src, "-o", self.path(f"p{i}.h5") + ":/x",
                        "--part", f"{i}/3")
        self.parts = [self.path(f"p{i}.h5") + ":/x" for i in range(3)]

    def assert_whole(self, path, name, virtual):
        with h5py.File(path, "r") as f:
            self.assertIn(name, f, f"{name} was not added to {path}")
            self.assertEqual(f[name].is_virtual, virtual)
            np.testing.assert_array_equal(f[name][...], self.x)
            self.assertNotIn("part_index", f[name].attrs)

    def test_virtual_into_existing_file(self):
        out = self.path("other.h5")
        with h5py.File(out, "w") as f:
            f["keep"] = np.arange(5)
            f.attrs["note"] = "kept"
        self.run_ok("join", *self.parts, "-o", out + ":/g/whole", "--virtual")
        self.assert_whole(out, "g/whole", True)
        with h5py.File(out, "r") as f:
            np.testing.assert_array_equal(f["keep"][...], np.arange(5))
            self.assertEqual(f.attrs["note"], "kept")

    def test_virtual_over_existing_dataset_needs_force(self):
        out = self.path("other.h5")
        with h5py.File(out, "w") as f:
            f["whole"] = np.zeros(2)
        before = h5_bytes(out)
        self.assert_fails(4, "join", *self.parts, "-o", out + ":/whole", "--virtual",
                          match="already exists")
        self.assertEqual(h5_bytes(out), before)
        self.run_ok("join", *self.parts, "-o", out + ":/whole", "--virtual", "--force")
        self.assert_whole(out, "whole", True)

    def test_virtual_into_a_part_file(self):
        # Named as given and by another spelling: the whole lands in p0.h5 beside its
        # part, which stays; the file still reads after the folder is moved.
        for name, spelled in (("whole", self.path("p0.h5")),
                              ("again", os.path.join(self.tmp, ".", "p0.h5"))):
            self.run_ok("join", *self.parts, "-o", spelled + ":/" + name, "--virtual")
            self.assert_whole(self.path("p0.h5"), name, True)
        with h5py.File(self.path("p0.h5"), "r") as f:
            np.testing.assert_array_equal(f["x"][...], self.x[:3])
        moved = self.path("moved")
        os.mkdir(moved)
        for i in range(3):
            shutil.move(self.path(f"p{i}.h5"), moved)
        self.assert_whole(os.path.join(moved, "p0.h5"), "whole", True)

    def test_copy_into_a_part_file(self):
        self.run_ok("join", *self.parts, "-o", self.path("p1.h5") + ":/whole")
        self.assert_whole(self.path("p1.h5"), "whole", False)
        with h5py.File(self.path("p1.h5"), "r") as f:
            np.testing.assert_array_equal(f["x"][...], self.x[3:6])

    def test_replacing_a_part_is_refused(self):
        before = h5_bytes(self.path("p0.h5"))
        for extra in ([], ["--virtual"]):
            self.assert_fails(2, "join", *self.parts, "-o",
                              os.path.join(self.tmp, ".", "p0.h5") + ":x", "--force", *extra,
                              match="is the part .* itself")
        self.assertEqual(h5_bytes(self.path("p0.h5")), before)


class JoinPercentNames(PosencTestCase):
    def test_percent_in_part_paths_and_dataset_names(self):
        # libhdf5 reads '%' in a virtual dataset's source names as a pattern.
        x = np.arange(8 * 2, dtype=np.float64).reshape(8, 2)
        src = self.npy("x.npy", x)
        folder = self.path("run%d")
        os.mkdir(folder)
        parts = []
        for i in range(2):
            ref = os.path.join(folder, f"p%b{i}%%.h5") + ":/g%s/x%b"
            self.run_ok("convert", src, "-o", ref, "--part", f"{i}/2")
            parts.append(ref)
        for out in (self.path("out.h5"), os.path.join(folder, "out%.h5")):
            self.run_ok("join", *parts, "-o", out + ":/w%b", "--virtual")
            with h5py.File(out, "r") as f:
                np.testing.assert_array_equal(f["w%b"][...], x)
            self.run_ok("join", *parts, "-o", out + ":/c%d")
            with h5py.File(out, "r") as f:
                np.testing.assert_array_equal(f["c%d"][...], x)


class JoinNpyParts(PosencTestCase):
    """NPY parts record nothing: what can be checked is, and the rest is a warning."""

    def setUp(self):
        super().setUp()
        self.a = self.npy("a.npy", np.zeros((3, 4), np.float32))
        self.b = self.npy("b.npy", np.ones((2, 4), np.float32))

    def test_same_file_twice_is_refused(self):
        os.symlink(self.a, self.path("link.npy"))
        for again in (self.a, os.path.join(self.tmp, ".", "a.npy"), self.path("link.npy")):
            before = os.listdir(self.tmp)
            self.assert_fails(3, "join", self.a, self.b, again, "-o", self.path("o.npy"),
                              match="given twice")
            self.assert_no_new_files(before)

    def test_output_over_a_part_is_refused(self):
        # Another spelling of a part as the output would replace that part with the whole.
        before = open(self.a, "rb").read()
        self.assert_fails(2, "join", self.a, self.b, "-o", os.path.join(self.tmp, ".", "a.npy"),
                          match="is also a part")
        self.assertEqual(open(self.a, "rb").read(), before)

    def test_single_part_warns(self):
        p = self.run_ok("join", self.a, "-o", self.path("o.npy"))
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertRegex(lines[0], r"^posenc: warning: .*a\.npy: the only part")
        np.testing.assert_array_equal(np.load(self.path("o.npy")), np.load(self.a))
        p = self.run_ok("-q", "join", self.a, "-o", self.path("o2.npy"))
        self.assertEqual(p.stderr, "")

    def test_several_parts_warn_that_order_is_unchecked(self):
        p = self.run_ok("join", self.b, self.a, "-o", self.path("o.npy"))
        self.assertRegex(p.stderr.strip(),
                         r"^posenc: warning: 2 parts .* order and completeness cannot be checked$")
        np.testing.assert_array_equal(np.load(self.path("o.npy")),
                                      np.concatenate([np.load(self.b), np.load(self.a)]))

    def test_recorded_parts_do_not_warn(self):
        x = self.npy("x.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
        for i in range(2):
            self.run_ok("convert", x, "-o", self.path(f"p{i}.h5") + ":/x", "--part", f"{i}/2")
        p = self.run_ok("join", self.path("p1.h5") + ":/x", self.path("p0.h5") + ":/x",
                        "-o", self.path("o.npy"))
        self.assertEqual(p.stderr, "")

    def test_plain_hdf5_parts_keep_only_shared_attributes(self):
        # Written without --part: the whole is labelled only with what all parts agree on.
        for i, start in enumerate((0, 4)):
            self.run_ok("table", "sinusoidal", "--positions", "4", "--dim", "8", "--start",
                        str(start), "-o", self.path(f"s{i}.h5") + ":/t")
        self.run_ok("-q", "join", self.path("s0.h5") + ":/t", self.path("s1.h5") + ":/t",
                    "-o", self.path("o.h5") + ":/t")
        with h5py.File(self.path("s0.h5"), "r") as s, h5py.File(self.path("o.h5"), "r") as f:
            differing = [k for k in s["t"].attrs if k not in f["t"].attrs]
            self.assertTrue(differing, "no attribute differed between the tables")
            for k in f["t"].attrs:
                np.testing.assert_array_equal(f["t"].attrs[k], s["t"].attrs[k])


class JoinCraftedParts(PosencTestCase):
    """Part attributes are untrusted: a 2 KB file claiming 2^52 parts is refused at
    once, without memory or time that grow with the claimed count."""

    def crafted(self, name, count, total):
        path = self.path(name)
        with h5py.File(path, "w") as f:
            d = f.create_dataset("x", data=np.zeros((0, 4), np.float32))
            d.attrs["part_index"] = np.int64(0)
            d.attrs["part_count"] = np.int64(count)
            d.attrs["part_axis"] = np.int64(0)
            d.attrs["part_offset"] = np.array([0.0, 0.0])
            d.attrs["part_total_shape"] = np.array([float(total), 4.0])
        self.assertLess(os.path.getsize(path), 4096)
        return path + ":/x"

    def run_bounded(self, *args):
        def limit():
            if not UNDER_ASAN:
                resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        p = subprocess.run([BIN, *args], capture_output=True, preexec_fn=limit, timeout=60)
        return p.returncode, p.stderr.decode()

    def test_huge_part_count(self):
        for count, match in ((2**52, r"parts: 4503599627370495 of 4503599627370496 missing "
                                     r"\(part 1, 2, 3, 4, 5, 6, 7, 8, \.\.\.\)$"),
                             (2**62, "is not a count"),
                             (2**63 - 1, "is not a count")):
            ref = self.crafted(f"c{count}.h5", count, 3)
            before = os.listdir(self.tmp)
            status, err = self.run_bounded("join", ref, "-o", self.path("o.h5") + ":/x")
            self.assertEqual(status, 3, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertRegex(err.strip(), match)
            self.assert_no_new_files(before)

    def test_crafted_attribute_value_is_one_short_line(self):
        x = self.npy("x.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
        parts = []
        for i in range(2):
            self.run_ok("convert", x, "-o", self.path(f"p{i}.h5") + ":/x", "--part", f"{i}/2")
            parts.append(self.path(f"p{i}.h5") + ":/x")
        with h5py.File(self.path("p1.h5"), "a") as f:
            f["x"].attrs["note"] = "line\n" * 20000
        p = self.assert_fails(3, "join", *parts, "-o", self.path("o.h5") + ":/x",
                              match=r"attribute 'note' is absent in .* but 'line line .*\.\.\. "
                                    r"\(100000 bytes\)' in ")
        self.assertLess(len(p.stderr), 1000)

    def test_missing_parts_named_and_counted(self):
        x = self.npy("x.npy", np.arange(20, dtype=np.float32).reshape(20, 1))
        for i in (0, 5, 19):
            self.run_ok("convert", x, "-o", self.path(f"p{i}.h5") + ":/x", "--part", f"{i}/20")
        self.assert_fails(3, "join", *[self.path(f"p{i}.h5") + ":/x" for i in (19, 0, 5)],
                          "-o", self.path("o.h5") + ":/x",
                          match=r"parts: 17 of 20 missing \(part 1, 2, 3, 4, 6, 7, 8, 9, "
                                r"\.\.\.\)$")


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
