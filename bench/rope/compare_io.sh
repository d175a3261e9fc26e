#!/bin/sh
# Whole-process RoPE, file to file, against `cp` of the same file (warm page cache),
# interleaved in one run: each round runs cp and every posenc case once, in turn, so
# load changes hit all alike. Prints median and minimum of each and the ratios to cp
# (median/median, min/min), with the CPU and the load before and after.
#
#   bench/rope/compare_io.sh [POSENC_BIN] [ROUNDS] [WORKDIR]
#
# Cases: f32 and f16 NPY (256 MiB each: [16384, 32, 128] and [32768, 32, 128], s h d),
# and the f32 file as an HDF5 dataset in and out; f32 also against `cp` to a temporary
# name and `mv` into place, which is what posenc's atomic output amounts to. Outputs are deleted before each command
# (untimed), so every command writes a new file. A WORKDIR on tmpfs (/dev/shm) keeps the
# disk's writeback, which made single runs of cp on ext4 vary from 70 to 710 ms, out of
# the figures.
set -eu
BIN=${1:-build/posenc}
ROUNDS=${2:-15}
DIR=${3:-$(mktemp -d /tmp/posenc-io-bench.XXXXXX)}
PY=/usr/bin/python3
mkdir -p "$DIR"
$PY - "$DIR" <<'PYEOF'
import sys, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((16384, 32, 128), dtype=np.float32)
np.save(f"{d}/f32.npy", x)
np.save(f"{d}/f16.npy", rng.standard_normal((32768, 32, 128), dtype=np.float32).astype(np.float16))
with h5py.File(f"{d}/f32.h5", "w") as f:
    f["q"] = x
PYEOF
cat "$DIR"/f32.npy "$DIR"/f16.npy "$DIR"/f32.h5 >/dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
now() { date +%s%N; }
: >"$DIR/times.txt"
timeit() {  # name command...
  name=$1; shift
  rm -f "$DIR"/o*.npy "$DIR"/o*.h5 "$DIR"/o*.tmp  # every output is a new file, as for cp
  t0=$(now)
  "$@" >/dev/null 2>"$DIR/stderr.txt" || { echo "failed: $*"; cat "$DIR/stderr.txt"; exit 1; }
  t1=$(now)
  echo "$name $(( (t1 - t0) / 1000 ))" >>"$DIR/times.txt"
}
i=0
while [ "$i" -lt "$ROUNDS" ]; do
  timeit cp_f32 cp "$DIR/f32.npy" "$DIR/o_cp32.npy"
  # What posenc's output amounts to: a temporary file renamed into place.
  timeit cpmv_f32 sh -c "cp '$DIR/f32.npy' '$DIR/o_cpmv.tmp' && mv '$DIR/o_cpmv.tmp' '$DIR/o_cpmv.npy'"
  timeit rope_f32_npy "$BIN" rope "$DIR/f32.npy" -o "$DIR/o32.npy" --axes shd
  timeit cp_f16 cp "$DIR/f16.npy" "$DIR/o_cp16.npy"
  timeit rope_f16_npy "$BIN" rope "$DIR/f16.npy" -o "$DIR/o16.npy" --axes shd
  timeit cp_h5 cp "$DIR/f32.h5" "$DIR/o_cp.h5"
  timeit rope_f32_h5 "$BIN" rope "$DIR/f32.h5:/q" -o "$DIR/o32.h5:/q" --axes shd
  i=$((i + 1))
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
$PY - "$DIR/times.txt" <<'PYEOF'
import sys, statistics as st
t = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    t.setdefault(k, []).append(int(v) / 1000.0)
pairs = [("rope_f32_npy", "cp_f32"), ("rope_f32_npy", "cpmv_f32"), ("rope_f16_npy", "cp_f16"),
         ("rope_f32_h5", "cp_h5")]
print(f"{'case / reference':24} {'median ms':>10} {'min ms':>8}   {'ref median':>10} {'ref min':>7}   "
      f"{'x ref (med)':>11} {'x ref (min)':>11}  n={len(t['cp_f32'])}")
for a, b in pairs:
    ma, mb = st.median(t[a]), st.median(t[b])
    na, nb = min(t[a]), min(t[b])
    print(f"{a + ' / ' + b:24} {ma:10.1f} {na:8.1f}   {mb:10.1f} {nb:7.1f}   {ma / mb:11.2f} "
          f"{na / nb:11.2f}")
PYEOF
rm -f "$DIR"/o*.npy "$DIR"/o*.h5
