#!/bin/sh
# The emulation's declarations of NCCL's newer functions against each real nccl.h at hand
# (install-deps.sh puts NCCL 2.30.7's and 2.32.3's in /opt/fr-deps): real_header_check.cpp must
# compile beside each, and must not with a declaration that differs from the header's.
# Usage: real_header_test.sh CXX SOURCE_DIR CUDA_HOME [NCCL_ROOT...]
set -u
cxx=$1 src=$2 cuda=$3
shift 3
check=$src/tests/sim/real_header_check.cpp
checked=0
for root in "$@"; do
  if [ ! -f "$root/include/nccl.h" ]; then
    echo "real_header_test: no $root/include/nccl.h"
    continue
  fi
  flags="-std=c++17 -fsyntax-only -I$root/include -I$cuda/include -I$src/sim/include"
  # shellcheck disable=SC2086
  if ! out=$("$cxx" $flags "$check" 2>&1); then
    echo "real_header_test: FAIL: the emulation's declarations disagree with $root/include/nccl.h:"
    echo "$out"
    exit 1
  fi
  # shellcheck disable=SC2086
  if "$cxx" $flags -DFR_CHECK_MISMATCH "$check" >/dev/null 2>&1; then
    echo "real_header_test: FAIL: a declaration unlike $root/include/nccl.h's compiled beside it"
    exit 1
  fi
  echo "real_header_test: agrees with $root/include/nccl.h"
  checked=$((checked + 1))
done
if [ "$checked" -eq 0 ]; then
  echo "FR-SKIPPED: no real nccl.h of 2.30 or newer (scripts/install-deps.sh installs them)"
  exit 77
fi
