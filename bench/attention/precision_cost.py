#!/usr/bin/python3
"""What the default float64 arithmetic of `posenc attention` costs against the opt-in
`--precision f32`, in the same rounds.

  /usr/bin/python3 bench/attention/precision_cost.py POSENC [--rounds 7]
      [--cases decode,prefill,causal] [--dir /tmp] [--sk 65536] [--s 4096]

Cases (f32 Q, K and V as NPY in the page cache, b 1, 8 heads, d 128, `--emit output`):
  decode   sq 1, sk 65,536 (256 MiB of K and V): memory-bound; the f32 keys are widened
           to f64 block by block in the default arithmetic.
  prefill  sq = sk = 4096 (68.7 GFLOP): compute-bound, dgemm against sgemm.
  causal   the same with --causal (about half the FLOPs).
Each round runs the default (f64) and `--precision f32`, the order alternating from round
to round, each writing a new output file. Printed: medians of wall and CPU (user +
system) time of the whole process, and f64 / f32; the largest difference between the
two outputs relative to the largest output (the f32 arithmetic's error, as the f64 one
is correctly rounded). The CPU, the load before and after and the file system are printed with them.
"""
import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, fs_label, load, timed  # noqa: E402

CASES = {"decode": (1, None, False), "prefill": (None, None, False),
         "causal": (None, None, True)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cases", default="decode,prefill,causal")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--sk", type=int, default=65536, help="decode's keys")
    ap.add_argument("--s", type=int, default=4096, help="prefill's queries and keys")
    args = ap.parse_args()
    print(f"CPU {cpu_name()}, {os.cpu_count()} CPUs, load {load()}; {fs_label(args.dir)}; "
          f"medians of {args.rounds} rounds")
    rng = np.random.default_rng(0)
    h, d = 8, 128
    with tempfile.TemporaryDirectory(prefix="posenc-precision-", dir=args.dir) as tmp:
        for case in args.cases.split(","):
            if case not in CASES:
                sys.exit(f"unknown case {case}")
            sq = 1 if case == "decode" else args.s
            sk = args.sk if case == "decode" else args.s
            for n, s in (("q", sq), ("k", sk), ("v", sk)):
                np.save(f"{tmp}/{n}.npy", rng.standard_normal((1, h, s, d), dtype=np.float32))
            base = [args.posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy",
                    "-v", f"{tmp}/v.npy", "--emit", "output"]
            if CASES[case][2]:
                base.append("--causal")
            runs = {"f64": [], "f32": []}
            for r in range(args.rounds + 1):  # round 0 warms the page cache, untimed
                order = ("f64", "f32") if r % 2 else ("f32", "f64")
                for prec in order:
                    out = f"{tmp}/out_{prec}.npy"
                    if os.path.exists(out):
                        os.remove(out)
                    extra = ["--precision", "f32"] if prec == "f32" else []
                    t = timed(base + extra + ["-o", out])
                    if r:
                        runs[prec].append(t)
            med = {p: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for p, v in runs.items()}
            a = np.load(f"{tmp}/out_f64.npy").astype(np.float64)
            b = np.load(f"{tmp}/out_f32.npy").astype(np.float64)
            rel = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
            (w64, c64), (w32, c32) = med["f64"], med["f32"]
            print(f"{case:8s} sq {sq} sk {sk} h {h} d {d}: default f64 {w64 * 1e3:.0f} ms "
                  f"(CPU {c64 * 1e3:.0f}), --precision f32 {w32 * 1e3:.0f} ms "
                  f"(CPU {c32 * 1e3:.0f}); f64 / f32 wall {w64 / w32:.2f}, CPU {c64 / c32:.2f}; "
                  f"|f32 - f64| up to {rel:.1e} of max |output|")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
