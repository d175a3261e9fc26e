#!/usr/bin/python3
"""Whole-process `posenc rope`, NPY file to file, against `dd bs=32M` of the same bytes, for
several axis orders side by side (issue 46's bar: posenc at most 1.2 x dd on a disk file system).

    /usr/bin/python3 bench/rope/vs_dd.py build/posenc [--rounds 9] [--dir /tmp]
        [--layouts bshd,bhsd,sbhd] [--before OLD_POSENC]

Each layout is a 256 MiB f32 tensor ([1, 65536, 8, 128] bshd, [8, 32, 2048, 128] bhsd,
[2048, 8, 32, 128] sbhd, [8, 8192, 8, 128] bshd8: a batch of 8, [8, 32, 128, 2048] bhds: d not
last), written to a new file in the
same directory (--dir, default a fresh folder under /tmp; its file system is printed: ext4 is the
disk variant the bar is for, tmpfs keeps writeback out). A round times, for every layout, dd and
posenc (and --before's build), in an order that rotates from round to round (the second of a pair
may find caches warmer or pay the first's writeback). Outputs are deleted (untimed) before each
run; the outputs of the builds are compared byte for byte. The builds are copied into the
folder first, so that a rebuild meanwhile changes nothing. Prints medians and minima of wall
time, the ratio posenc / dd of the medians (and of the minima), the CPU and the load before and
after: the machine may be shared, so only the ratios of one run mean something.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, fs_label, load, timed  # noqa: E402

LAYOUTS = {
    "bshd": ("bshd", (1, 65536, 8, 128)),
    "bhsd": ("bhsd", (8, 32, 2048, 128)),
    "sbhd": ("sbhd", (2048, 8, 32, 128)),
    "bshd8": ("bshd", (8, 8192, 8, 128)),
    "bhds": ("bhds", (8, 32, 128, 2048)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("posenc")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--dir", default=None, help="folder for the files (default: new under /tmp)")
    ap.add_argument("--layouts", default="bshd,bhsd")
    ap.add_argument("--before", default=None, help="another posenc build timed in the same rounds")
    a = ap.parse_args()
    layouts = a.layouts.split(",")
    for name in layouts:
        if name not in LAYOUTS:
            raise SystemExit(f"unknown layout {name!r}: one of {', '.join(LAYOUTS)}")
    d = tempfile.mkdtemp(prefix="posenc-vs-dd.", dir=a.dir or "/tmp")
    try:
        rng = np.random.default_rng(0)
        for name in layouts:
            np.save(os.path.join(d, f"{name}.npy"),
                    rng.standard_normal(LAYOUTS[name][1], dtype=np.float32))
        # Copies: a build tree being rebuilt meanwhile changes neither the run nor its timing.
        builds = []
        for label, exe in [("posenc", a.posenc)] + ([("before", a.before)] if a.before else []):
            shutil.copy2(exe, os.path.join(d, f"bin-{label}"))
            builds.append((label, os.path.join(d, f"bin-{label}")))
        print(f"cpu: {cpu_name()}, {os.cpu_count()} cores")
        print(f"dir: {d} ({fs_label(d)})")
        print(f"load before: {load()}")
        times = {}
        out = os.path.join(d, "out.npy")

        def run(key, cmd):
            if os.path.exists(out):
                os.unlink(out)
            times.setdefault(key, []).append(timed(cmd)[0])

        for r in range(a.rounds):
            for name in layouts:
                src = os.path.join(d, f"{name}.npy")
                jobs = [("dd", ["dd", f"if={src}", f"of={out}", "bs=32M", "status=none"])]
                jobs += [(b, [exe, "rope", src, "-o", out, "--axes", LAYOUTS[name][0]])
                         for b, exe in builds]
                k = r % len(jobs)
                for label, cmd in jobs[k:] + jobs[:k]:
                    run((name, label), cmd)
                    if label != "dd" and r == 0:
                        shutil.copyfile(out, os.path.join(d, f"{name}.{label}.out"))
                if r == 0 and a.before:
                    same = open(os.path.join(d, f"{name}.posenc.out"), "rb").read() == \
                        open(os.path.join(d, f"{name}.before.out"), "rb").read()
                    print(f"{name}: outputs of the two builds {'identical' if same else 'DIFFER'}")
                    for b, _ in builds:
                        os.unlink(os.path.join(d, f"{name}.{b}.out"))
                elif r == 0:
                    os.unlink(os.path.join(d, f"{name}.posenc.out"))
        print(f"load after:  {load()}")
        print(f"{'layout':8} {'shape':20} {'run':7} {'median ms':>9} {'min ms':>7} "
              f"{'x dd (med)':>10} {'x dd (min)':>10}  n={a.rounds}")
        for name in layouts:
            dd = times[(name, "dd")]
            for label in ["dd"] + [b for b, _ in builds]:
                t = times[(name, label)]
                print(f"{name:8} {str(LAYOUTS[name][1]):20} {label:7} "
                      f"{statistics.median(t) * 1e3:9.0f} {min(t) * 1e3:7.0f} "
                      f"{statistics.median(t) / statistics.median(dd):10.2f} "
                      f"{min(t) / min(dd):10.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
