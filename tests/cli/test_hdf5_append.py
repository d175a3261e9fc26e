"""HDF5 outputs add to an existing file (h5py's mode 'a'), and never damage it.

Checked with h5py: every dataset, group and attribute already in the file survives bit
for bit; groups on the way are created; replacing a dataset needs --force; a group of
the name, a dataset in the way of a group, a file that is not HDF5, a read-only folder,
a full disk (ulimit -f), a crash or a hang of libhdf5 while adding, SIGTERM, a crafted
file and an error found after the output was opened all leave the file byte-identical
(exit 4, or the error's own status) with no temporary files left. Several tables of one `table rope
--emit cos,sin` run and several attention outputs go into one file together; their
values are compared with independent numpy references.
"""
import math
import os
import resource
import signal
import stat
import subprocess
import time
import unittest

import h5py
import numpy as np

from hostile_h5 import write_hostile
from other_user import as_user, posenc_for
from posenc_testlib import BIN, PosencTestCase, run
from reference_rope_freqs import default_inv, mcos, msin


def run_as(preexec, *args, exe=BIN):
    """posenc (`exe`) with `preexec` run in the child before exec (limits, another user)."""
    p = subprocess.run([exe, *map(str, args)], capture_output=True, preexec_fn=preexec,
                       timeout=600)
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


def rope_cos_sin(positions, dim, base=10000.0):
    """HF's neox-style cos/sin tables [N, D] in float64 (emb = cat(freqs, freqs))."""
    ang = np.arange(positions, dtype=np.float64)[:, None] * default_inv(base, dim)[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return mcos(ang), msin(ang)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def within_f32_ulp(test, actual, expected):
    """float32 output within one float32 ulp of the float64 reference."""
    actual = np.asarray(actual)
    test.assertEqual(actual.dtype, np.float32)
    test.assertEqual(actual.shape, expected.shape)
    ulp = np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
    err = np.abs(actual.astype(np.float64) - expected)
    test.assertTrue(np.all(err <= ulp), f"max error {err.max()} (ulp {ulp.max()})")


def snapshot(path):
    """Every object of an HDF5 file: datasets as (dtype, shape, raw bytes, attrs), groups
    as attrs, read with h5py."""
    out = {}

    def attrs(obj):
        return {k: (np.asarray(v).dtype.str, np.asarray(v).tobytes()) if not isinstance(v, str)
                else v for k, v in obj.attrs.items()}

    with h5py.File(path, "r") as f:
        out["/"] = ("group", attrs(f))

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                out["/" + name] = ("dataset", obj.dtype.str, obj.shape,
                                   np.asarray(data).tobytes(), obj.compression, attrs(obj))
            else:
                out["/" + name] = ("group", attrs(obj))

        f.visititems(visit)
    return out


class AppendCase(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.h5 = self.path("f.h5")
        rng = np.random.default_rng(13)
        with h5py.File(self.h5, "w") as f:
            f.attrs["model"] = "tiny-llama"
            f.attrs["layers"] = np.int64(2)
            f.create_dataset("q", data=rng.standard_normal((1, 2, 6, 8)))
            f["q"].attrs["note"] = "queries"
            f["q"].attrs["scale"] = np.float32(0.5)
            g = f.create_group("layer0")
            g.attrs["index"] = np.int32(0)
            g.create_dataset("w", data=rng.standard_normal((16, 8)).astype(np.float32),
                             compression="gzip", shuffle=True, chunks=(4, 8))
            g.create_dataset("mask", data=rng.random((6, 6)) > 0.5)
            f.create_dataset("half", data=rng.standard_normal(10).astype(np.float16))
        self.before = snapshot(self.h5)

    def read_bytes(self):
        with open(self.h5, "rb") as f:
            return f.read()

    def assert_kept(self):
        """Everything the file held before is still there, bit for bit."""
        after = snapshot(self.h5)
        for name, value in self.before.items():
            self.assertIn(name, after)
            if name == "/":
                for k, v in value[1].items():
                    self.assertEqual(after["/"][1].get(k), v, f"root attribute {k}")
            else:
                self.assertEqual(after[name], value, name)
        return after

    def assert_untouched(self, status, *args, match=None, env=None):
        """posenc fails with `status` and one line; the file is byte-identical, nothing
        is left beside it."""
        data, listing = self.read_bytes(), sorted(os.listdir(self.tmp))
        p = self.assert_fails(status, *args, match=match, env=env)
        self.assertEqual(self.read_bytes(), data, "the existing file changed")
        self.assertEqual(sorted(os.listdir(self.tmp)), listing, "files left behind")
        return p


class TestAppend(AppendCase):
    def test_adds_datasets_and_keeps_everything(self):
        self.run_ok("table", "rope", "--positions", 12, "--dim", 8, "--emit", "cos",
                    "-o", self.h5 + ":/cos")
        self.run_ok("table", "rope", "--positions", 12, "--dim", 8, "--emit", "sin",
                    "-o", self.h5 + ":/sin")
        after = self.assert_kept()
        self.assertEqual(set(after) - set(self.before), {"/cos", "/sin"})
        cos, sin = rope_cos_sin(12, 8)
        with h5py.File(self.h5, "r") as f:
            within_f32_ulp(self, f["cos"][()], cos)
            within_f32_ulp(self, f["sin"][()], sin)
            self.assertEqual(f["sin"].attrs["emit"], "sin")

    def test_groups_are_created(self):
        self.run_ok("table", "rope", "--positions", 4, "--dim", 8, "--emit", "cos",
                    "-o", self.h5 + ":/layer0/cos")
        self.run_ok("table", "sinusoidal", "--positions", 4, "--dim", 8,
                    "-o", self.h5 + ":/layer1/abs/pe")
        after = self.assert_kept()
        self.assertEqual(after["/layer1"][0], "group")
        self.assertEqual(after["/layer1/abs"][0], "group")
        with h5py.File(self.h5, "r") as f:
            self.assertEqual(f["layer0/cos"].shape, (4, 8))
            self.assertEqual(f["layer1/abs/pe"].shape, (4, 8))

    def test_replacing_needs_force(self):
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "-o", self.h5 + ":/q", match=r"'/q' already exists.*--force")
        self.run_ok("table", "sinusoidal", "--positions", 3, "--dim", 4, "--force",
                    "-o", self.h5 + ":/q")
        self.before.pop("/q")
        self.assert_kept()
        with h5py.File(self.h5, "r") as f:
            self.assertEqual(f["q"].shape, (3, 4))
            self.assertEqual(f["q"].attrs["kind"], "sinusoidal")
            self.assertNotIn("note", f["q"].attrs)

    def test_group_is_never_replaced(self):
        for extra in ([], ["--force"]):
            self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                                  *extra, "-o", self.h5 + ":/layer0",
                                  match=r"'/layer0' is a group, not a dataset")

    def test_dataset_in_the_way_of_a_group(self):
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "--force", "-o", self.h5 + ":/q/x",
                              match=r"'/q' is a dataset, not a group")

    def test_no_clobber_refuses_an_existing_file(self):
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "--no-clobber", "-o", self.h5 + ":/new",
                              match="already exists")

    def test_usage_error_after_the_file_exists(self):
        self.assert_untouched(2, "table", "rope", "--positions", 4, "--dim", 8,
                              "--emit", "cos,bogus", "-o", self.h5 + ":/{}")
        self.assert_untouched(2, "table", "rope", "--positions", 4, "--dim", 7,
                              "-o", self.h5 + ":/cos")

    def test_bad_input_found_while_writing(self):
        # The NaN is in the last row: found after the output was opened and the first
        # rows were rotated and written.
        x = np.ones((4096, 64), dtype=np.float32)
        x[-1, 3] = np.nan
        src = self.npy("x.npy", x)
        self.before_listing = sorted(os.listdir(self.tmp))
        self.assert_untouched(3, "rope", src, "-o", self.h5 + ":/x_rot",
                              match="non-finite|NaN")

    def test_late_name_clash_leaves_earlier_datasets_out(self):
        # /sin exists: the run of cos,sin writes neither.
        self.run_ok("table", "rope", "--positions", 4, "--dim", 8, "--emit", "sin",
                    "-o", self.h5 + ":/sin")
        self.before = snapshot(self.h5)
        self.assert_untouched(4, "table", "rope", "--positions", 4, "--dim", 8,
                              "--emit", "cos,sin", "-o", self.h5 + ":/{}",
                              match="'/sin' already exists")

    def test_disk_full(self):
        size = os.path.getsize(self.h5)

        def limit():
            # Room for the copy of the file, not for the table added to it.
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, size + 4096))

        data = self.read_bytes()
        p = run_as(limit, "table", "sinusoidal", "--positions", 4096, "--dim", 64, "--dtype",
                   "f64", "-o", self.h5 + ":/pe")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("File too large", p.stderr)
        self.assertEqual(self.read_bytes(), data)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["f.h5"])

    def test_crash_while_adding_leaves_the_file(self):
        # The child that adds the datasets aborts after changing the copy.
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "-o", self.h5 + ":/pe", env={"POSENC_HDF5_FAULT": "append-abort"},
                              match="libhdf5 crashed adding the datasets.*left as it was")

    def test_hang_while_adding_is_stopped(self):
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "-o", self.h5 + ":/pe",
                              env={"POSENC_HDF5_FAULT": "append-hang", "POSENC_HDF5_TIMEOUT": "1"},
                              match="did not finish adding the datasets within 1 s")

    def test_signal_while_adding_leaves_the_file(self):
        data, listing = self.read_bytes(), sorted(os.listdir(self.tmp))
        env = dict(os.environ, POSENC_HDF5_FAULT="append-hang", POSENC_HDF5_TIMEOUT="60")
        p = subprocess.Popen([BIN, "table", "sinusoidal", "--positions", "3", "--dim", "4",
                              "-o", self.h5 + ":/pe"], env=env, stderr=subprocess.PIPE)
        time.sleep(1.0)  # the child adding the datasets is spinning by now
        p.send_signal(signal.SIGTERM)
        # (-SIGTERM if a very slow start had not yet reached the output code.)
        self.assertIn(p.wait(timeout=60), (128 + signal.SIGTERM, -signal.SIGTERM))
        p.stderr.close()
        self.assertEqual(self.read_bytes(), data)
        self.assertEqual(sorted(os.listdir(self.tmp)), listing)

    def test_symlink_target_is_updated(self):
        link = self.path("link.h5")
        os.symlink("f.h5", link)
        self.run_ok("table", "sinusoidal", "--positions", 3, "--dim", 4, "-o", link + ":/pe")
        self.assertTrue(os.path.islink(link))
        after = self.assert_kept()
        self.assertIn("/pe", after)

    def test_mode_is_kept(self):
        os.chmod(self.h5, 0o640)
        self.run_ok("table", "sinusoidal", "--positions", 3, "--dim", 4, "-o", self.h5 + ":/pe")
        self.assertEqual(stat.S_IMODE(os.stat(self.h5).st_mode), 0o640)


class TestOtherFiles(AppendCase):
    def test_not_hdf5_is_refused_unless_force(self):
        with open(self.h5, "wb") as f:
            f.write(b"a b c\n1 2 3\n")
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "-o", self.h5 + ":/pe", match="not an HDF5 file.*--force")
        self.run_ok("table", "sinusoidal", "--positions", 3, "--dim", 4, "--force",
                    "-o", self.h5 + ":/pe")
        with h5py.File(self.h5, "r") as f:
            self.assertEqual(list(f), ["pe"])

    def test_empty_file_is_a_new_file(self):
        open(self.h5, "wb").close()  # as mktemp leaves it
        self.run_ok("table", "sinusoidal", "--positions", 3, "--dim", 4, "-o", self.h5 + ":/pe")
        with h5py.File(self.h5, "r") as f:
            self.assertEqual(list(f), ["pe"])

    def test_truncated_hdf5_is_refused(self):
        data = self.read_bytes()
        with open(self.h5, "wb") as f:
            f.write(data[: len(data) // 3])
        self.assert_untouched(4, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                              "--force", "-o", self.h5 + ":/pe")

    def test_crafted_files_cannot_crash_posenc(self):
        for name in ("list_crash", "open_crash", "attr_hang"):
            with self.subTest(name):
                write_hostile(name, self.h5)
                for target in ("/new/d", "/a/d"):
                    data = self.read_bytes()
                    p = run("table", "sinusoidal", "--positions", 3, "--dim", 4, "--force",
                            "-o", f"{self.h5}:{target}", env={"POSENC_HDF5_TIMEOUT": "3"})
                    # Added (libhdf5 coped) or refused with the file as it was; never a
                    # crash of posenc itself.
                    self.assertIn(p.returncode, (0, 4), p.stderr)
                    self.assertEqual(len(p.stderr.strip().splitlines()), 1 - (p.returncode == 0),
                                     p.stderr)
                    if p.returncode == 4:
                        self.assertEqual(self.read_bytes(), data)
                    self.assertEqual(sorted(os.listdir(self.tmp)), ["f.h5"])

    @unittest.skipUnless(hasattr(os, "setuid"), "needs setuid")
    def test_read_only_folder(self):
        folder = self.path("ro")
        os.mkdir(folder)
        h5 = os.path.join(folder, "f.h5")
        os.replace(self.h5, h5)
        os.chmod(h5, 0o644)
        os.chmod(self.tmp, 0o755)
        os.chmod(folder, 0o555)
        # Root ignores permission bits: run posenc as nobody (a copy nobody can reach).
        root = os.geteuid() == 0
        drop, exe = (as_user("nobody"), posenc_for(self)) if root else (None, BIN)
        with open(h5, "rb") as f:
            data = f.read()
        try:
            p = run_as(drop, "table", "sinusoidal", "--positions", 3, "--dim", 4,
                       "-o", h5 + ":/pe", exe=exe)
        finally:
            os.chmod(folder, 0o755)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertRegex(p.stderr, r"^posenc: error: .*Permission denied\n$")
        with open(h5, "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(os.listdir(folder), ["f.h5"])


class TestSeveralDatasets(PosencTestCase):
    def test_emit_list_into_one_file(self):
        h5 = self.path("t.h5")
        cos, sin = rope_cos_sin(16, 12)
        inv = default_inv(10000.0, 12)
        self.run_ok("table", "rope", "--positions", 16, "--dim", 12,
                    "--emit", "cos,sin,inv-freq", "-o", h5 + ":/{}")
        self.run_ok("table", "rope", "--positions", 16, "--dim", 12, "--emit", "cos,sin",
                    "-o", h5 + ":/layer0")
        self.run_ok("table", "rope", "--positions", 16, "--dim", 12, "--emit", "cos,sin",
                    "-o", h5)
        with h5py.File(h5, "r") as f:
            self.assertEqual(sorted(f), ["cos", "inv_freq", "layer0", "rope_cos", "rope_sin",
                                         "sin"])
            for name in ("cos", "layer0/cos", "rope_cos"):
                within_f32_ulp(self, f[name][()], cos)
            for name in ("sin", "layer0/sin", "rope_sin"):
                within_f32_ulp(self, f[name][()], sin)
            within_f32_ulp(self, f["inv_freq"][()], inv)

    def test_emit_list_to_npy(self):
        cos, sin = rope_cos_sin(5, 8)
        self.run_ok("table", "rope", "--positions", 5, "--dim", 8, "--emit", "cos,sin",
                    "-o", self.path("t_{}.npy"))
        within_f32_ulp(self, np.load(self.path("t_cos.npy")), cos)
        within_f32_ulp(self, np.load(self.path("t_sin.npy")), sin)
        self.run_ok("table", "rope", "--positions", 5, "--dim", 8, "--emit", "sin,cos",
                    "--dtype", "f64", "-o", self.path("a.npy"), "-o", self.path("b.npy"))
        np.testing.assert_allclose(np.load(self.path("a.npy")), sin, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.load(self.path("b.npy")), cos, rtol=1e-12, atol=1e-15)

    def test_emit_list_errors(self):
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(2, "table", "rope", "--positions", 5, "--dim", 8, "--emit", "cos,sin",
                          "-o", self.path("t.npy"), match=r"-o: --emit cos,sin gives 2 tensors")
        self.assert_fails(2, "table", "rope", "--positions", 5, "--dim", 8, "--emit", "cos,cos",
                          "-o", self.path("t.h5"), match="named twice")
        self.assert_fails(2, "table", "rope", "--positions", 5, "--dim", 8, "--emit", "cos",
                          "-o", self.path("a.npy"), "-o", self.path("b.npy"))
        self.assert_no_new_files(before)

    def test_attention_outputs_into_the_input_file(self):
        rng = np.random.default_rng(7)
        q = rng.standard_normal((1, 2, 5, 8))
        k = rng.standard_normal((1, 2, 5, 8))
        v = rng.standard_normal((1, 2, 5, 8))
        h5 = self.path("fx.h5")
        with h5py.File(h5, "w") as f:
            for name, x in (("q", q), ("k", k), ("v", v)):
                f[name] = x
        self.run_ok("attention", "-q", h5 + ":/q", "-k", h5 + ":/k", "-v", h5 + ":/v",
                    "--emit", "logits,probs,output", "-o", h5 + ":/attn")
        s = q @ k.swapaxes(-1, -2) / math.sqrt(8)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        with h5py.File(h5, "r") as f:
            self.assertEqual(sorted(f), ["attn", "k", "q", "v"])
            self.assertEqual(sorted(f["attn"]), ["logits", "output", "probs"])
            np.testing.assert_array_equal(f["q"][()], q)
            np.testing.assert_allclose(f["attn/logits"][()], s, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(f["attn/probs"][()], p, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(f["attn/output"][()], p @ v, rtol=1e-12, atol=1e-12)
        # All or none: /attn/lse is new but /attn/probs exists, so nothing is written.
        with open(h5, "rb") as f:
            data = f.read()
        self.assert_fails(4, "attention", "-q", h5 + ":/q", "-k", h5 + ":/k", "-v", h5 + ":/v",
                          "--emit", "lse,probs", "-o", h5 + ":/attn",
                          match="'/attn/probs' already exists")
        with open(h5, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_hf_style_fixture_built_by_several_commands(self):
        # The README's example: /cos, /sin, /q and /q_rot in one file.
        rng = np.random.default_rng(3)
        q = rng.standard_normal((1, 4, 10, 16)).astype(np.float32)
        h5 = self.path("fixture.h5")
        self.run_ok("table", "rope", "--positions", 10, "--dim", 16, "--emit", "cos,sin",
                    "-o", h5 + ":/{}")
        self.run_ok("convert", self.npy("q.npy", q), "-o", h5 + ":/q")
        self.run_ok("rope", h5 + ":/q", "-o", h5 + ":/q_rot")
        cos, sin = rope_cos_sin(10, 16)
        ref = q.astype(np.float64) * cos + rotate_half(q.astype(np.float64)) * sin
        with h5py.File(h5, "r") as f:
            self.assertEqual(sorted(f), ["cos", "q", "q_rot", "sin"])
            np.testing.assert_array_equal(f["q"][()], q)
            within_f32_ulp(self, f["cos"][()], cos)
            np.testing.assert_allclose(f["q_rot"][()], ref, rtol=0, atol=4e-6)


if __name__ == "__main__":
    unittest.main()
