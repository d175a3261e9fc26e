#!/usr/bin/env python3
"""Fuzz harness of the Python module: drives posenc's entry points (rope, attention, the
table kinds, rope_ids, compare, read and write in a temporary folder, set_threads, the
bf16 helpers) with random arguments — types, None, shapes, dtypes, strides, sizes,
huge and negative numbers, strange strings — and holds the module to its contract:
only posenc.Error subclasses (and MemoryError, Python's own for a request larger than
memory) come out, and the process never dies or hangs.

    fuzz_module.py [--seconds S] [--count N] [--seed K] [--case I] [--asan] [--verbose]
                   [--messages]

Cases are numbered; case I of seed K is the same call on every run (--case I replays
it alone, printing it). The exit status is 1 when some call raised another exception,
with each such call printed; a crash or hang shows as the process's own death (run it
under a timeout; faulthandler prints where it was). Without --asan the address space
is limited to 4 GiB so that a huge request is a MemoryError rather than a machine out
of memory; under AddressSanitizer (--asan; LD_PRELOAD of libasan, which reserves its
shadow memory and cannot take that limit) the sizes stay below what would allocate
gigabytes. numpy only: torch is not imported.
"""
import argparse
import faulthandler
import inspect
import json
import math
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

import posenc

ALLOWED = (posenc.Error, MemoryError)

# Values the option keywords take, valid and not, by keyword name.
WORDS = {
    "style": ["neox", "gptj", "half", "interleaved", "tiled", "diagonal"],
    "scaling": ["none", "default", "linear", "dynamic", "yarn", "longrope", "llama3",
                "proportional", "ntk"],
    "arith": ["exact", "hf", "meta", "ggml", "fast"],
    "precision": ["f64", "f32", "f16"],
    "axes": ["bhsd", "bshd", "bsd", "sd", "hsd", "sbhd", "dd", "bhsdx", ""],
    "order": ["xy", "yx", "zz"],
    "layout": ["axial", "even-odd", "sections:2,1,1", "interleaved:2,1,1", "chunks", "chunks:2",
               "ernie-vl:1,1,2", "xdrope:2,2", "full", "half", "concat", "interleaved",
               "channels", "tokens", "bogus:1"],
    "coords": ["grid:2,2", "grid:4", "centres:2,2", "grid:0", "grid:-1", "centres:9999999,9"],
    "emit": ["logits", "probs", "output", "lse", ("probs", "output"), ("lse",), (), "cos-sin",
             "cos", "sin", "angles", "inv-freq", "cos-sin-cache", ("cos", "sin"), "phi",
             "omega", "block-ids", "segment-ids", "side-positions"],
    "causal": [True, False, "top-left", "bottom-right", "diagonal"],
    "alibi": [True, "causal", "symmetric", "bottom-right", "fairseq", "bloom", "falcon", "x"],
    "masked_rows": ["zero", "nan", "inf"],
    "relative_sign": ["k-q", "q-k", "x"], "sign": ["k-q", "q-k", "x"],
    "relative_beyond": ["clamp", "zero", "x"], "beyond": ["clamp", "zero", "x"],
    "variant": ["causal", "symmetric", "fairseq", "bottom-right", "slopes", "x"],
    "form": ["transfo-xl", "xlnet-bi", "xlnet-uni", "x"],
    "axis": ["1d", "x", "y", "xy", "horizontal", "vertical", "all", "z"],
    "pos_att_type": ["c2p", "p2c", "c2p,p2c", "x"],
    "family": ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni", "glm4v", "x"],
    "hf_version": ["4.51", "5", "3", "x"],
    "layer_type": ["full_attention", "sliding_attention", "x"],
    "freq_scale": ["2pi", "tau", 2.0, 0.0, -1.0, 1e308, "x"],
    "to": ["npy", "h5", "hdf5", "csv", "tsv", "json", "text", "x"],
    "slice": ["0", ":", "0,:,:4", "::2", "-1", "9999", "a", "0,0,0,0,0,0"],
    "mrope_section": [(2, 1, 1), "2,1,1", (1, 1), "a,b"],
    "layout_spec": ["text:4", "text:2,image:1x4x4", "video:2x4x4@2/1+audio:3", "image:0x0x0",
                    "text:-1", "x"],
}

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, object, ">f4",
          "<f8", "U3", "V4", [("a", "<f4"), ("b", "<i2")]]


class Gen:
    """Random arguments for case `case` of seed `seed`, the same on every run."""

    def __init__(self, seed, case, folder, asan):
        self.r = random.Random(seed * 1_000_003 + case)
        self.np = np.random.default_rng([seed, case])
        self.folder = folder
        self.asan = asan

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def integer(self):
        small = [0, 1, 2, 3, 4, 7, 8, 16, 31, 64, -1, -2, 100, 1000]
        # Large enough to be refused or to overflow a size; under ASan none that a
        # library could take for an allocation of gigabytes (ASan's operator new aborts
        # where it would raise std::bad_alloc).
        huge = [2**63, 2**64, -2**63 - 1, 10**30, -10**30] + (
            [] if self.asan else [2**31 - 1, 2**31, 2**32, 2**40, 2**53, 2**62, -2**31])
        v = self.pick(small) if self.r.random() < 0.8 else self.pick(huge)
        return np.int64(v) if self.r.random() < 0.05 and -2**63 <= v < 2**63 else v

    def real(self):
        return self.pick([0.0, -0.0, 1.0, 0.5, -1.0, 2.5, 1e-308, 5e-324, 1e308, -1e308,
                          math.inf, -math.inf, math.nan, 1e4, 1e16, np.float32(1.5)])

    def string(self):
        return self.pick(["", "x", "neox", "a\0b", "-", "\x1b[31mred", "é", "1,2,3", "2pi",
                          "../x", "a" * 300, "f32", "bf16", "none", "\udcff"])

    def shape(self, rank=None):
        rank = self.r.randrange(0, 6) if rank is None else rank
        dims = [self.pick([1, 1, 2, 2, 3, 4, 5, 8, 16]) for _ in range(rank)]
        if rank and self.r.random() < 0.1:
            dims[self.r.randrange(rank)] = 0
            if self.r.random() < 0.5:  # empty, with an extent that would be large
                dims[self.r.randrange(rank)] = self.pick([2**24, 2**31, 2**40])
        return tuple(dims)

    def array(self, rank=None, dtype=None, shape=None):
        shape = self.shape(rank) if shape is None else shape
        dtype = self.pick(DTYPES) if dtype is None else dtype
        n = math.prod(shape)
        if n > 1 << 16:
            shape, n = (0,), 0
        vals = self.np.standard_normal(n) * self.pick([1, 1, 1, 100, 1e30])
        if self.r.random() < 0.05 and n:
            vals[self.r.randrange(n)] = self.pick([math.nan, math.inf, -math.inf])
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a = vals.reshape(shape).astype(dtype)
        except (TypeError, ValueError):
            a = np.zeros(shape, dtype)
        return self.layout(a)

    def layout(self, a):
        """`a`, or a strided, reversed, broadcast, read-only or unaligned view of it."""
        k = self.r.random()
        if k < 0.06 and a.ndim:
            return a[..., ::2]
        if k < 0.1 and a.ndim:
            return a[::-1]
        if k < 0.14 and a.ndim >= 2:
            return a.swapaxes(0, -1)
        if k < 0.17 and a.size:
            return np.broadcast_to(a.reshape(-1)[:1], (1, 2, 4, 8)).reshape((1, 2, 4, 8))
        if k < 0.2:
            a = a.copy()
            a.flags.writeable = False
            return a
        if k < 0.23 and a.dtype.kind in "fiu" and a.dtype.itemsize > 1:
            raw = np.zeros(a.nbytes + 1, np.uint8)[1:]
            b = raw.view(a.dtype).reshape(a.shape) if a.ndim else raw.view(a.dtype)[:1]
            b[...] = a
            return b
        return a

    def tensor(self, dtype=None):
        """A tensor that posenc may well take: 4-D float mostly."""
        if self.r.random() < 0.7:
            b, h, s, d = (self.pick([1, 2]), self.pick([1, 2, 4]), self.pick([1, 3, 4, 8]),
                          self.pick([2, 4, 8, 16]))
            return self.array(dtype=dtype or self.pick([np.float32, np.float64, np.float16]),
                              shape=(b, h, s, d))
        return self.any_array()

    def any_array(self):
        k = self.r.random()
        if k < 0.1:
            return posenc.BF16(self.array(dtype=np.uint16))
        if k < 0.15:
            return self.pick([[1.0, 2.0], [[1, 2], [3]], "abc", 3.5, b"xy", memoryview(b"ab")])
        return self.array()

    def path(self):
        name = self.pick(["a.npy", "a.h5:/g/d", "a.h5", "a.h5:/", "a.h5:", "b.hdf5:/x",
                          "a.csv", "a.tsv", "a.json", "a.txt", "sub/", "none/x.npy", "-",
                          "a\0b.npy", "", "a.h5:/g", "a.h5:/g/d/e", "cfg.json", "bad.json",
                          "a.npy\0.h5:/x"])
        return self.pick([name, os.path.join(self.folder, name), name.encode()])

    def value(self, key):
        """A value for keyword `key`: one of its words, or anything."""
        k = self.r.random()
        if key in WORDS and k < 0.45:
            return self.pick(WORDS[key])
        if key == "hf_config" and k < 0.6:
            return self.pick(["cfg.json", "bad.json", "none.json", 5])
        if k < 0.12:
            return None
        if k < 0.4:
            return self.integer()
        if k < 0.5:
            return self.real()
        if k < 0.58:
            return self.pick([True, False])
        if k < 0.66:
            return self.string()
        if k < 0.74:
            n = self.r.randrange(0, 5)
            return self.pick([tuple, list])(self.value_simple() for _ in range(n))
        if k < 0.94:
            return self.any_array()
        return self.pick([{}, {"a": 1}, object(), slice(1), 1j, self.path()])

    def value_simple(self):
        k = self.r.random()
        if k < 0.5:
            return self.integer()
        if k < 0.7:
            return self.real()
        if k < 0.8:
            return None
        return self.any_array() if k < 0.9 else self.string()

    def keywords(self, f, skip=()):
        """Random keywords of f: each required one, and optional ones: none, a few or
        many (a call with many is refused before it computes)."""
        kw = {}
        density = self.pick([0.0, 0.02, 0.05, 0.12])
        for p in inspect.signature(f).parameters.values():
            if p.name in skip or p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
                continue
            required = p.default is inspect.Parameter.empty
            if required or self.r.random() < density:
                kw[p.name] = self.value(p.name)
        return kw


def case_call(g):
    """(description, callable) of one random call."""
    k = g.r.random()
    if k < 0.26:
        x = g.tensor() if g.r.random() < 0.9 else g.value("x")
        kw = g.keywords(posenc.rope, skip=("x",))
        if g.r.random() < 0.15:
            kw["out"] = x if g.r.random() < 0.5 else g.tensor()
        return "rope", (lambda: posenc.rope(x, **kw)), (x, kw)
    if k < 0.48:
        q = g.tensor() if g.r.random() < 0.9 else g.value("q")
        k_ = q if g.r.random() < 0.6 else g.pick([None, g.tensor()])
        v = g.pick([None, q, g.tensor()])
        kw = g.keywords(posenc.attention, skip=("q", "k", "v"))
        if g.r.random() < 0.15:
            kw["factorized"] = tuple(g.pick([None, g.array(rank=2)]) for _ in range(4))
            kw["rel_kernel"] = g.array(rank=3)
        return "attention", (lambda: posenc.attention(q, k_, v, **kw)), (q, k_, v, kw)
    if k < 0.7:
        name = g.pick(posenc.table.__all__)
        f = getattr(posenc.table, name)
        kw = g.keywords(f)
        return f"table.{name}", (lambda: f(**kw)), kw
    if k < 0.76:
        kw = g.keywords(posenc.rope_ids, skip=("layout",))
        if g.r.random() < 0.7:
            kw["layout"] = g.pick(WORDS["layout_spec"])
        if g.r.random() < 0.5:
            kw["family"] = g.pick(WORDS["family"])
        return "rope_ids", (lambda: posenc.rope_ids(**kw)), kw
    if k < 0.84:
        a = g.tensor()
        b = a if g.r.random() < 0.4 else g.pick([g.tensor(), g.any_array(), None])
        kw = g.keywords(posenc.compare, skip=("a", "b"))
        return "compare", (lambda: posenc.compare(a, b, **kw)), (a, b, kw)
    if k < 0.92:
        ref, x = g.path(), g.tensor() if g.r.random() < 0.8 else g.value("x")
        kw = g.keywords(posenc.write, skip=("ref", "x"))
        if g.r.random() < 0.3:
            kw["attrs"] = g.pick([{"a": g.value_simple()}, {1: 2}, {"a\0": 1}, [1], {"x": [1.5]}])
        return "write", (lambda: posenc.write(ref, x, **kw)), (ref, kw)
    if k < 0.97:
        ref = g.path() if g.r.random() < 0.9 else g.value("ref")
        return "read", (lambda: posenc.read(ref)), ref
    if k < 0.985:
        n = g.pick([0, 1, 2, 3, 8, -1, 4097, 2**31 - 1, 2**64, 1.5, "2", None, True])
        return "set_threads", (lambda: posenc.set_threads(n)), n
    v = g.value("bits")
    f = g.pick([posenc.BF16, posenc.bf16_to_float32, posenc.float32_to_bf16])
    return f.__name__, (lambda: f(v)), v


def setup_folder(folder):
    """Files the cases read: a HF config, a malformed one, a tensor."""
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10000.0,
                   "max_position_embeddings": 64,
                   "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                    "original_max_position_embeddings": 32}}, f)
    with open(os.path.join(folder, "bad.json"), "w") as f:
        f.write('{"rope_theta": "x", "head_dim": -1, ')
    np.save(os.path.join(folder, "a.npy"), np.ones((1, 2, 4, 8), np.float32))


def run(args):
    folder = tempfile.mkdtemp(prefix="posenc-fuzz-")
    os.chdir(folder)  # every relative reference lands here
    setup_folder(folder)
    warnings.simplefilter("ignore")  # set_threads' note when a limit lets fewer start
    failures, counts, messages = [], {}, {}
    deadline = time.monotonic() + args.seconds
    cases = [args.case] if args.case is not None else range(args.count)
    n = 0
    for case in cases:
        if args.case is None and time.monotonic() > deadline:
            break
        name, call, shown = case_call(Gen(args.seed, case, folder, args.asan))
        if args.verbose or args.case is not None:
            print(f"case {case}: {name} {shown!r:.600}", file=sys.stderr, flush=True)
        n += 1
        try:
            call()
            outcome = "ok"
        except ALLOWED as e:
            outcome = type(e).__name__
            messages.setdefault(f"{name}: {type(e).__name__}: {e}", case)
        except Exception as e:  # noqa: BLE001 (the point: anything else is a finding)
            outcome = "BAD " + type(e).__name__
            where = traceback.extract_tb(e.__traceback__)[-1]
            failures.append(((name, type(e).__name__, where.filename, where.lineno), case,
                             shown, traceback.format_exc(limit=-3)))
        counts.setdefault(name, {}).setdefault(outcome, 0)
        counts[name][outcome] += 1
    posenc.set_threads(0)
    if args.messages:  # each distinct message once, with a case that gave it
        for text, case in sorted(messages.items()):
            print(f"{case}: {text:.300}")
    for name in sorted(counts):
        print(f"{name}: " + ", ".join(f"{o} {c}" for o, c in sorted(counts[name].items())))
    seen = set()
    for kind, case, shown, tb in failures:  # the first case of each kind
        if kind not in seen:
            seen.add(kind)
            print(f"\ncase {case} ({kind[0]}, replay with --seed {args.seed} --case {case}): "
                  f"{shown!r:.400}\n{tb}")
    print(f"{n} calls, {len(failures)} raised something else than posenc.Error/MemoryError")
    os.chdir("/")
    shutil.rmtree(folder, ignore_errors=True)
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--count", type=int, default=10**9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--case", type=int)
    p.add_argument("--asan", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print each case before its call")
    p.add_argument("--messages", action="store_true", help="print each distinct error message")
    args = p.parse_args()
    faulthandler.enable()
    if not args.asan:
        limit = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.exit(run(args))


if __name__ == "__main__":
    main()
