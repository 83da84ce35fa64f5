#!/usr/bin/env bash
# Host time the agent adds per NCCL call: the benchmark runs against a no-op NCCL, once plainly
# and once with libfr_agent.so preloaded; prints both medians, the difference and the ratio, and
# checks that the timed loops made no heap allocation.
set -euo pipefail
build=${1:-build}
bench=$build/tests/bench/agent/fr_bench_agent
agent=$build/lib/libfr_agent.so
for f in "$bench" "$agent"; do
  [[ -e $f ]] || { echo "agent bench: $f is missing (build first)" >&2; exit 1; }
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-agent.XXXXXX")
trap 'rm -rf "$logs"' EXIT

plain=$(env -u LD_PRELOAD "$bench")
agented=$(FR_LOG_DIR=$logs LD_PRELOAD=$agent "$bench")
value() { sed -n "s/^$1=//p" <<<"$2"; }

status=0
for key in allreduce_ns group_send_recv_ns; do
  a=$(value "$key" "$plain")
  b=$(value "$key" "$agented")
  awk -v k="$key" -v a="$a" -v b="$b" 'BEGIN {
    printf "%-20s without %8.1f ns   with %8.1f ns   added %8.1f ns   ratio %6.2fx\n", k, a, b, b - a, (a > 0 ? b / a : 0)
  }'
done
added=$(awk -v a="$(value allreduce_ns "$plain")" -v b="$(value allreduce_ns "$agented")" 'BEGIN { printf "%.1f", b - a }')
per_call=$(awk -v a="$(value group_send_recv_ns "$plain")" -v b="$(value group_send_recv_ns "$agented")" 'BEGIN { printf "%.1f", (b - a) / 4 }')
echo "added per intercepted all-reduce: ${added} ns (target <= 100 ns)"
echo "added per call in a GroupStart/Send/Recv/GroupEnd group: ${per_call} ns"
allocs=$(value allocs_in_loop "$agented")
echo "heap allocations in the timed loops under the agent: $allocs"
[[ $allocs == 0 ]] || status=1
ls "$logs"/*.frlog >/dev/null 2>&1 || { echo "agent bench: the agent wrote no log" >&2; status=1; }
exit $status
