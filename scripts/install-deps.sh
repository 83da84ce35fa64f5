#!/usr/bin/env bash
# Installs every Debian package that building and testing fr needs. Idempotent; run as root.
# The CUDA toolkit and NCCL headers are expected in /usr/local/cuda (they come with the machine).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git python3
  clang libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  catch2 libcli11-dev nlohmann-json3-dev libbenchmark-dev
  binutils procps bc time
)

# frd: the coordinator's HTTP listener (metrics) is cpp-httplib.
packages+=(libcpp-httplib-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
