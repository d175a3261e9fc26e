"""Shared helpers for posenc's end-to-end and reference tests.

Tests run the real binary (POSENC_BIN, set by ctest) in a fresh temporary folder and
check exit status, stderr and files. Reference values come from numpy / torch / h5py
(Debian's /usr/bin/python3), never from posenc itself.
"""
import os
import shutil
import subprocess
import tempfile
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

    def assert_no_new_files(self, before):
        """No file other than those in `before` exists in self.tmp (no temp leftovers)."""
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(before))

    def assert_close(self, actual, expected, rtol, atol, msg=""):
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape, msg)
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=msg)
