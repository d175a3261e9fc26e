"""Arrays in and out of the C++ module: numpy arrays, CPU torch tensors, DLPack
capsules and bf16 bit patterns, viewed without copies where their layout allows."""

import importlib
import sys

import numpy as np

from ._errors import first_line
from ._posenc import InputError, UsageError

# numpy dtype -> posenc dtype name (the library's parse_dtype spellings).
_NAMES = {
    np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
    np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64", np.dtype(np.bool_): "bool",
}
_FLOATS = ("f16", "bf16", "f32", "f64", "float8_e4m3fn", "float8_e5m2")
_FP8 = {"e4m3fn": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
        "e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2"}


class BF16:
    """bfloat16 values held as their uint16 bit patterns (numpy has no bfloat16).

    ``posenc.BF16(bits)`` marks a uint16 array as bf16 input; bf16 results given back
    as numpy arrays are such bit patterns (plain uint16 arrays). ``float32_to_bf16`` and
    ``bf16_to_float32`` convert. A torch.bfloat16 tensor needs no wrapper."""

    def __init__(self, bits):
        self.bits = _numbers(bits, "BF16", "uifbcOUSV")
        if self.bits.dtype != np.uint16:
            raise UsageError(f"BF16: expected uint16 bit patterns, got {self.bits.dtype}")

    @property
    def shape(self):
        return self.bits.shape

    def __repr__(self):
        return f"BF16({bf16_to_float32(self.bits)!r})"


class FP8:
    """fp8 values (torch.float8_e4m3fn, torch.float8_e5m2) held as their uint8 codes.

    ``posenc.FP8(codes, "e4m3fn")`` (or "e5m2", or torch's names) marks a uint8 array
    (or ml_dtypes' float8 array, or numpy's '|V1' bytes) as fp8 input; fp8 results of
    numpy inputs are such codes (plain uint8 arrays). A torch float8 tensor (torch 2.1
    and later) needs no wrapper and is viewed as its codes without a copy."""

    def __init__(self, codes, dtype):
        name = _FP8.get(str(dtype).lower()) if isinstance(dtype, str) else None
        if name is None:
            raise UsageError(f"FP8: dtype {dtype!r}: expected e4m3fn, e5m2, float8_e4m3fn "
                             "or float8_e5m2")
        a = np.asarray(codes)
        if a.dtype.itemsize == 1 and a.dtype.kind in "uiV" or a.dtype.name.startswith("float8"):
            a = a.view(np.uint8)
        if a.dtype != np.uint8:
            raise UsageError(f"FP8: expected uint8 codes, got {a.dtype}")
        self.codes, self.dtype = a, name

    @property
    def shape(self):
        return self.codes.shape

    def __repr__(self):
        return f"FP8({self.codes!r}, {self.dtype!r})"


def _numbers(x, what, kinds):
    """x as a numpy array of one of the dtype kinds `kinds`, else UsageError."""
    a = x.bits if isinstance(x, BF16) else x
    try:
        a = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{what}: not an array ({first_line(e)})") from None
    if a.dtype.kind not in kinds:
        raise UsageError(f"{what}: expected numbers, got dtype {a.dtype}")
    return a


def bf16_to_float32(bits):
    """float32 values of bf16 bit patterns (uint16 array); exact."""
    b = _numbers(bits, "bits", "ui")
    if b.dtype != np.uint16:
        if b.size and (b.min() < 0 or b.max() > 0xFFFF):
            raise UsageError("bits: bf16 bit patterns are 0 to 0xffff")
        b = b.astype(np.uint16)
    u = b.astype(np.uint32).reshape(-1) << np.uint32(16)
    return u.view(np.float32).reshape(b.shape)


def float32_to_bf16(x):
    """bf16 bit patterns (uint16 array) of x rounded to nearest even, once, from float32
    (float64 input is rounded to float32 first: use posenc's dtype="bf16" for a
    single rounding from float64). A NaN becomes the quiet NaN of its sign (0x7fc0,
    0xffc0), as in every narrowing posenc makes."""
    a = _numbers(x, "x", "fiub")
    with np.errstate(over="ignore"):
        u = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(u.view(np.float32))
    r[nan] = (((u[nan] >> 16) & np.uint32(0x8000)) | np.uint32(0x7FC0)).astype(np.uint16)
    return r.reshape(a.shape)


def _torch():
    return sys.modules.get("torch")


def torch_module(what):
    """The torch module, imported when the caller has not yet (results as torch tensors
    need it); UsageError naming `what` when torch is not installed."""
    t = _torch()
    if t is not None:
        return t
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise UsageError(f"{what}: torch results need torch, which is not installed") from None


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def dtype_name(dtype, what="dtype"):
    """posenc's name for a dtype given as a string, numpy dtype or torch dtype; None
    stays None."""
    if dtype is None:
        return None
    t = _torch()
    if t is not None and isinstance(dtype, t.dtype):
        if dtype == t.bfloat16:
            return "bf16"
        if str(dtype).replace("torch.", "") in _FP8:
            return _FP8[str(dtype).replace("torch.", "")]
        dtype = t.empty((), dtype=dtype).numpy().dtype
    if isinstance(dtype, str):
        low = dtype.lower()
        if low in ("bf16", "bfloat16"):
            return "bf16"
        if low in _FP8:
            return _FP8[low]
        if low in ("f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"):
            return low
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError):
        raise UsageError(f"{what}: unknown dtype {dtype!r}") from None
    if d.newbyteorder("=") not in _NAMES:
        raise UsageError(f"{what}: posenc has no dtype {d}")
    return _NAMES[d.newbyteorder("=")]


def view(x, what):
    """(numpy array, posenc dtype name, 'torch' or 'numpy') for an input, without a copy
    where numpy can view it: numpy arrays, CPU torch tensors (bf16 as its bits), objects
    with __array_interface__ / the buffer protocol, DLPack producers."""
    if type(x) is np.ndarray:
        name = _NAMES.get(x.dtype)
        if name is not None:
            return x, name, "numpy"
        return x, dtype_name(x.dtype, what), "numpy"
    if isinstance(x, BF16):
        return x.bits, "bf16", "numpy"
    if isinstance(x, FP8):
        return x.codes, x.dtype, "numpy"
    t = _torch()
    if t is not None and isinstance(x, t.Tensor):
        if x.device.type != "cpu":
            raise UsageError(f"{what}: a tensor on {x.device}; posenc computes on the CPU "
                             "(move it with .cpu())")
        if x.is_conj() or x.is_neg():
            x = x.resolve_conj().resolve_neg()
        y = x.detach()
        if y.dtype == t.bfloat16:
            return y.view(t.int16).numpy().view(np.uint16), "bf16", "torch"
        # torch's float8 dtypes (2.1 and later; found by name, so an older torch without
        # them still imports this module): their codes, viewed as uint8 without a copy.
        fp8 = _FP8.get(str(y.dtype).replace("torch.", ""))
        if fp8 is not None:
            return y.view(t.uint8).numpy(), fp8, "torch"
        a = y.numpy()
        return a, dtype_name(a.dtype, what), "torch"
    if x is None:
        raise UsageError(f"{what}: expected an array, got None")
    try:
        if isinstance(x, np.ndarray):
            a = x
        elif (hasattr(x, "__dlpack__") and not hasattr(x, "__array_interface__")
              and not hasattr(x, "__array__")):
            a = np.from_dlpack(x)
        else:
            a = np.asarray(x)
    except (TypeError, ValueError, BufferError, RuntimeError) as e:
        raise UsageError(f"{what}: not an array ({first_line(e)})") from None
    return a, dtype_name(a.dtype, what), "numpy"


def contiguous(a):
    """`a` itself when it is C-contiguous, aligned and in native byte order, else a copy
    that is (the kernels load whole elements)."""
    if a.flags.c_contiguous and a.dtype.isnative and a.flags.aligned:
        return a
    return np.array(a, dtype=a.dtype.newbyteorder("="), order="C")


def arg(x, what):
    """(C-contiguous array, dtype name) for a tensor argument, None for None."""
    if x is None:
        return None
    a, name, _ = view(x, what)
    return contiguous(a), name


def required(x, what):
    """(C-contiguous array, dtype name) for a tensor argument that must be given."""
    a, name, _ = view(x, what)
    return contiguous(a), name


def empty(shape, name):
    """An uninitialised C-order array for posenc dtype `name` (bf16 as uint16)."""
    return np.empty(shape, dtype=_NUMPY[name])


_NUMPY = {n: d for d, n in _NAMES.items()}
_NUMPY["bf16"] = np.dtype(np.uint16)
_NUMPY["float8_e4m3fn"] = _NUMPY["float8_e5m2"] = np.dtype(np.uint8)


def wrap(a, name, like):
    """The result array `a` (posenc dtype `name`) as numpy or as a torch tensor sharing
    its memory (`like` 'torch')."""
    if like != "torch":
        return a
    t = torch_module("torch")
    if name == "bf16":
        return t.from_numpy(a.view(np.int16)).view(t.bfloat16)
    if name in _FP8:
        # torch's float8 dtype where this torch has it, else the codes as uint8.
        fp8 = getattr(t, name, None)
        return t.from_numpy(a).view(fp8) if fp8 is not None else t.from_numpy(a)
    return t.from_numpy(a)


def ints(x, what):
    """An integer tensor argument as a C-contiguous int64 array."""
    if x is None:
        return None
    a, name, _ = view(x, what)
    if name in _FLOATS or name == "bool":
        raise InputError(f"{what}: expected an integer dtype, got {name}")
    if name == "u64" and a.size and a.max() > np.iinfo(np.int64).max:
        raise InputError(f"{what}: value {a.max()} is too large")
    return np.ascontiguousarray(a, dtype=np.int64)


def reals(x, what):
    """A real-valued tensor argument as a C-contiguous float64 array (bf16 by value)."""
    if x is None:
        return None
    a, name, _ = view(x, what)
    if name == "bool":
        raise InputError(f"{what}: expected a numeric dtype, got bool")
    if name == "bf16":
        a = bf16_to_float32(a)
    if name in _FP8:
        from ._posenc import fp8_decode
        a = fp8_decode(np.ascontiguousarray(a), name).reshape(a.shape)
    return np.ascontiguousarray(a, dtype=np.float64)


def is_real(x):
    """True when the tensor argument x holds floats (f16, bf16, f32, f64, fp8)."""
    if x is None:
        return False
    return view(x, "x")[1] in _FLOATS
