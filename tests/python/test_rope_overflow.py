"""posenc.rope refuses non-finite results of finite inputs as the command does
(tests/cli/test_rope_overflow.py): InputError naming the keyword, `out` left alone."""
import numpy as np
import pytest

import posenc


@pytest.mark.parametrize("kw, name", [
    (dict(freq_scale=1e308), "freq_scale"),
    (dict(scaling="linear", factor=1e-308), "factor"),
    (dict(attention_factor=1e308), "attention_factor"),
    (dict(inv_freq=np.array([[1e308, 1.0, 0.1, 0.01]])), "inv_freq"),
    (dict(attention_factor=1e-320, inverse=True), "attention_factor"),
])
def test_overflowing_parameters_raise_input_error(kw, name):
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    out = np.full_like(x, 7.0)
    for allow in (False, True):
        with pytest.raises(posenc.InputError, match=rf"^{name}: "):
            posenc.rope(x, out=out, allow_nonfinite=allow, **kw)
    assert (out == 7.0).all()


def test_a_factor_overflowing_some_f64_values_raises():
    x = np.random.default_rng(1).standard_normal((1, 2, 8, 8))
    x[0, 1, 5, 2] = 1e10
    with pytest.raises(posenc.InputError, match=r"^attention_factor: 1e\+300 makes the rotation"):
        posenc.rope(x, attention_factor=1e300)
    assert np.isfinite(posenc.rope(x, attention_factor=2.0)).all()
