"""Encoding tables (``posenc table KIND``), computed in float64 and rounded once to
`dtype` (default float32 for real tables, int64 for index tables). Each function returns
a numpy array (a torch tensor when `dtype` is a torch dtype); the RoPE kinds return a
tuple of arrays when `emit` is a sequence."""

from . import _posenc
from ._arrays import dtype_name as _dtype_name
from ._arrays import wrap as _wrap
from ._options import emit_list as _emit_list
from ._options import positions_dict as _positions
from ._options import rope_dict as _rope_dict
from ._posenc import UsageError

__all__ = ["sinusoidal", "rope", "rope2d", "alibi", "relative", "t5_bucket", "xl_relative",
           "deberta_bucket"]


def _like(dtype):
    """"torch" when `dtype` is a torch dtype (results as torch tensors), else "numpy"."""
    return "torch" if type(dtype).__module__ == "torch" else "numpy"


def _run(kind, request, dtype, rope=None, pos=None, emits=None, single=True):
    """Computes the tables of one request: an array, or a tuple for several emits."""
    name = _dtype_name(dtype) or ""
    if emits is not None:
        request["emit"] = [e.replace("_", "-") for e in emits]
    request = {k: v for k, v in request.items() if v is not None}
    tables = _posenc.table(kind, request, rope or {}, pos or {}, name)
    like = _like(dtype)
    arrays = tuple(_wrap(a, name or "", like) for a, _attrs in tables)
    return arrays[0] if single else arrays


def _layout(layout):
    """Whether `layout` ("full" or "half") asks for half-width lines."""
    if layout not in ("full", "half"):
        raise UsageError(f"layout: expected full or half, got '{layout}'")
    return layout == "half"


def sinusoidal(*, positions, dim, base=10000.0, start=0, layout="interleaved", dtype=None):
    """Vaswani's table [N, D]: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i),
    w_i = 1 / base^(2i/D), for positions start .. start + N - 1; layout "interleaved" or
    "concat" ([sin | cos])."""
    return _run("sinusoidal", {"positions": positions, "dim": dim, "base": base,
                               "start": start, "layout": layout}, dtype)


def rope(*, positions=None, dim=None, base=None, emit="cos-sin", layout="full", dtype=None,
         start=0, position_ids=None, cu_seqlens=None, style=None, rotary_dim=None,
         partial=None, scaling=None, factor=None, original_max_pos=None, max_pos=None,
         seq_len=None, beta_fast=None, beta_slow=None, mscale=None, mscale_all_dim=None,
         attention_factor=None, truncate=None, low_freq_factor=None, high_freq_factor=None,
         short_factor=None, long_factor=None, hf_config=None, hf_version=None, layer_type=None,
         layer=None,
         inverse=False, precision=None, arith=None):
    """RoPE tables with HF's scaling variants (``posenc table rope``).

    positions: N (positions start, start + 1, ...), or position_ids (any shape: the
        table gets that shape plus the line axis) or cu_seqlens (positions restart at
        each boundary); not needed for emit "inv-freq".
    dim: head dimension D (or from hf_config).
    emit: "inv-freq" [R/2], "angles", "cos", "sin" [N, W], "cos-sin" [2, N, W],
        "cos-sin-cache" [N, R] (vLLM); a sequence (("cos", "sin")) returns a tuple.
    layout: "full" (W = R in the style's pair layout) or "half" (W = R/2, flash-attn).
    The ROPE OPTIONS (style, base, rotary_dim, partial, scaling, factor, ..., hf_config,
    hf_version, inverse, precision, arith) are those of posenc.rope.
    """
    if dim is not None and dim <= 0:
        raise UsageError(f"dim: must be at least 1, got {dim}")
    if dim is None and hf_config is None:
        raise UsageError("dim: the head dimension is required (or give hf_config)")
    if position_ids is not None and start != 0:
        raise UsageError("start: cannot be combined with position_ids (ids are absolute)")
    kw = dict(style=style, base=base, rotary_dim=rotary_dim, partial=partial, scaling=scaling,
              factor=factor, original_max_pos=original_max_pos, max_pos=max_pos,
              seq_len=seq_len, beta_fast=beta_fast, beta_slow=beta_slow, mscale=mscale,
              mscale_all_dim=mscale_all_dim, attention_factor=attention_factor,
              truncate=truncate, low_freq_factor=low_freq_factor,
              high_freq_factor=high_freq_factor, short_factor=short_factor,
              long_factor=long_factor, hf_config=hf_config, hf_version=hf_version,
              layer_type=layer_type,
              layer=layer, arith=arith)
    rope_d = _rope_dict(kw, precision)
    pos = _positions(start, position_ids, cu_seqlens)
    emits, single = _emit_list(emit, ("cos-sin",))
    request = {"positions": positions, "dim": dim, "half": _layout(layout),
               "inverse": bool(inverse), "precision": precision}
    return _run("rope", request, dtype, rope_d, pos, emits, single)


def rope2d(*, height, width, dim, base=100.0, order="xy", style="gptj", emit="cos-sin",
           layout="full", dtype=None):
    """Axial 2-D RoPE for an H x W grid (tokens in row-major order): D/4 frequencies per
    axis, x block first (order "xy") or y first ("yx"); emit and layout as table.rope."""
    emits, single = _emit_list(emit, ("cos-sin",))
    return _run("rope2d", {"height": height, "width": width, "dim": dim, "base": base,
                           "order": order, "style": style, "half": _layout(layout)},
                dtype, emits=emits, single=single)


def alibi(*, heads, q_len=None, k_len=None, variant=None, max_bias=8.0, dtype=None):
    """ALiBi slopes [H], or bias matrices [H, Q, K] for variant "causal" (default with
    lengths; -inf above the diagonal), "symmetric", "fairseq", "bottom-right"."""
    return _run("alibi", {"heads": heads, "q_len": q_len, "k_len": k_len, "variant": variant,
                          "max_bias": max_bias}, dtype)


def relative(*, max_distance=None, q_len=None, k_len=None, sign="k-q", left=None, right=None,
             beyond="clamp", dtype=None):
    """Shaw's clipped relative index clip(j - i, -L, R) + L [Q, K], L = left and R =
    right (default max_distance; sign "q-k": i - j); beyond "zero": -1 outside the
    window (VITS) instead of the edge row."""
    return _run("relative", {"q_len": q_len, "k_len": k_len, "max_distance": max_distance,
                             "sign": sign, "left": left, "right": right, "beyond": beyond},
                dtype)


def t5_bucket(*, q_len=None, k_len=None, buckets=32, max_distance=128, causal=False,
              dtype=None):
    """HF T5's _relative_position_bucket of j - i [Q, K]; causal=True for decoder
    buckets (bidirectional=False)."""
    return _run("t5-bucket", {"q_len": q_len, "k_len": k_len, "buckets": buckets,
                              "max_distance": max_distance, "bidirectional": not causal},
                dtype)


def xl_relative(*, dim, q_len=None, k_len=None, form="transfo-xl", clamp_len=0, base=10000.0,
                dtype=None):
    """Transformer-XL / XLNet sinusoidal relative table R [rlen, D] for form
    "transfo-xl", "xlnet-bi" or "xlnet-uni"; clamp_len > 0 clamps positions."""
    return _run("xl-relative", {"q_len": q_len, "k_len": k_len, "dim": dim, "form": form,
                                "clamp_len": clamp_len, "base": base}, dtype)


def deberta_bucket(*, q_len=None, k_len=None, position_buckets=256,
                   max_relative_positions=512, dtype=None):
    """DeBERTa-v2/v3 relative positions i - j with log buckets [Q, K] (HF
    build_relative_position)."""
    return _run("deberta-bucket", {"q_len": q_len, "k_len": k_len,
                                   "position_buckets": position_buckets,
                                   "max_relative_positions": max_relative_positions}, dtype)

