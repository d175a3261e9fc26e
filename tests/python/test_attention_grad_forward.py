"""The backward given the forward (`posenc attention --grad-output dO --forward-output O
--forward-lse LSE`, posenc.attention(..., forward_output=O, forward_lse=lse)):
FlashAttention's backward takes the forward's out and softmax_lse as inputs, and so does
posenc's, running no forward of its own.

Claims (posenc-attention(1), GRADIENTS): given posenc's own float64 forward, the
gradients are the bytes of the run that recomputes it (in memory and streamed, at -j1 and
-j2, attrs included); given another O and lse (here f32-rounded), D = rowsum(dO O) is taken
from that O and P = exp(s - lse) from that lse, which an independent torch float64
reference written here checks to 1e-12 of each tensor's largest value; the keyword gives
the command's bytes; bad input is refused with one line and nothing written (exit 2 for
usage, 3 for shapes and dtypes); NaN in O or lse propagates as in autograd.
"""
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch

import posenc

BIN = os.environ.get("POSENC_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")
NAMES = ("dq", "dk", "dv", "softmax_d", "lse")


def save(tmp, **arrays):
    for name, a in arrays.items():
        np.save(tmp / f"{name}.npy", a)


def run(tmp, *args, j=None):
    pre = ["-j", str(j)] if j else []
    return subprocess.run([BIN, *pre, "attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy",
                           *args], cwd=tmp, capture_output=True, text=True)


def grads(tmp, tag, *args, emit=NAMES, j=None):
    r = run(tmp, "--grad-output", "do.npy", "--emit", ",".join(emit), "-o", f"{tag}_{{}}.npy",
            *args, j=j)
    assert r.returncode == 0, r.stderr
    return {n: np.load(tmp / f"{tag}_{n}.npy") for n in emit}


def forward(tmp, tag, *args):
    """posenc's forward, O and lse in float64, as the backward recomputes it."""
    r = run(tmp, "--emit", "output,lse", "--dtype", "f64", "-o", f"{tag}_{{}}.npy", *args)
    assert r.returncode == 0, r.stderr
    return ["--forward-output", f"{tag}_output.npy", "--forward-lse", f"{tag}_lse.npy"]


def inputs(tmp, shape, seed=1, dtype=np.float64):
    b, hq, hk, sq, sk, d, dv = shape
    g = np.random.default_rng(seed)
    q, k, v, do = (g.standard_normal(s).astype(dtype) for s in
                   ((b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, dv), (b, hq, sq, dv)))
    save(tmp, q=q, k=k, v=v, do=do, sinks=np.array([0.5, -1.0, 0.0, 2.0][:hq]))
    return q, k, v, do


@pytest.mark.parametrize("extra", [
    ["--causal", "--sinks", "sinks.npy"],
    ["--causal", "--precision", "f32"],
    ["--window", "3,1", "--softcap", "2.5"],
    ["--causal", "--rope", "--style", "gptj"],
])
def test_own_forward_gives_the_same_bytes_in_memory(tmp_path, extra):
    inputs(tmp_path, (2, 4, 2, 12, 17, 8, 6), dtype=np.float32)
    emit = NAMES + (("dsinks",) if "--sinks" in extra else ())
    fwd = forward(tmp_path, "f", *extra)
    want = grads(tmp_path, "mem", *extra, emit=emit)
    for j in (1, 2):
        got = grads(tmp_path, f"given{j}", *extra, *fwd, emit=emit, j=j)
        for n in emit:
            assert got[n].tobytes() == want[n].tobytes(), (n, j)
    # The attrs recorded are the forward's, as the run that recomputes it records them.
    for tag, more in (("a", []), ("b", fwd)):
        r = run(tmp_path, "--grad-output", "do.npy", "-o", f"{tag}.h5", *extra, *more)
        assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as b:
        for n in NAMES:
            assert a[n][...].tobytes() == b[n][...].tobytes(), n
            assert {k: str(v) for k, v in a[n].attrs.items()} == \
                {k: str(v) for k, v in b[n].attrs.items()}, n


def test_own_forward_gives_the_same_bytes_streamed(tmp_path):
    # K and V 2 MiB each: --max-memory 2M holds neither whole, so the backward streams.
    inputs(tmp_path, (1, 4, 2, 64, 8192, 32, 16))
    extra = ["--causal", "--sinks", "sinks.npy"]
    emit = NAMES + ("dsinks",)
    fwd = forward(tmp_path, "f", *extra)
    want = grads(tmp_path, "mem", *extra, emit=emit)
    for j in (1, 2):
        got = grads(tmp_path, f"s{j}", *extra, *fwd, "--max-memory", "2M", emit=emit, j=j)
        for n in emit:
            assert got[n].tobytes() == want[n].tobytes(), (n, j)
    # In memory the same 2M cannot hold K and V: the run above streamed.
    r = run(tmp_path, "--grad-output", "do.npy", "--rope", *fwd, "--max-memory", "2M",
            "-o", "r_{}.npy")
    assert r.returncode == 3 and "--max-memory" in r.stderr, r.stderr


def reference(q, k, v, do, o, lse, causal):
    """The backward from a given O and lse, torch float64: D = rowsum(dO O), P = exp(s -
    lse) over the keys each query sees, dS = P (dP - D) (FlashAttention's backward)."""
    q, k, v, do, o, lse = (torch.as_tensor(np.asarray(a, np.float64))
                           for a in (q, k, v, do, o, lse))
    group = q.shape[1] // k.shape[1]
    K, V = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = q.shape[-1] ** -0.5
    s = scale * q @ K.transpose(-1, -2)
    sq, sk = s.shape[-2:]
    p = torch.exp(s - lse[..., None])
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        p = p.masked_fill(~keep, 0.0)
    D = (do * o).sum(-1)
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ V.transpose(-1, -2) - D[..., None])
    dq = scale * ds @ K
    dk = scale * ds.transpose(-1, -2) @ q
    fold = lambda t: t.reshape(t.shape[0], -1, group, *t.shape[2:]).sum(2)  # noqa: E731
    return {"dq": dq, "dk": fold(dk), "dv": fold(dv), "softmax_d": D}


def check(got, want):
    for n, ref in want.items():
        err = float(np.abs(got[n] - ref.numpy()).max())
        assert err <= 1e-12 * float(ref.abs().max()), (n, err)


@pytest.mark.parametrize("streamed", [False, True])
def test_given_f32_forward_is_used_as_given(tmp_path, streamed):
    shape = (1, 4, 2, 64, 8192, 32, 16) if streamed else (2, 4, 2, 12, 17, 8, 6)
    q, k, v, do = inputs(tmp_path, shape, seed=3)
    fwd = forward(tmp_path, "f", "--causal")
    o = np.load(tmp_path / "f_output.npy").astype(np.float32)
    lse = np.load(tmp_path / "f_lse.npy").astype(np.float32)
    save(tmp_path, o32=o, lse32=lse)
    given = ["--forward-output", "o32.npy", "--forward-lse", "lse32.npy"]
    budget = ["--max-memory", "2M"] if streamed else []
    got = grads(tmp_path, "g", "--causal", *given, *budget, emit=NAMES[:4])
    check(got, reference(q, k, v, do, o, lse, True))
    # Not the recomputed forward's gradients: the given O and lse were used.
    own = grads(tmp_path, "own", "--causal", *fwd, *budget, emit=NAMES[:4])
    assert not np.array_equal(got["dq"], own["dq"])
    assert not np.array_equal(got["softmax_d"], own["softmax_d"])
    if not streamed:
        # The keyword gives the command's bytes.
        py = posenc.attention(q, k, v, grad_output=do, causal=True, forward_output=o,
                              forward_lse=lse, emit=NAMES[:4])
        for n, a in zip(NAMES[:4], py):
            assert a.dtype == got[n].dtype and a.tobytes() == got[n].tobytes(), n
        tq, tk, tv, tdo = (torch.from_numpy(a) for a in (q, k, v, do))
        pt = posenc.attention(tq, tk, tv, grad_output=tdo, causal=True,
                              forward_output=torch.from_numpy(o),
                              forward_lse=torch.from_numpy(lse), emit=("dq",))
        assert isinstance(pt[0], torch.Tensor) and pt[0].numpy().tobytes() == got["dq"].tobytes()


def test_bad_input_is_refused_with_nothing_written(tmp_path):
    q, k, v, do = inputs(tmp_path, (1, 4, 2, 6, 9, 8, 5))
    forward(tmp_path, "f")
    o, lse = np.load(tmp_path / "f_output.npy"), np.load(tmp_path / "f_lse.npy")
    save(tmp_path, o_short=o[..., :4], o_int=o.astype(np.int32), lse_short=lse[..., :5],
         lse_f16=lse.astype(np.float16), qv=np.zeros_like(o),
         cuq=np.array([0, 6], np.int32), cuk=np.array([0, 9], np.int32),
         relk=np.zeros((15, 4, 8)))
    O, L = ["--forward-output", "f_output.npy"], ["--forward-lse", "f_lse.npy"]
    dO = ["--grad-output", "do.npy"]
    cases = [
        (2, dO + O, "--forward-output: needs --forward-lse"),
        (2, dO + L, "--forward-lse: needs --forward-output"),
        (2, O + L, "need --grad-output"),
        (2, dO + ["--forward-output", ""] + L, "--forward-output: empty value"),
        (2, dO + O + L + ["--qv", "qv.npy"], "--forward-output: not with --qv"),
        (2, dO + O + L + ["--rel-keys", "relk.npy"], "--forward-output: not with the "),
        (3, dO + ["--forward-output", "o_short.npy"] + L, "--forward-output: shape"),
        (3, dO + ["--forward-output", "o_int.npy"] + L, "--forward-output: dtype i32"),
        (3, dO + O + ["--forward-lse", "lse_short.npy"], "--forward-lse: shape"),
        (3, dO + O + ["--forward-lse", "lse_f16.npy"], "--forward-lse: dtype f16"),
    ]
    for status, args, message in cases:
        r = run(tmp_path, *args, "-o", "bad_{}.npy")
        assert r.returncode == status and message in r.stderr, (args, r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not [f for f in os.listdir(tmp_path) if f.startswith("bad_")], args
    # The varlen form (packed Q, K, V) runs each sequence's forward: refused by name.
    qp, kp, vp, dop = q[0].transpose(1, 0, 2), k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2), \
        do[0].transpose(1, 0, 2)
    save(tmp_path, qp=qp, kp=kp, vp=vp, dop=dop, op=o[0].transpose(1, 0, 2),
         lsep=lse[0])
    r = subprocess.run([BIN, "attention", "-q", "qp.npy", "-k", "kp.npy", "-v", "vp.npy",
                        "--cu-seqlens-q", "cuq.npy", "--cu-seqlens-k", "cuk.npy",
                        "--grad-output", "dop.npy", "--forward-output", "op.npy",
                        "--forward-lse", "lsep.npy", "-o", "bad_{}.npy"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "--forward-output: not with --cu-seqlens-q" in r.stderr, r.stderr
    assert not [f for f in os.listdir(tmp_path) if f.startswith("bad_")]

    # The keywords: the same rules and messages in their own names.
    for kw, err, message in [
        (dict(grad_output=do, forward_output=o), posenc.UsageError,
         "forward_output: needs forward_lse"),
        (dict(grad_output=do, forward_lse=lse), posenc.UsageError,
         "forward_lse: needs forward_output"),
        (dict(forward_output=o, forward_lse=lse), posenc.UsageError, "need grad_output"),
        (dict(grad_output=do, forward_output=o, forward_lse=lse, qv=o), posenc.UsageError,
         "forward_output: not with qv"),
        (dict(grad_output=do, forward_output=o[..., :4], forward_lse=lse), posenc.InputError,
         "forward_output: shape"),
        (dict(grad_output=do, forward_output=o, forward_lse=lse.astype(np.float16)),
         posenc.InputError, "forward_lse: dtype f16"),
    ]:
        with pytest.raises(err, match=message):
            posenc.attention(q, k, v, **kw)


def test_nan_in_the_given_forward_propagates(tmp_path):
    # As autograd takes it: a NaN in O's row i makes D_i NaN, so dq and softmax_d of the
    # row and dk of the keys it sees (dv is P^T dO: no D in it); a NaN lse_i makes the
    # row's P NaN, so dv of those keys too.
    q, k, v, do = inputs(tmp_path, (1, 4, 2, 6, 9, 8, 5), seed=5)
    o, lse = posenc.attention(q, k, v, causal=True, emit=("output", "lse"), dtype="f64")
    seen = np.arange(9) <= 3 + 3  # query 3 sees keys 0..6 (bottom-right causal)
    for where in ("output", "lse"):
        o2, lse2 = o.copy(), lse.copy()
        if where == "output":
            o2[0, 1, 3, 2] = np.nan
        else:
            lse2[0, 1, 3] = np.nan
        dq, dk, dv, D = posenc.attention(q, k, v, grad_output=do, causal=True, forward_output=o2,
                                         forward_lse=lse2, emit=NAMES[:4])
        row = np.zeros((1, 4, 6), bool)
        row[0, 1, 3] = True
        keys = np.zeros((1, 2, 9), bool)
        keys[0, 0] = seen  # query head 1 belongs to KV head 0
        none = np.zeros_like(keys)
        assert np.array_equal(np.isnan(dq).any(-1), row) and np.isnan(dq[row]).all(), where
        assert np.array_equal(np.isnan(D), row if where == "output" else np.zeros_like(row))
        assert np.array_equal(np.isnan(dk).any(-1), keys), where
        assert np.array_equal(np.isnan(dv).any(-1), keys if where == "lse" else none), where
