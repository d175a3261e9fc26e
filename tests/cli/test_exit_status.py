"""Exit statuses of output failures, for every command and output path.

Standard output closed, /dev/full, or a pipe whose reader went away (SIGPIPE) is exit 4
with one line naming standard output, for the commands that print (inspect, compare,
--help) and those that write tensors to `-o -`. A file size limit (ulimit -f) does not
kill posenc with SIGXFSZ: the write fails with EFBIG, exit 4, and the temporary file is
removed with the existing target untouched. Running out of memory is exit 3 and
mentions --max-memory only for commands that have it.
"""
import os
import resource
import signal
import subprocess
import unittest

import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase


def posenc(args, stdout=subprocess.PIPE, preexec=None, stdin=None):
    p = subprocess.run([BIN, *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                       preexec_fn=preexec, stdin=stdin, timeout=300)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def close_stdout():
    os.close(1)


class OutputFailures(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.x = self.path("x.npy")
        np.save(self.x, np.arange(40000, dtype=np.float64).reshape(200, 200))

    def commands(self):
        return [["inspect", self.x], ["inspect", self.x, "--json", "--head", 40000],
                ["compare", self.x, self.x], ["--help"],
                ["convert", self.x, "-o", "-", "--to", "text"],
                ["convert", self.x, "-o", "-", "--force"],
                ["table", "sinusoidal", "--positions", 1000, "--dim", 64, "-o", "-", "--to", "csv"],
                ["rope", self.x, "-o", "-", "--force"],
                ["attention", "-q", self.x, "-k", self.x, "-v", self.x, "--emit", "output",
                 "-o", "-", "--force"]]

    def expect_stdout_error(self, status, err, why):
        self.assertEqual(status, 4, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertRegex(lines[0], r"^posenc: error: cannot write to standard output: " + why)

    def test_closed_stdout(self):
        for args in self.commands():
            with self.subTest(args=args[:2]):
                status, err = posenc(args, stdout=None, preexec=close_stdout)
                self.expect_stdout_error(status, err, "Bad file descriptor")

    def test_dev_full(self):
        for args in self.commands():
            with self.subTest(args=args[:2]):
                with open("/dev/full", "wb") as full:
                    status, err = posenc(args, stdout=full)
                self.expect_stdout_error(status, err, "No space left on device")

    def test_broken_pipe(self):
        for args in self.commands():
            with self.subTest(args=args[:2]):
                # The reader is gone before posenc writes (`| head -c 0`, or a reader that
                # stopped while posenc was still computing): every write is EPIPE.
                r, w = os.pipe()
                os.close(r)
                try:
                    status, err = posenc(args, stdout=w)
                finally:
                    os.close(w)
                self.assertNotEqual(status, -signal.SIGPIPE, "killed by SIGPIPE")
                self.expect_stdout_error(status, err, "Broken pipe")
        # And a reader that leaves mid-stream, like `| head -c 10`.
        p = subprocess.Popen([BIN, "inspect", self.x, "--head", "40000"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.read(10)
        p.stdout.close()
        err = p.stderr.read().decode()
        self.expect_stdout_error(p.wait(timeout=300), err, "Broken pipe")

    def test_file_size_limit(self):
        def limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
        for name in ("out.npy", "out.csv", "out.json", "out.h5"):
            target = self.path(name)
            with open(target, "wb") as f:
                f.write(b"keep me")
            ref = target + ":/x" if name.endswith(".h5") else target
            # (--force: an HDF5 output is otherwise added to an existing HDF5 file, and a
            # file that is not HDF5 is refused before anything is written.)
            force = ["--force"] if name.endswith(".h5") else []
            cmds = [["convert", self.x, "-o", ref, *force],
                    ["table", "sinusoidal", "--positions", 300, "--dim", 64, "-o", ref,
                     *force]]
            if name == "out.npy":
                # written by the attention workers at their rows' offsets (pwrite)
                cmds.append(["attention", "-q", self.x, "-k", self.x, "-v", self.x, "--emit",
                             "output", "-o", ref])
            for args in cmds:
                with self.subTest(target=name, cmd=args[0]):
                    before = sorted(os.listdir(self.tmp))
                    status, err = posenc(args, preexec=limit)
                    self.assertNotEqual(status, -signal.SIGXFSZ, "killed by SIGXFSZ")
                    self.assertEqual(status, 4, err)
                    self.assertEqual(len(err.strip().splitlines()), 1, err)
                    self.assertRegex(err, r"File too large")
                    self.assertEqual(sorted(os.listdir(self.tmp)), before)
                    with open(target, "rb") as f:
                        self.assertEqual(f.read(), b"keep me")

    @unittest.skipIf(UNDER_ASAN, "AddressSanitizer cannot run under an address-space limit")
    def test_out_of_memory_message(self):
        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        # A CSV table of 256 Mi values is gathered whole before it is encoded.
        status, err = posenc(["table", "sinusoidal", "--positions", 1 << 20, "--dim", 256,
                              "-o", self.path("t.csv")], preexec=limit)
        self.assertEqual(status, 3, err)
        self.assertEqual(err.strip(), "posenc: error: out of memory")
        self.assertFalse(os.path.exists(self.path("t.csv")))


if __name__ == "__main__":
    unittest.main()
