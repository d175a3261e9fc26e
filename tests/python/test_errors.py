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
