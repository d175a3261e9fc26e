"""`posenc table complex-order` against Wang et al. 2020 ("Encoding word order in
complex embeddings", ICLR), the general embedding f(j, pos) = r_j exp(i (w_j pos +
theta_j)) written out here in torch float64 as the authors' ComplexEmbedding forms it
(amplitude, frequency and initial-phase embeddings of the token ids; phase = pos * freq
+ initial phase; real = amp * cos(phase), imaginary = amp * sin(phase)), without their
in-place reduction of the phase weights modulo 2 pi:

- per-word tables [V, D] with token ids [b, s] and a start position: [2, b, s, D]
  within rtol 1e-12, atol 1e-14 (the angle is formed with the same two roundings; only
  sin/cos differ, each within an ulp);
- one vector per dimension [D] over positions: [2, N, D], the defaults amplitude 1 and
  phase 0; float32 output within one float32 rounding;
- |f| = r at every position (a property check of the real and imaginary parts);
- bad shapes, ids and options: exit 3 or 2 with one line and no output.
"""
import os
import unittest

import numpy as np
import torch
from torch import nn

from posenc_testlib import PosencTestCase

TOL = dict(rtol=1e-12, atol=1e-14)


class ComplexEmbedding(nn.Module):
    """Wang et al.'s embedding layer: three nn.Embedding tables of the vocabulary."""

    def __init__(self, amplitude, frequency, phase):
        super().__init__()
        self.word_emb = nn.Embedding.from_pretrained(amplitude)
        self.freq_emb = nn.Embedding.from_pretrained(frequency)
        self.init_phase_emb = nn.Embedding.from_pretrained(phase)

    def forward(self, x, start=0):
        amplitude = self.word_emb(x)
        frequency = self.freq_emb(x)
        pos_seq = torch.arange(start, start + x.size(-1), dtype=torch.float64)
        pos_seq = pos_seq.unsqueeze(0).unsqueeze(-1).repeat([x.size(0), 1, amplitude.size(-1)])
        dimension_bias = self.init_phase_emb(x)
        phase = torch.mul(pos_seq, frequency) + dimension_bias
        return amplitude * torch.cos(phase), amplitude * torch.sin(phase)


class ComplexOrder(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(5)

    def table(self, *args, dtype="f64"):
        out = self.path("t.npy")
        self.run_ok("table", "complex-order", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def test_word_tables(self):
        v, d = 50, 16
        amp = torch.randn(v, d, generator=self.gen, dtype=torch.float64)
        freq = torch.rand(v, d, generator=self.gen, dtype=torch.float64) * 10
        phase = torch.rand(v, d, generator=self.gen, dtype=torch.float64) * 2 * np.pi
        ids = torch.randint(0, v, (3, 40), generator=self.gen)
        module = ComplexEmbedding(amp, freq, phase)
        paths = [self.npy(n, a.numpy()) for n, a in (("a.npy", amp), ("f.npy", freq), ("p.npy", phase))]
        idp = self.npy("ids.npy", ids.numpy())
        for start in (0, 1, 1000):
            real, imag = module(ids, start)
            got = self.table("--amplitude", paths[0], "--frequency", paths[1], "--phase", paths[2],
                             "--input-ids", idp, "--start", start)
            self.assertEqual(got.shape, (2, 3, 40, d))
            self.assert_close(got[0], real.numpy(), **TOL)
            self.assert_close(got[1], imag.numpy(), **TOL)
            # |f| = r: the parts are of one complex number.
            np.testing.assert_allclose(np.hypot(got[0], got[1]), np.abs(amp[ids].numpy()),
                                       rtol=1e-14, atol=0)

    def test_vectors(self):
        d, n = 8, 30
        freq = torch.rand(d, generator=self.gen, dtype=torch.float64) * 3
        pos = torch.arange(5, 5 + n, dtype=torch.float64)[:, None]
        got = self.table("--frequency", self.npy("f.npy", freq.numpy()), "--positions", n,
                         "--start", 5)
        self.assertEqual(got.shape, (2, n, d))
        self.assert_close(got[0], torch.cos(pos * freq).numpy(), **TOL)
        self.assert_close(got[1], torch.sin(pos * freq).numpy(), **TOL)
        amp = torch.randn(d, generator=self.gen, dtype=torch.float64)
        phase = torch.randn(d, generator=self.gen, dtype=torch.float64)
        ref = (amp * torch.cos(pos * freq + phase)).numpy()
        got32 = self.table("--frequency", self.npy("f.npy", freq.numpy()), "--amplitude",
                           self.npy("a.npy", amp.numpy()), "--phase", self.npy("p.npy", phase.numpy()),
                           "--positions", n, "--start", 5, dtype="f32")
        self.assertEqual(got32.dtype, np.float32)
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        self.assertTrue((np.abs(got32[0].astype(np.float64) - ref) <= ulp).all())

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "complex-order", "-o", out)
        f = self.npy("f.npy", np.ones(4))
        ft = self.npy("ft.npy", np.ones((5, 4)))
        ids = self.npy("ids.npy", np.array([[0, 4, 2]]))
        self.assert_fails(2, *base, "--positions", 3, match="--frequency")
        self.assert_fails(2, *base, "--frequency", f, match="--positions: the number of rows is required")
        self.assert_fails(2, *base, "--frequency", f, "--positions", 0, match="--positions: must be from 1")
        self.assert_fails(2, *base, "--frequency", f, "--input-ids", ids,
                          match="--input-ids: need tables \\[V, D\\]")
        self.assert_fails(2, *base, "--frequency", ft, match="--input-ids: needed with tables")
        self.assert_fails(2, *base, "--frequency", ft, "--input-ids", ids, "--positions", 3,
                          match="--positions: cannot be combined with --input-ids")
        self.assert_fails(2, *base, "--frequency", f, "--positions", 3, "--start", 2 ** 60,
                          match="--start: must be within")
        self.assert_fails(3, *base, "--frequency", ft, "--input-ids",
                          self.npy("bad.npy", np.array([[0, 5]])),
                          match=r"--input-ids: id 5 at \(b 0, s 1\) is not a row of the 5 words")
        self.assert_fails(3, *base, "--frequency", ft, "--input-ids",
                          self.npy("neg.npy", np.array([[-1, 0]])), match="--input-ids: id -1")
        self.assert_fails(3, *base, "--frequency", ft, "--input-ids", self.npy("v.npy", np.array([1, 2])),
                          match=r"--input-ids: expected token ids \[b, s\], got shape \(2\)")
        self.assert_fails(3, *base, "--frequency", f, "--positions", 3, "--amplitude",
                          self.npy("a.npy", np.ones(5)),
                          match=r"--amplitude: shape \(5\) differs from the frequency's \(4\)")
        self.assert_fails(3, *base, "--frequency", self.npy("f3.npy", np.ones((2, 2, 2))),
                          "--positions", 3, match=r"--frequency: expected a vector \[D\] or a table")
        nan = np.ones(4)
        nan[2] = np.nan
        self.assert_fails(3, *base, "--frequency", f, "--positions", 3, "--phase", self.npy("n.npy", nan),
                          match="--phase: value nan \\(flat index 2\\) is not finite")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
