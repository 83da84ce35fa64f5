#!/usr/bin/env bash
# Host time the agent adds per CUDA graph launch (a graph of 8 captured all-reduces), against a
# no-op driver and NCCL: plain, then with libfr_agent.so preloaded. Prints both medians and the
# difference (target <= 100 ns), and checks that the timed loop made no heap allocation.
set -euo pipefail
build=${1:-build}
bench=$build/tests/bench/graphs/fr_bench_graph
agent=$build/lib/libfr_agent.so
for f in "$bench" "$agent"; do
  [[ -e $f ]] || { echo "graph bench: $f is missing (build first)" >&2; exit 1; }
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-graph.XXXXXX")
trap 'rm -rf "$logs"' EXIT
plain=$(env -u LD_PRELOAD "$bench")
agented=$(FR_LOG_DIR=$logs LD_PRELOAD=$agent "$bench")
value() { sed -n "s/^$1=//p" <<<"$2"; }
a=$(value graph_launch_ns "$plain")
b=$(value graph_launch_ns "$agented")
awk -v a="$a" -v b="$b" 'BEGIN {
  printf "graph launch        without %8.1f ns   with %8.1f ns   added %8.1f ns (target <= 100 ns)\n", a, b, b - a
}'
allocs=$(value allocs_in_loop "$agented")
echo "heap allocations in the timed loop under the agent: $allocs"
status=0
[[ $allocs == 0 ]] || status=1
ls "$logs"/*.frlog >/dev/null 2>&1 || { echo "graph bench: the agent wrote no log" >&2; status=1; }
exit $status
