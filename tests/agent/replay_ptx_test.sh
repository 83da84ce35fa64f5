#!/bin/sh
# The agent's replay kernel PTX assembles with the CUDA toolkit's ptxas, for the oldest GPU
# architecture CUDA 13 supports and a recent one (the driver JITs the same text at run time).
# Usage: replay_ptx_test.sh PTX_DUMP_PROGRAM [CUDA_HOME]. Exit 77 when ptxas is absent.
set -eu
dump=$1
cuda=${2:-/usr/local/cuda}
ptxas=$cuda/bin/ptxas
if [ ! -x "$ptxas" ]; then
  echo "skipped: no ptxas at $ptxas (CUDA toolkit absent)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$dump" > "$dir/replay.ptx"
for arch in sm_75 sm_90; do
  "$ptxas" -arch="$arch" "$dir/replay.ptx" -o "$dir/replay_$arch.cubin"
  test -s "$dir/replay_$arch.cubin"
  echo "ptxas -arch=$arch: ok"
done
# ptxas must be able to fail here: a broken copy of the text is refused.
sed 's/membar.sys;/membar.bogus;/' "$dir/replay.ptx" > "$dir/broken.ptx"
if "$ptxas" -arch=sm_75 "$dir/broken.ptx" -o "$dir/broken.cubin" 2>/dev/null; then
  echo "ptxas accepted a broken PTX text: the check proves nothing"
  exit 1
fi
