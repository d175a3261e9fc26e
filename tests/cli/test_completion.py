"""Shell completion: `posenc completion bash` sourced into a real bash completes real
prefixes (commands, kinds, options, fixed option values, files); the zsh and fish
scripts name the same commands and options."""
import shutil
import subprocess
import unittest

from posenc_testlib import PosencTestCase, run


class BashCompletion(PosencTestCase):
    def complete(self, line):
        """The candidates bash offers for the last word of `line` (a trailing space
        means an empty last word)."""
        words = line.split()
        if line.endswith(" "):
            words.append("")
        script = run("completion", "bash")
        self.assertEqual(script.returncode, 0, script.stderr)
        path = self.path("posenc.bash")
        with open(path, "wb") as f:
            f.write(script.stdout)
        arr = " ".join("'" + w + "'" for w in words)
        prog = (f"source {path}; COMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}; "
                "_posenc; printf '%s\\n' \"${COMPREPLY[@]}\"")
        p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        return sorted(x for x in p.stdout.splitlines() if x)

    def test_commands_and_kinds(self):
        self.assertEqual(self.complete("posenc ta"), ["table"])
        self.assertEqual(self.complete("posenc co"), ["combine", "compare", "completion", "convert"])
        self.assertEqual(self.complete("posenc table r"),
                         ["reformer-axial", "relative", "rope", "rope2d", "rt-detr-sincos"])
        self.assertEqual(self.complete("posenc -j 2 table t"), ["t5-bucket"])

    def test_options_and_values(self):
        self.assertEqual(self.complete("posenc table rope --posi"),
                         ["--position-ids", "--positions"])
        self.assertEqual(self.complete("posenc table rope --layout "), ["full", "half"])
        self.assertEqual(self.complete("posenc rope x.npy --dtype b"), ["bf16", "bfloat16"])
        self.assertIn("--causal", self.complete("posenc attention --ca"))
        # Global options are accepted after the command too.
        self.assertIn("--verbose", self.complete("posenc inspect --verb"))

    def test_files_where_a_tensor_goes(self):
        open(self.path("layer0.npy"), "wb").close()
        self.assertEqual(self.complete("posenc inspect lay"), ["layer0.npy"])


class OtherShells(PosencTestCase):
    def test_zsh_and_fish_name_the_same_commands_and_options(self):
        zsh = run("completion", "zsh")
        fish = run("completion", "fish")
        self.assertEqual(zsh.returncode, 0, zsh.stderr)
        self.assertEqual(fish.returncode, 0, fish.stderr)
        z, f = zsh.stdout.decode(), fish.stdout.decode()
        self.assertTrue(z.startswith("#compdef posenc"))
        self.assertIn("'/table') subs=(sinusoidal rope rope2d alibi relative t5-bucket", z)
        self.assertIn("'/table/rope:--layout') compadd -- full half", z)
        self.assertRegex(f, r"-f -a 'table rope attention .*inspect compare convert .*completion help'")
        # Each option once per command.
        attention = z[z.index("'/attention') subs=()"):].splitlines()[0]
        names = attention.split("opts=(")[1].rstrip(") ;").split()
        self.assertEqual(len(names), len(set(names)))
        self.assertIn("-l layout -x -a 'full half'", f)
        for shell, text in (("zsh", z), ("fish", f)):
            if shutil.which(shell):
                p = subprocess.run([shell, "-n"], input=text, capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)

    def test_unknown_shell(self):
        p = run("completion", "tcsh")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
