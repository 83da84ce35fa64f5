#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz briefly on a copy of its seed corpus (the committed
# corpus/<target>/ plus the seeds fr_fuzz_seeds makes in the current format) and fails on any
# crash, leak, sanitizer report or timeout. Crashing inputs are kept in BUILD/fuzz/crashes/.
#
#   bash tests/fuzz/run.sh [BUILD_DIR]     (default build-fuzz; FR_FUZZ_SECONDS per target, 15)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build-fuzz}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
secs=${FR_FUZZ_SECONDS:-15}
bin="$build/fuzz"
if [ ! -x "$bin/fr_fuzz_seeds" ]; then
  echo "run.sh: no fuzz build in $build (cmake -DFR_FUZZ=ON, target fr_fuzz_all)" >&2
  exit 2
fi
work=$(mktemp -d /tmp/fr-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin/fr_fuzz_seeds" "$work/generated"
if [ -x "$bin/fr_fuzz_frd_seeds" ]; then "$bin/fr_fuzz_frd_seeds" "$work/generated"; fi

failed=0
ran=0
for target in flight_log manifest torch_json unpickle frd_peer; do
  exe="$bin/fr_fuzz_$target"
  if [ ! -x "$exe" ]; then
    echo "FAIL $target: $exe was not built" >&2
    failed=1
    continue
  fi
  corpus="$work/corpus/$target"
  mkdir -p "$corpus" "$work/artifacts/$target"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/" 2>/dev/null || true
  if [ -d "$work/generated/$target" ]; then cp "$work/generated/$target/"* "$corpus/"; fi
  log="$work/$target.log"
  set +e
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$target/" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  ran=$((ran + 1))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $target (exit $rc, $runs runs); last lines of its log:" >&2
    tail -n 40 "$log" >&2
    mkdir -p "$build/fuzz/crashes/$target"
    cp "$work/artifacts/$target/"* "$build/fuzz/crashes/$target/" 2>/dev/null || true
    failed=1
  else
    echo "ok   $target: $runs runs in ${secs}s, coverage $cov, $(ls "$corpus" | wc -l) corpus files"
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED (crashing inputs in $build/fuzz/crashes/)" >&2
  exit 1
fi
echo "fuzz: $ran targets ran clean"
