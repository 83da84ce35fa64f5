#!/usr/bin/env bash
# The agent on a real GPU (for a machine with one GPU, torch and NCCL): a PyTorch job of small
# all-reduces with and without the agent. Checks that the records match the calls and that the GPU
# markers reached every launched op; prints the host time per all-reduce with and without.
#   bash tests/agent/gpu/run.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
agent=$(cd "$build" && pwd)/lib/libfr_agent.so
[[ -f $agent ]] || { echo "gpu check: $agent is missing" >&2; exit 1; }
logs=$(mktemp -d "${TMPDIR:-/tmp}/fr-gpu-check.XXXXXX")
trap 'rm -rf "$logs"' EXIT
n=2000

plain=$(python3 "$here/allreduce.py" $n | sed -n 's/^per_call_us=//p')
with=$(FR_LOG_DIR=$logs FR_BUFFER_ENTRIES=8192 FR_DEBUG=1 LD_PRELOAD=$agent \
       python3 "$here/allreduce.py" $n | sed -n 's/^per_call_us=//p')
echo "host time per all-reduce: without ${plain} us, with ${with} us"
awk -v a="$plain" -v b="$with" 'BEGIN { printf "added %.2f us (%.2fx)\n", b - a, (a > 0 ? b / a : 0) }'
status=0
for log in "$logs"/*.frlog; do
  [[ -e $log ]] || { echo "gpu check: no log written" >&2; exit 1; }
  python3 "$here/check_log.py" "$log" --expect-allreduce $((n + 100)) || status=1
done
exit $status
