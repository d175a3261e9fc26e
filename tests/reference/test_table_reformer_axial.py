"""`posenc table reformer-axial` against HF transformers' Reformer code, written out
here in torch float64: `AxialPositionEmbeddings` of models/reformer/modeling_reformer.py
(its __init__ builds one weight per axis, [1, .., n_a, .., 1, d_a]; its forward
broadcasts them over (batch,) + axial_pos_shape and concatenates along the features),
with both branches of forward:

- training without dropout (the whole table, prod(axial_pos_shape) rows, reshaped
  row-major): equal to the default output (the weights are copied, so exactly; the
  brief's rtol 1e-12 holds a fortiori), for 2 axes as Reformer's configs (64 x 64 with
  64 + 192 features, scaled down) and for 3 axes;
- eval (the rows selected by position_ids, with HF's cut to the columns needed):
  --position-ids [b, s] with gaps, repeats and a batch, and --positions N (the arange
  rows HF's ReformerEmbeddings passes, start_idx_pos_encodings 0): exactly;
- float32 output equal to the float64 reference rounded once;
- bad shapes, weights, positions and options: exit 2 or 3 with one line and no output.
"""
import os
import unittest
from functools import reduce
from operator import mul

import numpy as np
import torch
from torch import nn

from posenc_testlib import PosencTestCase


class AxialPositionEmbeddings(nn.Module):
    """HF modeling_reformer.AxialPositionEmbeddings (dropout 0), float64, with the
    weights given instead of torch.ones."""

    def __init__(self, axial_pos_shape, axial_pos_embds_dim, weights):
        super().__init__()
        self.axial_pos_shape = tuple(axial_pos_shape)
        self.axial_pos_embds_dim = axial_pos_embds_dim
        self.dropout = 0.0
        self.weights = nn.ParameterList()
        for axis, axial_pos_embd_dim in enumerate(self.axial_pos_embds_dim):
            ax_shape = [1] * len(self.axial_pos_shape)
            ax_shape[axis] = self.axial_pos_shape[axis]
            ax_shape = tuple(ax_shape) + (axial_pos_embd_dim,)
            assert tuple(weights[axis].shape) == ax_shape
            self.weights.append(nn.Parameter(weights[axis].clone(), requires_grad=False))

    def forward(self, position_ids):
        batch_size = position_ids.shape[0]
        sequence_length = position_ids.shape[1]
        broadcasted_weights = [
            weight.expand((batch_size,) + self.axial_pos_shape + weight.shape[-1:]) for weight in self.weights
        ]
        if self.training is True:
            if reduce(mul, self.axial_pos_shape) != sequence_length:
                raise ValueError("training: prod(axial_pos_shape) != sequence_length")
            position_encodings = torch.cat(
                [torch.reshape(weight, (batch_size, sequence_length, -1)) for weight in broadcasted_weights],
                dim=-1,
            )
        else:
            if reduce(mul, self.axial_pos_shape) < sequence_length:
                raise ValueError("eval: prod(axial_pos_shape) < sequence_length")
            max_position_id = position_ids.max().item()
            required_pos_encodings_columns = -(-(max_position_id + 1) // self.axial_pos_shape[1])
            position_encodings = torch.cat(
                [weight[:, :required_pos_encodings_columns] for weight in broadcasted_weights], dim=-1
            )
            position_encodings = torch.reshape(position_encodings, (batch_size, -1, position_encodings.shape[-1]))
            position_encodings = torch.cat(
                [
                    torch.index_select(position_encodings[i], 0, position_ids[i]).unsqueeze(0)
                    for i in range(batch_size)
                ],
                dim=0,
            )
        return position_encodings


class ReformerAxial(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(28)

    def model(self, shape, dims):
        weights = []
        for axis, d in enumerate(dims):
            ax_shape = [1] * len(shape)
            ax_shape[axis] = shape[axis]
            weights.append(torch.randn(*ax_shape, d, generator=self.gen, dtype=torch.float64))
        paths = [self.npy(f"w{a}.npy", w.numpy()) for a, w in enumerate(weights)]
        return AxialPositionEmbeddings(shape, dims, weights), paths

    def table(self, shape, paths, *args, dtype="f64"):
        out = self.path("t.npy")
        self.run_ok("table", "reformer-axial", "--axial-shape", ",".join(map(str, shape)),
                    "--weights", *paths, *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_whole_table(self):
        for shape, dims in [((16, 8), (16, 48)), ((64, 64), (4, 12)), ((5, 3, 4), (2, 3, 5)),
                            ((7,), (6,)), ((1, 9), (3, 1))]:
            m, paths = self.model(shape, dims)
            m.train()
            n = reduce(mul, shape)
            ref = m(torch.zeros(1, n, dtype=torch.long))[0].numpy()
            got = self.table(shape, paths)
            self.assertEqual(got.shape, (n, sum(dims)))
            np.testing.assert_array_equal(got, ref, err_msg=f"{shape} {dims}")
        # float32: the reference rounded once.
        got = self.table(shape, paths, dtype="f32")
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_array_equal(got, ref.astype(np.float32))

    def test_eval_positions(self):
        m, paths = self.model((16, 8), (16, 48))
        m.eval()
        for n in (1, 5, 8, 9, 100, 128):
            ref = m(torch.arange(n)[None])[0].numpy()
            np.testing.assert_array_equal(self.table((16, 8), paths, "--positions", n), ref,
                                          err_msg=str(n))
        # Not the transposed grid (the test can fail): row 1 is (0, 1), not (1, 0).
        got = self.table((16, 8), paths, "--positions", 2)
        w0, w1 = (np.load(p) for p in paths)
        np.testing.assert_array_equal(got[1], np.concatenate([w0[0, 0], w1[0, 1]]))
        self.assertGreater(np.abs(got[1, 16:] - w1[0, 0]).max(), 0.01)

    def test_eval_position_ids(self):
        for shape, dims in [((16, 8), (16, 48)), ((4, 6, 5), (3, 2, 7))]:
            m, paths = self.model(shape, dims)
            m.eval()
            n = reduce(mul, shape)
            ids = torch.stack([torch.arange(20), torch.arange(20) * 5 + 3,
                               torch.randint(0, n, (20,), generator=self.gen)])
            ids[1, 4] = n - 1
            ids[2, 7] = ids[2, 8]
            ref = m(ids).numpy()
            got = self.table(shape, paths, "--position-ids", self.npy("p.npy", ids.numpy().astype(np.int32)))
            self.assertEqual(got.shape, (3, 20, sum(dims)))
            np.testing.assert_array_equal(got, ref, err_msg=str(shape))

    def test_errors(self):
        out = self.path("x.npy")
        w0 = self.npy("w0.npy", np.zeros((4, 1, 3)))
        w1 = self.npy("w1.npy", np.zeros((1, 5, 2)))
        base = ("table", "reformer-axial", "-o", out)
        good = ("--axial-shape", "4,5", "--weights", w0, w1)
        self.assert_fails(2, *base, "--weights", w0, w1, match="--axial-shape")
        self.assert_fails(2, *base, "--axial-shape", "4,5", match="--weights")
        self.assert_fails(2, *base, "--axial-shape", "4,0", "--weights", w0, w1,
                          match="--axial-shape: each side must be from 1 to 2\\^40, got 0")
        self.assert_fails(2, *base, "--axial-shape", "1048576,1048576,2", "--weights", w0, w1, w1,
                          match="--axial-shape: the product of .* passes 2\\^40")
        self.assert_fails(2, *base, "--axial-shape", "4,5", "--weights", w0,
                          match="--weights: one per axis of --axial-shape, 2 expected, got 1")
        self.assert_fails(2, *base, *good, "--positions", 21,
                          match="--positions: must be from 1 to the 20 rows")
        self.assert_fails(2, *base, *good, "--positions", 0, match="--positions: must be from 1")
        self.assert_fails(2, *base, *good, "--positions", 3, "--position-ids",
                          self.npy("p.npy", np.zeros((1, 2), np.int64)),
                          match="--positions: cannot be combined with --position-ids")
        self.assert_fails(3, *base, "--axial-shape", "4,5", "--weights", w1, w0,
                          match=r"--weights: the weight of axis 0 must have shape \(4, 1, d\) "
                          r"\(HF weights\[0\]\), got \(1, 5, 2\)")
        self.assert_fails(3, *base, "--axial-shape", "4,5", "--weights", w0,
                          self.npy("w2.npy", np.zeros((5, 2))),
                          match=r"--weights: the weight of axis 1 must have shape \(1, 5, d\)")
        nan = np.zeros((1, 5, 2))
        nan[0, 3, 1] = np.inf
        self.assert_fails(3, *base, "--axial-shape", "4,5", "--weights", w0, self.npy("nan.npy", nan),
                          match=r"--weights: axis 1: entry \(row 3, column 1\) is not finite")
        self.assert_fails(3, *base, *good, "--position-ids",
                          self.npy("p.npy", np.array([[0, 20]], np.int64)),
                          match=r"--position-ids: 20 at \(b 0, s 1\) is not a row of the 20")
        self.assert_fails(3, *base, *good, "--position-ids",
                          self.npy("p.npy", np.array([[-1, 2]], np.int64)),
                          match=r"--position-ids: -1 at \(b 0, s 0\)")
        self.assert_fails(3, *base, *good, "--position-ids", self.npy("p1.npy", np.zeros(3, np.int64)),
                          match=r"--position-ids: expected positions \[b, s\], got shape \(3\)")
        self.assert_fails(3, *base, *good, "--position-ids", self.npy("pf.npy", np.zeros((1, 3))),
                          match="--position-ids: .*expected an integer dtype")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
