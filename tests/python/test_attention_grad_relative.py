"""posenc.attention(..., grad_output=dO) through the relative score terms of
Transformer-XL (HF RelPartialLearnableMultiHeadAttn), XLNet (HF XLNetRelativeAttention
.rel_attn_core, with its segment term), Funnel (HF FunnelRelMultiheadAttention,
relative_shift with pooled queries and the factorized term, token_type_mat and
cls_mask) and DeBERTa-v2 (HF DisentangledSelfAttention, c2p and p2c with log buckets).
Each term is written here in torch float64 from its HF formula (the reshapes of _rel_shift and rel_shift_bnij,
_relative_shift_gather and DeBERTa's gathers taken from tests/lib's references of those
files) and differentiated by autograd; every gradient (dq, dk, dv and the terms' own
tensors) agrees to 1e-12 of its largest magnitude. The command gives the same bytes at
-j1 and -j2, refuses a gradient without its tensor (exit 2, one line) and a run over
--max-memory (exit 3, one line), writing nothing."""
import os
import subprocess

import numpy as np
import pytest
import torch

import posenc
from grad_check import check
from funnel_reference import funnel_attention
from reference_relative import deberta_attention, rel_shift_bnij, transfo_xl_rel_shift

BIN = os.environ.get("POSENC_BIN")
B, HQ, HK, D, DV = 2, 4, 2, 8, 5


def rnd(seed, *shapes):
    g = np.random.default_rng(seed)
    return [torch.tensor(g.standard_normal(s)) for s in shapes]


def grouped(x):
    """K or V [b, hk, s, .] for the query heads of each group (posenc's GQA)."""
    return x.repeat_interleave(HQ // x.shape[1], 1)


def attend(s, v, causal):
    """softmax over keys (bottom-right causal, as --causal and Transformer-XL's
    triu(1 + mlen) mask) times V."""
    sq, sk = s.shape[-2:]
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ grouped(v)


def xl_scores(Q, K, R, U, VB, scale, shift):
    """HF's AC + shift(BD) over [i, j, b, n] (Transformer-XL) or [b, n, i, j] (XLNet's
    rel_shift_bnij), r [rlen, n, d] or per batch [rlen, b, n, d]; [b, n, i, j]."""
    Kg = grouped(K)
    ac = torch.einsum("bnid,bnjd->bnij", Q + U[:, None], Kg)
    r = R if R.dim() == 4 else R[:, None].expand(R.shape[0], Q.shape[0], *R.shape[1:])
    if shift == "transfo-xl":  # einsum "ibnd,jnd->ijbn", then _rel_shift on [i, j, b, n]
        bd = torch.einsum("bnid,jbnd->ijbn", Q + VB[:, None], r)
        bd = transfo_xl_rel_shift(bd).permute(2, 3, 0, 1)
    else:  # einsum "ibnd,jbnd->bnij", then rel_shift_bnij(klen)
        bd = torch.einsum("bnid,jbnd->bnij", Q + VB[:, None], r)
        bd = rel_shift_bnij(bd, klen=ac.shape[3])
    return (ac + bd) * scale


@pytest.mark.parametrize("causal", [False, True])
def test_transfo_xl_gradients_match_torch_autograd(causal):
    # Memory of 3 keys before 5 queries; rlen = klen (Transformer-XL's _rel_shift, which
    # reads the next query's row for the future keys), GQA 4:2.
    sq, sk = 5, 8
    q, k, v, do, r, u, vb = rnd(1, (B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV),
                                (B, HQ, sq, DV), (sk, HQ, D), (HQ, D), (HQ, D))
    names = ("dq", "dk", "dv", "drel_keys", "dcontent_bias", "dposition_bias")
    got = posenc.attention(q, k, v, grad_output=do, rel_keys=r, content_bias=u,
                           position_bias=vb, causal=causal, emit=names)
    Q, K, V, R, U, VB = (t.clone().requires_grad_() for t in (q, k, v, r, u, vb))
    o = attend(xl_scores(Q, K, R, U, VB, D ** -0.5, "transfo-xl"), V, causal)
    check(got, torch.autograd.grad(o, (Q, K, V, R, U, VB), do), names)


@pytest.mark.parametrize("rlen_extra,batched_r", [("bi", True), ("uni", False)])
def test_xlnet_gradients_with_segments_match_torch_autograd(rlen_extra, batched_r):
    # XLNet: rlen = klen + qlen (bidirectional) or klen + 1, r per batch entry (HF's
    # k_head_r) or shared; the segment term (q + r_s_bias).seg_embed[s_ij], s_ij = 1 for
    # a query and key of different segments (memory keys in segment 0).
    sq, mlen = 4, 3
    sk = sq + mlen
    rlen = sk + sq if rlen_extra == "bi" else sk + 1
    rshape = (rlen, B, HQ, D) if batched_r else (rlen, HQ, D)
    q, k, v, do, r, u, vb, sb, se = rnd(2, (B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV),
                                        (B, HQ, sq, DV), rshape, (HQ, D), (HQ, D), (HQ, D),
                                        (2, HQ, D))
    types = torch.tensor(np.random.default_rng(3).integers(0, 3, (B, sq)))
    ids = torch.cat([torch.zeros(B, mlen, dtype=torch.int64), types], 1)  # HF's cat_ids
    names = ("dq", "dk", "dv", "drel_keys", "dcontent_bias", "dposition_bias",
             "dsegment_embed", "dsegment_bias")
    got = posenc.attention(q, k, v, grad_output=do, rel_keys=r, content_bias=u,
                           position_bias=vb, segment_ids=ids.numpy(), segment_embed=se,
                           segment_bias=sb, emit=names)
    Q, K, V, R, U, VB, SE, SB = (t.clone().requires_grad_() for t in (q, k, v, r, u, vb, se, sb))
    s = xl_scores(Q, K, R, U, VB, D ** -0.5, "xlnet")
    # HF: seg_mat one-hot of (token_type_ids[:, None] != cat_ids[None, :]);
    # ef = einsum("ibnd,snd->ibns", q + r_s_bias, seg_embed), then by seg_mat.
    seg = (types[:, :, None] != ids[:, None, :]).long()  # [b, i, j]
    ef = torch.einsum("bnid,snd->bnis", Q + SB[:, None], SE)
    onehot = torch.nn.functional.one_hot(seg, 2).to(torch.float64)  # [b, i, j, s]
    s = s + torch.einsum("bijs,bnis->bnij", onehot, ef) * D ** -0.5
    o = attend(s, V, False)
    check(got, torch.autograd.grad(o, (Q, K, V, R, U, VB, SE, SB), do), names)


def test_rel_kernel_gradients_match_torch_autograd():
    # XLNet's r projected inside: r_head = R W (HF einsum "ibh,hnd->ibnd" with W = r):
    # drel_keys is the unprojected rows' gradient, drel_kernel W's.
    sq, sk, dm = 4, 6, 7
    q, k, v, do, r, w, u, vb = rnd(4, (B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV),
                                   (B, HQ, sq, DV), (sk + sq, dm), (dm, HQ, D), (HQ, D), (HQ, D))
    names = ("dq", "dk", "dv", "drel_keys", "drel_kernel", "dposition_bias")
    got = posenc.attention(q, k, v, grad_output=do, rel_keys=r, rel_kernel=w, content_bias=u,
                           position_bias=vb, causal=True, emit=names)
    Q, K, V, R, W, U, VB = (t.clone().requires_grad_() for t in (q, k, v, r, w, u, vb))
    rh = torch.einsum("td,dnh->tnh", R, W)
    o = attend(xl_scores(Q, K, rh, U, VB, D ** -0.5, "xlnet"), V, True)
    check(got, torch.autograd.grad(o, (Q, K, V, R, W, VB), do), names)


def test_soft_capped_terms_gradients_match_torch_autograd():
    # The terms join the scores before the soft-cap: C tanh((scale q.k + term) / C).
    sq, sk = 5, 5
    q, k, v, do, r = rnd(5, (B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV), (B, HQ, sq, DV),
                         (sk, HQ, D))
    names = ("dq", "dk", "dv", "drel_keys")
    got = posenc.attention(q, k, v, grad_output=do, rel_keys=r, softcap=1.5, scale=0.7,
                           emit=names)
    Q, K, V, R = (t.clone().requires_grad_() for t in (q, k, v, r))
    zero = torch.zeros(HQ, D, dtype=torch.float64)
    s = xl_scores(Q, K, R, zero, zero, 0.7, "transfo-xl")
    o = attend(1.5 * torch.tanh(s / 1.5), V, False)
    check(got, torch.autograd.grad(o, (Q, K, V, R), do), names)


def test_funnel_gradients_match_torch_autograd():
    # Funnel's relative_shift with pooled queries (shift 2, rlen = sk + 2 sq), r projected
    # by r_kernel, token_type_mat (segment_index, true = same segment) and the cls_mask.
    n, sq, sk, dm = 3, 4, 7, 6
    q, k, v, do, r, w, u, vb, sb, se = rnd(6, (B, sq, n, D), (B, sk, n, D), (B, sk, n, D),
                                           (B, sq, n, D), (sk + 2 * sq, dm), (dm, n, D), (n, D),
                                           (n, D), (n, D), (2, n, D))
    mat = torch.tensor(np.random.default_rng(7).integers(0, 2, (B, sq, sk)).astype(bool))
    names = ("dq", "dk", "dv", "drel_keys", "drel_kernel", "dcontent_bias", "dposition_bias",
             "dsegment_embed", "dsegment_bias")
    got = posenc.attention(q, k, v, grad_output=do, axes="bshd", rel_keys=r, rel_kernel=w,
                           rel_shift=2, content_bias=u, position_bias=vb,
                           segment_index=mat.numpy(), segment_embed=se, segment_bias=sb,
                           separate_cls=True, emit=names)
    Q, K, V, R, W, U, VB, SE, SB = (t.clone().requires_grad_()
                                    for t in (q, k, v, r, w, u, vb, se, sb))
    cls = torch.ones(sq, sk, dtype=torch.float64)
    cls[0, :] = 0
    cls[:, 0] = 0
    _, _, vec = funnel_attention(Q, K, V, U, VB, W, r=R, r_s_bias=SB, seg_embed=SE,
                                 token_type_mat=mat, cls_mask=cls)
    check(got, torch.autograd.grad(vec, (Q, K, V, R, W, U, VB, SE, SB), do), names)


@pytest.mark.parametrize("separate_cls", [False, True])
def test_funnel_factorized_gradients_match_torch_autograd(separate_cls):
    # Funnel's attention_type "factorized": (q + v).W against phi_i psi_j + pi_i omega_j
    # (phi, pi [sq, d_model], psi, omega [sk, d_model]), with the segment term.
    n, sq, sk, dm = 3, 4, 7, 6
    q, k, v, do, w, u, vb, sb, se, phi, pi, psi, omega = rnd(
        15, (B, sq, n, D), (B, sk, n, D), (B, sk, n, D), (B, sq, n, D), (dm, n, D), (n, D),
        (n, D), (n, D), (2, n, D), (sq, dm), (sq, dm), (sk, dm), (sk, dm))
    mat = torch.tensor(np.random.default_rng(16).integers(0, 2, (B, sq, sk)).astype(bool))
    names = ("dq", "dk", "dv", "dphi", "dpi", "dpsi", "domega", "drel_kernel",
             "dcontent_bias", "dposition_bias", "dsegment_embed", "dsegment_bias")
    got = posenc.attention(q, k, v, grad_output=do, axes="bshd", rel_kernel=w,
                           factorized=(phi, pi, psi, omega), content_bias=u, position_bias=vb,
                           segment_index=mat.numpy(), segment_embed=se, segment_bias=sb,
                           separate_cls=separate_cls, emit=names)
    T = [t.clone().requires_grad_() for t in (q, k, v, phi, pi, psi, omega, w, u, vb, se, sb)]
    Q, K, V, PHI, PI, PSI, OMEGA, W, U, VB, SE, SB = T
    cls = None
    if separate_cls:
        cls = torch.ones(sq, sk, dtype=torch.float64)
        cls[0, :] = 0
        cls[:, 0] = 0
    _, _, vec = funnel_attention(Q, K, V, U, VB, W, attention_type="factorized",
                                 factorized=(PHI, PI, PSI, OMEGA), r_s_bias=SB, seg_embed=SE,
                                 token_type_mat=mat, cls_mask=cls)
    check(got, torch.autograd.grad(vec, T, do), names)


@pytest.mark.parametrize("types,sq,sk,buckets,max_pos,causal", [
    ("c2p,p2c", 9, 9, 4, 16, False),   # log buckets narrower than the sequence
    ("c2p,p2c", 7, 7, 0, 5, True),     # no buckets, clamped at 2 * 5 rows
    ("c2p", 6, 9, 4, 16, False),       # c2p alone, q_len != k_len
    ("p2c", 8, 8, 3, 12, False),
])
def test_deberta_gradients_match_torch_autograd(types, sq, sk, buckets, max_pos, causal):
    span = buckets if buckets > 0 else max_pos
    rows = 2 * span + 2  # rows past 2 span are unused (HF slices rel_embeddings)
    q, k, v, do, pk, pq = rnd(8, (B, HQ, sq, D), (B, HK, sk, D), (B, HK, sk, DV),
                              (B, HQ, sq, DV), (rows, HQ, D), (rows, HQ, D))
    c2p, p2c = "c2p" in types, "p2c" in types
    names = ("dq", "dk", "dv") + (("dpos_key",) if c2p else ()) + (("dpos_query",) if p2c else ())
    got = posenc.attention(q, k, v, grad_output=do, pos_key=pk if c2p else None,
                           pos_query=pq if p2c else None, position_buckets=buckets,
                           max_relative_positions=max_pos, causal=causal, emit=names)
    Q, K, V, PK, PQ = (t.clone().requires_grad_() for t in (q, k, v, pk, pq))
    keep = None
    if causal:
        keep = (torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq)
        keep = keep.expand(B, HQ, sq, sk)
    _, _, ctx = deberta_attention(Q, grouped(K), grouped(V), PK, PQ, types.split(","),
                                  position_buckets=buckets, max_relative_positions=max_pos,
                                  keep=keep)
    wrt = (Q, K, V) + ((PK,) if c2p else ()) + ((PQ,) if p2c else ())
    check(got, torch.autograd.grad(ctx, wrt, do), names)


def test_relative_gradient_without_its_tensor_is_a_usage_error():
    q, k, v, do, r, pk = rnd(9, (B, HQ, 5, D), (B, HK, 5, D), (B, HK, 5, DV), (B, HQ, 5, DV),
                             (5, HQ, D), (8, HQ, D))
    cases = (
        (dict(), "drel_keys", "drel_keys needs rel_keys$"),
        (dict(rel_keys=r), "dpos_key", "dpos_key needs pos_key$"),
        (dict(rel_keys=r), "dsegment_bias", "dsegment_bias needs segment_bias$"),
        (dict(pos_key=pk, position_buckets=4), "drel_kernel", "drel_kernel needs rel_kernel$"),
        (dict(pos_key=pk, position_buckets=4), "dpos_query", "dpos_query needs pos_query$"),
    )
    for kw, name, message in cases:
        with pytest.raises(posenc.UsageError, match=message):
            posenc.attention(q, k, v, grad_output=do, emit=("dq", name), **kw)
    with pytest.raises(posenc.UsageError, match="dphi/dpi/dpsi/domega needs factorized$"):
        posenc.attention(q, k, v, grad_output=do, rel_keys=r, emit=("dq", "dpsi"))


@pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")
class TestCommand:
    def run(self, tmp_path, args, threads=None):
        pre = ["-j", str(threads)] if threads else []
        return subprocess.run([BIN, *pre, "attention", "-q", "q.npy", "-k", "k.npy", "-v",
                               "v.npy", "--grad-output", "do.npy", *args],
                              cwd=tmp_path, capture_output=True, text=True)

    def save(self, tmp_path, **arrays):
        for name, a in arrays.items():
            np.save(tmp_path / f"{name}.npy", np.asarray(a))

    def test_threads_give_the_same_bytes(self, tmp_path):
        g = np.random.default_rng(11)
        s = 40
        self.save(tmp_path, q=g.standard_normal((2, 4, s, 16)), k=g.standard_normal((2, 2, s, 16)),
                  v=g.standard_normal((2, 2, s, 8)), do=g.standard_normal((2, 4, s, 8)),
                  r=g.standard_normal((2 * s, 4, 16)), u=g.standard_normal((4, 16)),
                  vb=g.standard_normal((4, 16)), se=g.standard_normal((2, 4, 16)),
                  sb=g.standard_normal((4, 16)), ids=g.integers(0, 2, (2, s)),
                  pk=g.standard_normal((16, 4, 16)), pq=g.standard_normal((16, 4, 16)),
                  w=g.standard_normal((6, 4, 16)), phi=g.standard_normal((s, 6)),
                  pi=g.standard_normal((s, 6)), psi=g.standard_normal((s, 6)),
                  om=g.standard_normal((s, 6)))
        cases = (
            (["--factorized", "phi.npy", "pi.npy", "psi.npy", "om.npy", "--rel-kernel", "w.npy",
              "--position-bias", "vb.npy", "--separate-cls"],
             ["dq", "dk", "dv", "dphi", "dpi", "dpsi", "domega", "drel_kernel",
              "dposition_bias"]),
            (["--rel-keys", "r.npy", "--content-bias", "u.npy", "--position-bias", "vb.npy",
              "--segment-ids", "ids.npy", "--segment-embed", "se.npy", "--segment-bias",
              "sb.npy", "--causal"],
             ["dq", "dk", "dv", "drel_keys", "dcontent_bias", "dposition_bias",
              "dsegment_embed", "dsegment_bias"]),
            (["--pos-key", "pk.npy", "--pos-query", "pq.npy", "--position-buckets", "8",
              "--max-relative-positions", "32"], ["dq", "dk", "dv", "dpos_key", "dpos_query"]),
        )
        for args, emit in cases:
            out = {}
            for j in (1, 2):
                r = self.run(tmp_path, args + ["--emit", ",".join(emit), "-o", f"j{j}_{{}}.npy"],
                             threads=j)
                assert r.returncode == 0, r.stderr
                out[j] = {n: np.load(tmp_path / f"j{j}_{n}.npy") for n in emit}
            for n in emit:
                assert out[1][n].tobytes() == out[2][n].tobytes(), (args[0], n)

    def test_refusals_exit_2_and_3_with_one_line(self, tmp_path):
        g = np.random.default_rng(14)
        self.save(tmp_path, q=g.standard_normal((1, 2, 64, 8)), k=g.standard_normal((1, 2, 64, 8)),
                  v=g.standard_normal((1, 2, 64, 8)), do=g.standard_normal((1, 2, 64, 8)),
                  r=g.standard_normal((64, 2, 8)), phi=g.standard_normal((64, 4)),
                  w=g.standard_normal((4, 2, 8)))
        for args, status, message in (
                (["--rel-keys", "r.npy", "--emit", "dq,dpos_key"], 2, "dpos_key needs --pos-key"),
                (["--emit", "dq,drel_keys"], 2, "drel_keys needs --rel-keys"),
                (["--rel-keys", "r.npy", "--emit", "dq,domega"], 2,
                 "dphi/dpi/dpsi/domega needs --factorized"),
                # The terms and their gradient are held whole: over the budget, exit 3.
                (["--rel-keys", "r.npy", "--max-memory", "64K"], 3, "--max-memory"),
        ):
            r = self.run(tmp_path, args + ["-o", "g_{}.npy"])
            assert r.returncode == status, (args, r.stderr)
            assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
            assert not list(tmp_path.glob("g_*"))
