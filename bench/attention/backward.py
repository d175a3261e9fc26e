#!/usr/bin/python3
"""Speed of `posenc attention --grad-output` (the backward pass) against the same run's
sgemm rate and torch autograd of an eager attention.

  /usr/bin/python3 bench/attention/backward.py POSENC [--rounds 3] [--s 4096] [--dir /tmp]
      [--sgemm-peak BUILD/bench/attention/bench_sgemm_peak] [--before OLD_POSENC]
      [--no-given-forward]

Case: causal MHA, b 1, h 8, s 4096, d 128, f32 Q, K, V and dO as NPY files,
`--precision f32 --dtype f32 --emit dq,dk,dv`. The backward needs 2.5 times the forward's
FLOPs (FlashAttention's count): 2.5 * 4 s^2 d h / 2 with the causal half. That count
assumes the forward's out and lse are inputs, as FlashAttention's backward takes them; the
second case gives them (`--forward-output O --forward-lse LSE`, made once by posenc's f32
forward, untimed) and is timed in the same rounds as the first, which recomputes the
forward (two more products), the order of the two alternating round by round.
Printed (medians over the rounds): wall and CPU (user + system) time of the posenc
process; the GFLOP/s it reaches per wall second and per CPU second; the headline ratio
against the sgemm rate of numpy's matmul (OpenBLAS, the BLAS posenc calls, on all CPUs) for
the same products, timed alternately with posenc in each round; the sgemm rate of
torch.mm (f32, [s, d] x [d, s] and [s, s] x [s, d] products, torch's threads = the CPUs)
in the same run, per wall and per CPU second, and with --sgemm-peak OpenBLAS's (the BLAS
posenc calls) for one product of the backward's FLOPs; torch autograd of an eager causal attention
(f32, masked_fill + softmax + matmul; forward and backward timed together, as posenc
recomputes the forward) in wall and CPU seconds. On a shared machine the CPU-second
ratios are the meaningful ones. The CPU and the load are printed with them.
With --before, an earlier build runs in the same rounds (which of the two goes first
alternates round by round), its ratios printed beside, and its dq, dk and dv compared
byte for byte with the build's.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, load  # noqa: E402


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed_self(f):
    c0, t0 = self_cpu(), time.perf_counter()
    f()
    return time.perf_counter() - t0, self_cpu() - c0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--sgemm-peak", help="bench_sgemm_peak (OpenBLAS sgemm GFLOP/s)")
    ap.add_argument("--before", help="an earlier posenc, timed in the same rounds")
    ap.add_argument("--no-given-forward", action="store_true",
                    help="time only the backward that recomputes the forward")
    args = ap.parse_args()
    b, h, s, d = 1, 8, args.s, 128
    flops = 2.5 * 4 * s * s * d * h / 2
    torch.set_num_threads(os.cpu_count())
    print(f"CPU {cpu_name()}, {os.cpu_count()} CPUs, load {load()}; b {b} h {h} s {s} d {d} "
          f"causal f32; {flops / 1e9:.1f} GFLOP needed; medians of {args.rounds} rounds")
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal((b, h, s, d), dtype=np.float32) for n in ("q", "k", "v", "do")}
    ours, gemm, auto, blas, before, peaks, given = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="posenc-backward-", dir=args.dir) as tmp:
        for n, a in arrays.items():
            np.save(f"{tmp}/{n}.npy", a)
        cmd = [args.posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy", "-v",
               f"{tmp}/v.npy", "--grad-output", f"{tmp}/do.npy", "--causal", "--precision",
               "f32", "--dtype", "f32", "--emit", "dq,dk,dv", "-o", f"{tmp}/g_{{}}.npy"]
        # The forward's out and lse (FlashAttention's out, softmax_lse), made once.
        fwd = [f"{tmp}/fwd_output.npy", f"{tmp}/fwd_lse.npy"]
        if not args.no_given_forward:
            subprocess.run([args.posenc, "attention", "-q", f"{tmp}/q.npy", "-k", f"{tmp}/k.npy",
                            "-v", f"{tmp}/v.npy", "--causal", "--precision", "f32", "--dtype",
                            "f32", "--emit", "output,lse", "-o", f"{tmp}/fwd_{{}}.npy"],
                           check=True)
        given_args = ["--forward-output", fwd[0], "--forward-lse", fwd[1]]
        A = torch.randn(s, d)
        B = torch.randn(d, s)
        P = torch.randn(s, s)

        An, Bn, Pn = A.numpy(), B.numpy(), P.numpy()
        # Products into buffers made once: a fresh [s, s] result each time would time
        # the page faults of its first touch as much as the product.
        Cs, Cd = np.matmul(An, Bn), np.matmul(Pn, An)

        def sgemm_np():
            for _ in range(2):
                np.matmul(An, Bn, out=Cs)
            for _ in range(3):
                np.matmul(Pn, An, out=Cd)

        def sgemm():
            # The FLOPs of one head's backward without the causal half: S = Q K^T, dP = dO
            # V^T (s x d x s), dV = P^T dO, dQ = dS K, dK = dS^T Q (s x s x d); 10 s^2 d.
            for _ in range(2):
                torch.mm(A, B)
            for _ in range(3):
                torch.mm(P, A)
        gemm_flops = 10 * s * s * d

        q, k, v, do = (torch.from_numpy(arrays[n]) for n in ("q", "k", "v", "do"))
        keep = torch.ones(s, s, dtype=torch.bool).tril()

        def autograd():
            Q, K, V = (t.clone().requires_grad_() for t in (q, k, v))
            sc = (Q @ K.transpose(-1, -2)) / d ** 0.5
            p = torch.softmax(sc.masked_fill(~keep, float("-inf")), -1)
            torch.autograd.grad(p @ V, (Q, K, V), do)

        def timed_run(binary, tag, extra=()):
            c0, t0 = children_cpu(), time.perf_counter()
            subprocess.run([binary] + cmd[1:-2] + list(extra) + ["-o", f"{tmp}/{tag}_{{}}.npy"],
                           check=True)
            return time.perf_counter() - t0, children_cpu() - c0

        k_peak = max(1, round(flops / (2 * s * s)))

        def peak():
            out = subprocess.run([args.sgemm_peak, str(s), "0", "3", str(k_peak)], check=True,
                                 capture_output=True, text=True).stdout.split()
            return float(out[0]), float(out[1])

        for r in range(args.rounds + 1):  # round 0 warms up, untimed
            if args.before and r % 2:
                bw0 = timed_run(args.before, "old")
            if not args.no_given_forward and r % 2:
                gv = timed_run(args.posenc, "given", given_args)
            w, c = timed_run(args.posenc, "g")
            if not args.no_given_forward and not r % 2:
                gv = timed_run(args.posenc, "given", given_args)
            if args.before and not r % 2:
                bw0 = timed_run(args.before, "old")
            nw, nc = timed_self(sgemm_np)
            gw, gc = timed_self(sgemm)
            aw, ac = timed_self(autograd)
            pk = peak() if args.sgemm_peak else None
            if r:
                ours.append((w, c))
                gemm.append((gw, gc))
                blas.append((nw, nc))
                auto.append((aw, ac))
                if args.before:
                    before.append(bw0)
                if not args.no_given_forward:
                    given.append(gv)
                if pk:
                    peaks.append(pk)
        if args.before:
            for n in ("dq", "dk", "dv"):
                with open(f"{tmp}/g_{n}.npy", "rb") as a, open(f"{tmp}/old_{n}.npy", "rb") as b:
                    same = a.read() == b.read()
                print(f"{n}: {'the same bytes as' if same else 'DIFFERENT from'} --before's")
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    ow, oc = med(ours, 0), med(ours, 1)
    gw, gc = med(gemm, 0), med(gemm, 1)
    aw, ac = med(auto, 0), med(auto, 1)
    rate_w, rate_c = flops / ow / 1e9, flops / oc / 1e9
    peak_c = gemm_flops / gc / 1e9
    peak_w = gemm_flops / gw / 1e9
    print(f"posenc backward: {ow:.2f} s wall, {oc:.2f} s CPU: {rate_w:.1f} GFLOP/s per wall s, "
          f"{rate_c:.1f} per CPU s")
    nw, nc = med(blas, 0), med(blas, 1)
    bw_, bc_ = gemm_flops / nw / 1e9, gemm_flops / nc / 1e9
    print(f"OpenBLAS sgemm (numpy.matmul) same run: {bw_:.1f} GFLOP/s per wall s, "
          f"{bc_:.1f} per CPU s")
    print(f"RATIO posenc backward / OpenBLAS sgemm on {cpu_name()}: {rate_w / bw_:.2f} (wall), "
          f"{rate_c / bc_:.2f} (CPU)")
    print(f"sgemm (torch.mm) same run: {peak_w:.1f} GFLOP/s per wall s, {peak_c:.1f} per CPU s")
    print(f"posenc / sgemm: {rate_w / peak_w:.2f} (wall), {rate_c / peak_c:.2f} (CPU)")
    if args.sgemm_peak:
        bw, bc = med(peaks, 0), med(peaks, 1)
        print(f"OpenBLAS sgemm same run: {bw:.1f} GFLOP/s per wall s, {bc:.1f} per CPU s; "
              f"posenc / sgemm: {rate_w / bw:.2f} (wall), {rate_c / bc:.2f} (CPU)")
    if given:
        vw, vc = med(given, 0), med(given, 1)
        print(f"posenc backward given the forward (--forward-output, --forward-lse): {vw:.2f} s "
              f"wall, {vc:.2f} s CPU: {flops / vw / 1e9:.1f} GFLOP/s per wall s, "
              f"{flops / vc / 1e9:.1f} per CPU s")
        print(f"RATIO posenc backward given the forward / OpenBLAS sgemm on {cpu_name()}: "
              f"{flops / vw / 1e9 / bw_:.2f} (wall), {flops / vc / 1e9 / bc_:.2f} (CPU); "
              f"recomputing it: {rate_w / bw_:.2f} (wall), {rate_c / bc_:.2f} (CPU)")
        print(f"posenc backward given the forward / sgemm (torch.mm): "
              f"{flops / vw / 1e9 / peak_w:.2f} (wall), {flops / vc / 1e9 / peak_c:.2f} (CPU)")
    if args.before:
        ow0, oc0 = med(before, 0), med(before, 1)
        line = (f"--before: {ow0:.2f} s wall, {oc0:.2f} s CPU; / numpy sgemm "
                f"{flops / ow0 / 1e9 / bw_:.2f} (wall), {flops / oc0 / 1e9 / bc_:.2f} (CPU)")
        if args.sgemm_peak:
            line += (f"; / OpenBLAS sgemm {flops / ow0 / 1e9 / bw:.2f} (wall), "
                     f"{flops / oc0 / 1e9 / bc:.2f} (CPU)")
        print(line)
    print(f"torch autograd (fwd + bwd): {aw:.2f} s wall, {ac:.2f} s CPU; posenc is "
          f"{aw / ow:.2f}x (wall), {ac / oc:.2f}x (CPU) faster")
    print(f"load after {load()}")


if __name__ == "__main__":
    main()
