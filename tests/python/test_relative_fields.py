"""Every declared parameter of the Transformer-XL / XLNet / Funnel and DeBERTa terms
(include/posenc/ops/attention_relative_fields.hpp, listed by posenc._posenc._fields("relative"))
is offered everywhere it must be: `posenc attention --help` lists its option in RELATIVE
ATTENTION, posenc.attention takes the keyword and the stub names it, man/posenc-attention.1
documents the option and the option x mode matrix has its row; and the rules between them
(check_relative_given, one function for both front ends) refuse a parameter given without
its terms with the same message from both, spelled as the option or as the keyword."""
import inspect
import os
import re
import subprocess

import numpy as np
import pytest

import posenc

BIN = os.environ.get("POSENC_BIN", "posenc")
SOURCE = os.environ.get("POSENC_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
FIELDS = posenc._posenc._fields("relative")
IDS = [f["name"] for f in FIELDS]
# The parameters that ask for the terms; every other one needs one of them.
TERMS = ("rel_keys", "factorized", "pos_key", "pos_query")


def read(path):
    with open(os.path.join(SOURCE, path)) as fh:
        return fh.read()


def test_the_listing_holds_the_relative_parameters_in_help_order():
    assert IDS == ["rel_keys", "content_bias", "position_bias", "segment_ids", "segment_embed",
                   "segment_bias", "segment_index", "rel_shift", "rel_kernel", "factorized",
                   "separate_cls", "pos_key", "pos_query", "pos_att_type", "position_buckets",
                   "max_relative_positions"]
    help_text = subprocess.run([BIN, "attention", "--help"], capture_output=True, text=True,
                               check=True).stdout
    group = help_text[help_text.index("RELATIVE ATTENTION:"):]
    at = [group.index(f["option"] + " ") for f in FIELDS]
    assert at == sorted(at)
    fact = next(f for f in FIELDS if f["name"] == "factorized")
    assert fact["type"] == "tensors" and fact["choices"] == ["phi", "pi", "psi", "omega"]
    assert "--factorized PHI PI PSI OMEGA" in group


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_python_takes_the_keyword_and_the_man_page_and_matrix_name_it(f):
    assert f["name"] in inspect.signature(posenc.attention).parameters
    stubs = re.findall(r"^def attention\((.*?)\) -> ", read("python/posenc/__init__.pyi"),
                       re.S | re.M)
    assert any(re.search(rf"\b{f['name']}:", s) for s in stubs), f["name"]
    escaped = re.escape(f["option"].replace("-", r"\-"))
    assert re.search(rf"^\.B[IR]? .*{escaped}\b(?!\\-)", read("man/posenc-attention.1"), re.M)
    assert re.search(rf'"{re.escape(f["option"])}": [(\"]',
                     read("tests/cli/test_option_matrix.py")), f["option"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("relative_fields")
    q = np.random.default_rng(3).standard_normal((1, 2, 4, 4))
    np.save(tmp / "q.npy", q)
    return tmp, q


VALUES = {"tensor": ("{q}", "q"), "tensors": (["{q}"] * 4, ("q",) * 4), "bool": ([], True),
          "int": (["2"], 2), "?": (["c2p"], "c2p")}


@pytest.mark.parametrize("f", [f for f in FIELDS if f["name"] not in TERMS],
                         ids=[f["name"] for f in FIELDS if f["name"] not in TERMS])
def test_a_parameter_without_its_terms_is_refused_alike(f, inputs):
    tmp, q = inputs
    words, value = VALUES[f["type"]]
    words = [words] if isinstance(words, str) else words
    words = [w.format(q=tmp / "q.npy") for w in words]
    out = tmp / "o.npy"
    p = subprocess.run([BIN, "attention", "-q", str(tmp / "q.npy"), "-k", str(tmp / "q.npy"),
                        f["option"], *words, "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 2 and not out.exists(), p.stderr
    terms = ("rel_keys", "factorized") if f["name"] in IDS[:IDS.index("pos_key")] else (
        "pos_key", "pos_query")
    kind = "a Transformer-XL / XLNet / Funnel option" if terms[0] == "rel_keys" else \
        "a DeBERTa option"
    said = f"{f['name']}: {kind} needs {terms[0]} or {terms[1]}"
    as_options = re.sub(r"\b[a-z][a-z_]*[a-z]\b",
                        lambda m: "--" + m[0].replace("_", "-") if m[0] in IDS else m[0], said)
    assert p.stderr.strip() == f"posenc: error: {as_options}"
    value = (q if value == "q" else tuple(q for _ in value) if isinstance(value, tuple)
             else value)
    with pytest.raises(posenc.UsageError) as e:
        posenc.attention(q, q, **{f["name"]: value})
    assert str(e.value) == said


def test_the_other_rules_say_one_message_on_both_front_ends(inputs):
    tmp, q = inputs
    path = str(tmp / "q.npy")
    for words, kw, said in [
        (["--factorized", *[path] * 4, "--rel-keys", path], dict(factorized=(q,) * 4, rel_keys=q),
         "factorized: replaces rel_keys (give one)"),
        (["--factorized", *[path] * 4], dict(factorized=(q,) * 4),
         "factorized: needs rel_kernel (W, which projects the tables)"),
        (["--rel-keys", path, "--pos-key", path], dict(rel_keys=q, pos_key=q),
         "rel_keys: Transformer-XL / XLNet / Funnel and DeBERTa terms exclude each other"),
        (["--pos-key", path, "--pos-att-type", "c2p,p2c"],
         dict(pos_key=q, pos_att_type=("c2p", "p2c")), "pos_att_type p2c: needs pos_query"),
        (["--rel-keys", path, "--rel-shift", "0"], dict(rel_keys=q, rel_shift=0),
         "rel_shift 0: must be from 1 to 2^30"),
        (["--rel-keys", path, "--rope"], dict(rel_keys=q, rope=True),
         "rel_keys: cannot be combined with rope"),
    ]:
        p = subprocess.run([BIN, "attention", "-q", path, "-k", path, *words, "-o",
                            str(tmp / "o.npy")], capture_output=True, text=True)
        as_options = re.sub(r"\b[a-z][a-z_]*[a-z]\b", lambda m: "--" + m[0].replace("_", "-")
                            if m[0] in IDS or m[0] == "rope" else m[0], said)
        assert (p.returncode, p.stderr.strip()) == (2, f"posenc: error: {as_options}")
        with pytest.raises(posenc.UsageError) as e:
            posenc.attention(q, q, **kw)
        assert str(e.value) == said
