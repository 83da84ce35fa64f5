#!/usr/bin/env bash
# The local demo: a simulated job of 2 nodes x 4 ranks (TP 2, PP 2) where rank 5 hangs on the host
# before step 3. fr-simjob notices that no rank progresses, snapshots every rank's flight log into
# a dump set and prints the last op of each rank on each communicator; fr-analyze then gives the
# verdict. Runs in well under 30 s.
#   usage: examples/demo/run.sh <build-dir>
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
for f in bin/fr-simjob bin/fr-simjob-rank lib/libfr_agent.so sim/lib/libnccl.so.2 sim/lib/libcuda.so.1; do
  [[ -e $build/$f ]] || { echo "demo: $build/$f is missing; run 'make build' first" >&2; exit 1; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/fr-demo-XXXXXX")

echo "== A 2-node x 4-rank job (TP 2, PP 2); rank 5 hangs on the host before step 3"
echo "   fr-simjob --nodes 2 --ranks-per-node 4 --tp 2 --pp 2 --steps 10 \\"
echo "             --fault rank=5,step=3,kind=hang-host --snapshot-after 2 --out $out"
echo
"$build/bin/fr-simjob" --nodes 2 --ranks-per-node 4 --tp 2 --pp 2 --steps 10 \
  --fault rank=5,step=3,kind=hang-host --snapshot-after 2 --out "$out"
echo
if [[ -x $build/bin/fr-analyze ]]; then
  echo "== fr-analyze $out/dumps"
  "$build/bin/fr-analyze" "$out/dumps" || echo "demo: fr-analyze failed (exit $?)"
else
  echo "(fr-analyze is not built: no verdict)"
fi
echo
echo "The dump set stays in $out/dumps (result.json next to it); remove $out when done."
