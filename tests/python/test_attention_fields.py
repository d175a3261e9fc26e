"""Every declared attention field (include/posenc/ops/attention_fields.hpp, listed by
posenc._posenc._fields("attention"): AttentionOptions' scalars that are one option and one
keyword of the same name) is offered everywhere it must be: `posenc attention --help` has
its option (and its choices); a value just inside its range passes the range check, one
outside it is refused with exit status 2 by the command and with UsageError by
posenc.attention, both with the same message ("sliding_window 0: must be at least 1",
the option for the keyword on the command line); a name outside a choice field's names is
refused by both (a choice whose option may go without its word, `--causal [ALIGN]`, with
the same message from both: "causal diagonal: expected bottom-right or top-left"); the
bare option and the keyword True give the same result, as do two-sided fields
(`--window 2,0`, window=(2, 0)); posenc.attention takes the keyword and the stub names it;
man/posenc-attention.1 documents the option; the option x mode matrix
(tests/cli/test_option_matrix.py) has its row."""
import inspect
import os
import re
import subprocess

import numpy as np
import pytest

import hf_config_choice_cases
import posenc

BIN = os.environ.get("POSENC_BIN", "posenc")
SOURCE = os.environ.get("POSENC_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
FIELDS = posenc._posenc._fields("attention")
IDS = [f["name"] for f in FIELDS]
# The relative window's sides are checked with the window (checked_window): "relative_left:
# must be from 0 to 2^30, got -1" from both front ends (RULES below).
RANGED = [f for f in FIELDS if f["lo"] is not None and f["name"] not in ("relative_left",
                                                                           "relative_right")]

# What a field needs besides Q, K and V [1, 2, 4, 4] for its range to be checked:
# command-line words ({x}: the file x.npy) and keywords (x: the array).
NEEDS = {
    "alibi_max_bias": (["--alibi"], {"alibi": True}),
    "max_distance": (["--relative-k", "{rk}"], {"relative_k": "rk"}),
    "global_block_size": (["--global-kv", "{kg}", "{vg}"], {"global_kv": ("kg", "vg")}),
    "relative_sign": (["--relative-k", "{rk}"], {"relative_k": "rk"}),
    "relative_beyond": (["--relative-k", "{rk}"], {"relative_k": "rk"}),
    "grid": (["--decomposed-rel-pos", "{rk}", "{rk}"], {"decomposed_rel_pos": ("rk", "rk")}),
    "key_grid": (["--decomposed-rel-pos", "{rk}", "{rk}", "--grid", "2", "2"],
                 {"decomposed_rel_pos": ("rk", "rk"), "grid": (2, 2)}),
}


def read(path):
    with open(os.path.join(SOURCE, path)) as fh:
        return fh.read()


def options(f):
    return ([f["option"]] if f["positive"] else []) + ([f["negation"]] if f["negation"] else [])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attention_fields")
    rng = np.random.default_rng(7)
    arrays = {"q": rng.standard_normal((1, 2, 4, 4)), "rk": rng.standard_normal((3, 4)),
              "kg": rng.standard_normal((1, 2, 2, 4)), "vg": rng.standard_normal((1, 2, 2, 4)),
              "sl": np.array([0.5, 0.25])}
    for name, a in arrays.items():
        np.save(tmp / f"{name}.npy", a)
    return tmp, arrays


def text(value):
    """A value as the command line's words say it: a pair (H, W) as "H W"."""
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def run(inputs, f, value):
    """`posenc attention` with the field at `value` (and what it needs)."""
    tmp, _ = inputs
    words = [w.format(**{n: str(tmp / f"{n}.npy") for n in ("rk", "kg", "vg")})
             for w in NEEDS.get(f["name"], ([], {}))[0]]
    out = tmp / "o.npy"
    if out.exists():
        out.unlink()
    q = str(tmp / "q.npy")
    p = subprocess.run([BIN, "attention", "-q", q, "-k", q, "-v", q, "--emit", "output", *words,
                        f["option"], *text(value).split(), "-o", str(out), "--force"],
                       capture_output=True, text=True, timeout=60)
    return p, out.exists()


def call(inputs, f, value):
    """posenc.attention with the keyword at `value`: None, or the error."""
    _, a = inputs
    kw = {k: (tuple(a.get(x, x) for x in v) if isinstance(v, tuple) else a[v]
              if isinstance(v, str) else v) for k, v in NEEDS.get(f["name"], ([], {}))[1].items()}
    try:
        posenc.attention(a["q"], a["q"], a["q"], emit="output", **kw, **{f["name"]: value})
    except posenc.Error as e:
        return e
    return None


def outside(f):
    """Values outside the declared range (a real field's lo is exclusive)."""
    if f["type"] == "float":
        return [f["lo"], f["lo"] - 1]
    return [f["lo"] - 1] + ([f["hi"] + 1] if f["hi"] is not None else [])


def test_the_listing_holds_the_attention_options():
    names = {f["name"] for f in FIELDS}
    assert {"scale", "sliding_window", "chunk_size", "sink_tokens", "softcap", "max_distance",
            "global_block_size", "masked_rows", "p_dtype", "allow_nonfinite", "causal",
            "window", "alibi", "attn_temperature", "llama4_scaling", "dtype", "arith",
            "max_memory"} <= names
    for f in FIELDS:
        assert f["kind"] == "attention"
        assert f["name"] == f["option"][2:].replace("-", "_")


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_command_line_offers_the_option(f):
    p = subprocess.run([BIN, "attention", "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    offered = set(re.findall(r"--[a-z0-9-]+", p.stdout))
    for option in options(f):
        assert option in offered, f"attention: {option} not in --help"
    for c in f["choices"]:
        assert c in p.stdout, f"{f['option']}: choice {c} not in --help"


@pytest.mark.parametrize("f", RANGED, ids=[f["name"] for f in RANGED])
def test_the_range_is_refused_alike_by_both_front_ends(f, inputs):
    """A pair (`--grid H W`, grid=(H, W)) is tried with both sides at the value: "grid 0 0:
    sides must be from 1 to 2^31"."""
    pair = (lambda v: (v, v)) if f["type"] == "pair" else (lambda v: v)
    must = "sides must be" if f["type"] == "pair" else "must be"
    inside = pair(f["lo"] + 0.5 if f["type"] == "float" else f["lo"])
    p, _ = run(inputs, f, inside)
    assert f"{f['option']} {text(inside)}: {must}" not in p.stderr, p.stderr
    error = call(inputs, f, inside)
    assert error is None or not str(error).startswith(f"{f['name']} {text(inside)}: "), error
    for value in map(pair, outside(f)):
        p, written = run(inputs, f, value)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"posenc: error: {f['option']} {text(value)}: {must}"), \
            p.stderr
        assert not written
        error = call(inputs, f, value)
        assert isinstance(error, posenc.UsageError), error
        message = str(error)
        assert message.startswith(f"{f['name']} {text(value)}: {must}"), message
        said = p.stderr.strip()[len("posenc: error: "):]
        assert said == f["option"] + message[len(f["name"]):], (said, message)


@pytest.mark.parametrize("f", [f for f in FIELDS if f["choices"]],
                         ids=[f["name"] for f in FIELDS if f["choices"]])
def test_a_name_outside_the_choices_is_refused_by_both(f, inputs):
    p, written = run(inputs, f, "no-such-name")
    assert p.returncode == 2 and f["option"] in p.stderr and not written, p.stderr
    error = call(inputs, f, "no-such-name")
    assert isinstance(error, posenc.UsageError), error
    if f["bare"]:  # one message from the library for both
        assert str(error).startswith(f"{f['name']} no-such-name: expected "), error
        said = p.stderr.strip()[len("posenc: error: "):]
        assert said == f["option"] + str(error)[len(f["name"]):], (said, str(error))
    else:
        assert str(error).startswith(f"{f['name']}: expected "), error
    for c in f["choices"]:
        p, _ = run(inputs, f, c)
        assert p.returncode == 0 or f"{f['option']}: " not in p.stderr, p.stderr
        error = call(inputs, f, c)
        assert error is None or not str(error).startswith(f"{f['name']}: expected"), error


def output_of(inputs, words, **kw):
    """The output of `posenc attention WORDS` and of posenc.attention(**kw) (Q = K = V)."""
    tmp, a = inputs
    out = tmp / "same.npy"
    q = str(tmp / "q.npy")
    p = subprocess.run([BIN, "attention", "-q", q, "-k", q, "-v", q, "--emit", "output", *words,
                        "-o", str(out), "--force"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return np.load(out), posenc.attention(a["q"], a["q"], a["q"], emit="output", **kw)


WORDED = [f for f in FIELDS if f["bare"] or f["type"] == "sides"]


@pytest.mark.parametrize("f", WORDED, ids=[f["name"] for f in WORDED])
def test_the_bare_option_and_the_sides_mean_the_same_in_both(f, inputs):
    """`--causal` is causal=True and `--causal top-left` causal="top-left"; `--window 1` is
    window=1, `--window 1,0` window=(1, 0) (and differs from no window)."""
    if f["type"] == "sides":
        cases = [(["1"], 1), (["1,0"], (1, 0))]
    else:
        cases = [([], True)] + [([c], c) for c in f["choices"]]
    plain, _ = output_of(inputs, [])
    for words, value in cases:
        cli, py = output_of(inputs, [f["option"], *words], **{f["name"]: value})
        np.testing.assert_array_equal(cli, py)
        assert not np.array_equal(cli, plain), (f["name"], value)


NUMBERS = [f for f in FIELDS if f["type"] == "numbers"]


@pytest.mark.parametrize("f", NUMBERS, ids=[f["name"] for f in NUMBERS])
def test_two_numbers_mean_the_same_and_are_refused_alike(f, inputs):
    """`--attn-temperature 0.5 2` is attn_temperature=(0.5, 2); a second number of 0 is
    outside both fields' ranges, refused by both front ends with one message."""
    plain, _ = output_of(inputs, [])
    cli, py = output_of(inputs, [f["option"], "0.5", "2"], **{f["name"]: (0.5, 2)})
    np.testing.assert_array_equal(cli, py)
    assert not np.array_equal(cli, plain)
    tmp, a = inputs
    q = str(tmp / "q.npy")
    p = subprocess.run([BIN, "attention", "-q", q, "-k", q, "-v", q, f["option"], "1", "0",
                        "-o", str(tmp / "bad.npy")], capture_output=True, text=True)
    assert p.returncode == 2 and not (tmp / "bad.npy").exists(), p.stderr
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(a["q"], a["q"], a["q"], **{f["name"]: (1, 0)})
    message = str(e.value)
    assert message.startswith(f"{f['name']}: expected {' '.join(f['sides'])}, "), message
    said = p.stderr.strip()[len("posenc: error: "):]
    assert said == f["option"] + message[len(f["name"]):], (said, message)


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_python_takes_the_keyword_and_the_stub_names_it(f):
    assert f["name"] in inspect.signature(posenc.attention).parameters
    stubs = re.findall(r"^def attention\((.*?)\) -> ", read("python/posenc/__init__.pyi"),
                       re.S | re.M)
    assert stubs, "__init__.pyi: no stub for attention"
    assert any(re.search(rf"\b{f['name']}:", s) for s in stubs), \
        f"__init__.pyi: attention lacks {f['name']}"


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_man_page_documents_the_option(f):
    page = read("man/posenc-attention.1")
    for option in options(f):
        escaped = re.escape(option.replace("-", r"\-"))
        assert re.search(rf"^\.B[IR]? .*{escaped}\b(?!\\-)", page, re.M), \
            f"posenc-attention.1: {option}"


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_option_matrix_has_its_row(f):
    matrix = read("tests/cli/test_option_matrix.py")
    for option in options(f):
        # A row that changes numbers, or one saying why the option does not.
        assert re.search(rf'"{re.escape(option)}": [(\"]', matrix), option


# The rules between fields and tensor inputs (check_given of AttentionOptions and of the
# relative window, RelativeWindow): one message, each front end naming the fields as it
# spells them; Python has no t5_bidirectional (its name and separator are left out of the
# list there). Words as run() takes them ({x}: the file x.npy), keywords as call() does
# (x: the array).
RULES = [
    (["--alibi", "--alibi-max-bias", "4", "--alibi-slopes", "{sl}"],
     {"alibi": True, "alibi_max_bias": 4, "alibi_slopes": "sl"},
     "{alibi_max_bias}: not with {alibi_slopes} (the slopes are given)"),
    (["--alibi-max-bias", "4"], {"alibi_max_bias": 4}, "{alibi_max_bias} needs {alibi}"),
    (["--t5-buckets", "8"], {"t5_buckets": 8}, "{t5}"),
    (["--t5-max-distance", "64"], {"t5_max_distance": 64}, "{t5}"),
    (["--t5-causal"], {"t5_causal": True}, "{t5}"),
    (["--t5-bidirectional"], None, "{t5}"),
    (["--relative-k", "{rk}", "--relative-left", "1"], {"relative_k": "rk", "relative_left": 1},
     "{relative_left}/{relative_right}: give both (or {max_distance} for both sides)"),
    (["--relative-k", "{rk}", "--relative-left", "1", "--relative-right", "-1"],
     {"relative_k": "rk", "relative_left": 1, "relative_right": -1},
     "{relative_right}: must be from 0 to 2^30, got -1"),
    (["--clipped-symmetric"], {"clipped_symmetric": True}, "{clipped_symmetric}: needs {clipped_bias}"),
    (["--wavlm-gate", "{sl}", "{sl}", "{sl}", "{sl}"], {"wavlm_gate": ("sl",) * 4},
     "{wavlm_gate}: gates the {t5_bias} term; give {t5_bias}"),
    (["--global-block-size", "2"], {"global_block_size": 2},
     "{global_block_size}/{global_bias}: only with {global_kv}"),
    (["--global-kv", "{kg}", "{vg}"], {"global_kv": ("kg", "vg")},
     "{global_kv}: needs {global_block_size} G"),
    (["--max-distance", "2"], {"max_distance": 2}, "{max_distance} needs {relative_k} or {relative_v}"),
    # The package said "relative_left/...: need relative_k, ..." before the library's rule.
    (["--relative-sign", "q-k"], {"relative_sign": "q-k"},
     "{relative_left}/{relative_right}/{relative_sign}/{relative_beyond} need {relative_k}, "
     "{relative_v} or {relative_proj}"),
    (["--grid", "2", "2"], {"grid": (2, 2)}, "{grid}/{key_grid}: only with {decomposed_rel_pos}"),
    # The package said "decomposed_rel_pos: needs grid (H, W), the query grid".
    (["--decomposed-rel-pos", "{rk}", "{rk}"], {"decomposed_rel_pos": ("rk", "rk")},
     "{decomposed_rel_pos}: needs {grid} H W (the query grid)"),
    # The arithmetic (check_given of AttentionArith); each front end wrote its own.
    (["--arith", "meta"], {"arith": "meta"},
     "{arith} meta: attention reproduces hf only (rotate Q and K with rope's {arith} meta)"),
    (["--arith", "ggml"], {"arith": "ggml"},
     "{arith} ggml: attention reproduces hf only (rotate Q and K with rope's {arith} ggml)"),
    (["--arith", "hf", "--precision", "f32"], {"arith": "hf", "precision": "f32"},
     "{precision}: applies to {arith} exact only ({arith} hf has its framework's own "
     "arithmetic)"),
]
T5 = "{t5_buckets}/{t5_max_distance}/{t5_bidirectional}{t5_causal} need {t5_bias} or {global_bias}"


def said(message, option):
    names = ("alibi", "alibi_max_bias", "alibi_slopes", "t5_buckets", "t5_max_distance",
             "t5_causal", "t5_bias", "global_bias", "relative_left", "relative_right",
             "max_distance", "clipped_symmetric", "clipped_bias", "wavlm_gate", "global_kv",
             "global_block_size", "relative_k", "relative_v", "relative_proj", "relative_sign",
             "relative_beyond", "grid", "key_grid", "decomposed_rel_pos", "arith", "precision")
    terms = {n: "--" + n.replace("_", "-") if option else n for n in names}
    terms["t5_bidirectional"] = "--t5-bidirectional/" if option else ""
    return message.replace("{t5}", T5).format(**terms)


@pytest.mark.parametrize("words, kw, message", RULES,
                         ids=[" ".join(r[0]).replace("{", "").replace("}", "") for r in RULES])
def test_a_rule_between_a_field_and_a_tensor_says_one_message_on_both_front_ends(
        words, kw, message, inputs):
    tmp, a = inputs
    out = tmp / "rule.npy"
    out.unlink(missing_ok=True)
    q = str(tmp / "q.npy")
    p = subprocess.run([BIN, "attention", "-q", q, "-k", q, "-v", q, "--emit", "output",
                        *[w.format(**{n: tmp / f"{n}.npy" for n in ("sl", "rk", "kg", "vg")})
                          for w in words],
                        "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == f"posenc: error: {said(message, True)}\n", p.stderr
    assert not out.exists()
    if kw is None:  # no such keyword
        return
    kw = {k: a[v] if isinstance(v, str) and v in a else
          tuple(a.get(x, x) for x in v) if isinstance(v, tuple) else v for k, v in kw.items()}
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(a["q"], a["q"], a["q"], emit="output", **kw)
    assert str(e.value) == said(message, False)
    # The library's rule, not the package's: the module called with the package's dicts
    # refuses the same.
    arg = (lambda x: (np.ascontiguousarray(x), "f64"))
    tensors = {"q": arg(a["q"]), "k": arg(a["q"]), "v": arg(a["q"])}
    opt = {"emit": ["output"]}
    for k, v in kw.items():
        if isinstance(v, np.ndarray):
            tensors[k] = arg(v)
        elif isinstance(v, tuple) and isinstance(v[0], np.ndarray):  # a group: a list
            tensors[k] = [arg(x) for x in v]
        else:
            opt[k] = float(v) if k == "alibi_max_bias" else v
    with pytest.raises(posenc.UsageError) as e:
        posenc._posenc.attention(tensors, opt, {}, {}, {}, False, {})
    assert str(e.value) == said(message, False)


def test_the_memory_budget_is_its_declarations_in_both_front_ends(inputs):
    """--max-memory takes a size (MemorySize: the library's parse and message); Python an int
    of bytes, refused below 0 by the module itself; the same budget refuses alike."""
    tmp, a = inputs
    f = next(f for f in FIELDS if f["name"] == "max_memory")
    assert f["type"] == "size"
    p, written = run(inputs, f, "12X")
    assert p.returncode == 2 and not written and p.stderr == (
        "posenc: error: --max-memory: expected a size such as 512M, 2G, 1.5GiB or a byte "
        "count (K, M, G, T are powers of 1024), got '12X'\n"), p.stderr
    for words in ("100", "100B", "0.09765625K"):  # 100 bytes: too few for either
        p, written = run(inputs, f, words)
        assert p.returncode == 3 and "--max-memory 100 bytes" in p.stderr, p.stderr
    error = call(inputs, f, 100)
    assert isinstance(error, posenc.InputError) and "max_memory 100 bytes" in str(error), error
    for bad in (-1, "4G"):
        assert isinstance(call(inputs, f, bad), posenc.UsageError)
    assert str(call(inputs, f, -1)) == "max_memory: must not be negative"
    arg = (np.ascontiguousarray(a["q"]), "f64")
    with pytest.raises(posenc.UsageError, match="^max_memory: must not be negative$"):
        posenc._posenc.attention({"q": arg, "k": arg, "v": arg},
                                 {"emit": ["output"], "max_memory": -1}, {}, {}, {}, False, {})


@pytest.mark.parametrize("words, kw, message", hf_config_choice_cases.CASES,
                         ids=hf_config_choice_cases.IDS)
def test_the_hf_config_choice_is_checked_alike_before_the_file_is_read(words, kw, message,
                                                                      inputs):
    """HfConfigChoice (rope_fields.hpp) read and checked by both, with or without --rope."""
    tmp, a = inputs
    q = str(tmp / "q.npy")
    terms = hf_config_choice_cases.NAMES
    for rope in ([], ["--rope"]):
        p = subprocess.run([BIN, "attention", "-q", q, "-k", q, "-v", q, "--emit", "output",
                            *rope, *words, "-o", str(tmp / "hf.npy")],
                           capture_output=True, text=True, timeout=60, cwd=tmp)
        said = message.format(**{n: "--" + n.replace("_", "-") for n in terms})
        assert p.returncode == 2 and p.stderr == f"posenc: error: {said}\n", p.stderr
        with pytest.raises(posenc.UsageError) as e:
            posenc.attention(a["q"], a["q"], a["q"], emit="output", rope=bool(rope), **kw)
        assert str(e.value) == message.format(**{n: n for n in terms})


# The declared tensor inputs (declare_tensors, declare(KvCacheOptions)): `--name REF` on the
# command line, keyword `name` in Python.
TENSORS = posenc._posenc._fields("attention_tensors")
TENSOR_IDS = [f"{t['kind']}:{t['name']}" for t in TENSORS]


def test_the_listing_holds_the_tensor_inputs():
    names = {(t["kind"], t["name"]) for t in TENSORS}
    assert {("attention", "mask"), ("attention", "t5_bias"), ("attention", "qv"),
            ("attention", "cu_seqlens_q"), ("kvcache", "page_table"),
            ("kvcache", "k_new")} <= names
    for t in TENSORS:
        assert t["option"] == "--" + t["name"].replace("_", "-")


@pytest.mark.parametrize("t", TENSORS, ids=TENSOR_IDS)
def test_a_tensor_input_is_offered_by_both_front_ends(t):
    p = subprocess.run([BIN, "attention", "--help"], capture_output=True, text=True)
    assert t["option"] in set(re.findall(r"--[a-z0-9-]+", p.stdout)), t["option"]
    assert t["name"] in inspect.signature(posenc.attention).parameters
    stubs = re.findall(r"^def attention\((.*?)\) -> ", read("python/posenc/__init__.pyi"),
                       re.S | re.M)
    assert any(re.search(rf"\b{t['name']}:", s) for s in stubs), t["name"]


@pytest.mark.parametrize("t", TENSORS, ids=TENSOR_IDS)
def test_a_tensor_input_is_documented_and_has_its_matrix_row(t):
    escaped = re.escape(t["option"].replace("-", r"\-"))
    assert re.search(rf"^\.B[IR]? .*{escaped}\b(?!\\-)", read("man/posenc-attention.1"),
                     re.M), t["option"]
    assert re.search(rf'"{re.escape(t["option"])}": [(\"]',
                     read("tests/cli/test_option_matrix.py")), t["option"]
