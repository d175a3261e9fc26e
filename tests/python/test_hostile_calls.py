"""No call from Python crashes, exits or hangs the interpreter, and every bad argument is a
posenc.UsageError or InputError naming the keyword: None where a tensor is needed,
numbers out of range, wrong types, thread counts, a fork after a call, empty tensors
with huge extents, "-" as a reference. Scenarios that used to kill or hang the
interpreter run in a fresh one (subprocess), so that a regression fails the test rather
than the test run. References are written here with numpy (and torch for bf16)."""
import ctypes
import inspect
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import posenc

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(code, cwd, timeout=120, stdin=None):
    """Runs `code` in a fresh interpreter with the package under test importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, input=stdin,
                          capture_output=True, timeout=timeout, env=env)


def assert_usage_lines(p, expected):
    """The child printed one `UsageError <message>` line per call, each containing the
    expected text, and exited normally."""
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().splitlines()
    assert len(lines) == len(expected), lines
    for line, want in zip(lines, expected):
        assert line.startswith("UsageError "), line
        assert want in line, (line, want)


CALLS = """
import numpy as np, posenc
q = np.ones((1, 2, 4, 8), np.float32)
w = np.ones((8, 2, 8))
def show(f):
    try:
        f()
        print("no error")
    except Exception as e:
        print(type(e).__name__, e)
"""


def test_none_tensors_are_usage_errors(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"head_dim": 8, "num_attention_heads": 2, "num_key_value_heads": 2, '
        '"hidden_size": 16, "rope_theta": 10000.0}')
    p = run_python(CALLS + """
show(lambda: posenc.attention(q, None))
show(lambda: posenc.attention(q, None, rope=True))
show(lambda: posenc.attention(q, None, hf_config="config.json"))
show(lambda: posenc.attention(None, q))
for i in range(4):  # the first one too: it used to drop the term silently
    tables = [q[0]] * 4
    tables[i] = None
    show(lambda: posenc.attention(q, q, rel_kernel=w, factorized=tuple(tables)))
show(lambda: posenc.rope(None))
show(lambda: posenc.compare(q, None))
show(lambda: posenc.write("x.npy", None))
""", tmp_path)
    assert_usage_lines(p, ["k: required, got None"] * 3 + ["q: expected an array, got None"] + [
        f"factorized: expected the four tables (phi, pi, psi, omega), got None for {n}"
        for n in ("phi", "pi", "psi", "omega")] + [
        "x: expected an array, got None", "b: expected an array, got None",
        "x: expected an array, got None"])
    assert not os.path.exists(tmp_path / "x.npy")


def test_bad_types_and_ranges_name_the_keyword():
    q = np.ones((1, 2, 4, 8), np.float32)
    cases = [
        (lambda: posenc.rope(q, rotary_dim=2**40),
         "rotary_dim: int 1099511627776 is out of range"),
        (lambda: posenc.rope(q, max_pos=2**64),
         "max_pos: int 18446744073709551616 is out of range"),
        (lambda: posenc.rope(q, base="x"), "base: expected a number, got str 'x'"),
        (lambda: posenc.rope(q, base=10**400), "base: int 1000"),
        (lambda: posenc.rope(q, axes=5), "axes: expected letters of b, h, s, d"),
        (lambda: posenc.rope(q, rope2d=5), "rope2d: expected two integers (H, W), got 5"),
        (lambda: posenc.rope(q, style=3), "style: expected a string, got int 3"),
        (lambda: posenc.rope(q, short_factor=[1.0, "x"], scaling="longrope"), "short_factor"),
        (lambda: posenc.attention(q, q, scale="big"), "scale: expected a number, got str 'big'"),
        (lambda: posenc.attention(q, q, sinks="x"), "sinks: posenc has no dtype"),
        (lambda: posenc.table.rope(positions=2**70, dim=8),
         "positions: int 1180591620717411303424 is out of range"),
        # Beyond int64 and beyond int alike: the range of the keyword's type.
        (lambda: posenc.table.rope(positions=4, dim=2**70),
         "dim: int 1180591620717411303424 is out of range (-2147483648 to 2147483647)"),
        (lambda: posenc.table.sinusoidal(positions=4, dim="8"),
         "dim: expected an integer, got str '8'"),
        (lambda: posenc.write("x.npy", q, attrs={"a": None}), "attrs a: expected a str, int"),
        (lambda: posenc.write("x.npy", q, attrs={1: 2}), "attrs: expected names as strings"),
        (lambda: posenc.compare(q, q, ulp=-1), "ulp: must be at least 0, got -1"),
        (lambda: posenc.compare(q, q, ulp=1.5), "ulp: expected an integer, got float 1.5"),
        # A bool is no number here (True would be a bound of 1 ulp, or rtol 1).
        (lambda: posenc.compare(q, q, ulp=True), "ulp: expected an integer, got bool True"),
        (lambda: posenc.compare(q, q, rtol=True), "rtol: expected a number, got bool True"),
        (lambda: posenc.compare(q, q, baseline=q, factor=False), "factor: expected a number, got bool"),
        (lambda: posenc.write("x.npy", q, compression=True),
         "compression: expected an integer, got bool True"),
        (lambda: posenc.read(5), "ref: expected a path, got int 5"),
        (lambda: posenc.bf16_to_float32(None), "bits: expected numbers, got dtype object"),
        (lambda: posenc.float32_to_bf16("x"), "x: expected numbers"),
    ]
    for call, text in cases:
        with pytest.raises(posenc.UsageError) as e:
            call()
        assert text in str(e.value), (str(e.value), text)
        for internal in ("Unable to cast", "unexpected type", "incompatible function"):
            assert internal not in str(e.value)


@pytest.mark.parametrize("call,text", [
    (lambda q: posenc.rope(q, inverse=np.ones(3)), "inverse: expected True or False"),
    (lambda q: posenc.rope(q, mrope_section=5), "mrope_section: expected a list of integers"),
    (lambda q: posenc.rope(q, precision=np.ones(2)), "precision: expected a string"),
    (lambda q: posenc.rope(q, freq_scale="x"),
     "freq_scale: expected a positive number or 2pi, got 'x'"),
    (lambda q: posenc.attention(q, q, window=(1, 2, 3)), "window: expected LEFT or (LEFT, RIGHT)"),
    (lambda q: posenc.attention(q, q, attn_temperature=5.0), "attn_temperature: expected"),
    (lambda q: posenc.attention(q, q, emit=True), "emit: expected a name or a sequence"),
    (lambda q: posenc.attention(q, q, decomposed_rel_pos=q, grid=(2, 2)),
     "decomposed_rel_pos: expected (RH, RW)"),
    # A group's tensors are all given: None for one is named with the group's keyword.
    (lambda q: posenc.attention(q, q, decomposed_rel_pos=(None, q[0, 0]), grid=(2, 2)),
     "decomposed_rel_pos: expected the two tables (rel_pos_h, rel_pos_w), got None for rel_pos_h"),
    (lambda q: posenc.attention(q, q, q, global_kv=(q, None), global_block_size=2),
     "global_kv: expected the side keys and values (global_k, global_v), got None for global_v"),
    (lambda q: posenc.attention(q, q, t5_bias=np.zeros((32, 2)), wavlm_gate=(q, None, q, q)),
     "wavlm_gate: expected the four tensors (gate_input, gate_weight, gate_bias, gate_const), "
     "got None for gate_weight"),
    (lambda q: posenc.table.swin_index(window=2.5), "window: expected a whole number"),
    (lambda q: posenc.table.rope2d(height=2, width=2, dim=8, emit=True), "emit: expected"),
    (lambda q: posenc.table.t5_bucket(q_len=2, k_len=2, causal=np.ones(2)), "causal: expected"),
    (lambda q: posenc.table.t5_bucket(q_len=2, k_len=2, dtype="\udcff"), "dtype: unknown dtype"),
])
def test_keyword_checks_name_the_keyword(call, text):
    with pytest.raises(posenc.UsageError, match=re.escape(text)):
        call(np.ones((1, 2, 4, 8), np.float32))


def test_write_attrs_numpy_scalars_and_bad_values(tmp_path):
    h5py = pytest.importorskip("h5py")
    ref = str(tmp_path / "a.h5") + ":/d"
    posenc.write(ref, np.ones(3, np.float32), attrs={"f": np.float32(1.5), "i": np.int64(3)})
    with h5py.File(tmp_path / "a.h5") as f:
        assert dict(f["d"].attrs) == {"f": 1.5, "i": 3}
    with pytest.raises(posenc.UsageError, match=r"attrs c: expected a number, got complex"):
        posenc.write(str(tmp_path / "b.npy"), np.ones(3), attrs={"c": 1j})


def test_python_call_errors_stay_type_errors():
    # An unknown keyword or a missing argument is Python's own TypeError, as for any
    # Python function.
    with pytest.raises(TypeError):
        posenc.rope(np.ones((2, 4)), rotary_dims=2)
    with pytest.raises(TypeError):
        posenc.table.sinusoidal(positions=4)
    # posenc.attention binds its arguments to its signature before its body reads them.
    q = np.ones((1, 2, 4, 4))
    for args, kw in (((q, q), {"scalee": 1.0}), ((q, q, q, q), {}), ((q, q), {"args": {}}),
                     ((q,), {})):
        with pytest.raises(TypeError):
            posenc.attention(*args, **kw)
    assert "args" not in inspect.signature(posenc.attention).parameters
    # So do posenc.rope and the table kinds that read their declared keywords by name.
    with pytest.raises(TypeError):
        posenc.rope(np.ones((2, 4)), args={})
    for name in posenc.table.__all__:
        fn = getattr(posenc.table, name)
        assert "args" not in inspect.signature(fn).parameters, name
        with pytest.raises(TypeError):
            fn(args={})


@pytest.mark.parametrize("n", [-1, 4097, 100000, 2**31 - 1, 2**64, 1.5, "2", None, True])
def test_set_threads_bounded_as_j(n):
    with pytest.raises(posenc.UsageError, match=r"threads: (must be from 0 \(all cores\) to "
                                                r"4096|expected an integer)"):
        posenc.set_threads(n)


def test_set_threads_out_of_range_leaves_the_interpreter_working(tmp_path):
    # 100000 used to be accepted and end the next rope in SIGSEGV; 2**31-1 in libgomp's
    # "Out of memory" and exit(1).
    p = run_python(CALLS + """
for n in (100000, 2**31 - 1):
    show(lambda: posenc.set_threads(n))
    print("rope", posenc.rope(q).shape)
""", tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().splitlines() == [
        "UsageError threads: must be from 0 (all cores) to 4096, got 100000",
        "rope (1, 2, 4, 8)",
        "UsageError threads: must be from 0 (all cores) to 4096, got 2147483647",
        "rope (1, 2, 4, 8)"]


def test_thread_count_that_cannot_start_runs_on_fewer(tmp_path):
    # Under an address-space limit libgomp could not create the workers and ended the
    # interpreter ("Thread creation failed", exit 1).
    p = run_python("""
        import resource, warnings
        import numpy as np, posenc
        x = np.ones((1, 2, 64, 8), np.float32)
        want = posenc.rope(x)
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20),) * 2)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            posenc.set_threads(4096)
        print(len(w), w[0].category.__name__, "only" in str(w[0].message))
        print(np.array_equal(posenc.rope(x), want))
        """, tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split() == ["1", "RuntimeWarning", "True", "True"]


def openmp():
    """libgomp, as the module loads it, for its per-thread settings."""
    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError:
        pytest.skip("libgomp.so.1 is not loadable")


def tasks():
    return len(os.listdir("/proc/self/task"))


def test_set_threads_holds_in_every_thread_and_keeps_the_callers_setting():
    gomp = openmp()
    x = np.random.default_rng(0).standard_normal((1, 64, 256, 64)).astype(np.float32)
    seen = {}

    def worker():
        # This thread's own OpenMP setting (as torch.set_num_threads would make it).
        gomp.omp_set_num_threads(7)
        before = tasks()
        posenc.rope(x)
        # libgomp keeps the team's workers of this thread until it ends.
        seen["workers"] = tasks() - before
        seen["own"] = gomp.omp_get_max_threads()

    try:
        posenc.set_threads(4)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        # The main thread's own setting is untouched by set_threads and by calls.
        main_before = gomp.omp_get_max_threads()
        posenc.rope(x)
        assert gomp.omp_get_max_threads() == main_before
    finally:
        posenc.set_threads(0)
    assert seen["own"] == 7
    assert seen["workers"] == 3, seen


def test_forked_child_computes(tmp_path):
    # libgomp's pool does not survive fork: a child forked after a call used to hang
    # for ever in its first posenc call (multiprocessing's fork, DataLoader workers).
    p = run_python("""
        import os, sys, time
        import numpy as np, posenc
        x = np.random.default_rng(1).standard_normal((1, 8, 256, 64)).astype(np.float32)
        posenc.set_threads(2)
        want = posenc.rope(x)
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(posenc.rope(x), want)
            posenc.attention(x, x, x, emit="output")
            posenc.table.rope(positions=4096, dim=64)
            os._exit(0 if ok else 3)
        for _ in range(300):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("child", os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            print("child hangs")
        print("parent", np.array_equal(posenc.rope(x), want))
        """, tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split() == ["child", "0", "parent", "True"]


def test_fork_while_another_thread_rotates(tmp_path):
    # The RoPE tables shared between calls are guarded by a mutex another thread may hold
    # at the fork: each child starts from its own empty set of tables.
    p = run_python("""
        import os, threading, time
        import numpy as np, posenc
        x = np.random.default_rng(2).standard_normal((1, 2048, 4, 64)).astype(np.float32)
        want = posenc.rope(x)
        stop = []
        def spin():
            while not stop:
                posenc.rope(x)
        t = threading.Thread(target=spin)
        t.start()
        codes = []
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if np.array_equal(posenc.rope(x), want) else 3)
            for _ in range(300):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes.append(os.waitstatus_to_exitcode(status))
                    break
                time.sleep(0.02)
            else:
                os.kill(pid, 9)
                codes.append("hang")
        stop.append(1)
        t.join()
        print(set(codes))
        """, tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().strip() == "{0}"


def test_empty_tensor_costs_nothing(tmp_path):
    # Used to build the positions' table for all 2^24 positions: 67 s and 8.3 GB.
    p = run_python("""
        import time
        import numpy as np, posenc
        x = np.empty((1, 0, 2**24, 64), np.float32)
        t = time.perf_counter()
        y = posenc.rope(x)
        posenc.rope(x, out=x)
        print(y.shape, y.dtype, round(time.perf_counter() - t, 1) < 1.0)
        """, tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().strip() == "(1, 0, 16777216, 64) float32 True"


def test_sequence_arguments_with_huge_empty_extents_are_refused_by_length(tmp_path):
    # An empty array of shape (2**31, ...) holds no data but 2**31 items: tuple() or list()
    # of it took 23 GB before the length was checked.
    p = run_python("""
        import resource
        import numpy as np, posenc
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        calls = [
            ("size", lambda: posenc.table.rt_detr_sincos(size=np.empty((2**31, 4, 0), "<U3"))),
            ("mrope_section", lambda: posenc.rope(np.zeros((1, 1, 4, 8), np.float32),
                                                  mrope_section=np.empty((2**31, 0)))),
        ]
        for name, call in calls:
            try:
                call()
                print(name, "accepted")
            except posenc.UsageError as e:
                print(name, str(e).startswith(name + ":"))
        """, tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split() == ["size", "True", "mrope_section", "True"]


def neox_reference(x, angles):
    """HF's rotate_half RoPE of x [..., s, d] by angles [s, d/2], in float64."""
    cos, sin = np.cos(angles), np.sin(angles)
    cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def bf16_forms(values):
    """`values` as a torch.bfloat16 tensor and as posenc.BF16 bit patterns."""
    torch = pytest.importorskip("torch")
    t = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)
    assert torch.equal(t.float(), torch.tensor(values, dtype=torch.float32))  # exact in bf16
    return [t, posenc.BF16(t.view(torch.int16).numpy().view(np.uint16))]


def test_bf16_positions_angles_and_frequencies_by_value():
    # They used to be read as their uint16 bit patterns (errors of about 4).
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 8))
    pos = np.array([0.0, 0.5, 1.5, 3.0, 7.0, 12.0])
    inv = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    want = neox_reference(x, np.outer(pos, inv))
    for ids in bf16_forms(pos):
        np.testing.assert_allclose(posenc.rope(x, position_ids=ids), want, rtol=0, atol=1e-12)
    angles = np.array([[0.25 * (i + j) for j in range(4)] for i in range(6)])
    for a in bf16_forms(angles):
        np.testing.assert_allclose(posenc.rope(x, angles=a), neox_reference(x, angles),
                                   rtol=0, atol=1e-12)
    freqs = np.array([[1.0, 0.5, 0.125, 0.015625]])
    for f in bf16_forms(freqs):
        np.testing.assert_allclose(posenc.rope(x, inv_freq=f),
                                   neox_reference(x, np.outer(np.arange(6), freqs[0])),
                                   rtol=0, atol=1e-12)


def test_read_to_torch_imports_torch(tmp_path):
    pytest.importorskip("torch")
    p = run_python("""
        import sys
        import numpy as np, posenc
        posenc.write("x.npy", np.arange(6, dtype=np.float32))
        assert "torch" not in sys.modules
        t = posenc.read("x.npy", torch=True)
        print(type(t).__module__, t.tolist())
        """, tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().strip() == "torch [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"


def test_dash_is_not_the_interpreters_stdin(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(4.0))
    npy = (tmp_path / "x.npy").read_bytes()
    p = run_python(CALLS + """
import sys
show(lambda: posenc.read("-"))
show(lambda: posenc.write("-", q))
print(len(sys.stdin.buffer.read()))
""", tmp_path, stdin=npy)
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().splitlines()
    assert lines[:2] == [
        "UsageError ref: '-' (standard input or output) is the command's, not the module's"] * 2
    assert lines[2] == str(len(npy))  # stdin left to its owner, unread


@pytest.mark.parametrize("level", [-1, 10, 2**40])
def test_compression_outside_0_to_9_is_a_usage_error(tmp_path, level):
    with pytest.raises(posenc.UsageError, match=f"^compression: must be from 0 to 9, got {level}$"):
        posenc.write(str(tmp_path / "x.h5:/d"), np.zeros(3, np.float32), compression=level)
    assert os.listdir(tmp_path) == []


def ulp_distance_bf16(a, b):
    """numpy.testing.nulp_diff's count for bf16 values given as float32."""
    def ordered(v):
        bits = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.int64)
        return np.where(bits & 0x8000, 0x8000 - bits, bits)
    return np.abs(ordered(a) - ordered(b))


def test_compare_ulp_alone_applies_the_rule_it_states():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    b = torch.tensor(rng.standard_normal((2, 3, 50)), dtype=torch.bfloat16)
    steps = torch.tensor(rng.integers(-3, 4, (2, 3, 50)), dtype=torch.int16)
    a = (b.view(torch.int16) + steps).view(torch.bfloat16)
    af, bf = a.float().numpy(), b.float().numpy()
    ulps = ulp_distance_bf16(af, bf)
    close = np.abs(af - bf) <= 1e-5 + 0.016 * np.abs(bf)

    alone = posenc.compare(a, b, ulp=1)
    assert alone.mismatches == int(np.sum(ulps > 1))
    assert (alone.rtol, alone.atol, alone.ulp, alone.ulp_type) == (None, None, 1, "bf16")
    assert alone.rule() == "ulp 1 in bf16"
    assert "rtol" not in alone.summary()

    both = posenc.compare(a, b, ulp=1, rtol=0.016, atol=1e-5)
    assert both.mismatches == int(np.sum((ulps > 1) & ~close))
    assert both.rule() == "ulp 1 in bf16, or rtol 0.016, atol 1e-05"


def test_compare_indices_are_element_indices():
    a = np.zeros((2, 3, 4), np.float32)
    b = a.copy()
    a[1, 2, 3] = 1.0
    b[0, 1, 2] = 0.5  # larger relative difference... at b = 0.5 vs a = 0
    r = posenc.compare(a, b)
    flat = np.argmax(np.abs(a - b))
    assert r.max_abs["index"] == tuple(int(i) for i in np.unravel_index(flat, a.shape))
    assert r.max_abs["index"] == (1, 2, 3)
    assert "at (1, 2, 3)" in repr(r)


def test_fuzz_harness_short_run(tmp_path):
    # The harness CI runs under AddressSanitizer, here for a few seconds: only posenc's
    # exceptions (and MemoryError), no death.
    p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_module.py"), "--seconds", "6",
                        "--seed", "7"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           p for p in sys.path if p)))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "raised something else" in p.stdout
