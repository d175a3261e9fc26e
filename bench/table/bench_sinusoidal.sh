#!/usr/bin/env bash
# Whole-process timing of a 1,048,576 x 128 f32 sinusoidal table written to NPY:
# posenc against the seeds' PyTorch code (seed_sinusoidal.py, run as
# `/usr/bin/python3 seed_sinusoidal.py`). Reports mean times, the ratio and peak RSS.
# Usage: [OUTDIR=dir] bench/table/bench_sinusoidal.sh [path/to/posenc] [runs]
# OUTDIR (default: a fresh folder under $TMPDIR or /tmp) is where both write (neither
# flushes to disk: posenc only does with --sync).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
posenc=${1:-$here/../../build/posenc}
runs=${2:-10}
n=1048576
d=128
work=$(mktemp -d -p "${OUTDIR:-${TMPDIR:-/tmp}}")
trap 'rm -rf "$work"' EXIT

posenc_cmd="$posenc table sinusoidal --positions $n --dim $d -o $work/posenc.npy"
torch_cmd="/usr/bin/python3 $here/seed_sinusoidal.py $n $d $work/torch.npy"

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
hyperfine --warmup 1 --runs "$runs" --export-json "$work/h.json" \
  -n posenc "$posenc_cmd" -n torch-seed "$torch_cmd"

/usr/bin/python3 - "$work" <<'PY'
import json, sys
import numpy as np
work = sys.argv[1]
r = {x["command"]: x for x in json.load(open(f"{work}/h.json"))["results"]}
p, t = r["posenc"], r["torch-seed"]
print(f"posenc     mean {p['mean']:.3f} s  median {p['median']:.3f} s  min {p['min']:.3f} s")
print(f"torch-seed mean {t['mean']:.3f} s  median {t['median']:.3f} s  min {t['min']:.3f} s")
print(f"ratio (torch / posenc): mean {t['mean'] / p['mean']:.2f}x, "
      f"median {t['median'] / p['median']:.2f}x, min {t['min'] / p['min']:.2f}x")
a, b = np.load(f"{work}/posenc.npy", mmap_mode="r"), np.load(f"{work}/torch.npy", mmap_mode="r")
print(f"same shape/dtype: {a.shape == b.shape and a.dtype == b.dtype}; "
      f"max |posenc - torch| over the first 4096 rows: "
      f"{np.abs(a[:4096].astype(np.float64) - b[:4096]).max():.3g}")
PY

for name in posenc torch; do
  cmd=$([ "$name" = posenc ] && echo "$posenc_cmd" || echo "$torch_cmd")
  rss=$( { /usr/bin/time -v $cmd >/dev/null; } 2>&1 | awk -F': ' '/Maximum resident/ {print $2}')
  echo "$name peak RSS: $rss KB"
done
