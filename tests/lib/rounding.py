"""Exact rounding checks and the RoPE kernel variants, for posenc's reference tests.

A claim "the output is the float64 value rounded once to T" is checked element for
element: every output must equal the reference's float64 value rounded to T (numpy's
astype from float64 for f32 and f16; `round_bf16` below, written from the definition of
bfloat16, for bf16). The reference is computed independently and is accurate only to a
bound `margin` (absolute, per element, stated by each test). Where the interval
[ref - margin, ref + margin] contains a rounding boundary of T, the correct rounding is
not decidable from the reference: such an element may take either value the interval
rounds to, and is counted as ambiguous. The count is printed on failure and bounded
(`max_ambiguous`), so a test cannot silently become vacuous by a margin that is too wide.

RoPE kernel variants: posenc picks the widest kernel the CPU runs; the environment
variable POSENC_ROPE_ISA selects another (src/ops/rope_dispatch.cpp), and
`posenc -v rope` names the one used. `rope_kernel_variants()` lists every variant with
either the environment that selects it or the reason it cannot run here; tests run
their checks once per runnable variant and print a `SKIP:` line for the others (the CI
script lists those lines from the ctest log).
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

# Spacing of float64 relative to a value in [1, 2).
EPS64 = 2.0 ** -52


def round_bf16(x):
    """float64 -> the nearest bfloat16 value (as float64), ties to even.

    bfloat16 has 8 significant bits and float32's exponent range: normal numbers from
    2^-126, subnormals spaced 2^-133, largest finite (2 - 2^-7) * 2^127. A value is
    rounded to a multiple of its quantum 2^(e - 8) (e from frexp, |x| = m 2^e with
    0.5 <= m < 1), never finer than 2^-133; a result of 2^128 or more is infinite."""
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(x)
    qe = np.maximum(e - 8, -133)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.ldexp(np.rint(np.ldexp(x, -qe)), qe)  # rint: ties to even
        q = np.where(np.abs(q) >= 2.0 ** 128, np.copysign(np.inf, x), q)
    return np.where(np.isfinite(x), q, x)


def bf16_bits(values):
    """bfloat16 values (float32 or float64 holding them exactly) -> their uint16 bits."""
    v = np.asarray(values, dtype=np.float64)
    assert np.array_equal(round_bf16(v), v, equal_nan=True), "not bfloat16 values"
    return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_from_bits(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def round_to(x, dtype):
    """float64 x rounded once to dtype ("f64", "f32", "f16", "bf16"), as float64."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        if dtype == "f64":
            return x.copy()
        if dtype == "f32":
            return x.astype(np.float32).astype(np.float64)
        if dtype == "f16":
            return x.astype(np.float16).astype(np.float64)
        if dtype == "bf16":
            return round_bf16(x)
    raise ValueError(dtype)


NUMPY_DTYPE = {"f64": np.float64, "f32": np.float32, "f16": np.float16}


def check_rounded_once(got, ref, margin, dtype, max_ambiguous=1e-3):
    """Compares `got` (dtype values; bf16 as the float32 values h5py reads) with the
    float64 reference `ref` rounded once to dtype. `margin` (scalar or array) bounds the
    reference's error. Returns (problems, ambiguous): a list of messages (empty when
    the check passes) and the number of undecidable elements."""
    problems = []
    g = np.asarray(got)
    want_np = np.float32 if dtype == "bf16" else NUMPY_DTYPE[dtype]
    if g.dtype != want_np:
        return [f"dtype {g.dtype}, expected {np.dtype(want_np)} for {dtype}"], 0
    ref = np.asarray(ref, dtype=np.float64)
    if g.shape != ref.shape:
        return [f"shape {g.shape}, expected {ref.shape}"], 0
    g = g.astype(np.float64)
    if dtype == "bf16" and not np.array_equal(round_bf16(g), g, equal_nan=True):
        problems.append("bf16 output holds values that are not bfloat16")
    m = np.broadcast_to(np.asarray(margin, dtype=np.float64), ref.shape)
    lo, hi = round_to(ref - m, dtype), round_to(ref + m, dtype)
    nan = np.isnan(ref)
    ok = np.where(nan, np.isnan(g), (g >= lo) & (g <= hi))
    ambiguous = int(np.count_nonzero(~nan & (lo != hi)))
    n = max(ref.size, 1)
    if ambiguous > max_ambiguous * n:
        problems.append(f"{ambiguous} of {ref.size} elements within the margin of a rounding "
                        f"boundary (more than {max_ambiguous:g} of them): the reference is "
                        f"too coarse to decide")
    bad = np.flatnonzero(~ok)
    if bad.size:
        first = []
        for i in bad[:5]:
            idx = np.unravel_index(i, ref.shape)
            first.append(f"{tuple(int(k) for k in idx)}: got {g.flat[i]!r}, float64 "
                         f"reference {ref.flat[i]!r} rounds to {lo.flat[i]!r}")
        problems.append(f"{bad.size} of {ref.size} elements not the reference rounded once "
                        f"to {dtype} ({ambiguous} ambiguous, accepted either way); "
                        + "; ".join(first))
    return problems, ambiguous


def assert_rounded_once(tc, got, ref, margin, dtype, msg="", max_ambiguous=1e-3):
    """unittest form of check_rounded_once; returns the ambiguous count."""
    problems, ambiguous = check_rounded_once(got, ref, margin, dtype, max_ambiguous)
    if problems:
        tc.fail(f"{msg}: " + " | ".join(problems))
    return ambiguous


# --- RoPE kernel variants ---------------------------------------------------------

ISAS = ("base", "avx2", "avx512", "avx512fp16")
VECTORISED = ("avx2", "avx512", "avx512fp16")
_CPU_NEEDS = {
    "base": (),
    "avx2": ("avx2", "f16c"),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "avx512fp16": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_fp16"),
}


def cpu_flags():
    """The CPU feature flags Linux reports (empty when unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernel_in_use(bin_path, env):
    """The kernel variant `posenc -v rope` reports under env."""
    with tempfile.TemporaryDirectory(prefix="posenc-isa-") as d:
        x = os.path.join(d, "x.npy")
        np.save(x, np.ones((2, 8), np.float32))
        full = dict(os.environ)
        full.update(env)
        p = subprocess.run([bin_path, "-v", "rope", x, "-o", os.path.join(d, "y.npy")],
                           capture_output=True, env=full, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"posenc -v rope failed: {p.stderr}")
    m = re.search(r"kernel (\w+)", p.stderr)
    if m is None:
        raise RuntimeError(f"posenc -v rope does not name its kernel: {p.stderr!r}")
    return m.group(1)


_VARIANTS = None


def rope_kernel_variants(bin_path):
    """(runnable, skipped): runnable is a list of (isa, env) whose env makes posenc run
    that kernel (confirmed through `posenc -v`); skipped a list of (isa, reason).
    A POSENC_ROPE_ISA already set in the environment restricts the list to that variant
    (the mutation script uses it to check what an AVX2-only machine would catch).
    Raises AssertionError when the CPU runs a variant but POSENC_ROPE_ISA does not
    select it."""
    global _VARIANTS
    if _VARIANTS is not None:
        return _VARIANTS
    flags = cpu_flags()
    only = os.environ.get("POSENC_ROPE_ISA")
    runnable, skipped = [], []
    for isa in ISAS:
        missing = [f for f in _CPU_NEEDS[isa] if f not in flags]
        if only and isa != only:
            skipped.append((isa, f"POSENC_ROPE_ISA={only} selects one variant"))
        elif missing:
            skipped.append((isa, f"this CPU lacks {', '.join(missing)}"))
        else:
            env = {"POSENC_ROPE_ISA": isa}
            used = kernel_in_use(bin_path, env)
            assert used == isa, (f"POSENC_ROPE_ISA={isa} ran the {used} kernel on a CPU with "
                                 f"{', '.join(_CPU_NEEDS[isa]) or 'no special flags'}")
            runnable.append((isa, env))
    _VARIANTS = (runnable, skipped)
    return _VARIANTS


_REPORTED = False


def report_skipped_variants(bin_path, who):
    """Prints, once per process, one `SKIP:` line per variant that is not tested (stderr,
    kept in the ctest log), and returns the runnable list."""
    global _REPORTED
    runnable, skipped = rope_kernel_variants(bin_path)
    if not _REPORTED:
        _REPORTED = True
        for isa, reason in skipped:
            print(f"SKIP: {who}: RoPE kernel {isa} not tested: {reason}", file=sys.stderr)
    return runnable
