"""posenc.attention's refusals name keywords, the command line's name options.

The library's messages written in the command line's terms ("--mask", "--arith
fa-baseline") reach a Python caller through AttentionCall, which writes each declared
option of attention's requests as its keyword (ops/attention_keywords.hpp). For each class
of refusal (the backward pass's, FlashAttention's baseline's, HF eager attention's, the
KV-cache step's) the same input is given to posenc.attention and to `posenc attention`:
Python's message is checked word for word, has no "--" and names the keyword; the
command's stderr is one line that names the option, with the same exit status as the
Python exception's type (UsageError 2, InputError 3)."""
import os
import subprocess

import numpy as np
import pytest

import posenc

BIN = os.environ.get("POSENC_BIN", "posenc")
STATUS = {posenc.UsageError: 2, posenc.InputError: 3}


def arrays():
    rng = np.random.default_rng(11)
    a = {n: rng.standard_normal(s) for n, s in [("q", (1, 2, 4, 8)), ("k", (1, 2, 5, 8)),
                                                 ("v", (1, 2, 5, 8)), ("do", (1, 2, 4, 8))]}
    for n in ("q", "k", "v"):
        a[n + "32"] = a[n].astype(np.float32)
    a["descale"] = np.ones((1, 2), np.float32)
    a["mask"] = np.zeros((4, 5))
    a["sinks"] = np.zeros(2, np.float32)
    # The KV-cache step: q [b, 1, h, d], caches [b, S, hk, d] (bshd), filled to 2 and 3.
    a["qc"] = rng.standard_normal((2, 1, 4, 8))
    a["kc"] = rng.standard_normal((2, 6, 4, 8))
    a["vc"] = rng.standard_normal((2, 6, 4, 8))
    a["seqlens"] = np.array([2, 3], np.int32)
    a["mask1"] = np.zeros((1, 6))
    return a


GRADS = (["-q", "@q", "-k", "@k", "-v", "@v", "--grad-output", "@do", "--emit", "dq"],
         lambda a: dict(q=a["q"], k=a["k"], v=a["v"], grad_output=a["do"], emit=["dq"]))


def grads_of(name):
    """The backward asked for the gradient `name` alone."""
    return GRADS[0][:-1] + [name], lambda a: dict(GRADS[1](a), emit=[name])


def float32(k="k32"):
    """The forward in float32, K the array `k` ("k": the float64 one)."""
    return (["-q", "@q32", "-k", "@" + k, "-v", "@v32", "--emit", "output"],
            lambda a: dict(q=a["q32"], k=a[k], v=a["v32"], emit="output"))


F32 = float32()
KV = (["-q", "@qc", "-k", "@kc", "-v", "@vc", "--cache-seqlens", "@seqlens"],
      lambda a: dict(q=a["qc"], k=a["kc"], v=a["vc"], cache_seqlens=a["seqlens"],
                     update_cache=False))

# (id, base call, the command's further words, Python's further keywords, the exception,
# Python's message, the option the command's message names, the keyword Python's names).
CASES = [
    ("grad-descale", GRADS, ["--k-descale", "@descale"], lambda a: dict(k_descale=a["descale"]),
     posenc.UsageError,
     "gradients: q_descale/k_descale/v_descale (FlashAttention-3's fp8 path is forward only) "
     "is not supported by the backward pass", "--k-descale", "k_descale"),
    ("grad-masked-rows", GRADS, ["--masked-rows", "nan"], lambda a: dict(masked_rows="nan"),
     posenc.UsageError, "gradients: masked_rows nan is not supported by the backward pass",
     "--masked-rows nan", "masked_rows nan"),
    ("grad-fa-baseline", GRADS, ["--arith", "fa-baseline"], lambda a: dict(arith="fa-baseline"),
     posenc.UsageError, "gradients: arith fa-baseline is not supported by the backward pass",
     "--arith fa-baseline", "arith fa-baseline"),
    ("grad-global", grads_of("dglobal_k"), [], lambda a: {}, posenc.UsageError,
     "gradients: dglobal_k and dglobal_v need global_kv", "--global-kv", "global_kv"),
    ("grad-relative", grads_of("drel_keys"), [], lambda a: {}, posenc.UsageError,
     "gradients: drel_keys needs rel_keys", "--rel-keys", "rel_keys"),
    ("fa-baseline-mask", F32, ["--arith", "fa-baseline", "--mask", "@mask"],
     lambda a: dict(arith="fa-baseline", mask=a["mask"]), posenc.UsageError,
     "arith fa-baseline: not with mask (FlashAttention's attention_ref has no such term)",
     "--mask", "with mask"),
    ("fa-baseline-window", F32, ["--arith", "fa-baseline", "--sliding-window", "2"],
     lambda a: dict(arith="fa-baseline", sliding_window=2), posenc.UsageError,
     "arith fa-baseline: not with sliding_window (give window) (FlashAttention's "
     "attention_ref has no such term)", "--sliding-window (give --window)",
     "sliding_window (give window)"),
    ("fa-baseline-dtype", float32("k"), ["--arith", "fa-baseline"],
     lambda a: dict(arith="fa-baseline"), posenc.InputError,
     "arith fa-baseline: K, V and qv must have Q's dtype f32 (got f64)", "--arith fa-baseline",
     "arith fa-baseline"),
    ("hf-sinks", F32, ["--arith", "hf", "--sinks", "@sinks"],
     lambda a: dict(arith="hf", sinks=a["sinks"]), posenc.UsageError,
     "arith hf: HF's eager attention has no sinks", "--sinks", "no sinks"),
    ("kvcache-mask", KV, ["--mask", "@mask1"], lambda a: dict(mask=a["mask1"]),
     posenc.UsageError, "mask: not with a KV cache", "--mask", "mask"),
]


@pytest.mark.parametrize("base, words, kw, error, message, option, keyword",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refusal_names_the_keyword_in_python_and_the_option_on_the_command_line(
        tmp_path, base, words, kw, error, message, option, keyword):
    a = arrays()
    with pytest.raises(posenc.Error) as e:
        posenc.attention(**dict(base[1](a), **kw(a)))
    assert type(e.value) is error, (type(e.value), str(e.value))
    said = str(e.value)
    assert said == message and "--" not in said and keyword in said, said

    for name, x in a.items():
        np.save(tmp_path / f"{name}.npy", x)
    args = [f"{w[1:]}.npy" if w.startswith("@") else w for w in base[0] + words]
    p = subprocess.run([BIN, "attention", *args, "-o", "out_{}.npy"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == STATUS[error], p.stderr
    assert p.stderr.startswith("posenc: error: ") and p.stderr.count("\n") == 1, p.stderr
    assert option in p.stderr, p.stderr
    assert not list(tmp_path.glob("out_*")), "a refused run wrote output"


@pytest.mark.parametrize("kw, message", [
    (dict(emit=["--mask"]),
     "emit: unknown tensor '--mask' (expected a comma list of logits, probs, output, lse)"),
    (dict(masked_rows="--k-descale-x"), "masked_rows: expected zero or nan, got '--k-descale-x'"),
    (dict(arith="--arith"), "arith: expected exact, hf, fa-baseline, meta or ggml, got '--arith'"),
], ids=["emit", "masked_rows", "arith"])
def test_a_value_the_caller_gave_is_quoted_as_given(kw, message):
    """Only declared options are rewritten: a value of the caller's, quoted in the message,
    stays as given even where it reads like an option."""
    a = arrays()
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(a["q"], a["k"], a["v"], **kw)
    assert str(e.value) == message
