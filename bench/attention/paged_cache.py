#!/usr/bin/python3
"""A decode step on a paged KV cache against the same step on a contiguous one.

  PYTHONPATH=BUILD/python /usr/bin/python3 bench/attention/paged_cache.py BUILD/posenc
      [--batch 8] [--tokens 16384] [--page 256] [--rounds 3] [--dir /tmp]

Case (FlashAttention's flash_attn_with_kvcache decode): b 8, 32 query heads, 8 KV heads,
d 128, f16 caches of 16,384 tokens per entry (15,383 cached plus 1 new token, which is
written into the cache), pages of 256 tokens in a shuffled order, causal. Timed side by
side in one run, alternately, medians over the rounds: in process through the Python
module (posenc.attention with cache_seqlens, k_new, v_new and page_table or not), and as
whole `posenc attention` processes reading NPY files. Printed: the times, the ratio paged
/ contiguous (the target is 1.5 at most), and, for scale, plain attention over the
contiguous cache with seqused_k (no KV-cache step), with the CPU and the load. Memory: the
two caches, K and V each 256 MiB, in memory and in --dir twice (contiguous and paged).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import cpu_name, load  # noqa: E402

import posenc  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("posenc")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    b, h, hk, d, S, page = args.batch, 32, 8, 128, args.tokens, args.page
    mb = S // page
    r = np.random.default_rng(0)
    q = r.standard_normal((b, 1, h, d)).astype(np.float16)
    kc = r.standard_normal((b, S, hk, d), dtype=np.float32).astype(np.float16)
    vc = r.standard_normal((b, S, hk, d), dtype=np.float32).astype(np.float16)
    kn = r.standard_normal((b, 1, hk, d)).astype(np.float16)
    vn = r.standard_normal((b, 1, hk, d)).astype(np.float16)
    seqlens = np.full(b, S - 1, np.int32)
    perm = r.permutation(b * mb)
    table = perm.reshape(b, mb).astype(np.int32)
    kp = np.empty((b * mb, page, hk, d), np.float16)
    vp = np.empty_like(kp)
    kp[table.reshape(-1)] = kc.reshape(b * mb, page, hk, d)
    vp[table.reshape(-1)] = vc.reshape(b * mb, page, hk, d)
    step = dict(cache_seqlens=seqlens, k_new=kn, v_new=vn, causal=True)

    def contiguous():
        return posenc.attention(q, kc, vc, **step)

    def paged():
        return posenc.attention(q, kp, vp, page_table=table, **step)

    def plain():
        return posenc.attention(q, kc, vc, axes="bshd", seqused_k=seqlens + 1, causal=True,
                                emit="output")

    a, p = contiguous(), paged()
    assert a.tobytes() == p.tobytes(), "paged and contiguous differ"
    files = {}
    for name, x in (("q", q), ("kc", kc), ("vc", vc), ("kp", kp), ("vp", vp), ("kn", kn),
                    ("vn", vn), ("cs", seqlens), ("pt", table)):
        files[name] = os.path.join(args.dir, f"paged_cache_{os.getpid()}_{name}.npy")
        np.save(files[name], x)
    out = os.path.join(args.dir, f"paged_cache_{os.getpid()}_out.npy")
    common = ["attention", "-q", files["q"], "--cache-seqlens", files["cs"], "--k-new",
              files["kn"], "--v-new", files["vn"], "--causal", "-o", out, "--force"]

    def process(paged_):
        kv = ["-k", files["kp"], "-v", files["vp"], "--page-table", files["pt"]] if paged_ \
            else ["-k", files["kc"], "-v", files["vc"]]
        t0 = time.perf_counter()
        subprocess.run([args.posenc, *common, *kv], check=True)
        return time.perf_counter() - t0

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    times = {k: [] for k in ("contiguous", "paged", "plain", "proc_contiguous", "proc_paged")}
    try:
        for _ in range(args.rounds):
            times["contiguous"].append(timed(contiguous))
            times["paged"].append(timed(paged))
            times["plain"].append(timed(plain))
            times["proc_contiguous"].append(process(False))
            times["proc_paged"].append(process(True))
    finally:
        for f in list(files.values()) + [out]:
            if os.path.exists(f):
                os.remove(f)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"CPU {cpu_name()}, {os.cpu_count()} CPUs, load {load()}; b {b}, h {h}, hk {hk}, "
          f"d {d}, {S} tokens per entry, page {page}, f16 caches "
          f"({kc.nbytes * 2 / 2**20:.0f} MiB K and V), {args.rounds} rounds")
    print(f"in process: contiguous {med['contiguous'] * 1e3:.1f} ms, paged "
          f"{med['paged'] * 1e3:.1f} ms; plain attention over the cache (seqused_k) "
          f"{med['plain'] * 1e3:.1f} ms")
    print(f"whole process: contiguous {med['proc_contiguous'] * 1e3:.1f} ms, paged "
          f"{med['proc_paged'] * 1e3:.1f} ms")
    print(f"RATIO paged / contiguous on {cpu_name()}: {med['paged'] / med['contiguous']:.2f} "
          f"(in process), {med['proc_paged'] / med['proc_contiguous']:.2f} (whole process); "
          f"target <= 1.5")


if __name__ == "__main__":
    main()
