"""`posenc attention --grad-output dO`: dq, dk, dv, softmax_d, lse (and dbias, dsinks)
against torch float64 autograd of an eager attention written here (not posenc's
forward), for every feature the backward honours.

Claims (posenc-attention(1), GRADIENTS): the gradients of the output with respect to Q,
K and V (K and V summed over each group of query heads), the float mask (dbias) and the
sinks (dsinks), FlashAttention's softmax_d = rowsum(dO o O) and the lse, in float64
arithmetic; the same bytes whatever -j or --max-memory say; several tiles (s > 128) as
one. Tolerance: the largest error of each tensor at most 1e-12 of its largest magnitude
(float64 arithmetic leaves about 1e-15).

The mask rules of the reference are FlashAttention's construct_local_mask and
construct_chunk_mask (hopper/test_util.py), written out for each query and key.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase, run
from reference_bias import get_slopes, t5_bucket

REL = 1e-12


def visible(b, sq, sk, causal=None, window=(-1, -1), chunk=0, key_len=None, cu=None):
    """[b, 1, sq, sk] bool: FlashAttention's rules, query i at position i + sk - sq."""
    keep = np.ones((b, 1, sq, sk), bool)
    for bi in range(b):
        for i in range(sq):
            p = i + sk - sq
            for j in range(sk):
                ok = True
                if causal == "bottom-right":
                    ok &= j <= p
                if causal == "top-left":
                    ok &= j <= i
                if window[0] >= 0:
                    ok &= j >= p - window[0]
                if window[1] >= 0:
                    ok &= j <= p + window[1]
                if chunk:
                    start = p - (p % chunk)  # Python's floor modulo
                    ok &= start <= j < start + chunk
                if key_len is not None:
                    ok &= j < key_len[bi]
                if cu is not None:
                    doc = lambda t: max(n for n in range(len(cu) - 1) if cu[n] <= t)
                    ok &= doc(i) == doc(j)
                keep[bi, 0, i, j] = ok
    return keep


def eager(q, k, v, scale, keep, fmask=None, softcap=0.0, alibi=None, sinks=None, temp=None,
          t5=None):
    """Eager attention in float64 torch (bhsd); masked rows give 0."""
    hq, hk = q.shape[1], k.shape[1]
    K = k.repeat_interleave(hq // hk, 1)
    V = v.repeat_interleave(hq // hk, 1)
    s = scale * (q @ K.transpose(-1, -2))
    if temp is not None:
        s = s * temp[:, None]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        s = s + alibi
    if t5 is not None:
        s = s + t5
    if fmask is not None:
        s = s + fmask
    s = s.masked_fill(~torch.as_tensor(keep), float("-inf"))
    m = s.detach().amax(-1, keepdim=True)
    if sinks is not None:
        m = torch.maximum(m, sinks.detach()[None, :, None, None])
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    if sinks is not None:
        z = z + torch.exp(sinks[None, :, None, None] - m)
    zs = torch.where(z > 0, z, torch.ones_like(z))
    o = (e / zs) @ V
    lse = torch.where(z > 0, torch.log(zs) + m, torch.full_like(z, float("-inf")))[..., 0]
    return o, lse


class AttentionBackward(PosencTestCase):
    def grads(self, q, k, v, do, *args, emit=None, env=None, j=None):
        paths = [self.npy(n + ".npy", a) for n, a in (("q", q), ("k", k), ("v", v), ("do", do))]
        out = self.path("g_{}.npy")
        extra = ["--emit", emit] if emit else []
        pre = ["-j", str(j)] if j else []
        self.run_ok(*pre, "attention", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                    "--grad-output", paths[3], "-o", out, *extra, *args, env=env)
        names = emit.split(",") if emit else ["dq", "dk", "dv", "softmax_d", "lse"]
        return {n: np.load(out.format(n)) for n in names}

    def check(self, got, want):
        for name, ref in want.items():
            ref = ref.detach().numpy() if torch.is_tensor(ref) else ref
            self.assertEqual(got[name].shape, ref.shape, name)
            fin = np.isfinite(ref)
            np.testing.assert_array_equal(np.isfinite(got[name]), fin, err_msg=name)
            if not fin.any():
                continue
            err = np.abs(got[name][fin] - ref[fin]).max()
            top = max(np.abs(ref[fin]).max(), 1e-300)
            self.assertLessEqual(err, REL * top, f"{name}: {err / top:.3g} relative")

    def case(self, shape, *args, causal=None, window=(-1, -1), chunk=0, key_len=None,
             cu=None, scale=None, bool_mask=None, fmask=None, softcap=0.0, alibi=None,
             sinks=None, temp=None, seed=0, dbias=False, spread=1.0, t5=None):
        b, hq, hk, sq, sk, d, dv = shape
        r = np.random.default_rng(seed)
        q = r.standard_normal((b, hq, sq, d)) * spread
        k = r.standard_normal((b, hk, sk, d))
        v = r.standard_normal((b, hk, sk, dv))
        do = r.standard_normal((b, hq, sq, dv))
        keep = visible(b, sq, sk, causal, window, chunk, key_len, cu)
        if bool_mask is not None:
            keep = keep & bool_mask
        Q, K, V = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        FM = torch.tensor(fmask, requires_grad=True) if fmask is not None else None
        S = torch.tensor(sinks, requires_grad=True) if sinks is not None else None
        sc = scale if scale else 1 / np.sqrt(d)
        T5 = None
        if t5 is not None:
            # t5 = (table [buckets, hq], bidirectional, buckets, max_distance): the bias
            # table[bucket(j - (i + sk - sq)), h], by HF's bucketing.
            table, bidir, nb, maxd = t5
            T5 = torch.tensor(table, requires_grad=True)
            rel = torch.arange(sk)[None, :] - (torch.arange(sq)[:, None] + sk - sq)
            idx = t5_bucket(rel, bidir, nb, maxd)
            t5_term = T5[idx].permute(2, 0, 1)[None]
        o, lse = eager(Q, K, V, sc, keep, FM, softcap, alibi, S, temp,
                       t5_term if T5 is not None else None)
        inputs = ([Q, K, V] + ([FM] if dbias else []) + ([T5] if T5 is not None else [])
                  + ([S] if S is not None else []))
        gs = torch.autograd.grad(o, inputs, torch.tensor(do))
        want = {"dq": gs[0], "dk": gs[1], "dv": gs[2],
                "softmax_d": (torch.tensor(do) * o).sum(-1), "lse": lse}
        names = ["dq", "dk", "dv", "softmax_d", "lse"]
        if dbias:
            want["dbias"] = gs[3]
            names.append("dbias")
        if T5 is not None:
            want["dt5_bias"] = gs[3 + dbias]
            names.append("dt5_bias")
        if S is not None:
            want["dsinks"] = gs[-1]
            names.append("dsinks")
        got = self.grads(q, k, v, do, *args, emit=",".join(names))
        self.check(got, want)
        return q, k, v, do

    def test_plain_and_scale(self):
        self.case((2, 2, 2, 5, 7, 8, 8))
        self.case((1, 2, 2, 5, 7, 8, 8), "--scale", "0.7", scale=0.7)

    def test_causal_both_alignments(self):
        self.case((1, 2, 2, 5, 9, 8, 8), "--causal", causal="bottom-right")
        self.case((1, 2, 2, 5, 9, 8, 8), "--causal", "top-left", causal="top-left")
        # More queries than keys: the first rows see no key (gradients 0, lse -inf).
        self.case((1, 2, 2, 9, 5, 8, 8), "--causal", causal="bottom-right")

    def test_windows_and_chunks(self):
        self.case((1, 2, 2, 6, 8, 8, 8), "--window", "2,1", window=(2, 1))
        self.case((1, 2, 2, 6, 8, 8, 8), "--sliding-window", "3", "--causal",
                  causal="bottom-right", window=(2, -1))
        self.case((1, 2, 2, 6, 8, 8, 8), "--chunk-size", "3", chunk=3)

    def test_key_lengths_and_packed(self):
        kl = self.npy("kl.npy", np.array([3, 7], np.int64))
        self.case((2, 2, 2, 5, 7, 8, 8), "--key-lengths", kl, key_len=[3, 7])
        cu = self.npy("cu.npy", np.array([0, 3, 7], np.int64))
        self.case((1, 2, 2, 7, 7, 8, 8), "--cu-seqlens", cu, cu=[0, 3, 7])

    def test_masks_and_dbias(self):
        r = np.random.default_rng(5)
        keep = r.random((1, 1, 5, 7)) < 0.6
        keep[..., 0] = True
        self.case((2, 2, 2, 5, 7, 8, 8), "--mask", self.npy("m.npy", keep), bool_mask=keep)
        fm = r.standard_normal((2, 1, 5, 7))
        fm[0, 0, 1, 2] = -np.inf
        self.case((2, 2, 2, 5, 7, 8, 8), "--mask", self.npy("f.npy", fm), fmask=fm, dbias=True)

    def test_gqa_mqa_dv(self):
        self.case((2, 4, 2, 5, 7, 8, 5), "--causal", causal="bottom-right")
        self.case((1, 4, 1, 5, 7, 8, 12))

    def test_softcap_alibi_temperature(self):
        self.case((1, 2, 2, 5, 7, 8, 8), "--softcap", "2.5", softcap=2.5, spread=3.0)
        sq, sk = 5, 7
        slopes = torch.tensor(get_slopes(2), dtype=torch.float64)
        i = np.arange(sq)[:, None] + sk - sq
        j = np.arange(sk)[None, :]
        alibi = -slopes[None, :, None, None] * torch.tensor(np.abs(i - j), dtype=torch.float64)
        self.case((1, 2, 2, sq, sk, 8, 8), "--alibi", "bottom-right", "--causal",
                  causal="bottom-right", alibi=alibi)
        pos = np.arange(sq) + sk - sq
        temp = torch.tensor(1 + 0.3 * np.log1p(np.floor((pos + 1) / 2.0)))
        self.case((1, 2, 2, sq, sk, 8, 8), "--attn-temperature", "0.3", "2", temp=temp)

    def test_t5_bias_and_its_table(self):
        # T5's table [buckets, hq] and its gradient (dS summed per bucket), encoder and
        # decoder bucketing, distances beyond max_distance, with a causal mask and sinks;
        # three tiles each way (s 300) in f64.
        r = np.random.default_rng(9)
        table = r.standard_normal((8, 2))
        t5 = self.npy("t5.npy", table)
        self.case((2, 2, 2, 5, 9, 8, 8), "--t5-bias", t5, "--t5-buckets", "8",
                  "--t5-max-distance", "6", "--scale", "1", scale=1.0, t5=(table, True, 8, 6))
        sinks = np.array([0.5, -1.0])
        self.case((1, 2, 1, 7, 7, 8, 8), "--t5-bias", t5, "--t5-buckets", "8",
                  "--t5-max-distance", "6", "--t5-causal", "--causal", "--softcap", "3",
                  "--sinks", self.npy("s.npy", sinks), causal="bottom-right", softcap=3.0,
                  sinks=sinks, t5=(table, False, 8, 6))
        big = r.standard_normal((32, 2))
        self.case((1, 2, 2, 300, 300, 8, 8), "--t5-bias", self.npy("t5b.npy", big),
                  t5=(big, True, 32, 128))

    def test_sinks(self):
        sinks = np.array([0.5, -1.0, 2.0, 0.0])
        self.case((1, 4, 2, 5, 7, 8, 8), "--sinks", self.npy("s.npy", sinks), sinks=sinks)
        # A row with no key keeps its sink: probabilities 0, gradients 0.
        self.case((1, 4, 2, 9, 5, 8, 8), "--sinks", self.npy("s.npy", sinks), "--causal",
                  causal="bottom-right", sinks=sinks)

    def test_several_tiles_layouts_threads_memory(self):
        # s 300: three tiles of 128 each way; bshd axes; the same bytes at -j 1 and 2 and
        # under a --max-memory that leaves one worker.
        b, hq, hk, sq, sk, d, dv = 1, 4, 2, 300, 300, 16, 8
        q, k, v, do = self.case((b, hq, hk, sq, sk, d, dv), "--causal", "--window", "150,-1",
                                causal="bottom-right", window=(150, -1))
        t = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))
        got = self.grads(t(q), t(k), t(v), t(do), "--axes", "bshd", "--causal", "--window",
                         "150,-1", emit="dq,dk,dv")
        ref = self.grads(q, k, v, do, "--causal", "--window", "150,-1", emit="dq,dk,dv")
        for n in ("dq", "dk", "dv"):
            np.testing.assert_allclose(got[n], t(ref[n]), rtol=0, atol=1e-13 * np.abs(ref[n]).max())

        def raw(*extra, j=None):
            out = self.path("bits_{}.npy")
            args = ["-q", self.npy("q.npy", q), "-k", self.npy("k.npy", k), "-v",
                    self.npy("v.npy", v), "--grad-output", self.npy("do.npy", do), "--causal",
                    "-o", out, "--precision", "f32", "--dtype", "f32", *extra]
            self.run_ok(*(["-j", str(j)] if j else []), "attention", *args)
            res = {}
            for n in ("dq", "dk", "dv", "softmax_d", "lse"):
                with open(out.format(n), "rb") as f:
                    res[n] = f.read()
            return res
        base = raw(j=1)
        self.assertEqual(raw(j=2), base, "-j 2")
        self.assertEqual(raw("--max-memory", "3M", j=2), base, "--max-memory 3M")


class AttentionBackwardRefusals(PosencTestCase):
    def setUp(self):
        super().setUp()
        r = np.random.default_rng(1)
        self.q = self.npy("q.npy", r.standard_normal((1, 2, 4, 8)))
        self.k = self.npy("k.npy", r.standard_normal((1, 2, 6, 8)))
        self.v = self.npy("v.npy", r.standard_normal((1, 2, 6, 8)))
        self.do = self.npy("do.npy", r.standard_normal((1, 2, 4, 8)))

    def test_bad_input(self):
        bad_shape = self.npy("bad.npy", np.zeros((1, 2, 5, 8)))
        bad_dtype = self.npy("bad_dt.npy", np.zeros((1, 2, 4, 8), np.int32))
        t5 = self.npy("t5.npy", np.zeros((32, 2)))
        bmask = self.npy("bm.npy", np.ones((4, 6), bool))
        out = self.path("o_{}.npy")
        base = ["attention", "-q", self.q, "-k", self.k, "-o", out]
        before = sorted(os.listdir(self.tmp))
        self.assert_each_fails(base, [
            (3, ["-v", self.v, "--grad-output", bad_shape], "shape"),
            (3, ["-v", self.v, "--grad-output", bad_dtype], "float"),
            (2, ["--grad-output", self.do], "needs -v"),
            (2, ["-v", self.v, "--emit", "dq,dk"], "--grad-output"),
            (2, ["-v", self.v, "--grad-output", self.do, "--emit", "dq,dclipped_bias"],
             "dclipped_bias needs --clipped-bias"),
            (2, ["-v", self.v, "--grad-output", self.do, "--emit", "dq,dt5_bias"], "t5"),
            (2, ["-v", self.v, "--grad-output", self.do, "--part", "0/2"], "--part"),
            (2, ["-v", self.v, "--grad-output", self.do, "--arith", "hf"], "arith"),
            (2, ["-v", self.v, "--grad-output", self.do, "--masked-rows", "nan"], "masked-rows"),
            (2, ["-v", self.v, "--grad-output", self.do, "--mask", bmask, "--emit", "dbias"],
             "float"),
            (2, ["-v", self.v, "--grad-output", self.do, "--emit", "dq,probs"], "probs"),
        ], before)

    def test_budget_too_small_is_refused_before_reading(self):
        # sk 65,536 keys of 8 heads (256 MiB each of K and V, sparse files) within
        # --max-memory 64MiB, dk and dv to HDF5 (no positional writes, so no streaming:
        # test_attention_backward_stream.py): the inputs would be read whole, so it
        # refuses from the headers (exit 3, nothing written) rather than exceed the budget.
        big = []
        for name in ("bk.npy", "bv.npy"):
            a = np.lib.format.open_memmap(self.path(name), mode="w+", dtype=np.float32,
                                          shape=(1, 8, 65536, 128))
            del a
            big.append(self.path(name))
        q = self.npy("sq.npy", np.zeros((1, 8, 16, 128), np.float32))
        do = self.npy("sdo.npy", np.zeros((1, 8, 16, 128), np.float32))
        before = sorted(os.listdir(self.tmp))
        self.assert_each_fails(
            ["attention", "-q", q, "-k", big[0], "-v", big[1], "--grad-output", do,
             "--max-memory", "64MiB", "-o", self.path("o.h5")],
            [(3, [], "gradients would need .* > --max-memory 64.0 MiB")], before)

    def test_nan_in_grad_output_propagates(self):
        r = np.random.default_rng(2)
        do = r.standard_normal((1, 2, 4, 8))
        do[0, 1, 2, 3] = np.nan
        out = self.path("o_{}.npy")
        self.run_ok("attention", "-q", self.q, "-k", self.k, "-v", self.v, "--grad-output",
                    self.npy("nan.npy", do), "-o", out)
        dq = np.load(out.format("dq"))
        self.assertTrue(np.isnan(dq[0, 1, 2]).all())
        self.assertTrue(np.isfinite(dq[0, 0]).all())
        self.assertTrue(np.isnan(np.load(out.format("softmax_d"))[0, 1, 2]))
        self.assertTrue(np.isnan(np.load(out.format("dv"))[0, 1]).any())


if __name__ == "__main__":
    unittest.main()
