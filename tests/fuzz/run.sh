#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz on its persistent corpus, tests/fuzz/corpus/<target>/
# (committed: merged and minimized inputs, plus regress-* inputs that once crashed), together with
# the seeds fr_fuzz_seeds makes in the current format, and fails on any crash, leak, sanitizer
# report or timeout. Every input of the corpus runs first, so each regression input is replayed
# on every run.
#
#   bash tests/fuzz/run.sh [BUILD_DIR] [--merge]     (default build-fuzz)
#
#   FR_FUZZ_SECONDS   seconds per target (default 15: the short run of `make test`)
#   --merge           afterwards, merge what the run found into the committed corpus, minimized
#                     (`make fuzz`, `make fuzz-long`); without it the source tree is never written
#
# A crashing input is kept in BUILD_DIR/fuzz/crashes/<target>/ and, with --merge, also copied to
# tests/fuzz/corpus/<target>/regress-<sha1>: commit it with the fix, so the short run replays it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=build-fuzz
merge=0
for arg in "$@"; do
  case "$arg" in
    --merge) merge=1 ;;
    -*) echo "run.sh: unknown option $arg" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done
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

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1"
common=(-rss_limit_mb=2048 -timeout=10)
failed=0
ran=0
for target in flight_log manifest torch_json unpickle slow_history frd_peer wire; do
  exe="$bin/fr_fuzz_$target"
  if [ ! -x "$exe" ]; then
    echo "FAIL $target: $exe was not built" >&2
    failed=1
    continue
  fi
  committed="$root/tests/fuzz/corpus/$target"
  # New inputs go to the first folder only; the committed corpus is read, never written here.
  found="$work/found/$target"
  mkdir -p "$found" "$work/artifacts/$target" "$committed"
  seeds=("$committed")
  if [ -d "$work/generated/$target" ]; then seeds+=("$work/generated/$target"); fi
  log="$work/$target.log"
  set +e
  "$exe" -max_total_time="$secs" "${common[@]}" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$target/" "$found" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  set -e
  ran=$((ran + 1))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $target (exit $rc, $runs runs); last lines of its log:" >&2
    tail -n 40 "$log" >&2
    mkdir -p "$build/fuzz/crashes/$target"
    for a in "$work/artifacts/$target/"*; do
      [ -f "$a" ] || continue
      cp "$a" "$build/fuzz/crashes/$target/"
      if [ "$merge" -eq 1 ]; then
        keep="$committed/regress-$(sha1sum "$a" | cut -c1-16)"
        cp "$a" "$keep"
        echo "     kept as $keep: commit it with the fix" >&2
      fi
    done
    failed=1
    continue
  fi
  echo "ok   $target: $runs runs in ${secs}s, coverage $cov, $(ls "$found" | wc -l) new inputs"
  if [ "$merge" -eq 1 ]; then
    # Minimize committed + found + generated into a fresh folder; regression inputs always stay.
    merged="$work/merged/$target"
    mkdir -p "$merged"
    "$exe" -merge=1 "${common[@]}" "$merged" "${seeds[@]}" "$found" >"$work/$target.merge.log" 2>&1
    before=$(du -sb "$committed" | cut -f1)
    find "$committed" -maxdepth 1 -type f ! -name 'regress*' -delete
    cp "$merged/"* "$committed/" 2>/dev/null || true
    echo "     corpus/$target: $(ls "$committed" | wc -l) files, $before -> $(du -sb "$committed" | cut -f1) bytes"
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED (crashing inputs in $build/fuzz/crashes/)" >&2
  exit 1
fi
echo "fuzz: $ran targets ran clean"
