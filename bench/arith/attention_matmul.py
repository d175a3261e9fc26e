"""How far `posenc attention --arith hf` is from HF's eager attention run in torch on the
CPU, where the only difference is the two matmuls (posenc: float64 dot products rounded
once to the model dtype; torch: float32 accumulation in its BLAS's order). Every
element-wise step is bit-equal (tests/reference/test_arith_hf.py).

Prints, per dtype and shape, the share of logits, probs and outputs that differ from
torch's, and the largest |logits difference| / (scale * sum_i |q_i k_i|) in units of
the dtype's unit roundoff (2^-8 for bf16, 2^-24 for f32).

Usage: /usr/bin/python3 bench/arith/attention_matmul.py build/posenc
"""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "lib"))
import framework_rope_ref as ref  # noqa: E402

SHAPES = [(1, 2, 1, 3, 5, 16), (1, 8, 8, 128, 128, 128), (1, 8, 2, 512, 512, 128), (1, 4, 4, 16, 4096, 128), (2, 4, 2, 37, 53, 64)]


def main(posenc):
    tmp = tempfile.mkdtemp(prefix="posenc-attn-")
    g = torch.Generator().manual_seed(1)
    print(f"{'dtype':<6}{'shape (b,hq,hk,sq,sk,d)':<28}{'logits':>10}{'probs':>10}{'output':>10}"
          f"{'max':>14}")
    for dtype in (torch.bfloat16, torch.float32):
        for shape in SHAPES:
            b, hq, hk, sq, sk, d = shape
            q, k, v = [torch.randn(*s, generator=g).to(dtype)
                       for s in ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, d))]
            paths = []
            for n, t in (("q", q), ("k", k), ("v", v)):
                p = os.path.join(tmp, n + ".npy")
                np.save(p, t.float().numpy())
                if dtype == torch.bfloat16:
                    subprocess.run([posenc, "convert", p, "-o", p + ".h5:/x", "--dtype", "bf16"],
                                   check=True)
                    p += ".h5:/x"
                paths.append(p)
            out = os.path.join(tmp, "o.h5")
            subprocess.run([posenc, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                            "--arith", "hf", "--emit", "logits,probs,output", "-o", out,
                            "--force"], check=True)
            with h5py.File(out, "r") as f:
                got = [torch.from_numpy(f[n].astype(np.float32)[...]).to(dtype)
                       for n in ("logits", "probs", "output")]
            want = ref.eager_attention_forward(q, k, v, None, d ** -0.5, hq // hk)
            shares = [float((a.double() != w.double()).double().mean()) for a, w in zip(got, want)]
            kk = ref.repeat_kv(k, hq // hk).double()
            mag = (q.double().abs() @ kk.abs().transpose(2, 3)) * d ** -0.5
            unit = 2.0 ** (-8 if dtype == torch.bfloat16 else -24)
            worst = f"{float(((got[0].double() - want[0].double()).abs() / mag).max() / unit):.2f}"
            print(f"{str(dtype)[6:]:<6}{str(shape):<28}" + "".join(f"{s:>10.2%}" for s in shares)
                  + f"{worst:>14}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1] if len(sys.argv) > 1 else "posenc")
