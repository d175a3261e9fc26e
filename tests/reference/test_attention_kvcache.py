"""posenc attention's KV-cache step (FlashAttention's flash_attn_with_kvcache) against a
torch float64 reference written here from FA's test semantics (test_flash_attn_kvcache,
attention_ref with key_leftpad):

- the cache rows of entry b are those of cache_batch_idx[b] (b without it), gathered from
  the pages of its page-table row when paged;
- rotary tables rotate the new keys at positions offset_b + t (offset = rotary_seqlens,
  else cache_seqlens) with apply_rotary_emb's rule (tests/lib/fa_rotary_reference.py),
  the queries at the same per-token positions when causal or local, else all at offset_b;
- the rotated new keys and the values are stored at rows cache_seqlens_b .. + s_new - 1;
- packed new keys (--cu-seqlens-k-new): entry b's s_new_b = cu[b + 1] - cu[b] rows of
  k_new [total_new, hk, d], each entry as above with its own s_new_b;
- the key padding mask keeps rows leftpad_b <= j < cache_seqlens_b + s_new, the masks see
  key column j - leftpad_b and the entry's length sk_b = cache_seqlens_b + s_new -
  leftpad_b (query i at i + sk_b - sq), computed over the whole cache row.

Tolerance: float64 output and lse max error <= 1e-12 relative to the largest reference
value; the updated caches (float32) equal the reference's bit for bit; a paged cache gives
the bytes of the contiguous one, and -j 1 those of -j 2; packed new keys with equal counts
give the bytes of the same tokens batched.
"""
import unittest

import numpy as np

from fa_kvcache_reference import kv_reference
from posenc_testlib import PosencTestCase


def paged(kc, page, rng):
    """The pages [num_blocks, page, hk, d] of a contiguous cache [b, S, hk, d] in a random
    order, and the page table [b, S / page] (int32)."""
    b, S = kc.shape[:2]
    mb = S // page
    perm = rng.permutation(b * mb + 3)[: b * mb]  # three pages nobody uses
    pages = np.zeros((b * mb + 3, page) + kc.shape[2:], kc.dtype)
    table = perm.reshape(b, mb).astype(np.int32)
    for e in range(b):
        for k in range(mb):
            pages[table[e, k]] = kc[e, k * page:(k + 1) * page]
    return pages, table


class KvCache(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(7)

    def caches(self, b_cache, S, hk, d, dv):
        kc = self.rng.standard_normal((b_cache, S, hk, d)).astype(np.float32)
        vc = self.rng.standard_normal((b_cache, S, hk, dv)).astype(np.float32)
        return kc, vc

    def posenc(self, tag, q, kc, vc, extra, cache_out=True, jobs=None):
        qp, kp, vp = (self.npy(f"{tag}_{n}.npy", x) for n, x in (("q", q), ("k", kc), ("v", vc)))
        out = self.path(f"{tag}_{{}}.npy")
        more = ["--cache-out", self.path(f"{tag}_kc.npy"), self.path(f"{tag}_vc.npy")] \
            if cache_out else []
        pre = ["-j", str(jobs)] if jobs else []
        self.run_ok(*pre, "attention", "-q", qp, "-k", kp, "-v", vp, "--emit", "output,lse",
                    "-o", out, *extra, *more)
        got = {}
        for name in ("output", "lse"):
            with open(out.format(name), "rb") as f:
                got[name] = f.read()
        res = [np.load(out.format("output")), np.load(out.format("lse"))]
        if cache_out:
            res += [np.load(self.path(f"{tag}_kc.npy")), np.load(self.path(f"{tag}_vc.npy"))]
        return res, got

    def side(self, tag, **arrays):
        args = []
        for name, x in arrays.items():
            if x is None:
                continue
            args += ["--" + name.replace("_", "-"), self.npy(f"{tag}_{name}.npy", x)]
        return args

    def case(self, label, b=3, sq=1, h=4, hk=2, d=16, dv=8, page=16, mb=4, seqlens=None,
             s_new=1, batch_idx=None, leftpad=None, rotary=8, interleaved=False,
             rotary_seqlens=None, causal=True, window=(-1, -1), chunk=0, b_cache=None,
             ref_kw=None, args=(), cache_dtype=np.float32, tol=1e-12, counts=None,
             cu_dtype=np.int32):
        S = page * mb
        b_cache = b_cache or b
        kc, vc = (x.astype(cache_dtype) for x in self.caches(b_cache, S, hk, d, dv))
        q = self.rng.standard_normal((b, sq, h, d))
        k_new = self.rng.standard_normal((b, s_new, hk, d)).astype(cache_dtype) if s_new else None
        v_new = self.rng.standard_normal((b, s_new, hk, dv)).astype(cache_dtype) if s_new else None
        cu = None
        if counts is not None:  # packed (varlen) new keys, entry e's rows cu[e] .. cu[e+1]-1
            cu = np.concatenate([[0], np.cumsum(counts)]).astype(cu_dtype)
            k_new = self.rng.standard_normal((int(cu[-1]), hk, d)).astype(cache_dtype)
            v_new = self.rng.standard_normal((int(cu[-1]), hk, dv)).astype(cache_dtype)
            ref_kw = dict(ref_kw or {}, cu_new=cu)
        cos = sin = None
        if rotary:
            ang = self.rng.uniform(0, 2 * np.pi, (S + 8, rotary // 2))
            cos, sin = np.cos(ang), np.sin(ang)
        ref = kv_reference(q, kc, vc, seqlens, k_new, v_new, batch_idx, leftpad, cos, sin,
                           interleaved, rotary_seqlens, causal, window, chunk, **(ref_kw or {}))
        ints = lambda x: None if x is None else np.asarray(x, np.int32)
        common = self.side(label, cache_seqlens=ints(seqlens), cache_batch_idx=ints(batch_idx),
                           cache_leftpad=ints(leftpad), k_new=k_new, v_new=v_new,
                           rotary_cos=cos, rotary_sin=sin, rotary_seqlens=ints(rotary_seqlens),
                           cu_seqlens_k_new=cu)
        if interleaved:
            common.append("--rotary-interleaved")
        if causal:
            common.append("--causal")
        if window != (-1, -1):
            common += ["--window", f"{window[0]},{window[1]}"]
        if chunk:
            common += ["--chunk-size", str(chunk)]
        common += list(args)
        wrote = k_new is not None
        res, bits = self.posenc(label + "c", q, kc, vc, common, cache_out=wrote)
        out, lse = res[:2]
        kc2, vc2 = res[2:] if wrote else (kc, vc)
        scale = max(np.abs(ref[0]).max(), 1.0)
        self.assertLessEqual(np.abs(out - ref[0]).max() / scale, tol, label)
        empty = np.isneginf(ref[1])
        np.testing.assert_array_equal(np.isneginf(lse), empty, label)
        self.assertLessEqual(np.abs(lse[~empty] - ref[1][~empty]).max(initial=0), tol, label)
        np.testing.assert_array_equal(kc2, ref[2], label)
        np.testing.assert_array_equal(vc2, ref[3], label)
        # Paged: the same bytes, and the pages updated as the rows.
        pk, table = paged(kc, page, self.rng)
        pv = np.zeros((pk.shape[0], page, hk, dv), vc.dtype)
        for e in range(b_cache):
            for k in range(mb):
                pv[table[e, k]] = vc[e, k * page:(k + 1) * page]
        res, pbits = self.posenc(
            label + "p", q, pk, pv, common + ["--page-table", self.npy(label + "_pt.npy", table)],
            cache_out=wrote)
        pk2, pv2 = res[2:] if wrote else (pk, pv)
        self.assertEqual(pbits, bits, f"{label}: paged")
        for e in range(b_cache):
            for k in range(mb):
                np.testing.assert_array_equal(pk2[table[e, k]], kc2[e, k * page:(k + 1) * page])
                np.testing.assert_array_equal(pv2[table[e, k]], vc2[e, k * page:(k + 1) * page])
        for jobs in (1, 2):
            _, jbits = self.posenc(f"{label}j{jobs}", q, kc, vc, common, cache_out=False,
                                   jobs=jobs)
            self.assertEqual(jbits, bits, f"{label}: -j {jobs}")
        return out, lse

    def test_decode_step(self):
        # One new token per entry, rotary at cache_seqlens, grouped heads.
        self.case("dec", seqlens=[5, 40, 0])

    def test_batch_idx_and_leftpad(self):
        self.case("idx", b=2, b_cache=4, batch_idx=[3, 1], leftpad=[2, 0], seqlens=[9, 30],
                  s_new=2, sq=2, interleaved=True)

    def test_fewer_cached_than_queries_with_chunks_and_window(self):
        # cache_seqlens < sq: some queries sit before the first key; chunks and a window.
        self.case("chunk", sq=5, s_new=5, seqlens=[2, 0, 7], chunk=4, causal=False)
        self.case("win", sq=5, s_new=3, seqlens=[1, 0, 7], window=(3, 0), causal=False,
                  leftpad=[1, 0, 2])

    def test_not_local_rotates_queries_at_one_offset(self):
        self.case("single", sq=3, s_new=2, seqlens=[4, 10, 1], causal=False,
                  rotary_seqlens=[0, 3, 20])

    def test_read_only_cache(self):
        # No new keys, no rotary: attention over the cached rows only.
        self.case("ro", seqlens=[16, 3, 64], s_new=0, rotary=0, sq=2)

    def test_scale_softcap_sinks_and_sink_tokens(self):
        # The attention options the KV step honours, as attention_ref defines them.
        sinks = self.rng.standard_normal(4)
        self.case("cap", seqlens=[5, 30, 12], sq=2, s_new=2, args=["--scale", "0.4", "--softcap",
                  "1.5"], ref_kw=dict(scale=0.4, softcap=1.5))
        self.case("sinks", seqlens=[5, 30, 12], sq=2, args=["--sinks", self.npy("sk.npy", sinks)],
                  ref_kw=dict(sinks=sinks))
        self.case("sinktok", seqlens=[9, 30, 12], sq=3, s_new=2, window=(4, 0), causal=False,
                  leftpad=[2, 0, 1], args=["--sink-tokens", "3"], ref_kw=dict(sink_tokens=3))

    def test_qv_and_descales(self):
        # FA3's qv and fp8 descales per (entry, KV head), over new keys, rotary and a
        # cache_batch_idx (the descales follow the batch entry, not the cache row).
        qv = self.rng.standard_normal((3, 2, 4, 8))
        ds = {n: self.rng.uniform(0.25, 4.0, (3, 2)).astype(np.float32)
              for n in ("q_descale", "k_descale", "v_descale")}
        files = lambda tag, keys: sum((["--" + k.replace("_", "-"), self.npy(f"{tag}_{k}.npy",
                                        qv if k == "qv" else ds[k])] for k in keys), [])
        for tag, keys in (("qv", ["qv"]), ("kds", ["k_descale"]),
                          ("all", ["qv", "q_descale", "k_descale", "v_descale"])):
            kw = {k: qv if k == "qv" else ds[k] for k in keys}
            self.case(tag, seqlens=[5, 30, 12], sq=2, s_new=2, b_cache=4, batch_idx=[3, 0, 2],
                      args=files(tag, keys), ref_kw=kw)
        self.case("qvscale", seqlens=[9, 0, 12], sq=2, s_new=1, causal=False, window=(3, 1),
                  args=files("qvs", ["qv", "v_descale"]) + ["--scale", "0.3"],
                  ref_kw=dict(qv=qv, v_descale=ds["v_descale"], scale=0.3))

    def test_varlen_new_keys(self):
        # Packed new keys, unequal counts (one entry with none), against the reference;
        # paged == contiguous bytes, the updated caches exact (checked by case).
        self.case("vl", seqlens=[5, 40, 0], counts=[2, 0, 3], sq=2, leftpad=[1, 0, 0])
        self.case("vlwin", seqlens=[1, 9, 7], counts=[4, 1, 0], sq=3, window=(3, 0),
                  causal=False, b_cache=4, batch_idx=[3, 0, 2], interleaved=True,
                  rotary_seqlens=[0, 3, 20], cu_dtype=np.int64)
        self.case("vlnr", seqlens=[5, 0, 12], counts=[1, 3, 2], sq=2, causal=False, rotary=0)

    def test_varlen_equal_counts_are_the_batched_bytes(self):
        b, s_new, hk, d, dv, S = 3, 2, 2, 16, 8, 64
        kc, vc = self.caches(b, S, hk, d, dv)
        q = self.rng.standard_normal((b, 2, 4, d))
        kn = self.rng.standard_normal((b, s_new, hk, d)).astype(np.float32)
        vn = self.rng.standard_normal((b, s_new, hk, dv)).astype(np.float32)
        ang = self.rng.uniform(0, 2 * np.pi, (S + 8, 4))
        common = self.side("eq", cache_seqlens=np.array([5, 40, 0], np.int32),
                           rotary_cos=np.cos(ang), rotary_sin=np.sin(ang)) + ["--causal"]
        batched, bb = self.posenc("eqb", q, kc, vc, common + self.side("eqb", k_new=kn, v_new=vn))
        cu = np.arange(0, (b + 1) * s_new, s_new, dtype=np.int64)
        packed, pb = self.posenc("eqp", q, kc, vc, common + self.side(
            "eqp", k_new=kn.reshape(b * s_new, hk, d), v_new=vn.reshape(b * s_new, hk, dv),
            cu_seqlens_k_new=cu))
        self.assertEqual(pb, bb)
        for x, y in zip(packed[2:], batched[2:]):
            self.assertEqual(x.tobytes(), y.tobytes())

    def test_f64_caches_in_f32_arithmetic(self):
        # The cache rows are rounded to float32 as they are read (they were read as f16
        # bytes before): within float32 arithmetic's error of the float64 reference.
        self.case("f32", seqlens=[20, 3, 50], s_new=1, sq=2, cache_dtype=np.float64,
                  args=["--precision", "f32"], tol=1e-5)


if __name__ == "__main__":
    unittest.main()
