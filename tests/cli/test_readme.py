"""The README's shell examples run as written.

Every command of the README's code blocks that starts with posenc (or feeds it: cat,
seq ... | parallel, the Slurm recipe's --wrap command, h5ls), and the picture commands
quoted in its text, runs, in README order, in
one folder holding the files the examples name: the model configs of tests/data under
the names the README gives them, and random tensors of shapes that fit each example
(a DeepSeek query has 192 dimensions). Each must exit 0 (a compare whose tensors the
README shows differing, 1); `h5ls -r fixture.h5` must list
the datasets its comment names; the C++ block is built by tests/consumer (.ci/test).
Set-up commands (.ci/setup, .ci/test, cmake --install) are left to CI.
"""
import os
import re
import shutil
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, SOURCE_DIR, PosencTestCase

RUNS = ("posenc", "cat", "seq", "h5ls", "sbatch")


def readme_commands():
    """The shell commands of the README's code blocks (indented or ```sh), in order,
    continuation lines joined, comments dropped."""
    with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    blocks += [m.group(0) for m in re.finditer(r"(?:^(?: {4}.*)?\n)+", text, re.M)
               if m.group(0).strip()]
    order = {b: text.index(b) for b in blocks}
    commands = []
    for block in sorted(blocks, key=order.get):
        lines = [ln[4:] if ln.startswith("    ") else ln for ln in block.splitlines()]
        joined, cur = [], ""
        for ln in lines:
            if ln.rstrip().endswith("\\"):
                cur += ln.rstrip()[:-1] + " "
                continue
            joined.append(cur + ln)
            cur = ""
        for cmd in joined:
            cmd = cmd.strip()
            if cmd and not cmd.startswith("#") and cmd.split()[0] in RUNS:
                commands.append(cmd)
    # The pictures' commands, quoted in the text.
    commands += re.findall(r"`(posenc analyze [^`]*--plot [^`]*)`", text)
    return commands


class Readme(PosencTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(31)
        t = self.tmp

        def save(name, shape, dtype=np.float32):
            os.makedirs(os.path.dirname(os.path.join(t, name)) or t, exist_ok=True)
            np.save(os.path.join(t, name), rng.standard_normal(shape).astype(dtype))

        data = os.path.join(SOURCE_DIR, "tests", "data")
        for src, dst in (("llama-3.1-8b.json", "config.json"),
                         ("deepseek-v3.json", "deepseek-v3/config.json"),
                         ("gemma-3-27b-it.json", "gemma-3/config.json")):
            os.makedirs(os.path.dirname(os.path.join(t, dst)) or t, exist_ok=True)
            shutil.copy(os.path.join(data, src), os.path.join(t, dst))
        # Llama 3.1 / Gemma-3 heads: 32 query heads, 16 key/value heads of 128 dims.
        save("q.npy", (1, 32, 16, 128))
        save("k.npy", (1, 16, 16, 128))
        save("v.npy", (1, 16, 16, 128))
        save("q_step.npy", (1, 32, 1, 128))
        save("kcache.npy", (1, 16, 2048, 128))
        save("vcache.npy", (1, 16, 2048, 128))
        save("emb.npy", (2, 16, 64))
        # XLNet, [s, b, h, d]: 8 queries, 4 of memory, relative positions klen..-qlen.
        save("q_head.npy", (8, 1, 4, 16))
        save("k_head_h.npy", (12, 1, 4, 16))
        save("v_head_h.npy", (12, 1, 4, 16))
        save("k_head_r.npy", (20, 1, 4, 16))
        save("r_w_bias.npy", (4, 16))
        save("r_r_bias.npy", (4, 16))
        save("cos.npy", (4096, 64))
        long = np.arange(256.0)
        np.save(os.path.join(t, "long.npy"), long)
        np.save(os.path.join(t, "short.npy"), long[:200])
        with h5py.File(os.path.join(t, "acts.h5"), "w") as f:
            f["q"] = rng.standard_normal((64, 2, 8, 16)).astype(np.float32)
        os.makedirs(os.path.join(t, "docs"))
        self.bin = os.path.join(t, "bin")
        os.makedirs(self.bin)
        os.symlink(os.path.abspath(BIN), os.path.join(self.bin, "posenc"))

    def before(self, cmd):
        """Files one example needs that an earlier one would make differently."""
        if "deepseek-v3" in cmd:  # a query head [q_nope | q_pe] of 128 + 64 dims
            np.save(self.path("q.npy"),
                    np.random.default_rng(1).standard_normal((1, 4, 8, 192)).astype(np.float32))
        if cmd.startswith("posenc compare mine.npy"):  # "your kernel": the output, nearly
            with h5py.File(self.path("attn.h5"), "r") as f:
                out = f["output"][...]
            np.save(self.path("mine.npy"), out * np.float32(1 + 1e-7))

    def status(self, cmd):
        """The exit status an example shows: 1 where the README shows a compare that
        differs (the float32-angle kernel), else 0."""
        return 1 if cmd.startswith("posenc compare x_f32.npy x_ref.npy") else 0

    def after(self, cmd):
        if "deepseek-v3" in cmd:
            np.save(self.path("q.npy"), np.random.default_rng(2).standard_normal(
                (1, 32, 16, 128)).astype(np.float32))

    def shell(self, cmd, **env):
        full = dict(os.environ, PATH=self.bin + ":" + os.environ.get("PATH", ""), **env)
        return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=self.tmp, env=full,
                              capture_output=True, text=True, timeout=600)

    def test_every_example_runs(self):
        commands = readme_commands()
        self.assertGreater(len(commands), 30)  # all of them found
        ran = 0
        for cmd in commands:
            with self.subTest(cmd=cmd):
                word = cmd.split()[0]
                if word == "sbatch":
                    self.slurm(cmd)
                    continue
                if word == "h5ls":
                    self.h5ls(cmd)
                    continue
                if "parallel" in cmd and not shutil.which("parallel"):
                    print(f"SKIP: README: GNU parallel is not installed: {cmd}")
                    cmd = re.sub(r"^seq 0 (\d+) \| parallel (.*)$",
                                 lambda m: f"for i in $(seq 0 {m.group(1)}); do "
                                 + m.group(2).replace("{}", "$i") + "; done", cmd)
                self.before(cmd)
                p = self.shell(cmd, COLUMNS="80", LINES="24")
                self.assertEqual(p.returncode, self.status(cmd), f"{cmd}\n{p.stderr}")
                self.after(cmd)
                ran += 1
        self.assertGreater(ran, 25)

    def slurm(self, cmd):
        """The Slurm recipe without Slurm: the --wrap command of each array task."""
        wrap = re.search(r"--wrap '(.*)'$", cmd).group(1)
        m = re.search(r"--array=0-(\d+)", cmd)
        tasks = range(int(m.group(1)) + 1) if m else [None]
        for i in tasks:
            env = {} if i is None else {"SLURM_ARRAY_TASK_ID": str(i)}
            p = self.shell(wrap, **env)
            self.assertEqual(p.returncode, 0, f"{wrap} (task {i})\n{p.stderr}")
        out = re.search(r" -o (\S+)\.h5:/q --virtual", wrap)
        if out:  # the join: one virtual dataset the shape of the whole
            with h5py.File(self.path(out.group(1) + ".h5"), "r") as f, \
                    h5py.File(self.path("acts.h5"), "r") as a:
                self.assertTrue(f["q"].is_virtual)
                self.assertEqual(f["q"][...].shape, a["q"].shape)

    def h5ls(self, cmd):
        if not shutil.which("h5ls"):
            print(f"SKIP: README: h5ls (hdf5-tools) is not installed: {cmd}")
            return
        p = self.shell(cmd.split("#")[0])
        self.assertEqual(p.returncode, 0, p.stderr)
        listed = {ln.split()[0] for ln in p.stdout.splitlines() if "Dataset" in ln}
        self.assertEqual(listed, set(cmd.split("#")[1].split()))


if __name__ == "__main__":
    unittest.main()
