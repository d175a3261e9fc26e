#!/usr/bin/env bash
# Whole-process timing of `inspect --stats` and `compare` on a 256 MiB f32 NPY file
# ([16384, 4096], and a copy perturbed by ~1e-6 for compare; both also as f16, 128 MiB,
# for an f16 compare), for two posenc builds
# side by side in one hyperfine run (e.g. before and after a change). Reports the
# median of each, the ratio, peak RSS, and checks that both print the same report.
# Usage: bench/inspect/bench_inspect_compare.sh BEFORE_POSENC AFTER_POSENC [runs]
# OUTDIR (default: a fresh folder under $TMPDIR or /tmp) holds the 512 MiB of inputs.
set -euo pipefail
before=${1:?usage: $0 BEFORE_POSENC AFTER_POSENC [runs]}
after=${2:?usage: $0 BEFORE_POSENC AFTER_POSENC [runs]}
runs=${3:-10}
work=$(mktemp -d -p "${OUTDIR:-${TMPDIR:-/tmp}}")
trap 'rm -rf "$work"' EXIT

/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((16384, 4096), dtype=np.float32)
np.save(f"{sys.argv[1]}/a.npy", a)
b = a + rng.standard_normal(a.shape, dtype=np.float32) * 1e-6
np.save(f"{sys.argv[1]}/b.npy", b)
np.save(f"{sys.argv[1]}/a16.npy", a.astype(np.float16))
np.save(f"{sys.argv[1]}/b16.npy", (b * 1.001).astype(np.float16))
PY

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for job in "inspect $work/a.npy --stats" "compare $work/a.npy $work/b.npy" \
  "compare $work/a16.npy $work/b16.npy"; do
  name=${job%% *}
  case $job in *a16*) name=compare-f16 ;; esac
  cmp <("$before" $job || true) <("$after" $job || true) >/dev/null &&
    echo "$name: reports identical" || echo "$name: REPORTS DIFFER"
  hyperfine --warmup 2 --runs "$runs" -i --export-json "$work/$name.json" \
    -n before "$before $job" -n after "$after $job" >/dev/null
  /usr/bin/python3 - "$work/$name.json" "$name" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
b, a = r["before"], r["after"]
print(f"{sys.argv[2]}: median before {b['median']:.3f} s, after {a['median']:.3f} s, "
      f"after/before {a['median'] / b['median']:.2f} "
      f"(min {b['min']:.3f} / {a['min']:.3f} s; user {b['user']:.3f} / {a['user']:.3f} s)")
PY
  for which in before after; do
    bin=$([ "$which" = before ] && echo "$before" || echo "$after")
    rss=$( { /usr/bin/time -f %M "$bin" $job >/dev/null; } 2>&1 | tail -1)
    echo "  $which peak RSS: $rss KB"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
