#!/usr/bin/python3
"""Benchmark `posenc attention` against the machine's peak and PyTorch, in one run.

  /usr/bin/python3 bench/attention/run_bench.py BUILD_DIR [--s 4096] [--repeats 5]
      [--cases mha,gqa,causal,decode,long] [--precision f64|f32]

BUILD_DIR is a build configured with -DPOSENC_BUILD_BENCH=ON (bench_sgemm_peak and
bench_memcpy_bw). The machines are shared and noisy, so every figure is a median of
`repeats` rounds, and in each round the reference and the contenders run back to back
(interleaved), so that a load spike hits all of them.

Cases, all f32 inputs, b=1, 8 query heads, d=128, `--emit output` (output only), in
posenc's default f64 arithmetic or, with --precision f32, in the opt-in f32 one (the
arithmetic the sgemm reference and the PyTorch script use; named in every line printed):
  mha     s = 4096 (68.7 GFLOP).
  gqa     the same with one K/V head for the 8 query heads.
  causal  the same as mha with --causal; FLOPs counted are only those needed
          (4 h d s(s+1)/2, about half): posenc skips the key blocks a query block
          cannot see, but computes the partly masked ones whole.
  decode  sq = 1, sk = 65,536 (a long KV cache): memory-bound, so reported as the
          bandwidth K + V bytes / whole-process time against memcpy bandwidth.
  long    sq = 256, sk = 65,536: peak RSS with and without --max-memory 64M.

The reference for the compute cases is an sgemm of the same FLOPs (bench_sgemm_peak:
4096 x K times K x 4096 with K = FLOPs / (2 * 4096^2), OpenBLAS's default threads).
Every run writes a new output file (the last round's is deleted, untimed).
Both are reported by wall time (whole process for posenc) and per CPU second (user +
system of the whole posenc process; CPU time of the sgemm call), the latter being
steadier when other jobs share the cores.
PyTorch is the script a user would otherwise run, whole process including the loading
of the .npy files and the saving of the output: torch.nn.functional.
scaled_dot_product_attention where the installed torch has it (2.0+), otherwise (Debian's
1.13) the same math path written out, matmul, softmax, matmul, which is what SDPA runs
on CPU without a fused kernel. GQA is written with repeat_interleave of K and V.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

TORCH_SCRIPT = r"""
import sys, math, numpy as np, torch
import torch.nn.functional as F
d, causal = sys.argv[1], sys.argv[2] == "1"
q, k, v = (torch.from_numpy(np.load(f"{d}/{n}.npy")) for n in "qkv")
if k.size(1) != q.size(1):  # grouped-query attention
    k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
    v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
if hasattr(F, "scaled_dot_product_attention"):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
else:
    s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.size(-1))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    out = torch.matmul(F.softmax(s, dim=-1), v)
np.save(f"{d}/torch_output.npy", out.numpy())
"""


def wall(cmd):
    """Wall seconds and CPU seconds (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return t, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def fresh(path):
    """Deletes the output of the last round (untimed), so that every run writes a new
    file, as a first run does: on ext4, renaming a new file over an existing one also
    flushes it to disk (auto_da_alloc), which took 4 to 60 ms here."""
    if os.path.exists(path):
        os.remove(path)


def numbers(cmd):
    return [float(x) for x in
            subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()]


def rss_run(cmd):
    """Wall seconds, peak RSS in MiB and exit status of one run under /usr/bin/time."""
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, capture_output=True, text=True)
    secs, kb = r.stderr.strip().splitlines()[-1].split()
    return float(secs), int(kb) / 1024, r.returncode, r.stderr.strip().splitlines()[0]


def save(path, shape, rng):
    np.save(path, rng.standard_normal(shape, dtype=np.float32))


def compute_case(name, args, tmp, rng, posenc, peak_bin):
    s, h, d = args.s, 8, 128
    hk = 1 if name == "gqa" else h
    causal = name == "causal"
    save(f"{tmp}/q.npy", (1, h, s, d), rng)
    save(f"{tmp}/k.npy", (1, hk, s, d), rng)
    save(f"{tmp}/v.npy", (1, hk, s, d), rng)
    flops = 4.0 * h * d * (s * (s + 1) / 2 if causal else s * s)
    k_dim = max(1, round(flops / (2 * 4096 * 4096)))
    cmd = [posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy", "-v",
           f"{tmp}/v.npy", "--emit", "output", "-o", f"{tmp}/posenc_output.npy",
           "--precision", args.precision]
    if causal:
        cmd.append("--causal")
    torch_cmd = [sys.executable, f"{tmp}/torch_attention.py", tmp, "1" if causal else "0"]
    peaks, peaks_cpu, ours, ours_cpu, torch_t = [], [], [], [], []
    for _ in range(args.repeats):
        p, p_cpu = numbers([peak_bin, "4096", "0", "1", str(k_dim)])
        peaks.append(p)
        peaks_cpu.append(p_cpu)
        fresh(f"{tmp}/posenc_output.npy")
        t, c = wall(cmd)
        ours.append(t)
        ours_cpu.append(c)
        fresh(f"{tmp}/torch_output.npy")
        torch_t.append(wall(torch_cmd)[0])
    peak, peak_cpu, t_ours, c_ours, t_torch = (
        statistics.median(x) for x in (peaks, peaks_cpu, ours, ours_cpu, torch_t))
    diff = np.max(np.abs(np.load(f"{tmp}/posenc_output.npy") -
                         np.load(f"{tmp}/torch_output.npy")))
    rate = flops / t_ours / 1e9
    print(f"{name:7s} s={s} hq={h} hk={hk}{' causal' if causal else ''} {args.precision}: "
          f"{flops / 1e9:.1f} GFLOP needed; sgemm of the same FLOPs {peak:.1f} GFLOP/s; "
          f"posenc {t_ours * 1e3:.0f} ms = {rate:.1f} GFLOP/s whole process = "
          f"{rate / peak:.2f} of the sgemm peak; per CPU second {flops / c_ours / 1e9:.1f} "
          f"vs {peak_cpu:.1f} = {flops / c_ours / 1e9 / peak_cpu:.2f}; torch script "
          f"{t_torch * 1e3:.0f} ms (posenc {t_torch / t_ours:.1f}x faster); "
          f"max |posenc - torch| {diff:.1e}")


def decode_case(args, tmp, rng, posenc, bw_bin):
    h, d, sk = 8, 128, args.long_sk
    save(f"{tmp}/q.npy", (1, h, 1, d), rng)
    save(f"{tmp}/k.npy", (1, h, sk, d), rng)
    save(f"{tmp}/v.npy", (1, h, sk, d), rng)
    kv_bytes = 2 * h * sk * d * 4
    cmd = [posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy", "-v",
           f"{tmp}/v.npy", "--emit", "output", "-o", f"{tmp}/posenc_output.npy",
           "--precision", args.precision]
    torch_cmd = [sys.executable, f"{tmp}/torch_attention.py", tmp, "0"]
    bws, ours, ours_cpu, torch_t = [], [], [], []
    for _ in range(args.repeats):
        bws.append(numbers([bw_bin, "256", "3"])[0])
        fresh(f"{tmp}/posenc_output.npy")
        t, c = wall(cmd)
        ours.append(t)
        ours_cpu.append(c)
        fresh(f"{tmp}/torch_output.npy")
        torch_t.append(wall(torch_cmd)[0])
    bw, t_ours, c_ours, t_torch = (statistics.median(x) for x in (bws, ours, ours_cpu, torch_t))
    rate = kv_bytes / t_ours / 1e9
    print(f"decode  sq=1 sk={sk} h={h} {args.precision}: K+V {kv_bytes / 2**20:.0f} MiB; memcpy {bw:.1f} GB/s; "
          f"posenc {t_ours * 1e3:.0f} ms = {rate:.1f} GB/s of K+V whole process (read from "
          f"the page cache) = {rate / bw:.2f} of memcpy; per CPU second "
          f"{kv_bytes / c_ours / 1e9:.1f} GB/s; torch script {t_torch * 1e3:.0f} ms "
          f"(posenc {t_torch / t_ours:.1f}x faster)")


def long_case(args, tmp, rng, posenc):
    h, d, sq, sk = 8, 128, 256, args.long_sk
    save(f"{tmp}/q.npy", (1, h, sq, d), rng)
    save(f"{tmp}/k.npy", (1, h, sk, d), rng)
    save(f"{tmp}/v.npy", (1, h, sk, d), rng)
    base = [posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy", "-v",
            f"{tmp}/v.npy", "--emit", "output", "--precision", args.precision]
    out_mib = h * sq * d * 4 / 2**20
    for budget in (None, "256M", "64M"):
        extra = ["--max-memory", budget] if budget else []
        secs, rss, rc, _ = rss_run(base + extra + ["-o", f"{tmp}/long_{budget}.npy"])
        print(f"long    sq={sq} sk={sk} h={h} {args.precision} --max-memory {budget or 'default'}: exit {rc}, "
              f"{secs:.2f} s, peak RSS {rss:.0f} MiB (K+V {2 * h * sk * d * 4 / 2**20:.0f} MiB, "
              f"output {out_mib:.0f} MiB)")
    same = open(f"{tmp}/long_None.npy", "rb").read() == open(f"{tmp}/long_64M.npy", "rb").read()
    print(f"long    output with --max-memory 64M byte-identical to the default run: {same}")
    _, _, rc, msg = rss_run(base + ["--max-memory", "1M", "-o", f"{tmp}/long_1M.npy"])
    print(f"long    --max-memory 1M: exit {rc}: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--long-sk", type=int, default=65536)
    ap.add_argument("--cases", default="mha,gqa,causal,decode,long")
    ap.add_argument("--precision", default="f64", choices=("f64", "f32"),
                    help="posenc's arithmetic: f64 (its default) or f32 (the opt-in for speed)")
    args = ap.parse_args()
    posenc = os.path.join(args.build, "posenc")
    peak_bin = os.path.join(args.build, "bench", "attention", "bench_sgemm_peak")
    bw_bin = os.path.join(args.build, "bench", "attention", "bench_memcpy_bw")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"CPU {cpu}, {os.cpu_count()} CPUs, load average {' '.join(load)}; "
          f"medians of {args.repeats} interleaved rounds")
    tmp = tempfile.mkdtemp(prefix="posenc-attn-bench-")
    try:
        with open(f"{tmp}/torch_attention.py", "w") as f:
            f.write(TORCH_SCRIPT)
        rng = np.random.default_rng(0)
        for case in args.cases.split(","):
            if case in ("mha", "gqa", "causal"):
                compute_case(case, args, tmp, rng, posenc, peak_bin)
            elif case == "decode":
                decode_case(args, tmp, rng, posenc, bw_bin)
            elif case == "long":
                long_case(args, tmp, rng, posenc)
            else:
                sys.exit(f"unknown case {case}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
