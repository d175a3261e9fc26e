"""posenc attention's KV-cache step within --max-memory: a paged f16 cache of 1M tokens
(256 MiB per cache, stored sparse: only the pages the entries use are written) is used in
place, so only those pages become resident; the result matches a float64 reference over
the used rows, the same bytes at any thread count; a budget too small exits 3 naming
--max-memory, nothing written (also when new keys make the caches read whole)."""
import os
import unittest

import numpy as np

from posenc_testlib import UNDER_ASAN, PosencTestCase, run_measured

BLOCKS, PAGE, HK, HQ, D = 4096, 256, 2, 4, 64


class KvCacheMemory(PosencTestCase):
    def setUp(self):
        super().setUp()
        r = np.random.default_rng(7)
        self.pt = np.array([[17, 2000, 4095, 5, 0, 0], [3001, 40, 1024, 9, 0, 0]], np.int32)
        self.cs = np.array([600, 700], np.int32)
        self.k_path, self.v_path = self.path("k.npy"), self.path("v.npy")
        self.used = {}
        for name, path in (("k", self.k_path), ("v", self.v_path)):
            m = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16,
                                          shape=(BLOCKS, PAGE, HK, D))
            rows = {}
            for e in range(2):
                pages = self.pt[e, :(self.cs[e] + PAGE - 1) // PAGE]
                for p in pages:
                    x = r.standard_normal((PAGE, HK, D)).astype(np.float16)
                    m[p] = x
                    rows[p] = x
            m.flush()
            del m
            self.used[name] = rows
        self.q = r.standard_normal((2, 1, HQ, D))
        self.f = {n: self.npy(f"{n}.npy", a) for n, a in
                  (("q", self.q), ("pt", self.pt), ("cs", self.cs))}

    def reference(self):
        out = np.zeros((2, 1, HQ, D))
        for e in range(2):
            n = int(self.cs[e])
            pages = self.pt[e, :(n + PAGE - 1) // PAGE]
            k = np.concatenate([self.used["k"][p] for p in pages])[:n].astype(np.float64)
            v = np.concatenate([self.used["v"][p] for p in pages])[:n].astype(np.float64)
            for h in range(HQ):
                g = h // (HQ // HK)
                s = k[:, g, :] @ self.q[e, 0, h] / np.sqrt(D)
                p = np.exp(s - s.max())
                out[e, 0, h] = (p / p.sum()) @ v[:, g, :]
        return out

    def args(self, out, *extra):
        f = self.f
        return ["attention", "-q", f["q"], "-k", self.k_path, "-v", self.v_path,
                "--page-table", f["pt"], "--cache-seqlens", f["cs"], "-o", out, *extra]

    def test_million_token_paged_cache_within_budget(self):
        self.assertGreaterEqual(BLOCKS * PAGE, 1 << 20)
        out = self.path("out.npy")
        status, _, err, rss_kib = run_measured(*self.args(out, "--max-memory", "64MiB", "-j2"))
        self.assertEqual(status, 0, err)
        got = np.load(out)
        ref = self.reference()
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        self.assertLessEqual(rel, 1e-12)
        if not UNDER_ASAN:
            # Each cache is 256 MiB; read whole they would be 512 MiB resident.
            self.assertLess(rss_kib * 1024, 200 << 20, f"peak RSS {rss_kib} KiB")
        out1 = self.path("out1.npy")
        self.run_ok(*self.args(out1, "--max-memory", "64MiB", "-j1"))
        out2 = self.path("out2.npy")
        self.run_ok(*self.args(out2, "-j2"))  # no budget: the same bytes
        with open(out, "rb") as a:
            want = a.read()
        for other, what in ((out1, "-j1"), (out2, "no --max-memory")):
            with open(other, "rb") as b:
                self.assertEqual(want, b.read(), f"{what} differs")

    def test_budget_too_small_exits_3(self):
        out = self.path("small.npy")
        before = sorted(os.listdir(self.tmp))
        # 1300 used rows x 2 heads x (64 + 64) x 2 bytes = 650 KiB; 100 KiB cannot hold them.
        self.assert_fails(3, *self.args(out, "--max-memory", "100KiB"), match="--max-memory")
        self.assertEqual(sorted(os.listdir(self.tmp)), before)
        # New keys are written into the caches, so they are read whole: 512 MiB > 64 MiB.
        kn = self.npy("kn.npy", np.ones((2, 1, HK, D), np.float16))
        before = sorted(os.listdir(self.tmp))
        self.assert_fails(3, *self.args(out, "--max-memory", "64MiB", "--k-new", kn,
                                        "--v-new", kn, "--cache-out", self.path("k2.npy"),
                                        self.path("v2.npy")),
                          match="--max-memory.*read whole")
        self.assertEqual(sorted(os.listdir(self.tmp)), before)


if __name__ == "__main__":
    unittest.main()
