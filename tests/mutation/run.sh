#!/usr/bin/env bash
# Mutation check: plants each bug of tests/mutation/*.patch in a temporary copy of the tree
# (never in the tree itself), rebuilds, runs the tests that should catch it, and reports
# whether they failed (caught) or passed (MISSED), naming the tests that failed.
# Not part of the CI suite, which runs only --check: it rebuilds once per mutation (about a
# minute each on two cores).
#
# Usage: tests/mutation/run.sh [--isa V]... [--full] [--tree DIR] [NAME...]
#        tests/mutation/run.sh --check [NAME...]
#   --check  only check that each patch applies to the tree as it is (git apply --check:
#            no fuzz, no build; CI runs this so that a patch the code left behind fails)
#   --isa V  run the tests with POSENC_ROPE_ISA=V ("default" = unset, the widest kernel;
#            "avx2" = what an AVX2-only machine would run); repeat for several; default:
#            default and avx2
#   --full   run the whole suite for every mutation instead of the relevant tests
#   --tree D keep the copy and its build in D (created when missing) instead of a
#            temporary folder; a later run with the same D copies only the files that
#            changed and rebuilds only what they touch (minutes instead of a full build)
#   NAME     mutations to plant (file names without .patch); default: all
# Exit status 0 when every planted bug made the tests fail, 1 when one was missed or
# could not be planted, 2 for usage or setup errors (including a failing unmutated run);
# with --check, 0 when every patch applies and 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
isas=()
full=0
check=0
keep=
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --isa) isas+=("${2:?--isa needs a value}"); shift 2 ;;
    --full) full=1; shift ;;
    --check) check=1; shift ;;
    --tree) keep="${2:?--tree needs a folder}"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
[ ${#isas[@]} -gt 0 ] || isas=(default avx2)
[ -z "$keep" ] || keep=$(realpath -m "$keep")
if [ ${#names[@]} -eq 0 ]; then
  for p in "$here"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi

if [ $check -eq 1 ]; then
  stale=0
  for name in "${names[@]}"; do
    if ! err=$(cd "$src" && git apply --check "$here/$name.patch" 2>&1); then
      printf '%s: the patch does not apply (update it): %s\n' "$name" "${err//$'\n'/; }" >&2
      stale=1
    fi
  done
  [ $stale -eq 1 ] || echo "mutation patches: all ${#names[@]} apply"
  exit $stale
fi

# The tests that exercise each mutation: ctest name patterns, one a line (no groups:
# ctest's regular expressions allow only ten).
relevant() {
  local py=() unit=()
  case "$1" in
    bf16-truncation|f16-double-rounding|generic-f32-arithmetic|pair-sign|avx512-*)
      py=(exact_rope rope_apply rope_stream precision_option); unit=(Rope) ;;
    precision-f32-ignored)
      py=(precision_option rope_apply table_rope exact_attention attention_reference) ;;
    window-edge|attention-precision-ignored)
      py=(exact_attention attention_reference attention_errors precision_option)
      unit=(Attention) ;;
    tensor-f16-double-rounding)
      py=(convert_rounding exact_tables table_sinusoidal table_rope table_rope2d table_bias
          exact_attention attention_reference); unit=(Tensor Half Narrow) ;;
    position-ids-start-ignored)
      py=(exact_rope rope_apply table_rope exact_attention attention_reference); unit=(Rope) ;;
    yarn-default-factor)
      py=(exact_tables table_rope rope_apply) ;;
    *) echo '.'; return ;;
  esac
  for t in "${py[@]}"; do echo "^reference\.test_$t\$"; done
  for t in "${unit[@]}"; do echo "^$t"; done
  [ "$1" != tensor-f16-double-rounding ] || echo '^cli\.test_convert$'
}
# Patterns of several mutations as one ctest regex.
regex_for() { for n in "$@"; do relevant "$n"; done | sort -u | paste -sd'|'; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posenc-mutation.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tree="${keep:-$tmp/tree}"
# The working tree as it is (tracked and new files, without ignored ones such as build/).
sources() {
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done)
}
if [ -d "$tree/build" ]; then
  # A kept copy: only files whose content differs are copied, with a new time so that
  # the build sees them (this also undoes a mutation a stopped run left planted).
  sources | while IFS= read -r -d '' f; do
    cmp -s "$src/$f" "$tree/$f" && continue
    mkdir -p "$tree/$(dirname "$f")"
    cp -P --remove-destination "$src/$f" "$tree/$f"
  done
else
  mkdir -p "$tree"
  sources | (cd "$src" && tar --null -cf - -T -) | tar -xf - -C "$tree"
fi
jobs=$(nproc)
cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
build() {
  cmake --build "$tree/build" -j "$jobs" --target posenc posenc_unit >"$tmp/build.log" 2>&1
}

# Runs the tests matching $2 with kernel selection $1; prints the failed test names.
run_tests() {
  local env=() out
  [ "$1" = default ] || env=(POSENC_ROPE_ISA="$1")
  (cd "$tree/build" && env "${env[@]}" ctest -j "$jobs" --no-tests=error -R "$2") \
    >"$tmp/ctest.log" 2>&1 && return 0
  sed -n '/tests FAILED:/,$s/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' "$tmp/ctest.log" |
    tr '\n' ' '
  grep -q 'No tests were found' "$tmp/ctest.log" && echo '(no test matched)'
  return 1
}

build || { cat "$tmp/build.log" >&2; echo "run.sh: the unmutated tree does not build" >&2; exit 2; }
for isa in "${isas[@]}"; do
  regex='.'
  if [ $full -eq 0 ]; then
    regex=$(regex_for "${names[@]}")
  fi
  if ! failed=$(run_tests "$isa" "$regex"); then
    tail -n 30 "$tmp/ctest.log" >&2
    echo "run.sh: the unmutated tree fails tests with kernel $isa: $failed" >&2
    exit 2
  fi
done

missed=0
printf '%-28s %-8s %-8s %s\n' mutation kernel result "failing tests"
for name in "${names[@]}"; do
  patch_file="$here/$name.patch"
  # No fuzz: a patch whose context moved must be regenerated, not planted elsewhere.
  if ! patch -s -p1 -d "$tree" --forward --fuzz=0 --dry-run <"$patch_file" >/dev/null 2>&1; then
    printf '%-28s %-8s %-8s %s\n' "$name" - ERROR "the patch does not apply (update it)"
    missed=1
    continue
  fi
  patch -s -p1 -d "$tree" --forward --fuzz=0 <"$patch_file"
  if ! build; then
    printf '%-28s %-8s %-8s %s\n' "$name" - ERROR \
      "does not build: $(grep -m1 error "$tmp/build.log")"
    missed=1
  else
    for isa in "${isas[@]}"; do
      if [[ "$name" == avx512-* && "$isa" != default && "$isa" != avx512* ]]; then
        printf '%-28s %-8s %-8s %s\n' "$name" "$isa" n/a "the AVX-512 kernel does not run"
        continue
      fi
      regex='.'
      [ $full -eq 1 ] || regex=$(regex_for "$name")
      if failed=$(run_tests "$isa" "$regex"); then
        printf '%-28s %-8s %-8s %s\n' "$name" "$isa" MISSED "(all tests passed)"
        missed=1
      else
        printf '%-28s %-8s %-8s %s\n' "$name" "$isa" caught "$failed"
      fi
    done
  fi
  patch -s -p1 -d "$tree" -R <"$patch_file"
done
exit $missed
