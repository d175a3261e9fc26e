"""Every declared field of a table kind (include/posenc/encodings/table_fields.hpp, listed
by posenc._posenc._fields("table")) is offered everywhere it must be: the command line has
its option in `--help` with its range (a value at the bottom of the range passes the range
check; one below it, or above the top, is refused with exit status 2 naming the option);
posenc.table takes its keyword (the same values refused with UsageError naming the
keyword); the stub posenc/table.pyi names it; the kind's synopsis in man/posenc-table.1
lists the option. The option x mode matrix (tests/cli/test_option_matrix.py) covers the
kinds with --arith; no declared kind has one, which is checked here too."""
import inspect
import os
import re
import subprocess

import numpy as np
import pytest

import posenc
import posenc.table

BIN = os.environ.get("POSENC_BIN", "posenc")
SOURCE = os.environ.get("POSENC_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
FIELDS = posenc._posenc._fields("table")
KINDS = sorted({f["kind"] for f in FIELDS})


def _arrays(tmp):
    """The files and arrays the kinds that need a tensor take."""
    freq = np.array([0.5, 1.0, 1.5, 2.0])
    w0, w1 = np.ones((2, 1, 2)), np.ones((1, 2, 2))
    paths = {}
    for name, a in (("freq", freq), ("w0", w0), ("w1", w1)):
        paths[name] = str(tmp / f"{name}.npy")
        np.save(paths[name], a)
    return paths, {"freq": freq, "w0": w0, "w1": w1}


# A small valid request of each kind: command-line words and Python keywords.
def baselines(paths, arrays):
    return {
        "sinusoidal": (["--positions", "4", "--dim", "8"], {"positions": 4, "dim": 8}),
        "rope2d": (["--height", "2", "--width", "2", "--dim", "8"],
                   {"height": 2, "width": 2, "dim": 8}),
        "alibi": (["--heads", "2", "--q-len", "3"], {"heads": 2, "q_len": 3}),
        "relative": (["--q-len", "3", "--max-distance", "2"], {"q_len": 3, "max_distance": 2}),
        "t5-bucket": (["--q-len", "3"], {"q_len": 3}),
        "xl-relative": (["--dim", "8", "--q-len", "3"], {"dim": 8, "q_len": 3}),
        "funnel-relative": (["--seq-len", "8", "--dim", "8"], {"seq_len": 8, "dim": 8}),
        "funnel-factorized": (["--seq-len", "8", "--dim", "8", "--emit", "phi"],
                              {"seq_len": 8, "dim": 8, "emit": "phi"}),
        "deberta-bucket": (["--q-len", "3"], {"q_len": 3}),
        "swin-index": (["--window", "2", "3"], {"window": (2, 3)}),
        "beit-index": (["--window", "2"], {"window": 2}),
        "swinv2-coords": (["--window", "2", "3"], {"window": (2, 3)}),
        "levit-index": (["--resolution", "4"], {"resolution": 4}),
        "detr-sine": (["--size", "2", "3", "--embedding-dim", "8"],
                      {"size": (2, 3), "embedding_dim": 8}),
        "rt-detr-sincos": (["--size", "2", "2", "--embedding-dim", "8"],
                           {"size": (2, 2), "embedding_dim": 8}),
        "fairseq-sinusoidal": (["--dim", "8", "--positions", "4"], {"dim": 8, "positions": 4}),
        "layoutlm-bucket": (["--seq-len", "4"], {"seq_len": 4}),
        "udop-bucket": (["--seq-len", "4"], {"seq_len": 4}),
        "complex-order": (["--frequency", paths["freq"], "--positions", "3"],
                          {"frequency": arrays["freq"], "positions": 3}),
        "reformer-axial": (["--axial-shape", "2,2", "--weights", paths["w0"], paths["w1"]],
                           {"axial_shape": (2, 2), "weights": [arrays["w0"], arrays["w1"]]}),
        "cpmant-bucket": (["--seq-len", "4"], {"seq_len": 4}),
        "longt5-global": (["--seq-len", "8"], {"seq_len": 8}),
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fields")
    return tmp, baselines(*_arrays(tmp))


def run(args, tmp):
    out = str(tmp / "out.npy")
    if os.path.exists(out):
        os.remove(out)
    return subprocess.run([BIN, "table", *args, "-o", out, "--force"], capture_output=True,
                          text=True, timeout=60)


def with_option(args, option, value):
    """`args` with `option` set to `value` (replacing the baseline's value)."""
    if option in args:
        i = args.index(option)
        return [*args[:i + 1], str(value), *args[i + 2:]]
    return [*args, option, str(value)]


def python_name(f):
    """The keyword posenc.table takes: the field's name (t5_bucket's `causal` names the
    negation, as the command line's --causal does)."""
    return f["negation"][2:].replace("-", "_") if f["negation"] and f["positive"] else f["name"]


def function(kind):
    return getattr(posenc.table, kind.replace("-", "_"))


def ranged_cases():
    for f in FIELDS:
        if f["lo"] is not None:
            yield f, f["lo"] - 1
            if f["hi"] is not None:
                yield f, f["hi"] + 1


def test_every_kind_has_a_baseline_and_no_arith(base):
    tmp, b = base
    assert sorted(b) == KINDS
    for kind in KINDS:
        p = subprocess.run([BIN, "table", kind, "--help"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert "--arith" not in p.stdout, f"{kind}: add its rows to test_option_matrix.py"
        assert run([kind, *b[kind][0]], tmp).returncode == 0, kind


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_the_command_line_offers_the_option(f):
    p = subprocess.run([BIN, "table", f["kind"], "--help"], capture_output=True, text=True)
    options = set(re.findall(r"--[a-z0-9-]+", p.stdout))
    if f["positive"]:
        assert f["option"] in options
    if f["negation"]:
        assert f["negation"] in options
    for c in f["choices"]:
        # A choice shown by its value name (--style TEXT) names its values in its help,
        # where aliases (half for neox) may go unnamed.
        if not f["word"] or c in f["help"]:
            assert c in p.stdout, f"{f['option']}: choice {c} not in --help"
    if f["word"] and f["choices"]:
        assert any(c in f["help"] for c in f["choices"]), f"{f['option']}: no choice in --help"


@pytest.mark.parametrize("f", [f for f in FIELDS if f["lo"] is not None],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_the_bottom_of_a_range_is_accepted(f, base):
    tmp, b = base
    args, kw = b[f["kind"]]
    # The range lets the value through; a rule joining it to another parameter may still
    # refuse it (max_distance 1 of a T5 bucketing needs more than 4 buckets' exact range).
    p = run([f["kind"], *with_option(args, f["option"], f["lo"])], tmp)
    assert p.returncode == 0 or f"{f['option']}: must be" not in p.stderr, p.stderr
    try:
        function(f["kind"])(**{**kw, f["name"]: f["lo"]})
    except posenc.UsageError as e:
        assert not str(e).startswith(f"{f['name']}: must be"), e


@pytest.mark.parametrize("f,value", list(ranged_cases()),
                         ids=lambda x: f"{x['kind']}:{x['name']}" if isinstance(x, dict)
                         else str(x))
def test_out_of_range_is_refused_naming_the_option_or_keyword(f, value, base):
    tmp, b = base
    args, kw = b[f["kind"]]
    p = run([f["kind"], *with_option(args, f["option"], value)], tmp)
    assert p.returncode == 2, p.stderr
    assert f["option"] in p.stderr and "must be" in p.stderr, p.stderr
    assert not os.path.exists(tmp / "out.npy")
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: must be"):
        function(f["kind"])(**{**kw, f["name"]: value})


@pytest.mark.parametrize("f", [f for f in FIELDS if f["choices"]],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_name_outside_the_choices_is_refused(f, base):
    tmp, b = base
    args, kw = b[f["kind"]]
    p = run([f["kind"], *with_option(args, f["option"], "no-such-name")], tmp)
    assert p.returncode == 2, p.stderr
    assert f["option"] in p.stderr
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: expected "):
        function(f["kind"])(**{**kw, f["name"]: "no-such-name"})


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_python_takes_the_keyword_and_the_stub_names_it(f):
    name = python_name(f)
    assert name in inspect.signature(function(f["kind"])).parameters
    with open(os.path.join(SOURCE, "python", "posenc", "table.pyi")) as fh:
        stub = fh.read()
    m = re.search(rf"^def {f['kind'].replace('-', '_')}\(\*,(.*?)\) -> ", stub, re.S | re.M)
    assert m, f"table.pyi: no stub for {f['kind']}"
    assert re.search(rf"\b{name}:", m.group(1)), f"table.pyi: {f['kind']} lacks {name}"


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_the_man_page_synopsis_lists_the_option(f):
    with open(os.path.join(SOURCE, "man", "posenc-table.1")) as fh:
        page = fh.read()
    kind = f["kind"].replace("-", r"\-")
    m = re.search(rf"^\.B {re.escape(kind)} .*$", page, re.M)
    assert m, f"posenc-table.1: no synopsis line for {f['kind']}"
    options = ([f["option"]] if f["positive"] else []) + ([f["negation"]] if f["negation"] else [])
    for option in options:
        assert option.replace("-", r"\-") in m.group(0), f"{f['kind']}: {option} not in synopsis"


TENSORS = [f for f in FIELDS if f["type"] in ("array", "int array", "array list",
                                               "int array list")]


def without(args, option):
    """`args` without `option` and its values."""
    if option not in args:
        return args
    i = j = args.index(option)
    j += 1
    while j < len(args) and not args[j].startswith("--"):
        j += 1
    return args[:i] + args[j:]


def test_the_walk_covers_tensors_pairs_and_lists():
    """The tensors, pairs and lists are declared fields too, so every test above walks them
    (a kind binding one by hand in a front end would leave it out of this list)."""
    types = {f["type"] for f in FIELDS}
    assert {"array", "int array", "array list", "int list", "pair", "choice list"} <= types, types
    names = {(f["kind"], f["name"]) for f in TENSORS}
    for wanted in [("swin-index", "bias_table"), ("relative", "embeddings"),
                   ("detr-sine", "mask"), ("complex-order", "frequency"),
                   ("longt5-global", "attention_mask"), ("reformer-axial", "weights"),
                   ("udop-bucket", "bias_table"), ("swinv2-coords", "mlp"),
                   ("layoutlm-bucket", "bias_table"), ("cpmant-bucket", "segment_ids")]:
        assert wanted in names, wanted
    # The lists of tables (--emit) and the flag that gives a choice (--half-width).
    declared = {(f["kind"], f["name"]): f for f in FIELDS}
    for kind in ("rope2d", "funnel-factorized"):
        assert declared[(kind, "emit")]["type"] == "choice list", kind
    assert declared[("rope2d", "layout")]["flag"] == "--half-width"


@pytest.mark.parametrize("f", TENSORS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_tensor_is_a_file_on_the_command_line_and_an_array_in_python(f, base):
    tmp, b = base
    args, kw = b[f["kind"]]
    missing = str(tmp / "no-such-file.npy")
    p = run([f["kind"], *without(args, f["option"]), f["option"], missing], tmp)
    assert p.returncode in (2, 3), p.stderr
    assert "no-such-file.npy" in p.stderr or f["option"] in p.stderr, p.stderr
    assert not os.path.exists(tmp / "out.npy")
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: "):
        function(f["kind"])(**{**kw, f["name"]: object()})


@pytest.mark.parametrize("f", [f for f in FIELDS if f["type"] == "pair"],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_pair_takes_two_integers(f, base):
    tmp, b = base
    args, kw = b[f["kind"]]
    p = run([f["kind"], *without(args, f["option"]), f["option"], "2", "2", "2"], tmp)
    assert p.returncode == 2, p.stderr
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: "):
        function(f["kind"])(**{**kw, f["name"]: "ab"})


LISTS = [f for f in FIELDS if f["type"] == "choice list"]


@pytest.mark.parametrize("f", LISTS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_list_of_tables_writes_one_output_per_name(f, base):
    """--emit A,B writes A then B, each to its own output, the bytes of Python's
    emit=(A, B); a name twice is refused by both with the same words."""
    tmp, b = base
    args, kw = b[f["kind"]]
    first, second = f["choices"][-1], f["choices"][0]
    pattern = str(tmp / "t_{}.npy")
    p = subprocess.run([BIN, "table", f["kind"], *without(args, f["option"]), f["option"],
                        f"{first},{second}", "-o", pattern, "--force"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    arrays = function(f["kind"])(**{**kw, f["name"]: (first, second)})
    assert isinstance(arrays, tuple) and len(arrays) == 2
    for name, a in zip((first, second), arrays):
        got = np.load(pattern.format(name.replace("-", "_")))
        assert got.dtype == a.dtype and got.tobytes() == a.tobytes(), name
    p = run([f["kind"], *without(args, f["option"]), f["option"], f"{first},{first}"], tmp)
    assert p.returncode == 2 and f"{f['option']} {first},{first}: '{first}' is named twice" \
        in p.stderr, p.stderr
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']} .*'{first}' is named twice"):
        function(f["kind"])(**{**kw, f["name"]: (first, first)})


@pytest.mark.parametrize("f", [f for f in FIELDS if f["flag"]],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_flag_gives_its_choice(f, base):
    """--half-width writes what --layout half does (and wins over --layout full)."""
    tmp, b = base
    args, kw = b[f["kind"]]
    outs = []
    for extra in ([f["option"], f["flag_word"]], [f["flag"]], [f["option"], f["choices"][0],
                                                               f["flag"]]):
        p = run([f["kind"], *without(args, f["option"]), *extra], tmp)
        assert p.returncode == 0, p.stderr
        with open(tmp / "out.npy", "rb") as fh:
            outs.append(fh.read())
    assert outs[0] == outs[1] == outs[2]
    p = run([f["kind"], *without(args, f["option"])], tmp)
    with open(tmp / "out.npy", "rb") as fh:
        assert fh.read() != outs[0], "the flag changes nothing"


@pytest.mark.parametrize("f", [f for f in FIELDS if f["type"] == "array" and not f["bools"]],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_bool_tensor_is_refused_where_numbers_are_declared(f, base):
    """A declared float tensor takes numbers of any dtype but not bools, from a file as from
    an array (a pixel mask, declared `bools`, takes them)."""
    tmp, b = base
    args, kw = b[f["kind"]]
    path = str(tmp / "bools.npy")
    np.save(path, np.ones((2, 2), bool))
    p = run([f["kind"], *without(args, f["option"]), f["option"], path], tmp)
    assert p.returncode == 3 and f"{f['option']}: {path}: expected numbers, got bool" \
        in p.stderr, p.stderr
    with pytest.raises(posenc.InputError, match=rf"^{f['name']}: expected numbers, got bool"):
        function(f["kind"])(**{**kw, f["name"]: np.ones((2, 2), bool)})


def test_the_field_groups_are_named_and_an_unknown_group_is_refused():
    groups = ("table", "rope", "rope_ids", "attention", "relative", "attention_tensors", "ops")
    for g in groups:
        assert posenc._posenc._fields(g), g
    assert {f["kind"] for f in posenc._posenc._fields("rope_ids")} == {"rope_ids"}
    with pytest.raises(posenc.UsageError, match="group: unknown field group 'tables'; "
                       "expected table, rope, rope_ids, attention, relative, "
                       "attention_tensors or ops"):
        posenc._posenc._fields("tables")


# --- compare, its baseline verdict, combine and write (posenc._posenc._fields("ops")) ---

OPS = posenc._posenc._fields("ops")


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """Per kind: the command's words before an option, its man page, Python's call with
    extra keywords, and the module's call with an options dict (the package bypassed)."""
    tmp = tmp_path_factory.mktemp("ops")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    o, lse = np.ones((2, 3, 4), np.float32), np.zeros((2, 3), np.float32)
    files = {}
    for name, x in (("a", a), ("o", o), ("lse", lse)):
        files[name] = str(tmp / f"{name}.npy")
        np.save(files[name], x)
    out = str(tmp / "out.h5:/d")
    mod = posenc._posenc
    return tmp, {
        "compare": (["compare", files["a"], files["a"]], "posenc-compare",
                    lambda **kw: posenc.compare(a, a, **kw),
                    lambda d: mod.compare(a, "f32", a, "f32", d)),
        "baseline": (["compare", files["a"], files["a"], "--baseline", files["a"]],
                     "posenc-compare", lambda **kw: posenc.compare(a, a, baseline=a, **kw),
                     lambda d: mod.compare_baseline(a, "f32", a, "f32", a, "f32", d)),
        "combine": (["combine", files["o"], files["lse"], "-o", out, "--force"],
                    "posenc-combine", lambda **kw: posenc.combine(o, lse, **kw),
                    lambda d: mod.combine(o, "f32", lse, "f32", d)),
        "write": (["convert", files["a"], "-o", out, "--force"], "posenc",
                  lambda **kw: posenc.write(out, a, force=True, **kw),
                  lambda d: mod.write(out, a, "f32", {}, {"force": True, **d})),
    }


def run_ops(words, option, value):
    return subprocess.run([BIN, *words, option, str(value)], capture_output=True, text=True,
                          timeout=60)


def test_the_ops_walk_covers_every_kind():
    assert {f["kind"] for f in OPS} == {"compare", "baseline", "combine", "write"}
    names = {(f["kind"], f["name"]) for f in OPS}
    for wanted in [("compare", "rtol"), ("compare", "max_ulp"), ("compare", "equal_nan"),
                   ("baseline", "factor"), ("combine", "dtype"), ("write", "compression"),
                   ("write", "force"), ("write", "no_clobber"), ("write", "sync")]:
        assert wanted in names, wanted


@pytest.mark.parametrize("f", OPS, ids=lambda f: f"{f['kind']}:{f['name']}")
def test_an_ops_field_is_an_option_a_keyword_a_stub_and_in_the_man_page(f, ops):
    tmp, calls = ops
    words, page, _, _ = calls[f["kind"]]
    p = subprocess.run([BIN, words[0], "--help"], capture_output=True, text=True)
    assert re.search(rf"(^|[ ,]){re.escape(f['option'])}\b", p.stdout, re.M), f["option"]
    if f["short"]:
        assert f"{f['short']},{f['option']}" in p.stdout
    fn = "write" if f["kind"] == "write" else words[0]
    assert f["keyword"] in inspect.signature(getattr(posenc, fn)).parameters
    with open(os.path.join(SOURCE, "python", "posenc", "__init__.pyi")) as fh:
        stub = fh.read()
    m = re.search(rf"^def {fn}\((.*?)\) -> ", stub, re.S | re.M)
    assert m and re.search(rf"\b{f['keyword']}:", m.group(1)), f"__init__.pyi: {fn} {f['keyword']}"
    with open(os.path.join(SOURCE, "man", page + ".1")) as fh:
        text = fh.read().replace("\\-", "-")
    assert f["option"] in text, f"{page}.1 does not document {f['option']}"


def ops_ranged():
    for f in OPS:
        if f["lo"] is not None:
            yield f, f["lo"] - 1
            if f["hi"] is not None:
                yield f, f["hi"] + 1


@pytest.mark.parametrize("f", [f for f in OPS if f["lo"] is not None],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_the_bottom_of_an_ops_range_is_accepted(f, ops):
    tmp, calls = ops
    words, _, package, module = calls[f["kind"]]
    p = run_ops(words, f["option"], f["lo"])
    assert p.returncode in (0, 1), p.stderr
    package(**{f["keyword"]: f["lo"]})
    module({f["keyword"]: f["lo"]})


@pytest.mark.parametrize("f,value", list(ops_ranged()),
                         ids=lambda x: f"{x['kind']}:{x['name']}" if isinstance(x, dict)
                         else str(x))
def test_out_of_an_ops_range_is_one_message_from_every_front_end(f, value, ops):
    """The library's range message, after the option on the command line (exit 2, nothing
    written) and after the keyword from the package and from the module."""
    tmp, calls = ops
    words, _, package, module = calls[f["kind"]]
    if os.path.exists(tmp / "out.h5"):
        os.remove(tmp / "out.h5")
    with pytest.raises(posenc.UsageError) as e:
        package(**{f["keyword"]: value})
    why = str(e.value)[len(f["keyword"]) + 2:]
    assert str(e.value) == f"{f['keyword']}: {why}" and why.startswith("must be"), str(e.value)
    with pytest.raises(posenc.UsageError) as e:
        module({f["keyword"]: value})
    assert str(e.value) == f"{f['keyword']}: {why}"
    p = run_ops(words, f["option"], value)
    assert p.returncode == 2 and f"{f['option']}: {why}" in p.stderr, p.stderr
    assert not os.path.exists(tmp / "out.h5")


@pytest.mark.parametrize("option,keyword,value,why", [
    ("--compression", "compression", 10, "must be from 0 to 9, got 10"),
    ("--compression", "compression", -1, "must be from 0 to 9, got -1"),
    ("--max-ulp", "ulp", -1, "must be at least 0, got -1"),
    ("--rtol", "rtol", -1, "must be a finite number >= 0, got -1"),
    ("--factor", "factor", -0.5, "must be a finite number >= 0, got -0.5"),
])
def test_the_unified_messages(option, keyword, value, why, ops):
    """compression and ulp were worded apart by each front end ('compression: the HDF5
    gzip level is 0 to 9', '--compression: Value 10 not in range 0 to 9'; 'ulp -1: must be a
    whole number >= 0', '--max-ulp: '-1' is negative'); now the library words them."""
    tmp, calls = ops
    kind = {"compression": "write", "ulp": "compare", "rtol": "compare",
            "factor": "baseline"}[keyword]
    words, _, package, module = calls[kind]
    p = run_ops(words, option, value)
    assert p.returncode == 2 and f"{option}: {why}" in p.stderr, p.stderr
    for call in (lambda: package(**{keyword: value}), lambda: module({keyword: value})):
        with pytest.raises(posenc.UsageError, match=f"^{re.escape(f'{keyword}: {why}')}$"):
            call()


@pytest.mark.parametrize("f", [f for f in OPS if f["choices"]],
                         ids=lambda f: f"{f['kind']}:{f['name']}")
def test_a_name_outside_an_ops_choice_is_refused(f, ops):
    tmp, calls = ops
    words, _, package, module = calls[f["kind"]]
    p = run_ops(words, f["option"], "no-such-name")
    assert p.returncode == 2 and f["option"] in p.stderr, p.stderr
    with pytest.raises(posenc.UsageError, match=rf"^{f['keyword']}: expected "):
        module({f["keyword"]: "no-such-name"})
