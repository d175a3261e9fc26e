"""Errors come out as posenc.Error subclasses, one per exit status of the command, with
the command's messages (option names as keyword names)."""
import os
import re
import subprocess

import numpy as np
import pytest

import posenc


def cli_message(*args):
    """The command's one-line error for `args`, its option names as Python keywords."""
    binary = os.environ.get("POSENC_BIN")
    if not binary:
        pytest.skip("POSENC_BIN is not set")
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("posenc: error: ")
    msg = line[len("posenc: error: "):]
    return r.returncode, re.sub(r"--([a-z][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_"), msg)


def test_hierarchy_and_status():
    for cls, status in ((posenc.UsageError, 2), (posenc.InputError, 3),
                        (posenc.OutputError, 4), (posenc.DifferError, 1)):
        assert issubclass(cls, posenc.Error) and issubclass(cls, Exception)
        assert cls.status == status


@pytest.mark.parametrize("args,call", [
    (["table", "rope", "--dim", "8", "--positions", "4", "--scaling", "yarn"],
     lambda: posenc.table.rope(dim=8, positions=4, scaling="yarn")),
    (["table", "alibi", "--heads", "0"], lambda: posenc.table.alibi(heads=0)),
    (["table", "rope", "--dim", "8", "--positions", "4", "--style", "diagonal"],
     lambda: posenc.table.rope(dim=8, positions=4, style="diagonal")),
    (["table", "sinusoidal", "--dim", "7", "--positions", "4"],
     lambda: posenc.table.sinusoidal(dim=7, positions=4)),
    # the table kinds after deberta-bucket, and rope-ids
    (["table", "swin-index", "--window", "0", "3"],
     lambda: posenc.table.swin_index(window=(0, 3))),
    (["table", "beit-index", "--window", "300"], lambda: posenc.table.beit_index(window=300)),
    (["table", "swinv2-coords", "--window", "3", "--pretrained-window", "1"],
     lambda: posenc.table.swinv2_coords(window=3, pretrained_window=1)),
    (["table", "levit-index", "--resolution", "0"], lambda: posenc.table.levit_index(resolution=0)),
    (["table", "detr-sine", "--embedding-dim", "8"],
     lambda: posenc.table.detr_sine(embedding_dim=8)),
    (["table", "detr-sine", "--size", "2", "3", "--embedding-dim", "7"],
     lambda: posenc.table.detr_sine(size=(2, 3), embedding_dim=7)),
    (["table", "detr-sine", "--size", "2", "3", "--embedding-dim", "8", "--no-normalize",
      "--scale", "2"],
     lambda: posenc.table.detr_sine(size=(2, 3), embedding_dim=8, normalize=False, scale=2.0)),
    (["table", "fairseq-sinusoidal", "--positions", "4", "--dim", "2"],
     lambda: posenc.table.fairseq_sinusoidal(positions=4, dim=2)),
    (["table", "layoutlm-bucket", "--axis", "x", "--seq-len", "4"],
     lambda: posenc.table.layoutlm_bucket(axis="x", seq_len=4)),
    (["table", "funnel-relative", "--seq-len", "8", "--dim", "8", "--shift", "2"],
     lambda: posenc.table.funnel_relative(seq_len=8, dim=8, shift=2)),
    (["table", "funnel-relative", "--seq-len", "8", "--dim", "8", "--block", "3",
      "--separate-cls"],
     lambda: posenc.table.funnel_relative(seq_len=8, dim=8, block=3, separate_cls=True)),
    (["table", "funnel-factorized", "--seq-len", "8", "--dim", "8", "--key-block", "63",
      "--emit", "psi"],
     lambda: posenc.table.funnel_factorized(seq_len=8, dim=8, key_block=63, emit="psi")),
    (["rope-ids", "--layout", "text:3"], lambda: posenc.rope_ids(layout="text:3")),
    (["rope-ids", "--family", "qwen2-vl"], lambda: posenc.rope_ids("qwen2-vl")),
    (["rope-ids", "--family", "qwen9", "--layout", "text:3"],
     lambda: posenc.rope_ids("qwen9", "text:3")),
    (["rope-ids", "--family", "qwen2-vl", "--layout", "text:3,image:1x3x4"],
     lambda: posenc.rope_ids("qwen2-vl", "text:3,image:1x3x4")),
    (["rope-ids", "--family", "qwen2-vl", "--layout", "text:3", "--tokens-per-second", "2"],
     lambda: posenc.rope_ids("qwen2-vl", "text:3", tokens_per_second=2.0)),
    (["rope-ids", "--family", "qwen2-vl", "--layout", "text:3", "--image-token-id", "5"],
     lambda: posenc.rope_ids("qwen2-vl", "text:3", image_token_id=5)),
])
def test_same_message_and_type_as_the_command(tmp_path, args, call):
    status, msg = cli_message(*args, "-o", str(tmp_path / "out.npy"))
    with pytest.raises(posenc.Error) as e:
        call()
    assert e.value.status == status
    assert str(e.value) == msg


def test_usage_errors():
    x = np.zeros((4, 8))
    with pytest.raises(posenc.UsageError, match="axes"):
        posenc.rope(x, axes="bq")
    with pytest.raises(posenc.UsageError, match="precision: applies to arith exact only"):
        posenc.rope(x, arith="hf", precision="f32")
    with pytest.raises(posenc.UsageError, match="hf_version: needs hf_config"):
        posenc.rope(x, hf_version="4.51")
    with pytest.raises(posenc.UsageError, match="a ROPE OPTION needs rope=True"):
        posenc.attention(x, x, x, base=10.0)
    with pytest.raises(posenc.UsageError, match="out: overlaps x"):
        posenc.rope(x, out=x[:, ::-1])
    with pytest.raises(posenc.UsageError):
        posenc.rope(np.zeros((4, 8), complex))
    q, r, w = np.zeros((1, 2, 3, 8)), np.zeros((7, 6)), np.zeros((6, 2, 8))
    with pytest.raises(posenc.UsageError, match="rel_shift 0: must be from 1 to 2"):
        posenc.attention(q, q, rel_keys=r, rel_kernel=w, rel_shift=0)
    with pytest.raises(posenc.UsageError, match="factorized: needs rel_kernel"):
        posenc.attention(q, q, factorized=(r, r, r, r))
    with pytest.raises(posenc.UsageError, match="separate_cls: .*needs rel_keys or factorized"):
        posenc.attention(q, q, separate_cls=True)
    with pytest.raises(posenc.InputError, match="segment_index: values must be 0 or 1"):
        posenc.attention(q, q, rel_keys=r, rel_kernel=w, segment_index=np.full((3, 3), 2),
                         segment_embed=np.zeros((2, 2, 8)))


def test_input_errors():
    x = np.zeros((4, 8))
    x[1, 2] = np.nan
    with pytest.raises(posenc.InputError):
        posenc.rope(x)
    assert np.isnan(posenc.rope(x, allow_nonfinite=True)[1]).any()
    with pytest.raises(posenc.InputError, match="odd"):
        posenc.rope(np.zeros((4, 7)))
    q = np.zeros((1, 2, 3, 8))
    with pytest.raises(posenc.InputError):
        posenc.attention(q, np.zeros((1, 2, 3, 4)), emit="probs")
    with pytest.raises(posenc.InputError, match="would need .* bytes > max_memory 10 bytes"):
        posenc.attention(q, np.zeros((1, 2, 4, 8)), emit="probs", max_memory=10)
    with pytest.raises(posenc.InputError):
        posenc.read("/nonexistent/x.npy")


def test_output_error(tmp_path):
    with pytest.raises(posenc.OutputError):
        posenc.write(tmp_path / "no" / "such" / "dir.npy", np.zeros(3))


def test_table_array_errors(tmp_path):
    # messages naming the keyword where the command names its file
    with pytest.raises(posenc.InputError, match="bias_table: expected numbers, got bool"):
        posenc.table.swin_index(window=2, bias_table=np.ones((9, 2), bool))
    with pytest.raises(posenc.InputError, match="input_ids: expected an integer dtype"):
        posenc.table.fairseq_sinusoidal(dim=8, padding_idx=1, input_ids=np.ones((1, 3)))
    with pytest.raises(posenc.InputError, match=r"^bias_table \(y, the second\): "):
        posenc.table.layoutlm_bucket(axis="xy", bbox=np.zeros((1, 2, 4), np.int64), buckets=4,
                                     bias_table=(np.zeros((2, 4)), np.zeros((2, 5))))
    status, msg = cli_message("table", "layoutlm-bucket", "--axis", "xy", "--bbox", "b.npy",
                              "-o", str(tmp_path / "out.npy"))
    with pytest.raises(posenc.UsageError) as e:
        posenc.table.layoutlm_bucket(axis="xy", bbox=np.zeros((1, 2, 4), np.int64))
    assert status == 2 and str(e.value) == msg
    with pytest.raises(posenc.UsageError, match="two weights are for axis xy"):
        posenc.table.layoutlm_bucket(axis="x", bbox=np.zeros((1, 2, 4), np.int64),
                                     bias_table=(np.zeros((2, 64)), np.zeros((2, 64))))
