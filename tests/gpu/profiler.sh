#!/usr/bin/env bash
# The agent as NCCL's profiler plugin on a real GPU (issue #27): what it costs and whether NCCL
# loads it. One command for a lent machine (one H200 is enough; a second GPU adds the channel
# records), well under 4 minutes, printing a table of figures:
#
#   baseline   torch all-reduces of 256 floats, no agent
#   agent      the agent preloaded, NCCL_PROFILER_PLUGIN=none (NCCL loads no plugin)
#   plugin     the agent preloaded and NCCL_PROFILER_PLUGIN naming it, NCCL_DEBUG=INFO: NCCL's
#              "Successfully loaded external profiler plugin" line and its interface version,
#              the log's FR_LOG_F_PROFILER flag (the plugin's init ran)
#   channels   (2 GPUs or more) two ranks forced onto NCCL's network transport
#              (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, sockets): channel slots in both logs.
#              NCCL reports proxy ops, steps and kernel channels only for network connections, so
#              on one GPU there is nothing for the plugin to write and the row says SKIP.
#
#   bash tests/gpu/profiler.sh [BUILD]
#
# The agent comes from BUILD/lib (or BUILD/gpu-bundle/lib); missing, it is compiled from source
# into the scratch folder with one g++ call (needs a C++20 compiler and the CUDA toolkit's headers).
# Exit: 0 every row OK or SKIP; 1 a row failed; 77 no GPU or no torch with CUDA.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$root/build}")
limit=${FR_GPU_STEP_LIMIT:-90}
job=$here/profiler_job.py

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "FR-SKIPPED: no GPU"; exit 77
fi
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "FR-SKIPPED: no torch with CUDA"; exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fr-gpu-profiler.XXXXXX")
trap 'rm -rf "$work"' EXIT
agent=$build/lib/libfr_agent.so
[[ -f $build/gpu-bundle/lib/libfr_agent.so ]] && agent=$build/gpu-bundle/lib/libfr_agent.so
if [[ ! -f $agent ]]; then
  # A bare machine may lack what a CMake configure needs (Catch2, nlohmann-json): the agent alone
  # is one compiler call (its flags as agent/CMakeLists.txt sets them), against the toolkit's
  # nccl.h and cuda.h (nccl_extra.h declares what an older nccl.h lacks).
  agent=$work/libfr_agent.so
  echo "profiler-check: compiling the agent into $agent (log: $work/build.log)"
  if ! "${CXX:-g++}" -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -fvisibility-inlines-hidden \
      -fno-exceptions -fno-rtti -fno-threadsafe-statics -DNCCL_OS_LINUX=1 -I"$root/agent" \
      -I"$root/proto" -isystem "${FR_CUDA_HOME:-/usr/local/cuda}/include" "$root"/agent/*.cpp \
      -Wl,--version-script="$root/agent/exports.map" -Wl,-z,defs -Wl,-z,now -static-libstdc++ \
      -static-libgcc -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -o "$agent" \
      >"$work/build.log" 2>&1; then
    tail -n 15 "$work/build.log" >&2
    echo "profiler-check: could not compile the agent" >&2
    exit 1
  fi
fi

kv() { sed -n "s/^$1=//p" "$2" | tail -n 1; }
# The flight logs of a run: version, whether the plugin's init ran, channel slots in use.
read_logs() {
  python3 - "$1" <<'PY'
import glob, struct, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.frlog")):
    b = open(f, "rb").read()
    version, = struct.unpack_from("<I", b, 8)
    flags, = struct.unpack_from("<I", b, 88)
    slots = kinds = 0
    if version >= 5:
        off, cap, size, count, dropped = struct.unpack_from("<QIIII", b, 400)
        seen = set()
        for i in range(min(cap, count)):
            e = off + i * size
            lock, = struct.unpack_from("<Q", b, e)
            if lock and not lock & 1:
                slots += 1
                seen.add(b[e + 38])
        kinds = len(seen)
    print(f"log={f} version={version} profiler={1 if flags & 0x100 else 0} slots={slots} kinds={kinds}")
PY
}

rows=()
failed=0
row() { rows+=("| $1 | $2 | $3 |"); [[ $2 == FAIL ]] && failed=1; echo "$1: $2 $3"; }

# run NAME ENV...: one world-size-1 job; its output in $work/NAME.out, its logs in $work/NAME.
run() {
  local name=$1; shift
  mkdir -p "$work/$name"
  timeout "$limit" env FR_LOG_DIR="$work/$name" "$@" python3 "$job" --n 2000 --rounds 3 \
    >"$work/$name.out" 2>"$work/$name.err"
}

run baseline LD_PRELOAD= NCCL_PROFILER_PLUGIN=none || { row baseline FAIL "$(tail -n 2 "$work/baseline.err")"; }
run agent LD_PRELOAD="$agent" NCCL_PROFILER_PLUGIN=none || row agent FAIL "$(tail -n 2 "$work/agent.err")"
run plugin LD_PRELOAD="$agent" NCCL_PROFILER_PLUGIN="$agent" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV \
  || row plugin FAIL "$(tail -n 2 "$work/plugin.err")"
nccl=$(kv nccl_version "$work/baseline.out")
b=$(kv per_call_us "$work/baseline.out"); be=$(kv e2e_us "$work/baseline.out")
a=$(kv per_call_us "$work/agent.out"); ae=$(kv e2e_us "$work/agent.out")
p=$(kv per_call_us "$work/plugin.out"); pe=$(kv e2e_us "$work/plugin.out")
[[ -n $b ]] && row baseline OK "host $b us/all-reduce, to GPU done $be us (NCCL $nccl)"
[[ -n $a ]] && row "agent, no plugin" OK "host $a us, to GPU done $ae us"
if [[ -n $p ]]; then
  loaded=$(grep -h -o 'Successfully loaded external profiler plugin.*' "$work/plugin.out" "$work/plugin.err" | head -n 1)
  version=$(grep -h -o 'PROFILER/Plugin: Loaded [^ ]* (v[0-9]*)' "$work/plugin.out" "$work/plugin.err" | head -n 1)
  logs=$(read_logs "$work/plugin")
  if [[ -n $loaded && $logs == *profiler=1* ]]; then
    row "agent as plugin" OK "host $p us, to GPU done $pe us; ${version:-version not printed}; log: ${logs##*/}"
  else
    row "agent as plugin" FAIL "NCCL line: '${loaded:-none}', log: ${logs:-none}"
  fi
fi
if [[ -n $b && -n $p ]]; then
  row "plugin cost" OK "$(python3 -c "print(f'{$p - $a:+.2f} us host, {$pe - $ae:+.2f} us to GPU done per all-reduce vs the agent without it; agent {$a - $b:+.2f} us vs none')")"
fi

if ((ngpu >= 2)); then
  mkdir -p "$work/channels"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  pids=()
  for r in 0 1; do
    timeout "$limit" env FR_LOG_DIR="$work/channels" LD_PRELOAD="$agent" NCCL_PROFILER_PLUGIN="$agent" \
      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK=$r \
      WORLD_SIZE=2 LOCAL_RANK=$r python3 "$job" --n 200 --rounds 1 --floats 1048576 \
      >"$work/channels.$r.out" 2>"$work/channels.$r.err" &
    pids+=($!)
  done
  ok=1
  for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
  logs=$(read_logs "$work/channels")
  n=$(grep -c 'slots=[1-9]' <<<"$logs")
  if ((ok && n == 2)); then
    row channels OK "2 ranks over NET: $(tr '\n' ';' <<<"${logs//log=$work\/channels\//}")"
  else
    row channels FAIL "exit ok=$ok, logs with slots: $n; $(tail -n 2 "$work/channels.0.err")"
  fi
else
  row channels SKIP "one GPU: NCCL reports channel progress only for network connections (2 GPUs needed)"
fi

echo
echo "== fr profiler-plugin check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1); NCCL $nccl"
echo "| check | result | figures |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
exit $failed
