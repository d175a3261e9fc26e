#!/usr/bin/python3
"""Stress of posenc's output transactions (not part of the timed test suite).

  stress.py POSENC [--adds N] [--jobs J] [--kills K] [--dir DIR]

1. N runs (`table sinusoidal`, 2 + i positions) add dataset /p<i> to one existing HDF5
   file, J at a time. Every run that exits 0 must have its dataset in the file, equal to
   a numpy reference; a run that fails must have changed nothing (its dataset absent);
   the dataset that was there first must be intact; no temporary may be left.
2. Rounds of 4 concurrent adds, one of them killed with SIGKILL after a random delay,
   until K runs were killed before they ended.
   Every run that exited 0 must have its dataset; the file must stay readable by h5py
   with everything it held before; after the rounds (and a run once the leftovers are a
   few seconds old) no temporary may be left.
Prints the counts and exits 1 on any loss.
"""
import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "lib"))
from reference_sinusoidal import sinusoidal as sinusoidal_at  # noqa: E402


def sinusoidal(positions, dim=4):
    return sinusoidal_at(np.arange(positions), dim)


def command(posenc, path, i):
    return [posenc, "table", "sinusoidal", "--positions", str(2 + i % 50), "--dim", "4",
            "-o", f"{path}:/p{i}"]


def add(args):
    posenc, path, i = args
    p = subprocess.run(command(posenc, path, i), capture_output=True, timeout=600)
    return i, p.returncode, p.stderr.decode("utf-8", "replace").strip()


def temporaries(folder):
    return [n for n in os.listdir(folder) if ".posenc-" in n]


def verify(path, ok, failed, keep):
    lost = []
    with h5py.File(path, "r") as f:
        if not np.array_equal(f["keep"][...], keep):
            lost.append("keep")
        for i in ok:
            name = f"p{i}"
            if name not in f or not np.allclose(f[name][...], sinusoidal(2 + i % 50),
                                                rtol=0, atol=2e-7):
                lost.append(name)
        for i in failed:
            if f"p{i}" in f:
                lost.append(f"p{i} (its run failed, yet it is there)")
    return lost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--adds", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    posenc = os.path.abspath(a.posenc)
    folder = tempfile.mkdtemp(prefix="posenc-stress-", dir=a.dir)
    path = os.path.join(folder, "f.h5")
    keep = np.arange(1000.0)
    with h5py.File(path, "w") as f:
        f["keep"] = keep

    t0 = time.time()
    with multiprocessing.Pool(a.jobs) as pool:
        results = pool.map(add, [(posenc, path, i) for i in range(a.adds)], chunksize=1)
    ok = [i for i, rc, _ in results if rc == 0]
    failed = [(i, rc, err) for i, rc, err in results if rc != 0]
    lost = verify(path, ok, [i for i, _, _ in failed], keep)
    left = temporaries(folder)
    print(f"concurrent adds: {a.adds} runs, {a.jobs} at a time, {time.time() - t0:.1f} s: "
          f"{len(ok)} exit 0, {len(failed)} failed, {len(lost)} lost, {len(left)} temporaries")
    for i, rc, err in failed[:5]:
        print(f"  run {i}: exit {rc}: {err}")

    t0 = time.time()
    killed = kill_ok = 0
    kill_lost = []
    base = a.adds
    rounds = 0
    while killed < a.kills and rounds < 20 * a.kills:
        r = rounds
        rounds += 1
        ids = [base + 4 * r + j for j in range(4)]
        procs = [subprocess.Popen(command(posenc, path, i), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for i in ids]
        victim = random.randrange(4)
        time.sleep(random.uniform(0.0, 0.06))
        procs[victim].send_signal(signal.SIGKILL)
        done = []
        for j, p in enumerate(procs):
            _, err = p.communicate(timeout=600)
            if j == victim and p.returncode == -signal.SIGKILL:
                killed += 1
            elif p.returncode == 0:
                done.append(ids[j])
        kill_ok += len(done)
        kill_lost += verify(path, done, [], keep)
    # Leftovers of killed runs are removed by the next run once a few seconds old.
    time.sleep(3.5)
    rc = subprocess.run(command(posenc, path, 10**6), capture_output=True).returncode
    left = temporaries(folder)
    print(f"kills: {rounds} rounds of 4 adds, {killed} killed by SIGKILL, {kill_ok} exit 0, "
          f"{len(kill_lost)} lost, {time.time() - t0:.1f} s; after the next run (exit {rc}): "
          f"{len(left)} temporaries")
    bad = lost or kill_lost or left or rc != 0
    if bad:
        print("LOST:", (lost + kill_lost)[:20], "left:", left[:20])
        sys.exit(1)
    subprocess.run(["rm", "-rf", folder])


if __name__ == "__main__":
    main()
