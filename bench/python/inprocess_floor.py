#!/usr/bin/env python3
"""Decode attention and in-place RoPE through the Python module, each as a ratio to its
floor timed in the same run (a memcpy of the same bytes).

- decode: sq 1, sk 65,536, d 128, MHA (8 query and 8 K/V heads) and GQA 32:8, f32 and
  f16 K/V (f32 Q), ``posenc.attention(q, k, v, emit="output")``; floor: a copy of as
  many bytes as K and V hold. ratio = memcpy time / attention time (> 1: faster than a
  copy of K and V).
- rope: ``posenc.rope(x, out=x)`` on 256 MiB of f32 ([1, 65536, 8, 128] bshd, and
  [8, 32, 2048, 128] bhsd), in the default precision (f64 arithmetic) and with
  ``precision="f32"``; floor: a copy of the 256 MiB. ratio as above.
- prefill: b 1, s 4096, d 128, 8 (--prefill-heads) query and K/V heads, f32 and f16
  inputs, ``precision="f32"``, ``emit="output"``, non-causal and causal; floor: numpy's
  sgemm (the same OpenBLAS, as many threads as the run) of a 4096 x K by K x 4096
  product with the FLOPs the forward needs (4 h s^2 d; causal: 4 h d s(s+1)/2, the
  keys a query sees). ratio = posenc's FLOP rate / the sgemm's (>= 1: as fast as BLAS).
  Beside it, "own shapes": the rate of the attention's own two products done whole, per
  head, by the same sgemm: Q K^T ([s, d] x [d, s], inner dimension d = 128) and P V
  ([s, s] x [s, d], d columns), with no softmax between them and the s x s scores held
  in memory. The products of any attention have these shapes (a fused one takes them
  in tiles), so that rate is what BLAS itself reaches on them.

The copy is numpy's (one thread, memcpy). Rounds alternate the job and its copy (the
order flips round by round); medians over the rounds. Each job's first call is timed
apart from the rounds (it builds what later calls reuse). The CPU, thread count and
load are printed: the machines are shared.

Usage: PYTHONPATH=<build>/python inprocess_floor.py [--threads 1,2] [--rounds 9]
       [--cases decode,rope,prefill] [--prefill-heads 8]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import posenc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rounds(job, floor, n):
    """Medians of job and floor times over n rounds, order alternating."""
    tj, tf = [], []
    for i in range(n):
        if i % 2 == 0:
            tj.append(timed(job))
            tf.append(timed(floor))
        else:
            tf.append(timed(floor))
            tj.append(timed(job))
    return statistics.median(tj), statistics.median(tf)


def timed_cpu(fn):
    """Wall and CPU seconds (the process's, every thread) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def rounds_cpu(job, floor, n):
    """Medians of job and floor wall and CPU times over n rounds, order alternating:
    (job wall, job CPU), (floor wall, floor CPU)."""
    j, f = [], []
    for i in range(n):
        if i % 2 == 0:
            j.append(timed_cpu(job))
            f.append(timed_cpu(floor))
        else:
            f.append(timed_cpu(floor))
            j.append(timed_cpu(job))
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return (med(j, 0), med(j, 1)), (med(f, 0), med(f, 1))


def report(name, first, tj, tf):
    print(f"  {name:44s} {tj * 1e3:8.1f} ms  memcpy {tf * 1e3:7.1f} ms  "
          f"ratio {tf / tj:5.2f}  (first call {first * 1e3:.1f} ms)", flush=True)


def decode_cases(n):
    rng = np.random.default_rng(0)
    sk, d = 65536, 128
    for label, hq, hk in (("MHA 8:8", 8, 8), ("GQA 32:8", 32, 8)):
        q = rng.standard_normal((1, hq, 1, d), dtype=np.float32)
        k32 = rng.standard_normal((1, hk, sk, d), dtype=np.float32)
        v32 = rng.standard_normal((1, hk, sk, d), dtype=np.float32)
        for kv in ("f32", "f16"):
            k = k32 if kv == "f32" else k32.astype(np.float16)
            v = v32 if kv == "f32" else v32.astype(np.float16)
            src = np.concatenate([k.reshape(-1).view(np.uint8), v.reshape(-1).view(np.uint8)])
            dst = np.empty_like(src)
            dst[:] = src  # pages touched
            for prec in (None, "f32"):
                kw = {"emit": "output"}
                if prec:
                    kw["precision"] = prec

                def job():
                    posenc.attention(q, k, v, **kw)

                first = timed(job)
                tj, tf = rounds(job, lambda: np.copyto(dst, src), n)
                report(f"decode {label} {kv} K/V, {prec or 'default f64'}", first, tj, tf)
            del src, dst


def blas_threads(n):
    """numpy's OpenBLAS (the same library posenc links) at n threads, so the sgemm floor
    runs on as many cores as posenc."""
    import ctypes
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            ctypes.CDLL(name).openblas_set_num_threads(int(n))
        except (OSError, AttributeError):
            pass


def own_shapes_rate(n, q, k, v):
    """GFLOP/s of numpy's sgemm on the attention's own products, per head, whole: the
    median over n rounds of Q K^T then P V for every head."""
    heads, s, d = q.shape[1], q.shape[2], q.shape[3]
    scores = np.empty((s, s), dtype=np.float32)
    out = np.empty((s, d), dtype=np.float32)

    def products():
        for h in range(heads):
            np.matmul(q[0, h], k[0, h].T, out=scores)
            np.matmul(scores, v[0, h], out=out)

    t = statistics.median(timed(products) for _ in range(n))
    return 4.0 * heads * s * s * d / t / 1e9


def prefill_cases(n, heads):
    rng = np.random.default_rng(2)
    s, d = 4096, 128
    shape = (1, heads, s, d)
    q32, k32, v32 = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    own = own_shapes_rate(n, q32, k32, v32)
    print(f"  own shapes: sgemm of Q K^T and P V whole, {own:6.1f} GFLOP/s", flush=True)
    for dt in ("f32", "f16"):
        q, k, v = ((x if dt == "f32" else x.astype(np.float16)) for x in (q32, k32, v32))
        for causal in (False, True):
            flops = 4.0 * heads * d * (s * (s + 1) / 2 if causal else s * s)
            kdim = max(1, round(flops / (2 * 4096 * 4096)))
            a = rng.standard_normal((4096, kdim), dtype=np.float32)
            b = rng.standard_normal((kdim, 4096), dtype=np.float32)
            c = np.empty((4096, 4096), dtype=np.float32)

            def job():
                posenc.attention(q, k, v, causal=causal, precision="f32", emit="output")

            def floor():
                np.matmul(a, b, out=c)

            first = timed(job)
            (tj, cj), (tf, cf) = rounds_cpu(job, floor, n)
            gflop = 2.0 * 4096 * 4096 * kdim / 1e9
            name = f"prefill h{heads} s{s} {dt}{' causal' if causal else ''}, f32 arithmetic"
            print(f"  {name:44s} {tj * 1e3:8.1f} ms  {flops / tj / 1e9:6.1f} GFLOP/s  sgemm "
                  f"{gflop / tf:6.1f} GFLOP/s  ratio {flops / 1e9 / tj / (gflop / tf):5.2f}; "
                  f"per CPU s {flops / cj / 1e9:6.1f} vs {gflop / cf:6.1f} = "
                  f"{flops / 1e9 / cj / (gflop / cf):5.2f}; to own shapes "
                  f"{flops / tj / 1e9 / own:5.2f}  (first call {first * 1e3:.1f} ms)",
                  flush=True)


def rope_cases(n):
    rng = np.random.default_rng(1)
    for shape, axes in (((1, 65536, 8, 128), "bshd"), ((8, 32, 2048, 128), "bhsd")):
        x = rng.standard_normal(shape, dtype=np.float32)
        dst = np.empty_like(x)
        dst[...] = x
        for prec in (None, "f32"):
            kw = {"axes": axes}
            if prec:
                kw["precision"] = prec

            def job():
                posenc.rope(x, out=x, **kw)

            first = timed(job)
            tj, tf = rounds(job, lambda: np.copyto(dst, x), n)
            report(f"rope {axes} {list(shape)} f32, {prec or 'default f64'}", first, tj, tf)
        del x, dst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cases", default="decode,rope")
    ap.add_argument("--prefill-heads", type=int, default=8)
    args = ap.parse_args()
    cases = args.cases.split(",")
    print(f"posenc {posenc.__version__}, kernel {posenc.kernel_variant()}, {cpu_name()}, "
          f"{os.cpu_count()} CPUs", flush=True)
    for t in (int(s) for s in args.threads.split(",")):
        posenc.set_threads(t)
        blas_threads(t)
        print(f"threads {t}, load {os.getloadavg()[0]:.2f}", flush=True)
        if "decode" in cases:
            decode_cases(args.rounds)
        if "rope" in cases:
            rope_cases(args.rounds)
        if "prefill" in cases:
            prefill_cases(args.rounds, args.prefill_heads)
        print(f"  (load after: {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
