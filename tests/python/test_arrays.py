"""Arrays in and out: DLPack producers, the buffer protocol, byte order, integer inputs,
read-only outputs, and the GIL released while posenc computes."""
import array
import ctypes
import sys
import threading
import time

import numpy as np
import pytest
import torch

import posenc
from reference_rope import default_inv, rope as rope_ref


class DLPackOnly:
    """An object numpy can reach only through DLPack."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_input():
    t = torch.randn(3, 8, 16, dtype=torch.float64)
    got = posenc.rope(DLPackOnly(t))
    assert isinstance(got, np.ndarray)
    assert np.array_equal(got, posenc.rope(t.numpy()))


def test_buffer_protocol_and_lists():
    buf = array.array("d", np.random.default_rng(0).standard_normal(4 * 8).tolist())
    x = np.frombuffer(buf, dtype=np.float64).reshape(4, 8)
    got = posenc.table.rope(positions=4, dim=8, emit="cos", dtype=np.float64)
    assert got.shape == (4, 8)
    r = posenc.compare(memoryview(buf), x.ravel())
    assert r.match and r.total == 32
    assert posenc.compare([1.0, 2.0], np.array([1.0, 2.0])).match


def test_byte_order_and_integers():
    x = np.random.default_rng(1).standard_normal((5, 8))
    big = x.astype(">f8")
    assert np.array_equal(posenc.rope(big), posenc.rope(x))
    ints = np.arange(40, dtype=np.int32).reshape(5, 8)
    got = posenc.rope(ints)
    assert got.dtype == np.float64
    ref, margin = rope_ref(ints.astype(np.float64), np.arange(5), default_inv(10000.0, 8),
                           "neox")
    assert np.all(np.abs(got - ref) <= margin + 2.0 ** -53 * np.abs(ref))


def test_read_only_out_refused_and_input_untouched():
    x = np.ones((4, 8))
    x.flags.writeable = False
    with pytest.raises(posenc.UsageError, match="read-only"):
        posenc.rope(x, out=x)
    y = posenc.rope(x)  # out of place reads it
    assert np.array_equal(x, np.ones((4, 8))) and not np.array_equal(y, x)


def turns_during(call):
    """How often this thread turns a loop while another thread runs `call`, and how long
    the call took."""
    started, done = threading.Event(), threading.Event()
    spans = []

    def work():
        started.set()
        t0 = time.perf_counter()
        call()
        spans.append(time.perf_counter() - t0)
        done.set()

    th = threading.Thread(target=work)
    th.start()
    started.wait()
    count = 0
    while not done.is_set():
        count += 1
    th.join()
    return count, spans[0]


def test_gil_released_during_computation():
    x = np.random.default_rng(2).standard_normal((1, 32, 4096, 128)).astype(np.float32)
    usleep = ctypes.PyDLL(None).usleep  # a C call that keeps the GIL
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # so that the hand-over around a call is short
    try:
        # Four rotations at new positions each (about half a second: a call at positions
        # seen before reuses their table and takes a tenth of that): long against the
        # hand-over around a call, which a loaded machine can stretch to milliseconds.
        free, span = turns_during(lambda: [posenc.rope(x, out=x, start=s) for s in range(4)])
        held, _ = turns_during(lambda: usleep(int(span * 1e6)))
    finally:
        sys.setswitchinterval(old)
    assert span > 0.005
    assert free > 3 * held, (free, held, span)


def test_results_do_not_depend_on_threads():
    x = np.random.default_rng(4).standard_normal((2, 8, 512, 64)).astype(np.float32)
    q, k, v = (np.random.default_rng(i).standard_normal((1, 4, 300, 32)) for i in range(3))
    try:
        posenc.set_threads(1)
        one = posenc.rope(x), posenc.attention(q, k, v, causal=True, emit="output")
        posenc.set_threads(2)
        two = posenc.rope(x), posenc.attention(q, k, v, causal=True, emit="output")
    finally:
        posenc.set_threads(0)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))
    with pytest.raises(posenc.UsageError):
        posenc.set_threads(-1)
