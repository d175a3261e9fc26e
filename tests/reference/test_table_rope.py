"""`posenc table rope` against numpy float64 references written from HF transformers'
rope init functions (modeling_rope_utils.py, as summarised in rope-landscape.md §1.2).

Tolerances: f64 tables rtol 1e-12; f32 tables within one float32 ulp of the float64
reference (np.spacing of the float32-rounded reference); f16 equal to numpy's astype of
the float64 reference; bf16 equal to round-to-nearest-even emulated in numpy.
"""
import json
import math
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import PosencTestCase, run
from reference_rope import mcos, msin
from reference_rope_freqs import (default_inv, dynamic_inv, linear_inv, llama3_inv, longrope,
                                  yarn)


# --- references (numpy, float64) -----------------------------------------------------
# The frequency functions come from tests/lib/reference_rope_freqs.py (libm through
# Python's math module, so "within one float32 ulp" compares against the true value).


def tables(inv, positions, att=1.0, style="neox"):
    """angles, cos, sin in the full layout ([.., R]) and half ([.., R/2])."""
    ang = np.asarray(positions, dtype=np.int64).astype(np.float64)[..., None] * inv
    c, s = mcos(ang) * att, msin(ang) * att

    def full(x):
        return np.concatenate([x, x], -1) if style == "neox" else np.repeat(x, 2, axis=-1)

    return {"angles": full(ang), "cos": full(c), "sin": full(s),
            "angles_half": ang, "cos_half": c, "sin_half": s}


def bf16_round(x):
    """float64 -> bfloat16 value (as float64), round to nearest even, numpy emulation."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)
    q = np.rint(np.ldexp(m, 8))  # 8 significant bits, ties to even
    return np.ldexp(q, e - 8)


def h5_raw_u16(path, name):
    with h5py.File(path, "r") as f:
        ds = f[name]
        off, shape = ds.id.get_offset(), ds.shape
    return np.fromfile(path, dtype="<u2", count=int(np.prod(shape)), offset=off).reshape(shape)


def bf16_bits_to_f64(u):
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


class TableCase(PosencTestCase):
    def table(self, *args, dtype="f64", name="t.npy"):
        out = self.path(name)
        self.run_ok("table", "rope", *args, "--dtype", dtype, "-o", out)
        return np.load(out)

    def assert_f64(self, got, ref, msg=""):
        self.assertEqual(got.dtype, np.float64, msg)
        self.assert_close(got, ref, rtol=1e-12, atol=1e-300, msg=msg)

    def assert_f32_ulp(self, got, ref, msg=""):
        self.assertEqual(got.dtype, np.float32, msg)
        self.assertEqual(got.shape, ref.shape, msg)
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref)
        bad = err > ulp
        self.assertFalse(bad.any(), f"{msg}: {bad.sum()} elements beyond 1 ulp, worst "
                                    f"{(err / ulp).max():.3g} ulp at {np.argmax(err / ulp)}")


class RopeDefault(TableCase):
    def test_emits_layouts_and_dims(self):
        for d in (64, 80, 128):
            inv = default_inv(10000.0, d)
            for style in ("neox", "gptj"):
                ref = tables(inv, np.arange(37), style=style)
                for emit in ("angles", "cos", "sin"):
                    got = self.table("--positions", 37, "--dim", d, "--style", style,
                                     "--emit", emit)
                    self.assert_f64(got, ref[emit], f"{emit} {style} D={d}")
                    half = self.table("--positions", 37, "--dim", d, "--style", style,
                                      "--emit", emit, "--half-width")
                    self.assert_f64(half, ref[emit + "_half"], f"{emit} half D={d}")
            inv_got = self.table("--dim", d, "--emit", "inv-freq")
            self.assert_f64(inv_got, inv, f"inv-freq D={d}")

    def test_cos_sin_stacked_and_cache(self):
        ref = tables(default_inv(500000.0, 64), np.arange(5, 5 + 19), style="gptj")
        got = self.table("--positions", 19, "--start", 5, "--dim", 64, "--base", 500000,
                         "--style", "interleaved", "--emit", "cos-sin")
        self.assert_f64(got, np.stack([ref["cos"], ref["sin"]]), "cos-sin")
        got = self.table("--positions", 19, "--start", 5, "--dim", 64, "--base", 500000,
                         "--emit", "cos-sin-cache")
        self.assert_f64(got, np.concatenate([ref["cos_half"], ref["sin_half"]], -1), "cache")
        got = self.table("--positions", 19, "--start", 5, "--dim", 64, "--base", 500000,
                         "--emit", "cos-sin", "--layout", "half")
        self.assert_f64(got, np.stack([ref["cos_half"], ref["sin_half"]]), "cos-sin half")

    def test_f32_within_one_ulp_up_to_large_positions(self):
        inv = default_inv(10000.0, 128)
        for start in (0, 999_990, 1_000_000, 5_000_000):
            ref = tables(inv, np.arange(start, start + 33))
            for emit in ("cos", "sin"):
                got = self.table("--positions", 33, "--start", start, "--dim", 128, "--emit", emit,
                                 dtype="f32")
                self.assert_f32_ulp(got, ref[emit], f"{emit} start={start}")

    def test_f16_and_bf16_rounding(self):
        inv = default_inv(10000.0, 64)
        ref = tables(inv, np.arange(50))
        got = self.table("--positions", 50, "--dim", 64, "--emit", "sin", dtype="f16")
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, ref["sin"].astype(np.float16))
        out = self.path("t.h5")
        self.run_ok("table", "rope", "--positions", 50, "--dim", 64, "--emit", "cos",
                    "--dtype", "bf16", "-o", out + ":/c")
        got = bf16_bits_to_f64(h5_raw_u16(out, "/c"))
        np.testing.assert_array_equal(got, bf16_round(ref["cos"]))

    def test_partial_rotary(self):
        inv = default_inv(10000.0, 32)
        got = self.table("--positions", 9, "--dim", 80, "--rotary-dim", 32, "--emit", "cos")
        self.assert_f64(got, tables(inv, np.arange(9))["cos"], "rotary-dim 32 of 80")
        inv = default_inv(10000.0, 40)
        got = self.table("--positions", 9, "--dim", 80, "--partial", 0.5, "--emit", "sin")
        self.assert_f64(got, tables(inv, np.arange(9))["sin"], "partial 0.5 of 80")

    def test_position_ids_and_cu_seqlens(self):
        ids = np.array([[0, 3, 7, 7, 100], [5, 4, 3, 2, 1]], dtype=np.int32)
        np.save(self.path("ids.npy"), ids)
        inv = default_inv(10000.0, 64)
        got = self.table("--position-ids", self.path("ids.npy"), "--dim", 64, "--emit", "cos")
        self.assert_f64(got, tables(inv, ids)["cos"], "position ids [2, 5]")
        np.save(self.path("ids16.npy"), ids[1].astype(np.uint16))
        got = self.table("--position-ids", self.path("ids16.npy"), "--dim", 64, "--emit", "sin")
        self.assert_f64(got, tables(inv, ids[1])["sin"], "uint16 ids")
        np.save(self.path("cu.npy"), np.array([0, 3, 3, 8], dtype=np.int64))
        got = self.table("--cu-seqlens", self.path("cu.npy"), "--start", 2, "--dim", 64,
                         "--emit", "angles")
        pos = np.array([0, 1, 2, 0, 1, 2, 3, 4]) + 2
        self.assert_f64(got, tables(inv, pos)["angles"], "cu-seqlens")

    def test_inverse_and_f32_precision(self):
        inv = default_inv(10000.0, 64)
        ref = tables(inv, np.arange(20))
        got = self.table("--positions", 20, "--dim", 64, "--emit", "sin", "--inverse")
        self.assert_f64(got, -ref["sin"], "inverse sin")
        # --precision f32: angles formed as HF does, fp32(p) * fp32(inv_freq) in float32.
        pos = np.arange(70000, 70020)
        ang = (pos.astype(np.float32)[:, None] * inv.astype(np.float32)).astype(np.float64)
        got = self.table("--positions", 20, "--start", 70000, "--dim", 64, "--emit", "cos",
                         "--precision", "f32", "--half-width")
        self.assert_f64(got, mcos(ang), "precision f32")

    def test_thread_count_does_not_change_bytes(self):
        outs = []
        for j in (1, 2, 3):
            out = self.path(f"j{j}.npy")
            self.run_ok("-j", j, "table", "rope", "--positions", 1000, "--dim", 128, "--emit",
                        "cos-sin", "-o", out)
            with open(out, "rb") as f:
                outs.append(f.read())
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], outs[2])

    def test_attrs_recorded(self):
        out = self.path("t.h5")
        self.run_ok("table", "rope", "--positions", 8, "--dim", 64, "--scaling", "yarn",
                    "--factor", 4, "--original-max-pos", 64, "-o", out + ":/t")
        with h5py.File(out, "r") as f:
            a = dict(f["/t"].attrs)
        self.assertEqual(a["rope_type"], "yarn")
        self.assertAlmostEqual(float(a["attention_factor"]), 0.1 * math.log(4) + 1, places=12)
        self.assertEqual(int(a["rotary_dim"]), 64)
        p = run("-v", "table", "rope", "--positions", 8, "--dim", 64, "--scaling", "yarn",
                "--factor", 4, "--original-max-pos", 64, "-o", self.path("v.npy"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("attention_factor = 1.138", p.stderr)


class RopeScaling(TableCase):
    def check(self, args, inv, att, positions, d, msg):
        ref = tables(inv, positions, att)
        start, n = int(positions[0]), len(positions)
        common = ["--positions", n, "--start", start, "--dim", d, *args]
        got = self.table(*common, "--emit", "inv-freq")
        self.assert_f64(got, inv, msg + " inv-freq")
        got = self.table(*common, "--emit", "cos-sin")
        self.assert_f64(got, np.stack([ref["cos"], ref["sin"]]), msg + " cos-sin")
        got = self.table(*common, "--emit", "sin", dtype="f32", name="t32.npy")
        self.assert_f32_ulp(got, ref["sin"], msg + " f32 sin")

    def test_linear(self):
        for d in (64, 80):
            self.check(["--scaling", "linear", "--factor", 4], linear_inv(10000.0, d, 4), 1.0,
                       np.arange(0, 41), d, f"linear D={d}")

    def test_dynamic(self):
        # seq_len defaults to the largest position + 1; explicit --seq-len wins.
        d = 64
        self.check(["--scaling", "dynamic", "--factor", 2, "--max-pos", 32],
                   dynamic_inv(10000.0, d, 2, 32, 100), 1.0, np.arange(100), d, "dynamic")
        self.check(["--scaling", "dynamic", "--factor", 2, "--max-pos", 32, "--seq-len", 500],
                   dynamic_inv(10000.0, d, 2, 32, 500), 1.0, np.arange(10), d, "dynamic seq")
        self.check(["--scaling", "dynamic", "--factor", 3, "--max-pos", 4096],
                   default_inv(10000.0, d), 1.0, np.arange(10), d, "dynamic short")

    def test_yarn(self):
        for d in (64, 128):
            inv, att = yarn(10000.0, d, 4.0, 64)
            self.check(["--scaling", "yarn", "--factor", 4, "--original-max-pos", 64], inv, att,
                       np.arange(33), d, f"yarn D={d}")
        inv, att = yarn(10000.0, 64, 8.0, 256, beta_fast=16, beta_slow=2, mscale=0.707,
                        mscale_all_dim=1.0, truncate=False)
        self.check(["--scaling", "yarn", "--factor", 8, "--original-max-pos", 256,
                    "--beta-fast", 16, "--beta-slow", 2, "--mscale", 0.707,
                    "--mscale-all-dim", 1.0, "--no-truncate"], inv, att, np.arange(17), 64,
                   "yarn deepseek no-truncate")
        inv, att = yarn(10000.0, 80, 4.0, 64, attention_factor=1.5)
        self.check(["--scaling", "yarn", "--factor", 4, "--original-max-pos", 64,
                    "--attention-factor", 1.5], inv, att, np.arange(5), 80, "yarn att")

    def test_longrope_switch(self):
        d = 16
        short = [1.0, 1.1, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0]
        long = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
        args = ["--scaling", "longrope", "--original-max-pos", 32, "--max-pos", 128,
                "--short-factor", ",".join(map(str, short)),
                "--long-factor", ",".join(map(str, long))]
        inv, att = longrope(10000.0, d, short, long, 32, 32, max_pos=128)
        self.check(args, inv, att, np.arange(32), d, "longrope short (seq_len = L0)")
        inv, att = longrope(10000.0, d, short, long, 32, 33, max_pos=128)
        self.check(args, inv, att, np.arange(33), d, "longrope long (seq_len = L0 + 1)")
        np.save(self.path("long.npy"), np.array(long))
        args2 = ["--scaling", "longrope", "--original-max-pos", 32, "--factor", 8,
                 "--short-factor", ",".join(map(str, short)), "--long-factor",
                 self.path("long.npy"), "--seq-len", 1000]
        inv, att = longrope(10000.0, d, short, long, 32, 1000, factor=8)
        self.check(args2, inv, att, np.arange(4), d, "longrope factor list from npy")

    def test_llama3(self):
        inv = llama3_inv(500000.0, 128, 8.0, 8192, 1.0, 4.0)
        self.check(["--base", 500000, "--scaling", "llama3", "--factor", 8,
                    "--original-max-pos", 8192, "--low-freq-factor", 1,
                    "--high-freq-factor", 4], inv, 1.0, np.arange(100, 131), 128, "llama3")
        inv = llama3_inv(10000.0, 64, 4.0, 64, 2.0, 8.0)
        self.check(["--scaling", "llama3", "--factor", 4, "--original-max-pos", 64,
                    "--low-freq-factor", 2, "--high-freq-factor", 8], inv, 1.0, np.arange(9), 64,
                   "llama3 small L0")


class RopeHfConfig(TableCase):
    def write(self, cfg):
        path = self.path("config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def test_llama3_config(self):
        cfg = self.write({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
                          "max_position_embeddings": 131072,
                          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 8192,
                                           "rope_type": "llama3"}})
        inv = llama3_inv(500000.0, 128, 8.0, 8192, 1.0, 4.0)
        got = self.table("--hf-config", cfg, "--emit", "inv-freq")
        self.assert_f64(got, inv, "llama3 config")
        got = self.table("--hf-config", cfg, "--positions", 20, "--start", 9000, "--emit", "cos",
                         dtype="f32")
        self.assert_f32_ulp(got, tables(inv, np.arange(9000, 9020))["cos"], "llama3 cos")

    def test_phi3_config(self):
        short = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8, 2.0]
        long = [1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]
        cfg = self.write({"hidden_size": 96, "num_attention_heads": 3,
                          "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
                          "max_position_embeddings": 131072,
                          "original_max_position_embeddings": 4096,
                          "rope_scaling": {"type": "longrope", "short_factor": short,
                                           "long_factor": long}})
        for n, seq in ((16, 16), (4097, 4097)):
            inv, att = longrope(10000.0, 16, short, long, 4096, seq, max_pos=131072)
            got = self.table("--hf-config", cfg, "--positions", n, "--emit", "cos")
            self.assertEqual(got.shape, (n, 16))
            self.assert_f64(got, tables(inv, np.arange(n), att)["cos"], f"phi3 n={n}")

    def test_deepseek_yarn_config(self):
        cfg = self.write({"hidden_size": 7168, "num_attention_heads": 128, "head_dim": 64,
                          "rope_theta": 10000, "max_position_embeddings": 163840,
                          "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                           "mscale": 0.707, "mscale_all_dim": 1.0,
                                           "original_max_position_embeddings": 4096,
                                           "type": "yarn"}})
        inv, att = yarn(10000.0, 64, 40.0, 4096, mscale=0.707, mscale_all_dim=1.0)
        got = self.table("--hf-config", cfg, "--positions", 30, "--style", "gptj",
                         "--emit", "cos-sin")
        ref = tables(inv, np.arange(30), att, style="gptj")
        self.assert_f64(got, np.stack([ref["cos"], ref["sin"]]), "deepseek yarn")
        # Explicit options win over the config.
        inv2, att2 = yarn(10000.0, 64, 20.0, 4096, mscale=0.707, mscale_all_dim=1.0)
        got = self.table("--hf-config", cfg, "--factor", 20, "--emit", "inv-freq")
        self.assert_f64(got, inv2, "explicit --factor over config")

    def test_v5_rope_parameters(self):
        cfg = self.write({"hidden_size": 512, "num_attention_heads": 8,
                          "max_position_embeddings": 2048,
                          "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                              "rope_theta": 20000.0}})
        got = self.table("--hf-config", cfg, "--emit", "inv-freq")
        self.assert_f64(got, linear_inv(20000.0, 64, 2.0), "v5 rope_parameters")

    def test_bad_configs(self):
        cfg = self.write({"hidden_size": 64, "num_attention_heads": 1,
                          "rope_scaling": {"rope_type": "no-such-type"}})
        self.assert_fails(3, "table", "rope", "--hf-config", cfg, "--positions", 4, "-o",
                          self.path("x.npy"), match="config.json")
        with open(self.path("bad.json"), "w") as f:
            f.write("{not json")
        self.assert_fails(3, "table", "rope", "--hf-config", self.path("bad.json"),
                          "--positions", 4, "-o", self.path("x.npy"), match="bad.json")
        self.assertFalse(os.path.exists(self.path("x.npy")))


class RopeBadInput(TableCase):
    def test_usage_errors(self):
        out = self.path("x.npy")
        cases = [
            (["--positions", 4, "--dim", 64, "--rotary-dim", 31], "rotary"),
            (["--positions", 4, "--dim", 64, "--rotary-dim", 66], "rotary"),
            (["--positions", 4, "--dim", 63], "rotary"),
            (["--positions", 4, "--dim", 64, "--scaling", "linear"], "factor"),
            (["--positions", 4, "--dim", 64, "--scaling", "longrope", "--original-max-pos", 8,
              "--factor", 2, "--short-factor", "1,2,3"], "short-factor"),
            (["--positions", 4, "--dim", 16, "--scaling", "longrope", "--original-max-pos", 2,
              "--factor", 2, "--short-factor", "1,1,1,1,1,1,1,1", "--long-factor", "1,2"],
             "long-factor"),
            (["--positions", 4, "--dim", 64, "--emit", "tan"], "emit"),
            (["--positions", 0, "--dim", 64], "positions"),
            (["--positions", -5, "--dim", 64], "positions"),
            (["--positions", 4, "--dim", 64, "--scaling", "warp"], "scaling"),
            (["--positions", 4, "--dim", 64, "--dtype", "i32"], "dtype"),
            (["--positions", 4], "dim"),
        ]
        for args, word in cases:
            self.assert_fails(2, "table", "rope", *args, "-o", out, match=word)
            self.assertFalse(os.path.exists(out), args)
        self.assert_no_new_files([])

    def test_existing_output_untouched(self):
        out = self.path("keep.npy")
        with open(out, "wb") as f:
            f.write(b"precious")
        self.assert_fails(2, "table", "rope", "--positions", 4, "--dim", 64, "--rotary-dim", 7,
                          "-o", out)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"precious")


if __name__ == "__main__":
    unittest.main()
