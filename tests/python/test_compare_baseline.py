"""posenc.compare(..., baseline=PT): flash-attn's verdict against FA's assertion written
here in torch on the tensors' own dtypes, on planted kernels (one passing, one failing by
3 times the bound), and its argument errors."""
import numpy as np
import pytest
import torch

import posenc


def fa_rule(k, ref, pt, factor=2):
    """FA's assertion, as its test writes it, in torch on the tensors' own dtypes."""
    atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()
    bound = factor * (pt - ref).abs().max().item() + atol
    return (k - ref).abs().max().item() <= bound, bound, atol


def test_verdict_on_planted_kernels():
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(2, 16, 4, 32, generator=g).to(torch.bfloat16)
    pt = ref.clone()
    pt[1, 3, 2, 9] += 2.0 ** -5
    good = ref.clone()
    good[0, 0, 0, 0] += 1.5 * 2.0 ** -5
    _, bound, atol = fa_rule(good, ref, pt)
    bad = ref.clone()
    bad[1, 15, 3, 31] -= 3 * bound
    for k, factor in ((good, 2), (bad, 2), (bad, 7)):
        want, want_bound, _ = fa_rule(k, ref, pt, factor)
        r = posenc.compare(k, ref, baseline=pt, factor=factor)
        assert isinstance(r, posenc.VerdictResult)
        assert bool(r) == want and r.bound == want_bound and r.atol == atol
        assert r.error == (k - ref).abs().max().item()
        assert r.baseline_error == 2.0 ** -5 and r.baseline_error_index == (1, 3, 2, 9)
    assert posenc.compare(good, ref, baseline=pt)
    with pytest.raises(posenc.DifferError, match=r"differ: max\|a - b\|"):
        posenc.compare(bad, ref, baseline=pt).check()
    assert posenc.compare(bad, ref, baseline=pt, atol=1.0).atol == 1.0


def test_verdict_errors():
    a = np.zeros((2, 3), np.float16)
    with pytest.raises(posenc.UsageError, match="rtol: not with baseline"):
        posenc.compare(a, a, baseline=a, rtol=0.1)
    with pytest.raises(posenc.UsageError, match="factor: applies to baseline"):
        posenc.compare(a, a, factor=3)
    with pytest.raises(posenc.UsageError, match="atol_rule"):
        posenc.compare(a, a, baseline=a, atol_rule="hf")
    with pytest.raises(posenc.UsageError, match="factor"):
        posenc.compare(a, a, baseline=a, factor=-1)
    with pytest.raises(posenc.InputError, match=r"baseline: has shape \(1, 3\)"):
        posenc.compare(a, a, baseline=a[:1])
