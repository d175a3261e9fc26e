"""posenc compare streams both tensors in slabs: on inputs of several slabs (and a
[1, s, h, d] layout that streams along s) the report equals numpy's isclose, argmax and
nulp_diff computations, and peak memory stays far below the size of the inputs."""
import json
import unittest

import numpy as np
from numpy.testing._private.utils import nulp_diff

from posenc_testlib import UNDER_ASAN, PosencTestCase, run_measured


class CompareStream(PosencTestCase):
    def test_multi_slab_report_and_memory(self):
        rng = np.random.default_rng(7)
        b = rng.standard_normal((1, 3000, 16, 256)).astype(np.float32)  # 49 MB each side
        a = b.copy()
        flat = a.reshape(-1)
        idx = rng.choice(flat.size, 5000, replace=False)
        flat[idx] = np.nextafter(flat[idx], np.float32(np.inf))
        flat[idx[:40]] *= np.float32(1.001)
        flat[idx[40]] = np.nan
        np.save(self.path("a.npy"), a)
        np.save(self.path("b.npy"), b)
        rc, out, err, rss = run_measured("compare", self.path("a.npy"), self.path("b.npy"),
                                         "--json", "--rtol", "1e-5", "--atol", "1e-6")
        self.assertEqual(rc, 1, err)
        j = json.loads(out)
        close = np.isclose(a, b, rtol=1e-5, atol=1e-6)
        self.assertEqual(j["mismatches"], int(np.count_nonzero(~close)))
        self.assertEqual(j["first_mismatch_index"],
                         list(np.unravel_index(np.argmin(close.reshape(-1)), a.shape)))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        d = np.where(np.isnan(a64), -1.0, np.abs(a64 - b64))
        self.assertEqual(j["max_abs_diff"], d.max())
        self.assertEqual(j["max_abs_diff_index"], list(np.unravel_index(np.argmax(d), a.shape)))
        ulps = np.where(np.isnan(a), 0, nulp_diff(np.nan_to_num(a), b))
        self.assertEqual(j["max_ulp_diff"], int(ulps.max()))
        self.assertEqual(j["nan_a"], 1)
        # Two 16 MiB slabs and the program, against 98 MB of input.
        # (AddressSanitizer's shadow memory makes RSS meaningless there.)
        self.assertTrue(UNDER_ASAN or rss < 64 * 1024, rss)


if __name__ == "__main__":
    unittest.main()
