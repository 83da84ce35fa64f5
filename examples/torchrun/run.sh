#!/usr/bin/env bash
# A single-node PyTorch job under fr: a coordinator and a node sidecar next to torchrun, and the
# agent preloaded into every rank. When the job hangs for --stall-after seconds, the verdict is
# written to $FR_DUMP_DIR/<job>/<incident>/report.txt and logged by the coordinator.
#   usage: FR_HOME=/opt/fr examples/torchrun/run.sh train.py [script args...]
# FR_HOME holds lib/libfr_agent.so and bin/frd (a build directory will do).
set -euo pipefail
: "${FR_HOME:?set FR_HOME to the fr install or build directory}"
export FR_JOB_ID=${FR_JOB_ID:-torchrun-$(date +%s)}
export FR_LOG_DIR=${FR_LOG_DIR:-/dev/shm}
FR_DUMP_DIR=${FR_DUMP_DIR:-$PWD/fr-incidents}
NPROC=${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l || echo 1)}

port_file=$(mktemp)
"$FR_HOME/bin/frd" coordinator --listen 127.0.0.1:0 --port-file "$port_file" \
  --dump-dir "$FR_DUMP_DIR" --job-id "$FR_JOB_ID" --expect-ranks "$NPROC" --stall-after 60 &
coordinator=$!
trap 'kill $coordinator ${node:-} 2>/dev/null; rm -f "$port_file"' EXIT
for _ in $(seq 50); do [[ -s $port_file ]] && break; sleep 0.1; done
"$FR_HOME/bin/frd" node --coordinator "127.0.0.1:$(cat "$port_file")" --log-dir "$FR_LOG_DIR" --stall-after 60 &
node=$!

# torchrun passes its environment to the ranks, LD_PRELOAD included.
LD_PRELOAD="$FR_HOME/lib/libfr_agent.so${LD_PRELOAD:+:$LD_PRELOAD}" \
  torchrun --standalone --nproc-per-node "$NPROC" "$@"
