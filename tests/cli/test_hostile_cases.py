"""Hostile input, second round: crashes, hangs and wrong statuses found against 0.1.

1. --hf-config with a document nested 60,000 objects or 300,000 arrays deep was a stack
   overflow (SIGSEGV): refused before parsing (exit 3, naming the file), as is a config
   larger than 16 MiB. JSON tensors larger than 32 MiB are refused before they are
   parsed (their DOM takes 10-28x the text); under an address-space limit (ulimit -v)
   a JSON tensor that does not fit is "out of memory" (exit 3), never an abort (freeing
   a half-built nlohmann document allocates).
2. table alibi --heads 2^30 .. 2^31-1 looped forever (int overflow): exit 2 naming
   --heads, at once.
3. plot of data spanning +-1e308 (or --vmin -1e308 --vmax 1e308) crashed in the terminal
   heatmap and drew wrong colours in images: every finite range scales correctly
   (colours checked in the terminal and in a PNG).
4. Out-of-range values in a --hf-config file are bad input (exit 3) naming the file and
   the key, never options the user did not give.
5. Names, attributes and CSV cells from files reach the terminal with control
   characters escaped (\\x1b), in inspect, plot titles and error lines.
6. --part '' is a usage error, as are --emit output,output and an unknown
   POSENC_ROPE_ISA.
"""
import json
import os
import subprocess
import unittest

import h5py
import numpy as np
from PIL import Image

import test_plot as tp
from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


class DeepAndLargeJson(PosencTestCase):
    def rope_table(self, config, *extra):
        return ["table", "rope", "--positions", 4, "--dim", 8, "--hf-config", config,
                "-o", self.path("t.npy"), *extra]

    def test_deeply_nested_config_is_bad_input(self):
        np.save(self.path("q.npy"), np.ones((1, 2, 4, 8), np.float32))
        cases = {"objects": '{"a":' * 60000 + "1" + "}" * 60000,
                 "arrays": "[" * 300000 + "]" * 300000,
                 "in_rope_scaling": '{"head_dim": 8, "rope_scaling": ' + "[" * 300
                                    + "]" * 300 + "}"}
        for name, text in cases.items():
            config = write(self.path(f"{name}.json"), text)
            with self.subTest(name=name):
                self.assert_fails(3, *self.rope_table(config),
                                  match=rf"{name}\.json: nested deeper than 256 levels")
                self.assert_fails(3, "attention", "-q", self.path("q.npy"), "-k",
                                  self.path("q.npy"), "--hf-config", config, "-o",
                                  self.path("a.npy"), match=rf"{name}\.json: nested deeper")
        self.assertEqual(sorted(os.listdir(self.tmp)),
                         ["arrays.json", "in_rope_scaling.json", "objects.json", "q.npy"])

    def test_nesting_at_the_limit_is_read(self):
        # 255 levels inside the top-level object: still a config (an unknown key).
        deep = "[" * 255 + "]" * 255
        config = write(self.path("c.json"), '{"head_dim": 8, "junk": ' + deep + "}")
        self.run_ok(*self.rope_table(config))

    def test_huge_config_is_refused_unread(self):
        config = self.path("big.json")
        with open(config, "w") as f:
            f.write('{"head_dim": 8, "pad": "')
            f.write("x" * (17 << 20))
            f.write('"}')
        self.assert_fails(3, *self.rope_table(config),
                          match=r"big\.json: larger than 16 MiB; a HF config is a few kilobytes")

    def test_deep_json_tensor(self):
        path = write(self.path("x.json"), "[" * 300000 + "]" * 300000)
        self.assert_fails(3, "inspect", path, match=r"x\.json: \"data\" is nested deeper than 8")
        path = write(self.path("y.json"), '{"data": ' + "[" * 9 + "1" + "]" * 9 + "}")
        self.assert_fails(3, "inspect", path, match=r"y\.json: \"data\" is nested deeper than 8")
        path = write(self.path("z.json"), '{"data": ' + "[" * 8 + "1" + "]" * 8 + "}")
        self.assertIn(b"(1, 1, 1, 1, 1, 1, 1, 1)", self.run_ok("inspect", path).stdout)

    def test_large_json_tensor_is_refused(self):
        path = self.path("big.json")
        with open(path, "w") as f:
            f.write("[" + "1.0," * (9 << 20) + "1.0]")  # 36 MiB
        self.assert_fails(3, "inspect", path,
                          match=r"big\.json: a JSON tensor of \d+ bytes is larger than the 32 "
                                r"MiB posenc reads as JSON \(use NPY or HDF5\)")

    @unittest.skipIf(UNDER_ASAN, "address-space limits mean nothing under ASan")
    def test_json_tensor_under_an_address_space_limit(self):
        # 28 MiB of text parses into ~300 MiB. Under each limit the run either fits or
        # is "out of memory" (exit 3): freeing the half-built document once allocated
        # (std::terminate, SIGABRT), whichever allocation failed first.
        path = self.path("x.json")
        with open(path, "w") as f:
            f.write("[" + "1.0," * (7 << 20) + "1.0]")
        refused = 0
        for mib in (120, 200, 260, 290, 300, 310, 330, 360, 420):
            for args in (["inspect", path], ["convert", path, "-o", self.path("o.npy")]):
                with self.subTest(mib=mib, cmd=args[0]):
                    p = subprocess.run(["bash", "-c", f'ulimit -v {mib << 10}; exec "$@"',
                                        "posenc", BIN, *args], capture_output=True, timeout=300)
                    err = p.stderr.decode("utf-8", "replace").strip().splitlines()
                    self.assertIn(p.returncode, (0, 3), err)
                    if p.returncode == 3:
                        refused += 1
                        self.assertEqual(len(err), 1, err)
                        self.assertRegex(err[0], r"^posenc: error: out of memory")
                        self.assertFalse(os.path.exists(self.path("o.npy")))
                    if os.path.exists(self.path("o.npy")):
                        os.remove(self.path("o.npy"))
        self.assertGreater(refused, 0)


@unittest.skipIf(UNDER_ASAN, "AddressSanitizer reserves more address space than any limit")
class EveryReaderUnderAMemoryLimit(PosencTestCase):
    def test_out_of_memory_is_one_line_for_every_reader(self):
        # Each reader (NPY, CSV, TSV, JSON, HDF5, and a --hf-config file) under
        # address-space limits from too small to enough: it ends with its result (0) or
        # one "out of memory" line (exit 3), never an abort or a crash.
        x = np.random.default_rng(0).standard_normal((512, 1024))
        inputs = [self.npy("x.npy", x)]
        for ext, sep in (("csv", ","), ("tsv", "\t")):
            path = self.path(f"x.{ext}")
            np.savetxt(path, x, delimiter=sep)
            inputs.append(path)
        with open(self.path("x.json"), "w") as f:
            json.dump(x.tolist(), f)
        inputs.append(self.path("x.json"))
        with h5py.File(self.path("x.h5"), "w") as f:
            f["x"] = x
        inputs.append(self.path("x.h5") + ":/x")
        cfg = self.path("c.json")
        with open(cfg, "w") as f:
            json.dump({"head_dim": 64, "rope_theta": 5e5, "pad": ["x" * 1000] * 4000}, f)
        runs = [["inspect", i] for i in inputs]
        runs.append(["table", "rope", "--positions", "4", "--hf-config", cfg, "-o",
                     self.path("t.npy")])
        outcomes = set()
        for mib in (40, 90, 160, 400):
            for args in runs:
                with self.subTest(mib=mib, args=args[:2]):
                    p = subprocess.run(["bash", "-c", f'ulimit -v {mib << 10}; exec "$@"',
                                        "posenc", BIN, *args], capture_output=True, timeout=300)
                    err = p.stderr.decode("utf-8", "replace").strip().splitlines()
                    self.assertIn(p.returncode, (0, 3), err)
                    if p.returncode == 3:
                        self.assertEqual(len(err), 1, err)
                        self.assertRegex(err[0], r"^posenc: error: .*(out of memory|Cannot "
                                                 r"allocate memory)")
                    outcomes.add(p.returncode)
        self.assertEqual(outcomes, {0, 3}, "the limits reach both sides")


class AlibiHeads(PosencTestCase):
    def test_huge_head_counts_are_refused_at_once(self):
        for heads in (2**20 + 1, 2**30, 2**30 + 7, 2**31 - 1):
            with self.subTest(heads=heads):
                p = run("table", "alibi", "--heads", heads, "-o", self.path("s.npy"), timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertRegex(p.stderr.strip(),
                                 rf"^posenc: error: --heads: at most 1048576 heads, got {heads}$")
        self.assertFalse(os.path.exists(self.path("s.npy")))

    def test_the_largest_count_is_computed(self):
        self.run_ok("table", "alibi", "--heads", 2**20, "-o", self.path("s.npy"))
        s = np.load(self.path("s.npy"))
        self.assertEqual(s.shape, (2**20,))
        # Press's slopes for a power of two: 2^(-8 (h+1) / n).
        h = np.array([0, 1, 2**19, 2**20 - 1])
        np.testing.assert_allclose(s[h], 2.0 ** (-8.0 * (h + 1) / 2**20), rtol=1e-6)


BIG = np.finfo(np.float64).max


class HugeRanges(PosencTestCase):
    def pty_colors(self, args):
        code, out, err = tp.run_pty(["plot", *args], size=(20, 60))
        self.assertEqual(code, 0, err)
        first = out.split("\n")[1]
        return [tuple(map(int, c)) for c in tp.re.findall(r"\x1b\[38;2;(\d+);(\d+);(\d+)m", first)]

    def test_terminal_heatmap_of_plus_minus_1e308(self):
        for lo, hi in ((-1e308, 1e308), (-BIG, BIG)):
            np.save(self.path("a.npy"), np.array([[lo, 0.0, hi]] * 2))
            with self.subTest(hi=hi):
                self.assertEqual(self.pty_colors([self.path("a.npy")]),
                                 [tp.cmap(tp.DIVERGING, t) for t in (0.0, 0.5, 1.0)])

    def test_terminal_heatmap_with_huge_vmin_vmax(self):
        np.save(self.path("a.npy"), np.array([[-1.0, 0.0, 1.0]] * 2))
        colors = self.pty_colors([self.path("a.npy"), "--vmin", "-1e308", "--vmax", "1e308"])
        self.assertEqual(set(colors), {tp.cmap(tp.DIVERGING, 0.5)})
        # Sequential data from 0 to BIG: a quarter of the way is a quarter of the map.
        np.save(self.path("b.npy"), np.array([[0.0, BIG / 4, BIG]] * 2))
        self.assertEqual(self.pty_colors([self.path("b.npy")]),
                         [tp.cmap(tp.SEQUENTIAL, t) for t in (0.0, 0.25, 1.0)])

    def test_terminal_constant_and_ascii(self):
        np.save(self.path("c.npy"), np.full((2, 2), 1e308))
        self.run_ok("plot", self.path("c.npy"))
        np.save(self.path("a.npy"), np.array([[-1e308, np.nan, 1e308]] * 2))
        p = self.run_ok("plot", self.path("a.npy"))  # a pipe: plain ASCII
        self.assertTrue(p.stdout.isascii())

    def test_terminal_chart_of_plus_minus_1e308(self):
        np.save(self.path("s.npy"), np.array([-1e308, 1e308, 0.0, -BIG, BIG]))
        code, out, err = tp.run_pty(["plot", self.path("s.npy")], size=(24, 80))
        self.assertEqual(code, 0, err)
        self.assertTrue(any(0x2801 <= ord(ch) <= 0x28FF for ch in out), "braille dots")
        self.assertNotIn("inf", out)
        self.run_ok("plot", self.path("s.npy"), "-o", self.path("s.png"))

    def test_png_colours_of_plus_minus_1e308(self):
        a = np.array([[-1e308, -5e307, 0.0], [5e307, 1e308, np.nan]])
        np.save(self.path("a.npy"), a)
        self.run_ok("plot", self.path("a.npy"), "-o", self.path("a.png"))
        got = tp.cell_colors(Image.open(self.path("a.png")), 2, 3)
        for (r, c), v in np.ndenumerate(a):
            exp = tp.BLANK if np.isnan(v) else tp.image_color(tp.DIVERGING, (v / 1e308 + 1) / 2)
            self.assertLessEqual(np.abs(got[r, c] - exp).max(), 1, f"cell {r},{c} value {v}")
        for fmt in ("svg", "pdf"):
            self.run_ok("plot", self.path("a.npy"), "--vmin", "-1e308", "--vmax", "1e308", "-o",
                        self.path(f"a.{fmt}"))


class ConfigValues(PosencTestCase):
    BAD = [
        ({"head_dim": 64, "rope_theta": 0}, "'rope_theta' must be a positive number, got 0"),
        ({"head_dim": 64, "rope_theta": -5}, "'rope_theta' must be a positive number, got -5"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": 0}},
         "'factor' must be a positive number, got 0"),
        ({"head_dim": 64, "partial_rotary_factor": 0},
         r"'partial_rotary_factor' must be in \(0, 1\], got 0"),
        ({"head_dim": 64, "partial_rotary_factor": 1.5},
         r"'partial_rotary_factor' must be in \(0, 1\], got 1.5"),
        ({"head_dim": 64, "partial_rotary_factor": 0.3},
         "'partial_rotary_factor' 0.3 of head dimension 64 gives rotary dimension 19"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": -1,
                                           "original_max_position_embeddings": 32}},
         "'beta_fast' must be a positive number \\(0 means the default\\), got -1"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4,
                                           "attention_factor": 0,
                                           "original_max_position_embeddings": 32}},
         "'attention_factor' must be a positive number, got 0"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8,
                                           "low_freq_factor": 8, "high_freq_factor": 4,
                                           "original_max_position_embeddings": 32}},
         "'low_freq_factor' 8 must not exceed 'high_freq_factor' 4"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8,
                                           "low_freq_factor": 5,
                                           "original_max_position_embeddings": 32}},
         "'low_freq_factor' 5 must not exceed 'high_freq_factor' 4"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "longrope", "factor": 4,
                                          "short_factor": [1, 1, 0, 1],
                                          "long_factor": [1, 1, 1, 1],
                                          "original_max_position_embeddings": 32}},
         "'short_factor' must be a list of positive numbers, got 0"),
        ({"head_dim": 8, "rope_scaling": {"rope_type": "longrope", "factor": 4,
                                          "short_factor": [1, 1, 1],
                                          "long_factor": [1, 1, 1, 1],
                                          "original_max_position_embeddings": 32}},
         "'short_factor' has 3 values, the rotary dimension 8 needs 4"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "mrope", "mrope_section": [2, 2, 2]}},
         "'mrope_section' sums to 6 frequency pairs, the rotary dimension 64 has 32"),
        ({"head_dim": 100000000}, "'head_dim' must be a positive integer up to 1048576"),
        ({"hidden_size": 10**9, "num_attention_heads": 2},
         "hidden_size / num_attention_heads = 500000000 is too large for a head dimension"),
        ({"head_dim": 64, "rope_local_base_freq": 0, "model_type": "gemma3_text",
          "layer_types": ["sliding_attention"]},
         "'rope_local_base_freq' must be a positive number, got 0"),
    ]

    def test_out_of_range_values_name_the_file_and_key(self):
        for i, (cfg, msg) in enumerate(self.BAD):
            path = write(self.path(f"config{i}.json"), json.dumps(cfg))
            with self.subTest(cfg=cfg):
                p = self.assert_fails(3, "table", "rope", "--positions", 4, "--hf-config", path,
                                      "-o", self.path("t.npy"),
                                      match=rf"^posenc: error: {self.tmp}/config{i}\.json: {msg}")
                self.assertNotIn("--", p.stderr)
        self.assertFalse(os.path.exists(self.path("t.npy")))

    def test_layer_types_and_max_window_layers_as_hf(self):
        # HF's layer_type_validation: a layer_types list of another length than
        # num_hidden_layers is refused.
        path = write(self.path("lt.json"), json.dumps(
            {"model_type": "gemma3_text", "head_dim": 8, "num_hidden_layers": 3,
             "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}))
        self.assert_fails(3, "table", "rope", "--positions", 4, "--hf-config", path, "-o",
                          self.path("t.npy"),
                          match=r"lt\.json: layer_types has 2 entries but num_hidden_layers is 3")
        # Qwen2's max_window_layers 0: every layer slides (layer i slides when
        # i >= max_window_layers), so the sliding layers are there to be chosen, with
        # the table of the config's rope_theta (numpy's cos).
        path = write(self.path("mw.json"), json.dumps(
            {"model_type": "qwen2", "num_attention_heads": 2, "hidden_size": 16,
             "num_hidden_layers": 3, "use_sliding_window": True, "sliding_window": 4,
             "max_window_layers": 0, "rope_theta": 100.0}))
        self.run_ok("table", "rope", "--positions", 4, "--hf-config", path, "--layer-type",
                    "sliding_attention", "--emit", "cos", "--dtype", "f64", "-o",
                    self.path("t.npy"))
        inv = 100.0 ** (-np.arange(0, 8, 2) / 8.0)
        ang = np.arange(4.0)[:, None] * inv
        np.testing.assert_allclose(np.load(self.path("t.npy")),
                                   np.cos(np.concatenate([ang, ang], 1)), rtol=1e-15, atol=0)

    def test_rope_command_too(self):
        np.save(self.path("q.npy"), np.ones((1, 2, 4, 64), np.float32))
        path = write(self.path("config.json"), json.dumps({"head_dim": 64, "rope_theta": 0}))
        self.assert_fails(3, "rope", self.path("q.npy"), "--hf-config", path, "-o",
                          self.path("r.npy"), match=r"config\.json: 'rope_theta' must be a "
                                                    r"positive number, got 0$")

    def test_options_given_win_and_are_said_as_options(self):
        bad = write(self.path("bad.json"), json.dumps(
            {"head_dim": 64, "rope_theta": 0, "partial_rotary_factor": 1.5,
             "rope_scaling": {"rope_type": "linear", "factor": 0}}))
        # Every bad value is overridden: the config's are neither used nor checked.
        self.run_ok("table", "rope", "--positions", 4, "--hf-config", bad, "--base", 500,
                    "--partial", 0.5, "--factor", 2, "-o", self.path("t.npy"))
        ref = self.path("ref.npy")
        self.run_ok("table", "rope", "--positions", 4, "--dim", 64, "--base", 500,
                    "--partial", 0.5, "--scaling", "linear", "--factor", 2, "-o", ref)
        np.testing.assert_array_equal(np.load(self.path("t.npy")), np.load(ref))
        good = write(self.path("good.json"), json.dumps({"head_dim": 64}))
        self.assert_fails(2, "table", "rope", "--positions", 4, "--hf-config", good, "--base",
                          0, "-o", self.path("u.npy"), match=r"--base: must be a positive")

    def test_ignored_keys_are_not_checked(self):
        # HF reads factor and low/high_freq_factor only for the variants that use them.
        path = write(self.path("c.json"), json.dumps(
            {"head_dim": 64, "rope_scaling": {"rope_type": "default", "factor": 0,
                                              "low_freq_factor": 9, "beta_fast": -1}}))
        self.run_ok("table", "rope", "--positions", 4, "--hf-config", path, "-o",
                    self.path("t.npy"))


ESC_TEXT = "\x1b[31mred\x1b]0;title\x07\u202e"


class FileTextIsEscaped(PosencTestCase):
    def h5(self):
        path = self.path("t.h5")
        with h5py.File(path, "w") as f:
            d = f.create_dataset("x" + ESC_TEXT, data=np.arange(6.0).reshape(2, 3))
            d.attrs["kind" + ESC_TEXT] = ESC_TEXT
            d.attrs["kind"] = ESC_TEXT
            d.attrs["bytes"] = np.void(b"\xff\x1b")
        return path

    def assert_escaped(self, text):
        self.assertNotIn("\x1b", text)
        self.assertNotIn("\x07", text)
        self.assertNotIn("\u202e", text)
        self.assertIn("\\x1b[31mred", text)

    def test_inspect(self):
        path = self.h5()
        p = self.run_ok("inspect", path)
        self.assert_escaped(p.stdout.decode())
        p = self.run_ok("inspect", path + ":/x" + ESC_TEXT)
        out = p.stdout.decode()
        self.assert_escaped(out)
        self.assertIn("\\x1b]0;title\\x07\\u202e", out)
        p = self.run_ok("inspect", path + ":/x" + ESC_TEXT, "--json")
        doc = json.loads(p.stdout)
        self.assertEqual(doc["attrs"]["kind"], ESC_TEXT)  # JSON keeps the text, escaped

    def test_bytes_that_are_not_utf8(self):
        path = self.path("b.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.arange(3.0)).attrs["raw"] = np.bytes_(b"\xff\x1bq")
        self.assertIn(b"raw = \\xff\\x1bq\n", self.run_ok("inspect", path + ":/x").stdout)
        # JSON has no such bytes: U+FFFD, not an internal error (exit 70).
        doc = json.loads(self.run_ok("inspect", path + ":/x", "--json").stdout)
        self.assertEqual(doc["attrs"]["raw"], "\ufffd\x1bq")

    def test_plot_title(self):
        path = self.h5()
        p = self.run_ok("plot", path + ":/x" + ESC_TEXT)
        self.assert_escaped(p.stdout.decode())
        code, out, err = tp.run_pty(["plot", path + ":/x" + ESC_TEXT], size=(20, 100))
        self.assertEqual(code, 0, err)
        self.assertIn("\\x1b[31mred", out)
        self.assertNotIn("\x1b[31mred", out)
        self.assertNotIn("\x1b]0;", out)
        self.run_ok("plot", path + ":/x" + ESC_TEXT, "-o", self.path("p.svg"))
        import xml.etree.ElementTree as ET
        ET.parse(self.path("p.svg"))  # no control character broke the XML

    def test_compare_of_files_with_odd_names(self):
        esc = self.npy("a" + ESC_TEXT + ".npy", np.ones(3))
        p = self.run_ok("compare", esc, esc)
        self.assert_escaped(p.stdout.decode())
        # A name that is not UTF-8 (bytes on the command line): --json still writes JSON.
        raw = os.fsencode(self.tmp) + b"/b\xff.npy"
        np.save(raw.decode("utf-8", "surrogateescape"), np.ones(3))
        p = subprocess.run([BIN, "compare", raw, raw, "--json"], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(json.loads(p.stdout)["a"]["ref"].endswith("/b\ufffd.npy"))

    def test_error_lines(self):
        csv = write(self.path("x.csv"), "1,2\n3,4" + ESC_TEXT + "\n")
        p = self.assert_fails(3, "inspect", csv)
        self.assert_escaped(p.stderr)
        p = self.assert_fails(3, "inspect", self.h5() + ":/nothing" + ESC_TEXT)
        self.assert_escaped(p.stderr)


class ParsingEdges(PosencTestCase):
    def test_empty_part(self):
        np.save(self.path("q.npy"), np.ones((1, 1, 4, 8), np.float32))
        for args in (["table", "rope", "--positions", 4, "--dim", 8],
                     ["rope", self.path("q.npy")],
                     ["convert", self.path("q.npy")],
                     ["attention", "-q", self.path("q.npy"), "-k", self.path("q.npy")]):
            with self.subTest(cmd=args[0]):
                self.assert_fails(2, *args, "--part", "", "-o", self.path("o.h5") + ":/o",
                                  match=r"--part: expected I/N with 0 <= I < N")
        self.assertFalse(os.path.exists(self.path("o.h5")))

    def test_emit_named_twice(self):
        q = self.npy("q.npy", np.ones((1, 1, 4, 8), np.float32))
        for emit in ("output,output", "probs,output,probs"):
            with self.subTest(emit=emit):
                self.assert_fails(2, "attention", "-q", q, "-k", q, "-v", q, "--emit", emit,
                                  "-o", self.path("o.h5"),
                                  match=rf"--emit {emit}: '\w+' is named twice")
        self.assert_fails(2, "attention", "-q", q, "-k", q, "--emit", "", "-o",
                          self.path("o.npy"), match=r"--emit: empty value")
        self.assertEqual(os.listdir(self.tmp), ["q.npy"])

    def test_empty_values(self):
        # An empty word (`--mask "$MASK"` with MASK unset) is refused, never read as the
        # option not given: the run would otherwise write a result without the mask.
        q = self.npy("q.npy", np.ones((1, 2, 4, 8), np.float32))
        out = self.path("o.npy")
        att = ["attention", "-q", q, "-k", q, "-v", q, "--emit", "output", "-o", out]
        for args in (att + ["--mask", ""], att + ["--t5-bias", "", "--t5-buckets", "8"],
                     att + ["--alibi-slopes", ""], att + ["--sinks", ""],
                     att + ["--global-kv", q, ""], att + ["--grad-output", ""],
                     ["rope", q, "-o", out, "--position-ids", ""],
                     ["rope", q, "-o", out, "--cos", "", "--sin", q],
                     ["rope", "", "-o", out],
                     ["compare", q, ""]):
            with self.subTest(args=args):
                self.assert_fails(2, *args, match=r": empty value")
                self.assertFalse(os.path.exists(out))

    def test_unknown_rope_isa(self):
        q = self.npy("q.npy", np.ones((1, 1, 4, 8), np.float32))
        for isa in ("avx3", "AVX2", "base "):
            with self.subTest(isa=isa):
                self.assert_fails(2, "rope", q, "-o", self.path("r.npy"),
                                  env={"POSENC_ROPE_ISA": isa},
                                  match=r"POSENC_ROPE_ISA: unknown kernel variant '.*' "
                                        r"\(expected base, avx2, avx512 or avx512fp16\)")
        for isa in ("base", "avx2", "avx512", ""):
            with self.subTest(isa=isa):
                self.run_ok("rope", q, "-o", self.path("r.npy"), env={"POSENC_ROPE_ISA": isa})

    def test_one_number_grammar(self):
        # Reals and integers take the same decimal forms: no spaces around a single
        # value, no hex, no inf or nan; the sinusoidal table of --base 500 (numpy's
        # formula) shows the accepted forms are read as the number they spell.
        table = ["table", "sinusoidal", "--positions", "3", "--dim", "4", "--to", "npy",
                 "-o", self.path("t.npy")]
        for bad in (" 5", "5 ", "0x1p3", "0x10", "1e", "inf", "nan", "1_000", ""):
            with self.subTest(real=bad):
                self.assert_fails(2, *table, "--base", bad, match=r"--base")
            with self.subTest(integer=bad):
                self.assert_fails(2, *table[:2], "--positions", bad, "--dim", "4",
                                  "-o", self.path("t.npy"), match=r"--positions")
        pos = np.arange(3.0)[:, None] * 500.0 ** (-np.arange(0, 4, 2) / 4.0)
        for good in ("500", "+500", "500.", "5e2", "5.0E+2", "0500"):
            with self.subTest(real=good):
                self.run_ok(*table, "--base", good)
                got = np.load(self.path("t.npy"))
                np.testing.assert_allclose(got[:, 0::2], np.sin(pos), rtol=0, atol=2e-7)
                np.testing.assert_allclose(got[:, 1::2], np.cos(pos), rtol=0, atol=2e-7)
        self.assertEqual(os.listdir(self.tmp), ["t.npy"])


if __name__ == "__main__":
    unittest.main()
