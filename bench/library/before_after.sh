#!/bin/sh
# Two posenc binaries side by side in one run (hyperfine, warm cache): a RoPE table,
# RoPE on a 128 MiB f32 file (plain, M-RoPE sections with [3, s] ids, and 2-D over a
# 64 x 128 grid: the table rows per token that RoPE layouts build), attention b1 h8
# s2048 d128 f32 (output only: MHA, causal, and GQA with 2 KV heads), and start-up (a
# 16 x 8 table). For checking that a change (e.g. the library refactor, RoPE as data)
# costs no speed.
#
#   bench/library/before_after.sh OLD_BIN NEW_BIN [RUNS]
set -eu
OLD=$1
NEW=$2
RUNS=${3:-10}
DIR=$(mktemp -d /tmp/posenc-before-after.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
/usr/bin/python3 - "$DIR" <<'PYEOF'
import sys, numpy as np
rng = np.random.default_rng(0)
d = sys.argv[1]
np.save(f"{d}/x.npy", rng.standard_normal((8192, 32, 128), dtype=np.float32))  # 128 MiB
t = np.arange(8192)
np.save(f"{d}/ids3.npy", np.stack([t // 256, (t // 16) % 16, t % 16]).astype(np.int64))
for n in "qkv":
    np.save(f"{d}/{n}.npy", rng.standard_normal((1, 8, 2048, 128), dtype=np.float32))
for n in "kv":
    np.save(f"{d}/{n}2.npy", rng.standard_normal((1, 2, 2048, 128), dtype=np.float32))
PYEOF
grep -m1 'model name' /proc/cpuinfo
for bin in "$OLD" "$NEW"; do "$bin" --version; done
# pair WARMUP RUNS TAG ARGS...: `posenc ARGS -o $DIR/TAG_{old,new}.npy` of both builds.
pair() {
  w=$1 r=$2 tag=$3
  shift 3
  hyperfine -N -w "$w" -r "$r" \
    -n old "$OLD $* -o $DIR/${tag}_old.npy" -n new "$NEW $* -o $DIR/${tag}_new.npy"
}
pair 2 "$RUNS" t table rope --positions 262144 --dim 128 --emit cos-sin
pair 2 "$RUNS" r rope "$DIR/x.npy" --axes shd
pair 2 "$RUNS" m rope "$DIR/x.npy" --axes shd --mrope-section 16,24,24 --position-ids "$DIR/ids3.npy"
pair 2 "$RUNS" g rope "$DIR/x.npy" --axes shd --rope2d 64 128
pair 1 "$RUNS" a attention -q "$DIR/q.npy" -k "$DIR/k.npy" -v "$DIR/v.npy" --emit output
pair 1 "$RUNS" c attention -q "$DIR/q.npy" -k "$DIR/k.npy" -v "$DIR/v.npy" --causal --emit output
pair 1 "$RUNS" gqa attention -q "$DIR/q.npy" -k "$DIR/k2.npy" -v "$DIR/v2.npy" --emit output
pair 5 "$((RUNS * 10))" s table sinusoidal --positions 16 --dim 8
for f in t r m g a c gqa s; do
  cmp "$DIR/${f}_old.npy" "$DIR/${f}_new.npy" || { echo "outputs differ: $f"; exit 1; }
done
echo "outputs: byte-identical"
