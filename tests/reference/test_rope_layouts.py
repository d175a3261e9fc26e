"""`posenc rope` with RoPE layouts (frequency assignment over coordinate axes, pairing,
generated coordinates, explicit angles) against the vision families' own HF transformers
code, rewritten in torch float64 with the structure of the upstream functions
(tests/lib/vision_rope_reference.py, which names each upstream function): Pixtral,
DINOv3, Qwen2-VL's vision tower, V-JEPA2 and LightGlue (its projection as a frequency
matrix and as explicit angles), from options and from the towers' own configs.

Tolerance: max abs difference 1e-12 * max|x| in float64 (both sides compute angles,
cos and sin in float64; the products differ in rounding only). The presets that
replaced the 2-D and M-RoPE branches are checked elsewhere (test_rope_apply,
test_table_rope2d, test_hf_parity) to hold the same numbers.
"""
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from vision_rope_reference import dinov3, lightglue, pixtral, qwen2_vl_vision, vjepa2, vjepa2_rotate

TOL = 1e-12


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

    def test_from_hf_configs(self):
        # Vision tower configs shaped like the published ones (mistral-community/pixtral-12b
        # vision_config, facebook/dinov3-vits16-pretrain-lvd1689m, facebook/vjepa2-vitl-fpc64-256):
        # the layout, base and rotary width come from the config, the coordinates from
        # the options.
        import json
        def config(name, d):
            path = self.path(name)
            with open(path, "w") as f:
                json.dump(d, f)
            return path
        pix = config("pixtral.json", {"model_type": "pixtral", "hidden_size": 1024,
                                      "num_attention_heads": 16, "head_dim": 64,
                                      "rope_theta": 10000.0, "image_size": 1024,
                                      "patch_size": 16})
        dino = config("dinov3.json", {"model_type": "dinov3_vit", "hidden_size": 384,
                                      "num_attention_heads": 6, "rope_theta": 100.0,
                                      "num_register_tokens": 4, "patch_size": 16})
        vj = config("vjepa2.json", {"model_type": "vjepa2", "hidden_size": 1024,
                                    "num_attention_heads": 16, "patch_size": 16,
                                    "crop_size": 256, "frames_per_clip": 64, "tubelet_size": 2})
        x = self.rng.standard_normal((1, 2, 12, 64))
        ids = np.stack(np.meshgrid(np.arange(3), np.arange(4), indexing="ij")).reshape(2, -1)
        self.check(self.rope(x, "--hf-config", pix, "--coords", "grid:3,4"),
                   pixtral(torch.from_numpy(x), torch.from_numpy(ids), max_width=4), "pixtral")
        x = self.rng.standard_normal((1, 2, 5 + 12, 64))
        self.check(self.rope(x, "--hf-config", dino, "--coords", "centres:3,4",
                             "--prefix-tokens", "5"),
                   dinov3(torch.from_numpy(x), 3, 4, 5), "dinov3")
        x = self.rng.standard_normal((1, 2, 2 * 4 * 4, 64))
        self.check(self.rope(x, "--hf-config", vj, "--coords", "grid:2,4,4"),
                   vjepa2(torch.from_numpy(x), 2, 4), "vjepa2")
        # A layout on the command line does not silently replace the config's.
        self.assert_fails(2, "rope", self.npy("x.npy", x), "-o", self.path("n.npy"),
                          "--hf-config", vj, "--layout", "axial", match="layout")

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
            (2, ["--layout", "sections:1,2"], "three counts"),
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
