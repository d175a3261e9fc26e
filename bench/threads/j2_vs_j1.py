#!/usr/bin/python3
"""-j 2 against -j 1, whole processes, idle and beside a CPU hog (issue 30's bar: -j 2 at most
1.05 x -j 1).

    /usr/bin/python3 bench/threads/j2_vs_j1.py build/posenc [--rounds 7] [--dirs /dev/shm,/tmp]
        [--cases rope,attention] [--loads idle,hog] [--before OLD_POSENC]

Cases: `posenc rope` of a 256 MiB f32 NPY file ([16384, 32, 128], s h d) to a new file in the
same directory, once per directory of --dirs (tmpfs /dev/shm keeps disk writeback out; ext4 /tmp
is the disk variant); `posenc attention` of b1 h8 s2048 d128 f32, causal, output only, in the
first directory. "hog" runs one busy-looping process beside every timing (started before the
first round, killed after the last). Rounds are interleaved: each round times -j 1 and -j 2 of
every case, and the order of the pair alternates from round to round (the second of a pair may
find caches warmer or pay the first's writeback). Outputs are deleted (untimed) before each run
and -j 1 and -j 2 outputs compared byte for byte. Prints medians of wall time and of CPU time
(user + system, from wait4), the ratio -j 2 / -j 1 of the wall medians (and minima), the CPU
model and the load average before and after. --before times a second build in the same rounds (the
builds' order alternating too), its outputs compared with the first's.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import fs_type  # noqa: E402


def cpu_model():
    """'model name, family F model M' of the first CPU."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    return (f"{info.get('model name', 'unknown')}, family {info.get('cpu family', '?')} "
            f"model {info.get('model', '?')}")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, env):
    """Wall seconds and CPU seconds (user + system) of one process."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode("utf-8", "replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err}")
    return wall, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("posenc")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dirs", default="/dev/shm,/tmp")
    ap.add_argument("--cases", default="rope,attention")
    ap.add_argument("--loads", default="idle,hog")
    ap.add_argument("--before", metavar="OLD_POSENC",
                    help="also time this build the same way, in the same rounds")
    a = ap.parse_args()
    builds = [("", os.path.abspath(a.posenc))]
    if a.before:
        builds.append(("before ", os.path.abspath(a.before)))
    cases_wanted = a.cases.split(",")
    # posenc's own wait policy is measured, not one from the environment.
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    work = [tempfile.mkdtemp(prefix="posenc-j2-", dir=d) for d in a.dirs.split(",")]
    cases = []  # (name, command without -j, output paths)
    try:
        rng = np.random.default_rng(0)
        if "rope" in cases_wanted:
            x = rng.standard_normal((16384, 32, 128), dtype=np.float32)
            for w in work:
                np.save(f"{w}/x.npy", x)
                cases.append((f"rope 256 MiB f32 ({fs_type(w)} {os.path.dirname(w)})",
                              ["rope", f"{w}/x.npy", "-o", f"{w}/o{{j}}.npy", "--axes", "shd"],
                              [f"{w}/o{{j}}.npy"]))
            del x
        if "attention" in cases_wanted:
            w = work[0]
            for n in "qkv":
                np.save(f"{w}/{n}.npy", rng.standard_normal((1, 8, 2048, 128), dtype=np.float32))
            cases.append(("attention b1 h8 s2048 d128 causal",
                          ["attention", "-q", f"{w}/q.npy", "-k", f"{w}/k.npy", "-v", f"{w}/v.npy",
                           "--causal", "--emit", "output", "-o", f"{w}/a{{j}}.npy"],
                          [f"{w}/a{{j}}.npy"]))
        for w in work:  # warm page cache
            for f in os.listdir(w):
                with open(f"{w}/{f}", "rb") as fh:
                    while fh.read(1 << 24):
                        pass
        print(f"cpu: {cpu_model()}, {len(os.sched_getaffinity(0))} cores; "
              f"load before: {loadavg()}; rounds: {a.rounds}")
        print("idle: no busy loop of this script's (other work on the machine shows in the load "
              "average); hog: one busy loop beside every run")
        print(f"{'case':45} {'load':5} {'-j1 ms':>8} {'-j2 ms':>8} {'j2/j1':>6} {'(min)':>6}   "
              f"{'-j1 cpu':>8} {'-j2 cpu':>8}")
        for load in a.loads.split(","):
            hog = None
            if load == "hog":
                hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                time.sleep(0.3)
            try:
                times = {(b[0] + c[0], j): [] for b in builds for c in cases for j in (1, 2)}
                for r in range(a.rounds):
                    for name, cmd, outs in cases:
                        for tag, posenc in (builds if r % 2 == 0 else builds[::-1]):
                            for j in ((1, 2) if r % 2 == 0 else (2, 1)):
                                key = f"{j}{tag.strip()}"
                                for o in outs:
                                    if os.path.exists(o.format(j=key)):
                                        os.unlink(o.format(j=key))
                                c = [posenc, "-j", str(j)] + [s.format(j=key) for s in cmd]
                                times[(tag + name, j)].append(run(c, env))
                        for o in outs:
                            with open(o.format(j=1), "rb") as f:
                                first = f.read()
                            for tag, _ in builds:
                                for j in (1, 2):
                                    with open(o.format(j=f"{j}{tag.strip()}"), "rb") as f:
                                        if f.read() != first:
                                            sys.exit(f"{name}: {tag}-j {j} output differs")
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            for name in (b[0] + c[0] for c in cases for b in builds):
                w1 = statistics.median(t[0] for t in times[(name, 1)])
                w2 = statistics.median(t[0] for t in times[(name, 2)])
                c1 = statistics.median(t[1] for t in times[(name, 1)])
                c2 = statistics.median(t[1] for t in times[(name, 2)])
                n1 = min(t[0] for t in times[(name, 1)])
                n2 = min(t[0] for t in times[(name, 2)])
                print(f"{name:45} {load:5} {w1 * 1e3:8.1f} {w2 * 1e3:8.1f} {w2 / w1:6.2f} "
                      f"{n2 / n1:6.2f}   {c1 * 1e3:8.1f} {c2 * 1e3:8.1f}", flush=True)
        print(f"load after: {loadavg()}")
    finally:
        for w in work:
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
