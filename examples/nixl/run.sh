#!/usr/bin/env bash
# A stalled NIXL transfer, named by fr: two real NIXL agents ("initiator" and "target") in two
# processes move DRAM over UCX on loopback, with the agent preloaded into both. The target is
# stopped (SIGSTOP) before the initiator posts eight WRITEs that carry a notification; NIXL has no
# timeout, so they stay in progress for good. fr-analyze then reads the two live flight logs and
# names the transfer, its peer, and the process that hosts the peer.
#   usage: examples/nixl/run.sh <build-dir> [python]
# python: one where `import nixl` works (default /opt/fr-nixl/bin/python, which
# scripts/install-deps.sh makes). Runs in about 10 s.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
python=${2:-/opt/fr-nixl/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
for f in lib/libfr_agent.so bin/fr-analyze; do
  [[ -e $build/$f ]] || { echo "nixl example: $build/$f is missing; run 'make build' first" >&2; exit 1; }
done
"$python" -c "import nixl._api" 2>/dev/null ||
  { echo "nixl example: $python cannot import nixl (scripts/install-deps.sh installs it)" >&2; exit 1; }

out=$(mktemp -d "${TMPDIR:-/tmp}/fr-nixl-XXXXXX")
mkdir -p "$out/logs"
export FR_LOG_DIR=$out/logs UCX_NET_DEVICES=lo LD_PRELOAD=$build/lib/libfr_agent.so
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
  touch "$out/stop" "$out/finish"
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_for() {
  for _ in $(seq 600); do [[ -e $1 ]] && return 0; sleep 0.1; done
  echo "nixl example: timed out waiting for $1 (see $out/*.out)" >&2
  exit 1
}

echo "== Two NIXL agents, 'initiator' and 'target', connected over UCX (loopback)"
"$python" "$here/nixl_pair.py" target "$out" >"$out/target.out" 2>&1 &
target=$!
pids+=("$target")
"$python" "$here/nixl_pair.py" initiator "$out" 8 stall >"$out/initiator.out" 2>&1 &
pids+=("$!")
wait_for "$out/warm"
echo "   a first WRITE went through; now the target (pid $target) is stopped: kill -STOP $target"
kill -STOP "$target"
touch "$out/go"
wait_for "$out/result.json"
echo "   the initiator posted 8 WRITEs with notifications; after 2 s NIXL still says:"
echo "   $(cat "$out/result.json")"
echo
echo "== fr-analyze $out/logs"
unset LD_PRELOAD
"$build/bin/fr-analyze" "$out/logs" || echo "(fr-analyze exit $?)"
echo
echo "Everything stays in $out (the flight logs, each process's output); remove it when done."
