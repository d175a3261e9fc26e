"""The module is a guest in the caller's process: it installs no signal handlers (a user's
SIGTERM handler still runs after posenc.write, Ctrl-C is a KeyboardInterrupt with the
`finally` blocks run, also when it arrives during a call, and no temporary is left),
HDF5 adds from several threads behave as from several processes (all land, none waits
for a lock nobody holds), and a path with a NUL in it is refused before anything is
opened. Each scenario runs in a fresh interpreter (subprocess), so a killed interpreter
is a failed test rather than a killed test run; files are checked with h5py/numpy."""
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import posenc


def run_python(code, tmp_path, timeout=120, new_session=False):
    """Runs `code` in a fresh /usr/bin/python3 with the package under test importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout, env=env,
                          start_new_session=new_session)


def leftovers(folder):
    return sorted(n for n in os.listdir(folder) if ".posenc-" in n)


@pytest.mark.parametrize("fmt", ["npy", "h5:/x"])
def test_user_sigterm_handler_survives_write(tmp_path, fmt):
    p = run_python(f"""
        import os, signal
        import numpy as np, posenc
        got = []
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        posenc.write("out.{fmt}", np.arange(6, dtype=np.float32))
        signal.raise_signal(signal.SIGTERM)  # to this thread, so handled before the print
        print("handled", got == [signal.SIGTERM])
        """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "handled True"


def test_sigint_after_write_is_keyboard_interrupt(tmp_path):
    p = run_python("""
        import os, signal
        import numpy as np, posenc
        try:
            try:
                posenc.write("out.h5:/x", np.arange(6, dtype=np.float32))
                posenc.write("out.npy", np.arange(6, dtype=np.float32))
                # raise_signal: to this thread. os.kill(getpid()) may reach one of the
                # module's worker threads, and Python may pass the print before it sees it.
                signal.raise_signal(signal.SIGINT)
                print("not interrupted")
            finally:
                print("finally ran")
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        """, tmp_path)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.stdout.split("\n")[:2] == ["finally ran", "KeyboardInterrupt"]
    with h5py.File(tmp_path / "out.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], np.arange(6, dtype=np.float32))


def test_ctrl_c_during_calls_arrives_after_the_call(tmp_path):
    # SIGINT to the whole process group, as the terminal sends it, every 30 ms while the
    # interpreter adds datasets to an HDF5 file (libhdf5 runs in forked children) and
    # writes NPY files: a KeyboardInterrupt between calls, each call whole or not made.
    p = run_python("""
        import os, signal, threading, time
        import numpy as np, posenc
        # KeyboardInterrupt once, as Python's own handler raises it: a second SIGINT
        # arriving while the first is being handled would cut the report's lines.
        interrupted = []
        def once(sig, frame):
            if not interrupted:
                interrupted.append(sig)
                raise KeyboardInterrupt
        signal.signal(signal.SIGINT, once)
        def ctrl_c():
            time.sleep(0.3)
            for _ in range(200):
                os.killpg(0, signal.SIGINT)
                time.sleep(0.03)
        threading.Thread(target=ctrl_c, daemon=True).start()
        done = 0
        try:
            try:
                for i in range(100000):
                    posenc.write(f"out.h5:/d{i}", np.full((64, 64), i, dtype=np.float32))
                    posenc.write(f"n{i % 3}.npy", np.full((256, 256), i, dtype=np.float64))
                    done = i + 1
            finally:
                print("finally", done)
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        """, tmp_path, new_session=True)
    assert p.returncode == 0, (p.returncode, p.stderr)
    lines = p.stdout.split("\n")
    assert lines[1] == "KeyboardInterrupt", p.stdout + p.stderr
    done = int(lines[0].split()[1])
    assert done >= 1, p.stdout
    assert leftovers(tmp_path) == []
    with h5py.File(tmp_path / "out.h5", "r") as f:
        # every completed add is there; the interrupted iteration's add may be too
        assert done <= len(f.keys()) <= done + 1
        for i in range(done):
            np.testing.assert_array_equal(f[f"d{i}"][()], np.full((64, 64), i, np.float32))


def test_threads_add_to_hdf5_files_as_processes_do(tmp_path):
    # Four threads, each adding to its own file and to one shared file at once.
    p = run_python("""
        import threading
        import numpy as np, posenc
        errors = []
        def work(t):
            try:
                for i in range(6):
                    posenc.write(f"own{t}.h5:/g/d{i}", np.full((8, 5), 10 * t + i, np.float64))
                    posenc.write(f"shared.h5:/t{t}/d{i}", np.full(7, 10 * t + i, np.float32))
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads: th.start()
        for th in threads: th.join()
        print("\\n".join(errors) or "ok")
        """, tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"
    assert leftovers(tmp_path) == []
    with h5py.File(tmp_path / "shared.h5", "r") as f:
        for t in range(4):
            for i in range(6):
                np.testing.assert_array_equal(f[f"t{t}/d{i}"][()],
                                              np.full(7, 10 * t + i, np.float32))
    for t in range(4):
        with h5py.File(tmp_path / f"own{t}.h5", "r") as f:
            assert sorted(f["g"].keys()) == [f"d{i}" for i in range(6)]
            for i in range(6):
                np.testing.assert_array_equal(f[f"g/d{i}"][()],
                                              np.full((8, 5), 10 * t + i, np.float64))


@pytest.mark.parametrize("ref", ["important.h5\0.npy", "important.npy\0.h5:/x",
                                 "important.npy\0"])
def test_nul_in_a_path_is_refused_before_opening(tmp_path, ref):
    for name in ("important.h5", "important.npy"):
        (tmp_path / name).write_bytes(b"keep me")
    with pytest.raises(posenc.UsageError, match="NUL"):
        posenc.write(str(tmp_path / ref), np.zeros(3, np.float32))
    with pytest.raises(posenc.UsageError, match="NUL"):
        posenc.read(str(tmp_path / ref))
    for name in ("important.h5", "important.npy"):
        assert (tmp_path / name).read_bytes() == b"keep me"
    assert leftovers(tmp_path) == []
