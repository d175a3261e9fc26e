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
