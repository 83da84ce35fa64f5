#!/usr/bin/env bash
# Runs every benchmark (tests/bench/*/run.sh) against a build directory; each prints its figures.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
for script in "$here"/*/run.sh; do
  [[ -f $script ]] || continue
  echo "== $(basename "$(dirname "$script")")"
  bash "$script" "$build"
done
