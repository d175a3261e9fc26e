#!/usr/bin/python3
"""`posenc convert` between dtypes, file to file, against `cp` of the input.

    /usr/bin/python3 bench/convert/convert_io.py POSENC [--before OLD_POSENC] [--rounds 9]
        [--dir /tmp]

Cases, on a 256 MiB f32 NPY file ([16384, 32, 128]) and its f16 copy: f32 to f16 NPY, f32
to bf16 HDF5, f16 to f32 NPY. Each round runs `cp` of the f32 input and every case (and the
before build's, when given) once, in turn, every output a new file; medians and minima of the
wall time, the ratio to `cp` (a copy reads and writes as many bytes as the input holds, more
than the narrowing writes), CPU time (user + system), and the outputs of the two builds
compared byte for byte. The CPU, the file system and the load are printed with the figures.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, fs_type, load, timed  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--before")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="posenc-convert-", dir=args.dir)
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((16384, 32, 128), dtype=np.float32)
        np.save(f"{d}/f32.npy", x)
        np.save(f"{d}/f16.npy", x.astype(np.float16))
        for name in ("f32.npy", "f16.npy"):
            with open(f"{d}/{name}", "rb") as f:  # into the page cache
                while f.read(1 << 24):
                    pass
        print(f"cpu: {cpu_name()}, {os.cpu_count()} cpus; {args.dir} is "
              f"{fs_type(os.path.realpath(d))}; load before {load()}")
        cases = {
            "f32 -> f16 NPY": (["f32.npy", "--dtype", "f16"], "o16.npy"),
            "f32 -> bf16 HDF5": (["f32.npy", "--dtype", "bf16"], "ob.h5:/x"),
            "f16 -> f32 NPY": (["f16.npy", "--dtype", "f32"], "o32.npy"),
        }
        builds = [("now", args.posenc)] + ([("before", args.before)] if args.before else [])
        wall, cpu_t = {"cp": []}, {"cp": []}
        for r in range(args.rounds):
            for out in os.listdir(d):
                if out.startswith("o"):
                    os.unlink(f"{d}/{out}")
            w, c = timed(["cp", f"{d}/f32.npy", f"{d}/o_cp.npy"])
            wall["cp"].append(w)
            cpu_t["cp"].append(c)
            for case, (cargs, out) in cases.items():
                for name, binary in (builds if r % 2 == 0 else builds[::-1]):
                    dest = f"{d}/o_{name}_{out}"
                    path = dest.split(":")[0]
                    if os.path.exists(path):
                        os.unlink(path)
                    cmd = [binary, "convert", f"{d}/{cargs[0]}", *cargs[1:], "-o", dest]
                    w, c = timed(cmd)
                    wall.setdefault((case, name), []).append(w)
                    cpu_t.setdefault((case, name), []).append(c)
        cp_med, cp_min = statistics.median(wall["cp"]), min(wall["cp"])
        print(f"cp of the f32 input: median {cp_med * 1e3:.1f} ms, min {cp_min * 1e3:.1f} ms, "
              f"CPU {statistics.median(cpu_t['cp']) * 1e3:.1f} ms")
        for case, (_, out) in cases.items():
            line = f"{case:17}"
            for name, _ in builds:
                m, n = statistics.median(wall[(case, name)]), min(wall[(case, name)])
                line += (f"  {name} {m * 1e3:7.1f} ms (min {n * 1e3:.1f}) = {m / cp_med:.2f} x cp, "
                         f"CPU {statistics.median(cpu_t[(case, name)]) * 1e3:.1f} ms")
            if args.before:
                a, b = (f"{d}/o_{n}_{out}".split(":")[0] for n in ("now", "before"))
                if out.endswith(".npy"):
                    same = open(a, "rb").read() == open(b, "rb").read()
                else:
                    import h5py
                    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
                        same = np.array_equal(fa["x"][...].view(np.uint16), fb["x"][...].view(np.uint16))
                line += "; outputs identical" if same else "; OUTPUTS DIFFER"
            print(line)
        print(f"load after {load()}")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
