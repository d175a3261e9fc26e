"""Outputs behave as transactions: nothing a run or another writer made is ever lost.

Checked with h5py and numpy, never with posenc's own reading:
- concurrent runs adding different datasets to one HDF5 file (new or existing) all
  land, each dataset equal to its numpy reference;
- a writer that holds the file open (h5py mode 'a') is waited for, its datasets kept,
  and a run that cannot get the file's lock in time exits 4 having changed nothing;
  h5py cannot open the file for writing while posenc adds to it;
- a run with several outputs fails before publishing any when one cannot be written
  (/dev/full), HDF5 additions included;
- one output named twice through other spellings is refused (exit 2);
- HDF5 outputs that are devices, FIFOs, symbolic link loops are refused (exit 4) and
  left as they were; a dangling link is written through;
- a run killed with SIGKILL leaves no temporary behind once the next run writes there;
- HDF5 outputs work under a umask that removes the owner's write bit (as a normal user).
"""
import io
import multiprocessing
import os
import signal
import stat
import subprocess
import time
import unittest

import h5py
import numpy as np

from other_user import posenc_for
from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, holds_unnamed_file, run
from reference_sinusoidal import sinusoidal as sinusoidal_at


def sinusoidal(positions, dim):
    """The interleaved sinusoidal table [positions, dim] in float64."""
    return sinusoidal_at(np.arange(positions), dim)



def slurp(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def npy_bytes(array):
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def add_table(path, i, env=None):
    """`posenc table sinusoidal` of 2 + i positions added to `path` as /p<i>."""
    full = dict(os.environ, **(env or {}))
    p = subprocess.run([BIN, "table", "sinusoidal", "--positions", str(2 + i), "--dim", "4",
                        "-o", f"{path}:/p{i}"], capture_output=True, env=full, timeout=300)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def _add(args):
    return add_table(*args)


def temporaries(folder):
    return [n for n in os.listdir(folder) if ".posenc-" in n]


class ConcurrentAdds(PosencTestCase):
    def check_datasets(self, path, indices):
        with h5py.File(path, "r") as f:
            for i in indices:
                self.assertIn(f"p{i}", f, f"dataset /p{i} of a run that exited 0 is missing")
                np.testing.assert_allclose(f[f"p{i}"][...], sinusoidal(2 + i, 4), rtol=0,
                                           atol=2e-7)

    def stress(self, processes, rounds, existing):
        path = self.path("f.h5")
        keep = None
        if existing:
            with h5py.File(path, "w") as f:
                f["keep"] = np.arange(10.0)
                keep = f["keep"][...]
        landed = []
        with multiprocessing.Pool(processes) as pool:
            for r in range(rounds):
                jobs = [(path, r * processes + j) for j in range(processes)]
                for (p, i), (status, err) in zip(jobs, pool.map(_add, jobs)):
                    # Every run waits for the lock: all must land.
                    self.assertEqual(status, 0, err)
                    landed.append(i)
        self.check_datasets(path, landed)
        with h5py.File(path, "r") as f:
            self.assertEqual(len([k for k in f if k.startswith("p")]), len(landed))
            if keep is not None:
                np.testing.assert_array_equal(f["keep"][...], keep)
        self.assertEqual(temporaries(self.tmp), [])

    def test_concurrent_adds_to_a_new_file_all_land(self):
        self.stress(processes=12, rounds=2, existing=False)

    def test_concurrent_adds_to_an_existing_file_all_land(self):
        self.stress(processes=16, rounds=5, existing=True)


class OtherWriters(PosencTestCase):
    def test_waits_for_an_h5py_writer_and_keeps_its_data(self):
        path = self.path("f.h5")
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(4.0)
        f = h5py.File(path, "a")  # holds libhdf5's lock, as a notebook would
        proc = subprocess.Popen([BIN, "table", "sinusoidal", "--positions", "3", "--dim", "4",
                                 "-o", f"{path}:/pe"], stderr=subprocess.PIPE)
        time.sleep(1.0)
        self.assertIsNone(proc.poll(), "posenc did not wait for the writer's lock")
        f["b"] = np.arange(5.0)  # written while posenc waits
        f.close()
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        with h5py.File(path, "r") as g:
            np.testing.assert_array_equal(g["a"][...], np.arange(4.0))
            np.testing.assert_array_equal(g["b"][...], np.arange(5.0))
            np.testing.assert_allclose(g["pe"][...], sinusoidal(3, 4), rtol=0, atol=2e-7)

    def test_lock_timeout_changes_nothing(self):
        path = self.path("f.h5")
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(4.0)
        before = slurp(path)
        with h5py.File(path, "r+"):
            p = run("table", "sinusoidal", "--positions", "3", "--dim", "4", "-o",
                    f"{path}:/pe", env={"POSENC_LOCK_TIMEOUT": "1"})
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertRegex(p.stderr, r"holds it open for writing.*POSENC_LOCK_TIMEOUT")
        self.assertEqual(slurp(path), before)
        self.assertEqual(temporaries(self.tmp), [])

    def test_h5py_cannot_write_while_posenc_adds(self):
        path = self.path("f.h5")
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(4.0)
        before = slurp(path)
        # The add hangs in libhdf5 (a test fault) while posenc holds the file's lock.
        proc = subprocess.Popen(
            [BIN, "table", "sinusoidal", "--positions", "3", "--dim", "4", "-o",
             f"{path}:/pe"], stderr=subprocess.PIPE,
            env=dict(os.environ, POSENC_HDF5_FAULT="append-hang", POSENC_HDF5_TIMEOUT="4"))
        deadline = time.time() + 10
        while time.time() < deadline and not temporaries(self.tmp):
            time.sleep(0.02)
        time.sleep(0.3)
        with self.assertRaises(OSError):  # libhdf5's "unable to lock file"
            h5py.File(path, "a")
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 4, err)
        self.assertEqual(slurp(path), before)

    def test_file_created_meanwhile_is_added_to_not_replaced(self):
        path = self.path("f.h5")
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        data = npy_bytes(x)
        # posenc starts with no file there and opens its output once the input's header
        # arrives; h5py makes the file while posenc waits for the rest of the input.
        proc = subprocess.Popen([BIN, "convert", "-", "-o", f"{path}:/x"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdin.write(data[:-4])
        proc.stdin.flush()
        time.sleep(0.5)
        with h5py.File(path, "w") as f:
            f["other"] = np.arange(3.0)
        _, err = proc.communicate(data[-4:], timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["other"][...], np.arange(3.0))
            np.testing.assert_array_equal(f["x"][...], x)


class AllOrNone(PosencTestCase):
    def setUp(self):
        super().setUp()
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")

    def test_two_files_one_full(self):
        old = self.path("cos.npy")
        np.save(old, np.zeros(3))
        before = slurp(old)
        p = run("table", "rope", "--positions", "8", "--dim", "8", "--emit", "cos,sin",
                "-o", old, "-o", "/dev/full")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("No space left on device", p.stderr)
        self.assertEqual(slurp(old), before)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["cos.npy"])

    def test_hdf5_addition_and_a_full_file(self):
        path = self.path("f.h5")
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(4.0)
        before = slurp(path)
        p = run("table", "rope", "--positions", "8", "--dim", "8", "--emit", "cos,sin",
                "-o", f"{path}:/cos", "-o", "/dev/full")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(slurp(path), before)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["f.h5"])

    def test_rope_two_inputs_second_output_full(self):
        q = self.npy("q.npy", np.ones((1, 2, 4, 8), np.float32))
        k = self.npy("k.npy", np.ones((1, 2, 4, 8), np.float32))
        old = self.path("q_rot.npy")
        np.save(old, np.zeros(2))
        before = slurp(old)
        p = run("rope", q, k, "-o", old, "-o", "/dev/full")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(slurp(old), before)

    def test_analyze_table_and_full_plot(self):
        old = self.path("t.csv")
        with open(old, "w") as f:
            f.write("old\n")
        p = run("analyze", "decay", "--dim", "16", "--max-distance", "32", "-o", old,
                "--plot", "/dev/full", "--format", "svg")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(slurp(old, "r"), "old\n")


class OutputNames(PosencTestCase):
    def test_one_file_two_spellings(self):
        os.makedirs(self.path("d"))
        for a, b in [("same.npy", "./same.npy"), ("same.npy", "d/../same.npy")]:
            p = run("table", "rope", "--positions", "4", "--dim", "4", "--emit", "cos,sin",
                    "-o", a, "-o", b, cwd=self.tmp)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("named by two outputs", p.stderr)
        os.symlink("same.npy", self.path("link.npy"))
        np.save(self.path("same.npy"), np.zeros(1))
        p = run("table", "rope", "--positions", "4", "--dim", "4", "--emit", "cos,sin",
                "-o", "same.npy", "-o", "link.npy", cwd=self.tmp)
        self.assertEqual(p.returncode, 2, p.stderr)

    def test_one_dataset_two_spellings(self):
        p = run("table", "rope", "--positions", "4", "--dim", "4", "--emit", "cos,sin",
                "-o", "s.h5:/x", "-o", "./s.h5:x", cwd=self.tmp)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("named by two outputs", p.stderr)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_two_datasets_two_spellings_of_one_file(self):
        self.run_ok("table", "rope", "--positions", "4", "--dim", "4", "--emit", "cos,sin",
                    "-o", "s.h5:/cos", "-o", "./s.h5:sin", cwd=self.tmp)
        with h5py.File(self.path("s.h5"), "r") as f:
            self.assertEqual(sorted(f), ["cos", "sin"])


class OutputKinds(PosencTestCase):
    def table_to(self, target):
        return run("table", "sinusoidal", "--positions", "3", "--dim", "4", "-o",
                   f"{target}:/pe", "--to", "h5")

    def test_fifo_is_refused_and_kept(self):
        fifo = self.path("p.h5")
        os.mkfifo(fifo)
        p = self.table_to(fifo)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("not a regular file", p.stderr)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def test_device_is_refused_and_kept(self):
        # A device of the test's own (a copy of /dev/null's node, as root), so that a
        # posenc that wrongly replaced it would not replace the machine's /dev/null.
        targets = ["/proc/self/fd/1"]
        if os.geteuid() == 0:
            os.mknod(self.path("null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            targets.append(self.path("null"))
        for dev in targets:
            link = self.path("dev.h5")
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(dev, link)
            with self.subTest(dev=dev):
                p = self.table_to(link)
                self.assertEqual(p.returncode, 4, p.stderr)
                self.assertIn("not a regular file", p.stderr)
                self.assertTrue(os.path.islink(link))
        if os.geteuid() == 0:
            before = os.stat(self.path("null"))
            p = self.table_to(self.path("null"))
            self.assertEqual(p.returncode, 4, p.stderr)
            after = os.stat(self.path("null"))
            self.assertTrue(stat.S_ISCHR(after.st_mode))
            self.assertEqual(before.st_ino, after.st_ino)

    def test_dangling_link_is_written_through(self):
        os.symlink("real.h5", self.path("link.h5"))
        p = self.table_to(self.path("link.h5"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.islink(self.path("link.h5")))
        with h5py.File(self.path("real.h5"), "r") as f:
            np.testing.assert_allclose(f["pe"][...], sinusoidal(3, 4), rtol=0, atol=2e-7)

    def test_link_loop_is_refused(self):
        os.symlink("b.h5", self.path("a.h5"))
        os.symlink("a.h5", self.path("b.h5"))
        for target in ["a.h5:/pe", "a.npy"]:
            if target.endswith(".npy"):
                os.symlink("c.npy", self.path("a.npy"))
                os.symlink("a.npy", self.path("c.npy"))
            p = run("table", "sinusoidal", "--positions", "3", "--dim", "4", "-o",
                    self.path(target))
            self.assertEqual(p.returncode, 4, p.stderr)
            self.assertIn("symbolic link loop", p.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["a.h5", "a.npy", "b.h5", "c.npy"])


class Temporaries(PosencTestCase):
    def test_sigkill_leaves_nothing_after_the_next_run(self):
        path = self.path("f.h5")
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(1 << 16, dtype=np.float64)
        before = slurp(path)
        for _ in range(3):
            proc = subprocess.Popen(
                [BIN, "table", "sinusoidal", "--positions", "64", "--dim", "8", "-o",
                 f"{path}:/pe"], stderr=subprocess.DEVNULL,
                env=dict(os.environ, POSENC_HDF5_FAULT="append-hang", POSENC_HDF5_TIMEOUT="30"))
            deadline = time.time() + 10
            while time.time() < deadline and len(temporaries(self.tmp)) < 2:
                time.sleep(0.02)
            self.assertGreaterEqual(len(temporaries(self.tmp)), 1)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.assertEqual(slurp(path), before)
        # The next run removes what killed runs left (once they are a few seconds old).
        time.sleep(3.1)
        self.run_ok("table", "sinusoidal", "--positions", "3", "--dim", "4", "-o",
                    f"{path}:/pe")
        self.assertEqual(temporaries(self.tmp), [])
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["a"][...], np.arange(1 << 16, dtype=np.float64))
            np.testing.assert_allclose(f["pe"][...], sinusoidal(3, 4), rtol=0, atol=2e-7)

    def test_npy_temporaries_are_unnamed(self):
        # A SIGKILL while an NPY output is written leaves nothing: the file has no name.
        data = npy_bytes(np.ones((1024, 64), np.float32))
        proc = subprocess.Popen([BIN, "convert", "-", "-o", self.path("x.npy")],
                                stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        proc.stdin.write(data[: len(data) // 2])  # the output is open, half written
        proc.stdin.flush()
        deadline = time.time() + 10
        while time.time() < deadline and not holds_unnamed_file(proc.pid, self.tmp):
            time.sleep(0.02)
        self.assertTrue(holds_unnamed_file(proc.pid, self.tmp))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.assertEqual(os.listdir(self.tmp), [])


def small_filesystem(test, mib):
    """A tmpfs of `mib` MiB mounted in test.tmp (root only; unmounted at cleanup)."""
    mnt = test.path("small")
    os.makedirs(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", mnt],
                       capture_output=True)
    if p.returncode != 0:
        test.skipTest(f"cannot mount a tmpfs: {p.stderr.decode().strip()}")
    test.addCleanup(subprocess.run, ["umount", "-l", mnt])
    return mnt


def free_bytes(folder):
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


@unittest.skipUnless(os.geteuid() == 0, "needs root to mount a small filesystem")
class FullDisk(PosencTestCase):
    def test_add_that_does_not_fit_fails_before_filling_the_disk(self):
        mnt = small_filesystem(self, 8)
        path = os.path.join(mnt, "f.h5")
        with h5py.File(path, "w") as f:
            f["big"] = np.arange(5 << 17, dtype=np.float64)  # 5 MiB
        before = slurp(path)
        free = free_bytes(mnt)
        p = run("table", "sinusoidal", "--positions", "8", "--dim", "4", "-o", f"{path}:/pe")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("No space left on device", p.stderr)
        self.assertEqual(slurp(path), before)
        self.assertEqual(os.listdir(mnt), ["f.h5"])
        self.assertEqual(free_bytes(mnt), free)

    def test_second_output_does_not_fit(self):
        mnt = small_filesystem(self, 1)
        cos = os.path.join(mnt, "cos.npy")
        np.save(cos, np.zeros(4))
        before = slurp(cos)
        # cos (64 KiB) fits, sin (64 KiB) does not once cos is written: neither appears.
        with open(os.path.join(mnt, "fill"), "wb") as f:
            f.write(b"\0" * (free_bytes(mnt) - (100 << 10)))
        p = run("table", "rope", "--positions", "1024", "--dim", "32", "--emit", "cos,sin",
                "--dtype", "f32", "-o", cos, "-o", os.path.join(mnt, "sin.npy"))
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("No space left on device", p.stderr)
        self.assertEqual(slurp(cos), before)
        self.assertEqual(sorted(os.listdir(mnt)), ["cos.npy", "fill"])


@unittest.skipUnless(subprocess.run(["which", "strace"], capture_output=True).returncode == 0,
                     "needs strace")
@unittest.skipIf(UNDER_ASAN, "LeakSanitizer does not run under ptrace")
class Sync(PosencTestCase):
    def test_sync_flushes_file_and_folder(self):
        out = self.path("t.npy")
        p = subprocess.run(["strace", "-f", "-e", "trace=openat,open,fsync,rename,linkat,"
                            "renameat,renameat2", BIN, "table", "sinusoidal", "--positions", "3",
                            "--dim", "4", "-o", out, "--sync"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        log = p.stderr.splitlines()
        # The folder opened with O_DIRECTORY, and its descriptor fsynced after the rename.
        dir_fds = [line.rsplit("=", 1)[1].strip() for line in log
                   if "O_DIRECTORY" in line and f'"{self.tmp}"' in line and "= " in line]
        renamed = [i for i, line in enumerate(log) if "rename" in line and "t.npy" in line]
        self.assertTrue(renamed, "no rename to t.npy")
        synced = [line for line in log[renamed[-1]:]
                  if any(line.startswith(f"fsync({fd})") or f"fsync({fd})" in line
                         for fd in dir_fds)]
        self.assertTrue(dir_fds and synced, "\n".join(log[-20:]))
        np.testing.assert_allclose(np.load(out), sinusoidal(3, 4), rtol=0, atol=2e-7)


@unittest.skipUnless(os.geteuid() == 0, "needs root to run posenc as another user")
class Umask(PosencTestCase):
    def test_hdf5_under_a_umask_without_owner_write(self):
        os.chmod(self.tmp, 0o777)
        exe = posenc_for(self)  # a copy nobody can reach, wherever the build lives
        for mask in (0o277, 0o222):
            name = f"u{mask:o}.h5"
            p = subprocess.run(
                ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c",
                 f"umask {mask:o} && exec {exe} table sinusoidal --positions 3 --dim 4 "
                 f"-o {name}:/pe"], cwd=self.tmp, capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(stat.S_IMODE(os.stat(self.path(name)).st_mode), 0o666 & ~mask)
            with h5py.File(self.path(name), "r") as f:
                np.testing.assert_allclose(f["pe"][...], sinusoidal(3, 4), rtol=0, atol=2e-7)


if __name__ == "__main__":
    unittest.main()
