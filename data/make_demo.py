#!/usr/bin/python3
"""Makes the demo tensors in data/: a small query/key/value set of one layer.

    /usr/bin/python3 data/make_demo.py

q.npy [1, 4, 8, 16] f32, k.npy and v.npy [1, 2, 8, 16] f32 (grouped-query: 4 query
heads share 2 key/value heads), drawn from a fixed seed so the files are reproducible,
and layer0.h5 holding the same tensors as /layer0/q, /layer0/k, /layer0/v.
"""
import os

import h5py
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261122)
q = rng.standard_normal((1, 4, 8, 16)).astype(np.float32)
k = rng.standard_normal((1, 2, 8, 16)).astype(np.float32)
v = rng.standard_normal((1, 2, 8, 16)).astype(np.float32)
for name, t in (("q", q), ("k", k), ("v", v)):
    np.save(os.path.join(here, f"{name}.npy"), t)
with h5py.File(os.path.join(here, "layer0.h5"), "w", track_order=False) as f:
    g = f.create_group("layer0")
    for name, t in (("q", q), ("k", k), ("v", v)):
        g.create_dataset(name, data=t, track_times=False)
