"""`posenc analyze` against independent numpy / torch references.

- decay: the RoFormer bound (1/n) Σ_{j=1..n} |Σ_{k<j} e^{i m θ_k}| and the mean
  (1/n) Σ_k cos(m θ_k), evaluated with numpy's complex exponential and cumsum, and the
  mean also as torch's average q·k over random unit vectors rotated by torch RoPE;
  rtol 1e-12 (the numpy form; the Monte-Carlo mean within its sampling error).
- wavelengths: 2π/θ and L θ / 2π from the HF-formula frequencies of reference_rope,
  rtol 1e-12.
- relative: scores of torch-rotated q and k at shifted positions; posenc's deviations
  and numpy's both lie below the documented rounding tolerance 4 ε (A + D).
- attention: entropy and attended distance computed by torch from the probabilities,
  rtol 1e-12 for f64 input.
"""
import json
import math
import unittest

import h5py
import numpy as np
import torch

from posenc_testlib import PosencTestCase
from reference_rope_freqs import default_inv, dynamic_inv, linear_inv, llama3_inv, yarn


def decay_reference(inv, distances):
    m = np.asarray(distances, dtype=np.float64)[:, None]
    e = np.exp(1j * m * inv[None, :])
    bound = np.abs(np.cumsum(e, axis=1)).mean(axis=1)
    mean = np.cos(m * inv[None, :]).mean(axis=1)
    return bound, mean


def rotate_neox(x, pos, inv):
    """HF rotate_half RoPE in float64 torch: x [..., s, d], positions [s]."""
    ang = torch.tensor(pos, dtype=torch.float64)[:, None] * torch.tensor(inv)[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


class Decay(PosencTestCase):
    def load(self, out):
        with h5py.File(out, "r") as f:
            ds = f["decay"]
            return ds[()], ds.attrs["columns"].split(",")

    def test_three_bases_match_numpy(self):
        out = self.path("d.h5")
        self.run_ok("analyze", "decay", "--dim", "128", "--bases", "10000,500000,1000000",
                    "--max-distance", "3000", "--step", "3", "-o", out + ":/decay")
        t, cols = self.load(out)
        self.assertEqual(cols, ["distance"] + [f"{q}[base={b}]" for b in
                                                 (10000, 500000, 1000000)
                                                 for q in ("bound", "mean_qk")])
        dist = np.arange(0, 3001, 3)
        np.testing.assert_array_equal(t[:, 0], dist)
        for k, base in enumerate((10000.0, 500000.0, 1000000.0)):
            bound, mean = decay_reference(default_inv(base, 128), dist)
            self.assert_close(t[:, 1 + 2 * k], bound, 1e-12, 1e-13, f"bound base {base}")
            self.assert_close(t[:, 2 + 2 * k], mean, 1e-12, 1e-13, f"mean base {base}")
        # The bound starts at (n + 1) / 2 and the mean at 1 (m = 0).
        self.assertAlmostEqual(t[0, 1], 32.5, places=12)
        self.assertAlmostEqual(t[0, 2], 1.0, places=14)

    def test_mean_is_average_qk_of_random_unit_vectors(self):
        # torch: q = k a random unit vector, q rotated at 0, k at m; the average of q.k
        # over many vectors approaches (1/n) Σ cos(m θ).
        out = self.path("d.npy")
        self.run_ok("analyze", "decay", "--dim", "64", "--max-distance", "200",
                    "--emit", "mean-qk", "-o", out)
        t = np.load(out)
        self.assertEqual(t.shape, (201, 2))
        g = torch.Generator().manual_seed(5)
        v = torch.randn(20000, 1, 64, generator=g, dtype=torch.float64)
        v = v / v.norm(dim=-1, keepdim=True)
        inv = default_inv(10000.0, 64)
        for m in (0, 1, 7, 50, 200):
            q = rotate_neox(v, [0], inv)
            k = rotate_neox(v, [m], inv)
            mc = float((q * k).sum(-1).mean())
            # Each q.k lies in [-1, 1]: the mean of 20000 is within ~4/sqrt(20000).
            self.assertLess(abs(mc - t[m, 1]), 0.03, f"m={m}")

    def test_scaling_and_hf_config(self):
        cfg = {"rope_theta": 500000.0, "head_dim": 128, "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}}
        path = self.path("config.json")
        with open(path, "w") as fh:
            json.dump(cfg, fh)
        out = self.path("d.npy")
        self.run_ok("analyze", "decay", "--hf-config", path, "--max-distance", "400",
                    "--emit", "bound", "-o", out)
        t = np.load(out)
        bound, _ = decay_reference(llama3_inv(500000.0, 128, 8.0, 8192), np.arange(401))
        self.assert_close(t[:, 1], bound, 1e-12, 1e-13)
        # yarn from flags, partial rotary: the bound uses the rotary pairs only.
        self.run_ok("analyze", "decay", "--dim", "64", "--partial", "0.5", "--scaling", "yarn",
                    "--factor", "4", "--original-max-pos", "2048", "--max-distance", "300",
                    "-o", out)
        t = np.load(out)
        inv, _ = yarn(10000.0, 32, 4.0, 2048)
        bound, mean = decay_reference(inv, np.arange(301))
        self.assert_close(t[:, 1], bound, 1e-12, 1e-13)
        self.assert_close(t[:, 2], mean, 1e-12, 1e-13)

    def test_text_output_without_o(self):
        p = self.run_ok("analyze", "decay", "--dim", "8", "--max-distance", "2")
        lines = p.stdout.decode().splitlines()
        self.assertEqual(lines[0].split(), ["distance", "bound[base=10000]", "mean_qk[base=10000]"])
        bound, mean = decay_reference(default_inv(10000.0, 8), [0, 1, 2])
        for m in range(3):
            vals = [float(x) for x in lines[1 + m].split()]
            self.assertEqual(vals[0], m)
            self.assertAlmostEqual(vals[1], bound[m], places=13)
            self.assertAlmostEqual(vals[2], mean[m], places=13)

    def test_thread_count_does_not_change_bytes(self):
        outs = []
        for j in ("1", "2"):
            out = self.path(f"d{j}.npy")
            self.run_ok("-j", j, "analyze", "decay", "--dim", "64", "--bases", "100,10000",
                        "--max-distance", "5000", "-o", out)
            with open(out, "rb") as fh:
                outs.append(fh.read())
        self.assertEqual(outs[0], outs[1])

    def test_bad_input(self):
        self.assert_fails(2, "analyze", "decay", "--max-distance", "10", match="--dim")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--bases", "1e4,-3",
                          match="--bases")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--step", "0", match="--step")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--emit", "bounds",
                          match="--emit")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--variants", "yarn",
                          match="--scaling yarn: needs")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--position-ids", "x.npy",
                          match="--position-ids")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "--max-distance", "-1",
                          match="--max-distance")
        self.assert_fails(2, "analyze", "decay", "--dim", "8", "-o", "-", "--plot", "-",
                          match="standard output")


class Wavelengths(PosencTestCase):
    def test_variants_match_hf_formulas(self):
        out = self.path("w.h5")
        self.run_ok("analyze", "wavelengths", "--dim", "128", "--base", "500000",
                    "--factor", "8", "--original-max-pos", "8192", "-o", out + ":/w")
        with h5py.File(out, "r") as f:
            t = f["w"][()]
            cols = f["w"].attrs["columns"].split(",")
            self.assertEqual(f["w"].attrs["trained_context"], 8192)
            self.assertEqual(f["w"].attrs["target_context"], 65536)
        names = ["none", "linear", "dynamic", "yarn", "llama3"]
        self.assertEqual(cols[0], "pair")
        self.assertEqual(cols[1:], [f"{q}[{n}]" for n in names
                                    for q in ("wavelength", "rotations_trained",
                                              "rotations_target")])
        np.testing.assert_array_equal(t[:, 0], np.arange(64))
        refs = {"none": default_inv(500000.0, 128),
                "linear": linear_inv(500000.0, 128, 8.0),
                "dynamic": dynamic_inv(500000.0, 128, 8.0, 8192, 65536),
                "yarn": yarn(500000.0, 128, 8.0, 8192)[0],
                "llama3": llama3_inv(500000.0, 128, 8.0, 8192)}
        for k, n in enumerate(names):
            inv = refs[n]
            self.assert_close(t[:, 1 + 3 * k], 2 * math.pi / inv, 1e-12, 0, n)
            self.assert_close(t[:, 2 + 3 * k], 8192 * inv / (2 * math.pi), 1e-12, 0, n)
            self.assert_close(t[:, 3 + 3 * k], 65536 * inv / (2 * math.pi), 1e-12, 0, n)

    def test_target_and_variant_choice(self):
        out = self.path("w.npy")
        self.run_ok("analyze", "wavelengths", "--dim", "16", "--original-max-pos", "100",
                    "--target-len", "1000", "--variants", "none", "--bases", "10,10000",
                    "-o", out)
        t = np.load(out)
        self.assertEqual(t.shape, (8, 7))
        for k, base in enumerate((10.0, 10000.0)):
            inv = default_inv(base, 16)
            self.assert_close(t[:, 1 + 3 * k], 2 * math.pi / inv, 1e-12, 0)
            self.assert_close(t[:, 3 + 3 * k], 1000 * inv / (2 * math.pi), 1e-12, 0)

    def test_needs_trained_length(self):
        self.assert_fails(2, "analyze", "wavelengths", "--dim", "16", match="original-max-pos")


class Relative(PosencTestCase):
    def make(self, b=2, hq=4, hk=2, s=12, d=32, seed=1):
        rng = np.random.default_rng(seed)
        q = rng.standard_normal((b, hq, s, d))
        k = rng.standard_normal((b, hk, s, d))
        np.save(self.path("q.npy"), q)
        np.save(self.path("k.npy"), k)
        return q, k

    def reference(self, q, k, inv, shifts, start=0):
        """Max |Δ score| / (|q||k|) per diagonal i - j, torch float64 rotations."""
        tq, tk = torch.tensor(q), torch.tensor(k)
        group = q.shape[1] // k.shape[1]
        tk = tk.repeat_interleave(group, dim=1)
        s = q.shape[2]
        pos = np.arange(s) + start
        q0, k0 = rotate_neox(tq, pos, inv), rotate_neox(tk, pos, inv)
        s0 = q0 @ k0.transpose(-1, -2)
        norm = q0.norm(dim=-1)[..., :, None] * k0.norm(dim=-1)[..., None, :]
        dev = torch.zeros_like(s0)
        for t in shifts:
            st = rotate_neox(tq, pos + t, inv) @ rotate_neox(tk, pos + t, inv).transpose(-1, -2)
            dev = torch.maximum(dev, (st - s0).abs() / norm)
        dev = dev.amax(dim=(0, 1)).numpy()
        return np.array([np.diagonal(dev, offset=-o).max() for o in range(-(s - 1), s)])

    def test_passes_on_real_qk_with_grouped_heads(self):
        q, k = self.make()
        out = self.path("rel.h5")
        p = self.run_ok("analyze", "relative", "-q", self.path("q.npy"), "-k",
                        self.path("k.npy"), "-o", out + ":/rel")
        line = p.stdout.decode()
        self.assertRegex(line, r"^relative: pass: ")
        with h5py.File(out, "r") as f:
            t = f["rel"][()]
            tol = f["rel"].attrs["tolerance"]
        self.assertEqual(t.shape, (23, 3))
        np.testing.assert_array_equal(t[:, 0], np.arange(-11, 12))
        # 4 ε (A + D): A = (10000 + 11) x θ_0 = 10011, D = 32.
        self.assertAlmostEqual(tol, 4 * 2.0 ** -53 * (10011 + 32), delta=1e-20)
        ref = self.reference(q, k, default_inv(10000.0, 32), [1, 100, 10000])
        self.assertTrue(np.all(t[:, 2] <= tol))
        self.assertTrue(np.all(ref <= tol))
        self.assert_close(t[:, 2], ref, 0, tol)
        # The deviations are rounding, not zero: the check does compare something.
        self.assertGreater(t[:, 2].max(), 0)

    def test_thread_count_does_not_change_bytes(self):
        self.make(b=2, hq=4, hk=4, s=40, d=16, seed=4)
        outs = []
        for j in ("1", "2"):
            out = self.path(f"r{j}.npy")
            self.run_ok("-j", j, "analyze", "relative", "-q", self.path("q.npy"), "-k",
                        self.path("k.npy"), "--precision", "f32", "-o", out)
            with open(out, "rb") as fh:
                outs.append(fh.read())
        self.assertEqual(outs[0], outs[1])

    def test_f32_arithmetic_and_failure_exit(self):
        self.make(b=1, hq=2, hk=2, s=8, d=16)
        args = ("analyze", "relative", "-q", self.path("q.npy"), "-k", self.path("k.npy"))
        p = self.run_ok(*args, "--precision", "f32", "--shifts", "5000")
        m = float(p.stdout.decode().split("= ")[1].split()[0])
        # f32 angles: visible rounding, of the order ε32 x 5000.
        self.assertGreater(m, 1e-6)
        self.assertLess(m, 4 * 2.0 ** -24 * (5007 + 16))
        # A tolerance below the rounding fails the check: exit 1, "FAIL".
        from posenc_testlib import run
        p = run(*args, "--precision", "f32", "--shifts", "5000", "--tol", "1e-9")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("relative: FAIL", p.stdout.decode())

    def test_bad_input(self):
        self.make(b=1, hq=3, hk=2, s=4, d=8)
        q, k = self.path("q.npy"), self.path("k.npy")
        self.assert_fails(3, "analyze", "relative", "-q", q, "-k", k, match="heads")
        self.make(b=1, hq=2, hk=2, s=4, d=8)
        self.assert_fails(2, "analyze", "relative", "-q", q, "-k", k, "--shifts", "1,-2",
                          match="--shifts")
        self.assert_fails(2, "analyze", "relative", "-q", q, "-k", k, "--tol", "0",
                          match="--tol")
        self.assert_fails(2, "analyze", "relative", "-q", q, "-k", k, "--cu-seqlens", q,
                          match="--cu-seqlens")
        self.assert_fails(3, "analyze", "relative", "-q", self.path("none.npy"), "-k", k)


class AttentionStats(PosencTestCase):
    def reference(self, p, sq, sk):
        """torch: per head mean over (batch, query) of entropy and Σ p |i' - j|."""
        t = torch.tensor(p, dtype=torch.float64)
        valid = ~torch.isnan(t).all(-1) & (torch.nan_to_num(t).sum(-1) > 0)
        t = torch.nan_to_num(t)
        ent = -(torch.where(t > 0, t * t.log(), torch.zeros_like(t))).sum(-1)
        i = torch.arange(sq, dtype=torch.float64)[:, None] + (sk - sq)
        j = torch.arange(sk, dtype=torch.float64)[None, :]
        dist = (t * (i - j).abs()).sum(-1)
        w = valid.to(torch.float64)
        n = w.sum(dim=(0, 2))
        return ((ent * w).sum(dim=(0, 2)) / n).numpy(), ((dist * w).sum(dim=(0, 2)) / n).numpy(), n

    def test_probs_from_causal_softmax(self):
        g = torch.Generator().manual_seed(2)
        b, h, sq, sk = 2, 3, 5, 9
        logits = torch.randn(b, h, sq, sk, generator=g, dtype=torch.float64) * 2
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        mask[1, :] = False  # a fully masked query row: softmax gives NaN, skipped
        p = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1).numpy()
        np.save(self.path("p.npy"), p)
        out = self.path("s.npy")
        self.run_ok("analyze", "attention", self.path("p.npy"), "-o", out)
        t = np.load(out)
        ent, dist, n = self.reference(p, sq, sk)
        self.assertEqual(t.shape, (3, 4))
        np.testing.assert_array_equal(t[:, 0], np.arange(3))
        self.assert_close(t[:, 1], ent, 1e-12, 1e-14)
        self.assert_close(t[:, 2], dist, 1e-12, 1e-14)
        np.testing.assert_array_equal(t[:, 3], n.numpy())
        self.assertEqual(t[0, 3], b * (sq - 1))

    def test_ranks_and_f16(self):
        g = torch.Generator().manual_seed(3)
        p = torch.softmax(torch.randn(4, 6, 6, generator=g), -1)
        np.save(self.path("p3.npy"), p.numpy().astype(np.float16))
        out = self.path("s.npy")
        self.run_ok("analyze", "attention", self.path("p3.npy"), "-o", out)
        t = np.load(out)
        ent, dist, _ = self.reference(p.numpy().astype(np.float16).astype(np.float64)[None],
                                      6, 6)
        self.assert_close(t[:, 1], ent, 1e-12, 1e-14)
        self.assert_close(t[:, 2], dist, 1e-12, 1e-14)
        np.save(self.path("p2.npy"), p.numpy()[0].astype(np.float64))
        self.run_ok("analyze", "attention", self.path("p2.npy"), "-o", out)
        self.assertEqual(np.load(out).shape, (1, 4))

    def test_bad_probabilities(self):
        good = np.full((2, 4, 4), 0.25)
        for name, bad, pat in [
            ("neg", lambda a: a.__setitem__((1, 2, 0), -0.25), r"row \(1, 2\) holds -0.25"),
            ("sum", lambda a: a.__setitem__((0, 3, 1), 0.2), r"row \(0, 3\) sums to 0.95"),
            ("nan", lambda a: a.__setitem__((0, 0, 2), np.nan), r"partly NaN"),
        ]:
            a = good.copy()
            bad(a)
            np.save(self.path(name + ".npy"), a)
            self.assert_fails(3, "analyze", "attention", self.path(name + ".npy"), match=pat)
        np.save(self.path("int.npy"), np.ones((2, 2), np.int32))
        self.assert_fails(3, "analyze", "attention", self.path("int.npy"), match="float")
        np.save(self.path("r5.npy"), np.ones((1, 1, 1, 1, 1)))
        self.assert_fails(3, "analyze", "attention", self.path("r5.npy"), match=r"got \(1, 1, 1, 1, 1\)")


if __name__ == "__main__":
    unittest.main()
