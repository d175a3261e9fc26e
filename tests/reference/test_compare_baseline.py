"""`posenc compare KERNEL REF --baseline PT`: flash-attn's verdict on planted kernels.

Claims (posenc-compare(1), FLASH-ATTN'S VERDICT): pass (exit 0) when
max|KERNEL - REF| <= R * max|PT - REF| + atol, R = --factor (default 2), atol =
2 * max|REF + 0.3 - 0.3 - REF| computed in REF's dtype as torch computes it (FA's
fwd_atol in hopper/test_flash_attn.py), differences in the tensors' promoted dtype;
exit 1 otherwise; both errors and the bound printed.

References: the atol as FA's test writes it, in torch on the tensor's own dtype; the
verdict recomputed here in numpy (float16 arithmetic as torch does it: float32, then
rounded), on a kernel that passes (1.5 times the baseline's error) and one that fails by
3 times the bound.
"""
import json
import re
import unittest

import numpy as np
import torch

from posenc_testlib import PosencTestCase, run

DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
      "f64": torch.float64}


def fa_atol_torch(ref):
    """FA's fwd_atol, verbatim in meaning: torch arithmetic in ref's dtype."""
    return 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()


def fa_atol_numpy_f16(ref):
    """The same for float16 in numpy, with torch's order of roundings: each operation in
    float32 with 0.3 as a float32, the result rounded to float16."""
    f32, f16 = np.float32, np.float16
    up = (ref.astype(f32) + f32(0.3)).astype(f16)
    down = (up.astype(f32) - f32(0.3)).astype(f16)
    d = (down.astype(f32) - ref.astype(f32)).astype(f16)
    return 2 * float(np.abs(d.astype(np.float64)).max())


def max_err_f16(a, b):
    return float(np.abs((a.astype(np.float32) - b.astype(np.float32)).astype(np.float16)
                        .astype(np.float64)).max())


class Verdict(PosencTestCase):
    def save(self, name, t):
        """Saves a torch tensor: NPY, or HDF5 through posenc convert for bf16 (numpy has
        none; the values are bf16 already, so the conversion is exact)."""
        if t.dtype == torch.bfloat16:
            self.npy(f"{name}32.npy", t.float().numpy())
            ref = self.path(f"{name}.h5") + ":/x"
            self.run_ok("convert", self.path(f"{name}32.npy"), "--dtype", "bf16", "-o", ref)
            return ref
        return self.npy(f"{name}.npy", t.numpy())

    def verdict(self, k, ref, pt, *extra):
        p = run("compare", k, ref, "--baseline", pt, "--json", *extra)
        self.assertIn(p.returncode, (0, 1), p.stderr)
        j = json.loads(p.stdout)
        self.assertEqual(j["match"], p.returncode == 0)
        return j

    def test_atol_as_torch_computes_it(self):
        g = torch.Generator().manual_seed(3)
        for name, dt in DT.items():
            with self.subTest(dtype=name):
                # Outputs of all magnitudes, where the +0.3 round trip loses most.
                ref = (torch.randn(4, 64, generator=g, dtype=torch.float64)
                       * torch.logspace(-4, 1, 64, dtype=torch.float64)).to(dt)
                r = self.save(f"ref_{name}", ref)
                j = self.verdict(r, r, r)
                self.assertEqual(j["atol"], fa_atol_torch(ref))
                self.assertEqual((j["error"], j["baseline_error"]), (0, 0))
                self.assertTrue(j["match"])
        ref = torch.randn(1000, generator=g, dtype=torch.float64).to(torch.float16)
        self.assertEqual(fa_atol_numpy_f16(ref.numpy()), fa_atol_torch(ref))

    def planted(self, dt):
        """ref, a baseline with error 2^-6, and kernels: one with 1.5 times the baseline's
        error, one with 3 times the bound."""
        rng = np.random.default_rng(9)
        ref = torch.tensor(rng.standard_normal((2, 8, 4, 16)) * 0.5).to(dt)
        pt = ref.clone()
        pt[0, 3, 1, 5] += 2.0 ** -6
        pt[1, 0, 2, 7] -= 2.0 ** -7
        good = ref.clone()
        good[1, 2, 3, 4] += 1.5 * 2.0 ** -6
        bound = 2 * 2.0 ** -6 + fa_atol_torch(ref)
        bad = ref.clone()
        bad[0, 7, 0, 0] -= 3 * bound
        return ref, pt, good, bad, bound

    def test_planted_kernels_f16_against_numpy(self):
        ref, pt, good, bad, _ = self.planted(torch.float16)
        paths = {n: self.save(n, t) for n, t in
                 (("ref", ref), ("pt", pt), ("good", good), ("bad", bad))}
        r, b = ref.numpy(), pt.numpy()
        atol = fa_atol_numpy_f16(r)
        base = max_err_f16(b, r)
        self.assertEqual(base, 2.0 ** -6)
        for name, factor in (("good", 2), ("bad", 2), ("bad", 3.5), ("good", 1)):
            with self.subTest(kernel=name, factor=factor):
                k = {"good": good, "bad": bad}[name].numpy()
                err = max_err_f16(k, r)
                bound = factor * base + atol
                j = self.verdict(paths[name], paths["ref"], paths["pt"], "--factor", str(factor))
                self.assertEqual(j["error"], err)
                self.assertEqual(j["baseline_error"], base)
                self.assertEqual(j["atol"], atol)
                self.assertEqual(j["bound"], bound)
                self.assertEqual(j["match"], err <= bound)
        # The planted verdicts themselves: 1.5x passes; 3x the bound fails, the error
        # being 3 times the bound (to f16 rounding).
        self.assertTrue(max_err_f16(good.numpy(), r) <= 2 * base + atol)
        ratio = max_err_f16(bad.numpy(), r) / (2 * base + atol)
        self.assertAlmostEqual(ratio, 3, delta=0.01)

    def test_planted_kernels_bf16_and_text_report(self):
        ref, pt, good, bad, bound = self.planted(torch.bfloat16)
        paths = {n: self.save(n, t) for n, t in
                 (("ref", ref), ("pt", pt), ("good", good), ("bad", bad))}
        err_pt = (pt - ref).abs().max().item()
        for name, t, status in (("good", good, 0), ("bad", bad, 1)):
            err = (t - ref).abs().max().item()  # FA's own expression
            fa_bound = 2 * err_pt + fa_atol_torch(ref)
            self.assertEqual(err <= fa_bound, status == 0)
            p = run("compare", paths[name], paths["ref"], "--baseline", paths["pt"])
            self.assertEqual(p.returncode, status, p.stderr)
            out = p.stdout.decode()
            got = re.search(r"^error: max\|a - b\| = (\S+)", out, re.M)
            self.assertEqual(float(got.group(1)), err, out)
            self.assertIn("baseline error: max|baseline - b|", out)
            self.assertIn("bound: 2 * ", out)
            self.assertEqual(out.strip().splitlines()[-1], "match" if status == 0 else "differ")

    def test_mixed_dtypes_promote_as_torch(self):
        ref, pt, good, _, _ = self.planted(torch.float16)
        kernel = good.to(torch.bfloat16)  # f16 - bf16 runs in float32 in torch
        j = self.verdict(self.save("k", kernel), self.save("ref", ref), self.save("pt", pt))
        self.assertEqual(j["error"], (kernel - ref).abs().max().item())

    def test_nan_fails(self):
        ref, pt, good, _, _ = self.planted(torch.float16)
        good[0, 0, 0, 0] = float("nan")
        j = self.verdict(self.save("k", good), self.save("ref", ref), self.save("pt", pt))
        self.assertFalse(j["match"])

    def test_usage_and_input_errors(self):
        ref, pt, good, _, _ = self.planted(torch.float16)
        k, r, b = self.save("k", good), self.save("ref", ref), self.save("pt", pt)
        self.assert_fails(2, "compare", k, r, "--baseline", b, "--rtol", "0.1",
                          match=r"--rtol: not with --baseline")
        self.assert_fails(2, "compare", k, r, "--factor", "3", match=r"--factor: applies to "
                          r"--baseline")
        self.assert_fails(2, "compare", k, r, "--baseline", b, "--atol", "0.1", "--atol-rule",
                          "fa", match=r"--atol")
        self.assert_fails(2, "compare", k, r, "--baseline", b, "--atol-rule", "hf")
        short = self.save("short", pt[:1])
        self.assert_fails(3, "compare", k, r, "--baseline", short,
                          match=r"short\.npy: has shape \(1, 8, 4, 16\), the reference "
                          r"\(2, 8, 4, 16\)")
        # A fixed atol replaces the rule.
        j = self.verdict(k, r, b, "--atol", "0.5")
        self.assertEqual(j["atol"], 0.5)
        self.assertEqual(j["bound"], 2 * 2.0 ** -6 + 0.5)
        # A kernel of another shape differs (exit 1), as compare's shapes.
        p = run("compare", self.save("k2", good[:, :4]), r, "--baseline", b)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"shapes differ", p.stdout)


if __name__ == "__main__":
    unittest.main()
