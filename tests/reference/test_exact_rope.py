"""`posenc rope` outputs are the float64 rotation rounded once, element for element, on
every RoPE kernel variant this CPU runs.

Claim (man page, `--precision f64`, the default): angles, cos, sin and the rotation in
float64, then one rounding to the output type. Reference: tests/lib/reference_rope.py
(numpy and libm in float64, written from HF's and Meta's definitions) with a per-element
error bound `margin`. f32 and f16 outputs must equal numpy's astype of the reference,
bf16 outputs its round-to-nearest-even (tests/lib/rounding.py, from the definition);
elements within the margin of a rounding boundary are accepted either way and counted
(at most 1e-3 of them). f64 outputs must lie within the margin.

Inputs f16, bf16 (HDF5), f32 and f64; outputs f32, f16, bf16 and `same`; both pair
layouts; full and partial rotary dims. Head dim 64 with rotary dim 64 or 32 takes the
AVX-512 fast paths; 48 with 24 the generic loops. f64 inputs built to land 2^-30
(relative) beside midpoints between output values catch a second rounding through f32.

Each check runs once per kernel variant (POSENC_ROPE_ISA); a variant this CPU cannot
run is printed as a `SKIP:` line, and a test fails when no vectorised variant ran.
"""
import os
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, PosencTestCase
from reference_rope import default_inv, near_ties, rope, yarn_inv
from rounding import (VECTORISED, assert_rounded_once, bf16_from_bits, report_skipped_variants,
                      round_to)

IN_DTYPES = ("f16", "bf16", "f32", "f64")


def write_bf16_h5(path, values):
    """A bf16 HDF5 dataset /x (8 exponent bits, 7 mantissa bits, bias 127), values
    given as exact bf16 values; h5py has no bfloat16 type, so the file type is built."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    bits = (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    with h5py.File(path, "w") as f:
        d = h5py.h5d.create(f.id, b"x", t, h5py.h5s.create_simple(bits.shape))
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(bits), mtype=t)
    return path + ":/x"


class ExactRope(PosencTestCase):
    """Runs posenc rope per kernel variant and checks every output element."""

    @classmethod
    def setUpClass(cls):
        cls.variants = report_skipped_variants(BIN, "test_exact_rope")

    def write_input(self, name, x64, dtype):
        """Writes x64 rounded to dtype; returns (reference, values as read)."""
        v = round_to(x64, dtype)
        if dtype == "bf16":
            return write_bf16_h5(self.path(name + ".h5"), v), v
        p = self.path(name + ".npy")
        np.save(p, v.astype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]))
        return p, v

    def check_variants(self, cases, args):
        """cases: list of (input ref, output dtype, reference, margin, label); one posenc
        run per kernel variant rotates all inputs with `args`."""
        for isa, env in self.variants:
            outs = [self.path(f"y{i}.h5") for i in range(len(cases))]
            cmd = ["rope", *[c[0] for c in cases]]
            for o in outs:
                cmd += ["-o", o + ":/y"]
            self.run_ok(*cmd, *args, env=env)
            for o, (_, out, ref, margin, label) in zip(outs, cases):
                with h5py.File(o, "r") as f:
                    got = f["y"][()]
                os.remove(o)
                assert_rounded_once(self, got, ref, margin, out,
                                    f"kernel {isa}, {label}, {' '.join(map(str, args))}",
                                    max_ambiguous=1.0 if out == "f64" else 1e-3)

    def matrix(self, shape, pos, inv, style, args, outs, af=1.0, inverse=False, seed=0):
        """Every input dtype to every output in `outs` ("same" keeps the input's type)."""
        rng = np.random.default_rng(seed)
        x64 = rng.standard_normal(shape) * 2
        # A few values across the f16 range: subnormal results and overflow to Inf.
        wide = rng.random(shape) < 0.05
        x64[wide] *= np.exp2(rng.uniform(-22, 14, size=int(wide.sum())))
        x64 = np.clip(x64, -65000, 65000)  # finite in f16; a rotation may still overflow
        inputs = {}
        for dt in IN_DTYPES:
            path, v = self.write_input(f"x_{dt}", x64, dt)
            inputs[dt] = (path, *rope(v, pos, inv, style, af, inverse))
        for out in outs:
            cases = [(path, dt if out == "same" else out, ref, m, f"{dt} -> {out}")
                     for dt, (path, ref, m) in inputs.items()]
            if out != "same":
                xt = near_ties(pos, inv, style, shape, out, rng, af, inverse)
                path, v = self.write_input(f"t_{out}", xt, "f64")
                ref, m = rope(v, pos, inv, style, af, inverse)
                cases.append((path, out, ref, m, f"f64 near {out} ties -> {out}"))
            self.check_variants(cases, [*args, "--dtype", out])


class TestFastShapes(ExactRope):
    def test_bhsd_both_styles_full_and_partial(self):
        shape = (2, 3, 37, 64)
        pos = np.broadcast_to(np.arange(11, 48), shape[:-1])
        for style in ("neox", "gptj"):
            for r in (64, 32):
                self.matrix(shape, pos, default_inv(10000.0, r), style,
                            ["--start", 11, "--style", style, "--rotary-dim", r],
                            ("f32", "f16", "bf16", "same"), seed=r)


class TestGenericShapes(ExactRope):
    def test_bshd_partial_half(self):
        # D = 48, R = 24: R/2 = 12 pairs, no multiple of 16 (or 8 for gptj), so every
        # variant runs its generic loops.
        shape = (2, 19, 3, 48)
        pos = np.broadcast_to(np.arange(3, 22)[None, :, None], shape[:-1])
        for style in ("neox", "gptj"):
            self.matrix(shape, pos, default_inv(10000.0, 24), style,
                        ["--axes", "bshd", "--start", 3, "--partial", 0.5, "--style", style],
                        ("f32", "f16", "bf16"), seed=5)


class TestPositionsAndScaling(ExactRope):
    def test_position_ids_plus_start_with_yarn_and_inverse(self):
        # --position-ids [b, s] with --start P: token (b, s) sits at ids[b, s] + P
        # (man page). YaRN's attention factor scales cos and sin; --inverse divides it out.
        rng = np.random.default_rng(7)
        ids = rng.integers(0, 5000, size=(2, 23)).astype(np.int32)
        np.save(self.path("ids.npy"), ids)
        shape = (2, 23, 4, 64)
        pos = np.broadcast_to((ids.astype(np.int64) + 7)[:, :, None], shape[:-1])
        inv, af = yarn_inv(10000.0, 64, 4.0, 64)
        self.assertNotEqual(af, 1.0)
        base = ["--axes", "bshd", "--position-ids", self.path("ids.npy"), "--start", 7,
                "--scaling", "yarn", "--factor", 4, "--original-max-pos", 64]
        for style, inverse in (("neox", False), ("gptj", True)):
            args = base + ["--style", style] + (["--inverse"] if inverse else [])
            self.matrix(shape, pos, inv, style, args, ("f32", "f16", "bf16"), af=af,
                        inverse=inverse, seed=8)

    def test_start_shifts_explicit_ids(self):
        # The same ids without --start give other values: --start is not ignored.
        ids = np.array([0, 5, 9, 2], dtype=np.int64)
        np.save(self.path("ids.npy"), ids)
        x = np.random.default_rng(9).standard_normal((4, 16))
        np.save(self.path("x.npy"), x)
        inv = default_inv(10000.0, 16)
        for start in (0, 1000):
            self.run_ok("rope", self.path("x.npy"), "-o", self.path("y.npy"), "--position-ids",
                        self.path("ids.npy"), "--start", start)
            ref, m = rope(x, ids + start, inv, "neox")
            assert_rounded_once(self, np.load(self.path("y.npy")), ref, m, "f64",
                                f"start {start}", max_ambiguous=1.0)


CANONICAL_NAN = {"f64": 0x7FF8000000000000, "f32": 0x7FC00000, "f16": 0x7E00, "bf16": 0x7FC0}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def raw_bits(path):
    """The stored bits of dataset /y, whatever its float type (bf16 included)."""
    with h5py.File(path, "r") as f:
        d = f["y"]
        t = d.id.get_type()
        out = np.empty(d.shape, dtype=UINT[t.get_size()])
        d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=t)
    return out


def float_of_bits(bits, dtype):
    """Stored bits as values of their type (bf16 as float32, as check_rounded_once takes)."""
    if dtype == "bf16":
        return bf16_from_bits(bits)
    return bits.view({"f64": np.float64, "f32": np.float32, "f16": np.float16}[dtype])


class TestNonFiniteBytes(ExactRope):
    """With --allow-nonfinite, NaN results are the output type's positive quiet NaN on
    every kernel variant and arithmetic (man page): IEEE 754 leaves a NaN result's sign
    and payload to the hardware, and the AVX2 and AVX-512 kernels kept payload bits
    (f16 0xfe02, 0x7e01) and other signs where the base loops did not. NaN exactly where
    the float64 reference is NaN; every other element rounded once as in ExactRope."""

    # Input NaNs: payloads, both signs, signalling and quiet, per input type; Inf and -Inf.
    SPECIAL = {"f16": (0x7D23, 0xFE01, 0x7E00, 0xFC00, 0x7C00),
               "bf16": (0x7F91, 0xFFC3, 0x7FC0, 0xFF80, 0x7F80),
               "f32": (0x7F812345, 0xFFC05678, 0x7FC00000, 0xFF800000, 0x7F800000),
               "f64": (0x7FF0000000012345, 0xFFF8000000005678, 0x7FF8000000000000,
                       0xFFF0000000000000, 0x7FF0000000000000)}

    def write_special(self, name, x64, dtype, rng):
        """x64 rounded to dtype with about 2% of its elements replaced by the special
        patterns, including whole pairs of NaNs of opposite signs; returns (path, values
        as float64)."""
        v = round_to(x64, dtype)
        w = {"f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64}[dtype]
        store = v.astype(w)
        bits = store.view(UINT[store.itemsize])
        flat = bits.reshape(-1)
        pats = self.SPECIAL[dtype]
        at = rng.choice(flat.size, size=max(8, flat.size // 50), replace=False)
        for k, i in enumerate(at):
            pat = pats[k % len(pats)]
            flat[i] = pat << 16 if dtype == "bf16" else pat
        # Two NaNs of opposite signs in one pair (dims 0 and R/2 or 1 of the first vector).
        flat[0] = (pats[0] << 16) if dtype == "bf16" else pats[0]
        flat[x64.shape[-1] // 4] = (pats[1] << 16) if dtype == "bf16" else pats[1]
        flat[1] = flat[0]
        if dtype == "bf16":
            path = write_bf16_h5(self.path(name + ".h5"), store)
        else:
            path = self.path(name + ".npy")
            np.save(path, store)
        with np.errstate(invalid="ignore"):  # signalling NaNs
            return path, store.astype(np.float64)

    def check(self, shape, r, style, extra):
        rng = np.random.default_rng(r)
        x64 = rng.standard_normal(shape) * 2
        pos = np.broadcast_to(np.arange(shape[-2]), shape[:-1])  # position 0: Inf * sin 0
        inv = default_inv(10000.0, r)
        pairs = (("f16", "f16"), ("bf16", "bf16"), ("f32", "f32"), ("f64", "f64"),
                 ("f32", "bf16"), ("f32", "f16"), ("f16", "f32"))
        inputs = {dt: self.write_special(f"s_{dt}", x64, dt, rng) for dt in IN_DTYPES}
        for prec in ("f64", "f32"):
            seen = {}
            for isa, env in self.variants:
                for dt, out in pairs:
                    path, v = inputs[dt]
                    o = self.path(f"y_{dt}_{out}.h5")
                    self.run_ok("rope", path, "-o", o + ":/y", "--style", style, "--rotary-dim",
                                r, "--dtype", out, "--precision", prec, "--allow-nonfinite",
                                *extra, env=env)
                    bits = raw_bits(o)
                    os.remove(o)
                    label = f"kernel {isa}, {dt} -> {out}, {style}, R {r}, --precision {prec}"
                    with np.errstate(invalid="ignore"):  # Inf * 0 and Inf - Inf: NaN
                        ref, margin = rope(v, pos, inv, style)
                    got = float_of_bits(bits, out)
                    nan, inf = np.isnan(ref), np.isinf(ref)
                    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=label)
                    self.assertTrue(nan.sum() >= 4 and inf.sum() >= 4, label)
                    self.assertEqual({int(b) for b in bits[nan]}, {CANONICAL_NAN[out]}, label)
                    np.testing.assert_array_equal(got[inf], ref[inf], err_msg=label)
                    if prec == "f64":
                        fin = ~nan & ~inf
                        assert_rounded_once(self, got[fin], ref[fin], margin[fin], out, label,
                                            max_ambiguous=1.0 if out == "f64" else 1e-3)
                    if (dt, out) in seen:
                        np.testing.assert_array_equal(bits, seen[(dt, out)],
                                                      err_msg=f"{label}: bytes differ by variant")
                    else:
                        seen[(dt, out)] = bits

    def test_fast_shapes_both_styles(self):
        for style in ("neox", "gptj"):
            self.check((2, 3, 9, 64), 64, style, [])

    def test_generic_loops(self):
        self.check((2, 19, 48), 24, "gptj", [])
        self.check((2, 19, 48), 24, "neox", [])

    def test_framework_arithmetic(self):
        # --arith hf: one set of loops on every machine, and the same canonical NaN.
        rng = np.random.default_rng(3)
        shape = (1, 2, 7, 64)
        path, v = self.write_special("h", rng.standard_normal(shape), "f32", rng)
        o = self.path("h.h5")
        self.run_ok("rope", path, "-o", o + ":/y", "--arith", "hf", "--allow-nonfinite")
        bits = raw_bits(o)
        with np.errstate(invalid="ignore"):
            ref, _ = rope(v, np.broadcast_to(np.arange(7), shape[:-1]),
                          default_inv(10000.0, 64), "neox")
        nan = np.isnan(ref)
        np.testing.assert_array_equal(np.isnan(bits.view(np.float32)), nan)
        self.assertEqual({int(b) for b in bits[nan]}, {CANONICAL_NAN["f32"]})


class TestVariantsRan(ExactRope):
    def test_a_vectorised_kernel_variant_was_tested(self):
        ran = [isa for isa, _ in self.variants]
        self.assertTrue(any(isa in VECTORISED for isa in ran),
                        f"only {ran} ran: no vectorised RoPE kernel was tested on this machine")


if __name__ == "__main__":
    unittest.main()
