#!/usr/bin/env bash
# What the agent adds per NCCL call, against a no-op NCCL. The headline is the instruction count
# under callgrind (valgrind), which does not move with the machine's load: the benchmark makes N1
# and then N2 calls, plainly and with libfr_agent.so preloaded, and the added instructions per call
# are ((with N2 - with N1) - (plain N2 - plain N1)) / (N2 - N1). Then the host time: both medians,
# the difference and the ratio; and a check that the timed loops made no heap allocation.
set -euo pipefail
build=${1:-build}
bench=$build/tests/bench/agent/fr_bench_agent
agent=$build/lib/libfr_agent.so
for f in "$bench" "$agent"; do
  [[ -e $f ]] || { echo "agent bench: $f is missing (build first)" >&2; exit 1; }
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-agent.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# Total instructions of one run under callgrind: preload (or empty), kind, calls.
instructions() {
  local out=$logs/callgrind.out
  env -u LD_PRELOAD ${1:+LD_PRELOAD=$1} FR_LOG_DIR="$logs" valgrind --tool=callgrind \
    --callgrind-out-file="$out" "$bench" --calls "$2" "$3" >/dev/null 2>&1 || return 1
  sed -n 's/^summary: *//p' "$out" | head -n 1
  rm -f "$out"
}
n1=2000
n2=22000
if command -v valgrind >/dev/null 2>&1; then
  for kind in allreduce group group16; do
    p1=$(instructions "" $kind $n1) && p2=$(instructions "" $kind $n2) &&
      a1=$(instructions "$agent" $kind $n1) && a2=$(instructions "$agent" $kind $n2) || {
      echo "agent bench: the benchmark failed under callgrind" >&2
      exit 1
    }
    # A group is GroupStart, Send, Recv, GroupEnd: 4 intercepted calls, 2 of them ops.
    awk -v k=$kind -v p1="$p1" -v p2="$p2" -v a1="$a1" -v a2="$a2" -v n=$((n2 - n1)) 'BEGIN {
      plain = (p2 - p1) / n; added = ((a2 - a1) - (p2 - p1)) / n
      if (k == "allreduce")
        printf "callgrind: added instructions per plain all-reduce: %.0f (direct call: %.0f; target <= 150)\n", added, plain
      else if (k == "group")
        printf "callgrind: added instructions per GroupStart/Send/Recv/GroupEnd group: %.0f (%.0f per op)\n", added, added / 2
      else
        printf "callgrind: added instructions per group of 8 Send/Recv pairs: %.0f (%.0f per op)\n", added, added / 16
    }'
  done
else
  echo "callgrind: valgrind is not installed; instruction counts not measured"
fi

plain=$(env -u LD_PRELOAD "$bench")
agented=$(FR_LOG_DIR=$logs LD_PRELOAD=$agent "$bench")
value() { sed -n "s/^$1=//p" <<<"$2"; }

status=0
for key in allreduce_ns group_send_recv_ns group_16_ops_ns; do
  a=$(value "$key" "$plain")
  b=$(value "$key" "$agented")
  awk -v k="$key" -v a="$a" -v b="$b" 'BEGIN {
    printf "%-20s without %8.1f ns   with %8.1f ns   added %8.1f ns   ratio %6.2fx\n", k, a, b, b - a, (a > 0 ? b / a : 0)
  }'
done
added=$(awk -v a="$(value allreduce_ns "$plain")" -v b="$(value allreduce_ns "$agented")" 'BEGIN { printf "%.1f", b - a }')
per_op=$(awk -v a="$(value group_send_recv_ns "$plain")" -v b="$(value group_send_recv_ns "$agented")" 'BEGIN { printf "%.1f", (b - a) / 2 }')
echo "added per intercepted all-reduce (median): ${added} ns (target <= 25 ns)"
per_op16=$(awk -v a="$(value group_16_ops_ns "$plain")" -v b="$(value group_16_ops_ns "$agented")" 'BEGIN { printf "%.1f", (b - a) / 16 }')
echo "added per op in a GroupStart/Send/Recv/GroupEnd group, the group's calls included: ${per_op} ns (target <= 40 ns)"
echo "added per op in a group of 8 Send/Recv pairs, the group's calls included: ${per_op16} ns (target <= 40 ns)"
# The profiler plugin interface (the agent as NCCL's plugin): host time per event, and an
# all-reduce's time before NCCL made any plugin context and after.
prof=$(FR_LOG_DIR=$logs LD_PRELOAD=$agent "$bench" --profiler) || { echo "agent bench: the profiler bench failed" >&2; status=1; }
echo "profiler plugin: per proxy step (start, 2 states, stop) $(value proxy_step_ns "$prof") ns;" \
  "per proxy op $(value proxy_op_ns "$prof") ns; per kernel channel $(value kernel_channel_ns "$prof") ns;" \
  "heap allocations $(value allocs_in_loop "$prof")"
echo "profiler plugin: all-reduce through the agent, no plugin context (NCCL did not load it)" \
  "$(value allreduce_no_plugin_ns "$prof") ns; with a context $(value allreduce_plugin_context_ns "$prof") ns"
[[ $(value allocs_in_loop "$prof") == 0 ]] || status=1
allocs=$(value allocs_in_loop "$agented")
echo "heap allocations in the timed loops under the agent: $allocs"
[[ $allocs == 0 ]] || status=1
ls "$logs"/*.frlog >/dev/null 2>&1 || { echo "agent bench: the agent wrote no log" >&2; status=1; }
exit $status
