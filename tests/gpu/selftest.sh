#!/usr/bin/env bash
# The GPU check's checks, proven on the emulation: the same check.py that run.sh applies to a real
# torch job's logs is applied here to one-rank fr-simjob runs that produce the same evidence, and
# must pass on them and fail where the evidence is wrong:
#   records  a healthy job's log (every all-reduce completed, GPU markers)
#   graph    fr-simjob --graphs: 100 replays, markers at the last op
#   stall    --graphs with a gpu-stall in replay 60, dumped by `frd snapshot` while it hangs
#   stacks   a Python rank (--python) hung on the host, dumped by `frd snapshot` with py-spy and the
#            emulated NVML: its stacks and its GPU joined to its rank
#   run.sh   the whole GPU check on the emulation (emulated_job.py standing in for torch)
# Also shellchecks the scripts when shellcheck is installed.
#   bash tests/gpu/selftest.sh BUILD
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-build}" && pwd)
check=$here/check.py
simjob=$build/bin/fr-simjob
fra=$build/bin/fr-analyze
frd=$build/bin/frd
for f in "$simjob" "$fra" "$frd" "$build/sim/lib/libnvidia-ml.so.1"; do
  [[ -e $f ]] || { echo "selftest: $f is missing (build it first)" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/fr-gpu-selftest.XXXXXX")
bg=()
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  local p
  for p in "${bg[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [[ -n ${FR_GPU_KEEP:-} ]]; then echo "selftest: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
failures=0

expect() {  # expect pass|fail NAME CHECK-ARGS...: check.py must pass (or fail) on the evidence
  local want=$1 name=$2 rc
  shift 2
  python3 "$check" "$@" >"$work/$name.out" 2>&1
  rc=$?
  if [[ $want == pass && $rc == 0 ]] || [[ $want == fail && $rc == 1 ]]; then
    echo "ok   $name ($(grep '^check:' "$work/$name.out"))"
  else
    echo "FAIL $name: expected the check to $want, it exited $rc:"
    sed 's/^/     /' "$work/$name.out"
    failures=$((failures + 1))
  fi
}

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.3
  done
}

simjob() { "$simjob" --nodes 1 --ranks-per-node 1 "$@" >"$work/simjob.log" 2>&1; }

# records: a healthy one-rank job (2 AllReduces a step, 30 steps).
simjob --steps 30 --out "$work/healthy" || { echo "selftest: fr-simjob failed" >&2; cat "$work/simjob.log"; exit 1; }
"$fra" --json --trace "$work/healthy.trace" "$work/healthy/dumps" >"$work/healthy.json"
expect pass records records --analysis "$work/healthy.json" --trace "$work/healthy.trace" \
  --log-dir "$work/healthy/dumps" --min 60
expect fail records-too-few records --analysis "$work/healthy.json" --trace "$work/healthy.trace" \
  --log-dir "$work/healthy/dumps" --min 61

# graph: 101 steps, the first eager, then 100 replays.
simjob --steps 101 --graphs --out "$work/graphs" || { echo "selftest: fr-simjob --graphs failed" >&2; exit 1; }
"$fra" --json --trace "$work/graphs.trace" "$work/graphs/dumps" >"$work/graphs.json"
expect pass graph graph --analysis "$work/graphs.json" --trace "$work/graphs.trace" --replays 100 \
  --log-dir "$work/graphs/dumps"
expect fail graph-count graph --analysis "$work/graphs.json" --trace "$work/graphs.trace" --replays 99
expect fail graph-on-healthy-eager graph --analysis "$work/healthy.json" --trace "$work/healthy.trace" --replays 100
# Without module support the replay kernel is never loaded: the counter check must fail.
FRSIM_NO_MODULES=1 simjob --steps 11 --graphs --out "$work/graphs-nokernel" ||
  { echo "selftest: fr-simjob --graphs (no modules) failed" >&2; exit 1; }
"$fra" --json --trace "$work/nokernel.trace" "$work/graphs-nokernel/dumps" >"$work/nokernel.json"
expect pass graph-nokernel-replays graph --analysis "$work/nokernel.json" --trace "$work/nokernel.trace" --replays 10
expect fail graph-nokernel-counter graph --analysis "$work/nokernel.json" --trace "$work/nokernel.trace" \
  --replays 10 --log-dir "$work/graphs-nokernel/dumps"

# stall: replay 60 stalls before the world AllReduce; frd snapshot takes the live log.
"$simjob" --nodes 1 --ranks-per-node 1 --steps 101 --graphs --snapshot-after 60 \
  --fault rank=0,step=60,kind=gpu-stall,comm=world --out "$work/stall" >"$work/stall.log" 2>&1 &
bg+=($!)
stalled() {
  "$fra" --json "$work/stall/node0/shm" 2>/dev/null >"$work/live.json" &&
    grep -q '"stuck_in_collective"' "$work/live.json"
}
if wait_for 60 stalled; then
  "$frd" snapshot --log-dir "$work/stall/node0/shm" --out "$work/stall-dump" --no-stacks >"$work/snap1.log" 2>&1
  "$fra" --json "$work/stall-dump" >"$work/stall.json"
  kill -TERM "${bg[0]}" 2>/dev/null
  expect pass stall stall --analysis "$work/stall.json" --replay 60 --graph 1 --log-dir "$work/stall-dump"
  expect fail stall-counter-other-replay stall --analysis "$work/stall.json" --replay 60 --graph 1 \
    --log-dir "$work/graphs/dumps"
  expect fail stall-other-replay stall --analysis "$work/stall.json" --replay 59
  expect fail stall-other-op stall --analysis "$work/stall.json" --replay 60 --op Broadcast
  expect fail stall-on-healthy stall --analysis "$work/graphs.json" --replay 60
else
  echo "FAIL stall: the --graphs job never showed a stalled replay"; failures=$((failures + 1))
fi

# stacks: a Python rank hung on the host (time.sleep under hang_forever), with py-spy when present.
"$simjob" --nodes 1 --ranks-per-node 1 --steps 10 --python --snapshot-after 60 --fault rank=0,step=3,kind=hang-host \
  --out "$work/hang" >"$work/hang.log" 2>&1 &
bg+=($!)
hung() { [[ -n $(ls "$work/hang/node0/shm" 2>/dev/null) ]] && "$fra" --json "$work/hang/node0/shm" >/dev/null 2>&1; }
if wait_for 60 hung; then
  sleep 2  # let the rank reach its hang
  FR_SIM_NVML=$work/hang/node0/nvml.conf "$frd" snapshot --log-dir "$work/hang/node0/shm" \
    --out "$work/hang-dump" --nvml-lib "$build/sim/lib/libnvidia-ml.so.1" --stack-budget 30 >"$work/snap2.log" 2>&1
  "$fra" --json "$work/hang-dump" >"$work/hang.json"
  pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["processes"][0]["pid"])' \
    "$work/hang-dump/manifest.json")
  expect pass stacks stacks --analysis "$work/hang.json" --dump "$work/hang-dump" --pid "$pid" \
    --python-frame hang_forever
  if command -v py-spy >/dev/null; then
    expect pass stacks-python stacks --analysis "$work/hang.json" --dump "$work/hang-dump" --pid "$pid" \
      --python-frame hang_forever --require-python
    expect fail stacks-other-frame stacks --analysis "$work/hang.json" --dump "$work/hang-dump" --pid "$pid" \
      --python-frame wait_for_gpu
  fi
  # Without py-spy the Python frames are missing: reported, and a failure only when required.
  FR_SIM_NVML=$work/hang/node0/nvml.conf "$frd" snapshot --log-dir "$work/hang/node0/shm" \
    --out "$work/hang-nospy" --nvml-lib "$build/sim/lib/libnvidia-ml.so.1" --py-spy "$work/no-py-spy" \
    >"$work/snap3.log" 2>&1
  "$fra" --json "$work/hang-nospy" >"$work/hang-nospy.json"
  expect pass stacks-no-py-spy stacks --analysis "$work/hang-nospy.json" --dump "$work/hang-nospy" \
    --pid "$pid" --python-frame hang_forever
  expect fail stacks-python-required stacks --analysis "$work/hang-nospy.json" --dump "$work/hang-nospy" \
    --pid "$pid" --python-frame hang_forever --require-python
  expect fail stacks-other-pid stacks --analysis "$work/hang.json" --dump "$work/hang-dump" --pid 1
  expect fail stacks-other-rank stacks --analysis "$work/hang.json" --dump "$work/hang-dump" --pid "$pid" --rank 3
else
  echo "FAIL stacks: the --python job never wrote its log"; failures=$((failures + 1))
fi

# run.sh itself, end to end on the emulation (emulated_job.py in place of torch): every check
# passes but nccl-legacy, which the emulation answers as a torch without that backend (the
# preamble's driver probe is not run there).
FR_GPU_ASSUME=emulation FR_SIM_NVML=$work/run-nvml.conf LD_LIBRARY_PATH=$build/sim/lib FR_GPU_STEP_LIMIT=60 \
  bash "$here/run.sh" "$build" >"$work/run.out" 2>&1
rc=$?
oks=$(grep -c '^| #[0-9]* .*| OK   |' "$work/run.out")
if [[ $rc == 0 && $oks == 5 ]] && grep -q '^| #9 agent, backend nccl-legacy *| SKIP |' "$work/run.out" &&
   grep -q '^| #34 plugin via fr-run *| OK   |' "$work/run.out"; then
  echo "ok   run.sh on the emulation (5 checks OK, nccl-legacy skipped)"
else
  echo "FAIL run.sh on the emulation: exit $rc, $oks checks OK:"
  sed 's/^/     /' "$work/run.out"
  failures=$((failures + 1))
fi

if command -v shellcheck >/dev/null; then
  if shellcheck "$here"/*.sh; then echo "ok   shellcheck"; else failures=$((failures + 1)); fi
fi
echo "selftest: $failures failure(s)"
((failures == 0))
