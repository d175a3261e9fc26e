"""`posenc attention` with K and V used in their mapped files (the default, when the
budget holds them), read block by block into each worker's block buffers with positional
reads (the default under a --max-memory below K and V), or read in chunks (under such a
budget with POSENC_KV_IO=map); POSENC_KV_IO=read reads block by block always (the
variable is for tests and measurements only; the unit test
Attention.KvReadOrMappedGiveTheSameBytes checks which way each setting takes). Every way
gives the same output and lse bytes, for K and V stored as f32 and f16 (NPY) and bf16 (a
contiguous HDF5 dataset), MHA and GQA, decode and a few query rows, 1 and 2 threads, on
tmpfs (/dev/shm) and in the test folder; and they are attention by a float64 numpy
reference. A K file on tmpfs shorter than its header says is one error line (exit 3)
every way, leaving no output."""
import os
import shutil
import tempfile
import unittest

import numpy as np

from posenc_testlib import PosencTestCase, to_bf16_values

SHM = "/dev/shm"


def fs_type(path):
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, typ = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, typ
    return kind


@unittest.skipUnless(os.path.isdir(SHM) and os.access(SHM, os.W_OK) and fs_type(SHM) == "tmpfs",
                     "needs a writable tmpfs at /dev/shm")
class AttentionReadsTest(PosencTestCase):
    def setUp(self):
        super().setUp()
        self.shm = tempfile.mkdtemp(prefix="posenc-test-", dir=SHM)

    def tearDown(self):
        shutil.rmtree(self.shm, ignore_errors=True)
        super().tearDown()

    def make(self, folder, dtype, hq, hk, sq, sk, d=64, seed=0):
        """Q (f32 NPY) and K, V stored as `dtype` in `folder`; returns (q, k, v, values)."""
        rng = np.random.default_rng(seed)
        q = os.path.join(folder, "q.npy")
        np.save(q, rng.standard_normal((1, hq, sq, d)).astype(np.float32))
        refs, exact = [], {}
        for name in ("k", "v"):
            x = rng.standard_normal((1, hk, sk, d)).astype(np.float32)
            if dtype == "f16":
                x = x.astype(np.float16).astype(np.float32)
            elif dtype == "bf16":
                x = to_bf16_values(x)
            exact[name] = x
            path = os.path.join(folder, f"{name}.npy")
            if dtype == "f32":
                np.save(path, x)
            elif dtype == "f16":
                np.save(path, x.astype(np.float16))
            else:  # numpy has no bf16: posenc writes it, from values it holds exactly
                np.save(os.path.join(folder, f"{name}32.npy"), x)
                path = os.path.join(folder, f"{name}.h5") + f":/{name}"
                self.run_ok("convert", os.path.join(folder, f"{name}32.npy"), "--dtype", "bf16",
                            "-o", path, "--force")
            refs.append(path)
        return q, refs[0], refs[1], exact

    def check(self, dtype, hq, hk, sq, sk):
        what = f"{dtype} hq {hq} hk {hk} sq {sq} sk {sk}"
        for folder in (self.shm, self.tmp):  # tmpfs, the test folder
            q, k, v, exact = self.make(folder, dtype, hq, hk, sq, sk)
            want = None
            # (POSENC_KV_IO, budget): mapped, read, mapped; read, chunks under a budget
            # below K and V that holds the block buffers and a chunk of one key block
            # (1024 keys of K and V as stored and converted to the f64 arithmetic).
            item = {"f32": 4}.get(dtype, 2)
            kv_bytes = sum(x.size for x in exact.values()) * item
            one_block = 1024 * 2 * hk * 64 * (item + 8)
            self.assertLess(one_block, kv_bytes, "K and V too short for a budget below them")
            small = f"{(kv_bytes + one_block) // 2048}K"
            for io, budget in ((None, None), ("read", None), ("map", None), (None, small),
                               ("map", small)):
                env = {"POSENC_KV_IO": io or "default"}
                extra = ["--max-memory", budget] if budget else []
                for threads in ("1", "2"):
                    tag = f"{io}{budget}{threads}"
                    got = self.output_lse_bytes(q, k, v, tag, "-j", threads, *extra, env=env)
                    if want is None:
                        want = got
                    self.assertTrue(got == want, f"{what} in {folder}: POSENC_KV_IO={io} "
                                    f"--max-memory {budget} -j {threads} differs")
            # And it is attention: float64 numpy on the same values.
            qa = np.load(q).astype(np.float64)
            ka, va = (np.repeat(exact[n].astype(np.float64), hq // hk, axis=1) for n in "kv")
            s = qa @ ka.transpose(0, 1, 3, 2) / np.sqrt(qa.shape[-1])
            p = np.exp(s - s.max(-1, keepdims=True))
            ref = (p / p.sum(-1, keepdims=True)) @ va
            out = np.load(self.path("NoneNone1_output.npy"))
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5, err_msg=what)

    def test_f32_mha_and_gqa(self):
        self.check("f32", hq=4, hk=4, sq=1, sk=5000)
        self.check("f32", hq=4, hk=2, sq=1, sk=4097)

    def test_f16_mha_and_gqa(self):
        self.check("f16", hq=4, hk=4, sq=1, sk=9000)
        self.check("f16", hq=8, hk=2, sq=3, sk=9000)

    def test_bf16_mha_and_gqa(self):
        self.check("bf16", hq=2, hk=2, sq=1, sk=9000)
        self.check("bf16", hq=4, hk=1, sq=1, sk=9000)

    def test_truncated_k_on_tmpfs(self):
        for dtype in ("f32", "f16", "bf16"):
            q, k, v, _ = self.make(self.shm, dtype, hq=2, hk=2, sq=1, sk=3000)
            path = k.split(":")[0]
            size = os.path.getsize(path)
            os.truncate(path, size - 1000)
            before = os.listdir(self.tmp)
            for io, extra in (("default", []), ("map", []), ("read", []),
                              ("default", ["--max-memory", "2M"])):
                for threads in ("1", "2"):
                    p = self.assert_fails(3, "-j", threads, "attention", "-q", q, "-k", k, "-v",
                                          v, "--emit", "output", "-o", self.path("out.npy"),
                                          *extra, env={"POSENC_KV_IO": io})
                    self.assertIn(os.path.basename(path), p.stderr)
                    if dtype != "bf16":
                        self.assertRegex(p.stderr, r"truncated data: expected \d+ bytes, got \d+$")
            self.assert_no_new_files(before)


if __name__ == "__main__":
    unittest.main()
