"""`posenc attention` out of core: K and V read in chunks of key blocks within
--max-memory, the same bytes as the run with everything in memory, and a budget too
small for one block refused before anything is read."""
import os
import signal
import subprocess
import unittest

import h5py
import numpy as np

from posenc_testlib import BIN, UNDER_ASAN, PosencTestCase, run, run_measured

MIB = 1 << 20


class AttentionStreamTest(PosencTestCase):
    def inputs(self, b=1, hq=2, hk=2, sq=64, sk=8192, d=32, dtype=np.float32, seed=0,
               axes="bhsd"):
        rng = np.random.default_rng(seed)

        def make(h, s):
            shape = (b, h, s, d) if axes == "bhsd" else (b, s, h, d)
            return rng.standard_normal(shape).astype(dtype)

        return (self.npy("q.npy", make(hq, sq)), self.npy("k.npy", make(hk, sk)),
                self.npy("v.npy", make(hk, sk)))

    def attention(self, q, k, v, out, *extra, emit="output"):
        """Runs attention writing OUT_{tensor}.npy; returns the bytes of each tensor."""
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "-o", out + "_{}.npy", "--emit",
                    emit, *extra)
        got = []
        for name in emit.split(","):
            with open(f"{out}_{name}.npy", "rb") as f:
                got.append(f.read())
        return got

    def assert_same_streamed(self, q, k, v, budget, *extra, emit="output"):
        """The output with a small budget (several chunks) is byte for byte the one
        computed with every key in memory, for 1 and 2 threads."""
        whole = self.attention(q, k, v, self.path("whole"), *extra, emit=emit)
        for threads in ("1", "2"):
            part = self.attention(q, k, v, self.path(f"part{threads}"), "-j", threads,
                                  "--max-memory", budget, *extra, emit=emit)
            self.assertEqual(part, whole, f"-j {threads} --max-memory {budget} {extra}")
        return whole

    def test_chunks_give_the_same_bytes(self):
        q, k, v = self.inputs()
        out = self.assert_same_streamed(q, k, v, "3M")
        # and the result is attention (loose f32 bound; the reference tests are exact-er)
        qa, ka, va = (np.load(x).astype(np.float64) for x in (q, k, v))
        s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(qa.shape[-1])
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ va
        np.testing.assert_allclose(np.load(self.path("whole_output.npy")), ref, rtol=1e-4,
                                   atol=1e-5)
        self.assertTrue(out)

    def test_chunks_with_masks_gqa_and_lse(self):
        q, k, v = self.inputs(hq=4, hk=2, sq=40, sk=5000)
        self.assert_same_streamed(q, k, v, "2M", "--causal", emit="output,lse")
        self.assert_same_streamed(q, k, v, "2M", "--window", "3000,0", "--alibi", "symmetric",
                                  emit="output")

    def test_chunks_with_biases_tables_and_sinks(self):
        # Everything indexed by the key position, and the Shaw value buckets, which are
        # state carried from chunk to chunk.
        q, k, v = self.inputs(b=2, sq=33, sk=5000)
        rng = np.random.default_rng(3)
        side = {name: self.npy(f"{name}.npy", x) for name, x in {
            "rk": rng.standard_normal((9, 32)).astype(np.float32),
            "rv": rng.standard_normal((9, 32)).astype(np.float32),
            "mask": rng.random((33, 5000)) > 0.3,
            "sinks": rng.standard_normal(2).astype(np.float32),
            "kl": np.array([4000, 2500], dtype=np.int64),
            "t5": rng.standard_normal((32, 2)).astype(np.float32)}.items()}
        for opts in (["--relative-k", side["rk"], "--relative-v", side["rv"]],
                     ["--mask", side["mask"], "--sinks", side["sinks"]],
                     ["--key-lengths", side["kl"], "--t5-bias", side["t5"]],
                     ["--softcap", "5", "--chunk-size", "700"]):
            self.assert_same_streamed(q, k, v, "4M", *opts, emit="output,lse")

    def test_chunks_decode_one_query(self):
        # sq = 1 takes the matrix-vector path; bshd K and V (strided) the gemm path.
        q, k, v = self.inputs(hq=4, hk=1, sq=1, sk=5000)
        self.assert_same_streamed(q, k, v, "1M", emit="output,lse")
        q, k, v = self.inputs(hq=4, hk=2, sq=1, sk=5000, axes="bshd")
        self.assert_same_streamed(q, k, v, "2200K", "--axes", "bshd")

    def test_chunks_bshd_and_f16(self):
        q, k, v = self.inputs(axes="bshd", dtype=np.float16, sq=32, sk=6000)
        self.assert_same_streamed(q, k, v, "2M", "--axes", "bshd")

    def test_chunks_from_hdf5(self):
        q, k, v = self.inputs(sq=32, sk=6000)
        h5 = self.path("kv.h5")
        with h5py.File(h5, "w") as f:
            f["k"] = np.load(k)
            f.create_dataset("v", data=np.load(v), chunks=(1, 1, 512, 32))
        whole = self.attention(q, k, v, self.path("whole"))
        part = self.attention(q, h5 + ":/k", h5 + ":/v", self.path("part"), "--max-memory", "2M")
        self.assertEqual(part, whole)
        # Within the default budget the contiguous /k is used in place of the mapped file
        # (as the NPY inputs of `whole` are), the chunked /v read through libhdf5.
        mapped = self.attention(q, h5 + ":/k", h5 + ":/v", self.path("mapped"))
        self.assertEqual(mapped, whole)

    def test_nonfinite_keys_and_values_in_place_and_streamed(self):
        # K and V in place (default budget) are checked block by block as the work items
        # first read them; copied in chunks (3M), chunk by chunk. Either way NaN or Inf is
        # one error line naming the input, the same for 1 and 2 threads. With both bad,
        # the one named is in the first key block (chunk) holding either, K before V:
        # here V's block 0 (head 0) before K's block 4 (head 1, another work item).
        q, k, v = self.inputs()
        good = {"k": np.load(k), "v": np.load(v)}
        cases = [({"k": [(0, 1, 5000)]}, "k"), ({"v": [(0, 0, 8191)]}, "v"),
                 ({"k": [(0, 1, 5000)], "v": [(0, 0, 100)]}, "v")]
        for bad, name in cases:
            for which, x in good.items():
                x = x.copy()
                for (b, h, j) in bad.get(which, []):
                    x[b, h, j, 3] = np.inf if which == "k" else np.nan
                np.save(k if which == "k" else v, x)
            before = os.listdir(self.tmp)
            for extra in ([], ["--max-memory", "3M"]):
                for threads in ("1", "2", "2", "2"):
                    self.assert_fails(3, "-j", threads, "attention", "-q", q, "-k", k, "-v", v,
                                      "--emit", "output", "-o", self.path("out.npy"), *extra,
                                      match=rf"^posenc: error: {name}: contains NaN or Inf")
            self.assert_no_new_files(before)
        # In place, NaN or Inf anywhere in the keys read is named before an overflow
        # that another item meets first (K of head 0 overflows f32 scores at key 10).
        x, y = good["k"].copy(), good["v"].copy()
        x[0, 0, 10, :] = 3e38
        y[0, 1, 7000, 0] = np.nan
        np.save(k, x)
        np.save(v, y)
        qa = np.load(q)
        np.save(q, np.abs(qa))
        for threads in ("1", "2", "2"):
            self.assert_fails(3, "-j", threads, "attention", "-q", q, "-k", k, "-v", v,
                              "--emit", "output", "-o", self.path("out.npy"),
                              match=r"^posenc: error: v: contains NaN or Inf")
        np.save(q, qa)
        # Keys no query sees (beyond --key-lengths, in blocks of their own) are not read.
        x = good["k"].copy()
        x[0, 0, 7000, 0] = np.nan
        np.save(k, x)
        np.save(v, good["v"])
        kl = self.npy("kl.npy", np.array([4096], dtype=np.int64))
        self.run_ok("attention", "-q", q, "-k", k, "-v", v, "--key-lengths", kl, "--emit",
                    "output", "-o", self.path("kl_out.npy"))
        self.assertTrue(np.isfinite(np.load(self.path("kl_out.npy"))).all())

    def test_output_written_by_rows(self):
        # A lone NPY output in bhsd is written by the work items at their rows' offsets;
        # standard output (no seeking) and bshd (rows of an item not contiguous) keep it
        # in memory. Each is attention by a float64 reference, and the three agree bit
        # for bit. An existing target is replaced.
        q, k, v = self.inputs(hq=4, hk=2, sq=600, sk=1500, d=32)
        qa, ka, va = (np.load(x).astype(np.float64) for x in (q, k, v))
        ka, va = (np.repeat(x, 2, axis=1) for x in (ka, va))
        s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(32)
        s = np.where(np.tril(np.ones((600, 1500), bool), 900), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ va
        bshd = [self.npy(f"{n}_bshd.npy", np.load(x).transpose(0, 2, 1, 3))
                for n, x in zip("qkv", (q, k, v))]
        for dtype, tol in (("f32", 2e-6), ("f16", 1e-3)):
            out = self.path(f"out_{dtype}.npy")
            with open(out, "wb") as f:
                f.write(b"old")
            common = ["--causal", "--dtype", dtype, "--emit", "output"]
            for threads in ("1", "2"):
                self.run_ok("-j", threads, "attention", "-q", q, "-k", k, "-v", v, "-o", out,
                            *common)
                got = np.load(out)
                self.assertEqual(got.dtype, np.float32 if dtype == "f32" else np.float16)
                self.assert_close(got.astype(np.float64), ref, rtol=tol, atol=tol,
                                  msg=f"{dtype} -j {threads}")
            piped = self.run_ok("attention", "-q", q, "-k", k, "-v", v, "-o", "-", "--force",
                                *common).stdout
            with open(out, "rb") as f:
                self.assertEqual(piped, f.read(), dtype)
            self.run_ok("attention", "-q", bshd[0], "-k", bshd[1], "-v", bshd[2], "--axes",
                        "bshd", "-o", self.path("bshd.npy"), *common)
            self.assertEqual(np.load(self.path("bshd.npy")).transpose(0, 2, 1, 3).tobytes(),
                             np.load(out).tobytes(), dtype)
        # A run that fails while items are writing (NaN in V's last block, met by the
        # last item to run) leaves the existing target as it was and no temporary.
        x = np.load(v)
        x[0, 1, 1499, 0] = np.nan
        np.save(v, x)
        before = os.listdir(self.tmp)
        with open(self.path("out_f32.npy"), "rb") as f:
            kept = f.read()
        for threads in ("1", "2"):
            self.assert_fails(3, "-j", threads, "attention", "-q", q, "-k", k, "-v", v, "-o",
                              self.path("out_f32.npy"), "--emit", "output",
                              match=r"^posenc: error: v: contains NaN or Inf")
        self.assert_no_new_files(before)
        with open(self.path("out_f32.npy"), "rb") as f:
            self.assertEqual(f.read(), kept)

    def test_output_written_by_rows_takes_no_budget(self):
        # An output written by the items as they end is not held in memory, so it does
        # not count against --max-memory: 40 MiB suffice for the NPY output here (one
        # key block needs 39.2 MiB with one worker's tiles in the f64 arithmetic), not for
        # the same run kept in memory for HDF5 (47.2 MiB: 8 MiB more, the output).
        rng = np.random.default_rng(3)
        q = self.npy("q.npy", rng.standard_normal((1, 4, 2048, 64), dtype=np.float32))
        k = self.npy("k.npy", rng.standard_normal((1, 4, 2048, 64), dtype=np.float32))
        v = self.npy("v.npy", rng.standard_normal((1, 4, 2048, 256), dtype=np.float32))
        args = ["-j", "2", "attention", "-q", q, "-k", k, "-v", v, "--emit", "output"]
        self.run_ok(*args, "--max-memory", "40M", "-o", self.path("small.npy"))
        self.run_ok(*args, "-o", self.path("whole.npy"))
        with open(self.path("small.npy"), "rb") as a, open(self.path("whole.npy"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assert_fails(3, *args, "--max-memory", "40M", "-o", self.path("o.h5") + ":/o",
                          match=r"one block of 1024 keys needs 47\.2 MiB")
        self.assertFalse(os.path.exists(self.path("o.h5")))

    def test_signal_while_items_write_leaves_no_temp(self):
        # The temporary output exists from the start of the computation (the items write
        # into it); SIGTERM or SIGINT then removes it and leaves the target as it was.
        # 137 GFLOP on one thread: over a second, so the signal lands mid-run.
        q, k, v = self.inputs(hq=8, hk=8, sq=8192, sk=8192, d=64)
        out = self.path("o.npy")
        with open(out, "wb") as f:
            f.write(b"old")
        before = os.listdir(self.tmp)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig):
                proc = subprocess.Popen([BIN, "-j", "1", "attention", "-q", q, "-k", k, "-v", v,
                                         "--emit", "output", "-o", out],
                                        stderr=subprocess.DEVNULL)
                self.signal_while_writing(proc, "o.npy", sig)
                self.assert_no_new_files(before)
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), b"old")

    def test_budget_means_the_same_for_any_thread_count(self):
        # Budgets around the smallest that fits, streamed (output) and in memory (probs):
        # whether a run fits is the same at 1, 3 and 8 threads, and the bytes are too.
        q, k, v = self.inputs(hq=8, hk=2, sq=256, sk=4096)
        for emit, budgets in (("output", ("1200K", "1500K", "2M", "3M")),
                              ("probs", ("40M", "45M", "50M", "64M"))):
            for budget in budgets:
                runs = []
                for threads in ("1", "3", "8"):
                    out = self.path(f"b{threads}.npy")
                    p = run("attention", "-q", q, "-k", k, "-v", v, "--emit", emit,
                            "--max-memory", budget, "-j", threads, "-o", out)
                    runs.append((p.returncode, open(out, "rb").read() if p.returncode == 0
                                 else p.stderr.split(":")[0]))
                with self.subTest(emit=emit, budget=budget):
                    self.assertIn(runs[0][0], (0, 3))
                    self.assertEqual(runs[1], runs[0])
                    self.assertEqual(runs[2], runs[0])

    def test_budget_below_one_block_is_refused_before_reading(self):
        q, k, v = self.inputs()
        # NaN in Q and K: a run that read either would fail on that instead.
        for path in (q, k):
            x = np.load(path)
            x[0, 0, 0, 0] = np.nan
            np.save(path, x)
        before = os.listdir(self.tmp)
        p = self.assert_fails(3, "attention", "-q", q, "-k", k, "-v", v, "--emit", "output",
                              "--max-memory", "256K", "-o", self.path("out.npy"),
                              match=r"--max-memory 256\.0 KiB: too small to stream K and V: "
                                    r"one block of 1024 keys needs")
        self.assertNotIn("NaN", p.stderr)
        self.assert_no_new_files(before)

    @unittest.skipIf(UNDER_ASAN, "peak RSS means nothing under AddressSanitizer")
    def test_peak_rss_within_the_budget(self):
        # sq 256, sk 65,536, 8 heads, d 128: K and V are 256 MiB each.
        rng = np.random.default_rng(1)
        q = self.npy("q.npy", rng.standard_normal((1, 8, 256, 128), dtype=np.float32))
        k = self.npy("k.npy", rng.standard_normal((1, 8, 65536, 128), dtype=np.float32))
        v = self.npy("v.npy", rng.standard_normal((1, 8, 65536, 128), dtype=np.float32))
        out_bytes = 8 * 256 * 128 * 4
        rc, _, err, rss_kib = run_measured("attention", "-q", q, "-k", k, "-v", v, "--emit",
                                           "output", "--max-memory", "64M", "-o",
                                           self.path("small.npy"))
        self.assertEqual(rc, 0, err)
        self.assertLessEqual(rss_kib * 1024, 1.5 * 64 * MIB + out_bytes,
                             f"peak RSS {rss_kib / 1024:.0f} MiB with --max-memory 64M")
        whole = self.attention(q, k, v, self.path("whole"))
        with open(self.path("small.npy"), "rb") as f:
            self.assertEqual([f.read()], whole)

    @unittest.skipIf(UNDER_ASAN, "peak RSS means nothing under AddressSanitizer")
    def test_peak_rss_within_the_budget_f16_bshd(self):
        # Decode against an f16 bshd cache (sq 1, sk 65,536, 8 heads, d 128: K and V are
        # 128 MiB each), streamed in chunks widened to f32: the chunk buffers are reused,
        # so resident memory stays at the budget plus the program (about 8 MiB). A new
        # buffer per chunk once kept 90 MiB resident here.
        rng = np.random.default_rng(2)
        q = rng.standard_normal((1, 1, 8, 128), dtype=np.float32)
        k = rng.standard_normal((1, 65536, 8, 128), dtype=np.float32).astype(np.float16)
        v = rng.standard_normal((1, 65536, 8, 128), dtype=np.float32).astype(np.float16)
        paths = [self.npy(f"{n}.npy", x) for n, x in (("q", q), ("k", k), ("v", v))]
        out = self.path("o.npy")
        rc, _, err, rss_kib = run_measured(
            "attention", "--axes", "bshd", "-q", paths[0], "-k", paths[1], "-v", paths[2],
            "--emit", "output", "--max-memory", "32M", "-o", out)
        self.assertEqual(rc, 0, err)
        self.assertLessEqual(rss_kib * 1024, (32 + 12) * MIB,
                             f"peak RSS {rss_kib / 1024:.0f} MiB with --max-memory 32M")
        # float64 reference: softmax(q k^T / sqrt(d)) v per head.
        qh = q[0, 0].astype(np.float64)  # [h, d]
        kh = k[0].astype(np.float64).transpose(1, 0, 2)  # [h, s, d]
        vh = v[0].astype(np.float64).transpose(1, 0, 2)
        s = np.einsum("hd,hsd->hs", qh, kh) / np.sqrt(128)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = np.einsum("hs,hsd->hd", p / p.sum(axis=1, keepdims=True), vh)
        got = np.load(out)
        self.assertEqual(got.shape, (1, 1, 8, 128))
        np.testing.assert_allclose(got[0, 0], want, rtol=0, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
