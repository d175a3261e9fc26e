"""vLLM's per-tensor fp8 KV-cache scales: `posenc attention --k-scale S --v-scale S`,
posenc.attention(k_scale=, v_scale=) (AttentionOptions::k_scale, v_scale).

The reference is written here in numpy float64: K and V dequantized as vLLM does (the
stored value times the scale; the scale a float32 and the product computed in float32, as
FlashAttention's descales and vLLM's float32 scale tensors), then plain softmax attention
(grouped heads, scale 1/sqrt(d), causal where asked). fp8 codes are decoded by
tests/lib/fp8_reference.py, written from the formats' definition.

Tolerances: with dtype f64 the output is within 1e-12 of the reference, relative to its
largest value (posenc computes in float64; only the order of the sums differs); the f32
output (one rounding of that result) within 2^-24 of each reference value plus that
1e-12. The command line and the Python module give the same bytes; a scale gives the bytes
of the descale tensor filled with it, in the exact arithmetic, under --arith fa-baseline,
for packed sequences and for the KV-cache step. Each bad value is refused with exit status
2 (UsageError in Python), one line, and no output written."""
import os
import subprocess

import numpy as np
import pytest

import fp8_reference as fp8
import posenc

BIN = os.environ.get("POSENC_BIN", "posenc")


def dequantized(x, scale):
    """vLLM's dequantization: x * scale, both float32, the product rounded to float32."""
    return (np.asarray(x, np.float32) * np.float32(scale)).astype(np.float64)


def reference(q, k, v, k_scale=None, v_scale=None, causal=False):
    """Attention of q [b, hq, sq, d] over k [b, hk, sk, d], v [b, hk, sk, dv] (float64
    values) with K and V dequantized by their scales (None: as given)."""
    k = dequantized(k, k_scale) if k_scale is not None else np.asarray(k, np.float64)
    v = dequantized(v, v_scale) if v_scale is not None else np.asarray(v, np.float64)
    q = np.asarray(q, np.float64)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def close(got, want, dtype):
    top = np.abs(want).max()
    bound = 1e-12 * top + (2.0**-24 * np.abs(want) if dtype == "f32" else 0)
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= bound), (dtype, float(err.max()), float(top))


def cli(tmp_path, arrays, *words, tag="o"):
    """`posenc attention` on the arrays (q, k, v and any named in words as @name):
    (exit status, stderr, output array or None)."""
    paths = {}
    for name, a in arrays.items():
        paths[name] = str(tmp_path / f"{tag}_{name}.npy")
        np.save(paths[name], a)
    out = tmp_path / f"{tag}_out.npy"
    out.unlink(missing_ok=True)
    args = [paths[w[1:]] if w.startswith("@") else w for w in words]
    emit = [] if "--emit" in args else ["--emit", "output"]
    p = subprocess.run([BIN, "attention", "-q", paths["q"], "-k", paths["k"], "-v", paths["v"],
                        *emit, *args, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr, (np.load(out) if out.exists() else None)


def ok(tmp_path, arrays, *words, tag="o"):
    status, err, out = cli(tmp_path, arrays, *words, tag=tag)
    assert status == 0, err
    return out


def floats(seed=0, b=2, hq=4, hk=2, sq=5, sk=7, d=8, dv=6):
    rng = np.random.default_rng(seed)
    return {"q": rng.standard_normal((b, hq, sq, d)).astype(np.float32),
            "k": rng.standard_normal((b, hk, sk, d)).astype(np.float32),
            "v": rng.standard_normal((b, hk, sk, dv)).astype(np.float32)}


def codes(fmt, shape, rng, bound=8.0):
    """fp8 codes of finite values within +-bound."""
    t = fp8.table(fmt)
    usable = np.nonzero(np.isfinite(t) & (np.abs(t) <= bound))[0].astype(np.uint8)
    return rng.choice(usable, shape)


# Scales that float32 does not hold exactly (0.37, 0.0123): the rounding to float32 shows.
SCALES = [(0.37, 2.5), (0.0123, 0.07)]


@pytest.mark.parametrize("k_scale, v_scale", SCALES)
@pytest.mark.parametrize("causal", [False, True])
def test_f32_inputs_against_the_reference(tmp_path, k_scale, v_scale, causal):
    x = floats()
    want = reference(x["q"], x["k"], x["v"], k_scale, v_scale, causal)
    # Without the scales the result is far from it: the test can see a scale ignored.
    assert np.abs(reference(x["q"], x["k"], x["v"], causal=causal) - want).max() > 1e-2
    mask = ["--causal"] if causal else []
    for dtype in ("f64", "f32"):
        got = ok(tmp_path, x, "--k-scale", str(k_scale), "--v-scale", str(v_scale), *mask,
                 "--dtype", dtype)
        close(got, want, dtype)
        py = posenc.attention(x["q"], x["k"], x["v"], emit="output", k_scale=k_scale,
                              v_scale=v_scale, causal=causal, dtype=dtype)
        assert py.tobytes() == got.tobytes()
    # One operand alone.
    got = ok(tmp_path, x, "--k-scale", str(k_scale), "--dtype", "f64")
    close(got, reference(x["q"], x["k"], x["v"], k_scale=k_scale), "f64")
    got = ok(tmp_path, x, "--v-scale", str(v_scale), "--dtype", "f64")
    close(got, reference(x["q"], x["k"], x["v"], v_scale=v_scale), "f64")


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("k_scale, v_scale", SCALES)
def test_fp8_inputs_against_the_reference(tmp_path, fmt, k_scale, v_scale):
    """fp8 Q, K and V (the command reads uint8 codes with --input-dtype, Python takes
    posenc.FP8), and a float32 Q over an fp8 cache (Python)."""
    rng = np.random.default_rng(21)
    c = {n: codes(fmt, s, rng) for n, s in (("q", (2, 4, 5, 8)), ("k", (2, 2, 9, 8)),
                                            ("v", (2, 2, 9, 8)))}
    t = fp8.table(fmt)
    want = reference(t[c["q"]], t[c["k"]], t[c["v"]], k_scale, v_scale, causal=True)
    for dtype in ("f64", "f32"):
        got = ok(tmp_path, c, "--input-dtype", fmt, "--k-scale", str(k_scale), "--v-scale",
                 str(v_scale), "--causal", "--dtype", dtype)
        close(got, want, dtype)
        py = posenc.attention(*(posenc.FP8(c[n], fmt) for n in "qkv"), emit="output",
                              k_scale=k_scale, v_scale=v_scale, causal=True, dtype=dtype)
        assert py.tobytes() == got.tobytes()
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    py = posenc.attention(q, posenc.FP8(c["k"], fmt), posenc.FP8(c["v"], fmt), emit="output",
                          k_scale=k_scale, v_scale=v_scale, dtype="f64")
    close(py, reference(q, t[c["k"]], t[c["v"]], k_scale, v_scale), "f64")


def filled(x, scale):
    """A descale tensor [b, hk] filled with the scale."""
    return np.full((x["k"].shape[0], x["k"].shape[1]), scale, np.float64)


def test_a_scale_is_the_descale_tensor_filled_with_it(tmp_path):
    x = floats(seed=3)
    x["kd"], x["vd"] = filled(x, 0.37), filled(x, 2.5)
    scales = ["--k-scale", "0.37", "--v-scale", "2.5"]
    descales = ["--k-descale", "@kd", "--v-descale", "@vd"]
    for more in ([], ["--causal", "--window", "3,0"], ["--softcap", "2"]):
        a = ok(tmp_path, x, *scales, *more, tag="s")
        b = ok(tmp_path, x, *descales, *more, tag="d")
        assert a.tobytes() == b.tobytes(), more
    # FlashAttention's baseline in f16: the products rounded back to f16.
    h = {n: x[n].astype(np.float16) for n in "qkv"}
    h["kd"], h["vd"] = x["kd"], x["vd"]
    a = ok(tmp_path, h, *scales, "--arith", "fa-baseline", tag="hs")
    b = ok(tmp_path, h, *descales, "--arith", "fa-baseline", tag="hd")
    assert a.dtype == np.float16 and a.tobytes() == b.tobytes()
    py = posenc.attention(h["q"], h["k"], h["v"], emit="output", k_scale=0.37, v_scale=2.5,
                          arith="fa-baseline")
    assert py.tobytes() == a.tobytes()
    assert a.tobytes() != ok(tmp_path, h, "--arith", "fa-baseline", tag="h0").tobytes()


def test_packed_sequences_and_the_kv_cache_take_the_scale(tmp_path):
    rng = np.random.default_rng(9)
    # Packed sequences (FlashAttention's varlen form): every sequence's K and V scaled.
    cq, ck = np.array([0, 2, 6], np.int32), np.array([0, 5, 10], np.int32)
    p = {"q": rng.standard_normal((6, 4, 8)), "k": rng.standard_normal((10, 2, 8)),
         "v": rng.standard_normal((10, 2, 8)), "cq": cq, "ck": ck,
         "kd": np.full((2, 2), 0.37), "vd": np.full((2, 2), 2.5)}
    packed = ["--axes", "shd", "--cu-seqlens-q", "@cq", "--cu-seqlens-k", "@ck", "--causal",
              "--dtype", "f64"]
    a = ok(tmp_path, p, *packed, "--k-scale", "0.37", "--v-scale", "2.5", tag="ps")
    b = ok(tmp_path, p, *packed, "--k-descale", "@kd", "--v-descale", "@vd", tag="pd")
    assert a.tobytes() == b.tobytes()
    py = posenc.attention(p["q"], p["k"], p["v"], axes="shd", cu_seqlens_q=cq, cu_seqlens_k=ck,
                          causal=True, dtype="f64", k_scale=0.37, v_scale=2.5)
    assert py.tobytes() == a.tobytes()
    for s in range(2):
        qs, ks = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        want = reference(*(np.swapaxes(p[n][r], 0, 1)[None] for n, r in (("q", qs), ("k", ks),
                                                                          ("v", ks))),
                         0.37, 2.5, causal=True)
        close(a[qs], np.swapaxes(want[0], 0, 1), "f64")
    # The KV-cache step (flash_attn_with_kvcache): entry b attends its first
    # cache_seqlens[b] cache rows, each times the scale.
    q = rng.standard_normal((2, 3, 4, 8))
    kc, vc = rng.standard_normal((2, 10, 2, 8)), rng.standard_normal((2, 10, 2, 8))
    lens = np.array([4, 10], np.int32)
    a = posenc.attention(q, kc, vc, cache_seqlens=lens, causal=True, dtype="f64", k_scale=0.37,
                         v_scale=2.5)
    b = posenc.attention(q, kc, vc, cache_seqlens=lens, causal=True, dtype="f64",
                         k_descale=np.full((2, 2), 0.37), v_descale=np.full((2, 2), 2.5))
    assert a.tobytes() == b.tobytes()
    for e in range(2):
        want = reference(np.swapaxes(q[e:e + 1], 1, 2), np.swapaxes(kc[e:e + 1, :lens[e]], 1, 2),
                         np.swapaxes(vc[e:e + 1, :lens[e]], 1, 2), 0.37, 2.5, causal=True)
        close(a[e:e + 1], np.swapaxes(want, 1, 2), "f64")
    c = ok(tmp_path, {"q": q, "k": kc, "v": vc, "lens": lens}, "--axes", "bshd",
           "--cache-seqlens", "@lens", "--causal", "--dtype", "f64", "--k-scale", "0.37",
           "--v-scale", "2.5", tag="kv")
    assert c.tobytes() == a.tobytes()


# Bad values: (option's words, keywords, the message after "posenc: error: " with the
# option on the command line, the keyword in Python; None: the command's own parse error).
POSITIVE = "{}: must be a positive number"
FLOAT32 = ("{}: must be a float32 from 1e-45 to 3.4028235e+38 (the scale is float32, as the "
           "descales are)")
BAD = [(value, POSITIVE) for value in ("0", "-1", "-0.5")] + [
    ("nan", None), ("inf", None), ("abc", None), ("1e39", FLOAT32), ("1e-50", FLOAT32)]


def python_value(text):
    try:
        return float(text)
    except ValueError:
        return text


@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
@pytest.mark.parametrize("text, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_is_refused_by_both_front_ends(tmp_path, name, text, message):
    x = floats(seed=5)
    option = "--" + name.replace("_", "-")
    status, err, out = cli(tmp_path, x, option, text)
    assert status == 2 and out is None, err
    assert err.startswith("posenc: error: ") and err.count("\n") == 1, err
    value = python_value(text)
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(x["q"], x["k"], x["v"], emit="output", **{name: value})
    said = str(e.value)
    assert "\n" not in said
    shown = {"nan": "nan", "inf": "inf", "1e39": "1e+39", "1e-50": "1e-50"}.get(text, text)
    if message is None:  # not a number to the command's parser; Python's floats reach the range
        assert f"{option}: '{text}' is not a decimal number" in err, err
        assert said in (POSITIVE.format(f"{name} {shown}"),
                        f"{name}: expected a number, got str '{text}'"), said
        return
    assert err == "posenc: error: " + message.format(f"{option} {shown}") + "\n", err
    assert said == message.format(f"{name} {shown}"), said


@pytest.mark.parametrize("name", ["k", "v"])
def test_a_scale_is_refused_with_the_descale_of_its_operand(tmp_path, name):
    x = floats(seed=6)
    x["ds"] = filled(x, 0.5)
    status, err, out = cli(tmp_path, x, f"--{name}-scale", "0.5", f"--{name}-descale", "@ds")
    assert status == 2 and out is None
    assert err == (f"posenc: error: --{name}-scale: not with --{name}-descale (the scale is the "
                   "descale of every entry; give one)\n"), err
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(x["q"], x["k"], x["v"], emit="output", **{f"{name}_scale": 0.5,
                                                                   f"{name}_descale": x["ds"]})
    assert str(e.value) == (f"{name}_scale: not with {name}_descale (the scale is the descale "
                            "of every entry; give one)")
    # The other operand's descale goes with it.
    other = "v" if name == "k" else "k"
    ok(tmp_path, x, f"--{name}-scale", "0.5", f"--{other}-descale", "@ds")


def test_what_cannot_honour_a_scale_refuses_it(tmp_path):
    x = floats(seed=7)
    x["do"] = np.ones(x["q"].shape[:3] + (x["v"].shape[3],), np.float32)
    for words, kw, said in [
        (["--arith", "hf"], {"arith": "hf"}, "not under --arith hf"),
        (["--grad-output", "@do", "--emit", "dq"], None,
         "--k-scale/--v-scale (the fp8 scales are forward only)"),
    ]:
        status, err, out = cli(tmp_path, x, "--k-scale", "0.5", *words)
        assert status == 2 and out is None and said in err and err.count("\n") == 1, err
        if kw is not None:
            with pytest.raises(posenc.UsageError, match="k_scale"):
                posenc.attention(x["q"], x["k"], x["v"], emit="output", k_scale=0.5, **kw)
    with pytest.raises(posenc.UsageError, match="k_scale/v_scale"):
        posenc.attention(x["q"], x["k"], x["v"], grad_output=x["do"], emit="dq", k_scale=0.5)
    # v_scale needs V.
    with pytest.raises(posenc.UsageError, match="^v_scale: needs V$"):
        posenc.attention(x["q"], x["k"], emit="probs", v_scale=2.0)
