"""The manual: posenc(1), the overview, and one page per command (posenc-rope(1), ...).

Claims checked: every command has its page and the overview names each one; every page
lints clean (`groff -man -ww -z`); every option a command defines (read from the fish
completion script, which the binary generates from its own definitions) is documented
in that command's page, or in the one place shared options are: the global and output
options in posenc(1), --part in posenc-join(1), the ROPE OPTIONS in posenc-rope(1);
`posenc help [COMMAND]` shows the page through man(1), or prints its path without man(1),
from the source tree for the build-tree binary and from share/man/man1 next to an
installed one."""
import os
import re
import shutil
import subprocess
import unittest

from posenc_testlib import BIN, SOURCE_DIR, PosencTestCase, run

MAN = os.path.join(SOURCE_DIR, "man")

# Shared options and the page that documents them.
GLOBAL = {"-h", "--help", "-j", "--threads", "-q", "--quiet", "-v", "--verbose", "--version"}
OUTPUT = {"-o", "--output", "--to", "-f", "--force", "--compression", "--no-clobber", "--sync"}


def page_text(name):
    """The roff source of man/NAME.1 with roff's escaped dashes and font changes
    resolved, so options read as they are typed."""
    with open(os.path.join(MAN, name + ".1"), encoding="utf-8") as f:
        s = f.read()
    s = s.replace("\\-", "-").replace("\\(en", "-")
    return re.sub(r"\\f[BIRP]", "", s)


def section(text, title):
    """The text of `.SH "TITLE"` up to the next .SH."""
    m = re.search(r'^\.SH "?%s"?\n(.*?)(?=^\.SH |\Z)' % re.escape(title), text, re.M | re.S)
    assert m, title
    return m.group(1)


def documents(text, option):
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(option), text) is not None


def commands_and_options():
    """{command path ("/table/rope"): [options]} from `posenc completion fish`."""
    p = run("completion", "fish")
    assert p.returncode == 0, p.stderr
    opts = {}
    for line in p.stdout.decode().splitlines():
        m = re.match(r"complete -c posenc -n 'test \(__posenc_path\) = \"([^\"]*)\"' "
                     r"(-l|-s) (\S+)", line)
        if m:
            opts.setdefault(m.group(1), []).append(("--" if m.group(2) == "-l" else "-")
                                                   + m.group(3))
    return opts


class Pages(PosencTestCase):
    def test_one_page_per_command_and_the_overview_names_each(self):
        paths = commands_and_options()
        commands = sorted({p.split("/")[1] for p in paths if p})
        self.assertIn("rope", commands)
        self.assertIn("help", commands)
        overview = page_text("posenc")
        for c in commands:
            if c == "help":  # documented in the overview, section HELP
                self.assertIn(".SH HELP", overview)
                continue
            self.assertTrue(os.path.exists(os.path.join(MAN, f"posenc-{c}.1")), c)
            self.assertIn(f".BR posenc-{c} (1)", section(overview, "COMMANDS"), c)
            self.assertIn(f".BR posenc-{c} (1)", section(overview, "SEE ALSO"), c)
            text = page_text(f"posenc-{c}")
            self.assertTrue(text.startswith(f".TH POSENC-{c.upper()} 1 "), c)
            self.assertRegex(text, r"\.SH NAME\nposenc-%s - \S" % c)
        on_disk = sorted(f[len("posenc-"):-2] for f in os.listdir(MAN)
                         if f.startswith("posenc-") and f.endswith(".1"))
        self.assertEqual(on_disk, [c for c in commands if c != "help"])

    @unittest.skipUnless(shutil.which("groff"), "groff is not installed")
    def test_every_page_lints_clean(self):
        pages = sorted(f for f in os.listdir(MAN) if f.endswith(".1"))
        self.assertGreater(len(pages), 10)
        for f in pages:
            p = subprocess.run(["groff", "-man", "-ww", "-z", os.path.join(MAN, f)],
                               capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""), f)

    def test_every_option_is_documented_in_its_commands_page(self):
        overview = page_text("posenc")
        rope = page_text("posenc-rope")
        rope_options = section(rope, "ROPE OPTIONS")
        join = page_text("posenc-join")
        missing = []
        for path, options in commands_and_options().items():
            if not path:
                for o in options:
                    if not documents(section(overview, "GLOBAL OPTIONS"), o):
                        missing.append(f"posenc {o} (posenc(1) GLOBAL OPTIONS)")
                continue
            command = path.split("/")[1]
            own = overview if command == "help" else page_text(f"posenc-{command}")
            for o in options:
                if documents(own, o):
                    continue
                if o in GLOBAL:
                    ok = documents(section(overview, "GLOBAL OPTIONS"), o)
                elif o in OUTPUT:
                    ok = documents(section(overview, "TENSOR REFERENCES AND FILES"), o)
                elif o == "--part":
                    ok = documents(section(join, "PARTS OF A JOB"), o)
                else:
                    # table rope/rope2d, attention --rope and analyze take the RoPE options
                    ok = command in ("table", "attention", "analyze") and documents(rope_options, o)
                if not ok:
                    missing.append(f"{path.replace('/', ' ').strip()} {o}")
        self.assertEqual(missing, [], "options documented in no page")


class Help(PosencTestCase):
    def no_man_env(self):
        """PATH with no man(1) on it."""
        empty = self.path("empty-bin")
        os.makedirs(empty, exist_ok=True)
        return {"PATH": empty}

    def test_without_man_the_pages_path_is_printed(self):
        for args, page in ((("help",), "posenc.1"), (("help", "rope"), "posenc-rope.1"),
                           (("help", "help"), "posenc.1"), (("help", "table"), "posenc-table.1")):
            p = run(*args, env=self.no_man_env())
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.path.realpath(p.stdout.decode().strip()),
                             os.path.realpath(os.path.join(MAN, page)), args)
            self.assertIn("man(1) not found", p.stderr)
        p = run("-q", "help", "rope", env=self.no_man_env())
        self.assertEqual(p.stderr, "")

    @unittest.skipUnless(shutil.which("man"), "man(1) is not installed")
    def test_with_man_not_on_a_terminal_the_page_is_plain_text(self):
        p = self.run_ok("help", "rope", env={"MANWIDTH": "80"})
        text = p.stdout.decode()
        self.assertRegex(text, r"posenc-rope +- +apply +rotary +position +embedding")
        self.assertIn("ROPE OPTIONS", text)
        self.assertNotIn("\b", text)  # no overstrike bold: it is not a terminal
        text = self.run_ok("help").stdout.decode()
        self.assertIn("posenc-table(1)", text)
        self.assertIn("GLOBAL OPTIONS", text)

    @unittest.skipUnless(shutil.which("man"), "man(1) is not installed")
    def test_a_closed_pipe_ends_man_quietly(self):
        p = subprocess.run(f"'{BIN}' help attention | head -1", shell=True,
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("POSENC-ATTENTION(1)", p.stdout)

    def test_unknown_command(self):
        self.assert_fails(2, "help", "rpoe", match=r"help: unknown command 'rpoe' "
                          r"\(did you mean rope\?\); expected one of table, rope, ")
        self.assert_fails(2, "help", "rope", "table")

    def test_installed_layout(self):
        """A binary outside the build tree finds its pages in ../share/man/man1, and says
        which page is missing when it is not there."""
        prefix = self.path("prefix")
        os.makedirs(os.path.join(prefix, "bin"))
        man1 = os.path.join(prefix, "share", "man", "man1")
        os.makedirs(man1)
        shutil.copy(BIN, os.path.join(prefix, "bin", "posenc"))
        shutil.copy(os.path.join(MAN, "posenc-rope.1"), man1)
        installed = os.path.join(prefix, "bin", "posenc")
        env = dict(os.environ, **self.no_man_env())
        p = subprocess.run([installed, "help", "rope"], capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.path.realpath(p.stdout.strip()),
                         os.path.realpath(os.path.join(man1, "posenc-rope.1")))
        p = subprocess.run([installed, "help", "join"], capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(p.stdout, "")
        self.assertRegex(p.stderr, r"^posenc: error: help: the manual page posenc-join.1 is not "
                         r"installed \(looked in .*share/man/man1\); 'posenc join --help' "
                         r"prints the options\n$")


if __name__ == "__main__":
    unittest.main()
