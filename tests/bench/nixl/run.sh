#!/usr/bin/env bash
# What the agent adds per NIXL transfer, against a no-op libnixl.so: instructions per transfer under
# callgrind (N1 and N2 transfers, plainly and preloaded: ((with N2 - with N1) - (plain N2 - plain
# N1)) / (N2 - N1)), then host time per transfer and per status poll, with and without the agent.
# A process that never calls NIXL pays nothing: the wrappers are only reached through NIXL's own
# symbols.
set -euo pipefail
build=${1:-build}
bench=$build/tests/bench/nixl/fr_bench_nixl
agent=$build/lib/libfr_agent.so
for f in "$bench" "$agent"; do
  [[ -e $f ]] || { echo "nixl bench: $f is missing (build first)" >&2; exit 1; }
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-nixl.XXXXXX")
trap 'rm -rf "$logs"' EXIT

instructions() {
  local out=$logs/callgrind.out
  env -u LD_PRELOAD ${1:+LD_PRELOAD=$1} FR_LOG_DIR="$logs" valgrind --tool=callgrind \
    --callgrind-out-file="$out" "$bench" --calls "$2" >/dev/null 2>&1 || return 1
  sed -n 's/^summary: *//p' "$out" | head -n 1
  rm -f "$out"
}
n1=2000
n2=12000
if command -v valgrind >/dev/null 2>&1; then
  if ! { p1=$(instructions "" $n1) && p2=$(instructions "" $n2) &&
    a1=$(instructions "$agent" $n1) && a2=$(instructions "$agent" $n2); }; then
    echo "nixl bench: the benchmark failed under callgrind" >&2
    exit 1
  fi
  awk -v p1="$p1" -v p2="$p2" -v a1="$a1" -v a2="$a2" -v n=$((n2 - n1)) 'BEGIN {
    printf "callgrind: added instructions per transfer (create, post, status, release): %.0f (no-op NIXL alone: %.0f)\n", ((a2 - a1) - (p2 - p1)) / n, (p2 - p1) / n
  }'
else
  echo "callgrind: valgrind is not installed; instruction counts not measured"
fi

plain=$(env -u LD_PRELOAD "$bench")
agented=$(FR_LOG_DIR=$logs LD_PRELOAD=$agent "$bench")
value() { sed -n "s/^$1=//p" <<<"$2"; }
for key in transfer_ns status_ns; do
  awk -v k="$key" -v a="$(value "$key" "$plain")" -v b="$(value "$key" "$agented")" 'BEGIN {
    printf "%-12s without %8.1f ns   with %8.1f ns   added %8.1f ns\n", k, a, b, b - a
  }'
done
ls "$logs"/*.frlog >/dev/null 2>&1 || { echo "nixl bench: the agent wrote no log" >&2; exit 1; }
