#!/usr/bin/python3
"""Benchmark `posenc attention` against what a user would otherwise run, in one run.

  /usr/bin/python3 bench/attention/run_bench.py BUILD_DIR [--s 4096] [--repeats 3]

BUILD_DIR is a build configured with -DPOSENC_BUILD_BENCH=ON (for bench_sgemm_peak).
Measured side by side (the machines are shared and noisy, so only ratios taken in the
same run mean much):
  1. the machine's sgemm peak: bench_sgemm_peak, cblas_sgemm 4096^2 with OpenBLAS's
     default threads;
  2. the seeds' PyTorch attention as a script (load Q/K/V .npy, matmul, softmax, matmul,
     save probs and output .npy), whole process, b=1 h=8 s=4096 d=128 f32;
  3. `posenc attention` on the same files writing the same two outputs, and writing the
     output alone; attention GFLOP/s = 4 b h s^2 d / whole-process time;
  4. the long-sequence run: sq=256, sk=65536, d=128, h=8, --emit output, its peak RSS
     (the keys and values alone are 537 MB), and the probs that --max-memory refuses.
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

TORCH_SCRIPT = r"""
import sys, math, numpy as np, torch
import torch.nn.functional as F
d = sys.argv[1]
q, k, v = (torch.from_numpy(np.load(f"{d}/{n}.npy")) for n in "qkv")
att_logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.size(-1))
att_scores = F.softmax(att_logits, dim=-1)
out = torch.matmul(att_scores, v)
np.save(f"{d}/torch_probs.npy", att_scores.numpy())
np.save(f"{d}/torch_output.npy", out.numpy())
"""


def timed(cmd, repeats):
    """Best wall time of `repeats` runs and the peak RSS (KiB) of the last one."""
    best = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t0)
    return best, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long-sq", type=int, default=256)
    ap.add_argument("--long-sk", type=int, default=65536)
    args = ap.parse_args()
    posenc = os.path.join(args.build, "posenc")
    peak_bin = os.path.join(args.build, "bench", "attention", "bench_sgemm_peak")
    b, h, s, d = 1, 8, args.s, 128
    flops = 4.0 * b * h * s * s * d
    tmp = tempfile.mkdtemp(prefix="posenc-attn-bench-")
    try:
        rng = np.random.default_rng(0)
        for n in "qkv":
            np.save(f"{tmp}/{n}.npy", rng.standard_normal((b, h, s, d), dtype=np.float32))
        with open(f"{tmp}/seed_attention.py", "w") as f:
            f.write(TORCH_SCRIPT)

        peak = float(subprocess.run([peak_bin, "4096", "0", "3"], check=True,
                                    capture_output=True, text=True).stdout)
        t_torch, _ = timed([sys.executable, f"{tmp}/seed_attention.py", tmp], args.repeats)
        t_both, _ = timed([posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy",
                           "-v", f"{tmp}/v.npy", "-o", f"{tmp}/posenc_{{}}.npy"], args.repeats)
        t_out, _ = timed([posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy",
                          "-v", f"{tmp}/v.npy", "--emit", "output", "-o",
                          f"{tmp}/posenc_out.npy"], args.repeats)
        peak_again = float(subprocess.run([peak_bin, "4096", "0", "3"], check=True,
                                          capture_output=True, text=True).stdout)
        # Same answer as torch (f32 vs f32: loose bound, both round differently).
        diff = np.max(np.abs(np.load(f"{tmp}/posenc_output.npy") - np.load(f"{tmp}/torch_output.npy")))

        print(f"b={b} h={h} s={s} d={d} f32, {flops / 1e9:.1f} GFLOP per attention")
        print(f"sgemm peak (4096^2, before/after): {peak:.1f} / {peak_again:.1f} GFLOP/s")
        print(f"seeds' torch script (probs+output): {t_torch * 1e3:.0f} ms")
        print(f"posenc attention (probs+output):    {t_both * 1e3:.0f} ms  "
              f"-> {t_torch / t_both:.2f}x faster")
        print(f"posenc attention (output only):     {t_out * 1e3:.0f} ms  "
              f"-> {flops / t_out / 1e9:.1f} GFLOP/s whole process = "
              f"{100 * flops / t_out / 1e9 / max(peak, peak_again):.0f}% of the sgemm peak")
        print(f"max |posenc - torch| output: {diff:.2e}")

        # Long sequence, output only, in bounded memory.
        for n in "kv":
            os.remove(f"{tmp}/{n}.npy")
        os.remove(f"{tmp}/q.npy")
        for f in os.listdir(tmp):
            if f.endswith(".npy"):
                os.remove(f"{tmp}/{f}")
        sq, sk = args.long_sq, args.long_sk
        np.save(f"{tmp}/lq.npy", rng.standard_normal((1, h, sq, d), dtype=np.float32))
        for n in "kv":
            np.save(f"{tmp}/l{n}.npy", rng.standard_normal((1, h, sk, d), dtype=np.float32))
        cmd = ["/usr/bin/time", "-f", "%e %M", posenc, "attention", "-q", f"{tmp}/lq.npy",
               "-k", f"{tmp}/lk.npy", "-v", f"{tmp}/lv.npy", "--emit", "output", "--causal",
               "-o", f"{tmp}/long_out.npy"]
        r = subprocess.run(cmd, check=True, capture_output=True, text=True)
        secs, rss_kb = r.stderr.strip().splitlines()[-1].split()
        kv_mb = 2 * h * sk * d * 4 / 1e6
        print(f"long: sq={sq} sk={sk} d={d} h={h} --emit output: {float(secs):.2f} s, "
              f"peak RSS {int(rss_kb) / 1024:.0f} MiB (K+V inputs {kv_mb:.0f} MB; "
              f"probs would be {h * sq * sk * 4 / 1e6:.0f} MB)")
        r = subprocess.run([posenc, "attention", "-q", f"{tmp}/lq.npy", "-k", f"{tmp}/lk.npy",
                            "--emit", "probs", "--max-memory", "256M", "-o",
                            f"{tmp}/long_probs.npy"], capture_output=True, text=True)
        print(f"long probs with --max-memory 256M: exit {r.returncode}: {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
