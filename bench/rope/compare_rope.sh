#!/bin/sh
# Whole-process RoPE on a 256 MiB f32 NPY file (warm page cache), side by side in one
# run: cp of the file, posenc rope, and the PyTorch script a user would otherwise run
# (np.load, HF rotate_half, np.save). Then peak RSS of a streamed run (--max-memory).
#
#   bench/rope/compare_rope.sh [POSENC_BIN] [WORKDIR]
set -eu
BIN=${1:-build/posenc}
DIR=${2:-$(mktemp -d /tmp/posenc-rope-bench.XXXXXX)}
PY=/usr/bin/python3
mkdir -p "$DIR"
IN=$DIR/q.npy
$PY - "$IN" <<'PYEOF'
import sys, numpy as np
x = np.random.default_rng(0).standard_normal((16384, 32, 128), dtype=np.float32)
np.save(sys.argv[1], x)  # 256 MiB, s h d
PYEOF
cat > "$DIR/torch_rope.py" <<'PYEOF'
import sys, numpy as np, torch
x = torch.from_numpy(np.load(sys.argv[1]))           # [s, h, d]
d = x.shape[-1]
inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
pos = torch.arange(x.shape[0], dtype=torch.float32)
freqs = torch.outer(pos, inv)
emb = torch.cat([freqs, freqs], -1)
cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
np.save(sys.argv[2], (x * cos + rot * sin).numpy())
PYEOF
now() { date +%s.%N; }
best() {  # best of 3 wall times of "$@"
  b=1e9
  for _ in 1 2 3; do
    t0=$(now); "$@" >/dev/null; t1=$(now)
    b=$(echo "$b $t0 $t1" | awk '{d=$3-$2; print (d<$1)?d:$1}')
  done
  echo "$b"
}
cat "$IN" >/dev/null
t_cp=$(best cp "$IN" "$DIR/cp.npy")
t_rope=$(best "$BIN" rope "$IN" -o "$DIR/rope.npy" --axes shd)
t_rope32=$(best "$BIN" rope "$IN" -o "$DIR/rope32.npy" --axes shd --precision f32)
t_torch=$(best $PY "$DIR/torch_rope.py" "$IN" "$DIR/torch.npy")
awk -v c="$t_cp" -v r="$t_rope" -v r32="$t_rope32" -v p="$t_torch" 'BEGIN {
  printf "cp                    %7.1f ms\n", c * 1000
  printf "posenc rope (f64)     %7.1f ms  = %.2f x cp\n", r * 1000, r / c
  printf "posenc rope (f32)     %7.1f ms  = %.2f x cp\n", r32 * 1000, r32 / c
  printf "torch script          %7.1f ms  = %.2f x cp; posenc is %.1f x faster\n", p * 1000, p / c, p / r
}'
"$BIN" compare "$DIR/rope32.npy" "$DIR/torch.npy" --atol 1e-4 --rtol 0 >/dev/null 2>&1 &&
  echo "posenc --precision f32 matches the torch script (atol 1e-4)" ||
  echo "note: compare of posenc --precision f32 and torch output failed or is unavailable"
/usr/bin/time -v "$BIN" rope "$IN" -o "$DIR/stream.npy" --axes shd --max-memory 64M 2>"$DIR/time.txt"
awk -F: '/Maximum resident/ {printf "streamed, --max-memory 64M: peak RSS %.1f MiB\n", $2 / 1024}' "$DIR/time.txt"
cmp -s "$DIR/stream.npy" "$DIR/rope.npy" && echo "streamed output identical to the in-memory run"
rm -f "$DIR"/*.npy
