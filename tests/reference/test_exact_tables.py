"""Tables in f32, f16 and bf16 are the float64 values rounded once, element for element.

Claim (man page, `posenc table`): real-valued tables are computed in float64 and
rounded once to the output type, to nearest even. References in numpy with libm's sin,
cos and pow through Python's math module: Vaswani's sinusoidal table, HF's RoPE
frequencies (default and YaRN), the 2-D seed's axial frequencies, Press's ALiBi slopes.
f32 and f16 outputs must equal numpy's astype of the reference, bf16 outputs its
round-to-nearest-even (tests/lib/rounding.py); elements within the margin of a rounding
boundary are accepted either way and counted.

Margins (bounds on |reference - posenc's float64 value|): sin and cos 4 ulp of the
value (posenc's own sin/cos kernels are within 2 ulp of libm's), plus 2 ulp of the angle
for a frequency that may differ by an ulp (4 ulp for YaRN's blended ones); products such
as ALiBi's -m |i - j| 2 ulp. At most 1e-3 of the elements may be ambiguous, 5e-2 near
position 10^6, where a float64 angle carries only about 30 bits below a float32 ulp.

Also here: YaRN without --factor takes HF's default max_position_embeddings /
original_max_position_embeddings (v5), from options and from a config whose ratio
differs from every other number in it.
"""
import os
import json
import unittest

import h5py
import numpy as np

from posenc_testlib import PosencTestCase
from reference_bias import get_slopes
from reference_rope import default_inv, mcos, msin, yarn_inv
from rounding import EPS64, assert_rounded_once

OUT = ("f32", "f16", "bf16")


def sincos_margin(value, angle, freq_ulps=1.0):
    return EPS64 * (4.0 * np.abs(value) + 2.0 * freq_ulps * np.abs(angle))


def freq_ulps(w, ulps=1.0):
    """Per-frequency uncertainty in ulps: none for w = 1 (base^0, exact everywhere)."""
    return np.where(np.asarray(w) == 1.0, 0.0, ulps)


class ExactTables(PosencTestCase):
    def table(self, kind, args, dtype):
        out = self.path(f"t_{dtype}.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("table", kind, *args, "--dtype", dtype, "-o", out + ":/t")
        with h5py.File(out, "r") as f:
            return f["t"][()]

    def check(self, kind, args, ref, margin, max_ambiguous=1e-3):
        for dt in OUT:
            got = self.table(kind, args, dt)
            assert_rounded_once(self, got, ref, margin, dt, f"table {kind} {args} --dtype {dt}",
                                max_ambiguous)


class TestSinusoidal(ExactTables):
    @staticmethod
    def reference(start, n, d, base=10000.0, layout="interleaved"):
        w = default_inv(base, d)
        a = np.arange(start, start + n, dtype=np.int64).astype(np.float64)[:, None] * w
        s, c = msin(a), mcos(a)
        ms, mc = sincos_margin(s, a, freq_ulps(w)), sincos_margin(c, a, freq_ulps(w))
        if layout == "concat":
            return np.concatenate([s, c], 1), np.concatenate([ms, mc], 1)
        ref, m = np.empty((n, d)), np.empty((n, d))
        ref[:, 0::2], ref[:, 1::2] = s, c
        m[:, 0::2], m[:, 1::2] = ms, mc
        return ref, m

    def test_every_position_to_4096_both_layouts(self):
        for layout, base in (("interleaved", 10000.0), ("concat", 500.0)):
            ref, m = self.reference(0, 4096, 16, base, layout)
            self.check("sinusoidal", ["--positions", 4096, "--dim", 16, "--base", base,
                                      "--layout", layout], ref, m)

    def test_around_a_million(self):
        ref, m = self.reference(999_900, 200, 128)
        self.check("sinusoidal", ["--positions", 200, "--start", 999_900, "--dim", 128], ref, m,
                   max_ambiguous=5e-2)


class TestRope(ExactTables):
    def test_cos_sin_angles_inv_freq(self):
        # Base 500000 (Llama 3): with 10000, 10000^(-1/4) = 0.1 and p * 0.1 hits bf16
        # midpoints such as 128.5 exactly, undecidable under an ulp of doubt in w.
        d, n = 64, 2048
        w = default_inv(500000.0, d)
        a = np.arange(n, dtype=np.float64)[:, None] * w
        c, s = mcos(a), msin(a)
        mc, ms = sincos_margin(c, a, freq_ulps(w)), sincos_margin(s, a, freq_ulps(w))
        args = ["--positions", n, "--dim", d, "--base", 500000]
        # neox full layout: [freqs, freqs]; gptj: each frequency twice in a row.
        self.check("rope", args + ["--emit", "cos"], np.concatenate([c, c], 1),
                   np.concatenate([mc, mc], 1))
        self.check("rope", args + ["--emit", "cos-sin", "--style", "gptj"],
                   np.stack([np.repeat(c, 2, 1), np.repeat(s, 2, 1)]),
                   np.stack([np.repeat(mc, 2, 1), np.repeat(ms, 2, 1)]))
        # Angle p * 1 of the first frequency is exact: integers that are bf16 midpoints
        # (257, 259, ...) must round to even.
        self.check("rope", args + ["--emit", "angles", "--half-width"], a,
                   2 * EPS64 * a * freq_ulps(w))
        self.check("rope", ["--dim", d, "--base", 500000, "--emit", "inv-freq"], w,
                   2 * EPS64 * w * freq_ulps(w))

    def test_yarn_attention_factor_at_large_positions(self):
        d, n, start = 64, 300, 70_000
        w, af = yarn_inv(10000.0, d, 8.0, 2048)
        a = np.arange(start, start + n, dtype=np.float64)[:, None] * w
        c, s = mcos(a) * af, msin(a) * af
        m = lambda v: sincos_margin(v, a * af, freq_ulps(w, 2.0)) + 2 * EPS64 * np.abs(v)
        # Angles up to 7e4: a margin of about 6e-11, 0.2 % of the f32 elements ambiguous.
        self.check("rope", ["--positions", n, "--start", start, "--dim", d, "--scaling", "yarn",
                            "--factor", 8, "--original-max-pos", 2048, "--emit", "cos-sin",
                            "--half-width"], np.stack([c, s]), np.stack([m(c), m(s)]),
                   max_ambiguous=1e-2)


class TestRope2dAndAlibi(ExactTables):
    def test_rope2d_cos_sin(self):
        h, wd, d = 13, 17, 32
        f = default_inv(100.0, d // 2)  # base^(-4j/D), j < D/4
        t = np.arange(h * wd)
        a = np.concatenate([(t % wd)[:, None] * f, (t // wd)[:, None] * f], 1).astype(np.float64)
        c, s = mcos(a), msin(a)
        ref = np.stack([np.repeat(c, 2, 1), np.repeat(s, 2, 1)])
        u = freq_ulps(np.concatenate([f, f]))
        m = np.stack([np.repeat(sincos_margin(c, a, u), 2, 1),
                      np.repeat(sincos_margin(s, a, u), 2, 1)])
        self.check("rope2d", ["--height", h, "--width", wd, "--dim", d], ref, m)

    def test_alibi_slopes_and_bias(self):
        for n in (12, 16, 24):
            m = np.array(get_slopes(n))
            self.check("alibi", ["--heads", n, "--variant", "slopes"], m, 2 * EPS64 * m)
        m = np.array(get_slopes(12))[:, None, None]
        i, j = np.arange(40)[:, None], np.arange(40)[None, :]
        bias = -m * np.abs(i - j)
        self.check("alibi", ["--heads", 12, "--q-len", 40, "--variant", "symmetric"], bias,
                   4 * EPS64 * np.abs(bias))


class TestYarnDefaultFactor(ExactTables):
    """HF v5 _compute_yarn_parameters: without `factor`, s = max_position_embeddings /
    original_max_position_embeddings. Here 24576 / 2048 = 12, a number that appears
    nowhere else in the inputs; a config that also holds a factor (5) uses that one."""

    def cos_sin(self, *args):
        out = self.path("y.h5")
        if os.path.exists(out):  # a fresh file: HDF5 outputs are added to existing files
            os.remove(out)
        self.run_ok("table", "rope", "--positions", 3, "--start", 999, "--emit", "cos-sin",
                    "--half-width", "--dtype", "f64", *args, "-o", out + ":/t")
        with h5py.File(out, "r") as f:
            return f["t"][()], float(f["t"].attrs["factor"])

    def expect(self, args, factor, msg):
        got, recorded = self.cos_sin(*args)
        self.assertEqual(recorded, factor, msg)
        w, af = yarn_inv(10000.0, 64, factor, 2048)
        a = np.arange(999, 1002, dtype=np.float64)[:, None] * w
        ref = np.stack([mcos(a) * af, msin(a) * af])
        # The other candidate factors give clearly different tables (the check has teeth).
        for other in {5.0, 12.0} - {factor}:
            w2, af2 = yarn_inv(10000.0, 64, other, 2048)
            self.assertGreater(np.abs(mcos(np.arange(999, 1002)[:, None] * w2) * af2
                                      - ref[0]).max(), 1e-2)
        assert_rounded_once(self, got, ref, sincos_margin(ref, a * af, 2.0) +
                            2 * EPS64 * np.abs(ref), "f64", msg, max_ambiguous=1.0)

    def write_config(self, scaling, key="rope_scaling"):
        cfg = {"hidden_size": 4096, "num_attention_heads": 64, "head_dim": 64,
               "rope_theta": 10000.0, "max_position_embeddings": 24576, key: scaling}
        path = self.path("config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def test_options_without_factor(self):
        self.expect(["--dim", 64, "--scaling", "yarn", "--max-pos", 24576,
                     "--original-max-pos", 2048], 12.0, "options")

    def test_config_without_factor(self):
        for key in ("rope_scaling", "rope_parameters"):
            cfg = self.write_config({"rope_type": "yarn", "rope_theta": 10000.0,
                                     "original_max_position_embeddings": 2048}, key)
            self.expect(["--hf-config", cfg], 12.0, f"{key} without factor")

    def test_config_factor_wins_over_the_ratio(self):
        # v5 (and the man page): the ratio is only the default. HF v4.4x-4.5x instead
        # replaced a rope_scaling factor by the ratio whenever the scaling object held
        # original_max_position_embeddings; posenc follows v5.
        cfg = self.write_config({"rope_type": "yarn", "factor": 5.0,
                                 "original_max_position_embeddings": 2048})
        self.expect(["--hf-config", cfg], 5.0, "config factor 5")


if __name__ == "__main__":
    unittest.main()
