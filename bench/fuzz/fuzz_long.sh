#!/usr/bin/env bash
# Longer fuzzing than CI's: builds the libFuzzer harnesses (clang-14, build-fuzz/) and
# runs each for SECONDS (default 600), two at a time, printing the executions reached
# and any findings. The grown corpora and logs stay in bench/out/fuzz/<harness>/; new
# inputs worth keeping go to tests/fuzz/corpus/<harness>/ by hand.
#
#   bench/fuzz/fuzz_long.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-600}
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DPOSENC_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_all
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
tests/fuzz/run_fuzz.sh build-fuzz "$seconds" bench/out/fuzz
