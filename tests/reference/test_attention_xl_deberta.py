"""posenc attention with Transformer-XL / XLNet and DeBERTa-v2 relative terms against
independent torch references written from HF transformers' code (tests/lib/
reference_relative.py: rel_attn_core, rel_shift_bnij, _rel_shift, DisentangledSelfAttention,
make_log_bucket_position).

Checks, each at several sizes (q_len != k_len, memory, odd head counts, buckets smaller
than the sequence):
- XLNet bidirectional (rlen = k_len + q_len) and unidirectional (rlen = k_len + 1), r
  per batch [rlen, b, h, d] (HF's k_head_r) or shared [rlen, h, d], with the segment
  term and a perm-style mask; HF's [s, b, h, d] tensors are passed as they are with
  --axes sbhd;
- Transformer-XL (rlen = k_len) with memory and its causal mask; without the mask the
  logits include the entries _rel_shift takes from the next row, compared exactly;
  R from `posenc table xl-relative` projected with W_r reproduces HF's pipeline;
- DeBERTa c2p+p2c, c2p alone with q_len != k_len, p2c alone, without buckets, with a
  padding mask;
- float64 to 1e-12 (rtol and atol), float32 against the same references run in
  float32 (rtol 1e-5, atol 1e-5);
- the result does not depend on -j;
- bad shapes of the relative tensors: one-line errors with exit 3, no output; bad
  option combinations: exit 2.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_relative import (deberta_attention, transfo_xl_attention, transfo_xl_pos_emb,
                                xlnet_rel_attn_core, xlnet_seg_mat)

F64 = dict(rtol=1e-12, atol=1e-12)
F32 = dict(rtol=1e-5, atol=1e-5)


def grouped_kv(k, v, n, kv_heads, head_axis):
    """For grouped-query cases: keeps the first `kv_heads` heads of k and v (what posenc
    reads) and returns them with their expansion to `n` heads as HF's repeat_kv makes it
    (kv head j serves query heads j*g .. j*g+g-1), which the references take."""
    if kv_heads is None:
        return k, v, k, v
    g = n // kv_heads
    k_in = k.narrow(head_axis, 0, kv_heads).contiguous()
    v_in = v.narrow(head_axis, 0, kv_heads).contiguous()
    return (k_in, v_in, k_in.repeat_interleave(g, head_axis),
            v_in.repeat_interleave(g, head_axis))


class Base(PosencTestCase):
    def save(self, **tensors):
        for name, t in tensors.items():
            np.save(self.path(name + ".npy"), t.numpy() if torch.is_tensor(t) else t)

    def attention(self, *args):
        """Runs posenc attention emitting logits, probs and output; returns them."""
        out = self.path("o_{}.npy")
        self.run_ok("attention", "--emit", "logits,probs,output", "-o", out,
                    *[self.path(a) if str(a).endswith(".npy") else a for a in args])
        return [np.load(self.path(f"o_{n}.npy")) for n in ("logits", "probs", "output")]


class TestXLNet(Base):
    def xlnet_case(self, b, n, d, qlen, mlen, attn_type, dtype, tol, batched_r=True,
                   segments=False, mask=False, seed=0, kv_heads=None):
        g = torch.Generator().manual_seed(seed)
        klen = qlen + mlen
        rlen = klen + qlen if attn_type == "bi" else klen + 1
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
        q, k, v = rnd(qlen, b, n, d), rnd(klen, b, n, d), rnd(klen, b, n, d)
        r_shared = rnd(rlen, n, d)
        r = r_shared[:, None].expand(rlen, b, n, d).contiguous() if not batched_r else rnd(rlen, b, n, d)
        u, vb = rnd(n, d), rnd(n, d)
        args = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--axes", "sbhd",
                "--rel-keys", "r.npy", "--content-bias", "u.npy", "--position-bias", "vb.npy"]
        k_in, v_in, k, v = grouped_kv(k, v, n, kv_heads, head_axis=2)
        self.save(q=q, k=k_in, v=v_in, r=r if batched_r else r_shared, u=u, vb=vb)
        seg_kw = {}
        if segments:
            tt = torch.randint(0, 3, (qlen, b), generator=g)
            seg_mat, cat_ids = xlnet_seg_mat(tt, mlen)
            seg_kw = dict(seg_mat=seg_mat, r_s_bias=rnd(n, d), seg_embed=rnd(2, n, d))
            self.save(ids=cat_ids.T.contiguous(), sb=seg_kw["r_s_bias"], se=seg_kw["seg_embed"])
            args += ["--segment-ids", "ids.npy", "--segment-embed", "se.npy",
                     "--segment-bias", "sb.npy"]
        keep = None
        if mask:
            masked = torch.rand(qlen, klen, generator=g) < 0.3
            masked[:, 0] = False  # every row keeps a key
            seg_kw["attn_mask"] = masked.to(dtype)[:, :, None, None]
            keep = ~masked
            self.save(keep=keep)
            args += ["--mask", "keep.npy"]
        score, prob, vec = xlnet_rel_attn_core(q, k, v, r, u, vb, **seg_kw)
        logits, probs, output = self.attention(*args)
        msg = (f"xlnet {attn_type} b={b} n={n} kv={kv_heads} q={qlen} m={mlen} seg={segments} "
               f"mask={mask}")
        if keep is None:
            self.assert_close(logits, score, **tol, msg=msg)
        else:
            kb = np.broadcast_to(keep.numpy(), logits.shape)
            self.assertTrue(np.all(np.isneginf(logits[~kb])), msg)
            self.assert_close(logits[kb], score.numpy()[kb], **tol, msg=msg)
        self.assert_close(probs, prob, **tol, msg=msg)
        self.assert_close(output, vec, **tol, msg=msg)

    def test_bidirectional_f64(self):
        self.xlnet_case(2, 3, 8, 4, 3, "bi", torch.float64, F64)
        self.xlnet_case(1, 5, 16, 6, 0, "bi", torch.float64, F64, batched_r=False)
        self.xlnet_case(3, 1, 4, 1, 7, "bi", torch.float64, F64)

    def test_unidirectional_f64(self):
        self.xlnet_case(2, 3, 8, 5, 2, "uni", torch.float64, F64)
        self.xlnet_case(1, 7, 8, 3, 0, "uni", torch.float64, F64, batched_r=False)

    def test_segments_and_mask_f64(self):
        self.xlnet_case(2, 3, 8, 5, 4, "bi", torch.float64, F64, segments=True)
        self.xlnet_case(2, 5, 8, 6, 0, "bi", torch.float64, F64, segments=True, mask=True)
        self.xlnet_case(1, 3, 16, 4, 3, "uni", torch.float64, F64, segments=True, mask=True)

    def test_grouped_query_heads_f64(self):
        self.xlnet_case(2, 4, 8, 4, 3, "bi", torch.float64, F64, kv_heads=2, segments=True)
        self.xlnet_case(1, 6, 8, 5, 2, "uni", torch.float64, F64, kv_heads=1)  # MQA

    def test_f32(self):
        self.xlnet_case(2, 3, 16, 7, 5, "bi", torch.float32, F32, segments=True)
        self.xlnet_case(1, 5, 8, 4, 2, "uni", torch.float32, F32, mask=True)


class TestTransfoXL(Base):
    def case(self, b, n, d, qlen, mlen, dtype, tol, causal, seed=1, kv_heads=None):
        g = torch.Generator().manual_seed(seed)
        klen = qlen + mlen
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
        q, k, v, r = rnd(qlen, b, n, d), rnd(klen, b, n, d), rnd(klen, b, n, d), rnd(klen, n, d)
        u, vb = rnd(n, d), rnd(n, d)
        k_in, v_in, k, v = grouped_kv(k, v, n, kv_heads, head_axis=2)
        self.save(q=q, k=k_in, v=v_in, r=r, u=u, vb=vb)
        raw, prob, vec = transfo_xl_attention(q, k, v, r, u, vb, causal=causal)
        args = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--axes", "sbhd", "--rel-keys",
                "r.npy", "--content-bias", "u.npy", "--position-bias", "vb.npy"]
        if causal:
            args.append("--causal")  # bottom-right: key j <= mlen + i, HF's dec_attn_mask
        logits, probs, output = self.attention(*args)
        msg = f"transfo-xl b={b} n={n} kv={kv_heads} q={qlen} m={mlen} causal={causal}"
        if causal:
            seen = np.tril(np.ones((qlen, klen), bool), k=mlen)
            seen = np.broadcast_to(seen, logits.shape)
            self.assert_close(logits[seen], raw.numpy()[seen], **tol, msg=msg)
            self.assertTrue(np.all(np.isneginf(logits[~seen])), msg)
        else:
            # Includes the entries above the diagonal that _rel_shift takes from the next
            # query's row (and its zero pad).
            self.assert_close(logits, raw, **tol, msg=msg)
        self.assert_close(probs, prob, **tol, msg=msg)
        self.assert_close(output, vec, **tol, msg=msg)

    def test_grouped_query_heads_f64(self):
        self.case(2, 4, 8, 4, 5, torch.float64, F64, causal=True, kv_heads=2)
        self.case(1, 6, 8, 6, 0, torch.float64, F64, causal=False, kv_heads=3)
        self.case(1, 4, 8, 3, 2, torch.float64, F64, causal=True, kv_heads=1)  # MQA

    def test_memory_f64(self):
        self.case(2, 3, 8, 4, 5, torch.float64, F64, causal=True)
        self.case(1, 5, 16, 6, 0, torch.float64, F64, causal=True)
        self.case(2, 3, 8, 1, 6, torch.float64, F64, causal=True)

    def test_unmasked_shift_f64(self):
        self.case(2, 3, 8, 4, 5, torch.float64, F64, causal=False)
        self.case(1, 1, 4, 7, 2, torch.float64, F64, causal=False)

    def test_f32(self):
        self.case(2, 5, 16, 8, 8, torch.float32, F32, causal=True)
        self.case(1, 3, 8, 5, 3, torch.float32, F32, causal=False)

    def test_table_projected(self):
        """HF's pipeline: R from the sinusoidal relative table (posenc table xl-relative,
        clamp_len), projected by W_r, fed as --rel-keys."""
        g = torch.Generator().manual_seed(5)
        b, n, dh, dm, qlen, mlen, clamp = 2, 3, 8, 12, 5, 4, 6
        klen = qlen + mlen
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
        self.run_ok("table", "xl-relative", "--q-len", qlen, "--k-len", klen, "--dim", dm,
                    "--clamp-len", clamp, "--dtype", "f64", "-o", self.path("R.npy"))
        R = torch.from_numpy(np.load(self.path("R.npy")))
        self.assert_close(R, transfo_xl_pos_emb(klen, dm, clamp, torch.float64), **F64)
        W = rnd(dm, n * dh)
        r = (R @ W).view(klen, n, dh)
        q, k, v = rnd(qlen, b, n, dh), rnd(klen, b, n, dh), rnd(klen, b, n, dh)
        u, vb = rnd(n, dh), rnd(n, dh)
        self.save(q=q, k=k, v=v, r=r, u=u, vb=vb)
        _, prob, vec = transfo_xl_attention(q, k, v, r, u, vb, causal=True)
        _, probs, output = self.attention("-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--axes",
                                          "sbhd", "--causal", "--rel-keys", "r.npy",
                                          "--content-bias", "u.npy", "--position-bias", "vb.npy")
        self.assert_close(probs, prob, **F64)
        self.assert_close(output, vec, **F64)


class TestDeberta(Base):
    def case(self, b, n, d, sq, sk, types, pb, mrp, dtype, tol, extra_rows=0, mask=False,
             seed=2, kv_heads=None):
        g = torch.Generator().manual_seed(seed)
        rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
        span = pb if pb > 0 else mrp
        q, k, v = rnd(b, n, sq, d), rnd(b, n, sk, d), rnd(b, n, sk, d)
        pk, pq = rnd(2 * span + extra_rows, n, d), rnd(2 * span + extra_rows, n, d)
        k_in, v_in, k, v = grouped_kv(k, v, n, kv_heads, head_axis=1)
        self.save(q=q, k=k_in, v=v_in, pk=pk, pq=pq)
        args = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--position-buckets", pb,
                "--max-relative-positions", mrp]
        if "c2p" in types:
            args += ["--pos-key", "pk.npy"]
        if "p2c" in types:
            args += ["--pos-query", "pq.npy"]
        keep = None
        if mask:
            lengths = torch.randint(1, sk + 1, (b,), generator=g)
            keep = (torch.arange(sk)[None, :] < lengths[:, None])[:, None, None, :]
            self.save(keep=keep)
            args += ["--mask", "keep.npy"]
        scores, probs_ref, ctx = deberta_attention(
            q, k, v, pk, pq, types, pb, mrp,
            keep=None if keep is None else keep.expand(b, n, sq, sk))
        logits, probs, output = self.attention(*args)
        msg = f"deberta {types} b={b} n={n} kv={kv_heads} sq={sq} sk={sk} buckets={pb} max={mrp}"
        if keep is None:
            self.assert_close(logits, scores, **tol, msg=msg)
        else:
            kb = np.broadcast_to(keep.numpy(), logits.shape)
            self.assert_close(logits[kb], scores.numpy()[kb], **tol, msg=msg)
        self.assert_close(probs, probs_ref, **tol, msg=msg)
        self.assert_close(output, ctx, **tol, msg=msg)

    def test_c2p_p2c_buckets_f64(self):
        # Buckets smaller than the sequence: distances beyond 2 share log buckets.
        self.case(2, 3, 8, 9, 9, ["c2p", "p2c"], 4, 8, torch.float64, F64)
        self.case(1, 5, 16, 40, 40, ["c2p", "p2c"], 16, 24, torch.float64, F64)
        self.case(2, 1, 8, 7, 7, ["c2p", "p2c"], 5, 10, torch.float64, F64, extra_rows=3)

    def test_grouped_query_heads_f64(self):
        self.case(2, 4, 8, 9, 9, ["c2p", "p2c"], 4, 8, torch.float64, F64, kv_heads=2)
        self.case(1, 6, 8, 3, 10, ["c2p"], 4, 12, torch.float64, F64, kv_heads=1)  # MQA

    def test_no_buckets_f64(self):
        # span = max_relative_positions = 6 < sequence: the clamp of c2p_pos/p2c_pos.
        self.case(2, 3, 8, 11, 11, ["c2p", "p2c"], -1, 6, torch.float64, F64)

    def test_single_terms_f64(self):
        self.case(2, 3, 8, 3, 10, ["c2p"], 4, 12, torch.float64, F64)   # q_len != k_len
        self.case(1, 5, 8, 12, 5, ["c2p"], 6, 9, torch.float64, F64)
        self.case(2, 3, 8, 9, 9, ["p2c"], 4, 8, torch.float64, F64)

    def test_mask_f64(self):
        self.case(3, 3, 8, 10, 10, ["c2p", "p2c"], 8, 16, torch.float64, F64, mask=True)

    def test_f32(self):
        self.case(2, 3, 16, 33, 33, ["c2p", "p2c"], 8, 32, torch.float32, F32)
        self.case(1, 5, 8, 4, 20, ["c2p"], 4, 10, torch.float32, F32)

    def test_pos_att_type_matches(self):
        g = torch.Generator().manual_seed(3)
        q, pk = torch.randn(1, 2, 5, 4, generator=g), torch.randn(8, 2, 4, generator=g)
        self.save(q=q, pk=pk)
        self.run_ok("attention", "-q", self.path("q.npy"), "-k", self.path("q.npy"), "--pos-key",
                    self.path("pk.npy"), "--pos-att-type", "c2p", "--position-buckets", 4,
                    "--max-relative-positions", 8, "-o", self.path("p.npy"))


class TestThreads(Base):
    def test_j1_equals_j2(self):
        g = torch.Generator().manual_seed(4)
        b, n, d, qlen, mlen = 2, 3, 16, 33, 20
        klen = qlen + mlen
        q = torch.randn(qlen, b, n, d, generator=g, dtype=torch.float64).float()
        k = torch.randn(klen, b, n, d, generator=g, dtype=torch.float64).float()
        r = torch.randn(klen + qlen, n, d, generator=g, dtype=torch.float64).float()
        self.save(q=q, k=k, r=r)
        outs = []
        for j in ("1", "2"):
            out = self.path(f"l{j}.npy")
            self.run_ok("-j", j, "attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"),
                        "--axes", "sbhd", "--rel-keys", self.path("r.npy"), "--emit", "logits",
                        "-o", out)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])


class TestErrors(Base):
    """Bad relative tensors: exit 3 naming the option; bad combinations: exit 2."""

    def setUp(self):
        super().setUp()
        rnd = np.random.default_rng(0).standard_normal
        # Q [b=2, h=3, sq=4, d=8], K [2, 3, sk=6, 8]
        self.save(q=rnd((2, 3, 4, 8)), k=rnd((2, 3, 6, 8)), qs=rnd((2, 3, 6, 8)),
                  r_ok=rnd((10, 3, 8)), r_short=rnd((5, 3, 8)), r_heads=rnd((10, 2, 8)),
                  r_dim=rnd((10, 3, 4)), r_rank=rnd((10,)), r_int=np.zeros((10, 3, 8), np.int32),
                  r_batch=rnd((10, 3, 3, 8)), u_bad=rnd((3, 7)), se_bad=rnd((3, 3, 8)),
                  se_ok=rnd((2, 3, 8)), ids_bad=np.zeros((2, 5), np.int64),
                  ids_float=np.zeros((6,)), ids_ok=np.zeros((2, 6), np.int64),
                  pk_short=rnd((7, 3, 8)), pk_ok=rnd((8, 3, 8)), pk_heads=rnd((8, 4, 8)))
        self.before = sorted(os.listdir(self.tmp))

    def fails(self, status, match, *extra):
        args = [self.path(a) if a.endswith(".npy") else a for a in extra]
        self.assert_fails(status, "attention", "-o", self.path("out.npy"), *args, match=match)
        self.assert_no_new_files(self.before)

    def test_xl_shapes(self):
        base = ["-q", "q.npy", "-k", "k.npy"]
        self.fails(3, r"--rel-keys: expected shape .*rows = k_len 6", *base, "--rel-keys", "r_short.npy")
        self.fails(3, r"--rel-keys: expected shape", *base, "--rel-keys", "r_heads.npy")
        self.fails(3, r"--rel-keys: expected shape", *base, "--rel-keys", "r_dim.npy")
        self.fails(3, r"--rel-keys: expected shape", *base, "--rel-keys", "r_rank.npy")
        self.fails(3, r"--rel-keys: expected shape", *base, "--rel-keys", "r_batch.npy")
        self.fails(3, r"--rel-keys: expected a float tensor", *base, "--rel-keys", "r_int.npy")
        self.fails(3, r"--content-bias: expected shape \(3, 8\)", *base, "--rel-keys", "r_ok.npy",
                   "--content-bias", "u_bad.npy")
        self.fails(3, r"--position-bias: expected shape \(3, 8\)", *base, "--rel-keys",
                   "r_ok.npy", "--position-bias", "u_bad.npy")
        self.fails(3, r"--segment-embed: expected shape", *base, "--rel-keys", "r_ok.npy",
                   "--segment-ids", "ids_ok.npy", "--segment-embed", "se_bad.npy")
        self.fails(3, r"--segment-ids: expected integers", *base, "--rel-keys", "r_ok.npy",
                   "--segment-ids", "ids_bad.npy", "--segment-embed", "se_ok.npy")
        self.fails(3, r"--segment-ids: expected integers", *base, "--rel-keys", "r_ok.npy",
                   "--segment-ids", "ids_float.npy", "--segment-embed", "se_ok.npy")
        self.fails(3, r"--rel-keys: .*k_len 4 must be at least q_len 6", "-q", "qs.npy", "-k",
                   "q.npy", "--rel-keys", "r_ok.npy")

    def test_deberta_shapes(self):
        base = ["-q", "qs.npy", "-k", "k.npy", "--position-buckets", "4",
                "--max-relative-positions", "8"]
        self.fails(3, r"--pos-key: expected shape .*rows >= 2 \* span = 8", *base, "--pos-key",
                   "pk_short.npy")
        self.fails(3, r"--pos-query: expected shape", *base, "--pos-query", "pk_heads.npy")
        self.fails(3, r"--pos-query: the p2c term needs as many queries as keys", "-q", "q.npy",
                   "-k", "k.npy", "--position-buckets", "4", "--max-relative-positions", "8",
                   "--pos-query", "pk_ok.npy")

    def test_usage(self):
        base = ["-q", "q.npy", "-k", "k.npy"]
        self.fails(2, r"--content-bias: .*needs --rel-keys", *base, "--content-bias", "u_bad.npy")
        self.fails(2, r"--position-buckets: .*needs --pos-key", *base, "--position-buckets", "4")
        self.fails(2, r"exclude each other", *base, "--rel-keys", "r_ok.npy", "--pos-key",
                   "pk_ok.npy")
        self.fails(2, r"--pos-att-type p2c: needs --pos-query", *base, "--pos-key", "pk_ok.npy",
                   "--pos-att-type", "c2p,p2c")
        self.fails(2, r"--pos-att-type c2x", *base, "--pos-key", "pk_ok.npy", "--pos-att-type",
                   "c2x")
        self.fails(2, r"cannot be combined with --rope", *base, "--rel-keys", "r_ok.npy", "--rope")
        self.fails(2, r"--position-buckets: must be at least 2", *base, "--pos-key", "pk_ok.npy",
                   "--position-buckets", "1")
        self.fails(2, r"--max-relative-positions: must exceed", *base, "--pos-key", "pk_ok.npy",
                   "--position-buckets", "8", "--max-relative-positions", "5")
        self.fails(2, r"--segment-ids/--segment-embed: the XLNet segment term needs both", *base,
                   "--rel-keys", "r_ok.npy", "--segment-ids", "ids_ok.npy")


if __name__ == "__main__":
    unittest.main()
