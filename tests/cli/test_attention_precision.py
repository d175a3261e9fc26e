"""`posenc attention`'s arithmetic as recorded and as documented say the same thing.

Claims: every input dtype (f64, f32, f16, bf16) is computed in float64 by default and
rounded once; `--precision f32` is the opt-in for speed. The outputs' `precision`
attribute records the arithmetic used, on every path (in memory, streamed from files,
--rope, Shaw and Transformer-XL relative terms, ALiBi, T5, packed sequences); lse is f64 when the output type is
f64, else f32. README, posenc(1), posenc-attention(1) and --help say so (the values
themselves are checked against float64 references in reference/test_exact_attention.py).
"""
import os
import re
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, SOURCE_DIR, PosencTestCase


def man_text(name):
    """The page rendered as plain text (groff), hyphenation off, one paragraph a line."""
    p = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", "-rLL=2000n", "-rHY=0",
                        os.path.join(SOURCE_DIR, "man", name)], capture_output=True, text=True)
    return re.sub(r"[\u2010\u2011\u2212]", "-", p.stdout)


class RecordedPrecision(PosencTestCase):
    def inputs(self, dtype, sq=6, sk=9):
        rng = np.random.default_rng(40)
        refs = {}
        for n, s in (("q", sq), ("k", sk), ("v", sk)):
            x = rng.standard_normal((1, 2, s, 8)).astype(np.float32)
            if dtype == "bf16":  # numpy has no bf16: posenc writes it
                np.save(self.path(f"{n}32.npy"), x)
                refs[n] = self.path(f"{n}.h5") + ":/x"
                self.run_ok("convert", self.path(f"{n}32.npy"), "--dtype", "bf16", "-o", refs[n],
                            "--force")
            else:
                refs[n] = self.npy(f"{n}.npy", x.astype({"f64": np.float64, "f32": np.float32,
                                                         "f16": np.float16}[dtype]))
        return refs

    def attrs(self, refs, *args, emit="probs,output,lse"):
        out = self.path("out.h5")
        if os.path.exists(out):
            os.remove(out)
        self.run_ok("attention", "-q", refs["q"], "-k", refs["k"], "-v", refs["v"], "--emit",
                    emit, "-o", out, *args)
        with h5py.File(out, "r") as f:
            return {n: (f[n].attrs["precision"], f[n].dtype) for n in f}

    def test_default_is_f64_for_every_input_dtype_and_path(self):
        self.npy("t5.npy", np.linspace(-1, 1, 2 * 32).reshape(32, 2).astype(np.float32))
        self.npy("relk.npy", np.linspace(-1, 1, 5 * 8).reshape(5, 8).astype(np.float32))
        self.npy("relxl.npy", np.linspace(-1, 1, 9 * 2 * 8).reshape(9, 2, 8).astype(np.float32))
        self.npy("cu.npy", np.array([0, 4, 9], dtype=np.int32))
        paths = {"in memory": [], "streamed": ["--max-memory", "64M"], "rope": ["--rope"],
                 "alibi": ["--alibi", "symmetric"], "t5": ["--t5-bias", self.path("t5.npy")],
                 "shaw": ["--relative-k", self.path("relk.npy")],
                 "transformer-xl": ["--rel-keys", self.path("relxl.npy")]}
        for dtype in ("f64", "f32", "f16", "bf16"):
            refs = self.inputs(dtype)
            for name, args in paths.items():
                emit = "output,lse" if name == "streamed" else "probs,output,lse"
                got = self.attrs(refs, *args, emit=emit)
                for n, (prec, _) in got.items():
                    self.assertEqual(prec, "f64", f"{dtype} inputs, {name}: {n}")
                self.assertEqual(got["lse"][1], np.float64 if dtype == "f64" else np.float32,
                                 f"{dtype} inputs, {name}: lse dtype")
                got = self.attrs(refs, *args, "--precision", "f32", emit=emit)
                self.assertEqual({p for p, _ in got.values()}, {"f32"}, f"{dtype}, {name}")
            # Packed sequences (sq = sk).
            refs = self.inputs(dtype, sq=9, sk=9)
            got = self.attrs(refs, "--cu-seqlens", self.path("cu.npy"), "--causal")
            self.assertEqual({p for p, _ in got.values()}, {"f64"}, f"{dtype}, cu-seqlens")

    def test_lse_type_follows_the_output_type(self):
        refs = self.inputs("f32")
        for dt, want in (("f64", np.float64), ("f32", np.float32), ("f16", np.float32),
                         ("bf16", np.float32)):
            for prec in ("f64", "f32"):
                got = self.attrs(refs, "--dtype", dt, "--precision", prec)
                self.assertEqual(got["lse"][1], want, f"--dtype {dt} --precision {prec}")

    def test_documents_say_what_the_outputs_record(self):
        self.assertEqual(self.attrs(self.inputs("f32"))["output"][0], "f64")
        with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertIn("Values are computed in float64 unless you ask otherwise", readme)
        overview = man_text("posenc.1")
        self.assertIn("Every value is computed in float64 unless an option says otherwise",
                      overview)
        page = man_text("posenc-attention.1")
        entry = page.split("--precision f32|f64", 1)[1].split("\n\n", 1)[0]
        self.assertRegex(entry, r"Default: f64 for every input dtype")
        self.assertRegex(entry, r"f32 is the opt-in for speed")
        self.assertIn("lse is f64 when the output type is f64 and f32 otherwise", page)
        for text in (page, overview, readme):
            self.assertNotRegex(text, r"in f64 for f64 queries and in f32 otherwise|"
                                      r"f64 for f64 inputs \(Q\), f32 otherwise")
        helptext = subprocess.run([BIN, "attention", "--help"], capture_output=True,
                                  text=True).stdout
        helptext = re.sub(r"\s+", " ", helptext)
        self.assertRegex(helptext, r"--precision[^-]*default: f64 for every input dtype")
        self.assertRegex(helptext, r"--precision[^-]*f32 is the opt-in for speed")


if __name__ == "__main__":
    unittest.main()
