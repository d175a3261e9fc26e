#!/usr/bin/env bash
# Regenerates the pictures in docs/ (shown in README.md) with posenc itself.
# Usage: docs/make_pictures.sh [path/to/posenc]
set -euo pipefail
posenc=${1:-posenc}
here=$(cd "$(dirname "$0")" && pwd)
"$posenc" analyze decay --dim 128 --bases 10000,500000,1000000 --max-distance 2000 \
  --width 960 --height 720 --plot "$here/decay.png"
"$posenc" analyze wavelengths --dim 128 --base 500000 --factor 8 --original-max-pos 8192 \
  --width 960 --height 600 --plot "$here/wavelengths.png"
# A kernel whose error grows with position: RoPE with float32 angles against the exact
# rotation, on the sinusoidal table as input (any [s, d] tensor does).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$posenc" table sinusoidal --positions 8192 --dim 128 -o "$tmp/x.npy"
"$posenc" rope "$tmp/x.npy" --precision f32 -o "$tmp/x_f32.npy"
"$posenc" rope "$tmp/x.npy" -o "$tmp/x_ref.npy"
"$posenc" -q compare "$tmp/x_f32.npy" "$tmp/x_ref.npy" --by s,pair \
  --width 960 --height 720 --plot "$here/compare_rope_f32.png" || true
