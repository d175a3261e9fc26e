"""The ROPE OPTIONS shared by posenc.table.rope, posenc.rope and posenc.attention, turned
into the dicts the C++ module reads (keys: the library's RopeParams member names)."""

import math
import os

import numpy as np

from . import _posenc
from ._arrays import ints, is_real, reals, view
from ._posenc import InputError, UsageError

# Keyword -> RopeParams member; values None are "not given". The declared fields
# (posenc/encodings/rope_fields.hpp) and those the module reads by hand.
ROPE_PARAMS = tuple(f["name"] for f in _posenc._fields("rope")
                    if f["kind"] in ("rope", "hf", "arith"))

# The declared scalar fields of posenc.attention (posenc/ops/attention_fields.hpp: scale,
# sliding_window, softcap, ...), passed to the module under their own names.
ATTENTION_FIELDS = tuple(_posenc._fields("attention"))
# Its declared tensor inputs (mask, t5_bias, qv, ...) and the KV-cache step's (page_table,
# k_new, ...), keyword names.
ATTENTION_TENSORS = tuple(t["name"] for t in _posenc._fields("attention_tensors")
                          if t["kind"] == "attention" and t["type"] == "tensor")
KVCACHE_TENSORS = tuple(t["name"] for t in _posenc._fields("attention_tensors")
                        if t["kind"] == "kvcache" and t["type"] == "tensor")


def rope_dict(kw):
    """The given ROPE OPTIONS of `kw` (a dict holding every name of ROPE_PARAMS) as the
    C++ module's dict."""
    d = {k: kw[k] for k in ROPE_PARAMS if kw.get(k) is not None}
    if not d:
        return d
    for k in ("short_factor", "long_factor"):  # a text is a comma list or a tensor reference
        if k in d and not isinstance(d[k], str):
            d[k] = reals(d[k], k)
    if "hf_config" in d:
        d["hf_config"] = path(d["hf_config"], "hf_config")
    return d


_NO_POSITIONS = {}


def positions_dict(start=0, position_ids=None, cu_seqlens=None):
    """start / position_ids / cu_seqlens as the C++ module's dict (int64 arrays)."""
    if not isinstance(start, (int, np.integer)) or isinstance(start, bool):
        raise UsageError(f"start: expected an integer, got {start!r:.40}")
    if start == 0 and position_ids is None and cu_seqlens is None:
        return _NO_POSITIONS
    return {"start": int(start), "position_ids": ints(position_ids, "position_ids"),
            "cu_seqlens": ints(cu_seqlens, "cu_seqlens")}


def path(value, what):
    """A file path given as str, bytes or os.PathLike, as the bytes of its name."""
    try:
        return os.fsencode(value)
    except TypeError:
        raise UsageError(f"{what}: expected a path, got {type(value).__name__} "
                         f"{value!r:.40}") from None


def axes_text(axes, what="axes"):
    """The axes letters given ("" for None: the default by rank)."""
    if axes is None:
        return ""
    if not isinstance(axes, str):
        raise UsageError(f"{what}: expected letters of b, h, s, d as a string, got "
                         f"{type(axes).__name__} {axes!r:.40}")
    return axes


def items(value, n, what, expected):
    """The n items of a sequence argument (a tuple of tensors or numbers)."""
    try:
        ok = not isinstance(value, (str, bytes, dict)) and len(value) == n
    except TypeError:
        ok = False
    if not ok:
        raise UsageError(f"{what}: expected {expected}, got {value!r:.40}")
    return tuple(value)


def pair(value, what):
    """Two integers (H, W) given as a pair."""
    return items(value, 2, what, "two integers (H, W)")


def number(value, what):
    """A real number argument as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise UsageError(f"{what}: expected a number, got {type(value).__name__} {value!r:.40}")
    return float(value)


def whole(value, what):
    """A whole-number argument as an int (an integral float too)."""
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{what}: expected a whole number, got {type(value).__name__} "
                         f"{value!r:.40}")
    return int(value)


def flag(value, what):
    """A True/False argument (numpy's bools, 0 and 1 too)."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer))
                                                and value in (0, 1)):
        return bool(value)
    raise UsageError(f"{what}: expected True or False, got {type(value).__name__} "
                     f"{value!r:.40}")


def emit_list(emit, default):
    """(list of names, whether one name was given)."""
    if emit is None:
        return list(default), False
    if isinstance(emit, str):
        return [emit], True
    if not isinstance(emit, (list, tuple)) or not all(isinstance(e, str) for e in emit):
        raise UsageError(f"emit: expected a name or a sequence of names, got {emit!r:.40}")
    names = list(emit)
    for e in names:
        if names.count(e) > 1:
            raise UsageError(f"emit {tuple(names)}: '{e}' is named twice")
    return names, False


def layout_dicts(pos, apply, rope_d, position_ids, layout, inv_freq, freq_scale, coords,
                 prefix_tokens, merge_window, angles):
    """The RoPE layout keywords (posenc.rope) into the positions, apply and rope dicts:
    real position_ids become coordinates, style "tiled" the tiled pairing."""
    pos = dict(pos)
    if is_real(position_ids):  # real coordinates: the module takes a float64 array as such
        pos["position_ids"] = reals(position_ids, "position_ids")
    if coords is not None:
        if not isinstance(coords, str):
            raise UsageError(f"coords: expected \"grid:E1,E2,...\" or \"centres:H,W\", got "
                             f"{coords!r:.40}")
        pos["grid"] = coords
    if prefix_tokens is not None:  # without coords refused by the module (check_given)
        pos["prefix_tokens"] = whole(prefix_tokens, "prefix_tokens")
    if merge_window is not None:
        pos["merge_window"] = whole(merge_window, "merge_window")
    if angles is not None:
        pos["angles"] = reals(angles, "angles")
    if layout is not None:
        apply["layout"] = layout
    if inv_freq is not None:
        apply["inv_freq"] = reals(inv_freq, "inv_freq")
    if freq_scale is not None:  # a number, or "2pi" as the command takes it
        apply["freq_scale"] = freq_scale
    if rope_d.get("style") == "tiled":
        rope_d["style"] = "neox"
        apply["tiled"] = True
    return pos


def rope_tables(kw):
    """posenc.rope's cos, sin and seqlen_offsets as the positions dict's entries."""
    cos, sin, offsets = kw.get("cos"), kw.get("sin"), kw.get("seqlen_offsets")
    out = {}
    if offsets is not None:
        out["seqlen_offsets"] = ints(offsets, "seqlen_offsets")
    if (cos is None) != (sin is None):
        raise UsageError("sin: needs cos" if cos is None else "cos: needs sin")
    if cos is None:
        return out
    # What the tables replace (base, scaling, arith, ...) is refused by the module
    # (check_tables_given, check_tables_arith).
    for name, t in (("cos", cos), ("sin", sin)):
        if not is_real(t):
            raise InputError(f"{name}: expected a float tensor (f16, bf16, f32, f64)")
    out["cos"] = reals(cos, "cos")
    out["sin"] = reals(sin, "sin")
    # The tables' own types: torch_ops rounds to its promotion with x's.
    out["cos_dtype"] = view(cos, "cos")[1]
    out["sin_dtype"] = view(sin, "sin")[1]
    return out
