"""posenc attention --decomposed-rel-pos: SAM / SAM-HQ / ViTDet / GOT-OCR2 decomposed
relative positions against HF's own code, re-implemented here in torch float64 with the
structure of transformers' models/sam/modeling_sam.py: SamVisionAttention.get_rel_pos
(F.interpolate(mode="linear") of the tables to 2 max(q, k) - 1 rows; coordinates scaled
by max(k/q, 1) in torch's default dtype), add_decomposed_rel_pos (einsum of the
unscaled query with the gathered tables, added as rel_h[..., None] + rel_w[..., None, :])
and forward ((query * scale) @ key^T, softmax, @ value).

Tolerances: float64 results within rtol 1e-12 and atol 1e-12 * max |value| of the
reference (the only differences are the order of the q.k and q.R sums); float32 inputs
(computed in float32, terms summed in float64) within rtol 1e-5, atol 1e-5 * max |value|.
The blocked, streamed path (--max-memory small) gives the in-memory bits exactly. Bad
inputs: one error line, exit 2 (options) or 3 (data), nothing written.
"""
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F

from posenc_testlib import PosencTestCase, run


# transformers models/sam/modeling_sam.py, SamVisionAttention.get_rel_pos.
def get_rel_pos(q_size, k_size, rel_pos):
    max_rel_dist = int(2 * max(q_size, k_size) - 1)
    # Interpolate rel pos.
    rel_pos_resized = F.interpolate(
        rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1),
        size=max_rel_dist,
        mode="linear",
    )
    rel_pos_resized = rel_pos_resized.reshape(-1, max_rel_dist).permute(1, 0)

    # Scale the coords with short length if shapes for q and k are different.
    q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
    k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
    relative_coords = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)

    return rel_pos_resized[relative_coords.long()]


# SamVisionAttention.add_decomposed_rel_pos.
def add_decomposed_rel_pos(attn, query, rel_pos_h, rel_pos_w, q_size, k_size):
    query_height, query_width = q_size
    key_height, key_width = k_size
    relative_position_height = get_rel_pos(query_height, key_height, rel_pos_h)
    relative_position_width = get_rel_pos(query_width, key_width, rel_pos_w)

    batch_size, _, dim = query.shape
    reshaped_query = query.reshape(batch_size, query_height, query_width, dim)
    rel_h = torch.einsum("bhwc,hkc->bhwk", reshaped_query, relative_position_height)
    rel_w = torch.einsum("bhwc,wkc->bhwk", reshaped_query, relative_position_width)
    attn = attn.reshape(batch_size, query_height, query_width, key_height, key_width)
    attn = attn + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
    attn = attn.reshape(batch_size, query_height * query_width, key_height * key_width)
    return attn


# SamVisionAttention.forward after the qkv projection, heads folded into the batch
# (K and V repeated for grouped heads). Returns logits, probs, output, lse.
def sam_attention(q, k, v, rh, rw, q_size, k_size):
    q, k, v, rh, rw = (torch.from_numpy(x).to(torch.float64) for x in (q, k, v, rh, rw))
    b, hq, sq, d = q.shape
    group = hq // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    query = q.reshape(b * hq, sq, d)
    key = k.reshape(b * hq, -1, d)
    value = v.reshape(b * hq, -1, v.shape[-1])
    scale = d ** -0.5
    attn_weights = (query * scale) @ key.transpose(-2, -1)
    attn_weights = add_decomposed_rel_pos(attn_weights, query, rh, rw, q_size, k_size)
    lse = torch.logsumexp(attn_weights, dim=-1)
    probs = torch.nn.functional.softmax(attn_weights, dtype=torch.float64, dim=-1)
    out = probs @ value
    shape = lambda t: t.reshape(b, hq, *t.shape[1:]).numpy()
    return shape(attn_weights), shape(probs), shape(out), shape(lse)


class DecomposedRelPos(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(28)

    def case(self, b, hq, hk, d, q_grid, k_grid, lh, lw, dtype=np.float64):
        r = self.rng
        sq, sk = q_grid[0] * q_grid[1], k_grid[0] * k_grid[1]
        arrays = {"q": r.standard_normal((b, hq, sq, d)), "k": r.standard_normal((b, hk, sk, d)),
                  "v": r.standard_normal((b, hk, sk, 5)), "rh": r.standard_normal((lh, d)),
                  "rw": r.standard_normal((lw, d))}
        paths = {}
        for name, a in arrays.items():
            a = a.astype(dtype) if name in "qkv" else a
            arrays[name] = a
            paths[name] = self.npy(name + ".npy", a)
        return arrays, paths

    def posenc(self, paths, q_grid, k_grid, *extra, emit="logits,probs,output,lse"):
        out = self.path("o_{}.npy")
        args = ["attention", "-q", paths["q"], "-k", paths["k"], "-v", paths["v"],
                "--decomposed-rel-pos", paths["rh"], paths["rw"],
                "--grid", str(q_grid[0]), str(q_grid[1])]
        if k_grid != q_grid:
            args += ["--key-grid", str(k_grid[0]), str(k_grid[1])]
        self.run_ok(*args, *extra, "--emit", emit, "-o", out)
        names = emit.split(",")
        res = {n: np.load(out.format(n)) for n in names}
        for n in names:
            os.remove(out.format(n))
        return res

    def check(self, q_grid, k_grid, lh, lw, b=2, hq=4, hk=2, d=8):
        a, p = self.case(b, hq, hk, d, q_grid, k_grid, lh, lw)
        ref = sam_attention(a["q"], a["k"], a["v"], a["rh"], a["rw"], q_grid, k_grid)
        got = self.posenc(p, q_grid, k_grid)
        for name, want in zip(("logits", "probs", "output", "lse"), ref):
            scale = float(np.abs(want).max())
            self.assert_close(got[name], want, rtol=1e-12, atol=1e-12 * scale,
                              msg=f"{name} grid {q_grid} keys {k_grid} tables {lh}, {lw}")
        return a, p, got

    def test_tables_of_the_grid(self):
        # SAM's global layers: rel_pos tables of 2 H - 1 and 2 W - 1 rows, used as they are.
        self.check((3, 4), (3, 4), 5, 7)

    def test_tables_interpolated(self):
        # Tables of another length (SAM-HQ / ViTDet at another resolution): resized.
        self.check((4, 6), (4, 6), 5, 9)
        self.check((5, 3), (5, 3), 27, 2)
        self.check((1, 7), (1, 7), 1, 4)

    def test_query_and_key_grids_differ(self):
        # get_rel_pos's coordinate scaling by max(k/q, 1) (float32 coordinates).
        self.check((2, 3), (4, 6), 7, 11)
        self.check((3, 5), (5, 3), 9, 9)
        self.check((6, 4), (4, 7), 3, 13)

    def test_float32_inputs(self):
        q_grid = k_grid = (4, 5)
        a, p = self.case(1, 2, 2, 16, q_grid, k_grid, 7, 5, dtype=np.float32)
        ref = sam_attention(a["q"], a["k"], a["v"], a["rh"], a["rw"], q_grid, k_grid)
        got = self.posenc(p, q_grid, k_grid)
        for name, want in zip(("logits", "probs", "output", "lse"), ref):
            self.assertEqual(got[name].dtype, np.float32)
            self.assert_close(got[name], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()),
                              msg=name)

    def test_streamed_bits(self):
        # K and V read in chunks (a small --max-memory) or used in place: the same bits.
        # 1,600 keys: two key blocks of 1,024, each its own chunk at 800K.
        q_grid, k_grid = (8, 8), (40, 40)
        a, p = self.case(1, 2, 1, 8, q_grid, k_grid, 31, 15)
        self.assert_streamed_bits("-q", p["q"], "-k", p["k"], "-v", p["v"],
                                  "--decomposed-rel-pos", p["rh"], p["rw"], "--grid", "8", "8",
                                  "--key-grid", "40", "40")
        whole = self.posenc(p, q_grid, k_grid, emit="output,lse")
        ref = sam_attention(a["q"], a["k"], a["v"], a["rh"], a["rw"], q_grid, k_grid)
        self.assert_close(whole["output"], ref[2], rtol=1e-12,
                          atol=1e-12 * float(np.abs(ref[2]).max()))

    def test_with_a_causal_mask(self):
        # The term composes with the masks: the reference's scores with -inf above the
        # diagonal.
        q_grid = (3, 3)
        a, p = self.case(1, 2, 2, 4, q_grid, q_grid, 5, 5)
        logits = sam_attention(a["q"], a["k"], a["v"], a["rh"], a["rw"], q_grid, q_grid)[0]
        got = self.posenc(p, q_grid, q_grid, "--causal", emit="logits")["logits"]
        keep = np.tril(np.ones((9, 9), bool))
        self.assertTrue(np.all(np.isneginf(got[..., ~keep])))
        self.assert_close(got[..., keep], logits[..., keep], rtol=1e-12,
                          atol=1e-12 * float(np.abs(logits).max()))

    def test_bad_inputs(self):
        a, p = self.case(1, 2, 2, 8, (3, 4), (3, 4), 5, 7)
        self.npy("rd.npy", self.rng.standard_normal((5, 6)))
        self.npy("r1.npy", self.rng.standard_normal(5))
        bad = np.array(a["rh"])
        bad[2, 3] = np.nan
        self.npy("rnan.npy", bad)
        before = sorted(os.listdir(self.tmp))
        base = ["attention", "-q", p["q"], "-k", p["k"], "-v", p["v"], "-o",
                self.path("out.npy"), "--emit", "output"]
        dec = ["--decomposed-rel-pos", p["rh"], p["rw"]]
        cases = [
            (3, dec + ["--grid", "4", "4"], r"grid 4x4: holds 16 queries, q has 12"),
            (3, dec + ["--grid", "3", "4", "--key-grid", "2", "4"], r"key grid 2x4"),
            (3, ["--decomposed-rel-pos", self.path("rd.npy"), p["rw"], "--grid", "3", "4"],
             r"rel_pos_h: expected shape \(L, 8\)"),
            (3, ["--decomposed-rel-pos", p["rh"], self.path("r1.npy"), "--grid", "3", "4"],
             r"rel_pos_w: expected shape"),
            (3, ["--decomposed-rel-pos", self.path("rnan.npy"), p["rw"], "--grid", "3", "4"],
             r"rel_pos_h: contains NaN"),
            (2, dec, r"needs --grid"),
            (2, ["--grid", "3", "4"], r"--grid/--key-grid: only with --decomposed-rel-pos"),
            (2, dec + ["--grid", "0", "12"], r"--grid 0 12: sides"),
            (2, dec + ["--grid", "3", "4", "--arith", "hf"], r"--arith hf.*--decomposed-rel-pos"),
        ]
        self.assert_each_fails(base, cases, before)


if __name__ == "__main__":
    unittest.main()
