"""Every declared RoPE field (include/posenc/encodings/rope_fields.hpp, listed by
posenc._posenc._fields("rope"): kind "rope" the RopeParams scaling parameters, "positions"
the first position and the tensors of positions, "coords" the generated grid's scalars,
"apply" the ways of applying:
the inverse and the precision, and `posenc rope`'s own; "hf" the HF config and its layers)
is offered everywhere it must be:
`posenc rope` (and, but for the grid's and `posenc rope`'s own ways of applying,
`posenc table rope` and `posenc attention`)
has its option in `--help`; a value at the bottom of its range passes the range check, one
below it or above the top is refused with exit status 2 naming the option; posenc.rope
takes the keyword (the same values refused with UsageError naming the keyword); the stubs
name it; man/posenc-rope.1 documents the option; the option x mode matrix
(tests/cli/test_option_matrix.py) has its row."""
import inspect
import os
import re
import subprocess

import numpy as np
import pytest

import hf_config_choice_cases
import posenc
import posenc.table

BIN = os.environ.get("POSENC_BIN", "posenc")
SOURCE = os.environ.get("POSENC_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
FIELDS = posenc._posenc._fields("rope")
IDS = [f"{f['kind']}:{f['name']}" for f in FIELDS]

# A valid call of `posenc rope` on x [4, 8] (axes sd) per kind: words and keywords.
BASELINES = {
    "rope": ([], {}),
    "positions": ([], {}),
    "coords": (["--coords", "grid:2,2", "--layout", "axial"],
               {"coords": "grid:2,2", "layout": "axial"}),
    "apply": ([], {}),
    "hf": ([], {}),
    "arith": ([], {}),
}


# The ways of applying that every RoPE command takes (the others are `posenc rope`'s).
EVERY_COMMAND = ("inverse", "precision")
# The tensors of positions only `posenc rope` takes (fields::rope_only_positions).
ROPE_ONLY_POSITIONS = ("angles", "cos", "sin", "seqlen_offsets")


def rope_only(f):
    return f["kind"] == "coords" or (f["kind"] == "apply" and f["name"] not in EVERY_COMMAND) \
        or (f["kind"] == "positions" and f["name"] in ROPE_ONLY_POSITIONS)


def options(f):
    return ([f["option"]] if f["positive"] else []) + ([f["negation"]] if f["negation"] else [])


def commands(f):
    """The commands that offer the field's options (`table rope` refuses --rotary-last and
    --rope-interleave with a message)."""
    if rope_only(f):
        return [["rope"]]
    return [["rope"], ["table", "rope"], ["attention"]]


def read(path):
    with open(os.path.join(SOURCE, path)) as fh:
        return fh.read()


@pytest.fixture(scope="module")
def x(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rope_fields")
    a = np.linspace(-1.0, 1.0, 32).reshape(4, 8)
    np.save(tmp / "x.npy", a)
    return tmp, a


def run(tmp, args):
    out = tmp / "out.npy"
    if out.exists():
        out.unlink()
    p = subprocess.run([BIN, "rope", str(tmp / "x.npy"), "--axes", "sd", *args, "-o", str(out),
                        "--force"], capture_output=True, text=True, timeout=60)
    return p, out.exists()


def test_the_listing_holds_the_rope_options():
    names = {f["name"] for f in FIELDS}
    assert {"base", "scaling", "factor", "original_max_pos", "truncate", "start",
            "prefix_tokens", "merge_window", "inverse", "precision", "rope2d", "rope2d_ids",
            "order", "mrope_interleaved", "torch_ops", "position_ids", "cu_seqlens", "angles",
            "seqlen_offsets"} <= names
    for f in FIELDS:
        assert f["name"] == f["option"][2:].replace("-", "_")


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_command_line_offers_the_option(f):
    for command in commands(f):
        p = subprocess.run([BIN, *command, "--help"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        offered = set(re.findall(r"--[a-z0-9-]+", p.stdout))
        for option in options(f):
            assert option in offered, f"{' '.join(command)}: {option} not in --help"
        for c in f["choices"]:
            assert c in p.stdout, f"{f['option']}: choice {c} not in --help"


@pytest.mark.parametrize("f", [f for f in FIELDS if f["lo"] is not None],
                         ids=[i for f, i in zip(FIELDS, IDS) if f["lo"] is not None])
def test_the_range_is_the_declared_one_on_both_front_ends(f, x):
    tmp, a = x
    args, kw = BASELINES[f["kind"]]
    p, _ = run(tmp, [*args, f["option"], str(f["lo"])])
    assert f"{f['option']}: must be" not in p.stderr, p.stderr
    try:
        posenc.rope(a, axes="sd", **kw, **{f["name"]: f["lo"]})
    except posenc.UsageError as e:
        assert not str(e).startswith(f"{f['name']}: must be"), e
    bad = [f["lo"] - 1] + ([f["hi"] + 1] if f["hi"] is not None else [])
    for value in bad:
        p, written = run(tmp, [*args, f["option"], str(value)])
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"posenc: error: {f['option']}: must be"), p.stderr
        assert not written
        with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: must be"):
            posenc.rope(a, axes="sd", **kw, **{f["name"]: value})


@pytest.mark.parametrize("f", [f for f in FIELDS if f["choices"]],
                         ids=[i for f, i in zip(FIELDS, IDS) if f["choices"]])
def test_a_name_outside_the_choices_is_refused(f, x):
    tmp, a = x
    if f["name"] != "style":  # --style also takes `posenc rope`'s tiled: bound by hand
        p, written = run(tmp, [f["option"], "no-such-name"])
        assert p.returncode == 2 and f["option"] in p.stderr and not written, p.stderr
    with pytest.raises(posenc.UsageError, match=rf"^{f['name']}: expected "):
        posenc.rope(a, axes="sd", **{f["name"]: "no-such-name"})
    for c in f["choices"]:  # every name is taken by both (a scaling then needs its factor)
        p, _ = run(tmp, [f["option"], c])
        assert p.returncode == 0 or f"{f['option']}: " not in p.stderr, p.stderr
        try:
            posenc.rope(a, axes="sd", **{f["name"]: c})
        except (posenc.UsageError, posenc.InputError) as e:  # ggml: no f64 x
            assert not str(e).startswith(f"{f['name']}: expected"), e


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_python_takes_the_keyword_and_the_stubs_name_it(f):
    functions = [(posenc.rope, "python/posenc/__init__.pyi")]
    # A table does not depend on where the rotation sits in a head: table rope refuses these.
    if not rope_only(f) and f["name"] not in ("rotary_last", "rope_interleave"):
        functions.append((posenc.table.rope, "python/posenc/table.pyi"))
    for fn, stub in functions:
        assert f["name"] in inspect.signature(fn).parameters, fn
        m = re.search(r"^def rope\((.*?)\) -> ", read(stub), re.S | re.M)
        assert m, f"{stub}: no stub for rope"
        assert re.search(rf"\b{f['name']}:", m.group(1)), f"{stub}: rope lacks {f['name']}"


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_man_page_documents_the_option(f):
    page = read("man/posenc-rope.1")
    for option in options(f):
        escaped = re.escape(option.replace("-", r"\-"))
        assert re.search(rf"^\.B[IR]? .*{escaped}\b(?!\\-)", page, re.M), \
            f"posenc-rope.1: {option}"


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_option_matrix_has_its_row(f):
    """A row (base, with), or the reason why the option changes no numbers (NOT_NUMBERS)."""
    matrix = read("tests/cli/test_option_matrix.py")
    for option in options(f):
        assert re.search(rf'^\s*"{re.escape(option)}": \(', matrix, re.M) or \
            re.search(rf'(^\s*|, )"{re.escape(option)}": "', matrix, re.M), option


# The rules between the ways of applying (check_given of RopeApplyOptions): one message,
# each front end naming the fields as it spells them.
RULES = [
    (["--rope2d", "0", "2"], {"rope2d": (0, 2)},
     "{rope2d}: height and width must be positive, got 0 2"),
    (["--mrope-interleaved"], {"mrope_interleaved": True},
     "{mrope_interleaved}: needs {mrope_section}"),
    (["--rope2d-ids", "--rope2d", "2", "2"], {"rope2d_ids": True, "rope2d": (2, 2)},
     "{rope2d_ids}: cannot be combined with {rope2d}"),
    (["--rope2d-ids", "--order", "yx"], {"rope2d_ids": True, "order": "yx"},
     "{order}: the rows of {position_ids} give the order with {rope2d_ids}"),
    (["--torch-ops"], {"torch_ops": True}, "{torch_ops}: needs {cos} and {sin}"),
    (["--merge-window", "2"], {"merge_window": 2}, "{merge_window}: applies to {coords} only"),
    (["--position-ids", "ids.npy", "--cu-seqlens", "cu.npy"],
     {"position_ids": np.arange(4), "cu_seqlens": np.array([0, 4])},
     "{position_ids}: cannot be combined with {cu_seqlens}"),
    # Real coordinates are position ids too (Values::or_reals); Python's went apart.
    (["--position-ids", "coords.npy", "--cu-seqlens", "cu.npy"],
     {"position_ids": np.arange(4.0), "cu_seqlens": np.array([0, 4])},
     "{position_ids}: cannot be combined with {cu_seqlens}"),
    (["--inv-freq", "f.npy", "--layout", "axial"], {"inv_freq": np.ones((1, 4)), "layout": "axial"},
     "{inv_freq}: gives the layout itself; not with {layout}"),
    # The HF config's companions (check_hf_config_given), before the file is read.
    *hf_config_choice_cases.CASES,
    (["--cos", "cos.npy", "--sin", "sin.npy", "--base", "500"],
     {"cos": np.ones((4, 4)), "sin": np.zeros((4, 4)), "base": 500.0},
     "{cos}: the tables replace the frequencies; not with {base}"),
    (["--cos", "cos.npy", "--sin", "sin.npy", "--rope2d-ids"],
     {"cos": np.ones((4, 4)), "sin": np.zeros((4, 4)), "rope2d_ids": True},
     "{cos}: the tables replace the frequencies; not with {rope2d_ids}"),
    # The arithmetic (check_given of ArithChoice, check_tables_arith): the command and the
    # package said them apart ('precision "f32"' in Python).
    (["--arith", "hf", "--precision", "f32"], {"arith": "hf", "precision": "f32"},
     "{precision}: applies to {arith} exact only ({arith} hf has its framework's own "
     "arithmetic)"),
    (["--cos", "cos.npy", "--sin", "sin.npy", "--arith", "meta"],
     {"cos": np.ones((4, 4)), "sin": np.zeros((4, 4)), "arith": "meta"},
     "{arith} meta: cos/sin tables are applied exactly only ({precision} f32 rotates in "
     "float32)"),
]


@pytest.mark.parametrize("args, kw, message", RULES, ids=[r[2].split("}")[0][1:] + str(i)
                                                         for i, r in enumerate(RULES)])
def test_a_rule_between_fields_says_one_message_on_both_front_ends(args, kw, message, x):
    tmp, a = x
    names = ("rope2d", "rope2d_ids", "order", "mrope_interleaved", "mrope_section",
             "position_ids", "torch_ops", "cos", "sin", "merge_window", "coords", "cu_seqlens",
             "base", "inv_freq", "layout", "layer", "hf_config", "hf_version", "arith",
             "precision")
    p, written = run(tmp, args)
    option = message.format(**{n: "--" + n.replace("_", "-") for n in names})
    assert p.returncode == 2 and p.stderr == f"posenc: error: {option}\n" and not written, \
        p.stderr
    with pytest.raises(posenc.UsageError, match="^" + re.escape(message.format(
            **{n: n for n in names})) + "$"):
        posenc.rope(a, axes="sd", **kw)


# Fields given as one text on the command line and as a text or a Python value in Python
# (a number or a word, counts, a list of numbers): each value is taken by both front ends
# with the same result, or refused by both with one message naming the option or keyword.
LAYOUT = (["--coords", "grid:2,2", "--layout", "axial"], {"coords": "grid:2,2", "layout": "axial"})
LONGROPE = (["--scaling", "longrope", "--factor", "2", "--original-max-pos", "4",
             "--long-factor", "2,2,2,2"],
            {"scaling": "longrope", "factor": 2.0, "original_max_pos": 4,
             "long_factor": [2, 2, 2, 2]})
TEXTS = [
    (LAYOUT, "freq_scale", "2pi", "2pi", None),
    (LAYOUT, "freq_scale", "tau", 2 * np.pi, None),
    (LAYOUT, "freq_scale", "3", 3, None),
    (LAYOUT, "freq_scale", "1.5e-1", "1.5e-1", None),
    (LAYOUT, "freq_scale", "-1", -1, "expected a positive number or 2pi, got '-1'"),
    (LAYOUT, "freq_scale", "0", 0.0, "expected a positive number or 2pi, got '0'"),
    (LAYOUT, "freq_scale", "nan", float("nan"), "expected a positive number or 2pi, got 'nan'"),
    (LAYOUT, "freq_scale", "x", "x", "expected a positive number or 2pi, got 'x'"),
    (([], {}), "mrope_section", "1,1,2", (1, 1, 2), None),
    (([], {}), "mrope_section", " 1, 1,2", np.array([1, 1, 2]), None),
    (([], {}), "mrope_section", "1,2", [1, 2],
     "expected three counts t,h,w such as 16,24,24, got '1,2'"),
    (([], {}), "mrope_section", "-1,1,4", (-1, 1, 4),
     "expected three counts t,h,w such as 16,24,24, got '-1,1,4'"),
    (([], {}), "mrope_section", "a,b,c", "a,b,c",
     "expected three counts t,h,w such as 16,24,24, got 'a,b,c'"),
    (LONGROPE, "short_factor", "1,1.5,1,1", [1, 1.5, 1, 1], None),
    (LONGROPE, "short_factor", "1, 2,1,1", "1, 2,1,1", None),
    (LONGROPE, "short_factor", "1e400,1", "1e400,1", "'1e400' is not a finite number"),
    (LONGROPE, "short_factor", "x,1", "x,1",
     "'x,1' is neither a comma-separated list of numbers nor a tensor reference"),
]


@pytest.mark.parametrize("base, name, text, value, message", TEXTS,
                         ids=[f"{t[1]}={t[2]}" for t in TEXTS])
def test_a_text_field_is_read_alike_by_both_front_ends(base, name, text, value, message, x):
    tmp, a = x
    (args, kw), option = base, "--" + name.replace("_", "-")
    p, written = run(tmp, [*args, option, text])
    if message is None:
        assert p.returncode == 0, p.stderr
        got = posenc.rope(a, axes="sd", **kw, **{name: value})
        np.testing.assert_array_equal(got, np.load(tmp / "out.npy"))
        return
    assert p.returncode == 2 and p.stderr == f"posenc: error: {option}: {message}\n", p.stderr
    assert not written
    with pytest.raises(posenc.UsageError, match="^" + re.escape(f"{name}: {message}") + "$"):
        posenc.rope(a, axes="sd", **kw, **{name: value})


@pytest.mark.parametrize("matrix, message", [
    (np.ones((9, 4)), "expected shape [axes, R/2] with 1 to 8 axes, got (9, 4)"),
    (np.ones(4), "expected shape [axes, R/2] with 1 to 8 axes, got (4,)"),
    (np.array([[1.0, np.inf, 1.0, 1.0]]), "value at flat index 1 is not finite"),
], ids=["nine-axes", "one-d", "inf"])
def test_a_frequency_matrix_is_checked_alike_by_both_front_ends(matrix, message, x):
    tmp, a = x
    np.save(tmp / "f.npy", matrix)
    p, written = run(tmp, ["--inv-freq", str(tmp / "f.npy")])
    assert p.returncode == 3 and p.stderr == f"posenc: error: --inv-freq: {message}\n", p.stderr
    assert not written
    with pytest.raises(posenc.InputError, match="^" + re.escape(f"inv_freq: {message}") + "$"):
        posenc.rope(a, axes="sd", inv_freq=matrix)


def test_tables_of_two_dtypes_are_refused_alike(x):
    """check_positions: the sin table has the cos table's dtype, said naming each front
    end's source (the package took sin's values whatever its dtype)."""
    tmp, a = x
    cos, sin = np.ones((4, 4), np.float32), np.zeros((4, 4), np.float16)
    np.save(tmp / "cos32.npy", cos)
    np.save(tmp / "sin16.npy", sin)
    p, written = run(tmp, ["--cos", str(tmp / "cos32.npy"), "--sin", str(tmp / "sin16.npy")])
    assert p.returncode == 3 and not written, p.stderr
    assert p.stderr == (f"posenc: error: --sin: {tmp / 'sin16.npy'}: dtype f16 differs from "
                        "--cos's f32\n"), p.stderr
    with pytest.raises(posenc.InputError, match=r"^sin: dtype f16 differs from cos's f32$"):
        posenc.rope(a, axes="sd", cos=cos, sin=sin)
