"""Every declared field of `posenc rope-ids` (include/posenc/encodings/rope_ids_fields.hpp,
listed by posenc._posenc._fields("rope_ids"): the family, the media token ids and the timing
numbers) is offered everywhere it must be: the command has its option in `--help`; a value
below the field's range (the library's, resolve_rope_ids_rules) is refused by the command
with exit status 2 naming the option and by posenc.rope_ids with UsageError naming the
keyword, in the same words; posenc.rope_ids takes the keyword and its stub names it;
man/posenc-rope-ids.1 documents the option. `rope-ids` has no --arith: no option x mode
matrix rows."""
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
FIELDS = posenc._posenc._fields("rope_ids")
IDS = [f["name"] for f in FIELDS]

# The family that reads each number (the token ids: the families whose prompts have them).
FAMILY = {"audio_token_id": "qwen2.5-omni", "video_start_token_id": "glm4v",
          "video_end_token_id": "glm4v", "tokens_per_second": "qwen2.5-vl",
          "position_id_per_seconds": "qwen2.5-omni", "seconds_per_chunk": "qwen2.5-omni"}


def read(path):
    with open(os.path.join(SOURCE, path)) as fh:
        return fh.read()


def test_the_listing_holds_the_request():
    assert IDS == ["family", "image_token_id", "video_token_id", "audio_token_id",
                   "video_start_token_id", "video_end_token_id", "spatial_merge_size",
                   "tokens_per_second", "position_id_per_seconds", "seconds_per_chunk"]
    for f in FIELDS:
        assert f["option"] == "--" + f["name"].replace("_", "-")


def test_the_command_line_offers_the_option():
    p = subprocess.run([BIN, "rope-ids", "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    offered = set(re.findall(r"--[a-z0-9-]+", p.stdout))
    for f in FIELDS:
        assert f["option"] in offered, f["option"]


@pytest.mark.parametrize("f", [f for f in FIELDS if f["type"] in ("int", "float")],
                         ids=[f["name"] for f in FIELDS if f["type"] in ("int", "float")])
def test_a_value_below_the_range_is_refused_by_both_alike(f, tmp_path):
    family = FAMILY.get(f["name"], "qwen2-vl")
    ids = np.array([1, 2, 3])
    np.save(tmp_path / "ids.npy", ids)
    value = 0 if f["name"] == "spatial_merge_size" else -1
    out = tmp_path / "o.npy"
    p = subprocess.run([BIN, "rope-ids", "--family", family, "--input-ids",
                        str(tmp_path / "ids.npy"), f["option"], str(value), "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"posenc: error: {f['option']}: must "), p.stderr
    assert not out.exists()
    with pytest.raises(posenc.UsageError) as e:
        posenc.rope_ids(family, input_ids=ids, **{f["name"]: value})
    said = p.stderr.strip()[len("posenc: error: "):]
    assert str(e.value) == f["name"] + said[len(f["option"]):]


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_python_takes_the_keyword_and_the_stub_names_it(f):
    assert f["name"] in inspect.signature(posenc.rope_ids).parameters
    m = re.search(r"^def rope_ids\((.*?)\) -> ", read("python/posenc/__init__.pyi"), re.S | re.M)
    assert m, "no stub for rope_ids"
    assert re.search(rf"\b{f['name']}:", m.group(1)), f["name"]


@pytest.mark.parametrize("f", FIELDS, ids=IDS)
def test_the_man_page_documents_the_option(f):
    escaped = re.escape(f["option"].replace("-", r"\-"))
    assert re.search(rf"^\.B[IR]? .*{escaped}\b(?!\\-)", read("man/posenc-rope-ids.1"), re.M), \
        f["option"]
