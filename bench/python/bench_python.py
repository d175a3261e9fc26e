#!/usr/bin/env python3
"""The Python module's bars, side by side in one run (README "Use from Python"):

1. posenc.rope in place on a 256 MiB float32 array vs the C++ kernel on the same array
   (RopeApplier over the same memory, timed inside the extension): ratio <= 1.1.
2. posenc.attention vs the C++ attention call on the same inputs (already library
   Tensors): ratio <= 1.05.
3. Per-call overhead of posenc.rope on a tiny input (1x1x8x64, in place) over a no-op
   pybind11 call of the same module: <= 20 us (the best of many batches of 100 calls;
   "C++ alone" is the same rotation timed inside the extension).

Each timing is the best of several runs, the Python and C++ runs interleaved so that a
busy machine slows both alike. Usage: PYTHONPATH=<build>/python bench_python.py [--quick]
"""
import argparse
import os
import sys
import time
import timeit

import numpy as np

import posenc
from posenc import _posenc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name  # noqa: E402


def best(fn, repeats):
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    args = ap.parse_args()
    reps = 3 if args.quick else 7
    print(f"posenc {posenc.__version__}, kernel {posenc.kernel_variant()}, {cpu_name()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    ok = True

    # 1. RoPE in place, 256 MiB float32.
    shape = (1, 8, 8192, 128) if args.quick else (1, 32, 16384, 128)
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    ptr = x.__array_interface__["data"][0]
    py_t, cpp_t = [], []
    for _ in range(reps):
        py_t.append(best(lambda: posenc.rope(x, out=x), 1))
        cpp_t.append(_posenc.time_rope_cpp(x, "f32", "", 1))
    assert x.__array_interface__["data"][0] == ptr
    ratio = min(py_t) / min(cpp_t)
    bar = ratio <= 1.1
    ok &= bar
    print(f"rope in place {x.nbytes >> 20} MiB f32 {shape}: python {min(py_t) * 1e3:.1f} ms, "
          f"C++ {min(cpp_t) * 1e3:.1f} ms, ratio {ratio:.3f} (bar 1.1: {'ok' if bar else 'MISSED'})")

    # 2. Attention.
    b, h, s, d = (1, 4, 512, 64) if args.quick else (1, 8, 2048, 64)
    g = np.random.default_rng(1)
    q, k, v = (g.standard_normal((b, h, s, d), dtype=np.float32) for _ in range(3))
    py_t, cpp_t = [], []
    for _ in range(reps):
        py_t.append(best(lambda: posenc.attention(q, k, v, causal=True, emit="output"), 1))
        cpp_t.append(_posenc.time_attention_cpp(q, k, v, "f32", True, 1))
    ratio = min(py_t) / min(cpp_t)
    bar = ratio <= 1.05
    ok &= bar
    print(f"attention causal f32 {(b, h, s, d)}: python {min(py_t) * 1e3:.1f} ms, "
          f"C++ {min(cpp_t) * 1e3:.1f} ms, ratio {ratio:.3f} (bar 1.05: {'ok' if bar else 'MISSED'})")

    # 3. Per-call overhead.
    tiny = np.random.default_rng(2).standard_normal((1, 1, 8, 64), dtype=np.float32)
    # The best of many short batches: a busy machine's preemptions fall in some of them.
    n, batches = 100, (50 if args.quick else 300)
    rope_us = min(timeit.repeat(lambda: posenc.rope(tiny, out=tiny), number=n,
                                repeat=batches)) / n * 1e6
    noop_us = min(timeit.repeat(_posenc.noop, number=n, repeat=batches)) / n * 1e6
    cpp_us = _posenc.time_rope_cpp(tiny, "f32", "", 1000) * 1e6
    over = rope_us - noop_us
    bar = over <= 20
    ok &= bar
    print(f"tiny rope (1, 1, 8, 64) in place: {rope_us:.2f} us per call, no-op pybind11 call "
          f"{noop_us:.2f} us, C++ alone {cpp_us:.2f} us: overhead {over:.2f} us "
          f"(bar 20 us: {'ok' if bar else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
