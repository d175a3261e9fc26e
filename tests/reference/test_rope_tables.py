"""`posenc rope --cos C --sin S`: the caller's cos/sin tables applied as given, against
an independent torch float64 implementation of flash-attn's apply_rotary_emb_torch
(tests/lib/fa_rotary_reference.py), with per-entry offsets (seqlen_offsets), packed
sequences, position ids, partial rotary, the interleaved pairing and HF's [rows, R]
tables.

Tolerances: the reference is float64 with the table values widened exactly (a bf16
table as bf16 values). f64 outputs within 4 float64 ulp of the largest term
(|x| |cos| + |y| |sin|); f32, f16 and bf16 outputs equal to the float64 reference
rounded once (tests/lib/rounding.py, same margin).
"""
import os
import unittest

import numpy as np
import torch

from fa_rotary_reference import apply_rotary_tables, apply_rotary_torch_native
from posenc_testlib import (BIN, PosencTestCase, bit_mismatches, load_torch, out_ref,
                            save_torch)
from rounding import EPS64, assert_rounded_once, report_skipped_variants


def margin(x, cos, sin):
    return 4 * EPS64 * 2 * float(np.abs(x).max()) * max(float(np.abs(cos).max()),
                                                         float(np.abs(sin).max()), 1.0)


class RopeTables(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(43)

    def table(self, rows, width, dtype=torch.float64):
        """cos/sin of FA's RotaryEmbedding (positions times inverse frequencies), rounded
        to dtype as flash-attn's cache holds them."""
        inv = 1.0 / 10000.0 ** (np.arange(0, 2 * width, 2) / (2 * width))
        ang = np.arange(rows)[:, None] * inv
        return (torch.from_numpy(np.cos(ang)).to(dtype), torch.from_numpy(np.sin(ang)).to(dtype))

    def check(self, x, cos, sin, args, ref_kw, out_dtype=torch.float64):
        """Runs posenc rope on x (torch tensor) with the tables (torch tensors), with
        every RoPE kernel variant this CPU runs, and compares with the reference computed
        from the same values."""
        xr = save_torch(self, "x", x)
        cr = save_torch(self, "cos", cos)
        sr = save_torch(self, "sin", sin)
        name = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16",
                torch.bfloat16: "bf16"}[out_dtype]
        x64, c64, s64 = x.double().numpy(), cos.double().numpy(), sin.double().numpy()
        ref = apply_rotary_tables(x64, c64, s64, **ref_kw)
        m = margin(x64, c64, s64)
        for isa, env in report_skipped_variants(BIN, "test_rope_tables"):
            yr = out_ref(self, "y", out_dtype)
            self.run_ok("rope", xr, "-o", yr, "--cos", cr, "--sin", sr, "--dtype", name, *args,
                        env=env)
            got_t = load_torch(yr, out_dtype)
            got = got_t.double().numpy()
            if out_dtype == torch.float64:
                self.assertLessEqual(float(np.abs(got - ref).max()), m, isa)
            else:
                native = (got_t.float() if out_dtype == torch.bfloat16 else got_t).numpy()
                assert_rounded_once(self, native, ref, m, name, msg=f"{isa} {args}")
            if os.path.exists(yr):
                os.remove(yr)
        return got

    def test_fa_table_offsets_f64(self):
        # [b, s, h, d] with FA's [s_rot, R/2] table and per-entry offsets (KV cache).
        x = torch.from_numpy(self.rng.standard_normal((3, 7, 2, 16)))
        cos, sin = self.table(40, 8)
        offs = self.path("offs.npy")
        np.save(offs, np.array([0, 5, 33], dtype=np.int32))
        self.check(x, cos, sin, ["--axes", "bshd", "--seqlen-offsets", offs],
                   dict(seqlen_offsets=[0, 5, 33]))

    def test_bf16_tables_interleaved_partial(self):
        # bf16 x and bf16 tables (applied as bf16 values), GPT-J pairs, R = 8 of d = 20.
        x = torch.from_numpy(self.rng.standard_normal((2, 5, 3, 20))).bfloat16()
        cos, sin = self.table(16, 4, torch.bfloat16)
        offs = self.path("offs.npy")
        np.save(offs, np.array([2, 11]))
        got = self.check(x, cos, sin,
                         ["--axes", "bshd", "--style", "gptj", "--seqlen-offsets", offs],
                         dict(seqlen_offsets=[2, 11], interleaved=True),
                         out_dtype=torch.bfloat16)
        # The passed-through dims are the input's values.
        np.testing.assert_array_equal(got[..., 8:], x.double().numpy()[..., 8:])
        # The table is applied as bf16 values: not the float64 cos/sin it came from.
        c64, s64 = self.table(16, 4)
        exact = apply_rotary_tables(x.double().numpy(), c64.numpy(), s64.numpy(),
                                    seqlen_offsets=[2, 11], interleaved=True)
        self.assertGreater(float(np.abs(got - exact).max()), 0.0)

    def test_start_f32_x_f16_tables_bhsd(self):
        x = torch.from_numpy(self.rng.standard_normal((2, 3, 6, 8))).float()
        cos, sin = self.table(12, 4, torch.float16)
        self.check(x, cos, sin, ["--start", "6"], dict(start=6, layout="bhsd"),
                   out_dtype=torch.float32)

    def test_position_ids_and_inverse(self):
        x = torch.from_numpy(self.rng.standard_normal((6, 12)))
        cos, sin = self.table(30, 6)
        ids = np.array([29, 0, 3, 3, 17, 8])
        self.check(x, cos, sin, ["--position-ids", self.npy("ids.npy", ids), "--inverse"],
                   dict(position_ids=ids, layout="sd", inverse=True))

    def test_packed_sequences_with_offsets(self):
        # FA varlen: positions restart per sequence, each shifted by its offset.
        x = torch.from_numpy(self.rng.standard_normal((1, 9, 2, 8)))
        cos, sin = self.table(20, 4)
        cu = [0, 4, 4, 9]
        self.check(x, cos, sin, ["--axes", "bshd", "--cu-seqlens", self.npy("cu.npy", cu),
                                 "--seqlen-offsets", self.npy("o.npy", [1, 7, 10])],
                   dict(cu_seqlens=cu, seqlen_offsets=[1, 7, 10]))

    def test_hf_full_width_table(self):
        # HF's [s, d] cos = cat(freqs, freqs): the same rotation as the [s, d/2] table.
        x = torch.from_numpy(self.rng.standard_normal((1, 2, 5, 8)))
        cos, sin = self.table(5, 4)
        wide_c, wide_s = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        got = self.check(x, wide_c, wide_s, [], dict(layout="bhsd"))
        half = self.check(x, cos, sin, [], dict(layout="bhsd"))
        np.testing.assert_array_equal(got, half)

    def test_full_width_table_pairs_differ(self):
        # A [rows, R] table whose pair columns differ is applied per column, as HF's
        # x * cos + rotate_half(x) * sin; R = 8 given of d = 12 (the width alone reads
        # as R/2 = 8).
        x = torch.from_numpy(self.rng.standard_normal((4, 12)))
        cos = torch.from_numpy(self.rng.standard_normal((4, 8)))
        sin = torch.from_numpy(self.rng.standard_normal((4, 8)))
        for style, il in (("neox", False), ("gptj", True)):
            self.check(x, cos, sin, ["--rotary-dim", "8", "--style", style],
                       dict(layout="sd", interleaved=il, rotary_dim=8))
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("z.npy"),
                          "--cos", self.path("cos.npy"), "--sin", self.path("sin.npy"),
                          "--rotary-dim", "8", "--inverse", match="no rotation")

    def test_precision_f32_is_the_float32_kernel_formula(self):
        # flash-attn's Triton kernel: o0 = x0*cos - x1*sin, o1 = x0*sin + x1*cos in float32,
        # each product and sum rounded (no contraction): bit for bit, every variant.
        x = self.rng.standard_normal((2, 9, 3, 16)).astype(np.float32)
        cos = self.rng.uniform(-1, 1, (20, 8)).astype(np.float32)
        sin = self.rng.uniform(-1, 1, (20, 8)).astype(np.float32)
        args = ["rope", self.npy("x.npy", x), "--axes", "bshd", "--cos", self.npy("c.npy", cos),
                "--sin", self.npy("s.npy", sin), "--precision", "f32", "--start", "3",
                "-o", self.path("y.npy")]
        xt = torch.from_numpy(x)
        c = torch.from_numpy(cos[3:12])[:, None, :]
        s = torch.from_numpy(sin[3:12])[:, None, :]
        for style in ("neox", "gptj"):
            if style == "neox":
                x0, x1 = xt[..., :8], xt[..., 8:]
            else:
                x0, x1 = xt[..., 0::2], xt[..., 1::2]
            o0, o1 = x0 * c - x1 * s, x0 * s + x1 * c
            want = (torch.cat([o0, o1], -1) if style == "neox"
                    else torch.stack([o0, o1], -1).flatten(-2)).numpy()
            for isa, env in report_skipped_variants(BIN, "test_rope_tables"):
                self.run_ok(*args, "--style", style, env=env)
                got = np.load(self.path("y.npy"))
                self.assertTrue(np.array_equal(got.view(np.uint32), want.view(np.uint32)),
                                f"{style} {isa}")

    def test_rotary_last(self):
        # The table rotates the last R dims with --rotary-last; the first pass through.
        x = torch.from_numpy(self.rng.standard_normal((5, 12)))
        cos = torch.from_numpy(self.rng.uniform(-1, 1, (5, 4)))
        sin = torch.from_numpy(self.rng.uniform(-1, 1, (5, 4)))
        self.run_ok("rope", save_torch(self, "x", x), "-o", self.path("y.npy"), "--cos",
                    save_torch(self, "c", cos), "--sin", save_torch(self, "s", sin),
                    "--rotary-last")
        got = np.load(self.path("y.npy"))
        ref = apply_rotary_tables(x.numpy()[:, 4:], cos.numpy(), sin.numpy(), layout="sd")
        self.assertLessEqual(float(np.abs(got[:, 4:] - ref).max()),
                             margin(x.numpy(), cos.numpy(), sin.numpy()))
        np.testing.assert_array_equal(got[:, :4], x.numpy()[:, :4])

    def test_torch_ops_is_apply_rotary_emb_torch(self):
        # --torch-ops: torch's own roundings, bit for bit against apply_rotary_emb_torch run
        # by this torch in the tensors' dtypes (type promotion included); the exact mode
        # (one rounding) differs from them somewhere in the narrow types.
        names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
        cases = [(torch.bfloat16, torch.bfloat16, "neox", 20),
                 (torch.bfloat16, torch.bfloat16, "gptj", 20),
                 (torch.float16, torch.float16, "neox", 16),
                 (torch.float32, torch.bfloat16, "gptj", 16),
                 (torch.bfloat16, torch.float32, "neox", 16),
                 (torch.float16, torch.bfloat16, "neox", 16)]
        for xdt, tdt, style, d in cases:
            with self.subTest(x=xdt, table=tdt, style=style):
                x = torch.from_numpy(self.rng.standard_normal((2, 6, 3, d)) * 4).to(xdt)
                cos, sin = self.table(16, 4, tdt)
                offs = [1, 9]
                pos = torch.tensor(offs)[:, None] + torch.arange(6)[None, :]
                want = apply_rotary_torch_native(x, cos, sin, style == "gptj", pos)
                args = ["rope", save_torch(self, "x", x), "--axes", "bshd",
                        "--cos", save_torch(self, "c", cos), "--sin", save_torch(self, "s", sin),
                        "--style", style, "--seqlen-offsets", self.npy("o.npy", offs),
                        "--dtype", names[want.dtype]]
                yr = out_ref(self, "y", want.dtype)
                self.run_ok(*args, "--torch-ops", "-o", yr)
                self.assertEqual(bit_mismatches(load_torch(yr, want.dtype), want), 0)
                if want.dtype != torch.float32:
                    er = out_ref(self, "e", want.dtype)
                    self.run_ok(*args, "-o", er)
                    self.assertGreater(bit_mismatches(load_torch(er, want.dtype), want), 0)

    def test_threads_same_bytes(self):
        x = self.rng.standard_normal((4, 64, 8, 32)).astype(np.float32)
        cos, sin = self.table(200, 16, torch.float16)
        args = ["rope", self.npy("x.npy", x), "--axes", "bshd", "--cos",
                save_torch(self, "c", cos), "--sin", save_torch(self, "s", sin),
                "--seqlen-offsets", self.npy("o.npy", [0, 50, 100, 136])]
        self.run_ok("-j", "1", *args, "-o", self.path("y1.npy"))
        self.run_ok("-j", "2", *args, "-o", self.path("y2.npy"), "--max-memory", "600K")
        with open(self.path("y1.npy"), "rb") as a, open(self.path("y2.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_bad_input(self):
        x = self.npy("x.npy", self.rng.standard_normal((2, 5, 2, 8)))
        cos, sin = self.table(6, 4)
        c, s = save_torch(self, "c", cos), save_torch(self, "s", sin)
        nan = cos.clone()
        nan[3, 1] = float("nan")
        cn = save_torch(self, "cn", nan)
        wide = save_torch(self, "cw", torch.cat((cos, cos, cos), -1))
        out = self.path("y.npy")
        base = ["rope", x, "-o", out, "--axes", "bshd"]
        cases = [
            (3, ["--cos", c, "--sin", s, "--start", "2"], r"--cos: .*position 6 is beyond"),
            (3, ["--cos", c, "--sin", s, "--seqlen-offsets", self.npy("o.npy", [0, 2])],
             "position 6 is beyond the table's 6 rows"),
            (3, ["--cos", c, "--sin", s, "--seqlen-offsets", self.npy("o3.npy", [0, 0, 0])],
             "--seqlen-offsets: .*3 values, expected one per batch entry"),
            (3, ["--cos", cn, "--sin", s], r"--cos: .*row 3, column 1 is not finite"),
            (3, ["--cos", c, "--sin", s, "--rotary-dim", "6"], r"--cos: .*does not match the rotary dim 6"),
            (3, ["--cos", wide, "--sin", wide], r"--cos: .*fits neither"),
            (3, ["--cos", c, "--sin", save_torch(self, "s5", sin[:5])], "--sin: .*differs"),
            (3, ["--cos", self.npy("ci.npy", np.ones((6, 4), np.int32)), "--sin", s],
             "expected a float tensor"),
            (2, ["--cos", c], "--cos: needs --sin"),
            (2, ["--cos", c, "--sin", s, "--base", "500"], "not with --base"),
            (2, ["--cos", c, "--sin", s, "--arith", "hf"], "applied exactly only"),
            (2, ["--torch-ops"], "--torch-ops: needs --cos"),
            (2, ["--cos", c, "--sin", s, "--torch-ops", "--precision", "f32"], "--torch-ops"),
            (3, ["--cos", c, "--sin", save_torch(self, "s32", sin.float())], "--sin: .*dtype"),
            (2, ["--cos", c, "--sin", s, "--position-ids", self.npy("i.npy", [0, 1, 2, 3, 4]),
                 "--seqlen-offsets", self.npy("o2.npy", [0, 1])], "--seqlen-offsets"),
        ]
        for status, extra, match in cases:
            with self.subTest(extra=extra):
                self.assert_fails(status, *base, *extra, match=match)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
