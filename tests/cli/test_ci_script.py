"""`.ci/test` ends with the list of skipped checks (README, "Quick start"), also when a
step after the first test run fails.

The script runs in a copy of its folder with every tool it calls replaced by a stub that
succeeds at once (cmake, ctest, g++, pkg-config, the fuzz runner), so the order of what
it prints is checked in a second instead of the suite's half hour."""
import os
import shutil
import stat
import subprocess
import textwrap
import unittest

from posenc_testlib import SOURCE_DIR, PosencTestCase


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class CiTest(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.tree = self.path("tree")
        os.makedirs(self.tree)
        shutil.copytree(os.path.join(SOURCE_DIR, ".ci"), os.path.join(self.tree, ".ci"))
        shutil.copytree(os.path.join(SOURCE_DIR, "man"), os.path.join(self.tree, "man"))
        os.makedirs(os.path.join(self.tree, "tests", "consumer"))
        example = os.path.join(SOURCE_DIR, "tests", "consumer", "example.cpp")
        shutil.copy(example, os.path.join(self.tree, "tests", "consumer"))
        # A README holding only the C++ example: its Python steps (a virtualenv and pip)
        # are the real script's to run.
        with open(example) as f, open(os.path.join(self.tree, "README.md"), "w") as out:
            out.write("# posenc\n\n" + textwrap.indent(f.read(), "    "))
        write(os.path.join(self.tree, "tests", "mutation", "run.sh"),
              "#!/bin/sh\necho mutation patches apply\n", executable=True)
        write(os.path.join(self.tree, "build", "posenc"), "#!/bin/sh\n", executable=True)
        # The runs as nobody from a private folder, and the Python fuzz harness.
        write(os.path.join(self.tree, "tests", "cli", "test_hdf5_append.py"), """\
              import unittest
              class TestOtherFiles(unittest.TestCase):
                  def test_read_only_folder(self):
                      pass
              """)
        write(os.path.join(self.tree, "tests", "cli", "test_transactions.py"), """\
              import unittest
              class Umask(unittest.TestCase):
                  def test_umask(self):
                      pass
              """)
        os.makedirs(os.path.join(self.tree, "tests", "lib"))
        write(os.path.join(self.tree, "tests", "python", "fuzz_module.py"),
              "print('python fuzz done')\n")
        write(os.path.join(self.tree, "tests", "fuzz", "run_fuzz.sh"),
              "#!/bin/sh\necho fuzzing done\n", executable=True)
        write(os.path.join(self.tree, ".ci", "python-module"),
              "#!/bin/sh\necho python module checked\n", executable=True)
        # The Release run's log, as ctest leaves it.
        write(os.path.join(self.tree, "build", "Testing", "Temporary", "LastTest.log"),
              """\
              SKIP: rope kernel avx512fp16 not tested: this CPU lacks it
              test_x (m.T) ... skipped 'no /dev/full here'
              test_y (m.T) ... ok
              """)
        for d in ("build-consumer", "build-asan"):  # made by cmake, a stub here
            os.makedirs(os.path.join(self.tree, d), exist_ok=True)
        write(os.path.join(self.tree, "build-asan", "tests", "posenc_unit"),
              "#!/bin/sh\necho unit tests ran\n", executable=True)
        self.bin = self.path("stubs")
        for tool in ("cmake", "ctest", "pkg-config"):
            write(os.path.join(self.bin, tool), f"#!/bin/sh\necho {tool} ran\n", executable=True)
        # g++ -o FILE: a FILE that runs.
        write(os.path.join(self.bin, "g++"), """\
              #!/bin/sh
              while [ $# -gt 0 ]; do
                if [ "$1" = -o ]; then
                  mkdir -p "$(dirname "$2")"; printf '#!/bin/sh\\n' > "$2"; chmod +x "$2"
                fi
                shift
              done
              """, executable=True)

    def run_ci(self, groff=None):
        if groff is not None:
            write(os.path.join(self.bin, "groff"), groff, executable=True)
        env = dict(os.environ, PATH=self.bin + ":" + os.environ.get("PATH", ""))
        return subprocess.run(["bash", os.path.join(self.tree, ".ci", "test")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120)

    def test_the_skipped_checks_come_last(self):
        p = self.run_ci()
        self.assertEqual(p.returncode, 0, p.stdout)
        lines = p.stdout.splitlines()
        self.assertIn("man pages: lint clean", lines)
        self.assertEqual(lines[-3:], ["Skipped checks:",
                                      "SKIP: rope kernel avx512fp16 not tested: this CPU lacks it",
                                      "test_x (m.T) ... skipped 'no /dev/full here'"])
        self.assertLess(lines.index("fuzzing done"), lines.index("man pages: lint clean"))
        self.assertLess(lines.index("python module checked"), lines.index("fuzzing done"))
        self.assertLess(lines.index("mutation patches apply"), lines.index("cmake ran"))
        self.assertIn("posenc as nobody: passes from a clone under a 0700 folder", lines)
        self.assertLess(lines.index("python fuzz done"), lines.index("fuzzing done"))

    def test_and_after_a_failure(self):
        p = self.run_ci(groff="#!/bin/sh\necho 'warning: bad macro' >&2\n")
        self.assertEqual(p.returncode, 1, p.stdout)
        lines = p.stdout.splitlines()
        self.assertIn("warning: bad macro", lines)
        self.assertEqual(lines[-3], "Skipped checks:")


if __name__ == "__main__":
    unittest.main()
