#!/usr/bin/python3
"""Two builds of the Python package side by side: the same calls (RoPE, tables of many
kinds, attention with its terms, gradients and a KV-cache step, compare, combine,
rope-ids) through each, their results byte for byte, and each call's in-process time
(best of --rounds, interleaved). For checking that a change to the module (e.g. the
requests read by keyword in the library) changes no result and costs no speed.

    bench/python/before_after.py OLD_PYTHONPATH NEW_PYTHONPATH [--rounds 5]

Each PYTHONPATH is a build's python folder (build/python). Exit status 1 when a result
differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def cases(posenc):
    """name -> a function returning a dict of arrays (and JSON-able attrs)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 8, 128), dtype=np.float32)
    q = rng.standard_normal((1, 8, 128, 64), dtype=np.float32)
    k = rng.standard_normal((1, 8, 160, 64), dtype=np.float32)
    v = rng.standard_normal((1, 8, 160, 64), dtype=np.float32)
    k2, v2 = k[:, :2].copy(), v[:, :2].copy()
    g = rng.standard_normal((1, 8, 128, 64), dtype=np.float32)
    ids3 = np.stack([np.arange(64) // 16, np.arange(64) % 16 // 4, np.arange(64) % 4])
    mask = rng.random((1, 1, 128, 160)) > 0.2
    kq = rng.standard_normal((2, 16, 4, 64), dtype=np.float32)
    kc = rng.standard_normal((3, 64, 2, 64), dtype=np.float32)
    vc = rng.standard_normal((3, 64, 2, 64), dtype=np.float32)
    kn = rng.standard_normal((2, 1, 2, 64), dtype=np.float32)
    vn = rng.standard_normal((2, 1, 2, 64), dtype=np.float32)
    parts = rng.standard_normal((4, 128, 8, 64), dtype=np.float32)
    lses = rng.standard_normal((4, 8, 128), dtype=np.float32)
    a = rng.standard_normal((256, 256), dtype=np.float32)

    def res(r):
        if isinstance(r, dict):
            return r
        if isinstance(r, tuple):
            return {str(i): v for i, v in enumerate(r)}
        return {"out": r}

    def kv():
        kk, vv = kc.copy(), vc.copy()
        r = posenc.attention(kq, kk, vv, axes="bshd", cache_seqlens=np.array([5, 40]),
                             k_new=kn, v_new=vn, cache_batch_idx=np.array([2, 0]),
                             causal=True, emit="output")
        return {"out": r, "k": kk, "v": vv}

    return {
        "rope": lambda: res(posenc.rope(x, axes="bshd")),
        "rope-neox-f16": lambda: res(posenc.rope(x.astype(np.float16), axes="bshd",
                                                 style="neox", base=500000.0)),
        "rope-yarn": lambda: res(posenc.rope(x, axes="bshd", scaling="yarn", factor=4.0,
                                             original_max_pos=32, max_pos=128)),
        "rope-llama3-f32": lambda: res(posenc.rope(x, axes="bshd", scaling="llama3",
                                                   factor=8.0, original_max_pos=16,
                                                   precision="f32")),
        "rope-mrope": lambda: res(posenc.rope(x[0], axes="shd", mrope_section=[16, 24, 24],
                                              position_ids=ids3)),
        "rope-partial-start": lambda: res(posenc.rope(x, axes="bshd", partial=0.5, start=7)),
        "table-rope": lambda: res(posenc.table.rope(positions=100, dim=64)),
        "table-sinusoidal": lambda: res(posenc.table.sinusoidal(positions=50, dim=32)),
        "table-alibi": lambda: res(posenc.table.alibi(heads=12, q_len=20, k_len=30)),
        "table-t5": lambda: res(posenc.table.t5_bucket(q_len=20, k_len=30, causal=True)),
        "table-xl": lambda: res(posenc.table.xl_relative(dim=32, q_len=10, k_len=20)),
        "table-rope2d": lambda: res(posenc.table.rope2d(height=8, width=8, dim=32)),
        "table-swin": lambda: res(posenc.table.swin_index(window=(4, 4))),
        "table-detr": lambda: res(posenc.table.detr_sine(embedding_dim=32, size=(6, 8))),
        "attention": lambda: res(posenc.attention(q, k, v, emit=["output", "lse"])),
        "attention-causal-gqa": lambda: res(posenc.attention(q, k2, v2, causal=True)),
        "attention-alibi-mask-softcap": lambda: res(posenc.attention(
            q, k, v, alibi=True, mask=mask, softcap=30.0, emit=["probs", "output"])),
        "attention-window-sinks": lambda: res(posenc.attention(
            q, k, v, window=(16, 0), sinks=np.linspace(-1, 1, 8), emit="output")),
        "attention-rope": lambda: res(posenc.attention(q, k, v, rope=True, causal=True,
                                                       base=10000.0, emit="output")),
        "attention-f32": lambda: res(posenc.attention(q, k, v, precision="f32",
                                                      causal=True, emit="output")),
        "attention-grad": lambda: res(posenc.attention(
            q, k, v, causal=True, grad_output=g, emit=["dq", "dk", "dv"])),
        "attention-kvcache": kv,
        "compare": lambda: {"r": json.dumps(posenc.compare(a, a * (1 + 1e-6)), sort_keys=True,
                                            default=str)},
        "combine": lambda: res(posenc.combine(parts, lses, lse_layout="hs")),
        "rope-ids": lambda: res(posenc.rope_ids("qwen2-vl", "text:4,image:2x4x4,text:3")),
    }


def emit(out_dir, rounds):
    """Runs every case `rounds` times under this process's posenc; saves the results
    and prints {case: best seconds} as JSON."""
    import posenc
    posenc.set_threads(2)
    times = {}
    for name, f in cases(posenc).items():
        best = 1e300
        for _ in range(rounds):
            t0 = time.perf_counter()
            r = f()
            best = min(best, time.perf_counter() - t0)
        for key, value in r.items():
            if isinstance(value, dict):  # attrs
                value = json.dumps(value, sort_keys=True, default=str)
            path = os.path.join(out_dir, f"{name}.{key}")
            if isinstance(value, str):
                with open(path + ".txt", "w") as fh:
                    fh.write(value)
            else:
                np.save(path + ".npy", np.ascontiguousarray(value), allow_pickle=False)
        times[name] = best
    print(json.dumps(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--emit-to", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.emit_to:
        return emit(args.emit_to, args.rounds)
    with open("/proc/cpuinfo") as fh:
        print(next(line for line in fh if line.startswith("model name")).strip())
    with tempfile.TemporaryDirectory() as d:
        times = {}
        for tag, path in (("old", args.old), ("new", args.new)):
            os.mkdir(os.path.join(d, tag))
            env = dict(os.environ, PYTHONPATH=path)
            r = subprocess.run([sys.executable, __file__, args.old, args.new, "--rounds",
                                str(args.rounds), "--emit-to", os.path.join(d, tag)],
                               env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{tag} ({path}): {r.stderr.strip()}")
            times[tag] = json.loads(r.stdout)
        differ = []
        old_files = sorted(os.listdir(os.path.join(d, "old")))
        if old_files != sorted(os.listdir(os.path.join(d, "new"))):
            differ.append("the result files")
        for f in old_files:
            with open(os.path.join(d, "old", f), "rb") as a, \
                    open(os.path.join(d, "new", f), "rb") as b:
                if a.read() != b.read():
                    differ.append(f)
        print(f"{'case':32} {'old ms':>9} {'new ms':>9} {'new/old':>8}")
        for name, t in times["old"].items():
            n = times["new"][name]
            print(f"{name:32} {t * 1e3:9.3f} {n * 1e3:9.3f} {n / t:8.2f}")
        print(f"{len(old_files)} result files; "
              + ("byte-identical" if not differ else "DIFFER: " + ", ".join(differ)))
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
