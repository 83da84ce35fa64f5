#!/usr/bin/env bash
# frd benchmarks, printing figures:
#  1. stall threshold -> written verdict, for a 16-rank simulated job (fr-simjob --daemons);
#     target <= 2 s. Measured from the dump set itself: the threshold is the call time of the
#     oldest op still in flight plus --stall-after; the verdict time is analysis.json's mtime.
#  2. the adaptive threshold (--stall-after auto) on fr-simjob --daemons, 4 ranks, 100 ms steps:
#     time from a host hang to the written verdict (target <= 5 s), and false incidents per 1,000
#     steps of a healthy job with 20x step jitter and a 10 s all-ranks pause (target 0).
#  3. one coordinator against N simulated nodes x 8 ranks heartbeating at 1 Hz (frd-loadgen):
#     coordinator CPU, memory and dump fan-out time at 2048, 8192 and 16384 nodes; targets at
#     16384: <= 1 core, <= 2 GiB, every node asked within 1 s of the coordinator's decision. Each
#     count takes about 10 s plus one second per 1,000 nodes to connect; the load generator shares
#     the machine. The coordinator and the load generator each run in a session of their own
#     (setsid): with the kernel's autogroup scheduling each then gets one session's share of a
#     shared machine, rather than splitting the share of the shell that runs this script.
#     FR_BENCH_PIN chooses where they run: "1" pins the coordinator to a core of its own (the
#     last one) and the load generator to the others (taskset), as the sizing rule in docs/frd.md
#     plans for a coordinator; "0" leaves both to the scheduler on every core; "both" measures
#     each count both ways; the default ("auto") pins when the machine has 2 cores or more. The
#     CPUs each side got are printed. The load generator runs its nodes in 4 worker processes
#     (frd-loadgen --procs), so that it is not the limit at 16384 nodes.
# Usage: run.sh <build-dir> [node counts...]   (FR_BENCH_HEALTHY_STEPS: steps of the healthy job;
#        FR_BENCH_LOAD_ONLY=1: only the state machine and the coordinator under load, 3.)
#  4. the stacks of every rank of a node at a dump (8 ranks, frd node's "stacks of 8 of 8
#     process(es) in X s"), native (fr-simjob-rank) and Python (fr-simjob --python, with py-spy
#     when installed); target: 8 ranks within 2 s.
#  5. the live page under 16 clients, /metrics timed (before 3; see there).
#  6. the node's GPU-marker sampler (frd-gpu-sampler-bench): CPU per pass over 8 logs x 4
#     communicators, and its thread's share of a core at 1 ms (before the scorecard).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
shift || true
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(2048 8192 16384)
# Where the coordinator and the load generator run (section 3), checked before anything runs.
ncpu=$(nproc)
pin=${FR_BENCH_PIN:-auto}
case $pin in
  auto) if ((ncpu >= 2)) && command -v taskset >/dev/null; then modes=(pinned); else modes=(shared); fi ;;
  1) modes=(pinned) ;;
  0) modes=(shared) ;;
  both) modes=(pinned shared) ;;
  *) echo "FR_BENCH_PIN must be auto, 1, 0 or both (got '$pin')" >&2; exit 2 ;;
esac
if [[ " ${modes[*]} " == *" pinned "* ]] && { ((ncpu < 2)) || ! command -v taskset >/dev/null; }; then
  echo "  pinning needs 2 cores and taskset (util-linux): measuring unpinned only"
  modes=(shared)
fi
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

if [[ ${FR_BENCH_LOAD_ONLY:-0} != 1 ]]; then
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

echo "-- --stall-after auto: host hang to written verdict (4 ranks, 100 ms steps)"
if [[ -x $simjob && -x $frd ]]; then
  for i in 1 2 3; do
    out=$tmp/auto$i
    "$simjob" --nodes 2 --ranks-per-node 2 --steps 400 --step-ms 100 \
      --fault rank=3,step=40,kind=hang-host --daemons --quiet --out "$out" >/dev/null 2>&1 || true
    python3 - "$out/result.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
d = r.get("dump_set")
if r.get("stop_reason") != "incident" or not d:
    print("  run: no verdict (%s)" % r.get("stop_reason")); sys.exit(0)
v = r["analysis"]["verdict"]
# The hang: the blocked collective's earliest call, on the dump set's clock.
calls = [e["last_enqueued"]["call_ns"] for e in v.get("evidence", [])
         if e.get("last_enqueued") and e["last_enqueued"].get("seq") == v.get("seq")]
written = os.stat(os.path.join(d, "analysis.json")).st_mtime_ns
reason = r["incidents_opened"][0].get("reason", "") if r.get("incidents_opened") else ""
th = reason[reason.find("(threshold"):] if "(threshold" in reason else ""
if calls:
    print("  run: verdict %s culprits %s, written %.2f s after the hang %s"
          % (v["kind"], v["culprit_ranks"], (written - min(calls)) / 1e9, th))
else:
    print("  run: verdict %s, %.2f s without progress before it %s"
          % (v["kind"], r.get("stalled_for_s", -1), th))
PY
  done
  steps=${FR_BENCH_HEALTHY_STEPS:-200}
  echo "-- --stall-after auto: healthy job, 4 ranks, 100 ms steps, 20x jitter, 10 s pause, $steps steps"
  out=$tmp/healthy
  "$simjob" --nodes 2 --ranks-per-node 2 --steps "$steps" --step-ms 100 --step-jitter 20 \
    --pause step=$((steps / 2)),ms=10000 --daemons --quiet --out "$out" >/dev/null 2>&1 || true
  python3 - "$out/result.json" "$steps" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
steps = int(sys.argv[2])
n = len(r.get("incidents_opened", []))
print("  %s after %.0f s: %d incident(s) in %d steps = %.1f false incidents per 1,000 steps; "
      "%d slow-rank finding(s)" % (r.get("stop_reason"), r.get("job_s", 0), n, steps,
                                     1000.0 * n / steps, len(r.get("findings", []))))
PY
else
  echo "  skipped: $simjob or $frd not built"
fi

fi  # FR_BENCH_LOAD_ONLY

echo "-- the coordinator's state machine alone (CPU time, no gRPC)"
statebench=$build/tests/bench/daemon/frd-state-bench
[[ -x $statebench ]] || statebench=$build/bin/frd-state-bench
if [[ -x $statebench ]]; then "$statebench" "${counts[@]}"; else echo "  skipped: $statebench not built"; fi

echo "-- one heartbeat's decoding (CPU time, no gRPC)"
decodebench=$build/tests/bench/daemon/frd-decode-bench
[[ -x $decodebench ]] || decodebench=$build/bin/frd-decode-bench
if [[ -x $decodebench ]]; then "$decodebench"; else echo "  skipped: $decodebench not built"; fi

echo "-- the node's GPU-marker sampler: 8 logs x 4 communicators, every 1 ms"
samplerbench=$build/tests/bench/daemon/frd-gpu-sampler-bench
[[ -x $samplerbench ]] || samplerbench=$build/bin/frd-gpu-sampler-bench
if [[ -x $samplerbench ]]; then "$samplerbench" 8 4 1000 5; else echo "  skipped: $samplerbench not built"; fi

echo "-- fail-slow scorecard: the detector on seeded random synthetic jobs (no gRPC)"
scorecard=$build/tests/bench/daemon/frd-slow-scorecard
[[ -x $scorecard ]] || scorecard=$build/bin/frd-slow-scorecard
if [[ -x $scorecard ]]; then "$scorecard" 200 38; else echo "  skipped: $scorecard not built"; fi

if [[ ${FR_BENCH_LOAD_ONLY:-0} != 1 ]]; then
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

fi  # FR_BENCH_LOAD_ONLY

echo "-- one coordinator, N simulated nodes x 8 ranks at 1 Hz"
if [[ ! -x $loadgen || ! -x $frd ]]; then
  echo "  skipped: $loadgen or $frd not built"
  exit 0
fi
ulimit -n 65536 2>/dev/null || true
# 5. The live page under load (#37): 256 nodes x 8 ranks x 32 communicators, 16 clients reloading
#    `/` while `/metrics` is scraped every 100 ms; its latency printed (target: under 1 s).
echo "-- the live page: 16 clients on / of 256 nodes x 8 ranks x 32 communicators, /metrics timed"
dir=$tmp/page
mkdir -p "$dir"
http=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
setsid "$frd" coordinator --insecure --listen 127.0.0.1:0 --port-file "$dir/port" \
  --metrics-listen "127.0.0.1:$http" --dump-dir "$dir/dumps" --job-id page \
  --heartbeat-timeout 60 2>"$dir/coord.log" &
cpid=$!
pids+=("$cpid")
for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
setsid -w "$loadgen" --coordinator "127.0.0.1:$(cat "$dir/port")" --coordinator-pid "$cpid" \
  --nodes 256 --ranks 8 --comms 32 --procs 1 --interval 1 --warmup 4 --window 10 \
  --http-port "$http" --page-clients 16 || true
kill "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true
# The coordinator gets the last CPU, the load generator the others.
coord_cpus=$((ncpu - 1))
gen_cpus=0-$((ncpu - 2))
((ncpu == 2)) && gen_cpus=0
for n in "${counts[@]}"; do
 for mode in "${modes[@]}"; do
  dir=$tmp/load$n-$mode
  mkdir -p "$dir"
  run_coord=(setsid)
  run_gen=(setsid -w)
  if [[ $mode == pinned ]]; then
    run_coord=(setsid taskset -c "$coord_cpus")
    run_gen=(setsid -w taskset -c "$gen_cpus")
    echo "  $n nodes, pinned: coordinator on CPU $coord_cpus, load generator on CPU $gen_cpus (of $ncpu)"
  else
    echo "  $n nodes, unpinned: coordinator and load generator share CPUs 0-$((ncpu - 1))"
  fi
  "${run_coord[@]}" "$frd" coordinator --insecure --listen 127.0.0.1:0 --port-file "$dir/port" \
    --dump-dir "$dir/dumps" --job-id load --heartbeat-timeout 60 --dump-deadline 5 2>"$dir/coord.log" &
  cpid=$!
  pids+=("$cpid")
  for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
  port=$(cat "$dir/port")
  warm=$((4 + n / 1000))
  "${run_gen[@]}" "$loadgen" --coordinator "127.0.0.1:$port" --coordinator-pid "$cpid" --nodes "$n" \
    --ranks 8 --interval 1 --warmup "$warm" --window 6 || echo "  (some nodes were not asked in time)"
  # The coordinator's own view: listing the requests to handing the last one to gRPC.
  grep -h "handed to the node streams" "$dir/coord.log" | sed 's/^frd coordinator: /  coordinator: /' || true
  kill "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
 done
done
