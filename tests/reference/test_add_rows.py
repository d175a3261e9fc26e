"""`posenc add` with per-token positions, a row offset and --combine mul, against HF
transformers' own position modules written out here in torch float64:

- OPT: `OPTLearnedPositionalEmbedding.forward` (positions = cumsum(attention_mask, 1)
  * attention_mask - 1, the first past_key_values_length columns sliced off, then the
  embedding of positions + offset 2) added to the embeddings, with left padding in a
  batch and with a past (mask wider than the input): equal exactly in float64 (a
  gather and one addition, the same operations);
- BART: `BartLearnedPositionalEmbedding.forward` (arange(past, past + s) + offset 2)
  as --start PAST --offset 2: equal exactly;
- fairseq's `LearnedPositionalEmbedding` with `utils.make_positions` ((cumsum(mask) *
  mask) + padding_idx, mask = ids != padding_idx) as --attention-mask with --offset
  padding_idx + 1: equal exactly;
- fairseq's sinusoidal positions (HF M2M-100: `create_position_ids_from_input_ids`
  and the weights of `get_embedding`, tests/lib/reference_fairseq.py) as `posenc table
  fairseq-sinusoidal` weights added with --attention-mask (ids != padding_idx) and
  --offset padding_idx + 1, with a past given as ones leading the mask: within 1e-12;
- --position-ids [b, s] / [1, s] / [s] with the sinusoidal table (the Annotated
  Transformer's buffer indexed by each token's position) and with sequence-first
  input (sbd): within 1e-12;
- --combine mul: (x * scale) * PE, learned and sinusoidal: within 1e-12 (one product
  each, as the reference);
- per-token positions do not change with the thread count or with streaming into many
  slabs (the bytes are equal);
- bad masks, positions and options: exit 3 or 2 with one line and no output file.
"""
import os
import re
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_relative import annotated_pe
from reference_fairseq import fairseq_forward

F64 = dict(rtol=1e-12, atol=1e-12)


def opt_positions(attention_mask, past_key_values_length=0):
    """HF OPTLearnedPositionalEmbedding.forward, before the embedding lookup: the
    positions + offset (2) it looks up."""
    attention_mask = attention_mask.long()
    positions = (torch.cumsum(attention_mask, dim=1).type_as(attention_mask) * attention_mask).long() - 1
    positions = positions[:, past_key_values_length:]
    return positions + 2


def bart_positions(bsz, seq_len, past_key_values_length=0):
    """HF BartLearnedPositionalEmbedding.forward: arange(past, past + s) + offset 2."""
    positions = torch.arange(past_key_values_length, past_key_values_length + seq_len,
                             dtype=torch.long).expand(bsz, -1)
    return positions + 2


def fairseq_make_positions(tensor, padding_idx):
    """fairseq utils.make_positions (HF create_position_ids_from_input_ids without a
    past): non-padding tokens numbered from padding_idx + 1."""
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class AddRows(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(11)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64)

    def add(self, x, *args, out="y.npy"):
        path = self.npy("x.npy", x.numpy() if torch.is_tensor(x) else x)
        self.run_ok("add", path, "-o", self.path(out), *args)
        return np.load(self.path(out))

    def test_opt_left_padding(self):
        mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1],
                             [0, 0, 0, 0, 1, 1, 1]])
        x, wpe = self.randn(3, 7, 8), self.randn(2050, 8)
        ref = x + wpe[opt_positions(mask)]
        got = self.add(x, "--table", self.npy("wpe.npy", wpe.numpy()), "--attention-mask",
                       self.npy("m.npy", mask.numpy()), "--offset", 2)
        np.testing.assert_array_equal(got, ref.numpy())
        # Padding tokens take row 1 (position -1 + 2), not row 2.
        np.testing.assert_array_equal(got[2, 0], (x[2, 0] + wpe[1]).numpy())

    def test_opt_with_past(self):
        # A cached decode step: the mask covers past and new tokens, x the new ones.
        mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1]], dtype=torch.int32)
        x, wpe = self.randn(2, 2, 4), self.randn(10, 4)
        ref = x + wpe[opt_positions(mask, past_key_values_length=4)]
        got = self.add(x, "--table", self.npy("wpe.npy", wpe.numpy()), "--attention-mask",
                       self.npy("m.npy", mask.numpy()), "--offset", 2)
        np.testing.assert_array_equal(got, ref.numpy())

    def test_bart(self):
        x, wpe = self.randn(2, 5, 6), self.randn(20, 6)
        for past in (0, 3, 13):
            ref = x + wpe[bart_positions(2, 5, past)]
            got = self.add(x, "--table", self.npy("wpe.npy", wpe.numpy()), "--start", past,
                           "--offset", 2)
            np.testing.assert_array_equal(got, ref.numpy(), err_msg=f"past {past}")

    def test_fairseq_learned(self):
        pad = 1
        ids = torch.tensor([[5, 9, 7, pad, pad], [pad, 4, 4, 8, 3]])
        x, w = self.randn(2, 5, 8), self.randn(12, 8)
        ref = x + w[fairseq_make_positions(ids, pad)]
        mask = (ids != pad).long()
        got = self.add(x, "--table", self.npy("w.npy", w.numpy()), "--attention-mask",
                       self.npy("m.npy", mask.numpy()), "--offset", pad + 1)
        np.testing.assert_array_equal(got, ref.numpy())

    def test_fairseq_sinusoidal(self):
        pad, d = 1, 10
        ids = torch.tensor([[5, 9, 7, pad, pad, pad], [pad, pad, 4, 4, 8, 3]])
        x = self.randn(2, 6, d)
        weights = self.path("w.npy")
        self.run_ok("table", "fairseq-sinusoidal", "--positions", 20, "--dim", d, "--padding-idx",
                    pad, "--dtype", "f64", "-o", weights)
        for past in (0, 4):
            emb, _ = fairseq_forward(ids, d, pad, past)
            # The past as real tokens before the current ones: the mask's running count.
            mask = torch.cat([torch.ones(2, past, dtype=torch.long), (ids != pad).long()], 1)
            got = self.add(x, "--table", weights, "--attention-mask",
                           self.npy("m.npy", mask.numpy()), "--offset", pad + 1)
            self.assert_close(got, (x + emb).numpy(), **F64)
            # Padding tokens add the zero row.
            np.testing.assert_array_equal(got[0, 4], x[0, 4].numpy())

    def test_position_ids_sinusoidal(self):
        pe = annotated_pe(64, 16).numpy()
        x = self.randn(3, 5, 16).numpy()
        ids = np.array([[0, 1, 2, 3, 4], [7, 3, 3, 9, 60], [10, 11, 12, 13, 14]])
        got = self.add(x, "--table", "sinusoidal", "--position-ids", self.npy("p.npy", ids),
                       "--scale", "2")
        self.assert_close(got, x * 2 + pe[ids], **F64)
        row = np.array([[4, 0, 2, 1, 3]], dtype=np.int32)  # [1, s]: every batch row
        got = self.add(x, "--table", "sinusoidal", "--position-ids", self.npy("p.npy", row))
        self.assert_close(got, x + pe[row], **F64)
        got = self.add(x, "--table", "sinusoidal", "--position-ids",
                       self.npy("p.npy", row[0].astype(np.uint8)), "--offset", 5)
        self.assert_close(got, x + pe[row + 5], **F64)
        # Sequence-first: positions still [b, s].
        xs = np.ascontiguousarray(x.transpose(1, 0, 2))
        got = self.add(xs, "--table", "sinusoidal", "--axes", "sbd", "--position-ids",
                       self.npy("p.npy", ids))
        self.assert_close(got, (x + pe[ids]).transpose(1, 0, 2), **F64)

    def test_combine_mul(self):
        x, w = self.randn(2, 6, 8), self.randn(9, 8)
        got = self.add(x, "--table", self.npy("w.npy", w.numpy()), "--combine", "mul",
                       "--start", 3, "--scale", "sqrt-d")
        self.assert_close(got, (x * 8 ** 0.5 * w[3:9][None]).numpy(), **F64)
        got = self.add(x, "--table", "sinusoidal", "--combine", "mul")
        self.assert_close(got, (x * annotated_pe(6, 8)[None]).numpy(), **F64)
        mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
        got = self.add(x, "--table", self.npy("w.npy", w.numpy()), "--combine", "mul",
                       "--attention-mask", self.npy("m.npy", mask.numpy()), "--offset", 2)
        self.assert_close(got, (x * w[opt_positions(mask)]).numpy(), **F64)
        # The multiplicative form is not the additive one (the test can fail).
        self.assertGreater(np.abs(got - (x + w[opt_positions(mask)]).numpy()).max(), 0.1)

    def test_streaming_and_threads(self):
        rng = np.random.default_rng(4)
        x = rng.standard_normal((16, 96, 32)).astype(np.float32)
        mask = (rng.random((16, 96)) > 0.3).astype(np.int64)
        w = rng.standard_normal((100, 32))
        args = ("--table", self.npy("w.npy", w), "--attention-mask",
                self.npy("m.npy", mask), "--offset", 2)
        xp = self.npy("x.npy", x)
        self.run_ok("-j", "1", "add", xp, "-o", self.path("a.npy"), *args)
        p = self.run_ok("-v", "-j", "2", "add", xp, "-o", self.path("b.npy"), *args,
                        "--max-memory", "100K")
        self.assertGreater(int(re.search(r"(\d+) slab\(s\)", p.stderr).group(1)), 4)
        with open(self.path("a.npy"), "rb") as a, open(self.path("b.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        ref = x.astype(np.float64) + w[opt_positions(torch.from_numpy(mask)).numpy()]
        np.testing.assert_array_equal(np.load(self.path("a.npy")), ref.astype(np.float32))

    def test_errors(self):
        out = self.path("y.npy")
        x = self.npy("x.npy", np.zeros((2, 4, 8)))
        w = self.npy("w.npy", np.zeros((6, 8)))
        base = ("add", x, "-o", out, "--table", w)
        self.assert_fails(3, *base, "--attention-mask", self.npy("m.npy", np.array([[1, 2, 1, 1]] * 2)),
                          match=r"--attention-mask: entry \(0, 1\) is 2; an attention mask holds 0 and 1")
        self.assert_fails(3, *base, "--attention-mask", self.npy("m.npy", np.ones((2, 3), np.int64)),
                          match=r"--attention-mask: expected a mask \[b, n\] with n >= 4")
        self.assert_fails(3, *base, "--attention-mask", self.npy("m.npy", np.ones((2, 4))),
                          match="--attention-mask: .*expected an integer dtype, got f64")
        # Rows past the table: 4 positions + offset 3 need row 6 of 6.
        self.assert_fails(3, *base, "--attention-mask", self.npy("m.npy", np.ones((2, 4), np.int8)),
                          "--offset", 3, match=r"--table: the learned table holds 6 positions, but "
                          r".* needs positions 3 to 6")
        # OPT's padding row -1 without the offset: below the table.
        self.assert_fails(3, *base, "--attention-mask",
                          self.npy("m.npy", np.array([[0, 1, 1, 1]] * 2, np.int64)),
                          match=r"needs positions -1 to 2")
        self.assert_fails(3, *base, "--position-ids", self.npy("p.npy", np.zeros((3, 4), np.int64)),
                          match=r"--position-ids: expected \[2, 4\], \[1, 4\] or \[4\]")
        self.assert_fails(3, *base, "--attention-mask", self.npy("m.npy", np.ones((3, 4), np.int64)),
                          match=r"--attention-mask: expected \[2, 4\], \[1, 4\] or \[4\] .*got shape \(3, 4\)")
        self.assert_fails(3, *base, "--position-ids", self.npy("p.npy", np.zeros((2, 5), np.int64)),
                          match=r"--position-ids: expected")
        self.assert_fails(3, *base, "--position-ids",
                          self.npy("p.npy", np.full(4, 2 ** 60, np.int64)),
                          match=r"--position-ids: 1152921504606846976 is out of range")
        self.assert_fails(2, *base, "--position-ids", self.npy("p.npy", np.zeros(4, np.int64)),
                          "--start", 1, match="--start: cannot be combined with --position-ids")
        self.assert_fails(2, *base, "--position-ids", self.npy("p.npy", np.zeros(4, np.int64)),
                          "--attention-mask", self.npy("m.npy", np.ones((2, 4), np.int64)),
                          match="--attention-mask: cannot be combined with --position-ids")
        self.assert_fails(2, *base, "--combine", "div", match="--combine")
        self.assert_fails(2, *base, "--offset", 2 ** 60, match="--offset: must be from -2\\^52")
        self.assert_fails(2, "add", "-", "-o", out, "--table", "sinusoidal", "--attention-mask",
                          self.npy("m.npy", np.ones((2, 4), np.int64)), stdin=b"",
                          match="--attention-mask: needs the input in a file")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
