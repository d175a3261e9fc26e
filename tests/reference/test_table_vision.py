"""`posenc table swin-index | beit-index | swinv2-coords | levit-index | detr-sine |
fairseq-sinusoidal` against HF transformers' own code, written
out here in torch (float64 where values are real):

- swin-index: the relative_position_index of HF `SwinSelfAttention.__init__`
  (meshgrid "ij", coords_flatten[:, :, None] - coords_flatten[:, None, :], shifted by
  window - 1, rows multiplied by 2W - 1, summed), equal exactly for square and
  rectangular windows; with --bias-table, the bias of `SwinSelfAttention.forward`
  (relative_position_bias_table[index.view(-1)].view(N, N, -1).permute(2, 0, 1)) equal
  exactly in float64 (a gather: no arithmetic) and as float32 in NPY and HDF5; fed to
  `posenc attention --mask`, the bias gives SwinSelfAttention.forward's probabilities
  and context to 1e-12;
- beit-index: HF `BeitRelativePositionBias.generate_relative_position_index` (the
  class token's three entries num_relative_distance - 3, - 2, - 1), equal exactly; with
  --bias-table, `BeitRelativePositionBias.forward` run whole (its bilinear resize of the
  table to the same size is the identity) on square windows, equal exactly in float64.
  For rectangular windows HF's forward reshapes the table as (width, height) and
  resizes it, so there the reference is the plain gather of BEiT/timm
  (table[index.view(-1)].view(N, N, -1).permute(2, 0, 1)), which posenc computes;
- swinv2-coords: the relative_coords_table of HF `Swinv2SelfAttention.__init__` in
  float64 (its int64 arange made float64 instead of float32), with and without
  pretrained_window_size, square and rectangular windows: within 1e-15; with --mlp, the
  bias of `Swinv2SelfAttention.forward` (continuous_position_bias_mlp of the table,
  gathered by relative_position_index, 16 * sigmoid) in float64: within 1e-13;
- levit-index: the attention_bias_idxs loops of HF `LevitAttention` (stride 1) and
  `LevitAttentionSubsample` (offsets numbered in order of first appearance), equal
  exactly, LeViT's own stride-2 stages (14 -> 7, 7 -> 4) among them; with --bias-table,
  attention_biases[:, attention_bias_idxs] equal exactly in float64;
- detr-sine: HF `DetrSinePositionEmbedding.forward` run in float64 (its float32
  cumsum and arange made float64), normalised (DETR's build_position_encoding) or not,
  other scales and temperatures, padded masks in a batch and all-ones masks of --size:
  within 1e-12 (the reference divides by the same dim_t; sin/cos of double angles);
  float32 output in HDF5 within one float32 rounding of the float64 reference;
  --layout tokens against the reference flattened as HF's refactored forward does
  (pos.flatten(2).permute(0, 2, 1));
- fairseq-sinusoidal: HF `M2M100SinusoidalPositionalEmbedding.get_embedding` in
  float64 (even and odd D, with and without padding_idx), and with --input-ids the
  module's forward: `create_position_ids_from_input_ids` (with past_key_values_length)
  and index_select of the weights; within 1e-12 * (1 + |position|) (angles formed the
  same way in float64); float32 CSV output within one float32 rounding; without a
  padding row, HF Whisper's `sinusoids` (its encoder positions) within the same bound;
- bad window sizes, tables, masks, ids and embedding sizes: exit 2 or 3 with one line.
"""
import itertools
import json
import math
import os
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_fairseq import fairseq_forward, get_embedding


def swin_relative_position_index(window_size):
    """HF SwinSelfAttention.__init__ (window_size a pair)."""
    coords_h = torch.arange(window_size[0])
    coords_w = torch.arange(window_size[1])
    coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += window_size[0] - 1
    relative_coords[:, :, 1] += window_size[1] - 1
    relative_coords[:, :, 0] *= 2 * window_size[1] - 1
    return relative_coords.sum(-1)


def swin_bias(table, index, window_size):
    """HF SwinSelfAttention.forward: the bias added to the attention scores (without
    the final unsqueeze(0))."""
    relative_position_bias = table[index.view(-1)]
    relative_position_bias = relative_position_bias.view(
        window_size[0] * window_size[1], window_size[0] * window_size[1], -1)
    return relative_position_bias.permute(2, 0, 1).contiguous()


def beit_generate_relative_position_index(window_size):
    """HF BeitRelativePositionBias.generate_relative_position_index."""
    num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
    # cls to token & token 2 cls & cls to cls
    # get pair-wise relative position index for each token inside the window
    window_area = window_size[0] * window_size[1]
    grid = torch.meshgrid(torch.arange(window_size[0]), torch.arange(window_size[1]), indexing="ij")
    coords = torch.stack(grid)  # 2, Wh, Ww
    coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
    relative_coords[:, :, 0] += window_size[0] - 1  # shift to start from 0
    relative_coords[:, :, 1] += window_size[1] - 1
    relative_coords[:, :, 0] *= 2 * window_size[1] - 1
    relative_position_index = torch.zeros(size=(window_area + 1,) * 2, dtype=relative_coords.dtype)
    relative_position_index[1:, 1:] = relative_coords.sum(-1)  # Wh*Ww, Wh*Ww
    relative_position_index[0, 0:] = num_relative_distance - 3
    relative_position_index[0:, 0] = num_relative_distance - 2
    relative_position_index[0, 0] = num_relative_distance - 1
    return relative_position_index


def beit_forward(relative_position_bias_table, trained_window, window_size):
    """HF BeitRelativePositionBias.forward (interpolate_pos_encoding=False), the module's
    state passed in; returns the bias without the final unsqueeze(0)."""
    nn = torch.nn
    old_height = 2 * trained_window[0] - 1
    old_width = 2 * trained_window[1] - 1
    new_height = 2 * window_size[0] - 1
    new_width = 2 * window_size[1] - 1
    old_relative_position_bias_table = relative_position_bias_table
    old_num_relative_distance = old_height * old_width + 3
    new_num_relative_distance = new_height * new_width + 3
    old_sub_table = old_relative_position_bias_table[: old_num_relative_distance - 3]
    old_sub_table = old_sub_table.reshape(1, old_width, old_height, -1).permute(0, 3, 1, 2)
    new_sub_table = nn.functional.interpolate(
        old_sub_table, size=(int(new_height), int(new_width)), mode="bilinear")
    new_sub_table = new_sub_table.permute(0, 2, 3, 1).reshape(new_num_relative_distance - 3, -1)
    new_relative_position_bias_table = torch.cat(
        [new_sub_table, old_relative_position_bias_table[old_num_relative_distance - 3:]])
    index = beit_generate_relative_position_index(window_size)
    relative_position_bias = new_relative_position_bias_table[index.view(-1)]
    relative_position_bias = relative_position_bias.view(
        window_size[0] * window_size[1] + 1, window_size[0] * window_size[1] + 1, -1)
    return relative_position_bias.permute(2, 0, 1).contiguous()


class SwinIndex(PosencTestCase):
    def table(self, *args, name="t.npy"):
        out = self.path(name)
        self.run_ok("table", "swin-index", *args, "-o", out)
        return np.load(out)

    def test_index(self):
        for h, w in [(1, 1), (2, 2), (7, 7), (12, 12), (3, 5), (6, 2), (1, 9), (24, 24)]:
            args = ("--window", h) if h == w else ("--window", h, w)
            got = self.table(*args)
            ref = swin_relative_position_index((h, w)).numpy()
            self.assertEqual(got.dtype, np.int64)
            np.testing.assert_array_equal(got, ref, err_msg=f"{h} x {w}")
            self.assertEqual(got.max(), (2 * h - 1) * (2 * w - 1) - 1)

    def test_small_dtypes(self):
        got = self.table("--window", 7, "--dtype", "u8")
        np.testing.assert_array_equal(got, swin_relative_position_index((7, 7)).numpy())
        self.assert_fails(2, "table", "swin-index", "--window", 9, "--dtype", "u8", "-o",
                          self.path("x.npy"), match="cannot hold the largest index 288")

    def test_bias_table(self):
        gen = torch.Generator().manual_seed(5)
        for (h, w), heads in [((7, 7), 3), ((3, 5), 4), ((1, 1), 2), ((4, 2), 1)]:
            entries = (2 * h - 1) * (2 * w - 1)
            tab = torch.randn(entries, heads, generator=gen, dtype=torch.float64)
            ref = swin_bias(tab, swin_relative_position_index((h, w)), (h, w)).numpy()
            ref_path = self.npy("tab.npy", tab.numpy())
            got = self.table("--window", h, w, "--bias-table", ref_path, "--dtype", "f64")
            self.assertEqual(got.dtype, np.float64)
            np.testing.assert_array_equal(got, ref, err_msg=f"{h} x {w}")
            # float32 output in a second format: each value rounded once.
            h5 = self.path("b.h5")
            self.run_ok("table", "swin-index", "--window", h, w, "--bias-table", ref_path,
                        "-o", h5 + ":/bias")
            with h5py.File(h5, "r") as f:
                d = f["/bias"]
                self.assertEqual(d.dtype, np.float32)
                np.testing.assert_array_equal(d[...], ref.astype(np.float32))
                self.assertEqual(d.attrs["kind"], "swin-index")
                self.assertEqual(int(d.attrs["heads"]), heads)
            os.remove(h5)

    def test_bias_as_attention_mask(self):
        # The bias fed to `posenc attention --mask` gives SwinSelfAttention.forward's
        # probabilities and context (no shift mask): softmax(q k^T / sqrt(d) + bias) v.
        gen = torch.Generator().manual_seed(2)
        h, w, heads, d = 4, 3, 3, 8
        n = h * w
        q, k, v = (torch.randn(2, heads, n, d, generator=gen, dtype=torch.float64)
                   for _ in range(3))
        tab = torch.randn((2 * h - 1) * (2 * w - 1), heads, generator=gen, dtype=torch.float64)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores + swin_bias(tab, swin_relative_position_index((h, w)), (h, w)).unsqueeze(0)
        probs = torch.nn.functional.softmax(scores, dim=-1)
        context = torch.matmul(probs, v)
        bias = self.path("bias.npy")
        self.run_ok("table", "swin-index", "--window", h, w, "--bias-table",
                    self.npy("tab.npy", tab.numpy()), "--dtype", "f64", "-o", bias)
        out = self.path("att.h5")
        self.run_ok("attention", "-q", self.npy("q.npy", q.numpy()), "-k",
                    self.npy("k.npy", k.numpy()), "-v", self.npy("v.npy", v.numpy()), "--mask",
                    bias, "--emit", "probs,output", "--dtype", "f64", "-o", out)
        with h5py.File(out, "r") as f:
            self.assert_close(f["/probs"][...], probs.numpy(), rtol=1e-12, atol=1e-14)
            self.assert_close(f["/output"][...], context.numpy(), rtol=1e-12, atol=1e-13)

    def test_errors(self):
        out = self.path("x.npy")
        for window in (["0"], ["3", "0"], ["-2"], ["257"], ["4", "5000"]):
            self.assert_fails(2, "table", "swin-index", "--window", *window, "-o", out,
                              match="--window (height|width): must be from 1 to 256")
        self.assert_fails(2, "table", "swin-index", "--window", "1", "2", "3", "-o", out)
        self.assert_fails(2, "table", "swin-index", "-o", out, match="--window")
        self.assert_fails(2, "table", "swin-index", "--window", "x", "-o", out)
        bad = self.npy("bad.npy", np.zeros((48, 2)))
        self.assert_fails(3, "table", "swin-index", "--window", 4, "--bias-table", bad, "-o",
                          out, match=r"--bias-table: expected shape \(49, heads\)")
        nan = np.zeros((9, 2))
        nan[4, 1] = np.nan
        self.assert_fails(3, "table", "swin-index", "--window", 2, "--bias-table",
                          self.npy("nan.npy", nan), "-o", out, match=r"entry \(4, 1\)")
        self.assert_fails(2, "table", "swin-index", "--window", 2, "--bias-table",
                          self.npy("ok.npy", np.zeros((9, 2))), "--dtype", "i64", "-o", out,
                          match="real numbers")
        self.assertFalse(os.path.exists(out))


class BeitIndex(PosencTestCase):
    def table(self, *args, name="t.npy"):
        out = self.path(name)
        self.run_ok("table", "beit-index", *args, "-o", out)
        return np.load(out)

    def test_index(self):
        for h, w in [(1, 1), (2, 2), (14, 14), (3, 5), (5, 3), (1, 7), (24, 24)]:
            got = self.table("--window", h, w)
            ref = beit_generate_relative_position_index((h, w)).numpy()
            self.assertEqual(got.shape, (h * w + 1, h * w + 1))
            np.testing.assert_array_equal(got, ref, err_msg=f"{h} x {w}")

    def test_bias_table(self):
        gen = torch.Generator().manual_seed(7)
        for (h, w), heads in [((14, 14), 3), ((5, 5), 12), ((1, 1), 2), ((3, 5), 4), ((4, 2), 1)]:
            entries = (2 * h - 1) * (2 * w - 1) + 3
            tab = torch.randn(entries, heads, generator=gen, dtype=torch.float64)
            if h == w:
                ref = beit_forward(tab, (h, w), (h, w)).numpy()
            else:
                ref = swin_bias(tab, beit_generate_relative_position_index((h, w)),
                                (h * w + 1, 1)).numpy()
            path = self.npy("tab.npy", tab.numpy())
            got = self.table("--window", h, w, "--bias-table", path, "--dtype", "f64")
            np.testing.assert_array_equal(got, ref, err_msg=f"{h} x {w}")
            got = self.run_ok("table", "beit-index", "--window", h, w, "--bias-table", path,
                              "-o", "-", "--to", "json").stdout
            doc = json.loads(got)
            self.assertEqual(doc["shape"], [heads, h * w + 1, h * w + 1])
            np.testing.assert_array_equal(np.array(doc["data"], dtype=np.float32).reshape(doc["shape"]),
                                          ref.astype(np.float32))

    def test_errors(self):
        out = self.path("x.npy")
        self.assert_fails(2, "table", "beit-index", "--window", 0, "-o", out,
                          match="--window height: must be from 1 to 256, got 0")
        swin_sized = self.npy("s.npy", np.zeros((49, 2)))
        self.assert_fails(3, "table", "beit-index", "--window", 4, "--bias-table", swin_sized,
                          "-o", out, match=r"expected shape \(52, heads\) for a 4 x 4 window "
                          "with a class token, got \(49, 2\)")
        self.assertFalse(os.path.exists(out))


def levit_attention_bias_idxs(resolution_in, resolution_out, stride):
    """HF LevitAttentionSubsample.__init__ (LevitAttention's loop is the stride-1 case
    with resolution_out = resolution_in: p1 * 1 - p2)."""
    points = list(itertools.product(range(resolution_in), range(resolution_in)))
    points_ = list(itertools.product(range(resolution_out), range(resolution_out)))
    len_points, len_points_ = len(points), len(points_)
    attention_offsets, indices = {}, []
    for p1 in points_:
        for p2 in points:
            size = 1
            offset = (abs(p1[0] * stride - p2[0] + (size - 1) / 2),
                      abs(p1[1] * stride - p2[1] + (size - 1) / 2))
            if offset not in attention_offsets:
                attention_offsets[offset] = len(attention_offsets)
            indices.append(attention_offsets[offset])
    return torch.LongTensor(indices).view(len_points_, len_points), len(attention_offsets)


def levit_attention_idxs(resolution):
    """HF LevitAttention.__init__."""
    points = list(itertools.product(range(resolution), range(resolution)))
    len_points = len(points)
    attention_offsets, indices = {}, []
    for p1 in points:
        for p2 in points:
            offset = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
            if offset not in attention_offsets:
                attention_offsets[offset] = len(attention_offsets)
            indices.append(attention_offsets[offset])
    return torch.LongTensor(indices).view(len_points, len_points), len(attention_offsets)


def swinv2_relative_coords_table(window_size, pretrained_window_size=(0, 0)):
    """HF Swinv2SelfAttention.__init__ (`window_size > 1` there compares HF's int
    window_size: here, whether the window has more than one token per side)."""
    relative_coords_h = torch.arange(-(window_size[0] - 1), window_size[0], dtype=torch.int64).double()
    relative_coords_w = torch.arange(-(window_size[1] - 1), window_size[1], dtype=torch.int64).double()
    relative_coords_table = (
        torch.stack(torch.meshgrid([relative_coords_h, relative_coords_w], indexing="ij"))
        .permute(1, 2, 0)
        .contiguous()
        .unsqueeze(0)
    )  # [1, 2*window_height - 1, 2*window_width - 1, 2]
    if pretrained_window_size[0] > 0:
        relative_coords_table[:, :, :, 0] /= pretrained_window_size[0] - 1
        relative_coords_table[:, :, :, 1] /= pretrained_window_size[1] - 1
    elif min(window_size) > 1:
        relative_coords_table[:, :, :, 0] /= window_size[0] - 1
        relative_coords_table[:, :, :, 1] /= window_size[1] - 1
    relative_coords_table *= 8  # normalize to -8, 8
    relative_coords_table = (
        torch.sign(relative_coords_table) * torch.log2(torch.abs(relative_coords_table) + 1.0)
        / math.log2(8)
    )
    return relative_coords_table[0]


class SwinV2Coords(PosencTestCase):
    def test_against_hf(self):
        for win, pre in [((8, 8), None), ((16, 16), (8, 8)), ((12, 12), (12, 12)), ((3, 5), None),
                         ((24, 24), (12, 12)), ((1, 1), None), ((4, 6), (2, 3))]:
            ref = swinv2_relative_coords_table(win, pre or (0, 0)).numpy()
            args = ["--window", *win] + (["--pretrained-window", *pre] if pre else [])
            out = self.path("c.npy")
            self.run_ok("table", "swinv2-coords", *args, "--dtype", "f64", "-o", out)
            got = np.load(out)
            self.assertEqual(got.shape, (2 * win[0] - 1, 2 * win[1] - 1, 2))
            self.assert_close(got, ref, rtol=0, atol=1e-15, msg=f"{win} {pre}")
        # A share of the table (--part) as JSON: the same values as the whole's rows.
        ref = swinv2_relative_coords_table((4, 4)).numpy()
        doc = json.loads(self.run_ok("table", "swinv2-coords", "--window", 4, "--dtype", "f64",
                                     "--part", "1/7", "-o", "-", "--to", "json").stdout)
        got = np.array(doc["data"]).reshape(doc["shape"])
        self.assert_close(got, ref[1:2], rtol=0, atol=1e-15, msg="json, one row of a part")

    def test_position_bias_mlp(self):
        torch.manual_seed(0)
        for win, pre, heads in [((8, 8), None, 3), ((4, 6), (2, 3), 2), ((1, 1), None, 1),
                                ((12, 12), (8, 8), 4)]:
            mlp = torch.nn.Sequential(torch.nn.Linear(2, 32, bias=True), torch.nn.ReLU(inplace=True),
                                      torch.nn.Linear(32, heads, bias=False)).double()
            with torch.no_grad():  # HF Swinv2SelfAttention.forward's position bias
                table = mlp(swinv2_relative_coords_table(win, pre or (0, 0))[None]).view(-1, heads)
                index = swin_relative_position_index(win)
                n = win[0] * win[1]
                ref = table[index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
                ref = (16 * torch.sigmoid(ref)).numpy()
            w = [self.path(f"w{i}.npy") for i in range(3)]
            np.save(w[0], mlp[0].weight.detach().numpy())
            np.save(w[1], mlp[0].bias.detach().numpy())
            np.save(w[2], mlp[2].weight.detach().numpy().astype(np.float32))  # any float dtype
            args = ["--window", *win] + (["--pretrained-window", *pre] if pre else [])
            out = self.path("b.npy")
            self.run_ok("table", "swinv2-coords", *args, "--mlp", *w, "--dtype", "f64", "-o", out)
            got = np.load(out)
            self.assertEqual(got.shape, (heads, n, n))
            ref32 = table.new_tensor(mlp[2].weight.detach().numpy().astype(np.float32))
            with torch.no_grad():  # the f32 file's values, as posenc read them
                mlp[2].weight.copy_(ref32)
                table = mlp(swinv2_relative_coords_table(win, pre or (0, 0))[None]).view(-1, heads)
                ref = (16 * torch.sigmoid(table[index.view(-1)].view(n, n, -1).permute(2, 0, 1))).numpy()
            self.assert_close(got, ref, rtol=1e-13, atol=1e-13, msg=f"{win} {pre}")
        bad = self.path("bad.npy")
        np.save(bad, np.zeros((32, 3)))
        self.assert_fails(3, "table", "swinv2-coords", "--window", 4, "--mlp", bad, w[1], w[2],
                          "-o", out, match="mlp: expected W1 \\[hidden, 2\\]")
        np.save(bad, np.array([np.nan] * 32))
        self.assert_fails(3, "table", "swinv2-coords", "--window", 4, "--mlp", w[0], bad, w[2],
                          "-o", out, match="mlp: the weights hold NaN or Inf")
        self.assert_fails(2, "table", "swinv2-coords", "--window", 4, "--mlp", w[0], w[1],
                          "-o", out, match="--mlp")

    def test_errors(self):
        out = self.path("x.npy")
        self.assert_fails(2, "table", "swinv2-coords", "--window", 0, "-o", out,
                          match="--window height: must be from 1 to 256")
        self.assert_fails(2, "table", "swinv2-coords", "--window", 8, "--pretrained-window", 1,
                          "-o", out, match="--pretrained-window height: must be from 2 to 256")
        self.assert_fails(2, "table", "swinv2-coords", "--window", 8, "--pretrained-window", 8,
                          0, "-o", out, match="--pretrained-window width: must be from 2")
        self.assertFalse(os.path.exists(out))


class LevitIndex(PosencTestCase):
    def table(self, *args, name="t.npy"):
        out = self.path(name)
        self.run_ok("table", "levit-index", *args, "-o", out)
        return np.load(out)

    def test_index(self):
        for r in (1, 2, 4, 7, 14):
            ref, n = levit_attention_idxs(r)
            got = self.table("--resolution", r)
            np.testing.assert_array_equal(got, ref.numpy(), err_msg=f"R={r}")
            self.assertEqual(n, r * r)
        for r, s in [(14, 2), (7, 2), (9, 3), (5, 5), (6, 4), (3, 1)]:
            r_out = (r - 1) // s + 1
            ref, n = levit_attention_bias_idxs(r, r_out, s)
            got = self.table("--resolution", r, "--stride", s)
            self.assertEqual(got.shape, (r_out * r_out, r * r))
            np.testing.assert_array_equal(got, ref.numpy(), err_msg=f"R={r} s={s}")
            self.assertEqual(n, r * r)

    def test_bias_table(self):
        gen = torch.Generator().manual_seed(11)
        for r, s, heads in [(7, 1, 4), (14, 2, 8), (4, 2, 1)]:
            r_out = (r - 1) // s + 1
            idxs, n = levit_attention_bias_idxs(r, r_out, s)
            attention_biases = torch.randn(heads, n, generator=gen, dtype=torch.float64)
            ref = attention_biases[:, idxs].numpy()
            path = self.npy("ab.npy", attention_biases.numpy())
            got = self.table("--resolution", r, "--stride", s, "--bias-table", path,
                             "--dtype", "f64")
            np.testing.assert_array_equal(got, ref, err_msg=f"R={r} s={s}")
            h5 = self.path(f"ab{r}.h5")
            self.run_ok("table", "levit-index", "--resolution", r, "--stride", s,
                        "--bias-table", path, "-o", h5 + ":/ab")
            with h5py.File(h5, "r") as f:
                np.testing.assert_array_equal(f["/ab"][...], ref.astype(np.float32))

    def test_errors(self):
        out = self.path("x.npy")
        for r in (0, -3, 257):
            self.assert_fails(2, "table", "levit-index", "--resolution", r, "-o", out,
                              match="--resolution: must be from 1 to 256")
        for s in (0, 5):
            self.assert_fails(2, "table", "levit-index", "--resolution", 4, "--stride", s,
                              "-o", out, match="--stride: must be from 1 to the resolution 4")
        # Sizes are checked before the table is read: a missing table does not matter.
        self.assert_fails(2, "table", "levit-index", "--resolution", 0, "--bias-table",
                          self.path("missing.npy"), "-o", out, match="--resolution")
        swin_layout = self.npy("t.npy", np.zeros((16, 2)))
        self.assert_fails(3, "table", "levit-index", "--resolution", 4, "--bias-table",
                          swin_layout, "-o", out,
                          match=r"--bias-table: expected shape \(heads, 16\) for resolution 4")
        self.assertFalse(os.path.exists(out))


def detr_sine(pixel_mask, embedding_dim, temperature=10000, normalize=False, scale=None,
              dtype=torch.float64):
    """HF DetrSinePositionEmbedding (__init__ and forward), float32 replaced by `dtype`."""
    if scale is not None and normalize is False:
        raise ValueError("normalize should be True if scale is passed")
    if scale is None:
        scale = 2 * math.pi
    y_embed = pixel_mask.cumsum(1, dtype=dtype)
    x_embed = pixel_mask.cumsum(2, dtype=dtype)
    if normalize:
        y_embed = y_embed / (y_embed[:, -1:, :] + 1e-6) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + 1e-6) * scale

    dim_t = torch.arange(embedding_dim, dtype=torch.int64).to(dtype)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / embedding_dim)

    pos_x = x_embed[:, :, :, None] / dim_t
    pos_y = y_embed[:, :, :, None] / dim_t
    pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
    return pos


def deformable_detr_sine(pixel_mask, embedding_dim, temperature=10000, dtype=torch.float64):
    """HF DeformableDetrSinePositionEmbedding as build_position_encoding makes it
    (normalize=True; also GroundingDinoSinePositionEmbedding): the sums less 0.5 before
    the division."""
    scale = 2 * math.pi
    y_embed = pixel_mask.cumsum(1, dtype=dtype)
    x_embed = pixel_mask.cumsum(2, dtype=dtype)
    eps = 1e-6
    y_embed = (y_embed - 0.5) / (y_embed[:, -1:, :] + eps) * scale
    x_embed = (x_embed - 0.5) / (x_embed[:, :, -1:] + eps) * scale
    dim_t = torch.arange(embedding_dim, dtype=dtype)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / embedding_dim)
    pos_x = x_embed[:, :, :, None] / dim_t
    pos_y = y_embed[:, :, :, None] / dim_t
    pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
    return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


def dab_detr_sine(pixel_mask, hidden_size, temperature_height, temperature_width,
                  dtype=torch.float64):
    """HF DabDetrPositionEmbedding (embedding_dim hidden_size / 2, a float; its float32
    made `dtype`): one temperature for y, another for x."""
    embedding_dim = hidden_size / 2
    scale = 2 * math.pi
    y_embed = pixel_mask.cumsum(1, dtype=dtype)
    x_embed = pixel_mask.cumsum(2, dtype=dtype)
    y_embed = y_embed / (y_embed[:, -1:, :] + 1e-6) * scale
    x_embed = x_embed / (x_embed[:, :, -1:] + 1e-6) * scale
    dim_tx = torch.arange(embedding_dim, dtype=dtype)
    dim_tx = temperature_width ** (2 * (dim_tx // 2) / embedding_dim)
    pos_x = x_embed[:, :, :, None] / dim_tx
    dim_ty = torch.arange(embedding_dim, dtype=dtype)
    dim_ty = temperature_height ** (2 * (dim_ty // 2) / embedding_dim)
    pos_y = y_embed[:, :, :, None] / dim_ty
    pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
    return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


def rt_detr_sincos(width, height, embed_dim=256, temperature=10000.0, dtype=torch.float64,
                   indexing="xy"):
    """HF RTDetrHybridEncoder.build_2d_sincos_position_embedding in `dtype`: transformers
    5 (meshgrid "xy", the h channels first); indexing "ij" is the 4.x form (x-major
    tokens, the w channels first)."""
    grid_w = torch.arange(int(width)).to(dtype)
    grid_h = torch.arange(int(height)).to(dtype)
    grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing=indexing)
    pos_dim = embed_dim // 4
    omega = torch.arange(pos_dim).to(dtype) / pos_dim
    omega = 1.0 / (temperature ** omega)
    out_w = grid_w.flatten()[..., None] @ omega[None]
    out_h = grid_h.flatten()[..., None] @ omega[None]
    if indexing == "ij":
        return torch.concat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)[None]
    return torch.concat([out_h.sin(), out_h.cos(), out_w.sin(), out_w.cos()], dim=1)[None]


class RtDetrSincos(PosencTestCase):
    def test_against_hf(self):
        out = self.path("t.npy")
        for (h, w), e, t in [((20, 20), 256, 10000.0), ((7, 13), 64, 10000.0), ((1, 5), 4, 20.0),
                             ((40, 25), 128, 1000.0)]:
            self.run_ok("table", "rt-detr-sincos", "--size", h, w, "--embedding-dim", e,
                        "--temperature", t, "--dtype", "f64", "-o", out)
            got = np.load(out)
            ref = rt_detr_sincos(w, h, e, t).numpy()
            self.assertEqual(got.shape, (1, h * w, e))
            # Angles up to max(H, W): sin and cos within a few ulps of them.
            self.assert_close(got, ref, rtol=0, atol=1e-15 * max(h, w) * 4, msg=f"{h} {w} {e}")
            # transformers 4.x: the same table of the transposed size.
            self.run_ok("table", "rt-detr-sincos", "--size", w, h, "--embedding-dim", e,
                        "--temperature", t, "--dtype", "f64", "-o", out)
            old = rt_detr_sincos(w, h, e, t, indexing="ij").numpy()
            self.assert_close(np.load(out), old, rtol=0, atol=1e-15 * max(h, w) * 4,
                              msg=f"4.x {h} {w} {e}")
        self.assert_fails(2, "table", "rt-detr-sincos", "--size", 4, 4, "--embedding-dim", 6,
                          "-o", out, match="multiple of 4")
        self.assert_fails(2, "table", "rt-detr-sincos", "--size", 0, 4, "-o", out,
                          match="height")
        self.assert_fails(2, "table", "rt-detr-sincos", "--size", 4, 4, "--temperature", -1,
                          "-o", out, match="temperature")


class DetrSine(PosencTestCase):
    def table(self, *args, name="t.npy", dtype="f64"):
        out = self.path(name)
        self.run_ok("table", "detr-sine", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def padded_masks(self, b, h, w, seed):
        """A batch of pixel masks as DETR's image processor pads: each image's pixels
        top-left, padding right and below."""
        rng = np.random.default_rng(seed)
        mask = np.zeros((b, h, w), dtype=np.int64)
        for i in range(b):
            mask[i, :rng.integers(1, h + 1), :rng.integers(1, w + 1)] = 1
        mask[0] = 1
        return mask

    def test_ones(self):
        for (h, w), e in [((1, 1), 2), ((5, 7), 16), ((25, 38), 128), ((3, 2), 6)]:
            ref = detr_sine(torch.ones(1, h, w, dtype=torch.int64), e, normalize=True).numpy()
            got = self.table("--size", h, w, "--embedding-dim", e)
            self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg=f"{h} x {w} E={e}")

    def test_masks_and_options(self):
        cases = [((3, 6, 9), 8, {}), ((2, 20, 13), 64, {"scale": 1.0}),
                 ((4, 5, 5), 10, {"temperature": 20.0}), ((2, 9, 4), 32, {"normalize": False}),
                 ((3, 12, 17), 128, {"normalize": False, "temperature": 100.0})]
        for k, ((b, h, w), e, opt) in enumerate(cases):
            mask = self.padded_masks(b, h, w, k)
            normalize = opt.get("normalize", True)
            ref = detr_sine(torch.from_numpy(mask), e, temperature=opt.get("temperature", 10000),
                            normalize=normalize, scale=opt.get("scale")).numpy()
            args = ["--mask", self.npy("m.npy", mask), "--embedding-dim", e]
            if not normalize:
                args.append("--no-normalize")
            if "scale" in opt:
                args += ["--scale", opt["scale"]]
            if "temperature" in opt:
                args += ["--temperature", opt["temperature"]]
            got = self.table(*args)
            self.assertEqual(got.shape, (b, 2 * e, h, w))
            # Without normalisation the angles reach H: sin/cos within |angle| ulps.
            self.assert_close(got, ref, rtol=1e-12, atol=1e-12 * max(h, w), msg=str(opt))
        # --layout tokens: HF's refactored forward ends with
        # pos.flatten(2).permute(0, 2, 1), the encoder's [b, H*W, 2E].
        mask = self.padded_masks(3, 7, 5, 4)
        pos = detr_sine(torch.from_numpy(mask), 16, normalize=True)
        ref = pos.flatten(2).permute(0, 2, 1).numpy()
        got = self.table("--mask", self.npy("m.npy", mask), "--embedding-dim", 16, "--layout",
                         "tokens")
        self.assertEqual(got.shape, (3, 35, 32))
        self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg="tokens layout")
        # A bool mask is a mask too.
        mask = self.padded_masks(2, 4, 6, 9)
        got = self.table("--mask", self.npy("b.npy", mask.astype(bool)), "--embedding-dim", 4)
        ref = detr_sine(torch.from_numpy(mask), 4, normalize=True).numpy()
        self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg="bool mask")

    def test_deformable_and_dab_detr(self):
        # Deformable DETR / Grounding-DINO: --offset 0.5; DAB-DETR: its two temperatures.
        for k, ((b, h, w), e) in enumerate([((2, 9, 13), 128), ((3, 5, 5), 16), ((1, 1, 1), 2)]):
            mask = self.padded_masks(b, h, w, 20 + k)
            m = self.npy("m.npy", mask)
            ref = deformable_detr_sine(torch.from_numpy(mask), e).numpy()
            got = self.table("--mask", m, "--embedding-dim", e, "--offset", 0.5)
            # Padding rows and columns (sums 0) take angles near -0.5 / 1e-6 * 2 pi: there
            # one ulp of HF's pow(T, .) is 3e-10 of angle.
            pixel = np.broadcast_to(mask[:, None] == 1, got.shape)
            self.assert_close(got[pixel], ref[pixel], rtol=1e-12, atol=1e-12,
                              msg=f"deformable {b} {h} {w}")
            self.assert_close(got[~pixel], ref[~pixel], rtol=0, atol=1e-8,
                              msg=f"deformable padding {b} {h} {w}")
            ref = dab_detr_sine(torch.from_numpy(mask), 2 * e, 20, 30).numpy()
            got = self.table("--mask", m, "--embedding-dim", e, "--temperature", 20,
                             "--temperature-width", 30)
            self.assert_close(got, ref, rtol=1e-12, atol=1e-12, msg=f"dab {b} {h} {w}")
        out = self.path("x.npy")
        self.assert_fails(2, "table", "detr-sine", "--size", 3, 3, "--embedding-dim", 4,
                          "--temperature-width", 0, "-o", out, match="temperature.width")
        self.assert_fails(2, "table", "detr-sine", "--size", 3, 3, "--embedding-dim", 4,
                          "--offset", 0.5, "--no-normalize", "-o", out, match="offset")
        self.assertFalse(os.path.exists(out))

    def test_float32_hdf5(self):
        mask = self.padded_masks(2, 10, 14, 3)
        ref = detr_sine(torch.from_numpy(mask), 32, normalize=True).numpy()
        h5 = self.path("pos.h5")
        self.run_ok("table", "detr-sine", "--mask", self.npy("m.npy", mask), "--embedding-dim",
                    32, "-o", h5 + ":/pos")
        with h5py.File(h5, "r") as f:
            got = f["/pos"][...]
            self.assertEqual(f["/pos"].attrs["kind"], "detr-sine")
        self.assertEqual(got.dtype, np.float32)
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        self.assertTrue((np.abs(got.astype(np.float64) - ref) <= ulp).all())

    def test_threads_do_not_change_the_bytes(self):
        mask = self.npy("m.npy", self.padded_masks(2, 30, 41, 6))
        runs = {}
        for j in (1, 2, 3):
            out = self.path(f"j{j}.npy")
            self.run_ok("-j", j, "table", "detr-sine", "--mask", mask, "--embedding-dim", 64,
                        "--layout", "tokens", "-o", out)
            with open(out, "rb") as f:
                runs[j] = f.read()
        self.assertEqual(runs[1], runs[2])
        self.assertEqual(runs[1], runs[3])

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "detr-sine", "-o", out)
        self.assert_fails(2, *base, "--embedding-dim", 4, match="--mask: give a pixel mask or")
        self.assert_fails(2, *base, "--embedding-dim", 4, "--size", 3, 4, "--mask",
                          self.npy("m.npy", np.ones((1, 3, 4))), match="one of them")
        for size in ((0, 4), (4, -1), (16385, 2)):
            self.assert_fails(2, *base, "--embedding-dim", 4, "--size", *size,
                              match="--size (height|width): must be from 1 to 16384")
        for e in (0, 3, -2, 1 << 17):
            self.assert_fails(2, *base, "--embedding-dim", e, "--size", 2, 2,
                              match="--embedding-dim: must be even")
        self.assert_fails(2, *base, "--embedding-dim", 4, "--size", 2, 2, "--temperature", 0,
                          match="--temperature: must be positive")
        self.assert_fails(2, *base, "--embedding-dim", 4, "--size", 2, 2, "--no-normalize",
                          "--scale", 3, match="--scale: needs normalize")
        self.assert_fails(3, *base, "--embedding-dim", 4, "--mask",
                          self.npy("m2.npy", np.ones((3, 4))), match=r"--mask: expected a pixel "
                          r"mask \[b, H, W\], got shape \(3, 4\)")
        self.assert_fails(3, *base, "--embedding-dim", 4, "--mask",
                          self.npy("m3.npy", np.full((1, 3, 4), 2)), match="0 and 1")
        self.assertFalse(os.path.exists(out))


def whisper_sinusoids(length, channels, max_timescale=10000, dtype=torch.float64):
    """HF modeling_whisper.sinusoids (the encoder's embed_positions), in `dtype`."""
    if channels % 2 != 0:
        raise ValueError("channels must be even")
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2, dtype=dtype))
    scaled_time = torch.arange(length, dtype=dtype).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)
class FairseqSinusoidal(PosencTestCase):
    def table(self, *args, name="t.npy", dtype="f64"):
        out = self.path(name)
        self.run_ok("table", "fairseq-sinusoidal", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_whisper_encoder_positions(self):
        # Whisper's encoder table (1500 positions, d_model 384 to 1280) is the fairseq
        # sinusoid without a padding row.
        for n, d in [(1500, 384), (1500, 1280), (20, 4)]:
            got = self.table("--positions", n, "--dim", d)
            ref = whisper_sinusoids(n, d).numpy()
            self.assert_close(got, ref, rtol=0, atol=1e-12 * (1 + n), msg=f"whisper {n} {d}")

    def test_weights(self):
        for n, d, pad in [(10, 4, None), (130, 1024, 1), (66, 7, 1), (40, 5, 0), (2050, 512, 1),
                          (12, 9, 11)]:
            args = ["--positions", n, "--dim", d] + ([] if pad is None else ["--padding-idx", pad])
            got = self.table(*args)
            ref = get_embedding(n, d, pad).numpy()
            tol = 1e-12 * (1 + n)
            self.assert_close(got, ref, rtol=0, atol=tol, msg=f"{n} {d} {pad}")
            if pad is not None:
                self.assertTrue((got[pad] == 0).all())
            if d % 2:
                self.assertTrue((got[:, -1] == 0).all())

    def test_input_ids(self):
        rng = np.random.default_rng(3)
        for (b, s), d, pad, past in [((2, 9), 16, 1, 0), ((3, 40), 1024, 1, 0), ((1, 5), 7, 0, 3),
                                     ((4, 17), 64, 2, 100)]:
            ids = rng.integers(0, 6, size=(b, s))
            ids[0, -2:] = pad  # right padding
            ids[-1, :2] = pad  # left padding
            ref, pos = fairseq_forward(torch.from_numpy(ids), d, pad, past)
            args = ["--input-ids", self.npy("ids.npy", ids), "--dim", d, "--padding-idx", pad]
            if past:
                args += ["--past-length", past]
            got = self.table(*args)
            self.assertEqual(got.shape, (b, s, d))
            tol = 1e-12 * (1 + int(pos.max()))
            self.assert_close(got, ref.numpy(), rtol=0, atol=tol, msg=f"{b} {s} {d} {pad} {past}")
            self.assertTrue((got[ids == pad] == 0).all())
        # int32 ids work as int64 ids do.
        ids = np.array([[4, 5, 1, 1]], dtype=np.int32)
        got = self.table("--input-ids", self.npy("i32.npy", ids), "--dim", 8, "--padding-idx", 1)
        self.assert_close(got, fairseq_forward(torch.from_numpy(ids.astype(np.int64)), 8, 1)[0],
                          rtol=0, atol=1e-12)

    def test_float32_csv(self):
        ref = get_embedding(50, 12, 1).numpy()
        out = self.path("w.csv")
        self.run_ok("table", "fairseq-sinusoidal", "--positions", 50, "--dim", 12,
                    "--padding-idx", 1, "-o", out)
        # Shortest round-trip float32 text: parsed as float32, the values written.
        got = np.loadtxt(out, delimiter=",", dtype=np.float32).astype(np.float64)
        self.assertEqual(got.shape, (50, 12))
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        self.assertTrue((np.abs(got - ref) <= ulp).all())

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "fairseq-sinusoidal", "-o", out)
        for d in (0, 3, -4, 70000):
            self.assert_fails(2, *base, "--positions", 4, "--dim", d,
                              match="--dim: must be from 4 to 65536")
        self.assert_fails(2, *base, "--dim", 8, match="--positions: the number of rows is required")
        self.assert_fails(2, *base, "--dim", 8, "--positions", 0, match="--positions: must be from 1")
        self.assert_fails(2, *base, "--dim", 8, "--positions", 4, "--padding-idx", 4,
                          match="--padding-idx: 4 is not a row of the 4 positions")
        self.assert_fails(2, *base, "--dim", 8, "--positions", 4, "--padding-idx", -1,
                          match="--padding-idx: must be from 0")
        ids = self.npy("ids.npy", np.array([[3, 4]]))
        self.assert_fails(2, *base, "--dim", 8, "--input-ids", ids,
                          match="--padding-idx: needed with --input-ids")
        self.assert_fails(2, *base, "--dim", 8, "--input-ids", ids, "--padding-idx", 1,
                          "--positions", 2, match="--positions: cannot be combined with --input-ids")
        self.assert_fails(2, *base, "--dim", 8, "--positions", 2, "--past-length", 2,
                          match="--past-length: applies to --input-ids only")
        self.assert_fails(2, *base, "--dim", 8, "--input-ids", ids, "--padding-idx", 1,
                          "--past-length", -1, match="--past-length: must be from 0")
        self.assert_fails(3, *base, "--dim", 8, "--padding-idx", 1, "--input-ids",
                          self.npy("f.npy", np.ones((1, 3))), match="expected an integer dtype")
        self.assert_fails(3, *base, "--dim", 8, "--padding-idx", 1, "--input-ids",
                          self.npy("v.npy", np.ones(3, dtype=np.int64)),
                          match=r"--input-ids: expected token ids \[b, s\], got shape \(3\)")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
