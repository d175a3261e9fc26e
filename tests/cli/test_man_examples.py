"""The examples of the manual pages run as written.

Each page's example blocks (.EX ... .EE) run in page order in a folder of their own,
holding the files the examples name: the Llama 3.1 config as config.json and tensors of
shapes that fit (Llama's 32 query and 8 key/value heads of 128 dims, softmax rows for
`analyze attention`, ...). Every command (a line starting with posenc, cat, seq, h5ls or
sbatch, continuation lines joined) must exit 0, which also checks what some examples
claim: `posenc compare q_back.npy q.npy` after a rotation and its inverse, the
`--max-ulp 2` comparison of a float32 rounding with its float64 source. The Slurm
examples run task by task without Slurm; h5ls's listing must match its comment.
Formulas, messages and tables inside .EX blocks are not commands and are left alone.
"""
import os
import re
import unittest

import h5py
import numpy as np

from posenc_testlib import SOURCE_DIR
import test_readme

MAN = os.path.join(SOURCE_DIR, "man")


def roff_text(line):
    """An .EX line as the reader sees it."""
    for a, b in (("\\-", "-"), ("\\(aq", "'"), ("\\(dq", '"'), ("\\e", "\\"), ("\\&", "")):
        line = line.replace(a, b)
    return line


def page_commands(page):
    """The commands of the .EX blocks of man/PAGE.1, in order."""
    with open(os.path.join(MAN, page + ".1"), encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in re.findall(r"^\.EX\n(.*?)^\.EE", text, re.M | re.S):
        cur = ""
        for line in block.splitlines():
            line = roff_text(line)
            if line.rstrip().endswith("\\"):
                cur += line.rstrip()[:-1] + " "
                continue
            cmd = (cur + line).strip()
            cur = ""
            if cmd and cmd.split()[0] in ("posenc", "cat", "seq", "h5ls", "sbatch"):
                commands.append(cmd)
    return commands


class ManExamples(test_readme.ExampleRunner):
    """The README's runner with the fixtures the pages name."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(7)
        t = self.tmp

        def save(name, a):
            np.save(os.path.join(t, name), a)

        def normal(*shape, dtype=np.float32):
            return rng.standard_normal(shape).astype(dtype)

        # Llama 3.1 (config.json): 32 query heads, 8 key/value heads of 128 dims.
        save("q.npy", normal(1, 32, 16, 128))
        save("k.npy", normal(1, 8, 16, 128))
        save("v.npy", normal(1, 8, 16, 128))
        save("dout.npy", normal(1, 32, 16, 128))  # posenc-attention(1) GRADIENTS: dO of out
        save("kcache.npy", normal(1, 8, 64, 128))
        save("vcache.npy", normal(1, 8, 64, 128))
        save("rel.npy", normal(32, 32))  # T5 bias [buckets, heads]
        save("wpe.npy", normal(1024, 64))
        # posenc-add(1): OPT's left-padded attention mask for emb.npy [2, 16, 64].
        save("attn_mask.npy", np.array([[0] * 3 + [1] * 13, [1] * 16], dtype=np.int64))
        exp = normal(4, 8)
        save("expected.npy", exp)
        save("out.npy", exp * np.float32(1 + 1e-6))
        r64 = rng.standard_normal((8, 16))
        save("rope_f64.npy", r64)
        save("rope_f32.npy", r64.astype(np.float32))
        long = normal(256, 64)
        save("long.npy", long)
        save("short.npy", long[:200])
        save("big.npy", normal(64, 64))
        save("a.npy", normal(16, 32))
        save("b.npy", normal(16, 32))
        logits = rng.standard_normal((1, 4, 8, 8))
        probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        for name, datasets in (("layer0.h5", {"attn/probs": probs[0, 0]}),
                               ("table.h5", {"cos": rng.standard_normal((16, 8))}),
                               ("run.h5", {"probs": probs, "logits": logits}),
                               ("big.h5", {"k": normal(16, 8)}),
                               ("model.h5", {"layer0/q": normal(1, 32, 16, 128)})):
            with h5py.File(os.path.join(t, name), "w") as f:
                for d, v in datasets.items():
                    f[d] = v
        self.probs = probs

    def before(self, cmd):
        # Inputs under names that other pages' examples write: made when read.
        for prefix, name, dataset, value in (
                ("posenc analyze attention attn.h5", "attn.h5", "probs", self.probs),
                ("posenc rope q.h5:/q", "q.h5", "q", np.ones((1, 32, 16, 128), np.float32))):
            if cmd.startswith(prefix) and not os.path.exists(self.path(name)):
                with h5py.File(self.path(name), "w") as f:
                    f[dataset] = value
        if "--decomposed-rel-pos rel_pos_h.npy" in cmd:
            # SAM's image encoder: 14 x 14 tokens, tables of 2 * 14 - 1 rows.
            r = np.random.default_rng(5)
            for name in ("sam_q", "sam_k", "sam_v"):
                np.save(self.path(f"{name}.npy"),
                        r.standard_normal((1, 12, 196, 64)).astype(np.float32))
            for name in ("rel_pos_h", "rel_pos_w"):
                np.save(self.path(f"{name}.npy"), r.standard_normal((27, 64)).astype(np.float32))
        if cmd.startswith("posenc compare mine.npy"):
            super().before(cmd)  # mine.npy: the attention output, nearly
        if cmd.startswith("posenc attention -q fixture.h5:/q_rot"):
            np.save(self.path("k.npy"), np.random.default_rng(3).standard_normal(
                (1, 32, 16, 128)).astype(np.float32))
            np.save(self.path("v.npy"), np.random.default_rng(4).standard_normal(
                (1, 32, 16, 128)).astype(np.float32))

        self.before_combine(cmd)
        if cmd.startswith("posenc attention -q q_step.npy -k k_pages.npy"):
            # posenc-attention(1) KV CACHES: 8 entries of 2 pages of 16 tokens (the pages
            # shuffled), 32 query and 8 KV heads of 128 dims, one new token each, tables
            # of 64 columns.
            r = np.random.default_rng(9)
            f16 = lambda *s: r.standard_normal(s).astype(np.float16)  # noqa: E731
            np.save(self.path("q_step.npy"), f16(8, 1, 32, 128))
            np.save(self.path("k_pages.npy"), f16(16, 16, 8, 128))
            np.save(self.path("v_pages.npy"), f16(16, 16, 8, 128))
            np.save(self.path("pages.npy"), r.permutation(16).reshape(8, 2).astype(np.int32))
            np.save(self.path("seqlens.npy"), r.integers(1, 31, 8).astype(np.int32))
            np.save(self.path("k_step.npy"), f16(8, 1, 8, 128))
            np.save(self.path("v_step.npy"), f16(8, 1, 8, 128))
            ang = np.arange(32)[:, None] * 10000.0 ** (-np.arange(32) / 32)
            np.save(self.path("cos.npy"), np.cos(ang).astype(np.float16))
            np.save(self.path("sin.npy"), np.sin(ang).astype(np.float16))

    def before_combine(self, cmd):
        # posenc-combine(1): key blocks for q.npy read as bshd [1, 32, 16, 128], the
        # stacking its python3 line does, and a kernel's partials.
        r = np.random.default_rng(8)
        if cmd.startswith("posenc attention -q q.npy -k k0.npy"):
            for name in ("k0", "v0", "k1", "v1"):
                np.save(self.path(f"{name}.npy"),
                        r.standard_normal((1, 8, 16, 128)).astype(np.float32))
        if cmd.startswith("posenc combine o.npy l.npy"):
            for stacked, name in (("o", "output"), ("l", "lse")):
                np.save(self.path(f"{stacked}.npy"), np.stack(
                    [np.load(self.path(f"p{i}_{name}.npy")) for i in (0, 1)]))
        if cmd.startswith("posenc combine out_partial.npy"):
            np.save(self.path("out_partial.npy"), r.standard_normal((3, 2, 4, 2, 8)))
            np.save(self.path("lse_partial.npy"), r.standard_normal((3, 2, 4, 2)))
        if cmd.startswith("posenc compare kernel_out.npy ref.npy"):
            np.save(self.path("kernel_out.npy"), np.load(self.path("ref.npy")))

    def after(self, cmd):
        pass

    def run_page(self, page):
        commands = page_commands(page)
        self.assertTrue(commands, page)
        for cmd in commands:
            with self.subTest(page=page, cmd=cmd):
                word = cmd.split()[0]
                if word == "sbatch":
                    self.slurm(cmd)
                elif word == "h5ls":
                    self.h5ls(cmd)
                elif "$SLURM_ARRAY_TASK_ID" in cmd:
                    self.slurm(f"sbatch --array=0-63 --wrap '{cmd}'")
                else:
                    self.before(cmd)
                    p = self.shell(cmd, COLUMNS="80", LINES="24")
                    self.assertEqual(p.returncode, 0, f"{page}: {cmd}\n{p.stderr}")

    def test_overview(self):
        self.run_page("posenc")

    def test_command_pages(self):
        pages = sorted(f[:-2] for f in os.listdir(MAN) if f.startswith("posenc-"))
        self.assertGreater(len(pages), 10)
        for page in pages:
            if page_commands(page):
                self.tearDown()  # each page in a folder of its own
                self.setUp()
                self.run_page(page)


if __name__ == "__main__":
    unittest.main()
