"""Global command-line behaviour: --version and --help on stdout with exit 0, usage
errors (no command, unknown command or option, missing or bad values) exit 2 with one
`posenc: error:` line, never CLI11's own 100+ codes.
"""
import re
import unittest

from posenc_testlib import PosencTestCase, run


class GlobalBehaviour(PosencTestCase):
    def test_version(self):
        p = run("--version")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout.decode().strip()
        self.assertRegex(out, r"^posenc \d+\.\d+\.\d+$")
        self.assertEqual(p.stderr, "")

    def test_help(self):
        for args in [["--help"], ["-h"], ["convert", "--help"], ["compare", "--help"]]:
            with self.subTest(args=args):
                p = run(*args)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("posenc", p.stdout.decode())
        text = run("compare", "--help").stdout.decode()
        for opt in ["--rtol", "--atol", "--max-ulp", "--json", "--equal-nan", "--slice"]:
            self.assertIn(opt, text)
        text = run("convert", "--help").stdout.decode()
        for opt in ["--dtype", "--to", "--force", "--no-clobber", "--compression", "-o",
                    "--slice"]:
            self.assertIn(opt, text)

    def test_no_command(self):
        p = run()
        self.assertEqual(p.returncode, 2)
        self.assertIn("posenc: error: a command is required", p.stderr)

    def test_usage_errors_exit_2_with_one_line(self):
        cases = [
            (["frobnicate"], None),
            (["--no-such-option"], None),
            (["convert", "--no-such-option", "a.npy", "-o", "b.npy"], None),
            (["convert", "a.npy"], r"--output"),
            (["convert", "a.npy", "-o", "b.npy", "--compression", "12"], r"--compression"),
            (["convert", "a.npy", "-o", "b.npy", "--to", "xls"], r"--to"),
            (["-j", "0", "convert", "a.npy", "-o", "b.npy"], r"threads"),
            (["-j", "many", "convert", "a.npy", "-o", "b.npy"], None),
            (["compare", "a.npy"], None),
            (["compare", "a.npy", "b.npy", "--atol", "abc"], r"--atol"),
        ]
        for args, pattern in cases:
            with self.subTest(args=args):
                p = self.assert_fails(2, *args, cwd=self.tmp)
                if pattern:
                    self.assertRegex(p.stderr, pattern)
                self.assertNotRegex(p.stderr, re.compile("terminate|what\\(\\)|Aborted"))
        self.assert_no_new_files([])

    def test_optional_values_show_in_help(self):
        """An option whose value may be left out shows it in brackets, as the man page
        does (`--alibi [VARIANT]`), not as a required TEXT."""
        text = run("attention", "--help").stdout.decode()
        self.assertRegex(text, r"\n  --alibi \[VARIANT\] ")
        self.assertRegex(text, r"\n  --causal \[ALIGN\] ")
        self.assertNotRegex(text, r"--alibi TEXT")

    def test_a_missing_parameter_is_named_as_its_option(self):
        for scaling, extra, pattern in [
                ("llama3", [], r"--scaling llama3: needs --factor$"),
                ("linear", [], r"--scaling linear: needs --factor$"),
                ("yarn", ["--original-max-pos", "16"],
                 r"--scaling yarn: needs --factor \(or --max-pos and --original-max-pos\)$")]:
            with self.subTest(scaling=scaling):
                self.assert_fails(2, "table", "rope", "--positions", "4", "--dim", "8",
                                  "--scaling", scaling, *extra, "-o", self.path("t.npy"),
                                  match=pattern)
        self.assert_no_new_files([])


if __name__ == "__main__":
    unittest.main()
