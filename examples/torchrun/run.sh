#!/usr/bin/env bash
# A single-node PyTorch job under fr: a coordinator next to torchrun, and every rank started
# through fr-run, which preloads the agent and makes sure one `frd node` serves the node (the
# first rank starts it, the others share it). When the job hangs for FR_STALL_AFTER seconds, the
# verdict is written to $FR_DUMP_DIR/<job>/<incident>/report.txt and logged by the coordinator.
#   usage: FR_HOME=/opt/fr examples/torchrun/run.sh train.py [script args...]
# FR_HOME holds bin/frd, bin/fr-run and lib/libfr_agent.so (a build directory will do). NPROC
# defaults to the number of GPUs nvidia-smi lists, and to 1 where there is no nvidia-smi.
set -euo pipefail
: "${FR_HOME:?set FR_HOME to the fr install or build directory}"
export FR_JOB_ID=${FR_JOB_ID:-torchrun-$(date +%s)}
export FR_LOG_DIR=${FR_LOG_DIR:-/dev/shm}
FR_DUMP_DIR=${FR_DUMP_DIR:-$PWD/fr-incidents}
FR_STALL_AFTER=${FR_STALL_AFTER:-60}
PYTHON=${PYTHON:-python3}

gpus() {
  local n
  # grep -c prints 0 itself when nothing matches; `|| true` only keeps set -e quiet.
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  echo "${n:-0}"
}
if [[ -z ${NPROC:-} ]]; then
  NPROC=$(gpus)
  ((NPROC > 0)) || NPROC=1
fi

# The token and the port file live in a private directory that goes away on any exit.
state=$(mktemp -d "${TMPDIR:-/tmp}/fr-torchrun-XXXXXX")
coordinator=
cleanup() {
  [[ -n $coordinator ]] && kill "$coordinator" 2>/dev/null && wait "$coordinator" 2>/dev/null
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/token")

"$FR_HOME/bin/frd" coordinator --listen 127.0.0.1:0 --port-file "$state/port" \
  --token-file "$state/token" --dump-dir "$FR_DUMP_DIR" --job-id "$FR_JOB_ID" \
  --expect-ranks "$NPROC" --stall-after "$FR_STALL_AFTER" &
coordinator=$!
for _ in $(seq 100); do
  [[ -s $state/port ]] && break
  kill -0 "$coordinator" 2>/dev/null || { echo "run.sh: the coordinator did not start" >&2; exit 1; }
  sleep 0.1
done
[[ -s $state/port ]] || { echo "run.sh: the coordinator wrote no port in 10 s" >&2; exit 1; }

# --no-python: torchrun starts fr-run itself, once per rank, with RANK and the rest set.
"${TORCHRUN:-torchrun}" --standalone --nproc-per-node "$NPROC" --no-python \
  "$FR_HOME/bin/fr-run" --coordinator "127.0.0.1:$(cat "$state/port")" --job-id "$FR_JOB_ID" \
  --token-file "$state/token" --frd-arg --stall-after --frd-arg "$FR_STALL_AFTER" \
  -- "$PYTHON" "$@"
