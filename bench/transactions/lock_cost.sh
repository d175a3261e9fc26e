#!/usr/bin/env bash
# The cost of locking an HDF5 file while adding to it: time to add a 32 KiB table to a
# 1 GiB HDF5 file, posenc builds A (before) and B (after) alternating, side by side.
#   lock_cost.sh POSENC_A POSENC_B [ROUNDS] [DIR]
# DIR (default: a new folder under the current one) should be on the disk users write
# to. Prints each build's times and medians in milliseconds, and the CPU model.
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2"); rounds=${3:-7}
dir=$(mktemp -d "${4:-.}/posenc-lockcost-XXXXXX")
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 - "$dir/f.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("big", data=np.zeros(1 << 27, np.float64))  # 1 GiB
PY
sync
grep -m1 "model name" /proc/cpuinfo
one() {  # posenc, dataset name -> milliseconds
  local t0 t1
  t0=$(date +%s%N)
  "$1" table sinusoidal --positions 1024 --dim 8 -o "$dir/f.h5:/$2" >/dev/null
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
ta=(); tb=()
for i in $(seq "$rounds"); do
  ta+=("$(one "$a" "a$i")")
  tb+=("$(one "$b" "b$i")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "A ($a): ${ta[*]}  median $(median "${ta[@]}") ms"
echo "B ($b): ${tb[*]}  median $(median "${tb[@]}") ms"
