"""flash-attn's rotary embedding from given cos/sin tables, in torch float64, written
for posenc's tests from the public semantics of `apply_rotary_emb_torch` and
`apply_rotary_emb` (flash_attn/layers/rotary.py):

    out[..., :R] = x[..., :R] * cos + rotate_half(x[..., :R]) * sin,  out[..., R:] = x[..., R:]

with cos/sin [rows, R/2] repeated to R columns ("(2 d)" for the half pairing, "(d 2)" for
the interleaved one), rotate_half(x) = cat(-x2, x1) (halves) or the pairs (-x_odd,
x_even) interleaved, and the token at position p taking row p. Positions: seqlen_offsets
[b] (or an int) shift entry b's consecutive positions; with cu_seqlens (packed
sequences) they restart per sequence, shifted by that sequence's offset; or explicit
position ids. A [rows, R] table (HF's cos/sin) is used per column as it is.
"""
import numpy as np
import torch


def rotate_half(x, interleaved):
    if not interleaved:
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def widen(cos, interleaved):
    """[..., R/2] -> [..., R] as flash-attn's repeat."""
    if interleaved:
        return cos.repeat_interleave(2, dim=-1)
    return torch.cat((cos, cos), dim=-1)


def positions(b, s, seqlen_offsets=0, cu_seqlens=None, position_ids=None):
    """int64 positions [b, s] ([1, s] for packed sequences)."""
    if position_ids is not None:
        p = torch.as_tensor(np.asarray(position_ids), dtype=torch.int64)
        return p.reshape(1, -1) if p.dim() == 1 else p
    if cu_seqlens is not None:
        offs = np.broadcast_to(np.asarray(seqlen_offsets), (len(cu_seqlens) - 1,))
        p = np.zeros(s, dtype=np.int64)
        for k in range(len(cu_seqlens) - 1):
            lo, hi = cu_seqlens[k], cu_seqlens[k + 1]
            p[lo:hi] = offs[k] + np.arange(hi - lo)
        return torch.from_numpy(p).reshape(1, s)
    offs = torch.as_tensor(np.broadcast_to(np.asarray(seqlen_offsets), (b,)).copy(),
                           dtype=torch.int64)
    return offs[:, None] + torch.arange(s, dtype=torch.int64)[None, :]


def apply_rotary_tables(x, cos, sin, interleaved=False, start=0, seqlen_offsets=0,
                        cu_seqlens=None, position_ids=None, layout="bshd", inverse=False,
                        rotary_dim=None):
    """x [b, s, h, d] (layout "bshd"), [b, h, s, d] ("bhsd") or [s, d] ("sd"), any float
    array; cos, sin [rows, R/2] or [rows, R] given as float64 arrays holding the table's
    values. Returns the float64 result as a numpy array."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    if layout == "sd":
        xb = x[None, :, None, :]
    elif layout == "bhsd":
        xb = x.transpose(1, 2)
    else:
        xb = x
    b, s = xb.shape[0], xb.shape[1]
    cos = torch.as_tensor(np.asarray(cos, dtype=np.float64))
    sin = torch.as_tensor(np.asarray(sin, dtype=np.float64))
    if inverse:
        sin = -sin
    d = xb.shape[-1]
    width = cos.shape[-1]
    r = rotary_dim or (2 * width if 2 * width <= d else width)
    full = cos.shape[-1] == r
    pos = positions(b, s, seqlen_offsets, cu_seqlens, position_ids) + start
    c = cos[pos]  # [b or 1, s, width]
    sn = sin[pos]
    if not full:
        c, sn = widen(c, interleaved), widen(sn, interleaved)
    c, sn = c[:, :, None, :], sn[:, :, None, :]
    xr = xb[..., :r]
    out = torch.cat((xr * c + rotate_half(xr, interleaved) * sn, xb[..., r:]), dim=-1)
    if layout == "sd":
        out = out[0, :, 0, :]
    elif layout == "bhsd":
        out = out.transpose(1, 2)
    return out.numpy()


def apply_rotary_torch_native(x, cos, sin, interleaved=False, positions_bs=None):
    """apply_rotary_emb_torch itself, in torch's own dtypes: x [b, s, h, d] and cos/sin
    [rows, R/2] torch tensors; positions_bs [b, s] int64 rows of the tables (default
    0..s-1). Each product and the sum are torch operations (rounded to the promoted type)."""
    b, s = x.shape[0], x.shape[1]
    if positions_bs is None:
        positions_bs = torch.arange(s)[None, :].expand(b, s)
    c, sn = cos[positions_bs], sin[positions_bs]  # [b, s, R/2]
    r = 2 * cos.shape[-1]
    c = (c.repeat_interleave(2, -1) if interleaved else torch.cat((c, c), -1))[:, :, None, :]
    sn = (sn.repeat_interleave(2, -1) if interleaved else torch.cat((sn, sn), -1))[:, :, None, :]
    xr = x[..., :r]
    rot = xr * c + rotate_half(xr, interleaved) * sn
    return torch.cat((rot, x[..., r:].to(rot.dtype)), dim=-1)
