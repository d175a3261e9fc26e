"""posenc from Python: positional-encoding tables, RoPE, attention, comparison and
NPY/HDF5 references, computed by posenc's C++ library (the same code as the ``posenc``
command, with the command's options as keyword arguments).

- ``posenc.table.rope(positions=..., dim=..., ...)`` and the other ``posenc.table`` kinds
- ``posenc.rope(x, ...)``: rotary embedding, in place with ``out=x``
- ``posenc.rope_ids(family, layout)``: M-RoPE position ids of a prompt (``posenc rope-ids``)
- ``posenc.attention(q, k, v, ...)``
- ``posenc.combine(out_partial, lse_partial, ...)``: split-KV combine (``posenc combine``)
- ``posenc.compare(a, b, ...)``, ``posenc.read(ref)``, ``posenc.write(ref, x)``

Arrays: numpy arrays, CPU torch tensors, and anything numpy views without a copy
(buffer protocol, ``__array_interface__``, DLPack). f16 is numpy's float16; bf16 is a
torch.bfloat16 tensor or uint16 bit patterns wrapped as ``posenc.BF16(bits)`` (bf16
results come back as torch tensors for torch inputs, else as uint16 bit patterns).
fp8 (float8_e4m3fn, float8_e5m2) is a torch float8 tensor (torch 2.1 and later) or uint8
codes wrapped as ``posenc.FP8(codes, "e4m3fn")``; fp8 inputs are widened exactly.
Torch inputs give torch results sharing memory with the numpy ones.

Errors are ``posenc.Error`` subclasses, one per exit status of the command:
``UsageError`` (2: a bad option value), ``InputError`` (3: bad input data, shapes),
``OutputError`` (4: an output could not be written); ``DifferError`` (1) is raised by
``CompareResult.check()``. The messages are the library's, naming the keyword argument.
Any bad argument (None for a tensor, a number out of range, a wrong type) is a
UsageError; a call Python itself refuses (an unknown keyword) is its TypeError, and a
request larger than memory may be a MemoryError. The GIL is released while posenc
computes; ``set_threads`` holds for every thread, and a process forked after the import
computes single-threaded.
"""

import warnings

import numpy as np

from . import _posenc
from ._arrays import BF16, bf16_to_float32, float32_to_bf16
from ._arrays import FP8
from ._arrays import arg as _arg
from ._arrays import contiguous as _contiguous
from ._arrays import dtype_name as _dtype_name
from ._arrays import empty as _empty
from ._arrays import required as _required
from ._arrays import torch_module as _torch_module
from ._arrays import view as _view
from ._arrays import wrap as _wrap
from ._options import axes_text as _axes_text
from ._options import emit_list as _emit_list
from ._arrays import is_real as _is_real
from ._options import layout_dicts as _layout_dicts
from ._options import positions_dict as _positions
from ._options import rope_dict as _rope_dict
from ._options import rope_tables as _tables
from ._options import ATTENTION_FIELDS as _ATTENTION_FIELDS
from ._options import ATTENTION_TENSORS as _ATTENTION_TENSORS
from ._options import KVCACHE_TENSORS as _KVCACHE_TENSORS
from ._options import flag as _flag
from ._options import items as _items
from ._options import number as _number
from ._options import pair as _pair
from ._options import whole as _whole
from ._options import path as _path
from ._errors import usage_errors as _usage_errors
from ._errors import with_arguments as _with_arguments
from ._posenc import Error, InputError, OutputError, UsageError

__version__ = _posenc.__version__

__all__ = ["rope", "rope_ids", "attention", "compare", "read", "write", "table", "CompareResult",
           "BF16", "bf16_to_float32", "float32_to_bf16", "Error", "UsageError", "InputError",
           "OutputError", "DifferError", "kernel_variant", "set_threads", "__version__", "combine",
           "VerdictResult", "FP8"]


class DifferError(Error):
    """Two tensors differ (exit status 1 of ``posenc compare``)."""

    status = 1


@_usage_errors
def set_threads(n):
    """Worker threads for the posenc calls that follow, from any thread of the process:
    1 to 4096, or 0 for all cores, as the command's -j/--threads (UsageError otherwise).
    Each call runs on that many OpenMP workers and leaves the calling thread's own
    OpenMP setting (torch's, say) as it was. When a memory or process limit lets fewer
    threads start, posenc runs on as many as could, with a RuntimeWarning. In a process
    forked from one that imported posenc (multiprocessing, DataLoader workers) posenc
    computes on the calling thread alone: OpenMP's workers do not survive fork. Results
    do not depend on the thread count."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
        raise UsageError(f"threads: expected an integer, got {type(n).__name__} {n!r}")
    if not 0 <= n <= 4096:
        raise UsageError(f"threads: must be from 0 (all cores) to 4096, got {n}")
    got = _posenc.set_threads(int(n))
    if n > 0 and got < n:
        warnings.warn(f"set_threads({n}): only {got} threads could be started (a memory or "
                      f"process limit); running on {got}", RuntimeWarning, stacklevel=3)


def kernel_variant():
    """The RoPE kernel this process runs: "avx512fp16", "avx512", "avx2" or "base"."""
    return _posenc.kernel_variant()


@_with_arguments
@_usage_errors
def rope(args, x, *, axes=None, dtype=None, out=None, inverse=False, style=None, base=None,
         rotary_dim=None, partial=None, rotary_last=None, rope_interleave=None, start=0,
         position_ids=None, cu_seqlens=None, scaling=None, factor=None,
         original_max_pos=None, max_pos=None, seq_len=None, beta_fast=None, beta_slow=None,
         mscale=None, mscale_all_dim=None, attention_factor=None, truncate=None,
         low_freq_factor=None, high_freq_factor=None, short_factor=None, long_factor=None,
         hf_config=None, hf_version=None, layer_type=None, layer=None, precision=None,
         arith=None,
         rope2d=None, rope2d_ids=False, order=None, mrope_section=None,
         mrope_interleaved=False, layout=None, inv_freq=None, freq_scale=None, coords=None,
         prefix_tokens=None, merge_window=None, angles=None, allow_nonfinite=False,
         cos=None, sin=None, seqlen_offsets=None, torch_ops=False):
    """Rotary position embedding of every vector along axis d of `x`, the position of
    each taken from axis s (``posenc rope``). The cos/sin table of a call's positions is
    kept for later calls at the same positions and parameters (q and k of every layer):
    the two most recent, 256 MiB together at most, for the life of the process.

    x: array or CPU torch tensor of f16, bf16, f32, f64 (or integers: f64 result).
    axes: letters b, h, s, d (default by rank: "sd", "bsd", "bhsd"; "bshd" works as is).
    dtype: result type (default: x's float type); "f64", "f32", "f16", "bf16", a numpy
        or torch dtype.
    out: where the result goes; ``out=x`` rotates x in place (no copy when x is
        C-contiguous: the data of x is rewritten). Returns `out` when given.
    inverse: the inverse rotation R^T.
    style: "neox" (pairs i, i+R/2; alias "half") or "gptj" (2i, 2i+1; "interleaved").
    base, rotary_dim, partial, rotary_last, rope_interleave: the variant, as the
        command's --base, --rotary-dim, --partial, --rotary-last, --rope-interleave.
    start, position_ids ([s] or [b, s] integers; [3, ...] with mrope_section, [2, ...]
        with rope2d_ids), cu_seqlens ([n+1] packed-sequence boundaries): positions.
    scaling: "none", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"
        with factor, original_max_pos, max_pos, seq_len, beta_fast, beta_slow, mscale,
        mscale_all_dim, attention_factor, truncate (False = --no-truncate),
        low_freq_factor, high_freq_factor, short_factor, long_factor (lists, arrays,
        comma lists or tensor references): HF rope_scaling's names.
    hf_config: a HF config.json (path) supplying all of the above; explicit keywords win.
        layer_type / layer pick its layers; hf_version ("4.51", "5") reads it as that
        transformers release does. A config value RoPE cannot use (an odd head_dim, a
        rope_theta whose frequencies overflow) raises InputError naming the file and the
        key; a keyword's, UsageError naming the keyword. M-RoPE configs (Qwen2-VL,
        Qwen3-VL) without position_ids use HF's text default: every axis at the position.
    precision: "f64" (default, correctly rounded) or "f32" (arith "exact" only).
    arith: "exact" (default), "hf", "meta" or "ggml": a framework's bits.
    rope2d: (H, W) axial 2-D RoPE over a grid (base defaults to 100); order "xy"/"yx";
        rope2d_ids: 2-D coordinates from position_ids [2, s].
    mrope_section: M-RoPE (t, h, w) pair counts (or "16,24,24"); mrope_interleaved.
    layout: the RoPE variant as data, as --layout: "axial", "even-odd" (Pixtral),
        "sections:T,H,W", "interleaved:T,H,W", "chunks[:N]" (V-JEPA2), "ernie-vl:H,W,T"
        (ERNIE-4.5-VL, with style "gptj"), "xdrope:S1,...,Sn" (HunYuan-VL); inv_freq: any
        assignment [n, R/2] (angle j = sum of coordinate a * inv_freq[a, j]);
        freq_scale: multiplies the frequencies (a number or "2pi", DINOv3); style
        "tiled": V-JEPA2's pairing. A layout of n axes takes position_ids [n, s] or
        [n, b, s], integers or reals (float position_ids are real coordinates).
    coords: generated coordinates, "grid:E1,E2,..." or "centres:H,W" (DINOv3), with
        prefix_tokens (unrotated tokens before the grid) and merge_window (Qwen2-VL's
        vision patch order). angles: the angles themselves, [s, R/2] or [b, s, R/2].
    allow_nonfinite: rotate NaN/Inf instead of raising InputError.
    cos, sin: the caller's tables, [rows, R/2] (flash-attn's rotary_cos/rotary_sin) or
        [rows, R] (HF's cos/sin), any float dtype, applied as given (bf16 values widened
        exactly); the token at position p takes row p; R from the width unless
        rotary_dim. They replace the frequency keywords (base, scaling, hf_config, ...).
    seqlen_offsets: [b] integers (flash-attn's seqlen_offsets): token s of entry b at
        start + seqlen_offsets[b] + s; with cu_seqlens one per packed sequence.
    torch_ops: with cos/sin, flash-attn's apply_rotary_emb_torch bit for bit (each product
        and the sum rounded to torch's promoted type of x and the tables).
    """
    _pos_tables = _tables(args)
    a, in_name, like = _view(x, "x")
    axes = _axes_text(axes)
    rope_d = _rope_dict(args)
    pos = _positions(start, None if _is_real(position_ids) else position_ids, cu_seqlens)
    inverse, allow_nonfinite = _flag(inverse, "inverse"), _flag(allow_nonfinite, "allow_nonfinite")
    mrope_interleaved = _flag(mrope_interleaved, "mrope_interleaved")
    rope2d_ids = _flag(rope2d_ids, "rope2d_ids")
    apply = {}
    if inverse:
        apply["inverse"] = True
    if precision is not None:
        apply["precision"] = precision
    if allow_nonfinite:
        apply["allow_nonfinite"] = True
    if _flag(torch_ops, "torch_ops"):
        apply["torch_ops"] = True
    if rope2d is not None:
        apply["rope2d"] = _pair(rope2d, "rope2d")
    if order is not None:
        apply["order"] = order
    if mrope_section is not None:
        apply["mrope_section"] = mrope_section
    if mrope_interleaved:
        apply["mrope_interleaved"] = True
    if rope2d_ids:
        apply["rope2d_ids"] = True
    pos = _layout_dicts(pos, apply, rope_d, position_ids, layout, inv_freq, freq_scale,
                        coords, prefix_tokens, merge_window, angles)
    if _pos_tables:
        pos = dict(pos, **_pos_tables)
    want = _dtype_name(dtype)
    if want is None or want == "same":
        want = in_name if in_name in _FLOAT_NAMES else "f64"
    src = _contiguous(a)
    if out is None:
        dst = _empty(a.shape, want)
        _posenc.rope(src, in_name, dst, want, axes, rope_d, pos, apply)
        return _wrap(dst, want, like)
    if out is x:
        o, out_name = a, in_name
    else:
        o, out_name, _ = _view(out, "out")
    if dtype is not None and out_name != want:
        raise UsageError(f"out: dtype {out_name} differs from dtype {want}")
    if o.shape != a.shape:
        raise UsageError(f"out: shape {o.shape} differs from x's {a.shape}")
    if not o.flags.writeable:
        raise UsageError("out: the array is read-only")
    same = o is a or (o.__array_interface__["data"][0] == a.__array_interface__["data"][0]
                      and o.strides == a.strides and o.dtype == a.dtype)
    if (o.flags.c_contiguous and o.dtype.isnative and o.flags.aligned
            and (same or not np.shares_memory(o, a))):
        # In place (src is x itself) or into separate memory: no copy.
        _posenc.rope(src, in_name, o, out_name, axes, rope_d, pos, apply)
    elif not same and np.shares_memory(o, a):
        raise UsageError("out: overlaps x without being x")
    else:
        tmp = _empty(a.shape, out_name)
        _posenc.rope(src, in_name, tmp, out_name, axes, rope_d, pos, apply)
        o[...] = tmp
    return out


_FLOAT_NAMES = ("f16", "bf16", "f32", "f64")
# The relative terms' declared parameters (Transformer-XL / XLNet / Funnel, DeBERTa).
_RELATIVE_FIELDS = tuple(_posenc._fields("relative"))

_ROPE_OPTION_NAMES = ("style", "base", "rotary_dim", "partial", "rotary_last",
                      "rope_interleave", "scaling", "factor", "original_max_pos", "max_pos",
                      "seq_len", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                      "attention_factor", "truncate", "low_freq_factor", "high_freq_factor",
                      "short_factor", "long_factor", "inverse", "position_ids")


def _kvcache_args(args):
    """The KV-cache arguments of attention() for the module (None when none is given); the
    caches k and v must be writable C-contiguous arrays when k_new updates them in place."""
    if all(args[n] is None for n in _KVCACHE_TENSORS) and not args["rotary_interleaved"]:
        return None
    kv = {n: _arg(args[n], n) for n in _KVCACHE_TENSORS}
    kv["rotary_interleaved"] = _flag(args["rotary_interleaved"], "rotary_interleaved")
    kv["update_cache"] = _flag(args["update_cache"], "update_cache")
    if args["k_new"] is not None and kv["update_cache"]:
        for name in ("k", "v"):
            x = args[name]
            a = None if x is None else _view(x, name)[0]
            if a is not None and (_contiguous(a) is not a or not a.flags.writeable):
                raise UsageError(f"{name}: the cache is updated in place and must be a writable "
                                 "C-contiguous array (or give update_cache=False)")
    return kv


@_with_arguments
@_usage_errors
def attention(args, q, k, v=None, *, axes=None, emit=None, scale=None, causal=False, window=None,
              sliding_window=None, chunk_size=None, sink_tokens=None, attn_temperature=None,
              llama4_scaling=None, key_lengths=None, seqused_q=None, seqused_k=None,
              cu_seqlens_q=None, cu_seqlens_k=None,
              mask=None, alibi=None, alibi_max_bias=None, alibi_slopes=None, t5_bias=None,
              t5_buckets=None,
              t5_max_distance=None, t5_causal=False, relative_k=None, relative_v=None,
              max_distance=None, decomposed_rel_pos=None, grid=None, key_grid=None,
              clipped_bias=None, clipped_symmetric=False, wavlm_gate=None,
              relative_left=None, relative_right=None, relative_sign=None,
              relative_beyond=None, relative_proj=None, per_dim_scale=None,
              global_kv=None, global_block_size=None, global_bias=None,
              softcap=None, sinks=None, masked_rows=None, dtype=None,
              qv=None, q_descale=None, k_descale=None, v_descale=None, k_scale=None,
              v_scale=None, p_dtype=None,
              max_memory=None, allow_nonfinite=False, precision=None, arith=None,
              hf_config=None, hf_version=None, layer_type=None, layer=None,
              cu_seqlens=None,
              rope=False, start=0, position_ids=None, inverse=False, style=None, base=None,
              rotary_dim=None, partial=None, rotary_last=None, rope_interleave=None,
              scaling=None, factor=None, original_max_pos=None, max_pos=None, seq_len=None,
              beta_fast=None, beta_slow=None, mscale=None, mscale_all_dim=None,
              attention_factor=None, truncate=None, low_freq_factor=None,
              high_freq_factor=None, short_factor=None, long_factor=None,
              rel_keys=None, content_bias=None, position_bias=None, segment_ids=None,
              segment_embed=None, segment_bias=None, segment_index=None, rel_shift=None,
              rel_kernel=None, factorized=None, separate_cls=False, pos_key=None,
              pos_query=None, pos_att_type=None, position_buckets=None,
              max_relative_positions=None, grad_output=None, forward_output=None,
              forward_lse=None, cache_seqlens=None,
              cache_batch_idx=None, cache_leftpad=None, page_table=None, k_new=None,
              v_new=None, rotary_cos=None, rotary_sin=None, rotary_seqlens=None,
              rotary_interleaved=False, update_cache=True, cu_seqlens_k_new=None):
    """Attention of q over k (and v): logits, probs, output, lse (``posenc attention``).

    q [b, hq, sq, d], k [b, hk, sk, d], v [b, hk, sk, dv] (any `axes` order; rank 3
    "bsd" and 2 "sd" too); hk divides hq (grouped-query).
    emit: one of "logits", "probs", "output", "lse" (returns that array) or a sequence
        of them (returns a tuple in that order). Default ("probs", "output"), or
        "probs" without v.
    scale: multiplies q.k (default 1/sqrt(d)). causal: True (bottom-right), "top-left"
        or "bottom-right". window: LEFT or (LEFT, RIGHT) (-1 unbounded).
        sliding_window: HF's W. chunk_size: Llama-4 chunks (positions floored).
        sink_tokens: N, StreamingLLM sink tokens (FlashAttention's sink_token_length):
        the first N keys stay visible left of the window (not the `sinks` logits).
        attn_temperature:
        (SCALE, FLOOR) of Llama-4's temperature tuning. llama4_scaling: (BETA, PERIOD),
        queries at position p times 1 + BETA log(1 + floor(p / PERIOD)) (Ministral-3).
    seqused_q [b], seqused_k [b]: FlashAttention's per-entry lengths; masks align to each
        entry's own i + seqused_k - seqused_q, padded query rows give 0.
    cu_seqlens_q [n+1], cu_seqlens_k [n+1] (int32/int64): FlashAttention's varlen form;
        q [total_q, hq, d], k, v [total_k, hk, d] (axes "shd"), each sequence a run of its
        own (seqused_q/seqused_k then [n]); emits output and lse only (default: the
        output array alone), lse [hq, total_q].
    key_lengths [b]; mask (bool/int keep, or additive float), broadcastable to
        [b, h, sq, sk]; cu_seqlens: packed sequences.
    alibi: True or "causal", "symmetric", "bottom-right", "fairseq", "bloom", "falcon";
        alibi_max_bias (default 8).
    alibi_slopes: float [hq] or [b, hq] (FlashAttention's alibi_slopes): the slopes of
        the alibi form in force; alone, slope*j when causal with no left window, else
        -slope*|i + sk - sq - j| with each entry's own lengths (posenc-attention(1)).
    t5_bias [buckets, hq] with t5_buckets, t5_max_distance, t5_causal.
    relative_k [2M+1, d], relative_v [2M+1, dv], max_distance: Shaw relative tables.
    decomposed_rel_pos (RH [LH, d], RW [LW, d]) with grid (H, W) and key_grid (H, W):
        SAM / ViTDet decomposed relative positions. clipped_bias [2M, hq] (or [M, hq]
        with clipped_symmetric): Phi-4-multimodal audio's clipped-distance bias.
        wavlm_gate (X [b, sq, hidden], W [8, hidden/hq], B [8], C [hq]): WavLM's gate
        on t5_bias.
    relative_left, relative_right, relative_sign ("k-q" or "q-k"), relative_beyond
        ("clamp" or "zero"): the relative tables' window (--relative-left, ...).
        relative_k may also be per head [rows, hq, d].
    relative_proj [hq d, D] (with relative_left and relative_right), per_dim_scale [d]:
        Gemma-3n audio's timing-signal relative keys and per-dimension query scale.
    global_kv (KG [b, hk, n, d], VG [b, hk, n, dv]) with global_block_size G (n = sk //
        G) and global_bias [buckets, hq] (the t5_* bucket options): LongT5's
        transient-global side keys, columns sk .. sk + n - 1 of the scores.
    softcap C; sinks [hq]; masked_rows "zero" or "nan"; dtype of the results;
    max_memory in bytes (InputError when the run would need more; default physical
    memory, 0 no limit; the command's --max-memory also takes a size such as 4G);
    allow_nonfinite.
    precision "f64" (default for every input dtype: float64, each result rounded once)
        or "f32" (faster); arith "exact", "hf" (HF eager attention's bits) or
        "fa-baseline" (FlashAttention's PyTorch baseline: attention_ref with upcast=False,
        reorder_ops=True, each op rounded to q's dtype as CUDA does).
    qv (q's shape with dv): FlashAttention-3's qv, scores += scale qv.v, default scale
        1/sqrt(d + dv). q_descale, k_descale, v_descale [b, hk]: fp8 descales, the inputs
        multiplied in float32 first (attention_ref). k_scale, v_scale: vLLM's per-tensor
        fp8 KV-cache scales (k times k_scale, v times v_scale), as k_descale and
        v_descale filled with them; not with those. p_dtype "f32", "f16", "bf16",
        "e4m3fn" or "e5m2": P rounded before P.V (FlashAttention's intermediate_dtype).
    hf_config (path), hf_version, layer_type, layer: a HF config's scale, soft-cap, windows, chunks,
        temperature and ALiBi (explicit keywords win), its shapes checked.
    rope=True rotates q and k first, with the ROPE OPTIONS of posenc.rope (start,
        position_ids, inverse, style, base, scaling, factor, ...; hf_config's RoPE).
    rel_keys, content_bias, position_bias, segment_ids, segment_embed, segment_bias:
        Transformer-XL / XLNet; with segment_index (the seg_embed row per score, HF
        Funnel's token_type_mat), rel_shift (Funnel's _relative_shift_gather shift),
        rel_kernel (r_kernel [d_model, h, d]: rel_keys unprojected), factorized
        ((phi, pi, psi, omega), instead of rel_keys) and separate_cls (the cls_mask):
        Funnel. pos_key, pos_query, pos_att_type ("c2p", "p2c" or
        "c2p,p2c"), position_buckets, max_relative_positions: DeBERTa.
    grad_output: dO (the output's shape and layout): the backward pass instead
        (posenc-attention(1), GRADIENTS). emit then names gradients among "dq", "dk",
        "dv", "softmax_d" (rowsum(dO O)), "lse", "dbias" (of a float mask), "dsinks",
        "dt5_bias" (of the t5_bias table), "dqv" (of qv), "drelative_k", "drelative_v"
        (of Shaw's relative_k, relative_v tables), "dclipped_bias" (of clipped_bias),
        "drel_pos_h", "drel_pos_w" (of decomposed_rel_pos's tables), "dper_dim_scale",
        "drelative_proj" (of per_dim_scale, relative_proj), "dgate_input",
        "dgate_weight", "dgate_bias", "dgate_const" (of wavlm_gate's tensors),
        "dglobal_k", "dglobal_v", "dglobal_bias" (of global_kv's side keys and values as
        given inputs, and of global_bias), "drel_keys", "dcontent_bias",
        "dposition_bias", "dsegment_embed", "dsegment_bias", "drel_kernel", "dphi",
        "dpi", "dpsi", "domega" (of the Transformer-XL / XLNet / Funnel tensors and
        factorized's tables), "dpos_key", "dpos_query" (of DeBERTa's); default ("dq", "dk", "dv"). With
        cu_seqlens_q/cu_seqlens_k, each sequence's own backward, packed. Needs v. With
        rope=True, dq and dk are with respect to the unrotated q and k.
    forward_output, forward_lse: with grad_output, the forward's output (its shape, any
        float dtype) and lse ([b, hq, sq], float32 or float64), FlashAttention's out and
        softmax_lse: no forward is run (softmax_d = rowsum(dO O) from this O, P =
        exp(s - lse) from this lse). Both or neither; not with qv, cu_seqlens_q /
        cu_seqlens_k or the relative terms (UsageError).
    cache_seqlens [b], cache_batch_idx [b], cache_leftpad [b], page_table [b, max_blocks],
        k_new [b, s_new, hk, d], v_new [b, s_new, hk, dv], rotary_cos/rotary_sin
        [s_rot, rotary_dim/2], rotary_seqlens [b], rotary_interleaved: FlashAttention's
        flash_attn_with_kvcache; q [b, sq, hq, d], k and v the caches [b_cache, s_cache,
        hk, d] (or pages [num_blocks, page_size, hk, d] with page_table). k_new and v_new
        are stored at cache_seqlens (rotated k_new) in k and v themselves, as
        FlashAttention does (writable C-contiguous numpy arrays or CPU torch tensors),
        unless update_cache=False; emits output and lse only (default: output). qv
        and the descales ([b, hk], per batch entry) are honoured as flash_attn_with_kvcache
        takes them; p_dtype, arith other than "exact", rope and the terms by position
        (alibi, t5_bias, ...) raise UsageError (posenc-attention(1), KV CACHES).
        cu_seqlens_k_new [b+1] (int32/int64): the new keys packed (varlen), k_new
        [total_new, hk, d] and v_new [total_new, hk, dv], entry b's rows [cu[b], cu[b+1]).
    """
    # args: every keyword as given (with_arguments); the declared ones are read from it.
    kv = _kvcache_args(args)  # FlashAttention's KV cache: k and v are the caches
    rope, t5_causal = _flag(rope, "rope"), _flag(t5_causal, "t5_causal")
    if not rope:
        for name in _ROPE_OPTION_NAMES:
            value = args[name]
            if value is not None and value is not False:
                raise UsageError(f"{name}: a ROPE OPTION needs rope=True")
        if _whole(start, "start") != 0:
            raise UsageError("start: a ROPE OPTION needs rope=True")
    qa, q_name, like = _view(q, "q")
    tensors = {"q": (_contiguous(qa), q_name), "k": _arg(k, "k"), "v": _arg(v, "v")}
    # mask, key_lengths, t5_bias, qv, ...: the declared tensor inputs
    # (_fields("attention_tensors")).
    tensors.update((n, _arg(args[n], n)) for n in _ATTENTION_TENSORS)
    # wavlm_gate, global_kv, decomposed_rel_pos: a list each, as the module reads a group.
    if decomposed_rel_pos is not None:
        rh, rw = _items(decomposed_rel_pos, 2, "decomposed_rel_pos", "(RH, RW)")
        tensors["decomposed_rel_pos"] = [_arg(rh, "rel_pos_h"), _arg(rw, "rel_pos_w")]
    if wavlm_gate is not None:
        tensors["wavlm_gate"] = [_arg(t, n) for n, t in zip(
            ("gate_input", "gate_weight", "gate_bias", "gate_const"),
            _items(wavlm_gate, 4, "wavlm_gate", "(X, W, B, C)"))]
    if global_kv is not None:
        if v is None:
            raise UsageError("global_kv: needs v (the side values go with the values)")
        kg, vg = _items(global_kv, 2, "global_kv", "(KG, VG)")
        tensors["global_kv"] = [_arg(kg, "global_k"), _arg(vg, "global_v")]
    # FlashAttention's out and softmax_lse for the backward; their rules are the library's.
    for name, t in (("forward_output", forward_output), ("forward_lse", forward_lse)):
        if t is not None:
            tensors[name] = _arg(t, name)
    if grad_output is not None:
        if v is None:
            raise UsageError("grad_output: needs v (dO is the output's gradient)")
        tensors["grad_output"] = _arg(grad_output, "grad_output")
        names, single = _emit_list(emit, ("dq", "dk", "dv"))
    else:
        if emit is None and (cu_seqlens_q is not None or cu_seqlens_k is not None):
            emit = "output" if v is not None else "lse"  # the varlen form has no scores
        if emit is None and kv is not None:
            emit = "output"  # flash_attn_with_kvcache's out (lse on request)
        names, single = _emit_list(emit, ("probs", "output") if v is not None else ("probs",))
    opt = {"emit": names, "precision": precision}
    # scale, sliding_window, softcap, ..., relative_left, ...: the declared fields
    # (_fields("attention")), under their own names; their ranges and choices are the library's.
    for f in _ATTENTION_FIELDS:
        opt[f["name"]] = _field_value(f, args[f["name"]])
    opt["t5_causal"] = t5_causal or None
    # rel_keys, ..., max_relative_positions: the relative terms' declared parameters
    # (_fields("relative")); their rules are the library's.
    relative = {f["name"]: _relative_value(f, args[f["name"]]) for f in _RELATIVE_FIELDS}
    # fa-baseline (FlashAttention's PyTorch baseline) is attention's own arithmetic, no
    # RoPE one.
    if arith == "fa-baseline":
        if _flag(rope, "rope"):
            raise UsageError("arith fa-baseline: not with rope")
        arith = None
    rope_d = _rope_dict(dict(args, arith=arith))  # the ROPE OPTIONS given
    pos = _positions(start, position_ids, cu_seqlens)
    apply = {"inverse": _flag(inverse, "inverse"), "precision": precision}
    opt = {key: val for key, val in opt.items() if val is not None}
    if kv is not None:
        tensors["kv"] = kv
    res = _posenc.attention(tensors, opt, rope_d, pos, apply, _flag(rope, "rope"), relative)
    out_name = _dtype_name(dtype) or q_name
    arrays = tuple(_wrap(res[n], out_name if n not in ("lse", "softmax_d") else "f", like)
                   for n in names)
    return arrays[0] if single else arrays


def _field_value(f, value):
    """The keyword of declared attention field `f` as the C++ module reads it (None: not
    given); ranges, choices and rules are the library's."""
    name = f["name"]
    if value is None:
        return None
    if f["type"] == "bool":
        return _flag(value, name)
    if f["type"] == "float":
        return _number(value, name)
    if f["type"] == "dtype":  # numpy dtypes by their posenc names
        return _dtype_name(value)
    if f["bare"] and not isinstance(value, str):  # causal=True: the bare option's word
        return True if _flag(value, name) else None
    if f["type"] == "numbers":  # (SCALE, FLOOR)
        pair = _items(value, 2, name, "({}, {})".format(*f["sides"]))
        return [_number(v, name) for v in pair]
    if f["type"] == "pair":  # (H, W)
        return [_whole(v, name) for v in _pair(value, name)]
    if f["type"] == "sides":  # LEFT or (LEFT, RIGHT)
        first, second = f["sides"]
        items = ((value,) if np.ndim(value) == 0 and not isinstance(value, str)
                 else _items(value, 2, name, f"{first} or ({first}, {second})"))
        return [_whole(v, name) for v in items]
    return value


def _relative_value(f, value):
    """The keyword of the relative terms' declared parameter `f` as the C++ module reads it
    (None: not given)."""
    name = f["name"]
    if value is None:
        return None
    if f["type"] == "tensor":
        return _arg(value, name)
    if f["type"] == "tensors":  # (phi, pi, psi, omega): the module counts them
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            return value
        return [None if t is None else _arg(t, f"{name} {n}") for t, n in zip(value, f["choices"])
                ] + list(value[len(f["choices"]):])
    if f["type"] == "bool":
        return _flag(value, name) or None
    if name == "pos_att_type" and isinstance(value, (list, tuple)):  # ("c2p", "p2c")
        return ",".join(str(v) for v in value)
    return value


class CompareResult:
    """The outcome of posenc.compare: ``bool(result)`` is whether the tensors match.

    Attributes: match, shapes_equal, shape_a, shape_b, total (elements compared),
    mismatches, first_mismatch (flat index) and first_mismatch_index (in a), max_abs and
    max_rel (dicts: value, index (a tuple, in a), a, b), max_ulp, nan_a, nan_b,
    nan_mismatches, and the rule in force, as ``posenc compare`` states it: ulp (the
    bound, or None) counted in ulp_type, rtol and atol (None when a ULP bound given alone
    decides alone; with both, either test suffices)."""

    def __init__(self, d):
        self.__dict__.update(d)

    def __bool__(self):
        return self.match

    def __repr__(self):
        return f"CompareResult({self.summary()})"

    def summary(self):
        """One line as ``posenc compare`` reports: match or the differences."""
        if not self.shapes_equal:
            return f"shapes differ: {tuple(self.shape_a)} vs {tuple(self.shape_b)}"
        head = "match" if self.match else f"{self.mismatches} of {self.total} differ"
        return (f"{head}; max abs diff {self.max_abs['value']:.6g} at {self.max_abs['index']}, "
                f"max rel diff {self.max_rel['value']:.6g} at {self.max_rel['index']}"
                + (f", max ulp {self.max_ulp}" if self.max_ulp is not None else "")
                + f" ({self.rule()})")

    def rule(self):
        """The rule applied, as the command's "rule:" line gives it."""
        tol = None if self.rtol is None else f"rtol {self.rtol:g}, atol {self.atol:g}"
        if self.ulp is None:
            return tol
        ulp = f"ulp {self.ulp} in {self.ulp_type}"
        return ulp if tol is None else f"{ulp}, or {tol}"

    def check(self):
        """Raises DifferError with the summary unless the tensors match."""
        if not self.match:
            raise DifferError(self.summary())
        return self


class VerdictResult(CompareResult):
    """The outcome of posenc.compare(..., baseline=PT), flash-attn's verdict:
    ``bool(result)`` is whether max|a - b| <= factor * max|PT - b| + atol.

    Attributes: match, shapes_equal, shape_a, shape_b, factor, atol, atol_rule ("fa": 2 *
    max|b + 0.3 - 0.3 - b| in b's dtype, or "given"), error and error_index (max|a - b|
    and where), baseline_error and baseline_error_index, bound."""

    def summary(self):
        """One line as ``posenc compare --baseline`` reports: the verdict and its numbers."""
        if not self.shapes_equal:
            return f"shapes differ: {tuple(self.shape_a)} vs {tuple(self.shape_b)}"
        return (f"{'match' if self.match else 'differ'}: max|a - b| {self.error:.6g} "
                f"{'<=' if self.match else '>'} bound {self.bound:.6g} ({self.rule()})")

    def rule(self):
        """The rule applied, with its numbers."""
        return (f"{self.factor:g} * baseline error {self.baseline_error:.6g} + atol "
                f"{self.atol:.6g}" + (" (flash-attn's fwd_atol)" if self.atol_rule == "fa"
                                      else ""))


def _verdict(a, b, baseline, atol, factor, atol_rule, others):
    for name, given in others.items():
        if given:
            raise UsageError(f"{name}: not with baseline (flash-attn's rule compares the "
                             "largest errors)")
    if atol is not None and atol_rule is not None:
        raise UsageError("atol: a fixed atol replaces atol_rule; give one of them")
    if atol_rule is not None and atol_rule != "fa":
        raise UsageError(f"atol_rule {atol_rule!r:.40}: expected 'fa'")
    (aa, an), (ba, bn) = _required(a, "a"), _required(b, "b")
    pa, pn = _required(baseline, "baseline")
    opts = {k: v for k, v in (("factor", factor), ("atol", atol)) if v is not None}
    return VerdictResult(_posenc.compare_baseline(aa, an, ba, bn, pa, pn, opts))


@_usage_errors
def compare(a, b, *, rtol=None, atol=None, ulp=None, equal_nan=False, slice=None,
            baseline=None, factor=None, atol_rule=None):
    """Compares a with the reference b (``posenc compare``): |a - b| <= atol + rtol |b|,
    or at most `ulp` units in the last place of the less precise dtype; `ulp` given
    alone decides alone, given with rtol or atol either test suffices. Unset tolerances
    take torch.testing.assert_close's defaults for the less precise dtype. `slice` ("0,:,:4")
    compares that part of each. Returns a CompareResult (``.check()`` raises
    DifferError).

    With `baseline` (``--baseline``): flash-attn's verdict, max|a - b| <= factor *
    max|baseline - b| + atol, factor 2 by default, atol by `atol_rule` "fa" (2 * max|b +
    0.3 - 0.3 - b| in b's dtype, torch's arithmetic) or the `atol` given; differences as
    torch computes ``(a - b).abs().max()``. Returns a VerdictResult."""
    if baseline is not None:
        return _verdict(a, b, baseline, atol, factor, atol_rule,
                        {"rtol": rtol is not None, "ulp": ulp is not None,
                         "equal_nan": _flag(equal_nan, "equal_nan"),
                         "slice": slice is not None})
    for name, given in (("factor", factor), ("atol_rule", atol_rule)):
        if given is not None:
            raise UsageError(f"{name}: applies to baseline")
    (aa, an), (ba, bn) = _required(a, "a"), _required(b, "b")
    d = {"rtol": rtol, "atol": atol, "ulp": ulp, "equal_nan": _flag(equal_nan, "equal_nan"),
         "slice": slice}
    return CompareResult(_posenc.compare(aa, an, ba, bn, {k: v for k, v in d.items()
                                                          if v is not None}))


@_usage_errors
def read(ref, *, torch=False):
    """Reads a tensor reference ("x.npy", "f.h5:/group/name", "x.csv", "x.tsv", "x.json")
    whole. Returns a numpy array (bf16 data as uint16 bit patterns), or a torch tensor
    with ``torch=True`` (bf16 as torch.bfloat16; torch is imported if need be). fp8 data
    (posenc's fp8 HDF5 datasets) come back as their uint8 codes, as torch.float8_e4m3fn /
    float8_e5m2 with ``torch=True`` where torch has them (else torch.uint8). "-"
    (standard input for the command) and paths with a NUL character are UsageErrors."""
    if _flag(torch, "torch"):
        _torch_module("torch")
    a, name = _posenc.read(_path(ref, "ref"))
    return _wrap(a, name, "torch" if torch else "numpy")


@_usage_errors
def combine(out_partial, lse_partial, *, axis=0, lse_layout="sh", dtype=None):
    """Split-KV combine (``posenc combine``), as flash_attn_combine and FlashInfer's
    merge_state: lse = logsumexp_i(lse_i), out = sum_i exp(lse_i - lse) out_i over the
    split `axis` (negative from the end), in float64 rounded once. A split with lse -inf
    contributes nothing; where all are -inf, out is 0 and lse -inf. out_partial [splits,
    b, s, h, d]; lse_partial [splits, b, s, h] (`lse_layout` "sh", flash_attn_combine's)
    or [splits, b, h, s] ("hs": softmax_lse, or attention's lse, stacked). Returns
    (out, lse): out in `dtype` (default out_partial's), lse f64 when out is f64, else
    f32; torch tensors for a torch out_partial."""
    oa, on, like = _view(out_partial, "out_partial")
    la, ln, _ = _view(lse_partial, "lse_partial")
    out_name = _dtype_name(dtype) or on
    opt = {"axis": _whole(axis, "axis"), "lse_layout": lse_layout, "dtype": _dtype_name(dtype)}
    res = _posenc.combine(_contiguous(oa), on, _contiguous(la), ln,
                          {k: v for k, v in opt.items() if v is not None})
    return _wrap(res["out"], out_name, like), _wrap(res["lse"], "f", like)


@_usage_errors
def write(ref, x, *, attrs=None, force=False, compression=0, no_clobber=False, sync=False,
          to=None):
    """Writes x to a tensor reference atomically (HDF5: "f.h5:/group/name", adding to an
    existing file as h5py's mode 'a'; a bare "f.h5" writes /data). `attrs` (a dict of
    str, int, float or lists of floats) are recorded as HDF5 attributes; force replaces
    an existing dataset; compression is the HDF5 gzip level; no_clobber refuses an
    existing target; sync fsyncs before the rename; `to` overrides the format ("npy",
    "h5", "csv", "tsv", "json", "text"). A bad ref ("-", which is standard output for
    the command, or a path with a NUL character), compression outside 0 to 9 and an
    unknown `to` are UsageErrors raised before anything is opened."""
    a, name = _required(x, "x")
    if attrs is not None and not isinstance(attrs, dict):
        raise UsageError(f"attrs: expected a dict of name: value, got {type(attrs).__name__}")
    opts = {"force": _flag(force, "force"), "compression": compression,
            "no_clobber": _flag(no_clobber, "no_clobber"), "sync": _flag(sync, "sync"), "to": to}
    _posenc.write(_path(ref, "ref"), a, name, dict(attrs or {}),
                  {k: v for k, v in opts.items() if v is not None})


@_usage_errors
def rope_ids(family=None, layout=None, *, input_ids=None, image_grid_thw=None,
             video_grid_thw=None, second_per_grid_ts=None, attention_mask=None,
             image_token_id=None, video_token_id=None, audio_token_id=None,
             video_start_token_id=None, video_end_token_id=None, hf_config=None,
             spatial_merge_size=None, tokens_per_second=None, position_id_per_seconds=None,
             seconds_per_chunk=None):
    """Multimodal RoPE position ids (rows t, h, w) of a prompt as HF transformers v5's
    get_rope_index computes them (``posenc rope-ids``), for
    ``posenc.rope(..., mrope_section=..., position_ids=ids)``.

    family: "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni" or "glm4v" (HF
        model_type spellings too; default: hf_config's model_type).
    layout: the prompt as a SPEC, comma-separated text:N, image:TxHxW,
        video:TxHxW[@SECONDS][/GAP][+audio:N], audio:N (grids in patches, before the
        spatial merge); or instead input_ids [s] or [b, s] with image_grid_thw
        [images, 3], video_grid_thw [videos, 3], second_per_grid_ts [videos],
        attention_mask (input_ids' shape) and the media token ids (or hf_config's).
    hf_config: a HF config.json giving model_type, spatial_merge_size,
        tokens_per_second, position_id_per_seconds, seconds_per_chunk and the token ids
        (keywords given win).
    Returns (ids, delta): ids [3, s] int64 and HF's mrope_position_delta (an int); for
    2-D input_ids, ids [3, b, s] and a list of one delta per row.
    """
    opts = {"family": family, "layout": layout,
            "hf_config": None if hf_config is None else _path(hf_config, "hf_config"),
            "image_token_id": image_token_id, "video_token_id": video_token_id,
            "audio_token_id": audio_token_id, "video_start_token_id": video_start_token_id,
            "video_end_token_id": video_end_token_id, "spatial_merge_size": spatial_merge_size,
            "tokens_per_second": tokens_per_second,
            "position_id_per_seconds": position_id_per_seconds,
            "seconds_per_chunk": seconds_per_chunk}
    tensors = {"input_ids": _arg(input_ids, "input_ids"),
               "image_grid_thw": _arg(image_grid_thw, "image_grid_thw"),
               "video_grid_thw": _arg(video_grid_thw, "video_grid_thw"),
               "second_per_grid_ts": _arg(second_per_grid_ts, "second_per_grid_ts"),
               "attention_mask": _arg(attention_mask, "attention_mask")}
    ids, delta = _posenc.rope_ids({k: v for k, v in opts.items() if v is not None},
                                  {k: v for k, v in tensors.items() if v is not None})
    return ids, delta


from . import table  # noqa: E402  (the table kinds use the names above)
