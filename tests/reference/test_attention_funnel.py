"""posenc attention with the Funnel Transformer's relative attention, and posenc table
funnel-relative, against the independent torch reference tests/lib/funnel_reference.py
(written from HF transformers' modeling_funnel.py: get_position_embeds,
_relative_shift_gather, relative_positional_attention, relative_token_type_attention).

A Funnel layer is run as HF runs it, with random projections and biases: the block's
position embeddings R come from `posenc table funnel-relative` (checked against the
reference's get_position_embeds first), and posenc gets them with the layer's r_kernel
(--rel-kernel), r_w_bias, r_r_bias, r_s_bias, seg_embed, the pooled token_type_mat
(--segment-index), the cls_mask (--separate-cls) and HF's attention mask as an additive
-1e6 (--mask). Covered:
- block 0 (no pooling, shift 1); a block's first layer with pool_q_only (queries pooled b
  times, keys b - 1 times: shift 2); a pooled block (both pooled: shift 1); blocks 1 to 3;
- separate_cls on and off (the <cls> position 1 - 2^b, the cls_mask), truncate_seq;
- several heads, batch 2, the factorized attention type (phi, pi, psi, omega from posenc
  table funnel-factorized, checked against the reference's pooled tables first);
- float64 to 1e-12 (rtol and atol: the values are differently rounded sums of the same
  products), float32 against the reference run in float32 (1e-5);
- -j 1 and -j 2 give the same bytes;
- bad values of each new option: one-line errors, exit 2 (usage) or 3 (input), no output.
"""
import os
import unittest

import numpy as np
import torch

from funnel_reference import Structure, funnel_attention
from posenc_testlib import PosencTestCase

F64 = dict(rtol=1e-12, atol=1e-12)
F32 = dict(rtol=1e-5, atol=1e-5)


class Base(PosencTestCase):
    def save(self, **tensors):
        for name, t in tensors.items():
            np.save(self.path(name + ".npy"), t.numpy() if torch.is_tensor(t) else t)

    def run_attention(self, *args):
        out = self.path("o_{}.npy")
        self.run_ok("attention", "--emit", "logits,probs,output", "-o", out,
                    *[self.path(a) if str(a).endswith(".npy") else a for a in args])
        return [np.load(self.path(f"o_{n}.npy")) for n in ("logits", "probs", "output")]


def layer_inputs(st, L, nq, nk, batch, seed):
    """The pooled attention inputs of a layer whose queries were pooled nq times and keys
    nk times: lengths, token_type_mat, cls_mask and an attention mask over the keys."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 2, (batch, L), generator=g)
    ids[:, 0] = 2  # <cls>
    mat = st.token_type_mat(ids)
    cls = st.cls_mask(L)
    for _ in range(nq):
        mat = st.stride_pool(mat, 1)
        cls = st.stride_pool(cls, 0)
    for _ in range(nk):
        mat = st.stride_pool(mat, 2)
        cls = st.stride_pool(cls, 1)
    sq, sk = mat.shape[1], mat.shape[2]
    keep = (torch.rand(batch, sk, generator=g) > 0.25).to(st.dtype)
    keep[:, 0] = 1
    return sq, sk, mat, cls, keep


class TestTable(Base):
    def test_matches_get_position_embeds(self):
        for L, d, sep, trunc in ((13, 8, False, False), (16, 12, True, False),
                                 (21, 8, True, True), (8, 4, False, False)):
            st = Structure(d, sep, trunc)
            embeds = st.relative_shift_embeds(L, 4)
            for block in range(4):
                for shift in (1, 2):
                    if shift == 2 and block == 0:
                        continue
                    args = ["table", "funnel-relative", "--seq-len", L, "--dim", d, "--block",
                            block, "--shift", shift, "--dtype", "f64", "-o", self.path("R.npy")]
                    if sep:
                        args.append("--separate-cls")
                    if trunc:
                        args.append("--truncate-seq")
                    try:
                        self.run_ok(*args)
                    except AssertionError:
                        raise AssertionError(f"L={L} sep={sep} trunc={trunc} block={block}")
                    R = np.load(self.path("R.npy"))
                    self.assert_close(R, embeds[block][shift - 1], **F64,
                                      msg=f"L={L} d={d} sep={sep} trunc={trunc} b={block} s={shift}")

    def test_f32_within_hf_float32(self):
        # HF builds the table in the model dtype: angles formed in float32 are off by up
        # to |angle| 2^-23 (and the frequencies by their rounding), so the float32 table
        # (posenc's: correctly rounded) agrees within 2 L 2^-22 + 2^-23.
        for L, d, sep in ((64, 16, True), (40, 32, False)):
            st = Structure(d, sep, dtype=torch.float32)
            embeds = st.relative_shift_embeds(L, 3)
            for block, shift in ((0, 1), (1, 2), (2, 1), (2, 2)):
                args = ["table", "funnel-relative", "--seq-len", L, "--dim", d, "--block", block,
                        "--shift", shift, "-o", self.path("R32.npy")]
                self.run_ok(*args + (["--separate-cls"] if sep else []))
                R = np.load(self.path("R32.npy"))
                self.assertEqual(R.dtype, np.float32)
                tol = 2 * L * 2.0 ** -22 + 2.0 ** -23
                self.assert_close(R, embeds[block][shift - 1], rtol=0, atol=tol,
                                  msg=f"f32 L={L} d={d} sep={sep} b={block} s={shift}")

    def test_hdf5_records_lengths(self):
        out = self.path("t.h5")
        self.run_ok("table", "funnel-relative", "--seq-len", 16, "--dim", 8, "--block", 2,
                    "--shift", 2, "--separate-cls", "-o", out + ":/r")
        import h5py
        with h5py.File(out) as f:
            # keys pooled once (9 positions), queries twice (5): rows = 9 + 2 * 5
            self.assertEqual(f["/r"].shape, (19, 8))
            self.assertEqual(int(f["/r"].attrs["q_len"]), 5)
            self.assertEqual(int(f["/r"].attrs["k_len"]), 9)


class TestRelativeShift(Base):
    def case(self, L, block, nq, nk, sep, trunc=False, batch=2, n=3, d=8, d_model=12,
             dtype=torch.float64, tol=F64, segments=True, mask=True, seed=0):
        st = Structure(d_model, sep, trunc, dtype=torch.float64)
        sq, sk, mat, cls, keep = layer_inputs(st, L, nq, nk, batch, seed)
        shift = 2 if sq != sk else 1
        args = ["table", "funnel-relative", "--seq-len", L, "--dim", d_model, "--block", block,
                "--shift", shift, "--dtype", "f64", "-o", self.path("R.npy")]
        args += ["--separate-cls"] if sep else []
        args += ["--truncate-seq"] if trunc else []
        self.run_ok(*args)
        R = torch.from_numpy(np.load(self.path("R.npy")))
        self.assertEqual(R.shape[0], sk + shift * sq)

        g = torch.Generator().manual_seed(seed + 100)
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
        q, k, v = rnd(batch, sq, n, d), rnd(batch, sk, n, d), rnd(batch, sk, n, d)
        w = rnd(d_model, n, d) * 0.3
        u, vb, sb, se = rnd(n, d), rnd(n, d), rnd(n, d), rnd(2, n, d)
        self.save(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), R=R.to(dtype), w=w.to(dtype),
                  u=u.to(dtype), vb=vb.to(dtype), sb=sb.to(dtype), se=se.to(dtype), tt=mat,
                  m=(-1e6 * (1 - keep))[:, None, None, :].to(dtype))
        c = lambda t: None if t is None else t.to(dtype)
        score, prob, vec = funnel_attention(
            c(q), c(k), c(v), c(u), c(vb), c(w), r=c(R), r_s_bias=c(sb) if segments else None,
            seg_embed=c(se) if segments else None, token_type_mat=mat if segments else None,
            attention_mask=c(keep) if mask else None, cls_mask=c(cls))
        cmd = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--axes", "bshd", "--rel-keys",
               "R.npy", "--rel-kernel", "w.npy", "--rel-shift", shift, "--content-bias", "u.npy",
               "--position-bias", "vb.npy"]
        if segments:
            cmd += ["--segment-index", "tt.npy", "--segment-embed", "se.npy", "--segment-bias",
                    "sb.npy"]
        if mask:
            cmd += ["--mask", "m.npy"]
        if sep:
            cmd.append("--separate-cls")
        logits, probs, output = self.run_attention(*cmd)
        msg = (f"L={L} block={block} nq={nq} nk={nk} sq={sq} sk={sk} shift={shift} sep={sep} "
               f"trunc={trunc} {dtype}")
        self.assert_close(logits, score, **tol, msg=msg)
        self.assert_close(probs, prob, **tol, msg=msg)
        self.assert_close(output, vec, **tol, msg=msg)
        self.errors.append(max(np.max(np.abs(a - b.numpy()))
                               for a, b in ((probs, prob), (output, vec))))

    def setUp(self):
        super().setUp()
        self.errors = []

    def tearDown(self):
        if self.errors and os.environ.get("POSENC_REPORT_ERRORS"):
            print(f"\n{self.id()}: max abs error of probs/output {max(self.errors):.3g}")
        super().tearDown()

    def test_block0_f64(self):
        self.case(9, 0, 0, 0, sep=False)
        self.case(10, 0, 0, 0, sep=True, n=4)
        self.case(7, 0, 0, 0, sep=True, segments=False, mask=False, batch=1, n=1)

    def test_pooled_queries_shift2_f64(self):
        # The first layer of blocks 1-3 with pool_q_only: queries pooled, keys not.
        for block in (1, 2, 3):
            self.case(24, block, block, block - 1, sep=False, seed=block)
            self.case(24, block, block, block - 1, sep=True, seed=block, n=2)
        self.case(19, 2, 2, 1, sep=True, trunc=True)

    def test_pooled_block_f64(self):
        # Later layers (or pool_q_only off): queries and keys pooled alike, shift 1.
        for block in (1, 2):
            self.case(20, block, block, block, sep=False, seed=10 + block)
            self.case(20, block, block, block, sep=True, seed=10 + block, n=5)
        self.case(23, 2, 2, 2, sep=True, trunc=True)

    def test_f32(self):
        self.case(16, 1, 1, 0, sep=True, dtype=torch.float32, tol=F32)
        self.case(16, 2, 2, 2, sep=False, dtype=torch.float32, tol=F32)


class TestFactorized(Base):
    def case(self, L, nq, nk, sep, trunc=False, batch=2, n=3, d=8, d_model=10, seed=0):
        st = Structure(d_model, sep, trunc)
        sq, sk, mat, cls, keep = layer_inputs(st, L, nq, nk, batch, seed)
        phi, pi, psi, omega = st.factorized_embeds(L)
        for _ in range(nq):
            phi, pi = st.stride_pool(phi, 0), st.stride_pool(pi, 0)
        for _ in range(nk):
            psi, omega = st.stride_pool(psi, 0), st.stride_pool(omega, 0)
        # The same tables from posenc table funnel-factorized, one run for all four.
        args = ["table", "funnel-factorized", "--seq-len", L, "--dim", d_model, "--block", nq,
                "--key-block", nk, "--dtype", "f64", "-o", self.path("f_{}.npy")]
        args += ["--separate-cls"] if sep else []
        args += ["--truncate-seq"] if trunc else []
        self.run_ok(*args)
        for name, want in (("phi", phi), ("pi", pi), ("psi", psi), ("omega", omega)):
            got = np.load(self.path(f"f_{name}.npy"))
            self.assert_close(got, want, **F64, msg=f"{name} L={L} nq={nq} nk={nk} sep={sep}")
        g = torch.Generator().manual_seed(seed + 200)
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
        q, k, v = rnd(batch, sq, n, d), rnd(batch, sk, n, d), rnd(batch, sk, n, d)
        w = rnd(d_model, n, d) * 0.3
        u, vb, sb, se = rnd(n, d), rnd(n, d), rnd(n, d), rnd(2, n, d)
        self.save(q=q, k=k, v=v, w=w, u=u, vb=vb, sb=sb, se=se, tt=mat,
                  m=(-1e6 * (1 - keep))[:, None, None, :])
        score, prob, vec = funnel_attention(
            q, k, v, u, vb, w, attention_type="factorized", factorized=(phi, pi, psi, omega),
            r_s_bias=sb, seg_embed=se, token_type_mat=mat, attention_mask=keep, cls_mask=cls)
        cmd = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--axes", "bshd", "--factorized",
               "f_phi.npy", "f_pi.npy", "f_psi.npy", "f_omega.npy", "--rel-kernel", "w.npy",
               "--content-bias", "u.npy", "--position-bias", "vb.npy", "--segment-index",
               "tt.npy", "--segment-embed", "se.npy", "--segment-bias", "sb.npy", "--mask",
               "m.npy"]
        if sep:
            cmd.append("--separate-cls")
        logits, probs, output = self.run_attention(*cmd)
        msg = f"factorized L={L} nq={nq} nk={nk} sep={sep} trunc={trunc}"
        self.assert_close(logits, score, **F64, msg=msg)
        self.assert_close(probs, prob, **F64, msg=msg)
        self.assert_close(output, vec, **F64, msg=msg)

    def test_factorized_f64(self):
        self.case(11, 0, 0, sep=False)
        self.case(12, 1, 0, sep=True)
        self.case(17, 2, 1, sep=True, trunc=True, n=4)
        self.case(16, 2, 2, sep=False, n=2)


class TestThreads(Base):
    def test_j1_equals_j2(self):
        g = torch.Generator().manual_seed(4)
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).float()
        self.save(q=rnd(2, 17, 3, 16), k=rnd(2, 33, 3, 16), R=rnd(33 + 2 * 17, 24),
                  w=rnd(24, 3, 16), tt=torch.rand(2, 17, 33, generator=g) > 0.5,
                  se=rnd(2, 3, 16))
        outs = []
        for j in ("1", "2"):
            out = self.path(f"l{j}.npy")
            self.run_ok("-j", j, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                        "--axes", "bshd", "--rel-keys", self.path("R.npy"), "--rel-kernel",
                        self.path("w.npy"), "--rel-shift", "2", "--segment-index",
                        self.path("tt.npy"), "--segment-embed", self.path("se.npy"),
                        "--separate-cls", "--emit", "logits", "-o", out)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])


class TestErrors(Base):
    """Bad values of the Funnel options: exit 2 (usage) or 3 (input), no output."""

    def setUp(self):
        super().setUp()
        rnd = np.random.default_rng(0).standard_normal
        # Q [b=2, sq=3, h=2, d=4], K [2, sk=5, 2, 4] (axes bshd); d_model 6
        self.save(q=rnd((2, 3, 2, 4)), k=rnd((2, 5, 2, 4)), R=rnd((11, 6)), R_short=rnd((6, 6)),
                  R3=rnd((11, 2, 4)), w=rnd((6, 2, 4)), w_bad=rnd((6, 3, 4)),
                  tt=np.ones((2, 3, 5), bool), tt_two=np.full((3, 5), 2, np.int64),
                  tt_shape=np.ones((3, 4), bool), tt_float=np.ones((3, 5)), se=rnd((2, 2, 4)),
                  ids=np.zeros((2, 5), np.int64), phi=rnd((3, 6)), psi=rnd((5, 6)),
                  psi_bad=rnd((4, 6)))
        self.before = sorted(os.listdir(self.tmp))

    def fails(self, status, match, *extra):
        args = [self.path(a) if a.endswith(".npy") else a for a in extra]
        self.assert_fails(status, "attention", "-o", self.path("out.npy"), "--axes", "bshd",
                          "-q", self.path("q.npy"), "-k", self.path("k.npy"), *args, match=match)
        self.assert_no_new_files(self.before)

    def test_usage(self):
        xl = ["--rel-keys", "R.npy", "--rel-kernel", "w.npy"]
        for bad in ("0", "-1", str(2 ** 30 + 1)):
            self.fails(2, rf"--rel-shift {bad}: must be from 1 to 2\^30", *xl, "--rel-shift", bad)
        self.fails(2, r"--rel-shift", *xl, "--rel-shift", "two")
        for opt, val in (("--rel-shift", ["2"]), ("--rel-kernel", ["w.npy"]),
                         ("--segment-index", ["tt.npy"]), ("--separate-cls", [])):
            self.fails(2, rf"{opt}: a Transformer-XL / XLNet / Funnel option needs --rel-keys",
                       opt, *val)
        fact = ["--factorized", "phi.npy", "phi.npy", "psi.npy", "psi.npy"]
        self.fails(2, r"--factorized: needs --rel-kernel", *fact)
        self.fails(2, r"--factorized: replaces --rel-keys", *fact, *xl)
        self.fails(2, r"--rel-shift: the --factorized term has no shift", *fact, "--rel-kernel",
                   "w.npy", "--rel-shift", "1")
        self.fails(2, r"--factorized", "--factorized", "phi.npy", "phi.npy")
        self.fails(2, r"--segment-ids: not with --segment-index", *xl, "--segment-ids",
                   "ids.npy", "--segment-index", "tt.npy", "--segment-embed", "se.npy")
        self.fails(2, r"--segment-ids/--segment-embed: .*needs both", *xl, "--segment-index",
                   "tt.npy")
        self.fails(2, r"--arith hf: .*relative score terms \(--rel-keys, --factorized", *xl,
                   "--rel-shift", "2", "--arith", "hf")

    def test_input(self):
        xl = ["--rel-keys", "R.npy", "--rel-kernel", "w.npy"]
        self.fails(3, r"--rel-keys: expected shape \(rows, 6\) .*rows >= k_len \+ shift = 7",
                   "--rel-keys", "R_short.npy", "--rel-kernel", "w.npy", "--rel-shift", "2")
        self.fails(3, r"--rel-keys: expected shape \(rows, 6\)", "--rel-keys", "R3.npy",
                   "--rel-kernel", "w.npy")
        self.fails(3, r"--rel-kernel: expected shape \(d_model, 2, 4\)", "--rel-keys", "R.npy",
                   "--rel-kernel", "w_bad.npy")
        w_nan = np.ones((6, 2, 4))
        w_nan[1, 1, 1] = np.nan
        self.save(w_nan=w_nan)
        self.before = sorted(os.listdir(self.tmp))
        self.fails(3, r"--rel-kernel: contains NaN or Inf", "--rel-keys", "R.npy",
                   "--rel-kernel", "w_nan.npy")
        self.fails(3, r"--segment-index: values must be 0 or 1", *xl, "--segment-index",
                   "tt_two.npy", "--segment-embed", "se.npy")
        self.fails(3, r"--segment-index: expected bool or integers of shape \(3, 5\)", *xl,
                   "--segment-index", "tt_shape.npy", "--segment-embed", "se.npy")
        self.fails(3, r"--segment-index: expected bool or integers", *xl, "--segment-index",
                   "tt_float.npy", "--segment-embed", "se.npy")
        self.fails(3, r"--factorized: psi: expected shape \(rows, 6\) .*rows = k_len 5",
                   "--factorized", "phi.npy", "phi.npy", "psi_bad.npy", "psi.npy",
                   "--rel-kernel", "w.npy")
        # The factorized products [b, h, sq, d_model] count against --max-memory.
        wide = np.random.default_rng(1).standard_normal
        self.save(phi_w=wide((3, 8192)), psi_w=wide((5, 8192)), w_w=wide((8192, 2, 4)))
        self.before = sorted(os.listdir(self.tmp))
        self.fails(3, r"Transformer-XL / XLNet / Funnel terms would need .* > --max-memory",
                   "--factorized", "phi_w.npy", "phi_w.npy", "psi_w.npy", "psi_w.npy",
                   "--rel-kernel", "w_w.npy", "--max-memory", "2M")
        self.fails(3, r"--factorized: phi: expected shape", "--factorized", "psi.npy",
                   "phi.npy", "psi.npy", "psi.npy", "--rel-kernel", "w.npy")

    def test_factorized_table_usage(self):
        before = sorted(os.listdir(self.tmp))
        base = ["table", "funnel-factorized", "--seq-len", "8", "-o", self.path("f_{}.npy")]
        d8 = ["--dim", "8"]
        for extra, match in (
                (d8 + ["--emit", "phi,rho"], r"--emit phi,rho: expected a comma list of phi, pi"),
                (d8 + ["--emit", "phi,phi"], r"--emit phi,phi: 'phi' is named twice"),
                (d8 + ["--block", "-1"], r"--block: must be from 0 to 62"),
                (d8 + ["--key-block", "63"], r"--key-block: must be from 0 to 62"),
                (d8 + ["--truncate-seq"], r"--truncate-seq: only with --separate-cls"),
                (["--dim", "5"], r"--dim: .*even")):
            self.assert_fails(2, *base, *extra, match=match)
            self.assert_no_new_files(before)

    def test_table_usage(self):
        before = sorted(os.listdir(self.tmp))
        base = ["table", "funnel-relative", "-o", self.path("t.npy")]
        for extra, match in (
                (["--seq-len", "8", "--dim", "8", "--shift", "3"], r"--shift: must be 1 or 2"),
                (["--seq-len", "8", "--dim", "8", "--shift", "2"],
                 r"--shift: 2 .*needs --block 1 or more"),
                (["--seq-len", "8", "--dim", "8", "--block", "-1"], r"--block: must be from 0"),
                (["--seq-len", "8", "--dim", "8", "--block", "63"], r"--block: must be from 0"),
                (["--seq-len", "8", "--dim", "7"], r"--dim: .*even"),
                (["--seq-len", "0", "--dim", "8"], r"--seq-len: must be at least 1"),
                (["--seq-len", "8", "--dim", "8", "--truncate-seq"],
                 r"--truncate-seq: only with --separate-cls"),
                (["--seq-len", "8", "--dim", "8", "--block", "3", "--separate-cls"],
                 r"--block: relative position 16 of block 3 lies outside HF's table"),
                (["--dim", "8"], r"--seq-len")):
            self.assert_fails(2, *base, *extra, match=match)
            self.assert_no_new_files(before)


if __name__ == "__main__":
    unittest.main()
