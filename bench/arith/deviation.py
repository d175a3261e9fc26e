"""How far each framework's RoPE numbers are from the exact ones: the table of the man
page's section "Arithmetic".

posenc computes both sides: `--arith hf|meta|ggml` are bit-equal to the frameworks (see
tests/reference/test_arith_*.py) and `--arith exact` is the correctly rounded float64
value. For each model and window of 512 positions ending at 4K, 32K and 128K it prints
the largest |cos - exact cos| of the float32 cos/sin table (attention factor included),
and the largest |q_rot - exact| of a rotated float32 q with unit-normal entries
(bhsd [1, 2, 512, 128]).

Usage: /usr/bin/python3 bench/arith/deviation.py build/posenc
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

MODELS = [
    ("Llama-3.1", ["--base", "500000", "--scaling", "llama3", "--factor", "8",
                   "--original-max-pos", "8192"], ("hf", "meta", "ggml")),
    ("Qwen2.5 (YaRN x4)", ["--base", "1000000", "--scaling", "yarn", "--factor", "4",
                           "--original-max-pos", "32768"], ("hf", "ggml")),
    ("Llama-2 (theta 1e4)", ["--base", "10000"], ("hf", "meta", "ggml")),
]
ENDS = (4096, 32768, 131072)
WINDOW = 512


def main(posenc):
    tmp = tempfile.mkdtemp(prefix="posenc-deviation-")
    q = np.random.default_rng(0).standard_normal((1, 2, WINDOW, 128)).astype(np.float32)
    qpath = os.path.join(tmp, "q.npy")
    np.save(qpath, q)

    def run(*args):
        subprocess.run([posenc, *args], check=True)

    def table(args, arith, end, dtype):
        out = os.path.join(tmp, "t.npy")
        style = ["--style", "gptj"] if arith == "meta" else []
        run("table", "rope", "--dim", "128", "--positions", str(WINDOW), "--start", str(end - WINDOW),
            "--emit", "cos-sin", "--layout", "half", "--arith", arith, "--dtype", dtype, "-o", out,
            *style, *args)
        return np.load(out).astype(np.float64)

    def rope(args, arith, end, dtype):
        out = os.path.join(tmp, "r.npy")
        style = ["--style", "gptj"] if arith == "meta" else []
        run("rope", qpath, "-o", out, "--start", str(end - WINDOW), "--arith", arith, "--dtype",
            dtype, *style, *args)
        return np.load(out).astype(np.float64)

    print(f"window: {WINDOW} positions ending at each end; q: f32 unit normal, [1, 2, {WINDOW}, 128]")
    print(f"{'model':<22}{'arith':<7}" + "".join(f"{'cos/sin ' + str(e // 1024) + 'K':>14}" for e in ENDS)
          + "".join(f"{'q_rot ' + str(e // 1024) + 'K':>14}" for e in ENDS))
    for name, args, modes in MODELS:
        exact_t = {e: table(args, "exact", e, "f64") for e in ENDS}
        for arith in modes:
            cells = []
            for e in ENDS:
                cells.append(np.abs(table(args, arith, e, "f32") - exact_t[e]).max())
            for e in ENDS:
                # Meta's layout is interleaved; compare each mode with the exact rotation
                # in its own pair layout.
                style = ["--style", "gptj"] if arith == "meta" else []
                exact_q = rope(args + style, "exact", e, "f64")
                cells.append(np.abs(rope(args, arith, e, "f32") - exact_q).max())
            print(f"{name:<22}{arith:<7}" + "".join(f"{c:>14.2e}" for c in cells))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "posenc")
