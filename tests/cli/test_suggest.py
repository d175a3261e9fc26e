"""Parse errors that help: unknown commands, kinds and options name themselves, suggest
the closest name and point at the command's own --help; library errors name the
command's options. Each is one line on stderr with exit status 2."""
import unittest

import h5py

from posenc_testlib import PosencTestCase, run


class Suggestions(PosencTestCase):
    def usage_error(self, *args):
        p = run(*args)
        self.assertEqual(p.returncode, 2, p.stderr)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("posenc: error: "), lines[0])
        return lines[0]

    def test_unknown_command(self):
        msg = self.usage_error("tabel", "rope", "--dim", "8")
        self.assertIn("unknown command 'tabel' (did you mean table?)", msg)
        self.assertIn("expected one of table, rope, attention", msg)

    def test_unknown_kind_and_missing_kind(self):
        msg = self.usage_error("table", "rop", "--dim", "8")
        self.assertIn("unknown kind 'rop' (did you mean rope?)", msg)
        self.assertIn("run 'posenc table --help'", msg)
        msg = self.usage_error("table")
        self.assertIn("a kind is required: sinusoidal, rope, rope2d, alibi, relative, t5-bucket",
                      msg)

    def test_unknown_option_with_suggestion(self):
        msg = self.usage_error("table", "rope", "--postions", "8", "--dim", "8",
                               "-o", self.path("x.npy"))
        self.assertIn("posenc table rope: unknown option '--postions' (did you mean --positions?)",
                      msg)
        self.assertIn("run 'posenc table rope --help'", msg)
        # A misspelt required option: the typo is the error, not the missing option.
        msg = self.usage_error("attention", "-q", "q.npy", "-k", "k.npy", "--outptu", "x.npy")
        self.assertIn("unknown option '--outptu' (did you mean --output?)", msg)

    def test_shared_options_a_run_does_not_name(self):
        # A run defines only the shared output, --part and global options its arguments
        # name; a typo of one of the others still gets its suggestion, and short options
        # in clusters and --name=value forms are found.
        table = ["table", "sinusoidal", "--positions", "4", "--dim", "8"]
        msg = self.usage_error(*table, "-o", self.path("x.npy"), "--compresion", "3")
        self.assertIn("unknown option '--compresion' (did you mean --compression?)", msg)
        msg = self.usage_error(*table, "-o", self.path("x.npy"), "--forse")
        self.assertIn("unknown option '--forse' (did you mean --force?)", msg)
        msg = self.usage_error(*table, "-o", self.path("x.npy"), "--to=npz")
        self.assertIn("--to: npz not in {npy,h5,hdf5,csv,tsv,json,text}", msg)
        out = self.path("y.h5")
        p = run(*table, "-o", out + ":/pe", "-fq", "--compression=4", "--part=1/2", "--dtype",
                "f64", "--sync", "--no-clobber")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        with h5py.File(out) as f:
            self.assertEqual(f["pe"].shape, (2, 8))
            self.assertEqual(f["pe"].dtype, "f8")
            self.assertEqual(f["pe"].compression_opts, 4)
        p = run(*table, "-o", out + ":/pe", "--to", "h5")
        self.assertEqual(p.returncode, 4, p.stderr)  # the dataset exists: needs --force
        p = run("-vj1", *table, "-o", out + ":/pe", "--force")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("posenc: kind = sinusoidal", p.stderr)

    def test_unrelated_word_has_no_suggestion(self):
        msg = self.usage_error("inspect", "x.npy", "--zzzzzzzz")
        self.assertIn("unknown option '--zzzzzzzz' (run", msg)

    def test_library_errors_name_options(self):
        msg = self.usage_error("table", "rope", "--positions", "4", "--dim", "8",
                               "--rotary-dim", "3", "-o", self.path("x.npy"))
        self.assertIn("--rotary-dim: rotary dimension must be positive and even, got 3", msg)
        msg = self.usage_error("table", "t5-bucket", "-o", self.path("x.npy"))
        self.assertIn("--q-len/--k-len: the table size is required", msg)
        msg = self.usage_error("table", "rope", "--positions", "4", "--dim", "8", "--scaling",
                               "yarn", "-o", self.path("x.npy"))
        self.assertIn("--scaling yarn: needs --original-max-pos (or --max-pos)", msg)


if __name__ == "__main__":
    unittest.main()
