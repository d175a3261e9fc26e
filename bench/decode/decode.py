#!/usr/bin/python3
"""Decode attention (sq 1, a long KV cache) against a memcpy of the K and V bytes.

  /usr/bin/python3 bench/decode/decode.py POSENC [--before OLD_POSENC] [--rounds 7]
      [--sk 65536] [--heads 8] [--kv-heads 8] [--dirs /dev/shm,/tmp] [--dtypes f32,f16,bf16]
      [--precision f64|f32]

Decode reads every key and value once for a few FLOPs each, so its bound is the
machine's memory bandwidth. For each K/V dtype (f32 and f16 as NPY, bf16 as a contiguous
HDF5 dataset, which posenc maps as it maps NPY; Q is f32 throughout; the arithmetic is
--precision's, posenc's default f64 unless f32 is asked for, and each line names it) and each folder (tmpfs and a disk file system: the K and V files are in the page
cache either way, read once untimed before the first round), the rounds run
interleaved: a memcpy of as many bytes as K and V hold (numpy's copy of a contiguous
array, in this process, buffers touched beforehand), then `posenc attention` (whole
process, a new output file every run), then the before build when given. Figures are
medians:

  x memcpy  (K + V bytes / posenc's wall time) / (bytes / memcpy time): 1.0 reads K
            and V as fast as memcpy copies them.
  pread     the same ratio for reading both files with pread into a buffer touched
            beforehand, in the same rounds: what the file system itself delivers (on
            a tmpfs without huge pages, its 4 KiB pages cost more than the copy).
  ms        wall time of the whole posenc process.
  CPU       its user + system time, and memcpy time / that: steadier than the wall
            time when other jobs share the cores (posenc uses both cores, so this
            figure can be above the wall one's even on an idle machine).

The outputs of the two builds are compared byte for byte. The load average, the CPU
and each folder's file system are printed with the figures.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, fs_label, load, timed  # noqa: E402


def write_inputs(folder, sk, heads, kv_heads, d, dtype, posenc):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, heads, 1, d), dtype=np.float32)
    np.save(f"{folder}/q.npy", q)
    for name in ("k", "v"):
        x = rng.standard_normal((1, kv_heads, sk, d), dtype=np.float32)
        path = f"{folder}/{name}_{dtype}.npy"
        if dtype == "bf16":
            path = f"{folder}/{name}_{dtype}.h5"
        if dtype == "f32":
            np.save(path, x)
        elif dtype == "f16":
            np.save(path, x.astype(np.float16))
        else:  # numpy has no bf16: posenc's own convert writes it, to HDF5
            np.save(f"{folder}/{name}_tmp.npy", x)
            subprocess.run([posenc, "convert", f"{folder}/{name}_tmp.npy", "--dtype", "bf16",
                            "-o", f"{path}:/{name}"], check=True)
            os.unlink(f"{folder}/{name}_tmp.npy")
        with open(path, "rb") as f:  # into the page cache
            while f.read(1 << 24):
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--before")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sk", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, help="K and V heads (default --heads; fewer: GQA)")
    ap.add_argument("--dirs", default="/dev/shm,/tmp")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--precision", choices=("f64", "f32"), default="f64")
    args = ap.parse_args()
    kv_heads = args.kv_heads or args.heads
    d = 128
    print(f"cpu: {cpu_name()}, {os.cpu_count()} cpus; load before {load()}")
    for base in args.dirs.split(","):
        folder = tempfile.mkdtemp(prefix="posenc-decode-", dir=base)
        try:
            for dtype in args.dtypes.split(","):
                write_inputs(folder, args.sk, args.heads, kv_heads, d, dtype, args.posenc)
                es = 4 if dtype == "f32" else 2
                kv = 2 * kv_heads * args.sk * d * es
                src = np.ones(kv // 4, dtype=np.float32)
                dst = np.zeros_like(src)
                np.copyto(dst, src)  # touched
                builds = [("after", args.posenc)] + ([("before", args.before)] if args.before else [])
                def ref(name):
                    if dtype == "bf16":
                        return f"{folder}/{name}_{dtype}.h5:/{name}"
                    return f"{folder}/{name}_{dtype}.npy"
                # The file system's own speed: both files read with pread into a
                # buffer touched beforehand (what reading instead of mapping would pay).
                files = [ref(n).split(":")[0] for n in ("k", "v")]
                sizes = [os.path.getsize(f) for f in files]
                rbuf = np.ones(sum(sizes), dtype=np.uint8)
                t = {"memcpy": [], "pread": []}
                cpu = {}
                for name, _ in builds:
                    t[name] = []
                    cpu[name] = []
                for r in range(args.rounds):
                    t0 = time.perf_counter()
                    np.copyto(dst, src)
                    t["memcpy"].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    at = 0
                    for f, n in zip(files, sizes):
                        fd = os.open(f, os.O_RDONLY)
                        try:
                            os.preadv(fd, [memoryview(rbuf)[at:at + n]], 0)
                        finally:
                            os.close(fd)
                        at += n
                    t["pread"].append(time.perf_counter() - t0)
                    order = builds if r % 2 == 0 else builds[::-1]
                    for name, binary in order:
                        out = f"{folder}/o_{name}.npy"
                        if os.path.exists(out):
                            os.unlink(out)
                        wall, c = timed([binary, "attention", "-q", f"{folder}/q.npy", "-k",
                                         ref("k"), "-v", ref("v"), "--emit", "output", "-o",
                                         out, "--precision", args.precision])
                        t[name].append(wall)
                        cpu[name].append(c)
                m = {k: statistics.median(v) for k, v in t.items()}
                line = (f"{fs_label(folder):16} {dtype:5} {args.precision} K+V {kv / 2**20:4.0f} MiB: memcpy "
                        f"{kv / m['memcpy'] / 1e9:5.1f} GB/s, pread "
                        f"{m['memcpy'] / m['pread']:.2f} x memcpy")
                for name, _ in builds:
                    c = statistics.median(cpu[name])
                    line += (f"; {name} {m[name] * 1e3:6.1f} ms = "
                             f"{m['memcpy'] / m[name]:.2f} x memcpy (CPU {c * 1e3:.0f} ms: "
                             f"{m['memcpy'] / c:.2f})")
                if args.before:
                    with open(f"{folder}/o_after.npy", "rb") as a, \
                            open(f"{folder}/o_before.npy", "rb") as b:
                        line += "; outputs identical" if a.read() == b.read() else "; OUTPUTS DIFFER"
                print(line + f"  (load {load()})", flush=True)
                for name in ("k", "v"):
                    os.unlink(ref(name).split(":")[0])
        finally:
            for n in os.listdir(folder):
                os.unlink(os.path.join(folder, n))
            os.rmdir(folder)


if __name__ == "__main__":
    main()
