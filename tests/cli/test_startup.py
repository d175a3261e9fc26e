"""Start-up: commands load only the shared libraries they use.

The posenc executable is not linked with libhdf5 (which pulls in curl, krb5, ldap,
gnutls, ...) nor with OpenBLAS: it loads each on the first
call that needs it (src/shim/). These tests read the dynamic loader's own record of
what it loaded (LD_DEBUG=files), so they do not depend on the machine's speed; the
timings are in bench/startup/startup.sh. A libhdf5 that cannot be loaded is one error
line for HDF5 commands only.
"""
import os
import re
import shutil
import subprocess
import unittest

import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run

HEAVY = ("libhdf5", "libopenblas", "libcurl", "libgssapi", "libldap", "libplplot", "libcairo",
         "libsleef")


def loaded_libraries(*args, env=None):
    """Runs posenc with args under LD_DEBUG=files: (process, names of the files loaded)."""
    p = run(*args, env={"LD_DEBUG": "files", **(env or {})})
    names = set(re.findall(r"\bfile=(\S+)\s+\[\d+\];\s+(?:needed|dynamically loaded) by",
                           p.stderr))
    return p, {os.path.basename(n) for n in names}


def errors(p):
    """stderr without the loader's lines."""
    return [ln for ln in p.stderr.splitlines() if not re.match(r"^\s*\d+:", ln)]


class LoadedLibraries(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(1)
        self.x = self.npy("x.npy", rng.standard_normal((16, 8)).astype(np.float32))
        for name in ("q", "k", "v"):
            self.npy(name + ".npy", rng.standard_normal((1, 2, 8, 4)).astype(np.float32))

    def assert_light(self, *args):
        p, libs = loaded_libraries(*args)
        self.assertEqual(p.returncode, 0, errors(p))
        self.assertTrue(any(n.startswith("libc.so") for n in libs), libs)  # the record is read
        heavy = sorted(n for n in libs if n.startswith(HEAVY))
        self.assertEqual(heavy, [], f"posenc {' '.join(map(str, args))} loaded {heavy}")
        return libs

    def test_light_commands(self):
        self.assert_light("--version")
        self.assert_light("-j", "2", "--version")  # a thread count loads nothing
        self.assert_light("--help")
        self.assert_light("table", "sinusoidal", "--positions", 16, "--dim", 8,
                          "-o", self.path("t.npy"))
        self.assert_light("table", "rope", "--positions", 16, "--dim", 8, "-o", self.path("r.npy"))
        self.assert_light("inspect", self.x)
        self.assert_light("rope", self.x, "-o", self.path("y.npy"))
        self.assert_light("compare", self.x, self.x)

    def test_no_shared_cxx_runtime(self):
        # The GCC build links libstdc++, libgcc and libgomp statically (CMakeLists.txt);
        # the sanitizer build keeps them shared.
        if UNDER_ASAN:
            self.skipTest("the sanitizer build links the C++ runtime as shared libraries")
        libs = self.assert_light("--version")
        shared = sorted(n for n in libs if n.startswith(("libstdc++", "libgcc_s", "libgomp",
                                                         "libfmt")))
        self.assertEqual(shared, [], libs)

    def test_framework_arithmetic_loads_sleef(self):
        p, libs = loaded_libraries("table", "rope", "--positions", 16, "--dim", 8,
                                   "--arith", "hf", "-o", self.path("r.npy"))
        self.assertEqual(p.returncode, 0, errors(p))
        self.assertTrue(any(n.startswith("libsleef") for n in libs), libs)

    def test_hdf5_commands_load_libhdf5_only(self):
        h5 = self.path("t.h5")
        for args in (["table", "sinusoidal", "--positions", 16, "--dim", 8, "-o", h5 + ":/pe"],
                     ["inspect", h5 + ":/pe"]):
            p, libs = loaded_libraries(*args)
            self.assertEqual(p.returncode, 0, errors(p))
            self.assertTrue(any(n.startswith("libhdf5") for n in libs), libs)
            self.assertFalse(any(n.startswith("libopenblas") for n in libs), libs)

    def test_attention_loads_openblas(self):
        p, libs = loaded_libraries("-j", "1", "attention", "-q", self.path("q.npy"),
                                   "-k", self.path("k.npy"), "-v", self.path("v.npy"),
                                   "--emit", "output", "-o", self.path("o.npy"))
        self.assertEqual(p.returncode, 0, errors(p))
        self.assertTrue(any(n.startswith("libopenblas") for n in libs), libs)
        self.assertFalse(any(n.startswith("libhdf5") for n in libs), libs)

    @unittest.skipIf(UNDER_ASAN or shutil.which("strace") is None, "needs strace, no ASan")
    def test_openblas_starts_no_threads(self):
        # OpenBLAS's idle pool threads spin for 0.1 s after it loads, taking a core from
        # the workers; posenc calls BLAS on one thread, so it starts none. With -j 1
        # posenc itself starts no thread either: no clone at all, even when the user's
        # environment asks OpenBLAS for four.
        trace = self.path("clone.trace")
        p = subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=clone,clone3", "-o", trace, BIN, "-j",
             "1", "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v",
             self.path("v.npy"), "--emit", "output", "-o", self.path("o.npy")],
            capture_output=True, text=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "4"})
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(trace) as f:
            clones = [ln for ln in f if "clone" in ln]
        self.assertEqual(clones, [])
        self.assertTrue(np.isfinite(np.load(self.path("o.npy"))).all())


class SearchPath(PosencTestCase):
    def test_no_library_from_the_current_folder(self):
        # An empty run path entry (CMake pads the build tree's with ':') is the current
        # folder: the loader would try these first, and fail on them.
        for name in ("libfmt.so.9", "libsleef.so.3", "libgomp.so.1", "libstdc++.so.6",
                     "libhdf5_serial.so.103", "libopenblas.so.0"):
            open(self.path(name), "wb").close()
        self.npy("x.npy", np.ones((2, 3), np.float32))
        p = run("--version", cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("convert", "x.npy", "-o", "x.h5:/x", cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)


class MissingLibhdf5(PosencTestCase):
    """An unloadable libhdf5 (here: an empty file found first on LD_LIBRARY_PATH)."""

    def setUp(self):
        super().setUp()
        fake = self.path("lib")
        os.mkdir(fake)
        for name in ("libhdf5_serial.so.103", "libopenblas.so.0", "libsleef.so.3"):
            open(os.path.join(fake, name), "wb").close()
        self.env = {"LD_LIBRARY_PATH": fake}
        self.x = self.npy("x.npy", np.arange(12, dtype=np.float32).reshape(3, 4))

    def one_error(self, status, *args):
        p = run(*args, env=self.env)
        self.assertEqual(p.returncode, status, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        return lines[0]

    def test_hdf5_commands_fail_in_one_line(self):
        h5 = self.path("t.h5")
        run("table", "sinusoidal", "--positions", 4, "--dim", 4, "-o", h5 + ":/pe")  # real lib
        line = self.one_error(3, "inspect", h5 + ":/pe")
        self.assertRegex(line, r"^posenc: error: .*t\.h5.*: cannot read HDF5 files: "
                               r"libhdf5\S* cannot be loaded \(Debian package libhdf5\S*\)$")
        out = self.path("out.h5")
        line = self.one_error(4, "convert", self.x, "-o", out + ":/x")
        self.assertRegex(line, r"^posenc: error: .*out\.h5: cannot write HDF5 files: "
                               r"libhdf5\S* cannot be loaded \(Debian package libhdf5\S*\)$")
        self.assertFalse(os.path.exists(out))

    def test_other_commands_work(self):
        p = run("table", "sinusoidal", "--positions", 4, "--dim", 4, "-o", self.path("t.npy"),
                env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("inspect", self.x, env=self.env)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_framework_arithmetic_without_sleef(self):
        line = self.one_error(4, "table", "rope", "--positions", 4, "--dim", 4, "--arith", "hf",
                              "-o", self.path("r.npy"))
        self.assertRegex(line, r"^posenc: error: cannot reproduce torch's vector math: "
                               r"libsleef\S* cannot be loaded \(Debian package libsleef3\)$")
        self.assertFalse(os.path.exists(self.path("r.npy")))

    def test_attention_without_openblas(self):
        for name in ("q", "k", "v"):
            self.npy(name + ".npy", np.ones((1, 1, 2, 4), np.float32))
        line = self.one_error(4, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                              "-v", self.path("v.npy"), "--emit", "output",
                              "-o", self.path("o.npy"))
        self.assertRegex(line, r"^posenc: error: cannot multiply matrices: libopenblas\S* "
                               r"cannot be loaded \(Debian package libopenblas0\)$")


if __name__ == "__main__":
    import unittest
    unittest.main()
