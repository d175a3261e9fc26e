"""Shared helpers for posenc's end-to-end and reference tests.

Tests run the real binary (POSENC_BIN, set by ctest) in a fresh temporary folder and
check exit status, stderr and files. Reference values come from numpy / torch / h5py
(Debian's /usr/bin/python3), never from posenc itself.
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import numpy as np

BIN = os.environ.get("POSENC_BIN", "posenc")
# Set by .ci/test when POSENC_BIN is the AddressSanitizer build: peak memory means
# nothing there (shadow memory, quarantine), nor do address-space limits or ptrace.
UNDER_ASAN = os.environ.get("POSENC_TEST_ASAN") == "1"
SOURCE_DIR = os.environ.get(
    "POSENC_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def run(*args, stdin=None, env=None, cwd=None, timeout=600):
    """Runs posenc with args; returns CompletedProcess (bytes stdout, str stderr)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    p = subprocess.run([BIN, *map(str, args)], input=stdin, capture_output=True,
                       env=full_env, cwd=cwd, timeout=timeout)
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


class PosencTestCase(unittest.TestCase):
    """A test case with a temporary folder `self.tmp` and helpers."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="posenc-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def npy(self, name, array):
        """Saves `array` as self.tmp/name (NPY) and returns the path."""
        path = self.path(name)
        np.save(path, array)
        return path

    def run_ok(self, *args, **kw):
        p = run(*args, **kw)
        self.assertEqual(p.returncode, 0, f"posenc {' '.join(map(str, args))} failed: {p.stderr}")
        return p

    def assert_fails(self, status, *args, match=None, **kw):
        """Runs posenc expecting exit `status` and one `posenc: error:` line."""
        p = run(*args, **kw)
        self.assertEqual(p.returncode, status,
                         f"expected exit {status}, got {p.returncode}: {p.stderr}")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one error line, got: {p.stderr!r}")
        self.assertTrue(lines[0].startswith("posenc: error: "), lines[0])
        self.assertNotIn("HDF5-DIAG", p.stderr)
        if match is not None:
            self.assertRegex(lines[0], match)
        return p

    def output_lse_bytes(self, q, k, v, tag, *extra, env=None):
        """The bytes of the output and lse files of `posenc attention --emit output,lse`
        (NPY files named after `tag` in the test folder)."""
        out = self.path(f"{tag}_{{}}.npy")
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "-o", out, "--emit", "output,lse",
                    *extra, env=env)
        got = []
        for name in ("output", "lse"):
            with open(out.format(name), "rb") as f:
                got.append(f.read())
        return got

    def assert_streamed_bits(self, *args, budgets=("800K", "64M")):
        """`posenc attention *args --emit output,lse` gives the same bytes in memory and
        under each --max-memory of `budgets` (K and V read in chunks, or used in place in
        their mapped files)."""
        def outputs(*extra):
            out = self.path("bits_{}.npy")
            self.run_ok("attention", *args, *extra, "--emit", "output,lse", "-o", out)
            got = {}
            for name in ("output", "lse"):
                with open(out.format(name), "rb") as f:
                    got[name] = f.read()
                os.remove(out.format(name))
            return got
        whole = outputs()
        for budget in budgets:
            self.assertEqual(outputs("--max-memory", budget), whole, f"at --max-memory {budget}")

    def assert_each_fails(self, base, cases, before):
        """For each (status, extra args, match) of `cases`: `posenc *base *extra` fails as
        assert_fails says and leaves no file but those in `before`."""
        for status, extra, match in cases:
            with self.subTest(extra=extra):
                self.assert_fails(status, *base, *extra, match=match)
                self.assert_no_new_files(before)

    def signal_while_writing(self, proc, target, sig):
        """Waits (up to 30 s) for the temporary file of `target` (a name in self.tmp)
        to appear while `proc` runs, then sends `sig` 0.1 s later and waits for the
        exit; asserts exit status 128 + sig. A temporary is a named `.TARGET.posenc-*`
        file or an unnamed (O_TMPFILE) one that `proc` holds open in self.tmp."""
        def temp_exists():
            return (any(n.startswith(f".{target}.") for n in os.listdir(self.tmp))
                    or holds_unnamed_file(proc.pid, self.tmp))
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None and not temp_exists():
            time.sleep(0.01)
        self.assertTrue(temp_exists(), "no temporary file appeared")
        time.sleep(0.1)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        self.assertEqual(proc.returncode, 128 + sig)

    def assert_no_new_files(self, before):
        """No file other than those in `before` exists in self.tmp (no temp leftovers)."""
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(before))

    def assert_close(self, actual, expected, rtol, atol, msg=""):
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape, msg)
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=msg)


def holds_unnamed_file(pid, folder):
    """Whether process `pid` has an unnamed (O_TMPFILE) file of `folder` open: the
    kernel shows it in /proc/PID/fd as 'FOLDER/#INODE (deleted)'."""
    prefix = os.path.realpath(folder) + "/#"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            pass
    return False


def run_measured(*args):
    """Runs posenc with args under GNU time; returns (returncode, stdout bytes, stderr
    str, peak RSS in KiB). GNU time (a small process) forks posenc, so the figure is not
    inflated by the pages of this Python process that a child forked from it shares."""
    with tempfile.NamedTemporaryFile(mode="r") as rss:
        p = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, BIN,
                            *map(str, args)], capture_output=True)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"), int(rss.read())


# --- bit-exact tensors in f32, f16 and bf16 (for the --arith references) -------------

def to_bf16_values(x):
    """float32 values exactly representable in bf16 (the top 16 bits kept)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return u.view(np.float32)


def save_torch(case, name, t):
    """Writes torch tensor t (float32, float16 or bfloat16) for posenc and returns its
    reference: NPY for f32/f16; for bf16 an HDF5 bfloat16 dataset written by
    `posenc convert` from the exactly representable float32 values."""
    import torch
    if t.dtype == torch.bfloat16:
        np.save(case.path(name + ".npy"), t.float().numpy())
        # A fresh file: an HDF5 output is added to an existing file.
        if os.path.exists(case.path(name + ".h5")):
            os.remove(case.path(name + ".h5"))
        case.run_ok("convert", case.path(name + ".npy"), "-o", case.path(name + ".h5") + ":/x",
                    "--dtype", "bf16")
        return case.path(name + ".h5") + ":/x"
    np.save(case.path(name + ".npy"), t.numpy())
    return case.path(name + ".npy")


def out_ref(case, name, dtype):
    """An output reference of posenc for `dtype` (bf16 goes to HDF5)."""
    import torch
    if dtype == torch.bfloat16:
        # A fresh file: an HDF5 output is added to an existing file.
        if os.path.exists(case.path(name + ".h5")):
            os.remove(case.path(name + ".h5"))
        return case.path(name + ".h5") + ":/y"
    return case.path(name + ".npy")


def load_torch(ref, dtype):
    """Reads posenc's output `ref` (from out_ref) back as a torch tensor of `dtype`,
    bit for bit. An HDF5 reference is read as float32 (exact for f32, bf16 and f16
    values) and converted to `dtype`."""
    import h5py
    import torch
    if ".h5:" in ref:
        # HDF5 converts bfloat16 to float32 exactly; float32 -> bfloat16 is then exact.
        path, name = ref.rsplit(":", 1)
        with h5py.File(path, "r") as f:
            values = f[name].astype(np.float32)[...]
        return torch.from_numpy(values).to(dtype)
    return torch.from_numpy(np.load(ref))


def bit_mismatches(a, b):
    """Number of elements whose bits differ (a, b torch tensors of one dtype)."""
    import torch
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    view = {torch.float32: torch.int32, torch.float64: torch.int64}.get(a.dtype, torch.int16)
    return int((a.contiguous().view(view) != b.contiguous().view(view)).sum())
