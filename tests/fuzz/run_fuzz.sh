#!/usr/bin/env bash
# Runs every fuzz harness for SECONDS each, two at a time, on a copy of its committed
# corpus (tests/fuzz/corpus/<name>), and prints the executions reached. A crash, leak,
# timeout or out-of-memory of a harness is a finding: the input is kept in WORK/<name>/
# and the script exits 1.
#
#   [POSENC_FUZZ_HARNESSES="plot join"] tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [WORK]
#
# BUILD_DIR is a POSENC_FUZZ=ON build (see tests/fuzz/CMakeLists.txt); WORK defaults to
# a temporary folder, removed when nothing was found.
set -euo pipefail
build=$(cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/posenc-fuzz-XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# POSENC_FUZZ_HARNESSES="plot join" runs only those.
# shellcheck disable=SC2206  # a list of words
harnesses=(${POSENC_FUZZ_HARNESSES:-npy text hdf5 ref options plot join rope_ids})

run_one() {
  local h=$1 dir=$work/$1
  mkdir -p "$dir/corpus"
  cp -n "$here/corpus/$h/"* "$dir/corpus/" 2>/dev/null || true
  local max_len=4096 malloc_limit=2048
  # The HDF5 harness forks a child per input (its watchdog set to 2 s there), which
  # inherits the fuzzer's allocation hook: libhdf5's runaway allocations in the child
  # are the child's to contain, not findings.
  [ "$h" = hdf5 ] && max_len=16384 malloc_limit=1048576
  (cd "$dir" && "$build/tests/fuzz/fuzz_$h" corpus -max_total_time="$seconds" \
    -max_len=$max_len -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=$malloc_limit \
    -print_final_stats=1 -artifact_prefix="$dir/" >"$dir/log" 2>&1) || true
}

pids=()
for h in "${harnesses[@]}"; do
  run_one "$h" &
  pids+=($!)
  # Two at a time (the machines have two cores).
  if [ ${#pids[@]} -eq 2 ]; then
    wait "${pids[0]}"
    pids=("${pids[1]}")
  fi
done
wait

found=0
for h in "${harnesses[@]}"; do
  log=$work/$h/log
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  artifacts=$(ls "$work/$h" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true)
  printf 'fuzz_%-8s %10s executions in %s s%s\n' "$h" "${runs:-?}" "$seconds" \
    "${artifacts:+  FINDINGS: $artifacts}"
  if [ -n "$artifacts" ] || [ -z "$runs" ]; then
    found=1
    tail -n 40 "$log" >&2
  fi
done
if [ $found -ne 0 ]; then
  echo "fuzzing found problems; inputs and logs in $work" >&2
  exit 1
fi
[ -z "${3:-}" ] && rm -rf "$work"
exit 0
