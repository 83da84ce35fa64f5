#!/usr/bin/env bash
# An MPI job under fr: a coordinator on this host, and every rank started by mpirun through
# fr-run, which preloads the agent and makes sure one `frd node` serves each node (the first rank
# there starts it, the others share it). The agent takes the global rank from
# OMPI_COMM_WORLD_RANK or PMI_RANK. On a verdict the report lands in
# $FR_DUMP_DIR/<job>/<incident>/report.txt.
#   usage: FR_HOME=/opt/fr examples/mpirun/run.sh program [args...]
#   e.g.   FR_HOME=/opt/fr NPROC=16 MPIRUN_OPTS="--hostfile hosts" FR_LISTEN=0.0.0.0 \
#            FR_STATE_DIR=$HOME/.fr examples/mpirun/run.sh python3 train.py
# Single host by default. Across hosts, set FR_LISTEN=0.0.0.0 (the coordinator is then reached at
# FR_ADDR, default this host's name) and FR_STATE_DIR to a directory every host sees, for the
# token. FR_HOME must be the same path on every host. NPROC defaults to the number of GPUs that
# nvidia-smi lists here, and to 1 where there is no nvidia-smi.
set -euo pipefail
: "${FR_HOME:?set FR_HOME to the fr install or build directory}"
export FR_JOB_ID=${FR_JOB_ID:-mpi-$(date +%s)-$$}
export FR_LOG_DIR=${FR_LOG_DIR:-/dev/shm}
FR_DUMP_DIR=${FR_DUMP_DIR:-$PWD/fr-incidents}
FR_STALL_AFTER=${FR_STALL_AFTER:-60}
FR_LISTEN=${FR_LISTEN:-127.0.0.1}
if [[ $FR_LISTEN == 127.0.0.1 ]]; then
  FR_ADDR=${FR_ADDR:-127.0.0.1}
else
  FR_ADDR=${FR_ADDR:-$(hostname -f 2>/dev/null || hostname)}
fi

# More mpirun options (a hostfile, --allow-run-as-root, ...), split on spaces.
read -r -a mpirun_args <<<"${MPIRUN_OPTS:-}"
(($#)) || { echo "usage: FR_HOME=... $0 program [args...]" >&2; exit 2; }

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
mkdir -p "${FR_STATE_DIR:=${TMPDIR:-/tmp}}"
state=$(mktemp -d "$FR_STATE_DIR/fr-mpirun-XXXXXX")
coordinator=
cleanup() {
  [[ -n $coordinator ]] && kill "$coordinator" 2>/dev/null && wait "$coordinator" 2>/dev/null
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/token")

"$FR_HOME/bin/frd" coordinator --listen "$FR_LISTEN:0" --port-file "$state/port" \
  --token-file "$state/token" --dump-dir "$FR_DUMP_DIR" --job-id "$FR_JOB_ID" \
  --expect-ranks "$NPROC" --stall-after "$FR_STALL_AFTER" &
coordinator=$!
for _ in $(seq 100); do
  [[ -s $state/port ]] && break
  kill -0 "$coordinator" 2>/dev/null || { echo "run.sh: the coordinator did not start" >&2; exit 1; }
  sleep 0.1
done
[[ -s $state/port ]] || { echo "run.sh: the coordinator wrote no port in 10 s" >&2; exit 1; }

"${MPIRUN:-mpirun}" -np "$NPROC" "${mpirun_args[@]}" \
  "$FR_HOME/bin/fr-run" --coordinator "$FR_ADDR:$(cat "$state/port")" --job-id "$FR_JOB_ID" \
  --token-file "$state/token" --frd-arg --stall-after --frd-arg "$FR_STALL_AFTER" \
  -- "$@"
