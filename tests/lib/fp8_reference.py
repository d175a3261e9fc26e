"""fp8 (torch.float8_e4m3fn, torch.float8_e5m2; OCP FP8) written from the formats'
definition, independent of posenc: the value of each code, and float32 -> code by
nearest value with ties to the even code (torch's .to(): beyond the largest finite value
NaN for e4m3fn, infinity for e5m2; NaN -> 0x7f with its sign), for the command-line and
the Python module's tests."""
import numpy as np

FORMATS = {
    # name: (exponent bits, mantissa bits, bias, has infinities)
    "e4m3fn": (4, 3, 7, False),
    "e5m2": (5, 2, 15, True),
}


def decode(code, fmt):
    """The value of one code (float64; NaN codes keep their sign bit)."""
    e_bits, m_bits, bias, has_inf = FORMATS[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    top = (1 << e_bits) - 1
    if has_inf and e == top:
        return sign * np.inf if m == 0 else np.copysign(np.nan, sign)
    if not has_inf and e == top and m == (1 << m_bits) - 1:
        return np.copysign(np.nan, sign)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2.0 ** m_bits) * 2.0 ** (e - bias)


def table(fmt):
    """The 256 values in float32, indexed by code."""
    return np.array([decode(c, fmt) for c in range(256)], dtype=np.float32)


def grid(fmt):
    """Non-negative finite values in code order, plus the value one step past the
    largest (rounding to it is an overflow)."""
    _, m_bits, _, _ = FORMATS[fmt]
    vals = []
    for c in range(0x80):
        v = decode(c, fmt)
        if not np.isfinite(v):
            break
        vals.append(v)
    quantum = 2.0 ** (np.floor(np.log2(vals[-1])) - m_bits)
    vals.append(vals[-1] + quantum)
    return np.array(vals)


def encode(x, fmt):
    """float32 array -> codes (uint8)."""
    with np.errstate(invalid="ignore"):
        x = np.asarray(x, dtype=np.float32).astype(np.float64)
    has_inf = FORMATS[fmt][3]
    g = grid(fmt)
    over = 0x7C if has_inf else 0x7F
    a = np.abs(x)
    sign = np.where(np.signbit(x), 0x80, 0x00)
    idx = np.clip(np.searchsorted(g, a, side="right") - 1, 0, len(g) - 1)
    lo = g[idx]
    hi = g[np.minimum(idx + 1, len(g) - 1)]
    up = (a - lo > hi - a) | ((a - lo == hi - a) & (idx % 2 == 1))
    code = np.where(up, idx + 1, idx)
    code = np.where((code >= len(g) - 1) | (a > g[-1]), over, code)
    code = np.where(np.isinf(x), over, code)
    code = np.where(np.isnan(x), 0x7F, code)
    return (code | sign).astype(np.uint8)


def probe_values(fmt):
    """float32 inputs that decide every rounding: each finite value, each midpoint of
    the grid and its float32 neighbours, values past the largest, ±0, ±inf, NaN."""
    g = grid(fmt)
    mids = ((g[:-1] + g[1:]) / 2).astype(np.float32)
    up = np.nextafter(mids, np.float32(np.inf))
    down = np.nextafter(mids, np.float32(0))
    pos = np.concatenate([g.astype(np.float32), mids, up, down,
                          np.float32([1e6, 3.4e38, np.inf])])
    return np.concatenate([pos, -pos, np.float32([np.nan, -np.nan])]).astype(np.float32)
