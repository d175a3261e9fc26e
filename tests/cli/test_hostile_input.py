"""Hostile input that is not HDF5: lying headers, out-of-range integers, parameters that
make NaN, overflowing scores, and JSON edge cases, end to end.

- Memory follows the data: a 128-byte NPY on stdin claiming 512 MiB (or 4 TiB) is
  "truncated data" (exit 3) with a small peak RSS for inspect, rope, convert and
  compare; real files are inspected and rotated without index or position vectors
  sized by the tensor (peak RSS measured with /usr/bin/time).
- Every integer option is a decimal number in range: overflowing --slice steps give
  numpy's selection, --start / ids / --window beyond 2^53 and 18446744073709551616 are
  refused (exit 2 for options, 3 for data), "010" is ten, not octal.
- Tables never hold NaN from parameters: yarn beta_fast/beta_slow 0 or null mean HF's
  defaults (the table equals the one with 32 and 1), negative or NaN is exit 2 (3 in a
  --hf-config file);
  head_dim 4294967424 in a config is exit 3.
- f32 attention of finite inputs near 1e20 says its scores overflow (exit 3) instead of
  reporting fully masked rows; with --precision f64 it matches numpy.
- --max-memory of attention is checked on the headers, before K and V are read.
- JSON: 1e400 is bad input (exit 3, not 70); -0.0 keeps its sign both ways.
"""
import io
import json
import os
import subprocess
import unittest

import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase


def npy_header(shape, descr="<f2"):
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False,
                                             "shape": shape})
    return b.getvalue()


def peak_rss_mib(args, stdin=None, env=None):
    """(exit status, stderr without time's lines, peak RSS in MiB) of posenc args; the
    RSS is 0 under AddressSanitizer, where it means nothing."""
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run(["/usr/bin/time", "-f", "%M", BIN, *map(str, args)], input=stdin,
                       capture_output=True, env=full_env, timeout=600)
    lines = p.stderr.decode("utf-8", "replace").strip().splitlines()
    rss_kib = 0 if UNDER_ASAN else int(lines[-1])
    err = [l for l in lines[:-1] if not l.startswith("Command exited")]
    return p.returncode, err, rss_kib / 1024


def yarn_table(*extra):
    return ["table", "rope", "--positions", 64, "--dim", 16, "--scaling", "yarn",
            "--factor", 4, "--original-max-pos", 32, "--emit", "cos-sin", *extra]


class LyingHeaders(PosencTestCase):
    def test_stdin_header_claiming_more_than_arrives(self):
        for shape in [(1, 2**27, 1, 2), (2, 2**40), (1, 2**31, 2, 2)]:
            data = npy_header(shape) + bytes(8)
            for args in (["inspect", "-"], ["convert", "-", "-o", self.path("o.npy")],
                         ["convert", "-", "-o", self.path("o.json")],
                         ["rope", "-", "--axes", "bshd", "--max-memory", "64M", "-o",
                          self.path("o.npy")]):
                if args[0] == "rope" and len(shape) != 4:
                    continue
                with self.subTest(shape=shape, cmd=args[0]):
                    status, err, rss = peak_rss_mib(args, stdin=data)
                    self.assertEqual(status, 3, err)
                    self.assertEqual(len(err), 1, err)
                    if args[0] == "inspect" and shape == (2, 2**40):
                        # Rows of 2 TiB: refused before any is read.
                        self.assertRegex(err[0], r"one entry along axis 0 holds 2\.0 TiB")
                    else:
                        self.assertRegex(err[0], r"truncated data: expected \d+ bytes, got 8")
                    self.assertLess(rss, 64, f"peak RSS {rss:.0f} MiB")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_compare_reads_standard_input_once(self):
        self.assert_fails(2, "compare", "-", "-", stdin=npy_header((2, 2)) + bytes(8),
                          match=r"only one of A and B can come from standard input")

    def test_real_file_memory(self):
        # 64 MiB of f16 as (1, 2^24, 1, 2): one entry per position along s.
        path = self.path("big.npy")
        a = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(1, 2**24, 1, 2))
        a[:] = np.float16(0.5)
        a[0, -1, 0, 1] = np.float16(2.0)
        del a
        status, err, rss = peak_rss_mib(["inspect", path, "--json"])
        self.assertEqual(status, 0, err)
        self.assertLess(rss, 100, f"inspect peak RSS {rss:.0f} MiB")
        status, err, rss = peak_rss_mib(["inspect", path, "--slice", "0,::-4096,0,1"])
        self.assertEqual(status, 0, err)
        self.assertLess(rss, 100, f"inspect --slice peak RSS {rss:.0f} MiB")
        status, err, rss = peak_rss_mib(["rope", path, "--axes", "bshd", "--max-memory", "16M",
                                         "-o", self.path("r.npy")])
        self.assertEqual(status, 0, err)
        self.assertLess(rss, 64, f"rope peak RSS {rss:.0f} MiB")


class IntegerOptions(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.x = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
        np.save(self.path("x.npy"), self.x)

    def test_slice_steps_at_the_int64_limits(self):
        for text, sel in [("0,0,1::9223372036854775807", np.s_[0, 0, 1::9223372036854775807]),
                          ("1,:,-1::-9223372036854775808", np.s_[1, :, -1::-9223372036854775808]),
                          ("-9223372036854775808:9223372036854775807:3",
                           np.s_[-9223372036854775808:9223372036854775807:3]),
                          ("...,9223372036854775806::-2", np.s_[..., 9223372036854775806::-2])]:
            with self.subTest(slice=text):
                want = self.x[sel]
                p = self.run_ok("inspect", self.path("x.npy"), "--slice", text, "--json")
                got = json.loads(p.stdout)
                self.assertEqual(got["slice_shape"], list(want.shape))
                self.assertEqual(got["values"], want.ravel().tolist())
        self.assert_fails(3, "inspect", self.path("x.npy"), "--slice", "9223372036854775807",
                          match=r"out of range for axis 0")
        # Bounds and steps beyond int64 saturate as CPython's (and so numpy's) do.
        p = self.run_ok("inspect", self.path("x.npy"), "--slice", "::9223372036854775808",
                        "--json")
        want = self.x[::9223372036854775808]
        self.assertEqual(json.loads(p.stdout)["slice_shape"], list(want.shape))

    def test_out_of_range_integers_are_refused_not_clamped(self):
        base = ["table", "rope", "--positions", 4, "--dim", 8, "-o", self.path("t.npy")]
        for opt, value, match in [
                ("--start", "18446744073709551616", r"--start: 18446744073709551616 is out of range"),
                ("--start", "9223372036854775807", r"--start: must be from 0 to 2\^53"),
                ("--start", "0x10", r"not a decimal integer"),
                ("--positions", "-1", r"--positions"),
                ("--dim", "4294967296", r"--dim"),
                ("--max-pos", "99999999999999999999", r"out of range")]:
            with self.subTest(opt=opt, value=value):
                self.assert_fails(2, *base, opt, value, match=match)
        self.assert_fails(2, "table", "sinusoidal", "--positions", "18446744073709551615",
                          "--dim", 8, "-o", self.path("t.npy"), match=r"out of range")
        self.assert_fails(2, "table", "sinusoidal", "--positions", 10, "--dim", 8, "--start",
                          2**53 - 5, "-o", self.path("t.npy"), match=r"beyond 2\^53")
        self.assert_fails(2, "rope", self.path("x.npy"), "-o", self.path("r.npy"), "--max-memory",
                          "18446744073709551616", match=r"--max-memory: size .* is too large")
        self.assertFalse(os.path.exists(self.path("t.npy")))

    def test_leading_zeros_are_decimal(self):
        p = self.run_ok("table", "rope", "--positions", 2, "--dim", 4, "--start", "010",
                        "--emit", "angles", "-o", "-", "--to", "json")
        angles = np.array(json.loads(p.stdout)["data"])
        inv = 1.0 / 10000.0 ** (np.arange(0, 4, 2) / 4)
        want = np.outer(np.arange(10, 12), inv)
        np.testing.assert_allclose(angles, np.concatenate([want, want], axis=1), rtol=1e-6)

    def test_positions_near_int64_max(self):
        ids = self.path("ids.npy")
        np.save(ids, np.array([0, 1, 2**63 - 1], dtype=np.int64))
        x = self.path("q.npy")
        np.save(x, np.ones((3, 8), np.float32))
        self.assert_fails(3, "rope", x, "--position-ids", ids, "-o", self.path("r.npy"),
                          match=r"--position-ids: .* position 9223372036854775807 .* beyond 2\^53")
        self.assert_fails(3, "table", "rope", "--dim", 8, "--position-ids", ids, "-o",
                          self.path("t.npy"), match=r"beyond 2\^53")
        np.save(ids, np.array([0, 1, 2**53], dtype=np.int64))
        self.assert_fails(3, "rope", x, "--position-ids", ids, "--start", 1, "-o",
                          self.path("r.npy"), match=r"beyond 2\^53")
        self.assertFalse(os.path.exists(self.path("r.npy")))

    def test_window_limits(self):
        rng = np.random.default_rng(3)
        for name in "qkv":
            np.save(self.path(name + ".npy"), rng.standard_normal((1, 1, 4, 8)))
        args = ["attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v",
                self.path("v.npy"), "-o", self.path("o.h5")]
        self.assert_fails(2, *args, "--window", "9223372036854775807,0", match=r"--window")
        self.assert_fails(2, *args, "--window", "1,18446744073709551616", match=r"--window")
        # The largest window allowed is no window: the same as unbounded.
        self.run_ok(*args, "--window", f"{2**53},{2**53}", "--emit", "probs")
        os.rename(self.path("o.h5"), self.path("wide.h5"))
        self.run_ok(*args, "--emit", "probs")
        import h5py
        with h5py.File(self.path("wide.h5"), "r") as a, h5py.File(self.path("o.h5"), "r") as b:
            np.testing.assert_array_equal(a["probs"][...], b["probs"][...])


class FiniteTables(PosencTestCase):
    def table(self, *args):
        p = self.run_ok(*args, "-o", "-", "--to", "json", "--dtype", "f64")
        return np.array(json.loads(p.stdout)["data"])

    def test_yarn_beta_zero_means_hf_default(self):
        default = self.table(*yarn_table())
        explicit = self.table(*yarn_table("--beta-fast", 32, "--beta-slow", 1))
        zero = self.table(*yarn_table("--beta-fast", 0, "--beta-slow", 0))
        self.assertTrue(np.isfinite(default).all())
        np.testing.assert_array_equal(zero, default)
        np.testing.assert_array_equal(explicit, default)
        for opt, value in [("--beta-fast", -1), ("--beta-slow", -2), ("--beta-fast", "nan"),
                           ("--beta-fast", "inf")]:
            with self.subTest(opt=opt, value=value):
                self.assert_fails(2, *yarn_table(opt, value), "-o", self.path("t.npy"))
        cfg = self.path("config.json")
        # In a config, a negative beta is the file's fault: bad input (exit 3).
        for beta, status in [("0", 0), ("null", 0), ("-3", 3)]:
            with open(cfg, "w") as f:
                f.write('{"rope_theta": 10000, "head_dim": 16, "rope_scaling": {"rope_type": '
                        '"yarn", "factor": 4, "original_max_position_embeddings": 32, '
                        f'"beta_fast": {beta}, "beta_slow": {beta}}}}}')
            args = ["table", "rope", "--positions", 64, "--hf-config", cfg, "--emit", "cos-sin"]
            with self.subTest(beta=beta):
                if status == 0:
                    np.testing.assert_array_equal(self.table(*args), default)
                else:
                    self.assert_fails(status, *args, "-o", self.path("t.npy"), match=r"beta")
        self.assertFalse(os.path.exists(self.path("t.npy")))

    def test_head_dim_beyond_int_is_refused(self):
        cfg = self.path("config.json")
        for text in ['{"head_dim": 4294967424}', '{"hidden_size": 8589934592, '
                                                  '"num_attention_heads": 2}']:
            with open(cfg, "w") as f:
                f.write(text)
            with self.subTest(config=text):
                self.assert_fails(3, "table", "rope", "--positions", 4, "--hf-config", cfg, "-o",
                                  self.path("t.npy"), match=r"config.json")
        self.assertFalse(os.path.exists(self.path("t.npy")))

    def test_non_finite_parameters(self):
        for args in (["table", "rope", "--positions", 4, "--dim", 8, "--base", "nan"],
                     ["table", "rope", "--positions", 4, "--dim", 8, "--base", "1e400"],
                     ["table", "sinusoidal", "--positions", 4, "--dim", 8, "--base", "inf"],
                     ["table", "rope", "--positions", 4, "--dim", 8, "--scaling", "longrope",
                      "--original-max-pos", 2, "--factor", 2, "--long-factor", "1,nan"]):
            with self.subTest(args=args):
                self.assert_fails(2, *args, "-o", self.path("t.npy"))
        self.assertFalse(os.path.exists(self.path("t.npy")))


class AttentionNumbers(PosencTestCase):
    def test_f32_score_overflow_is_reported(self):
        q = np.full((1, 1, 2, 4), 1e20, np.float32)
        k = np.full((1, 1, 3, 4), 1e20, np.float32)
        k[0, 0, 1] = -1e20
        v = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
        for name, a in (("q", q), ("k", k), ("v", v)):
            np.save(self.path(name + ".npy"), a)
        args = ["attention", "-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v",
                self.path("v.npy"), "--emit", "probs,lse"]
        self.assert_fails(3, *args, "--precision", "f32", "-o", self.path("o.h5"),
                          match=r"attention scores overflow f32 .*in f64 .*without --precision f32")
        self.assertFalse(os.path.exists(self.path("o.h5")))
        # The default f64 arithmetic holds these scores (lse ~ 1e40 needs an f64 output).
        self.run_ok(*args, "--dtype", "f64", "-o", self.path("o.h5"))
        import h5py
        s = q.astype(np.float64)[0, 0] @ k.astype(np.float64)[0, 0].T / 2.0
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        with h5py.File(self.path("o.h5"), "r") as f:
            np.testing.assert_allclose(f["probs"][0, 0], p, rtol=1e-6)
            self.assertTrue(np.isfinite(f["lse"][...]).all())

    def test_budget_is_checked_before_reading(self):
        rng = np.random.default_rng(5)
        np.save(self.path("q.npy"), rng.standard_normal((1, 2, 64, 16)).astype(np.float32))
        np.save(self.path("v.npy"), rng.standard_normal((1, 2, 64, 16)).astype(np.float32))
        # K comes on stdin as a header whose data never arrive: reading it would fail.
        # The budget, computed from the headers, fails first.
        k = npy_header((1, 2, 64, 16), "<f4")
        args = ["attention", "-q", self.path("q.npy"), "-k", "-", "-v", self.path("v.npy"),
                "-o", self.path("o.npy"), "--emit", "output"]
        self.assert_fails(3, *args, "--max-memory", "8K", stdin=k,
                          match=r"attention would need .* with the inputs .* > --max-memory 8\.0 KiB")
        self.assert_fails(3, *args, stdin=k, match=r"truncated data")


class JsonEdges(PosencTestCase):
    def test_number_beyond_double_is_bad_input(self):
        path = self.path("x.json")
        for text in ['{"data": [1e400]}', '[1, -1e999]', '{"dtype": "f32", "data": 1e400}']:
            with open(path, "w") as f:
                f.write(text)
            with self.subTest(text=text):
                p = self.assert_fails(3, "inspect", path, match=r"x.json: invalid JSON: .*overflow")
                self.assertNotIn("internal error", p.stderr)

    def test_declared_shape_larger_than_the_data(self):
        path = self.path("x.json")
        with open(path, "w") as f:
            f.write('{"shape": [1000000000000], "data": [1, 2]}')
        status, err, rss = peak_rss_mib(["inspect", path])
        self.assertEqual(status, 3, err)
        self.assertLess(rss, 64)

    def test_negative_zero_round_trips(self):
        a = np.array([-0.0, 0.0, -1.5], np.float64)
        np.save(self.path("z.npy"), a)
        self.run_ok("convert", self.path("z.npy"), "-o", self.path("z.json"))
        with open(self.path("z.json")) as f:
            text = f.read()
        self.assertIn("-0.0", text)
        self.assertTrue(np.signbit(json.loads(text)["data"][0]))
        self.run_ok("convert", self.path("z.json"), "-o", self.path("back.npy"))
        back = np.load(self.path("back.npy"))
        np.testing.assert_array_equal(np.signbit(back), np.signbit(a))
        np.testing.assert_array_equal(back, a)


if __name__ == "__main__":
    unittest.main()
