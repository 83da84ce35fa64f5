#!/usr/bin/env bash
# The local demo: a simulated job of 2 nodes x 4 ranks (TP 2, PP 2) where rank 5 hangs on the host
# before step 3.
#   1. fr-simjob alone: it notices that no rank progresses, snapshots every rank's flight log into
#      a dump set and prints the last op of each rank on each communicator; fr-analyze then reads
#      the dump set and gives the verdict.
#   2. The same hang under the daemons (when frd is built): one frd node per simulated node and a
#      coordinator catch the stall, dump every rank and write the verdict on their own.
# Runs in well under 30 s.
#   usage: examples/demo/run.sh <build-dir>
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
for f in bin/fr-simjob bin/fr-simjob-rank lib/libfr_agent.so sim/lib/libnccl.so.2 sim/lib/libcuda.so.1; do
  [[ -e $build/$f ]] || { echo "demo: $build/$f is missing; run 'make build' first" >&2; exit 1; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/fr-demo-XXXXXX")
# shellcheck disable=SC2054 # the commas belong to the --fault value
job=(--nodes 2 --ranks-per-node 4 --tp 2 --pp 2 --steps 20 --fault rank=5,step=3,kind=hang-host)

echo "== 1. A 2-node x 4-rank job (TP 2, PP 2); rank 5 hangs on the host before step 3"
echo "   fr-simjob ${job[*]} --snapshot-after 2 --out $out/local"
echo
"$build/bin/fr-simjob" "${job[@]}" --snapshot-after 2 --out "$out/local"
echo
if [[ -x $build/bin/fr-analyze ]]; then
  echo "== fr-analyze $out/local/dumps"
  "$build/bin/fr-analyze" "$out/local/dumps" || echo "demo: fr-analyze failed (exit $?)"
else
  echo "(fr-analyze is not built: no verdict)"
fi
echo

if [[ -x $build/bin/frd ]]; then
  echo "== 2. The same hang under frd: a coordinator and one node daemon per node, stall after 1 s"
  echo "   fr-simjob ${job[*]} --daemons --stall-after 1 --out $out/daemons"
  echo
  "$build/bin/fr-simjob" "${job[@]}" --daemons --stall-after 1 --out "$out/daemons" |
    grep -v '^  rank ' | grep -v '^last op per rank'
  echo "   coordinator log:"
  sed 's/^/     /' "$out/daemons/coordinator.log"
  echo
else
  echo "(frd is not built: the daemon part is skipped)"
fi
echo "Everything stays in $out (dump sets, result.json, per-rank output); remove it when done."
