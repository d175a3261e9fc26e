"""`posenc rope` with RoPE layouts (frequency assignment over coordinate axes, pairing,
generated coordinates, explicit angles) against the vision families' own HF transformers
code, rewritten here in torch float64 with the structure of the upstream functions:

- Pixtral (`PixtralRotaryEmbedding`, `position_ids_in_meshgrid`): height takes the
  even-indexed frequencies, width the odd-indexed ones; ids h * max_width + w.
- DINOv3 (`DINOv3ViTRopePositionEmbedding`, `get_patches_center_coordinates`,
  `apply_rotary_pos_emb` skipping the prefix tokens): angles 2 pi c f at patch centres
  c in [-1, 1], theta 100.
- Qwen2-VL vision (`VisionRotaryEmbedding`, `Qwen2VisionTransformerPretrainedModel.
  rot_pos_emb` with spatial_merge_size 2, `apply_rotary_pos_emb_vision`).
- V-JEPA2 (`VJEPA2RopeAttention.get_position_ids`, `apply_rotary_embeddings`,
  `rotate_queries_or_keys`): three chunks of 2 * ((D/3)/2) dims, tiled table, adjacent
  pairs.
- LightGlue (`LightGluePositionalEncoder`, GPT-J `rotate_half`): angles from a learned
  projection of keypoints, as a frequency matrix and as explicit angles.

Tolerance: max abs difference 1e-12 * max|x| in float64 (both sides compute angles,
cos and sin in float64; the products differ in rounding only). The presets that
replaced the 2-D and M-RoPE branches are checked elsewhere (test_rope_apply,
test_table_rope2d, test_hf_parity) to hold the same numbers.
"""
import math
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase

TOL = 1e-12


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rotate_pairs(x):  # LightGlue's rotate_half: (2i, 2i+1) pairs
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def pixtral(x, ids_hw, max_width, theta=10000.0):
    d = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    h = torch.arange(max_width, dtype=torch.float64)
    freqs_h = torch.outer(h, freqs[::2])
    freqs_w = torch.outer(h, freqs[1::2])
    inv = torch.cat([freqs_h[:, None, :].repeat(1, max_width, 1),
                     freqs_w[None, :, :].repeat(max_width, 1, 1)], dim=-1).reshape(-1, d // 2)
    inv = torch.cat((inv, inv), dim=-1)
    pos = ids_hw[0] * max_width + ids_hw[1]
    f = inv[pos]
    return x * f.cos() + rotate_half(x) * f.sin()


def dinov3(x, h, w, prefix, theta=100.0):
    d = x.shape[-1]
    inv = 1.0 / theta ** torch.arange(0, 1, 4 / d, dtype=torch.float64)
    ch = torch.arange(0.5, h, dtype=torch.float64) / h
    cw = torch.arange(0.5, w, dtype=torch.float64) / w
    coords = torch.stack(torch.meshgrid(ch, cw, indexing="ij"), dim=-1).flatten(0, 1)
    coords = 2.0 * coords - 1.0
    ang = (2 * math.pi * coords[:, :, None] * inv[None, None, :]).flatten(1, 2).tile(2)
    xp, xq = x.split((prefix, h * w), dim=-2)
    return torch.cat((xp, xq * ang.cos() + rotate_half(xq) * ang.sin()), dim=-2)


def qwen2_vl_vision(x, t, h, w, merge, theta=10000.0):
    d = x.shape[-1]
    dim = d // 2
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    hpos = torch.arange(h).unsqueeze(1).expand(-1, w)
    hpos = hpos.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten()
    wpos = torch.arange(w).unsqueeze(0).expand(h, -1)
    wpos = wpos.reshape(h // merge, merge, w // merge, merge).permute(0, 2, 1, 3).flatten()
    ids = torch.stack([hpos, wpos], dim=-1).repeat(t, 1)
    table = torch.outer(torch.arange(max(h, w), dtype=torch.float64), inv)
    f = table[ids].flatten(1)
    emb = torch.cat((f, f), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def vjepa2_rotate(x, pos, theta=10000.0):
    d = x.size(-1)
    omega = torch.arange(d // 2, dtype=x.dtype)
    omega /= d / 2.0
    omega = 1.0 / theta ** omega
    freq = pos.unsqueeze(-1) * omega
    es = freq.sin().repeat(1, 1, 1, 2)
    ec = freq.cos().repeat(1, 1, 1, 2)
    y = x.unflatten(-1, (-1, 2))
    y1, y2 = y.unbind(dim=-1)
    y = torch.stack((-y2, y1), dim=-1).flatten(-2)
    return x * ec + y * es


def vjepa2(x, grid_depth, grid_size):
    b, heads, n, d = x.shape
    ids = torch.arange(n)
    per_frame = grid_size * grid_size
    frame = ids // per_frame
    height = (ids - per_frame * frame) // grid_size
    width = ids - per_frame * frame - grid_size * height
    c = 2 * ((d // 3) // 2)
    parts = []
    for k, p in enumerate((frame, height, width)):
        pos = p.to(torch.float64)[None, None].expand(b, heads, n)
        parts.append(vjepa2_rotate(x[..., k * c:(k + 1) * c], pos))
    return torch.cat(parts + [x[..., 3 * c:]], dim=-1)


def lightglue(x, keypoints, weight):
    proj = keypoints @ weight.T                  # nn.Linear(2, d/2, bias=False)
    emb = proj.repeat_interleave(2, dim=-1)
    return x * emb.cos() + rotate_pairs(x) * emb.sin(), proj


class Layouts(PosencTestCase):
    rng = np.random.default_rng(27)

    def rope(self, x, *args):
        src = self.npy("x.npy", x)
        out = self.path("y.npy")
        self.run_ok("rope", src, "-o", out, "--dtype", "f64", *args)
        return np.load(out)

    def check(self, got, ref, msg):
        ref = ref.numpy() if isinstance(ref, torch.Tensor) else ref
        self.assertEqual(got.shape, ref.shape, msg)
        err = float(np.max(np.abs(got - ref)))
        self.assertLessEqual(err, TOL * float(np.max(np.abs(ref))), msg)

    def test_pixtral_even_odd(self):
        # Two images of 3 x 5 and 4 x 2 patches in one sequence (block-diagonal attention
        # in HF; the ids restart per image).
        ids = [np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij")).reshape(2, -1)
               for h, w in ((3, 5), (4, 2))]
        ids = np.concatenate(ids, axis=1).astype(np.int64)
        for d in (16, 64):
            x = self.rng.standard_normal((1, 2, ids.shape[1], d))
            ref = pixtral(torch.from_numpy(x), torch.from_numpy(ids), max_width=8)
            idf = self.npy("ids.npy", ids)
            got = self.rope(x, "--layout", "even-odd", "--position-ids", idf)
            self.check(got, ref, f"pixtral D={d}")
        # One image from generated coordinates.
        x = self.rng.standard_normal((1, 2, 12, 32))
        ids = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij")).reshape(2, -1)
        ref = pixtral(torch.from_numpy(x), torch.from_numpy(ids), max_width=4)
        self.check(self.rope(x, "--layout", "even-odd", "--coords", "grid:3,4"), ref, "grid")

    def test_dinov3_centres(self):
        for h, w, prefix, d in ((4, 4, 0, 64), (3, 5, 5, 32), (2, 7, 1, 16)):
            x = self.rng.standard_normal((2, 3, prefix + h * w, d))
            ref = dinov3(torch.from_numpy(x), h, w, prefix)
            got = self.rope(x, "--layout", "axial", "--coords", f"centres:{h},{w}",
                            "--prefix-tokens", str(prefix), "--freq-scale", "2pi",
                            "--base", "100")
            self.check(got, ref, f"dinov3 {h}x{w}+{prefix} D={d}")
            # The prefix tokens pass through bit for bit.
            np.testing.assert_array_equal(got[:, :, :prefix], x[:, :, :prefix])
        # Real coordinates from a file give the same numbers (DINOv3's augmented
        # coordinates would come this way).
        x = self.rng.standard_normal((1, 2, 12, 32))
        ch = (np.arange(3) + 0.5) / 3 * 2 - 1
        cw = (np.arange(4) + 0.5) / 4 * 2 - 1
        coords = np.stack(np.meshgrid(ch, cw, indexing="ij")).reshape(2, -1)
        got = self.rope(x, "--layout", "axial", "--position-ids", self.npy("c.npy", coords),
                        "--freq-scale", "2pi", "--base", "100")
        self.check(got, dinov3(torch.from_numpy(x), 3, 4, 0), "dinov3 from coordinates")

    def test_qwen2_vl_vision_merge_order(self):
        for t, h, w, d in ((1, 4, 6, 16), (2, 4, 4, 80)):
            x = self.rng.standard_normal((1, 2, t * h * w, d))
            ref = qwen2_vl_vision(torch.from_numpy(x), t, h, w, merge=2)
            got = self.rope(x, "--layout", "axial", "--coords", f"grid:{t * h},{w}",
                            "--merge-window", "2") if t == 1 else None
            if got is not None:
                self.check(got, ref, f"qwen2-vl vision {h}x{w}")
            # Frames repeat the same (h, w) ids: ids from a file.
            hpos = np.arange(h)[:, None].repeat(w, 1).reshape(h // 2, 2, w // 2, 2)
            wpos = np.arange(w)[None, :].repeat(h, 0).reshape(h // 2, 2, w // 2, 2)
            ids = np.stack([hpos.transpose(0, 2, 1, 3).ravel(), wpos.transpose(0, 2, 1, 3).ravel()])
            ids = np.tile(ids, (1, t)).astype(np.int64)
            got = self.rope(x, "--layout", "axial", "--position-ids", self.npy("ids.npy", ids))
            self.check(got, ref, f"qwen2-vl vision ids t={t}")

    def test_vjepa2_chunks_tiled(self):
        for depth, size, d in ((2, 4, 64), (1, 3, 72), (3, 2, 40)):
            x = self.rng.standard_normal((1, 2, depth * size * size, d))
            ref = vjepa2(torch.from_numpy(x), depth, size)
            got = self.rope(x, "--layout", "chunks", "--coords", f"grid:{depth},{size},{size}")
            self.check(got, ref, f"vjepa2 {depth}x{size}x{size} D={d}")
        # One chunk over the whole head: rotate_queries_or_keys alone (--style tiled).
        x = self.rng.standard_normal((1, 2, 9, 16))
        pos = torch.arange(9, dtype=torch.float64)[None, None].expand(1, 2, 9)
        ref = vjepa2_rotate(torch.from_numpy(x), pos)
        self.check(self.rope(x, "--style", "tiled"), ref, "tiled, one chunk")

    def test_lightglue_matrix_and_angles(self):
        n, d = 20, 32
        kp = self.rng.uniform(-1, 1, (n, 2))
        weight = self.rng.standard_normal((d // 2, 2))
        x = self.rng.standard_normal((1, 4, n, d))
        ref, proj = lightglue(torch.from_numpy(x), torch.from_numpy(kp), torch.from_numpy(weight))
        got = self.rope(x, "--style", "gptj", "--inv-freq", self.npy("w.npy", weight.T.copy()),
                        "--position-ids", self.npy("kp.npy", kp.T.copy()))
        self.check(got, ref, "lightglue projection")
        got = self.rope(x, "--style", "gptj", "--angles", self.npy("a.npy", proj.numpy()))
        self.check(got, ref, "lightglue angles")

    def test_layout_attributes_recorded(self):
        x = self.rng.standard_normal((1, 1, 6, 16))
        src = self.npy("x.npy", x)
        out = self.path("y.h5")
        self.run_ok("rope", src, "-o", out + ":/y", "--layout", "chunks", "--coords",
                    "grid:1,2,3")
        import h5py
        with h5py.File(out) as f:
            a = f["y"].attrs
            self.assertEqual(a["rope_layout"], "chunks")
            self.assertEqual(a["rope_pairing"], "tiled")
            self.assertEqual(list(a["rope_grid"]), [1, 2, 3])

    def test_bad_layouts(self):
        x = self.npy("x.npy", self.rng.standard_normal((1, 2, 12, 16)))
        out = self.path("new.npy")
        fails = [
            (2, ["--layout", "diagonal"], "layout"),
            (2, ["--layout", "sections:1,2"], "mrope-section"),
            (2, ["--layout", "chunks:0"], "chunks"),
            (2, ["--layout", "axial", "--rope2d", "3", "4"], "--layout"),
            (2, ["--layout", "axial"], "coordinate axes"),
            (2, ["--coords", "grid:3,x"], "--coords"),
            (2, ["--coords", "mesh:3,4"], "--coords"),
            (2, ["--coords", "grid:3,4", "--merge-window", "0"], "--merge-window"),
            (2, ["--coords", "grid:3,4", "--layout", "axial", "--merge-window", "3"], "merge"),
            (2, ["--prefix-tokens", "2"], "--coords only"),
            (2, ["--coords", "grid:12", "--start", "3"], "start"),
            (3, ["--coords", "grid:3,5", "--layout", "axial"], "does not match"),
            (2, ["--freq-scale", "-1"], "--freq-scale"),
            (2, ["--style", "tiled", "--inverse"], "inverse"),
            (2, ["--layout", "chunks", "--coords", "grid:1,3,4", "--arith", "hf"], "--arith hf"),
            (2, ["--coords", "centres:3,4", "--layout", "axial", "--arith", "meta"], "--arith meta"),
        ]
        for status, args, match in fails:
            with self.subTest(args=args):
                self.assert_fails(status, "rope", x, "-o", out, *args, match=match)
        # Files with the wrong shape or values.
        bad_angles = self.npy("a.npy", np.zeros((12, 7)))
        nan_coords = self.npy("c.npy", np.array([[0.0] * 11 + [np.nan]] * 2))
        wide = self.npy("w.npy", np.ones((9, 8)))
        nonfinite_freq = self.npy("f.npy", np.array([[np.inf] * 8]))
        for args, match in ((["--angles", bad_angles], "angles"),
                            (["--position-ids", nan_coords, "--layout", "axial"], "not finite"),
                            (["--inv-freq", wide], "--inv-freq"),
                            (["--inv-freq", nonfinite_freq], "not finite")):
            with self.subTest(args=args):
                self.assert_fails(3, "rope", x, "-o", out, *args, match=match)


if __name__ == "__main__":
    unittest.main()
