"""The README's "Use from Python" example is readme_example.py, verbatim, and it passes
under pytest (and fails for a kernel that is off)."""
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def test_readme_holds_the_example_verbatim():
    example = open(os.path.join(HERE, "readme_example.py")).read()
    readme = open(os.path.join(HERE, "..", "..", "README.md")).read()
    assert textwrap.indent(example, "    ") in readme, \
        "README.md: the 'Use from Python' example differs from tests/python/readme_example.py"


def run_pytest(path):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path],
                          capture_output=True, text=True, cwd=os.path.dirname(path))


def test_example_passes_and_catches_a_wrong_kernel(tmp_path):
    example = open(os.path.join(HERE, "readme_example.py")).read()
    good = tmp_path / "test_example.py"
    good.write_text(example)
    r = run_pytest(str(good))
    assert r.returncode == 0, r.stdout + r.stderr
    # A kernel whose angles are off by one position must fail the same test.
    bad = tmp_path / "test_bad.py"
    bad.write_text(example.replace("np.arange(s, dtype=np.float32)",
                                   "np.arange(1, s + 1, dtype=np.float32)"))
    r = run_pytest(str(bad))
    assert r.returncode != 0 and "DifferError" in r.stdout, r.stdout
