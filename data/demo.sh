#!/usr/bin/env bash
# The demo job on the bundled tensors (data/q.npy, k.npy, v.npy, layer0.h5; made by
# data/make_demo.py): RoPE tables, rotation of one layer's q and k, reference
# attention, and a look at the results. Usage: data/demo.sh [path/to/posenc]
set -euo pipefail
posenc=${1:-posenc}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/posenc-demo.XXXXXX")
trap 'rm -rf "$out"' EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "RoPE cos table, 6 positions x 8 dims, NeoX layout (posenc table rope)"
"$posenc" table rope --positions 6 --dim 8 --emit cos -o - --to text

say "Llama 3 scaled inverse frequencies (--verbose lists the parameters on stderr)"
"$posenc" -v table rope --positions 1 --dim 16 --base 500000 --scaling llama3 --factor 8 \
  --original-max-pos 8192 --emit inv-freq -o - --to csv

say "Rotate layer 0's q and k (HDF5 in and out, grouped-query heads)"
"$posenc" rope "$here/layer0.h5:/layer0/q" "$here/layer0.h5:/layer0/k" \
  -o "$out/rot.h5:/q" -o "$out/rot.h5:/k"
"$posenc" inspect "$out/rot.h5"

say "Attention with RoPE and a causal mask: probabilities of head 0"
"$posenc" attention -q "$here/q.npy" -k "$here/k.npy" -v "$here/v.npy" --rope --causal \
  --emit probs,output,lse -o "$out/attn.h5"
"$posenc" inspect "$out/attn.h5:/probs" --slice "0,0" --stats

say "The same attention from the pre-rotated q and k matches"
"$posenc" attention -q "$out/rot.h5:/q" -k "$out/rot.h5:/k" -v "$here/v.npy" --causal \
  --emit output -o "$out/attn_prerot.npy"
"$posenc" compare "$out/attn_prerot.npy" "$out/attn.h5:/output" --rtol 1e-5 --atol 1e-6
