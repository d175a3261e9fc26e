"""The sinusoidal table of "Attention Is All You Need" in float64, each sine and cosine
correctly rounded (Python's math on each angle), in posenc's two layouts."""
import math

import numpy as np

_sin = np.frompyfunc(math.sin, 1, 1)
_cos = np.frompyfunc(math.cos, 1, 1)


def freqs(d, base):
    return np.array([1.0 / math.pow(base, (2 * i) / d) for i in range(d // 2)])


def sinusoidal(positions, d, base=10000.0, layout="interleaved"):
    ang = np.asarray(positions, dtype=np.float64)[:, None] * freqs(d, base)
    s = _sin(ang).astype(np.float64)
    c = _cos(ang).astype(np.float64)
    if layout == "concat":
        return np.concatenate([s, c], axis=1)
    pe = np.empty((len(positions), d))
    pe[:, 0::2] = s
    pe[:, 1::2] = c
    return pe
