"""The command and its process: the stale-temporary cleanup touches only regular files
this user could have made and never blocks (a FIFO named like a temporary, another
user's look-alike in a sticky folder); -j that cannot start degrades instead of dying in
libgomp; `help` maps man(1)'s statuses and write errors to posenc's; a file-size limit
met while adding to an HDF5 file says "File too large" (exit 4) and leaves the file.
Values are checked against numpy references, files with h5py."""
import os
import resource
import stat
import subprocess
import time
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run
from reference_rope_freqs import default_inv
from reference_sinusoidal import sinusoidal


def run_limited(preexec, *args, env=None, timeout=120):
    """posenc with `preexec` (resource limits) run in the child before exec."""
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, preexec_fn=preexec,
                       timeout=timeout, env=full_env)
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


class StaleTemporaryCleanup(PosencTestCase):
    def table(self, ref, timeout=30):
        return run("table", "sinusoidal", "--positions", 4, "--dim", 8, "--dtype", "f64",
                   "-o", ref, timeout=timeout)

    def check_table(self, path, name):
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f[name][()], sinusoidal(range(4), 8))

    def test_fifo_named_like_a_temporary_blocks_nothing(self):
        out = self.path("out.h5")
        fifo = self.path(".out.h5.posenc-AbC123")
        os.mkfifo(fifo)
        for name in ("/a", "/b"):  # a new file, then an addition to it
            p = self.table(out + ":" + name)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.check_table(out, name)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    @unittest.skipUnless(os.geteuid() == 0, "needs root (a file owned by another user)")
    def test_root_keeps_another_users_look_alike_in_a_sticky_folder(self):
        shared = self.path("shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        theirs = os.path.join(shared, ".out.h5.posenc-Th3irs")
        mine = os.path.join(shared, ".out.h5.posenc-M1ne00")
        for f in (theirs, mine):
            with open(f, "wb") as fh:
                fh.write(b"not ours" if f == theirs else b"stale")
        os.chown(theirs, 65534, 65534)
        time.sleep(3.2)  # older than the cleanup's grace period (ctime cannot be set)
        p = self.table(os.path.join(shared, "out.h5") + ":/pe")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_table(os.path.join(shared, "out.h5"), "pe")
        with open(theirs, "rb") as fh:
            self.assertEqual(fh.read(), b"not ours")
        self.assertFalse(os.path.exists(mine), "this user's stale temporary is removed")


class Threads(PosencTestCase):
    @unittest.skipIf(UNDER_ASAN, "address-space limits mean nothing under AddressSanitizer")
    def test_j_that_cannot_start_runs_on_fewer(self):
        def limit():
            # Room for posenc and the data, not for 600 thread stacks of 8 MiB.
            resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
            resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, 8 << 20))

        x = np.random.default_rng(41).standard_normal((1, 64, 4096, 64)).astype(np.float32)
        src, out = self.npy("q.npy", x), self.path("q_rot.npy")
        p = run_limited(limit, "-j", 600, "rope", src, "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"^posenc: note: -j 600: not that many threads can start "
                                   r"here .*; running on \d+$")
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        # HF's rotate_half RoPE in float64 (base 10000, positions 0..S-1).
        ang = np.arange(4096, dtype=np.float64)[:, None] * default_inv(10000.0, 64)[None, :]
        emb = np.concatenate([ang, ang], axis=1)
        xd = x.astype(np.float64)
        half = np.concatenate([-xd[..., 32:], xd[..., :32]], axis=-1)
        np.testing.assert_allclose(np.load(out), xd * np.cos(emb) + half * np.sin(emb),
                                   rtol=0, atol=1e-5)
        q = run_limited(limit, "-q", "-j", 600, "rope", src, "-o", out)
        self.assertEqual((q.returncode, q.stderr), (0, ""))

    def test_j_bounds(self):
        for bad in ("0", "4097"):
            p = run("-j", bad, "table", "sinusoidal", "--positions", 4, "--dim", 8,
                    "-o", self.path("x.npy"))
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


class Help(PosencTestCase):
    def fake_man(self, status):
        """A folder with a `man` that exits with `status` (and says so on stderr)."""
        bindir = self.path("bin")
        os.mkdir(bindir)
        man = os.path.join(bindir, "man")
        with open(man, "w") as f:
            f.write(f"#!/bin/sh\necho 'man: something went wrong' >&2\nexit {status}\n")
        os.chmod(man, 0o755)
        return {"PATH": bindir + ":/usr/bin:/bin"}

    @unittest.skipUnless(os.path.exists("/dev/full"), "no /dev/full")
    def test_help_to_a_full_device_is_an_output_error(self):
        if not any(os.access(os.path.join(d, "man"), os.X_OK) for d in ("/usr/bin", "/bin")):
            self.skipTest("no man(1)")
        with open("/dev/full", "wb") as full:
            p = subprocess.run([BIN, "help", "rope"], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=60)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(p.stderr.splitlines(),
                         ["posenc: error: cannot write to standard output: "
                          "No space left on device"])

    def test_mans_own_statuses_are_mapped(self):
        for status in (1, 2, 3, 16):
            p = run("help", "rope", env=self.fake_man(status))
            self.assertEqual(p.returncode, 4, p.stderr)
            self.assertRegex(p.stderr.splitlines()[-1],
                             rf"^posenc: error: help: man\(1\) could not show .*posenc-rope\.1 "
                             rf"\(exit status {status}\)$")
            os.remove(self.path("bin/man"))
            os.rmdir(self.path("bin"))

    def test_help_through_a_pipe_is_the_page(self):
        p = subprocess.run([BIN, "help", "rope"], capture_output=True, timeout=60,
                           env=dict(os.environ, MANWIDTH="80"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"posenc-rope", p.stdout)


class FileSizeLimit(PosencTestCase):
    def test_limit_met_in_the_libhdf5_child_says_file_too_large(self):
        h5 = self.path("f.h5")
        with h5py.File(h5, "w") as f:
            f["keep"] = np.arange(131072.0)  # 1 MiB
        with open(h5, "rb") as f:
            data = f.read()
        # Room for the 100 KiB table (written first to a file of its own) and for the
        # copy of the file, not for both: the child that adds the table to the copy
        # meets the limit.
        for room in (len(data) + 8192, len(data) + 40960):
            def limit(room=room):
                resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))

            p = run_limited(limit, "table", "sinusoidal", "--positions", 200, "--dim", 64,
                            "--dtype", "f64", "-o", h5 + ":/pe")
            self.assertEqual(p.returncode, 4, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertRegex(p.stderr, r"adding the datasets: File too large.*left as it was")
            self.assertNotRegex(p.stderr, "malformed|crashed")
            with open(h5, "rb") as f:
                self.assertEqual(f.read(), data)
            self.assertEqual(sorted(os.listdir(self.tmp)), ["f.h5"])
        p = run("table", "sinusoidal", "--positions", 200, "--dim", 64, "--dtype", "f64",
                "-o", h5 + ":/pe")
        self.assertEqual(p.returncode, 0, p.stderr)
        with h5py.File(h5, "r") as f:
            np.testing.assert_allclose(f["pe"][()], sinusoidal(range(200), 64), rtol=0,
                                       atol=1e-15)
            np.testing.assert_array_equal(f["keep"][()], np.arange(131072.0))


if __name__ == "__main__":
    unittest.main()
