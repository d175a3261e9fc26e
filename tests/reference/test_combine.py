"""`posenc combine` (split-KV combine) against a torch float64 reference and the unsplit run.

Claims (posenc-combine(1)): lse = logsumexp_i(lse_i), out = sum_i exp(lse_i - lse) out_i
over the split axis, as flash_attn_combine and FlashInfer's merge_state define it; a split
with lse -inf contributes nothing (its out values are not read, NaN included); where every
split is -inf, out is 0 and lse -inf; float64 arithmetic rounded once to the output dtype;
lse_partial laid out as out_partial without d ("sh", flash_attn_combine's [splits, b, s,
h]) or with its last two axes swapped ("hs", softmax_lse's [splits, b, h, s]); bad input is
exit 3 naming the file, nothing written.

References: the merge written here in torch float64 from the definition (what
flash-attn's attention_combine_ref computes, with its NaN/inf scale zeroed), and `posenc
attention` over all the keys at once, which the merged splits must equal to 1e-13.
"""
import os
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase


def combine_ref(out_partial, lse_partial):
    """The merge over axis 0 in torch float64: out_partial [splits, ..., d], lse_partial
    [splits, ...] (out's axes without d)."""
    o = torch.tensor(out_partial, dtype=torch.float64)
    l = torch.tensor(lse_partial, dtype=torch.float64)
    lse = torch.logsumexp(l, dim=0)  # -inf where every split is -inf
    scale = torch.exp(l - lse)
    scale = torch.where(torch.isfinite(scale), scale, torch.zeros_like(scale))
    # Splits that contribute nothing are not read (they may hold NaN).
    o = torch.where((scale > 0).unsqueeze(-1), o, torch.zeros_like(o))
    return (scale.unsqueeze(-1) * o).sum(0).numpy(), lse.numpy()


def partials(rng, splits=4, b=2, s=5, h=3, d=8):
    """Random partials with empty splits: the last splits of batch entry 0 are -inf (their
    out is NaN), and one position has every split -inf."""
    o = rng.standard_normal((splits, b, s, h, d))
    lse = rng.standard_normal((splits, b, s, h)) * 4
    lse[splits // 2:, 0] = -np.inf
    o[splits // 2:, 0] = np.nan
    lse[:, 1, 2, 1] = -np.inf
    return o, lse


class CombineReference(PosencTestCase):
    def combine(self, o, lse, *extra, tag="c"):
        op, lp = self.npy(f"{tag}_o.npy", o), self.npy(f"{tag}_l.npy", lse)
        out, lse_out = self.path(f"{tag}_out.npy"), self.path(f"{tag}_lse.npy")
        self.run_ok("combine", op, lp, "-o", out, "--lse-output", lse_out, *extra)
        return np.load(out), np.load(lse_out)

    def test_equals_torch_float64_reference(self):
        rng = np.random.default_rng(1)
        o, lse = partials(rng)
        got_o, got_l = self.combine(o, lse)
        ref_o, ref_l = combine_ref(o, lse)
        self.assertEqual(got_o.dtype, np.float64)
        self.assertEqual(got_l.dtype, np.float64)
        self.assertEqual(got_o.shape, (2, 5, 3, 8))
        self.assertEqual(got_l.shape, (2, 5, 3))
        np.testing.assert_allclose(got_o, ref_o, rtol=0, atol=1e-13)
        self.assertTrue(np.all(got_o[1, 2, 1] == 0))
        self.assertEqual(got_l[1, 2, 1], -np.inf)
        np.testing.assert_allclose(got_l, ref_l, rtol=1e-15, atol=1e-14)

    def test_rounded_once_to_f32(self):
        rng = np.random.default_rng(2)
        o, lse = partials(rng)
        got_o, got_l = self.combine(o.astype(np.float32), lse.astype(np.float32), tag="f")
        self.assertEqual(got_o.dtype, np.float32)
        self.assertEqual(got_l.dtype, np.float32)
        ref_o, ref_l = combine_ref(o.astype(np.float32), lse.astype(np.float32))
        # Float64 arithmetic is within 1e-13 of the exact value: the result is the
        # reference rounded once, except within that margin of a rounding boundary.
        for got, ref in ((got_o, ref_o), (got_l, ref_l)):
            fin = np.isfinite(ref)
            np.testing.assert_array_equal(np.isfinite(got), fin)
            r = ref[fin]
            lo = (r - 1e-13 * np.abs(r) - 1e-300).astype(np.float32)
            hi = (r + 1e-13 * np.abs(r) + 1e-300).astype(np.float32)
            g = got[fin]
            self.assertTrue(np.all((g == lo) | (g == hi)), "not the reference rounded once")
        # --dtype f64 gives the float64 result.
        o64, _ = self.combine(o.astype(np.float32), lse.astype(np.float32), "--dtype", "f64",
                              tag="g")
        np.testing.assert_allclose(o64, ref_o, rtol=0, atol=1e-13)

    def test_axis_and_hs_layout(self):
        rng = np.random.default_rng(3)
        o, lse = partials(rng)
        ref_o, ref_l = combine_ref(o, lse)
        # Split axis 1: [b, splits, s, h, d] with lse [b, splits, s, h].
        got_o, got_l = self.combine(np.moveaxis(o, 0, 1), np.moveaxis(lse, 0, 1), "--axis", "1",
                                    tag="a")
        np.testing.assert_allclose(got_o, ref_o, rtol=0, atol=1e-13)
        np.testing.assert_allclose(got_l, ref_l, rtol=1e-15, atol=1e-14)
        got_o, _ = self.combine(np.moveaxis(o, 0, 1), np.moveaxis(lse, 0, 1), "--axis", "-4",
                                tag="n")
        np.testing.assert_allclose(got_o, ref_o, rtol=0, atol=1e-13)
        # hs: lse [splits, b, h, s]; the merged lse comes back [b, h, s].
        got_o, got_l = self.combine(o, np.swapaxes(lse, -1, -2), "--lse-layout", "hs", tag="h")
        np.testing.assert_allclose(got_o, ref_o, rtol=0, atol=1e-13)
        np.testing.assert_allclose(got_l, np.swapaxes(ref_l, -1, -2), rtol=1e-15, atol=1e-14)

    def test_equals_unsplit_attention(self):
        """Attention over key blocks (one of them empty), merged, is attention over all keys."""
        rng = np.random.default_rng(4)
        b, sq, sk, h, d, dv = 2, 7, 23, 4, 16, 8
        q = rng.standard_normal((b, sq, h, d))
        k = rng.standard_normal((b, sk, h, d)) * 2
        v = rng.standard_normal((b, sk, h, dv))
        qp = self.npy("q.npy", q)

        def attend(tag, kk, vv):
            out = self.path(f"{tag}_{{}}.npy")
            self.run_ok("attention", "-q", qp, "-k", self.npy(f"{tag}_k.npy", kk), "-v",
                        self.npy(f"{tag}_v.npy", vv), "--axes", "bshd", "--emit", "output,lse",
                        "-o", out)
            return np.load(out.format("output")), np.load(out.format("lse"))

        full_o, full_l = attend("full", k, v)
        cuts = [0, 9, 9, 16, sk]  # the second block is empty
        outs, lses = [], []
        for i in range(len(cuts) - 1):
            a, z = cuts[i], cuts[i + 1]
            if a == z:
                outs.append(np.full((b, sq, h, dv), np.nan))
                lses.append(np.full((b, h, sq), -np.inf))
                continue
            po, pl = attend(f"s{i}", k[:, a:z], v[:, a:z])
            outs.append(po)
            lses.append(pl)
        o, lse = np.stack(outs), np.stack(lses)  # [splits, b, s, h, dv], [splits, b, h, s]
        got_o, got_l = self.combine(o, lse, "--lse-layout", "hs", tag="u")
        self.assertEqual(got_o.shape, full_o.shape)
        self.assertEqual(got_l.shape, full_l.shape)
        np.testing.assert_allclose(got_o, full_o, rtol=0, atol=1e-13)
        np.testing.assert_allclose(got_l, full_l, rtol=0, atol=1e-13)
        # The same partials in flash_attn_combine's layout [splits, b, s, h].
        got_o, _ = self.combine(o, np.swapaxes(lse, -1, -2), tag="v")
        np.testing.assert_allclose(got_o, full_o, rtol=0, atol=1e-13)

    def test_every_split_empty(self):
        o = np.full((3, 2, 4), np.nan)
        lse = np.full((3, 2), -np.inf)
        got_o, got_l = self.combine(o, lse)
        np.testing.assert_array_equal(got_o, np.zeros((2, 4)))
        np.testing.assert_array_equal(got_l, np.full(2, -np.inf))

    def test_hdf5_outputs_in_one_file(self):
        rng = np.random.default_rng(5)
        o, lse = partials(rng)
        h5 = self.path("m.h5")
        self.run_ok("combine", self.npy("o.npy", o), self.npy("l.npy", lse), "-o", h5 + ":/out",
                    "--lse-output", h5 + ":/lse")
        import h5py
        with h5py.File(h5, "r") as f:
            ref_o, ref_l = combine_ref(o, lse)
            np.testing.assert_allclose(f["out"][()], ref_o, rtol=0, atol=1e-13)
            np.testing.assert_allclose(f["lse"][()], ref_l, rtol=1e-15, atol=1e-14)


class CombineErrors(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(6)
        self.o, self.lse = partials(rng)
        self.out = self.path("out.npy")
        self.lse_out = self.path("lse.npy")

    def fails(self, status, o, lse, *extra, match=None):
        op, lp = self.npy("bad_o.npy", o), self.npy("bad_l.npy", lse)
        self.assert_fails(status, "combine", op, lp, "-o", self.out, "--lse-output",
                          self.lse_out, *extra, match=match)
        self.assertFalse(os.path.exists(self.out))
        self.assertFalse(os.path.exists(self.lse_out))
        self.assertEqual([f for f in os.listdir(self.tmp) if not f.startswith("bad_")], [])

    def test_shape_mismatch(self):
        self.fails(3, self.o, self.lse[:, :, :4], match=r"bad_l\.npy: has shape \(4, 2, 4, 3\), "
                   r"expected \(4, 2, 5, 3\)")
        self.fails(3, self.o, self.lse[:3], match=r"bad_l\.npy: has shape")
        # The other layout is named when the shape fits it.
        self.fails(3, self.o, np.swapaxes(self.lse, -1, -2), match=r"matches the hs layout")
        self.fails(3, self.o[:, 0, 0, 0], self.lse[:, 0, 0, 0], "--lse-layout", "hs",
                   match=r"bad_o\.npy: has shape \(4, 8\); expected at least 4 axes")

    def test_nan_and_inf_lse(self):
        lse = self.lse.copy()
        lse[1, 1, 3, 2] = np.nan
        self.fails(3, self.o, lse, match=r"bad_l\.npy: NaN at \(1, 1, 3, 2\)")
        lse[1, 1, 3, 2] = np.inf
        self.fails(3, self.o, lse, match=r"bad_l\.npy: \+inf at \(1, 1, 3, 2\)")

    def test_nonfinite_out_in_a_contributing_split(self):
        o = self.o.copy()
        o[0, 1, 0, 0, 5] = np.inf
        self.fails(3, o, self.lse, match=r"bad_o\.npy: \+inf at \(0, 1, 0, 0, 5\)")

    def test_dtypes(self):
        self.fails(3, np.nan_to_num(self.o).astype(np.int32), self.lse, match=r"bad_o\.npy: expected a float")
        self.fails(2, self.o, self.lse, "--dtype", "i32")

    def test_axis_out_of_range(self):
        self.fails(2, self.o, self.lse, "--axis", "4", match=r"--axis: 4 is not a split axis")
        self.fails(2, self.o, self.lse, "--axis", "-6", match=r"--axis: -6")
        self.fails(2, self.o, np.swapaxes(self.lse, -1, -2), "--lse-layout", "hs", "--axis", "2",
                   match=r"--axis: 2")

    def test_same_output_twice(self):
        self.assert_fails(2, "combine", self.npy("o.npy", self.o), self.npy("l.npy", self.lse),
                          "-o", self.out, "--lse-output", self.out)
        self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
