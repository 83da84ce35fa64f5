#!/usr/bin/env bash
# The GPU check: fr on a real GPU with a real PyTorch and NCCL, in one command, printing a table
# of figures to paste into a note. It is what issues #9, #10 and #13 ask of a session that is lent
# a GPU machine for a few minutes; everywhere else it exits 77 (skipped), one line per missing
# prerequisite. The checks (each step bounded by FR_GPU_STEP_LIMIT seconds, default 180, and all
# of it by FR_GPU_TOTAL_LIMIT, default 540, inside a lent machine's 10 minutes per command):
#
#   #9   the agent under torch with backend nccl (ProcessGroupNCCL2 in torch 2.15) and then
#        nccl-legacy, world size 1: every all-reduce recorded and completed on the GPU (markers),
#        and the host time per small all-reduce with and without the agent (same script)
#   #10  an all-reduce captured into a CUDA graph (torch.cuda.graph) and replayed 100 times under
#        the agent: 100 replays recorded, the markers at the last op, the graph's replay kernel
#        loaded and its GPU replay counter at 100 (one per replay); then a run whose replay 60
#        stalls on a spinning gate kernel before the all-reduce: `frd snapshot` + fr-analyze name
#        that replay and op
#   #13  `frd snapshot` of a torch process stuck on a spinning kernel: its native and Python
#        stacks (py-spy), and NVML read for its GPU and joined to its rank
#
#   #34  the agent as NCCL's profiler plugin, the job started by fr-run: which plugin version NCCL
#        loaded (its NCCL_DEBUG=INFO lines)
#
# First of all it prints a preamble (preamble.py: versions, /dev/shm, a ctypes probe of host
# registration, a stream write and a captured write replayed); its probe rows join the table.
#
#   bash tests/gpu/run.sh [BUILD]        (make gpu-check)
#   bash run.sh                          (in a bundle: tests/gpu/bundle.sh, make gpu-bundle)
#
# Tools come from the bundle (FR_GPU_BUNDLE, set by a bundle's run.sh, else BUILD/gpu-bundle when
# present: tests/gpu/bundle.sh packs the agent, frd, fr-analyze, fr-run, their libraries, py-spy
# and these scripts for a bare machine), else from BUILD, else they are built there.
# FR_GPU_BACKEND (default nccl) is the backend of the graph and stuck-process checks (the graph
# checks fall back to nccl-legacy when the first cannot capture an all-reduce);
# FR_GPU_SAVE=DIR leaves DIR/gpu-check.tgz with every step's output and analysis.
# FR_GPU_ASSUME=emulation (selftest.sh only) runs it all on the CPU emulation instead.
# Exit: 0 every check passed; 1 a check failed or could not be set up; 77 no GPU here (then the
# table says which checks did not run).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$root/build}")
limit=${FR_GPU_STEP_LIMIT:-180}
total=${FR_GPU_TOTAL_LIMIT:-540}
deadline=$((SECONDS + total))
backend=${FR_GPU_BACKEND:-nccl}
graph_backend=$backend
job=$here/torch_job.py
check=$here/check.py
bundle=${FR_GPU_BUNDLE:-$build/gpu-bundle}
checks=("#9 agent, backend nccl" "#9 agent, backend nccl-legacy" "#10 graph, 100 replays"
  "#10 graph, replay 60 stalls" "#13 stacks + NVML" "#34 plugin via fr-run")
rows=()
failed=0
row() {  # row CHECK STATUS DETAIL
  rows+=("$(printf '| %-31s | %-4s | %s |' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && failed=1
  printf '%s: %s  %s\n' "$1" "$2" "$3"
}
table() {
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
}

# ---- preamble: versions, /dev/shm and a probe of the driver, before anything else --------------
fr_version=unknown glibc_needed=""
if [[ -f $bundle/MANIFEST ]]; then
  glibc_needed=$(sed -n 's/^glibc_needed=//p' "$bundle/MANIFEST")
  fr_version="$(sed -n 's/^fr=//p' "$bundle/MANIFEST") (bundle $bundle)"
elif [[ -x $build/bin/fr-analyze ]]; then
  fr_version="$("$build/bin/fr-analyze" --version 2>&1 | head -n 1) ($build)"
fi
echo "== fr GPU check $(date -u +%FT%TZ) on $(hostname)"
if [[ ${FR_GPU_ASSUME:-} == emulation ]]; then
  for c in "cuInit + context" cuMemHostRegister cuStreamWriteValue64 "captured write, replayed"; do
    row "probe: $c" "NOT RUN" "the emulation: no driver to probe"
  done
else
  pre=$(timeout -k 5 90 python3 "$here/preamble.py" --fr-version "$fr_version" --glibc-needed "$glibc_needed" 2>&1)
  [[ $? == 124 ]] && pre+=$'\nrow=preamble|FAIL|did not finish in 90 s'
  grep -v -e '^row=' -e '^nogpu=' -e 'Warning' -e '^  cpu = ' <<<"$pre"
  while IFS='|' read -r c r d; do row "${c#row=}" "$r" "$d"; done < <(grep '^row=' <<<"$pre")
fi

# ---- prerequisites: a GPU, torch that sees it, the real NCCL ------------------------------------
kv() { sed -n "s/^$1=//p" <<<"$2" | tail -n 1; }
skips=()
if [[ ${FR_GPU_ASSUME:-} == emulation ]]; then
  # selftest.sh runs this script itself on the CPU emulation (sim/ on LD_LIBRARY_PATH), with
  # emulated_job.py in place of torch and the emulated NVML, so that all of it has run before a
  # GPU machine is lent.
  job=$here/emulated_job.py
  probe=$'nccl_version=emulated'
  torch_version=emulation nccl="emulated libnccl.so.2"
  gpu="emulated GPU"
  nvml=$build/sim/lib/libnvidia-ml.so.1
else
  if ! command -v nvidia-smi >/dev/null; then
    skips+=("no GPU: nvidia-smi is not on PATH")
  elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    skips+=("no GPU: nvidia-smi lists no GPU")
  fi
  if ! python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
    skips+=("no GPU: libcuda.so.1 cannot be loaded (no NVIDIA driver)")
  fi
  probe=$(python3 - 2>/dev/null <<'EOF'
import ctypes, os
try:
    import torch
except Exception as e:  # noqa: BLE001
    print(f"torch_error=cannot import torch: {type(e).__name__}: {e}")
    raise SystemExit
print(f"torch={torch.__version__}")
print(f"torch_cuda={int(torch.cuda.is_available())}")
paths = []
try:
    import nvidia.nccl
    paths += [os.path.join(p, "lib", "libnccl.so.2") for p in nvidia.nccl.__path__]
except ImportError:
    pass
paths += ["/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2"]
for p in paths:
    try:
        lib = ctypes.CDLL(p)
    except OSError:
        continue
    v = ctypes.c_int(0)
    lib.ncclGetVersion(ctypes.byref(v))
    print(f"nccl={p}")
    print(f"nccl_version={v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}")
    print(f"nccl_include={os.path.join(os.path.dirname(os.path.dirname(p)), 'include')}")
    break
EOF
  )
  torch_version=$(kv torch "$probe")
  nccl=$(kv nccl "$probe")
  if [[ -z $torch_version ]]; then
    skips+=("no torch: $(kv torch_error "$probe")")
  elif [[ $(kv torch_cuda "$probe") != 1 ]]; then
    skips+=("no torch with CUDA: torch $torch_version sees no CUDA device")
  fi
  [[ -n $nccl ]] || skips+=("no real NCCL: neither torch's nvidia-nccl wheel nor /usr/local/cuda has libnccl.so.2")
fi
if ((${#skips[@]})); then
  for s in "${skips[@]}"; do echo "FR-SKIPPED: $s"; done
  for c in "${checks[@]}"; do row "$c" "NOT RUN" "${skips[0]}"; done
  table
  echo "gpu-check: NOT RUN: ${skips[0]} (exit 77)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fr-gpu-check.XXXXXX")
jobs_to_stop=()
# shellcheck disable=SC2317  # run by the trap
finish() {
  local p
  for p in "${jobs_to_stop[@]}"; do kill -TERM "$p" 2>/dev/null; done
  if [[ -n ${FR_GPU_SAVE:-} ]]; then
    mkdir -p "$FR_GPU_SAVE" && tar -C "$work" --exclude='*.frlog' -czf "$FR_GPU_SAVE/gpu-check.tgz" .
  fi
  rm -rf "$work"
}
trap finish EXIT

# ---- tools: the bundle, else the build, else build them ---------------------------------------
tool_env=(env)
if [[ -d $bundle ]]; then
  agent=$bundle/lib/libfr_agent.so frd=$bundle/bin/frd fra=$bundle/bin/fr-analyze frrun=$bundle/bin/fr-run
  tool_env=(env "LD_LIBRARY_PATH=$bundle/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
else
  agent=$build/lib/libfr_agent.so frd=$build/bin/frd fra=$build/bin/fr-analyze frrun=$build/bin/fr-run
  if [[ ! -f $agent || ! -f $frd || ! -f $fra || ! -f $frrun ]]; then
    echo "gpu-check: building the agent, frd and fr-analyze into $build (log: $work/build.log)"
    args=(-DFR_CUDA_HOME=/usr/local/cuda)
    inc=$(kv nccl_include "$probe")
    [[ -f $inc/nccl.h ]] && args+=("-DFR_NCCL_INCLUDE_DIR=$inc")
    if ! { cmake -S "$root" -B "$build" "${args[@]}" &&
           cmake --build "$build" -j "$(nproc)" --target fr_agent frd fr-analyze fr-run; } >"$work/build.log" 2>&1; then
      tail -n 15 "$work/build.log" >&2
      echo "gpu-check: could not build the tools (tests/gpu/bundle.sh packs a build for a bare machine)" >&2
      exit 1
    fi
  fi
fi
spy=$(command -v py-spy || true)
[[ -x ${bundle}/bin/py-spy ]] && spy=$bundle/bin/py-spy
[[ -n ${nvml:-} ]] || nvml=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml.so.1 / { print $NF; exit }')
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
  [[ -z $nvml && -e $d/libnvidia-ml.so.1 ]] && nvml=$d/libnvidia-ml.so.1
done
runs() { "${tool_env[@]}" "$1" --version >"$work/version.$(basename "$1")" 2>&1; }
[[ -f $agent ]] || { echo "gpu-check: $agent is missing" >&2; exit 1; }
runs "$fra" || { echo "gpu-check: fr-analyze cannot run here: $(head -n 1 "$work/version.fr-analyze")" >&2; exit 1; }
frd_ok=1
runs "$frd" || frd_ok=0

[[ -n ${gpu:-} ]] || gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)
echo "== fr GPU check: $gpu; torch $torch_version; NCCL $(kv nccl_version "$probe") ($nccl)"
echo "   agent $agent; py-spy ${spy:-none}; NVML ${nvml:-not found}; frd $([[ $frd_ok == 1 ]] && echo runs || echo "cannot run: $(head -n 1 "$work/version.frd")")"

# bound: sets `bounded`, the timeout of the next step (the step limit, or what is left of the total);
# fails when too little is left to start one.
bound() {
  local left=$((deadline - SECONDS))
  ((left < limit)) || left=$limit
  bounded=(timeout -k 5 "$left")
  ((left >= 20))
}
out_of_time() { row "$1" FAIL "not run: the total time (FR_GPU_TOTAL_LIMIT=$total s) ran out"; }
# under_agent LOGDIR CMD...: CMD (a program, not a function) with the agent preloaded.
under_agent() { env "FR_LOG_DIR=$1" FR_JOB_ID=gpu-check FR_BUFFER_ENTRIES=65536 FR_DEBUG=1 "LD_PRELOAD=$agent" "${@:2}"; }
stop() {  # stop PID [PYTHON_PID]: the bounded job and the python under it
  [[ -n ${2:-} ]] && kill -KILL "$2" 2>/dev/null
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
# tool_limit N: N seconds, or less when the total is nearly spent (at least 15: a step already run
# still gets its analysis), so the run ends close to FR_GPU_TOTAL_LIMIT.
tool_limit() {
  local left=$((deadline - SECONDS + 15))
  ((left < $1)) || left=$1
  ((left >= 15)) || left=15
  echo "$left"
}
analyze() { timeout -k 5 "$(tool_limit 120)" "${tool_env[@]}" "$fra" --json "$@"; }
last_err() { grep -v '^\s*$' "$1" | grep -v -i warning | tail -n 1; }
wait_file() {  # wait_file FILE PID: until FILE exists; fails if PID exits first or time runs out
  local end=$((SECONDS + limit < deadline ? SECONDS + limit : deadline))
  while [[ ! -s $1 ]]; do
    kill -0 "$2" 2>/dev/null && ((SECONDS < end)) || return 1
    sleep 0.5
  done
}

# ---- #9: the agent under both NCCL backends, world size 1 -------------------------------------
check_allreduce() {
  local b=$1 d=$work/allreduce-$1 rc
  mkdir -p "$d/logs"
  bound || { out_of_time "#9 agent, backend $b"; return; }
  "${bounded[@]}" python3 "$job" allreduce --backend "$b" >"$d/plain.out" 2>"$d/plain.err"
  rc=$?
  if ((rc == 3)); then row "#9 agent, backend $b" SKIP "$(last_err "$d/plain.err")"; return; fi
  if ((rc != 0)); then row "#9 agent, backend $b" FAIL "without the agent: exit $rc: $(last_err "$d/plain.err")"; return; fi
  bound || { out_of_time "#9 agent, backend $b"; return; }
  under_agent "$d/logs" "${bounded[@]}" python3 "$job" allreduce --backend "$b" >"$d/with.out" 2>"$d/with.err"
  rc=$?
  if ((rc != 0)); then row "#9 agent, backend $b" FAIL "with the agent: exit $rc: $(last_err "$d/with.err")"; return; fi
  analyze --trace "$d/trace.json" "$d/logs" >"$d/analysis.json" 2>"$d/analyze.err"
  python3 "$check" records --analysis "$d/analysis.json" --trace "$d/trace.json" --log-dir "$d/logs" \
    --min "$(kv allreduces "$(cat "$d/with.out")")" >"$d/check.out" 2>&1
  rc=$?
  grep -E '^(torch|nccl_loaded)=' "$d/with.out" >>"$d/check.out"
  local c w p
  c=$(cat "$d/check.out") w=$(cat "$d/with.out") p=$(cat "$d/plain.out")
  local figures
  figures=$(awk -v a="$(kv per_call_us "$p")" -v b="$(kv per_call_us "$w")" -v ea="$(kv e2e_us "$p")" \
    -v eb="$(kv e2e_us "$w")" 'BEGIN { printf "host per all-reduce %.2f -> %.2f us (%+.2f us); to GPU done %.2f -> %.2f us", a, b, b - a, ea, eb }')
  figures="$(kv recorded "$c") recorded, $(kv completed "$c") completed, tracking $(kv tracking "$c"); $figures"
  if ((rc == 0)); then row "#9 agent, backend $b" OK "$figures"
  else row "#9 agent, backend $b" FAIL "$figures; $(grep '^check:' "$d/check.out")"; fi
}

# ---- #10: CUDA-graph replays, healthy and with one stalled replay ---------------------------------
check_graph() {
  local d=$work/graph rc
  mkdir -p "$d/logs"
  bound || { out_of_time "#10 graph, 100 replays"; return; }
  under_agent "$d/logs" "${bounded[@]}" python3 "$job" graph --backend "$backend" --replays 100 >"$d/job.out" 2>"$d/job.err"
  rc=$?
  if ((rc != 0)) && [[ $backend != nccl-legacy ]]; then
    # Exit 3: this torch cannot capture an all-reduce with that backend (a SKIP); anything else
    # is a failure. Either way the graph checks go on with the legacy backend.
    if ((rc == 3)); then row "#10 graph, backend $backend" SKIP "$(last_err "$d/job.err")"
    else row "#10 graph, backend $backend" FAIL "exit $rc: $(last_err "$d/job.err")"; fi
    graph_backend="nccl-legacy"
    rm -rf "$d/logs" && mkdir -p "$d/logs"
    bound || { out_of_time "#10 graph, 100 replays"; return; }
    under_agent "$d/logs" "${bounded[@]}" python3 "$job" graph --backend "$graph_backend" --replays 100 \
      >"$d/job.out" 2>"$d/job.err"
    rc=$?
  fi
  if ((rc != 0)); then row "#10 graph, 100 replays" FAIL "exit $rc: $(last_err "$d/job.err")"; return; fi
  analyze --trace "$d/trace.json" "$d/logs" >"$d/analysis.json" 2>"$d/analyze.err"
  python3 "$check" graph --analysis "$d/analysis.json" --trace "$d/trace.json" --replays 100 \
    --log-dir "$d/logs" >"$d/check.out" 2>&1
  rc=$?
  local c figures
  c=$(cat "$d/check.out")
  figures="$(kv replays "$c") replays recorded; collectives enqueued $(kv enqueued "$c"), completed on the GPU $(kv completed "$c"); replay kernel $(kv replay_kernel "$c"), GPU replay counter $(kv gpu_replays "$c") (backend $graph_backend, gate $(kv gate "$(cat "$d/job.out")"))"
  if ((rc == 0)); then row "#10 graph, 100 replays" OK "$figures"
  else row "#10 graph, 100 replays" FAIL "$figures; $(grep '^check:' "$d/check.out")"; fi
}

check_graph_stall() {
  local d=$work/graph-stall pid rc
  mkdir -p "$d/logs"
  bound || { out_of_time "#10 graph, replay 60 stalls"; return; }
  under_agent "$d/logs" "${bounded[@]}" python3 "$job" graph --backend "$graph_backend" --replays 100 --stall-at 60 \
    --ready "$d/ready" >"$d/job.out" 2>"$d/job.err" &
  pid=$!
  jobs_to_stop+=("$pid")
  if ! wait_file "$d/ready" "$pid"; then
    row "#10 graph, replay 60 stalls" FAIL "the job never stalled: $(last_err "$d/job.err")"; return
  fi
  sleep 1
  local src=$d/logs how="fr-analyze on the live log"
  if ((frd_ok)); then
    timeout -k 5 "$(tool_limit 60)" "${tool_env[@]}" "$frd" snapshot --log-dir "$d/logs" --out "$d/dump" --no-stacks >"$d/snapshot.out" 2>&1 && src=$d/dump how="frd snapshot + fr-analyze"
  fi
  analyze "$src" >"$d/analysis.json" 2>"$d/analyze.err"
  local expect replay graph
  expect=$(cat "$d/ready")
  stop "$pid" "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["pid"])' "$expect")"
  replay=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["replay"])' "$expect")
  graph=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["graph"])' "$expect")
  python3 "$check" stall --analysis "$d/analysis.json" --replay "$replay" --graph "$graph" \
    --log-dir "$src" >"$d/check.out" 2>&1
  rc=$?
  local figures
  figures="$how: $(kv summary "$(cat "$d/check.out")"); GPU replay counter $(kv gpu_replays "$(cat "$d/check.out")")"
  if ((rc == 0)); then row "#10 graph, replay 60 stalls" OK "$figures"
  else row "#10 graph, replay 60 stalls" FAIL "$figures; $(grep '^check:' "$d/check.out")"; fi
}

# ---- #13: stacks and NVML of a torch process stuck on a spinning kernel ---------------------------
check_stuck() {
  local d=$work/stuck pid rc
  mkdir -p "$d/logs"
  if ((!frd_ok)); then row "#13 stacks + NVML" FAIL "frd cannot run here: $(head -n 1 "$work/version.frd")"; return; fi
  bound || { out_of_time "#13 stacks + NVML"; return; }
  under_agent "$d/logs" "${bounded[@]}" python3 "$job" stuck --backend "$backend" --ready "$d/ready" >"$d/job.out" 2>"$d/job.err" &
  pid=$!
  jobs_to_stop+=("$pid")
  if ! wait_file "$d/ready" "$pid"; then
    row "#13 stacks + NVML" FAIL "the job never got stuck: $(last_err "$d/job.err")"; return
  fi
  sleep 1
  local spid t0 t1
  spid=$(cat "$d/ready")
  t0=$(date +%s.%N)
  timeout -k 5 "$(tool_limit 90)" "${tool_env[@]}" "$frd" snapshot --log-dir "$d/logs" --out "$d/dump" --stack-budget 30 ${spy:+--py-spy "$spy"} \
    ${nvml:+--nvml-lib "$nvml"} >"$d/snapshot.out" 2>&1
  t1=$(date +%s.%N)
  analyze "$d/dump" >"$d/analysis.json" 2>"$d/analyze.err"
  stop "$pid" "$spid"
  python3 "$check" stacks --dump "$d/dump" --analysis "$d/analysis.json" --pid "$spid" --rank 0 \
    --python-frame wait_for_gpu ${spy:+--require-python} >"$d/check.out" 2>&1
  rc=$?
  local c figures
  c=$(cat "$d/check.out")
  figures=$(printf 'snapshot %.1f s; %s; python: %s; GPU %s joined to rank 0: %s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    "$(kv main_thread "$c")" "$(kv python_frames "$c")" "$(kv gpu "$c")" "$(kv joined "$c")")
  if ((rc == 0)); then row "#13 stacks + NVML" OK "$figures"
  else row "#13 stacks + NVML" FAIL "$figures; $(grep '^check:' "$d/check.out")"; fi
}

# ---- #34: the agent as NCCL's profiler plugin, the job started by fr-run -------------------------
# fr-run preloads the agent and names it NCCL_PROFILER_PLUGIN (docs/fr-run.md); NCCL_DEBUG=INFO
# makes NCCL say whether it loaded the plugin and which interface version it took. fr-run gets the
# bundle's libraries, the job under it the caller's LD_LIBRARY_PATH again.
check_plugin() {
  local d=$work/plugin rc name="#34 plugin via fr-run"
  mkdir -p "$d/logs"
  bound || { out_of_time "$name"; return; }
  "${bounded[@]}" env -u NCCL_PROFILER_PLUGIN NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV FR_BUFFER_ENTRIES=65536 \
    "${tool_env[@]}" "$frrun" --agent "$agent" --log-dir "$d/logs" --job-id gpu-check --no-daemon -- \
    env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" python3 "$job" allreduce --backend "$backend" --n 200 --rounds 1 \
    >"$d/job.out" 2>"$d/job.err"
  rc=$?
  local loaded version
  loaded=$(grep -h -o 'Successfully loaded external profiler plugin.*' "$d/job.out" "$d/job.err" | head -n 1)
  version=$(grep -h -o -E 'PROFILER/Plugin: Loaded .* \(v[0-9]+\)' "$d/job.out" "$d/job.err" | head -n 1)
  if ((rc != 0)); then row "$name" FAIL "exit $rc: $(last_err "$d/job.err")"; return; fi
  analyze --trace "$d/trace.json" "$d/logs" >"$d/analysis.json" 2>"$d/analyze.err"
  python3 "$check" records --analysis "$d/analysis.json" --trace "$d/trace.json" --log-dir "$d/logs" \
    --min "$(kv allreduces "$(cat "$d/job.out")")" >"$d/check.out" 2>&1
  rc=$?
  local figures
  figures="NCCL: '${loaded:-no plugin line}'; ${version:-version line not printed}; $(kv recorded "$(cat "$d/check.out")") recorded, tracking $(kv tracking "$(cat "$d/check.out")")"
  if ((rc == 0)) && [[ -n $loaded ]]; then row "$name" OK "$figures"
  else row "$name" FAIL "$figures; $(grep '^check:' "$d/check.out")"; fi
}

check_allreduce nccl
check_allreduce nccl-legacy
check_graph
check_graph_stall
check_stuck
check_plugin

table
for f in "$work"/*/check.out; do
  echo "-- ${f#"$work"/}"
  cat "$f"
done
exit $failed
