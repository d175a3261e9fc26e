"""posenc attention's KV-cache inputs: every bad input class exits 3 with one line naming
the input and writes nothing (no output, no updated cache); options the KV cache cannot
honour exit 2. The numbers: tests/reference/test_attention_kvcache.py."""
import os
import unittest

import numpy as np

from posenc_testlib import PosencTestCase


class KvCacheInputs(PosencTestCase):
    def setUp(self):
        super().setUp()
        r = np.random.default_rng(1)
        f = {}
        def save(name, a):
            f[name] = self.npy(f"{name}.npy", a)
        # b 2, sq 1, hq 4, hk 2, d 8; contiguous caches [2, 8, 2, 8]; pages [5, 4, 2, 8].
        save("q", r.standard_normal((2, 1, 4, 8)))
        save("kc", r.standard_normal((2, 8, 2, 8)).astype(np.float32))
        save("vc", r.standard_normal((2, 8, 2, 8)).astype(np.float32))
        save("kp", r.standard_normal((5, 4, 2, 8)).astype(np.float32))
        save("vp", r.standard_normal((5, 4, 2, 8)).astype(np.float32))
        save("kn", r.standard_normal((2, 1, 2, 8)).astype(np.float32))
        save("vn", r.standard_normal((2, 1, 2, 8)).astype(np.float32))
        save("kn64", r.standard_normal((2, 1, 2, 8)))
        save("kn3", r.standard_normal((2, 1, 3, 8)).astype(np.float32))
        save("cs", np.array([3, 5], np.int32))
        save("cs55", np.array([5, 5], np.int32))
        save("cs_full", np.array([8, 2], np.int32))
        save("cs_neg", np.array([-1, 2], np.int64))
        save("cs_3", np.array([1, 2, 3], np.int32))
        save("cs_f", np.array([1.0, 2.0]))
        save("pt", np.array([[0, 1], [2, 3]], np.int32))
        save("pt_out", np.array([[0, 5], [2, 3]], np.int32))
        save("pt_shared", np.array([[0, 1], [2, 1]], np.int64))
        save("idx_dup", np.array([1, 1], np.int32))
        save("idx_out", np.array([0, 2], np.int32))
        save("lp_big", np.array([4, 0], np.int32))
        save("cos", r.standard_normal((4, 2)).astype(np.float32))
        save("sin", r.standard_normal((4, 2)).astype(np.float32))
        save("cos_wide", r.standard_normal((16, 5)).astype(np.float32))
        self.f = f
        self.out = self.path("out.npy")

    def base(self, paged=False):
        f = self.f
        return ["attention", "-q", f["q"], "-k", f["kp" if paged else "kc"],
                "-v", f["vp" if paged else "vc"], "-o", self.out]

    def test_good_run_writes_all(self):
        f = self.f
        self.run_ok(*self.base(), "--cache-seqlens", f["cs"], "--k-new", f["kn"], "--v-new", f["vn"],
                    "--cache-out", self.path("kc_new.npy"), self.path("vc_new.npy"))
        for name in ("out.npy", "kc_new.npy", "vc_new.npy"):
            self.assertTrue(os.path.exists(self.path(name)), name)
        kc = np.load(self.path("kc_new.npy"))
        np.testing.assert_array_equal(kc[0, 3], np.load(f["kn"])[0, 0])
        np.testing.assert_array_equal(kc[1, 5], np.load(f["kn"])[1, 0])

    def test_cache_file_updated_in_place(self):
        # --cache-out naming the cache files themselves: one transaction with the output.
        f = self.f
        kc0 = np.load(f["kc"])
        self.run_ok("attention", "-q", f["q"], "-k", f["kc"], "-v", f["vc"], "-o", self.out,
                    "--cache-seqlens", f["cs"], "--k-new", f["kn"], "--v-new", f["vn"],
                    "--cache-out", f["kc"], f["vc"], "--force")
        kc = np.load(f["kc"])
        np.testing.assert_array_equal(kc[0, 3], np.load(f["kn"])[0, 0])
        np.testing.assert_array_equal(kc[:, 6:], kc0[:, 6:])

    def test_bad_inputs_exit_3(self):
        f = self.f
        new = ["--k-new", f["kn"], "--v-new", f["vn"], "--cache-out", self.path("kc_new.npy"),
               self.path("vc_new.npy")]
        before = sorted(os.listdir(self.tmp))
        cases = [
            (3, ["--cache-seqlens", f["cs_full"], *new], "cache.seqlens.*capacity"),
            (3, ["--cache-seqlens", f["cs_neg"]], "cache.seqlens.*out of range"),
            (3, ["--cache-seqlens", f["cs_3"]], r"cache.seqlens.*\[2\]"),
            (3, ["--cache-seqlens", f["cs_f"]], "cache.seqlens.*integer"),
            (3, ["--cache-seqlens", f["cs"], "--cache-leftpad", f["lp_big"]], "cache.leftpad"),
            (3, ["--cache-seqlens", f["cs"], "--cache-batch-idx", f["idx_out"]],
             "cache.batch.idx.*out of range"),
            (3, ["--cache-seqlens", f["cs"], "--cache-batch-idx", f["idx_dup"], *new],
             "cache.batch.idx.*two entries"),
            (3, ["--cache-seqlens", f["cs"], "--k-new", f["kn64"], "--v-new", f["vn"]],
             "k.new.*dtype"),
            (3, ["--cache-seqlens", f["cs"], "--k-new", f["kn3"], "--v-new", f["vn"]],
             "k.new.*shape"),
            (3, ["--cache-seqlens", f["cs"], *new, "--rotary-cos", f["cos"], "--rotary-sin",
                 f["sin"]], "rotary.cos.*rows"),
            (3, ["--cache-seqlens", f["cs"], *new, "--rotary-cos", f["cos_wide"], "--rotary-sin",
                 f["cos_wide"]], "rotary.cos.*shape"),
            (2, ["--cache-seqlens", f["cs"], "--rotary-cos", f["cos"], "--rotary-sin", f["sin"]],
             "rotary.cos.*k.new"),
            (2, ["--cache-seqlens", f["cs"], "--emit", "probs"], "probs"),
            (2, ["--cache-seqlens", f["cs"], "--arith", "hf"], "arith hf"),
            (2, ["--cache-seqlens", f["cs"], "--rope"], "--rope"),
            (2, ["--cache-seqlens", f["cs"], "--axes", "bhsd"], "axes bhsd"),
            (2, ["--cache-seqlens", f["cs"], "--seqused-k", f["cs"]], "seqused.k"),
            (2, ["--cache-seqlens", f["cs"], "--k-new", f["kn"]], "k.new: needs .*v.new"),
        ]
        self.assert_each_fails(self.base(), cases, before)

    def test_options_the_kv_step_cannot_honour_exit_2(self):
        # Each is refused by the library (so the Python module too), naming the option,
        # before anything is written: neither the output nor the updated caches.
        f = self.f
        r = np.random.default_rng(2)
        for name, a in {"t5": r.standard_normal((32, 4)),
                        "clip": r.standard_normal((8, 4)),
                        "gk": r.standard_normal((2, 2, 1, 8)),
                        "rh": r.standard_normal((3, 8))}.items():
            f[name] = self.npy(f"{name}.npy", a)
        kc0, vc0 = np.load(f["kc"]), np.load(f["vc"])
        new = ["--cache-seqlens", f["cs"], "--k-new", f["kn"], "--v-new", f["vn"],
               "--cache-out", f["kc"], f["vc"], "--force"]
        before = sorted(os.listdir(self.tmp))
        cases = [
            (2, ["--p-dtype", "bf16"], "^posenc: error: --p-dtype: not with a KV cache$"),
            (2, ["--arith", "fa-baseline"], "--arith fa-baseline: not with a KV cache"),
            (2, ["--attn-temperature", "0.1", "4"], "--attn-temperature: not with a KV cache"),
            (2, ["--llama4-scaling", "0.1", "8"], "--llama4-scaling: not with a KV cache"),
            (2, ["--t5-bias", f["t5"]], "t5.bias: not with a KV cache"),
            (2, ["--clipped-bias", f["clip"]], "clipped.bias: not with a KV cache"),
            (2, ["--global-kv", f["gk"], f["gk"], "--global-block-size", "4"],
             "global.kv: not with a KV cache"),
            (2, ["--decomposed-rel-pos", f["rh"], f["rh"], "--grid", "1", "1"],
             "decomposed.rel.pos: not with a KV cache"),
            (2, ["--key-lengths", f["cs"]], "key.lengths.*not with a KV cache"),
        ]
        self.assert_each_fails(["attention", "-q", f["q"], "-k", f["kc"], "-v", f["vc"],
                                "-o", self.out, *new], cases, before)
        np.testing.assert_array_equal(np.load(f["kc"]), kc0)
        np.testing.assert_array_equal(np.load(f["vc"]), vc0)

    def test_bad_qv_and_descales_exit_3(self):
        # qv and the descales are honoured by the KV step (tests/reference); bad ones are
        # named before the caches change.
        f = self.f
        for name, a in {"qv7": np.zeros((2, 1, 4, 7)), "ds21": np.ones((2, 1), np.float32),
                        "dsneg": np.array([[1.0, -1.0], [1.0, 1.0]], np.float32),
                        "qv": np.zeros((2, 1, 4, 8))}.items():
            f[name] = self.npy(f"{name}.npy", a)
        kc0 = np.load(f["kc"])
        new = ["--cache-seqlens", f["cs"], "--k-new", f["kn"], "--v-new", f["vn"],
               "--cache-out", f["kc"], f["vc"], "--force"]
        before = sorted(os.listdir(self.tmp))
        cases = [
            (3, ["--qv", f["qv7"]], "--qv: shape"),
            (3, ["--k-descale", f["ds21"]], r"--k-descale: shape \(2, 1\) must be \[b, hk\]"),
            (3, ["--v-descale", f["dsneg"]], "--v-descale: .*positive"),
            (3, ["--qv", f["qv"], "--max-memory", "1000"], "max-memory"),
        ]
        self.assert_each_fails(["attention", "-q", f["q"], "-k", f["kc"], "-v", f["vc"],
                                "-o", self.out, *new], cases, before)
        np.testing.assert_array_equal(np.load(f["kc"]), kc0)

    def test_varlen_new_keys(self):
        # Packed new keys (--cu-seqlens-k-new): entry 0 one token, entry 1 two; the
        # numbers against the float64 reference are tests/reference's.
        f = self.f
        r = np.random.default_rng(3)
        for name, a in {"knp": r.standard_normal((3, 2, 8)).astype(np.float32),
                        "vnp": r.standard_normal((3, 2, 8)).astype(np.float32),
                        "cu": np.array([0, 1, 3], np.int32),
                        "cu_f": np.array([0.0, 1.0, 3.0]),
                        "cu_i16": np.array([0, 1, 3], np.int16),
                        "cu_len": np.array([0, 3], np.int64),
                        "cu_start": np.array([1, 1, 3], np.int32),
                        "cu_dec": np.array([0, 2, 1], np.int32),
                        "cu_end": np.array([0, 1, 2], np.int64)}.items():
            f[name] = self.npy(f"{name}.npy", a)
        new = ["--k-new", f["knp"], "--v-new", f["vnp"], "--cache-out", self.path("kc_new.npy"),
               self.path("vc_new.npy")]
        self.run_ok(*self.base(), "--cache-seqlens", f["cs"], *new, "--cu-seqlens-k-new", f["cu"])
        kc, kn = np.load(self.path("kc_new.npy")), np.load(f["knp"])
        np.testing.assert_array_equal(kc[0, 3], kn[0])
        np.testing.assert_array_equal(kc[1, 5:7], kn[1:3])
        np.testing.assert_array_equal(kc[0, 4:], np.load(f["kc"])[0, 4:])
        for name in ("out.npy", "kc_new.npy", "vc_new.npy"):
            os.remove(self.path(name))
        before = sorted(os.listdir(self.tmp))
        cu = lambda name: ["--cu-seqlens-k-new", f[name]]
        cases = [
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_f")], "cu.seqlens.k.new.*int32 or int64"),
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_i16")], "cu.seqlens.k.new.*int32 or int64"),
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_len")], r"cu.seqlens.k.new.*\[3\]"),
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_start")], "cu.seqlens.k.new.*not 0"),
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_dec")], "cu.seqlens.k.new.*non-decreasing"),
            (3, ["--cache-seqlens", f["cs"], *new, *cu("cu_end")], "cu.seqlens.k.new.*ends at 2"),
            (3, ["--cache-seqlens", f["cs_full"], *new, *cu("cu")],
             "cu.seqlens.k.new: entry 0 .*capacity 8"),
            (3, ["--cache-seqlens", f["cs"], "--k-new", f["kn"], "--v-new", f["vn"], *cu("cu")],
             "k.new: with .*cu.seqlens.k.new"),
            (2, ["--cache-seqlens", f["cs"], *cu("cu")], "cu.seqlens.k.new.*needs .*k.new"),
        ]
        self.assert_each_fails(self.base(), cases, before)
        self.assert_each_fails(self.base(paged=True) + ["--page-table", f["pt"]],
                               [(3, ["--cache-seqlens", f["cs_full"], *new, *cu("cu")],
                                 r"cu.seqlens.k.new: entry 0 .*capacity 8 \(max_blocks 2")],
                               before)

    def test_bad_pages_exit_3(self):
        f = self.f
        new = ["--k-new", f["kn"], "--v-new", f["vn"], "--cache-out", self.path("kc_new.npy"),
               self.path("vc_new.npy")]
        before = sorted(os.listdir(self.tmp))
        cases = [
            (3, ["--cache-seqlens", f["cs55"], "--page-table", f["pt_out"]],
             "page.table.*page 5 is out of range"),
            (3, ["--cache-seqlens", f["cs55"], "--page-table", f["pt_shared"], *new],
             "page.table.*page 1 is used by entries 0 and 1"),
            (3, ["--cache-seqlens", f["cs_f"], "--page-table", f["pt"]], "cache.seqlens"),
            (3, ["--cache-seqlens", f["cs_full"], "--page-table", f["pt"], *new],
             "cache.seqlens.*capacity 8"),
        ]
        self.assert_each_fails(self.base(paged=True), cases, before)
        # Shared pages without new keys are only read: allowed, as FlashAttention's.
        self.run_ok(*self.base(paged=True), "--cache-seqlens", f["cs55"], "--page-table",
                    f["pt_shared"])


if __name__ == "__main__":
    unittest.main()
