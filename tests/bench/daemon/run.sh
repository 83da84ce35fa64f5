#!/usr/bin/env bash
# frd benchmarks, printing figures:
#  1. stall threshold -> written verdict, for a 16-rank simulated job (fr-simjob --daemons);
#     target <= 2 s. Measured from the dump set itself: the threshold is the call time of the
#     oldest op still in flight plus --stall-after; the verdict time is analysis.json's mtime.
#  2. one coordinator against N simulated nodes x 8 ranks heartbeating at 1 Hz (frd-loadgen):
#     coordinator CPU and dump fan-out time at 512, 2048 and 8192 nodes; target at 2048:
#     <= 0.5 core and every node asked within 1 s.
#  3. the stacks of every rank of a node at a dump (8 ranks, frd node's "stacks of 8 of 8
#     process(es) in X s"), native (fr-simjob-rank) and Python (fr-simjob --python, with py-spy
#     when installed); target: 8 ranks within 2 s.
# Usage: run.sh <build-dir> [node counts...]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
shift || true
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(512 2048 8192)
frd=$build/bin/frd
simjob=$build/bin/fr-simjob
loadgen=$build/tests/bench/daemon/frd-loadgen
[[ -x $loadgen ]] || loadgen=$build/bin/frd-loadgen
tmp=$(mktemp -d /tmp/frd-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "-- stall threshold to written verdict (16 ranks: 2 nodes x 8, --stall-after 2)"
if [[ -x $simjob && -x $frd ]]; then
  for i in 1 2 3; do
    out=$tmp/verdict$i
    "$simjob" --nodes 2 --ranks-per-node 8 --steps 20 --fault rank=11,step=4,kind=gpu-stall \
      --daemons --stall-after 2 --quiet --out "$out" >/dev/null 2>&1 || true
    python3 - "$out/result.json" 2 <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
stall = float(sys.argv[2])
d = r.get("dump_set")
if not d:
    print("  run: no verdict"); sys.exit(0)
a = r["analysis"]
v = a["verdict"]
# The oldest op in flight at the stall: the blocked collective's earliest call.
calls = [e["last_enqueued"]["call_ns"] for e in v.get("evidence", [])
         if e.get("last_enqueued") and e["last_enqueued"].get("seq") == v.get("seq")]
if not calls:
    print("  run: verdict %s, no evidence to time" % v["kind"]); sys.exit(0)
threshold = min(calls) + stall * 1e9
written = os.stat(os.path.join(d, "analysis.json")).st_mtime_ns
print("  run: verdict %s culprits %s, written %.3f s after the stall threshold"
      % (v["kind"], v["culprit_ranks"], (written - threshold) / 1e9))
PY
  done
else
  echo "  skipped: $simjob or $frd not built"
fi

echo "-- stacks of 8 ranks of one node at a dump (frd node, 1 node x 8 ranks)"
if [[ -x $simjob && -x $frd ]]; then
  for mode in native python; do
    extra=()
    if [[ $mode == python ]]; then
      command -v python3 >/dev/null || { echo "  python: no python3"; continue; }
      command -v py-spy >/dev/null || echo "  (py-spy not installed: native frames only)"
      extra=(--python)
    fi
    for i in 1 2 3; do
      out=$tmp/stacks-$mode$i
      "$simjob" --nodes 1 --ranks-per-node 8 --steps 20 --fault rank=5,step=4,kind=hang-host \
        --daemons --stall-after 2 --quiet "${extra[@]}" --out "$out" >/dev/null 2>&1 || true
      line=$(grep -o 'stacks of [0-9]* of [0-9]* process(es) in [0-9.]* s' "$out/node0/frd-node.log" | head -1)
      echo "  $mode run $i: ${line:-no dump}"
    done
  done
else
  echo "  skipped: fr-simjob or frd not built"
fi

echo "-- one coordinator, N simulated nodes x 8 ranks at 1 Hz"
if [[ ! -x $loadgen || ! -x $frd ]]; then
  echo "  skipped: $loadgen or $frd not built"
  exit 0
fi
ulimit -n 65536 2>/dev/null || true
for n in "${counts[@]}"; do
  dir=$tmp/load$n
  mkdir -p "$dir"
  "$frd" coordinator --insecure --listen 127.0.0.1:0 --port-file "$dir/port" --dump-dir "$dir/dumps" \
    --job-id load --stall-after 3600 --heartbeat-timeout 60 --dump-deadline 5 2>"$dir/coord.log" &
  cpid=$!
  pids+=("$cpid")
  for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
  port=$(cat "$dir/port")
  warm=$((4 + n / 1024))
  "$loadgen" --coordinator "127.0.0.1:$port" --coordinator-pid "$cpid" --nodes "$n" --ranks 8 \
    --interval 1 --warmup "$warm" --window 6 || echo "  (some nodes were not asked in time)"
  kill "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
done
