"""`posenc attention --grad-output dO` streamed: K and V longer than --max-memory holds.

Claim (posenc-attention(1), GRADIENTS): where the inputs do not fit --max-memory, K and
V are used in place of their mapped NPY files in the arithmetic's dtype (heads
contiguous), the forward streams over them within the budget, and dk and dv are written
to their NPY files as each key tile completes; the bytes are those of the run in memory
(and agree with torch float64 autograd of an eager attention written here to 1e-12 of
each tensor's largest magnitude), at -j1 and -j2; the process's peak resident memory
stays far below K and V; narrower K and V (f32 under float64) are widened a key tile at
a time. What cannot stream (--rope, dk to HDF5) is refused as before (exit 3), nothing
written.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import UNDER_ASAN, PosencTestCase, run, run_measured

REL = 1e-12


def eager(q, k, v, causal, sinks=None):
    hq, hk = q.shape[1], k.shape[1]
    K = k.repeat_interleave(hq // hk, 1)
    V = v.repeat_interleave(hq // hk, 1)
    s = (q @ K.transpose(-1, -2)) / q.shape[-1] ** 0.5
    sq, sk = s.shape[-2:]
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        col = sinks[None, :, None, None].expand(*s.shape[:-1], 1)
        return torch.softmax(torch.cat([s, col], -1), -1)[..., :sk] @ V
    return torch.softmax(s, -1) @ V


class AttentionBackwardStream(PosencTestCase):
    def inputs(self, shape, dtype=np.float64, seed=1):
        b, hq, hk, sq, sk, d, dv = shape
        r = np.random.default_rng(seed)
        arrays = [r.standard_normal(s).astype(dtype) for s in
                  ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, dv), (b, hq, sq, dv))]
        paths = [self.npy(n + ".npy", a) for n, a in zip(("q", "k", "v", "do"), arrays)]
        return arrays, paths

    def grads(self, paths, out, *args, emit="dq,dk,dv,softmax_d,lse", j=None):
        pre = ["-j", str(j)] if j else []
        self.run_ok(*pre, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                    "--grad-output", paths[3], "-o", self.path(out + "_{}.npy"),
                    "--emit", emit, *args)
        return {n: np.load(self.path(f"{out}_{n}.npy")) for n in emit.split(",")}

    def test_streamed_equals_in_memory_and_torch(self):
        # K and V 2 MiB each, dk and dv as much: 2M holds none of them whole.
        (q, k, v, do), paths = self.inputs((1, 4, 2, 64, 8192, 32, 16))
        sinks = np.array([0.5, -1.0, 0.0, 2.0])
        extra = ["--causal", "--sinks", self.npy("sinks.npy", sinks)]
        emit = "dq,dk,dv,softmax_d,lse,dsinks"
        mem = self.grads(paths, "mem", *extra, emit=emit)
        one = self.grads(paths, "one", *extra, "--max-memory", "2M", emit=emit, j=1)
        two = self.grads(paths, "two", *extra, "--max-memory", "2M", emit=emit, j=2)
        for n in emit.split(","):
            self.assertEqual(one[n].tobytes(), mem[n].tobytes(), n)
            self.assertEqual(two[n].tobytes(), mem[n].tobytes(), n)
        Q, K, V, S = (torch.tensor(a, requires_grad=True) for a in (q, k, v, sinks))
        want = torch.autograd.grad(eager(Q, K, V, True, S), (Q, K, V, S), torch.tensor(do))
        for n, w in zip(("dq", "dk", "dv", "dsinks"), want):
            w = w.numpy()
            self.assertLessEqual(np.abs(one[n] - w).max(), REL * np.abs(w).max(), n)

    def test_emit_without_dk(self):
        (_, _, _, _), paths = self.inputs((1, 2, 2, 16, 8192, 32, 32), seed=3)
        mem = self.grads(paths, "mem", emit="dv,dq")
        got = self.grads(paths, "s", "--max-memory", "2M", emit="dv,dq")
        for n in ("dv", "dq"):
            self.assertEqual(got[n].tobytes(), mem[n].tobytes(), n)
        self.assertFalse(os.path.exists(self.path("s_dk.npy")))

    @unittest.skipIf(UNDER_ASAN, "peak RSS means nothing under AddressSanitizer")
    def test_peak_memory_far_below_k_and_v(self):
        # K and V 64 MiB each (f32 under --precision f32, used in place), budget 16 MiB.
        _, paths = self.inputs((1, 2, 2, 16, 262144, 32, 32), dtype=np.float32, seed=5)
        rc, _, err, rss_kib = run_measured(
            "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2], "--grad-output",
            paths[3], "--precision", "f32", "--max-memory", "16M", "-o", self.path("m_{}.npy"))
        self.assertEqual(rc, 0, err)
        self.assertLess(rss_kib * 1024, 48 << 20, f"peak RSS {rss_kib} KiB")
        self.assertEqual(np.load(self.path("m_dk.npy")).shape, (1, 2, 262144, 32))

    def test_narrower_inputs_widened_by_tile(self):
        # f32 K and V under the float64 arithmetic: widened a key tile at a time.
        (q, k, v, do), paths = self.inputs((1, 2, 1, 16, 8192, 32, 16), dtype=np.float32,
                                           seed=6)
        mem = self.grads(paths, "mem", "--causal")
        got = self.grads(paths, "s", "--causal", "--max-memory", "2M")
        for n in mem:
            self.assertEqual(got[n].tobytes(), mem[n].tobytes(), n)
        Q, K, V = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
        want = torch.autograd.grad(eager(Q, K, V, True), (Q, K, V),
                                   torch.tensor(do, dtype=torch.float64))
        for n, w in zip(("dq", "dk", "dv"), want):
            np.testing.assert_array_equal(got[n], w.numpy().astype(np.float32), err_msg=n)

    def test_refused_where_it_cannot_stream(self):
        # dk to HDF5 cannot take positional writes; --rope keeps the inputs whole.
        _, paths = self.inputs((1, 2, 2, 16, 8192, 32, 32), dtype=np.float32, seed=4)
        base = ["attention", "-q", paths[0], "-k", paths[1], "-v", paths[2], "--grad-output",
                paths[3], "--max-memory", "2M"]
        for extra in (["--rope", "-o", self.path("r_{}.npy")],
                      ["--precision", "f32", "-o", self.path("r.h5")]):
            p = run(*base, *extra)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("--max-memory", p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertFalse([f for f in os.listdir(self.tmp) if f.startswith("r")])

if __name__ == "__main__":
    unittest.main()
