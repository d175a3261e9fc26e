"""`posenc table relative` with asymmetric windows (--left/--right), the q-k sign and
zero beyond the window (--beyond zero), and learned tables gathered (--embeddings),
against HF transformers' own code written out here in torch (float64 tables):

- Wav2Vec2-BERT / SeamlessM4T-v2 `Wav2Vec2BertSelfAttention.forward` (relative_key):
  distance = position_ids_r - position_ids_l clamped to [-left_max_position_embeddings,
  right_max_position_embeddings], distance_embedding(distance + left): index and
  gathered rows equal exactly (left 64 / right 8 as the checkpoints, and others; Q != K);
  the score term einsum("bhld,lrd->bhlr", q, positional_embedding) from posenc's rows
  equals HF's to 1e-12;
- SpeechT5 `SpeechT5RelativePositionalEncoding.forward`: pos_seq = i - j, set to
  -max_length below and max_length - 1 at or above max_length, + max_length, pe_k(pos_seq):
  as --sign q-k --left M --right M-1, equal exactly;
- VITS `VitsAttention._get_relative_embeddings` (zero padding beyond window_size) and
  `_relative_position_to_absolute_position`: posenc's gathered rows equal HF's padded
  relative embeddings at offset j - i exactly, and the relative logits
  matmul(q, rel^T) skewed to absolute positions equal q . rows to 1e-12;
- symmetric Shaw tables unchanged (left = right = M);
- `posenc attention --relative-k/-v` with the same windows (--relative-left/-right,
  --relative-sign, --relative-beyond) against each family's attention in float64:
  Wav2Vec2-BERT's scores (q k^T + einsum(q, positional_embedding)) / sqrt(d), SpeechT5's
  scaled q k^T + q . pe_k[pos_seq], VITS's logits with the skewed relative logits and
  its output with the relative values (_absolute_position_to_relative_position): probs
  and output within 1e-12;
- bad windows and tables: exit 2 or 3 with one line and no output.
"""
import math
import os
import unittest

import numpy as np
import torch
from torch import nn

from posenc_testlib import PosencTestCase


def w2v_bert_positional_embedding(distance_embedding, query_length, key_length, left, right):
    """HF Wav2Vec2BertSelfAttention.forward, position_embeddings_type == "relative_key"."""
    position_ids_l = torch.arange(query_length, dtype=torch.long).view(-1, 1)
    position_ids_r = torch.arange(key_length, dtype=torch.long).view(1, -1)
    distance = position_ids_r - position_ids_l
    distance = torch.clamp(distance, -left, right)
    return distance + left, distance_embedding(distance + left)


def speecht5_relative(pe_k, seq_len, max_length):
    """HF SpeechT5RelativePositionalEncoding.forward (pos_seq and pe_k(pos_seq))."""
    pos_seq = torch.arange(0, seq_len).to(dtype=torch.long)
    pos_seq = pos_seq[:, None] - pos_seq[None, :]
    pos_seq[pos_seq < -max_length] = -max_length
    pos_seq[pos_seq >= max_length] = max_length - 1
    pos_seq = pos_seq + max_length
    return pos_seq, pe_k(pos_seq)


def vits_get_relative_embeddings(relative_embeddings, length, window_size):
    """HF VitsAttention._get_relative_embeddings."""
    pad_length = max(length - (window_size + 1), 0)
    if pad_length > 0:
        relative_embeddings = nn.functional.pad(relative_embeddings, [0, 0, pad_length, pad_length, 0, 0])
    slice_start_position = max((window_size + 1) - length, 0)
    slice_end_position = slice_start_position + 2 * length - 1
    return relative_embeddings[:, slice_start_position:slice_end_position]


def vits_absolute_position_to_relative_position(x):
    """HF VitsAttention._absolute_position_to_relative_position."""
    batch_heads, length, _ = x.size()
    x = nn.functional.pad(x, [0, length - 1, 0, 0, 0, 0])
    x_flat = x.view([batch_heads, length * (2 * length - 1)])
    x_flat = nn.functional.pad(x_flat, [length, 0, 0, 0])
    x_final = x_flat.view([batch_heads, length, 2 * length])[:, :, 1:]
    return x_final


def vits_relative_position_to_absolute_position(x):
    """HF VitsAttention._relative_position_to_absolute_position."""
    batch_heads, length, _ = x.size()
    x = nn.functional.pad(x, [0, 1, 0, 0, 0, 0])
    x_flat = x.view([batch_heads, length * 2 * length])
    x_flat = nn.functional.pad(x_flat, [0, length - 1, 0, 0])
    x_final = x_flat.view([batch_heads, length + 1, 2 * length - 1])
    return x_final[:, :length, length - 1:]


class RelativeWindows(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(9)

    def table(self, *args, dtype=None):
        out = self.path("t.npy")
        self.run_ok("table", "relative", *args, *(("--dtype", dtype) if dtype else ()), "-o", out)
        return np.load(out)

    def test_wav2vec2_bert(self):
        for (q, k), (left, right) in [((100, 100), (64, 8)), ((7, 12), (64, 8)), ((30, 20), (3, 5)),
                                      ((9, 9), (0, 2)), ((5, 5), (0, 0))]:
            emb = nn.Embedding(left + right + 1, 6).double()
            with torch.no_grad():
                emb.weight.copy_(torch.randn(left + right + 1, 6, generator=self.gen, dtype=torch.float64))
            idx, rows = w2v_bert_positional_embedding(emb, q, k, left, right)
            args = ("--q-len", q, "--k-len", k, "--left", left, "--right", right)
            np.testing.assert_array_equal(self.table(*args), idx.numpy(), err_msg=f"{q} {k} {left} {right}")
            path = self.npy("e.npy", emb.weight.detach().numpy())
            got = self.table(*args, "--embeddings", path, dtype="f64")
            np.testing.assert_array_equal(got, rows.detach().numpy())
        # The score term of the last layer shape, from posenc's rows.
        qs = torch.randn(2, 3, rows.shape[0], 6, generator=self.gen, dtype=torch.float64)
        ref = torch.einsum("bhld,lrd->bhlr", qs, rows.detach())
        mine = torch.einsum("bhld,lrd->bhlr", qs, torch.from_numpy(got))
        self.assert_close(mine.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)

    def test_speecht5(self):
        for seq_len, m in [(10, 3), (40, 160), (25, 12), (6, 1)]:
            pe_k = nn.Embedding(2 * m, 4).double()
            with torch.no_grad():
                pe_k.weight.copy_(torch.randn(2 * m, 4, generator=self.gen, dtype=torch.float64))
            idx, rows = speecht5_relative(pe_k, seq_len, m)
            args = ("--q-len", seq_len, "--sign", "q-k", "--left", m, "--right", m - 1)
            np.testing.assert_array_equal(self.table(*args), idx.numpy(), err_msg=f"{seq_len} {m}")
            got = self.table(*args, "--embeddings", self.npy("e.npy", pe_k.weight.detach().numpy()),
                             dtype="f64")
            np.testing.assert_array_equal(got, rows.detach().numpy())

    def test_vits(self):
        for length, window, heads, d in [(12, 4, 2, 8), (3, 4, 1, 4), (5, 4, 2, 4), (9, 1, 2, 3)]:
            emb_rel_k = torch.randn(1, 2 * window + 1, d, generator=self.gen, dtype=torch.float64)
            rel = vits_get_relative_embeddings(emb_rel_k, length, window)[0]  # [2L-1, d]
            args = ("--q-len", length, "--max-distance", window, "--beyond", "zero")
            got = self.table(*args, "--embeddings", self.npy("e.npy", emb_rel_k[0].numpy()),
                             dtype="f64")
            i, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
            np.testing.assert_array_equal(got, rel.numpy()[j - i + length - 1],
                                          err_msg=f"{length} {window}")
            query = torch.randn(heads, length, d, generator=self.gen, dtype=torch.float64)
            ref = vits_relative_position_to_absolute_position(torch.matmul(query, rel.transpose(-2, -1)))
            mine = torch.einsum("hid,ijd->hij", query, torch.from_numpy(got))
            self.assert_close(mine.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)
            # The index: -1 beyond the window, signed by default.
            idx = self.table(*args)
            dist = j - i
            np.testing.assert_array_equal(idx, np.where(np.abs(dist) > window, -1, dist + window))
            if length > window + 1:
                self.assert_fails(2, "table", "relative", *args, "--dtype", "u8", "-o",
                                  self.path("u.npy"), match="--dtype")

    def test_symmetric_unchanged(self):
        i, j = np.meshgrid(np.arange(6), np.arange(9), indexing="ij")
        np.testing.assert_array_equal(self.table("--q-len", 6, "--k-len", 9, "--max-distance", 3),
                                      np.clip(j - i, -3, 3) + 3)
        np.testing.assert_array_equal(
            self.table("--q-len", 6, "--k-len", 9, "--max-distance", 3, "--right", 1),
            np.clip(j - i, -3, 1) + 3)
        # Within the window --beyond zero changes nothing.
        np.testing.assert_array_equal(
            self.table("--q-len", 4, "--max-distance", 3, "--beyond", "zero", "--dtype", "u8"),
            np.clip(j - i, -3, 3)[:4, :4] + 3)

    def test_errors(self):
        out = self.path("x.npy")
        base = ("table", "relative", "--q-len", 4, "-o", out)
        self.assert_fails(2, *base, match="--max-distance: needed")
        self.assert_fails(2, *base, "--left", 3, match="--max-distance: needed")
        self.assert_fails(2, *base, "--left", -1, "--right", 2,
                          match="--left: must be from 0 to 2\\^52, got -1")
        self.assert_fails(2, *base, "--max-distance", 2, "--right", -3,
                          match="--right: must be from 0 to 2\\^52, got -3")
        self.assert_fails(2, *base, "--max-distance", 2, "--beyond", "wrap", match="--beyond")
        self.assert_fails(2, *base, "--max-distance", 2, "--left", 1, "--right", 1,
                          match="--max-distance: not used when")
        self.assert_fails(3, *base, "--left", 2, "--right", 1, "--embeddings",
                          self.npy("e.npy", np.zeros((5, 3))),
                          match=r"--embeddings: expected shape \(4, dim\) for left 2 and right 1, "
                          r"got \(5, 3\)")
        bad = np.zeros((3, 2))
        bad[2, 1] = np.inf
        self.assert_fails(3, *base, "--max-distance", 1, "--embeddings", self.npy("b.npy", bad),
                          match=r"--embeddings: entry \(2, 1\) is not finite")
        self.assert_fails(2, *base, "--max-distance", -2, "--embeddings", self.path("none.npy"),
                          match="--max-distance")  # the window before the file
        self.assert_fails(2, *base, "--max-distance", 1, "--embeddings",
                          self.npy("e.npy", np.zeros((3, 2))), "--dtype", "i64", match="--dtype")
        self.assertFalse(os.path.exists(out))


class AttentionWindows(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(21)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64)

    def attend(self, q, k, v, *args):
        out = self.path("att.h5")
        if os.path.exists(out):
            os.remove(out)
        self.run_ok("attention", "-q", self.npy("q.npy", q.numpy()), "-k", self.npy("k.npy", k.numpy()),
                    "-v", self.npy("v.npy", v.numpy()), *args, "--emit", "probs,output", "--dtype",
                    "f64", "-o", out)
        import h5py
        with h5py.File(out, "r") as f:
            return f["/probs"][...], f["/output"][...]

    def test_wav2vec2_bert(self):
        b, h, s, d, left, right = 2, 3, 80, 8, 64, 8
        q, k, v = self.randn(b, h, s, d), self.randn(b, h, s, d), self.randn(b, h, s, d)
        emb = nn.Embedding(left + right + 1, d).double()
        with torch.no_grad():
            emb.weight.copy_(self.randn(left + right + 1, d))
        # Wav2Vec2BertSelfAttention.forward with position_embeddings_type "relative_key".
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        _, positional_embedding = w2v_bert_positional_embedding(emb, s, s, left, right)
        rel = torch.einsum("bhld,lrd->bhlr", q, positional_embedding.detach())
        probs = torch.softmax(scores + rel / math.sqrt(d), dim=-1)
        out = torch.matmul(probs, v)
        got_p, got_o = self.attend(q, k, v, "--relative-k", self.npy("e.npy", emb.weight.detach().numpy()),
                                   "--relative-left", left, "--relative-right", right)
        self.assert_close(got_p, probs.numpy(), rtol=1e-12, atol=1e-15)
        self.assert_close(got_o, out.numpy(), rtol=1e-12, atol=1e-13)

    def test_speecht5(self):
        h, s, d, m = 4, 30, 8, 10
        q, k, v = self.randn(1, h, s, d), self.randn(1, h, s, d), self.randn(1, h, s, d)
        pe_k = nn.Embedding(2 * m, d).double()
        with torch.no_grad():
            pe_k.weight.copy_(self.randn(2 * m, d))
        _, position_bias = speecht5_relative(pe_k, s, m)
        # SpeechT5Attention: scaled queries, bmm with keys, + q . position_bias.
        qs = q[0] * d ** -0.5
        attn = torch.bmm(qs, k[0].transpose(1, 2))
        reshape_q = qs.transpose(0, 1)
        rel_pos_bias = torch.matmul(reshape_q, position_bias.detach().transpose(-2, -1)).transpose(0, 1)
        probs = torch.softmax(attn + rel_pos_bias, dim=-1)
        out = torch.bmm(probs, v[0])
        got_p, got_o = self.attend(q, k, v, "--relative-k", self.npy("e.npy", pe_k.weight.detach().numpy()),
                                   "--relative-sign", "q-k", "--relative-left", m,
                                   "--relative-right", m - 1)
        self.assert_close(got_p[0], probs.numpy(), rtol=1e-12, atol=1e-15)
        self.assert_close(got_o[0], out.numpy(), rtol=1e-12, atol=1e-13)

    def test_vits(self):
        h, s, d, window = 2, 11, 6, 4
        q, k, v = self.randn(1, h, s, d), self.randn(1, h, s, d), self.randn(1, h, s, d)
        emb_rel_k, emb_rel_v = self.randn(1, 2 * window + 1, d), self.randn(1, 2 * window + 1, d)
        # VitsAttention.forward (no mask): relative keys and values, zero beyond the window.
        qs = q[0] * d ** -0.5
        attn_weights = torch.bmm(qs, k[0].transpose(1, 2))
        key_relative_embeddings = vits_get_relative_embeddings(emb_rel_k, s, window)
        relative_logits = torch.matmul(qs, key_relative_embeddings.transpose(-2, -1))
        attn_weights = attn_weights + vits_relative_position_to_absolute_position(relative_logits)
        probs = torch.softmax(attn_weights, dim=-1)
        out = torch.bmm(probs, v[0])
        value_relative_embeddings = vits_get_relative_embeddings(emb_rel_v, s, window)
        relative_weights = vits_absolute_position_to_relative_position(probs)
        out = out + torch.matmul(relative_weights, value_relative_embeddings)
        got_p, got_o = self.attend(q, k, v, "--relative-k", self.npy("rk.npy", emb_rel_k[0].numpy()),
                                   "--relative-v", self.npy("rv.npy", emb_rel_v[0].numpy()),
                                   "--max-distance", window, "--relative-beyond", "zero")
        self.assert_close(got_p[0], probs.numpy(), rtol=1e-12, atol=1e-15)
        self.assert_close(got_o[0], out.numpy(), rtol=1e-12, atol=1e-13)
        # Clamping instead (the edge rows beyond the window) is a different attention.
        got_c, _ = self.attend(q, k, v, "--relative-k", self.path("rk.npy"), "--relative-v",
                               self.path("rv.npy"), "--max-distance", window)
        self.assertGreater(np.abs(got_c[0] - probs.numpy()).max(), 1e-3)

    def test_errors(self):
        q = self.npy("q.npy", np.zeros((1, 2, 5, 4)))
        e = self.npy("e.npy", np.zeros((73, 4)))
        base = ("attention", "-q", q, "-k", q, "-v", q, "-o", self.path("o.npy"), "--emit", "output")
        self.assert_fails(2, *base, "--relative-left", 64, "--relative-right", 8,
                          match="need --relative-k, --relative-v or --relative-proj")
        self.assert_fails(2, *base, "--relative-k", e, "--relative-left", 64,
                          match="--relative-left/--relative-right: give both")
        self.assert_fails(2, *base, "--relative-k", e, "--relative-left", -1, "--relative-right", 8,
                          match="--relative-left: must be from 0 to 2\\^30, got -1")
        self.assert_fails(2, *base, "--relative-k", e, "--relative-left", 64, "--relative-right", 8,
                          "--max-distance", 3, match="--max-distance: cannot be combined")
        self.assert_fails(2, *base, "--relative-k", e, "--relative-beyond", "wrap")
        self.assert_fails(3, *base, "--relative-k", e, "--relative-left", 60, "--relative-right", 8,
                          match="--relative-k: 73 rows, but left 60 and right 8 need 69")
        self.assertFalse(os.path.exists(self.path("o.npy")))


if __name__ == "__main__":
    unittest.main()
