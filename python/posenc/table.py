"""Encoding tables (``posenc table KIND``), computed in float64 and rounded once to
`dtype` (default float32 for real tables, int64 for index tables). Each function returns
a numpy array (a torch tensor when `dtype` is a torch dtype); the RoPE kinds return a
tuple of arrays when `emit` is a sequence."""

import inspect as _inspect

import numpy as np

from . import _posenc
from ._arrays import dtype_name as _dtype_name
from ._arrays import ints as _ints
from ._arrays import bf16_to_float32 as _bf16_to_float32
from ._arrays import view as _view
from ._arrays import wrap as _wrap
from ._errors import usage_errors as _usage_errors
from ._errors import with_arguments as _with_arguments
from ._options import emit_list as _emit_list
from ._options import positions_dict as _positions
from ._options import rope_dict as _rope_dict
from ._options import flag as _flag
from ._options import items as _items
from ._options import pair as _pair
from ._options import whole as _whole
from ._posenc import InputError, UsageError

__all__ = ["sinusoidal", "rope", "rope2d", "alibi", "relative", "t5_bucket", "xl_relative",
           "funnel_relative", "funnel_factorized", "deberta_bucket", "swin_index", "beit_index", "swinv2_coords", "levit_index",
           "detr_sine", "fairseq_sinusoidal", "layoutlm_bucket", "complex_order", "reformer_axial", "cpmant_bucket",
           "longt5_global", "rt_detr_sincos", "udop_bucket"]


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


# The declared parameters of each kind (include/posenc/encodings/table_fields.hpp): the
# module reads them from the request by these names and checks their ranges and choices.
_DECLARED = {}
for _f in _posenc._fields("table"):
    _DECLARED.setdefault(_f["kind"], []).append(_f)
del _f

# How a declared parameter's value goes into the request, by its type: True/False checked
# as a flag, a tensor of any numeric dtype as float64 (a bool mask too where the field
# takes one) or integers as int64, as the command reads such files.
_TAKE = {"bool": lambda v, f: _flag(v, f["name"]),
         "array": lambda v, f: _values(v, f["name"], allow_bool=f["bools"]),
         "int array": lambda v, f: _ints(v, f["name"])}


def _declared(kind, args, **extra):
    """The request of `kind`: its declared parameters taken from `args` (the function's
    keywords) as _TAKE takes their types, then `extra` (pairs, lists of tensors)."""
    request = {}
    for f in _DECLARED[kind]:
        value = args.get(f["name"])
        if value is not None or f["name"] in args:
            take = _TAKE.get(f["type"])
            request[f["name"]] = take(value, f) if take and value is not None else value
    request.update(extra)
    return request


def sinusoidal(args, *, positions, dim, base=10000.0, start=0, layout="interleaved", dtype=None):
    """Vaswani's table [N, D]: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i),
    w_i = 1 / base^(2i/D), for positions start .. start + N - 1; layout "interleaved" or
    "concat" ([sin | cos])."""
    return _run("sinusoidal", _declared("sinusoidal", args), dtype)


def rope(args, *, positions=None, dim=None, base=None, emit="cos-sin", layout="full", dtype=None,
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
    if dim is not None and _whole(dim, "dim") <= 0:
        raise UsageError(f"dim: must be at least 1, got {dim}")
    if dim is None and hf_config is None:
        raise UsageError("dim: the head dimension is required (or give hf_config)")
    if position_ids is not None and start != 0:
        raise UsageError("start: cannot be combined with position_ids (ids are absolute)")
    rope_d = _rope_dict(args)  # the ROPE OPTIONS among the arguments
    pos = _positions(start, position_ids, cu_seqlens)
    emits, single = _emit_list(emit, ("cos-sin",))
    request = {"positions": positions, "dim": dim, "layout": layout,
               "inverse": _flag(inverse, "inverse"), "precision": precision}
    return _run("rope", request, dtype, rope_d, pos, emits, single)


def rope2d(args, *, height, width, dim, base=100.0, order="xy", style="gptj", emit="cos-sin",
           layout="full", dtype=None):
    """Axial 2-D RoPE for an H x W grid (tokens in row-major order): D/4 frequencies per
    axis, x block first (order "xy") or y first ("yx"); emit and layout as table.rope."""
    emits, single = _emit_list(emit, ("cos-sin",))
    return _run("rope2d", _declared("rope2d", args), dtype, emits=emits, single=single)


def alibi(args, *, heads, q_len=None, k_len=None, variant=None, max_bias=8.0, dtype=None):
    """ALiBi slopes [H], or bias matrices [H, Q, K] for variant "causal" (default with
    lengths; -inf above the diagonal), "symmetric", "fairseq", "bottom-right"."""
    return _run("alibi", _declared("alibi", args), dtype)


def relative(args, *, max_distance=None, q_len=None, k_len=None, sign="k-q", left=None,
             right=None, beyond="clamp", embeddings=None, dtype=None):
    """Shaw's clipped relative index clip(j - i, -L, R) + L [Q, K], L = left and R =
    right (default max_distance; sign "q-k": i - j); beyond "zero": -1 outside the
    window (VITS) instead of the edge row. embeddings, a learned table [L + R + 1, dim]
    (distance_embedding, pe_k, emb_rel_k): its rows gathered, [Q, K, dim] (zeros for -1),
    instead of the index."""
    return _run("relative", _declared("relative", args), dtype)


def t5_bucket(args, *, q_len=None, k_len=None, buckets=32, max_distance=128, causal=False,
              dtype=None):
    """HF T5's _relative_position_bucket of j - i [Q, K]; causal=True for decoder
    buckets (bidirectional=False)."""
    return _run("t5-bucket", _declared("t5-bucket", args,
                                       bidirectional=not _flag(causal, "causal")), dtype)


def xl_relative(args, *, dim, q_len=None, k_len=None, form="transfo-xl", clamp_len=0,
                base=10000.0, dtype=None):
    """Transformer-XL / XLNet sinusoidal relative table R [rlen, D] for form
    "transfo-xl", "xlnet-bi" or "xlnet-uni"; clamp_len > 0 clamps positions."""
    return _run("xl-relative", _declared("xl-relative", args), dtype)


def funnel_relative(args, *, seq_len, dim, block=0, shift=1, separate_cls=False,
                    truncate_seq=False, base=10000.0, dtype=None):
    """Funnel Transformer relative_shift position embeddings of a block [rows, D] (HF
    get_position_embeds()[block][shift - 1]): shift 2 for the block's first layer
    (queries pooled, keys not), 1 otherwise."""
    return _run("funnel-relative", _declared("funnel-relative", args), dtype)


def funnel_factorized(args, *, seq_len, dim, emit="phi", block=0, key_block=None,
                      separate_cls=False, truncate_seq=False, base=10000.0, dtype=None):
    """One of Funnel Transformer's factorized attention tables (emit "phi", "pi", "psi"
    or "omega") [rows, D], its rows pooled `block` times (phi, pi) or `key_block` times
    (psi, omega; default block); a sequence of them (("phi", "psi")) returns a tuple."""
    emits, single = _emit_list("phi" if emit is None else emit, ())
    return _run("funnel-factorized", _declared("funnel-factorized", args), dtype, emits=emits,
                single=single)


def deberta_bucket(args, *, q_len=None, k_len=None, position_buckets=256,
                   max_relative_positions=512, dtype=None):
    """DeBERTa-v2/v3 relative positions i - j with log buckets [Q, K] (HF
    build_relative_position)."""
    return _run("deberta-bucket", _declared("deberta-bucket", args), dtype)



def _values(x, what, allow_bool=False):
    """A learned table, frequencies or a pixel mask (`allow_bool`) of any numeric dtype as
    C-contiguous float64, as the command reads such files; None for None."""
    if x is None:
        return None
    a, name, _ = _view(x, what)
    if name == "bool" and not allow_bool:
        raise InputError(f"{what}: expected numbers, got bool")
    if name == "bf16":
        a = _bf16_to_float32(a)
    return np.ascontiguousarray(a, dtype=np.float64)


def _window(window, what="window"):
    """(H, W) of a window given as H (square) or (H, W), as the command's --window H [W]."""
    if window is None:
        return None
    if np.ndim(window) == 0 and not isinstance(window, (str, bytes)):
        return (_whole(window, what),) * 2
    try:
        # The length first: tuple() of an empty array of shape (2**31, 0) would make 2**31
        # views out of no data.
        sides = (tuple(window) if not isinstance(window, (str, bytes)) and len(window) <= 2
                 else ())
    except TypeError:
        sides = ()
    if len(sides) not in (1, 2):
        raise UsageError(f"{what}: expected H or (H, W), got {window!r:.40}")
    return (_whole(sides[0], what), _whole(sides[-1], what))


def swin_index(args, *, window, bias_table=None, dtype=None):
    """Swin relative_position_index of an H x W window (`window` H or (H, W)):
    (dy + H-1)(2W-1) + dx + W-1, [HW, HW] integers; with a learned bias_table
    [(2H-1)(2W-1), heads] the bias it gives, [heads, HW, HW] (HF SwinSelfAttention)."""
    return _run("swin-index", _declared("swin-index", args, window=_window(window)), dtype)


def beit_index(args, *, window, bias_table=None, dtype=None):
    """BEiT / Data2Vec-vision relative_position_index: swin_index with a class token
    first and 3 more entries (class to token, token to class, class to class),
    [HW+1, HW+1]; with bias_table [(2H-1)(2W-1) + 3, heads] the bias [heads, HW+1, HW+1]."""
    return _run("beit-index", _declared("beit-index", args, window=_window(window)), dtype)


def swinv2_coords(*, window, pretrained_window=None, mlp=None, dtype=None):
    """Swin-V2 relative_coords_table [2H-1, 2W-1, 2]: sign(c) log2(1 + |c|) / 3 with
    c = 8 d / (P - 1) for the offsets d of the window; pretrained_window (P_H, P_W)
    (HF pretrained_window_size, each at least 2) divides instead of the window.
    mlp (W1 [hidden, 2], B1 [hidden], W2 [heads, hidden]), HF's
    continuous_position_bias_mlp: the bias 16 sigmoid(mlp(coords)) gathered by
    relative_position_index, [heads, HW, HW], instead."""
    w1, b1, w2 = (None, None, None) if mlp is None else _items(
        mlp, 3, "mlp", "the three weights (W1, B1, W2)")
    return _run("swinv2-coords", {"window": _window(window),
                                  "pretrained_window": _window(pretrained_window,
                                                               "pretrained_window"),
                                  "mlp": None if mlp is None else [
                                      _values(w, "mlp") for w in (w1, b1, w2)]}, dtype)


def levit_index(args, *, resolution, stride=1, bias_table=None, dtype=None):
    """LeViT attention_bias_idxs [R_out^2, R^2]: the offset (|dy|, |dx|) numbered
    |dy| R + |dx| between queries (every stride-th point, R_out = (R - 1) / stride + 1)
    and keys of an R x R grid; with attention_biases bias_table [heads, R^2] the bias
    [heads, R_out^2, R^2]."""
    return _run("levit-index", _declared("levit-index", args), dtype)


def detr_sine(args, *, embedding_dim, mask=None, size=None, temperature=10000.0, normalize=True,
              scale=None, layout="channels", temperature_width=None, offset=0.0, dtype=None):
    """DETR's 2-D sine embedding of a pixel mask [b, H, W] (1 = pixel, 0 = padding; bool
    or numbers) or of an all-ones mask of size (H, W) (HF DetrSinePositionEmbedding):
    y then x channels, E = embedding_dim each, sin/cos interleaved; [b, 2E, H, W], or
    [b, H*W, 2E] for layout "tokens". normalize=False uses the raw cumulative sums
    (the command's --no-normalize); scale defaults to 2 pi. temperature_width: DAB-DETR's
    temperature of the x channels (temperature is then its temperature_height); offset:
    subtracted before normalising (Deformable DETR, Grounding-DINO: 0.5)."""
    size = None if size is None else tuple(_whole(n, "size") for n in _pair(size, "size"))
    return _run("detr-sine", _declared("detr-sine", args, size=size), dtype)


def rt_detr_sincos(args, *, size, embedding_dim=256, temperature=10000.0, dtype=None):
    """RT-DETR's 2-D sin-cos embedding of an H x W feature map (HF RTDetrHybridEncoder.
    build_2d_sincos_position_embedding; also RT-DETRv2, D-FINE): [1, H*W, E], channels
    sin/cos of the row then of the column, frequencies 1 / T^(k / (E/4))."""
    return _run("rt-detr-sincos", _declared("rt-detr-sincos", args,
                                            size=_window(size, "size")), dtype)


def fairseq_sinusoidal(args, *, dim, positions=None, padding_idx=None, input_ids=None,
                       past_length=0, dtype=None):
    """fairseq sinusoidal positions (HF M2M-100, NLLB, XGLM get_embedding): rows
    [sin | cos] with frequencies exp(-i ln(10000) / (D/2 - 1)), the row padding_idx
    zero, [positions, D]; or for token ids input_ids [b, s] (needs padding_idx) the
    embeddings [b, s, D] at positions cumsum(non-padding) + past_length + padding_idx."""
    return _run("fairseq-sinusoidal", _declared("fairseq-sinusoidal", args), dtype)


def layoutlm_bucket(args, *, axis="1d", seq_len=None, position_ids=None, bbox=None, buckets=None,
                    max_distance=None, bias_table=None, dtype=None):
    """LayoutLMv2/v3 relative buckets (HF relative_position_bucket, bidirectional) of
    c_j - c_i per row, [b, s, s] integers: axis "1d" of positions 0 .. seq_len-1 or
    position_ids [b, s]; "x" / "y" of bbox [b, s, 4] (x0, y0, x1, y1). buckets and
    max_distance default to 32, 128 (1d) or 64, 256 (boxes). bias_table [heads, buckets]
    gives the bias [b, heads, s, s] instead; axis "xy" takes a pair (WX, WY) and sums
    the x and y biases."""
    weights = bias_table if isinstance(bias_table, tuple) else (bias_table,)
    if len(weights) != 2 and isinstance(bias_table, tuple):
        raise UsageError(f"bias_table: expected one weight or a pair (x, y), got "
                         f"{len(bias_table)}")
    return _run("layoutlm-bucket", _declared("layoutlm-bucket", args, bias_table=None if (
        bias_table is None) else [_values(w, "bias_table") for w in weights]), dtype)


def udop_bucket(args, *, axis="1d", seq_len=None, bbox=None, buckets=32, max_distance=None,
                scaling_factor=None, bias_table=None, dtype=None):
    """UDOP relative buckets (HF RelativePositionBias1D / Horizontal / Vertical): T5
    bidirectional buckets of trunc((p_j - p_i) * scaling_factor), [b, s, s] integers, for
    axis "1d" (positions 0 .. seq_len-1, or of bbox's s), "horizontal" ((x0 + x1) / 2 of
    bbox [b, s, 4]) or "vertical" ((y0 + y1) / 2); a float32 bbox is computed in float32
    as HF does. bias_table [buckets, heads] (nn.Embedding weight) gives the bias
    [b, heads, s, s]; axis "all" takes three (1d, horizontal, vertical) and sums them."""
    tables = list(bias_table) if isinstance(bias_table, (tuple, list)) else (
        [] if bias_table is None else [bias_table])
    if len(tables) > 3:
        raise UsageError(f"bias_table: at most three weights, got {len(tables)}")
    f32 = bbox is not None and _view(bbox, "bbox")[1] == "f32"
    return _run("udop-bucket", _declared(
        "udop-bucket", args, bbox_f32=f32,
        bias_table=[_values(w, "bias_table") for w in tables] or None), dtype)


def complex_order(args, *, frequency, amplitude=None, phase=None, positions=None, start=0,
                  input_ids=None, dtype=None):
    """Wang et al. 2020 complex word-order embeddings r exp(i (w pos + theta)): real
    parts then imaginary parts, [2, positions, D] for vectors w [D] (positions start ..),
    or [2, b, s, D] for tables w [V, D] and token ids input_ids [b, s] (token (b, s) at
    position start + s). amplitude r (default 1) and phase theta (default 0) have w's
    shape."""
    return _run("complex-order", _declared("complex-order", args), dtype)


def reformer_axial(args, *, axial_shape, weights, positions=None, position_ids=None, dtype=None):
    """Reformer axial position embeddings (HF AxialPositionEmbeddings): each weight of
    `weights` (one per side of axial_shape, shaped as HF stores them: [N1, 1, d1],
    [1, N2, d2], ..) broadcast over the grid and concatenated along the features, rows
    in row-major order: [N1 N2 .., hidden]; the rows 0 .. positions-1, or the rows of
    position_ids [b, s] ([b, s, hidden]) as HF's eval-mode forward selects them."""
    if weights is None or isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise UsageError("weights: expected a sequence of weights, one per axis")
    if isinstance(axial_shape, (str, bytes)) or not hasattr(axial_shape, "__iter__"):
        raise UsageError(f"axial_shape: expected the grid's sides, got {axial_shape!r:.40}")
    return _run("reformer-axial", _declared(
        "reformer-axial", args, axial_shape=[_whole(n, "axial_shape") for n in axial_shape],
        weights=[_values(w, "weights") for w in weights]), dtype)


def cpmant_bucket(args, *, segment_ids=None, key_segment_ids=None, seq_len=None, segments=32,
                  buckets=512, max_distance=2048, bias_table=None, dtype=None):
    """CPM-Ant segment-aware relative buckets (HF CpmAntSegmentPositionEmbedding),
    [b, q, k] integers: T5 bidirectional buckets of j - i within a segment, buckets +
    q_seg * segments + k_seg across segments, for segment_ids [b, s] (queries and keys;
    key_segment_ids [b, k] for other keys) or seq_len tokens of segment 0. bias_table
    (relative_attention_bias [segments^2 + buckets, heads]) gives the bias
    [b, heads, q, k] instead."""
    return _run("cpmant-bucket", _declared(
        "cpmant-bucket", args, segment_ids=_ints(segment_ids, "segment_ids"),
        key_segment_ids=_ints(key_segment_ids, "key_segment_ids")), dtype)


def longt5_global(args, *, attention_mask=None, seq_len=None, global_block_size=16,
                  emit="block-ids", dtype=None):
    """LongT5's transient-global index maps (HF _make_global_fixed_block_ids,
    _make_side_relative_position_ids) for attention_mask [b, s] of 1 and 0 or seq_len
    tokens: emit "block-ids" [b, s] (-1 for padding), "segment-ids" [b, s // G] or
    "side-positions" [b, s, s // G], integers."""
    return _run("longt5-global", _declared("longt5-global", args), dtype)


# Python's own exceptions from bad arguments as UsageError (posenc._errors); a kind
# whose first parameter is `args` is handed its call's arguments (with_arguments, outside
# so that a call Python refuses stays a TypeError).
for _name in __all__:
    _f = _usage_errors(globals()[_name])
    globals()[_name] = _with_arguments(_f) if "args" in _inspect.signature(_f).parameters else _f
del _name, _f
