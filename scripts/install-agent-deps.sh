#!/usr/bin/env bash
# What the agent's build and tests need beyond Debian's packages, each cached so that a second run
# does nothing (called by install-deps.sh; idempotent; run as root):
#  - NCCL 2.32.3's nccl.h, which the agent is built against, and the libnccl.so.2 of 2.32.3 and
#    2.30.7 (PyTorch 2.15's), for the tests that call a real NCCL without a GPU: from the
#    nvidia-nccl-cu13 wheels on PyPI, unpacked into /opt/fr-deps/nccl-<version>/{include,lib};
#  - a Debian 11 root (bullseye, glibc 2.31) made with debootstrap in /var/cache/fr/bullseye-root,
#    where a test runs a program with the agent preloaded, and one the wheel's tools
#    (tests/cli/wheel_oldglibc_test.py).
# Nothing here fails the install: what cannot be had is reported, the build falls back to the
# toolkit's nccl.h and the tests that need the rest report themselves skipped.
set -uo pipefail

deps=${FR_DEPS_DIR:-/opt/fr-deps}
for version in 2.32.3 2.30.7; do
  dest=$deps/nccl-$version
  [[ -f $dest/include/nccl.h && -f $dest/lib/libnccl.so.2 ]] && continue
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
      "nvidia-nccl-cu13==$version" &&
     python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for name in ("nvidia/nccl/include/nccl.h", "nvidia/nccl/lib/libnccl.so.2"):
        out = os.path.join(sys.argv[2], name.split("nvidia/nccl/")[1])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out + ".part", "wb") as f:
            f.write(z.read(name))
        os.replace(out + ".part", out)
PY
  then
    echo "install-agent-deps: NCCL $version in $dest"
  else
    echo "install-agent-deps: could not get nvidia-nccl-cu13==$version (the agent builds against" \
         "the toolkit's nccl.h; real-NCCL tests skip it)" >&2
  fi
  rm -rf "$tmp"
done

# --nccl-only (scripts/install-deps.sh --demo, when no nccl.h is at hand): no Debian 11 root.
[[ ${1:-} == --nccl-only ]] && exit 0

root=${FR_BULLSEYE_ROOT:-/var/cache/fr/bullseye-root}
if [[ ! -x $root/bin/true ]]; then
  if ! command -v debootstrap >/dev/null && [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap ||
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -q --no-install-recommends debootstrap; }
  fi
  if command -v debootstrap >/dev/null && [[ $(id -u) -eq 0 ]]; then
    rm -rf "$root.tmp"
    mkdir -p "$(dirname "$root")"
    if debootstrap --variant=minbase bullseye "$root.tmp" http://deb.debian.org/debian \
        >"$(dirname "$root")/debootstrap.log" 2>&1; then
      mv "$root.tmp" "$root"
      echo "install-agent-deps: Debian 11 root in $root"
    else
      rm -rf "$root.tmp"
      echo "install-agent-deps: debootstrap bullseye failed (see $(dirname "$root")/debootstrap.log);" \
           "the Debian 11 test will skip" >&2
    fi
  else
    echo "install-agent-deps: no debootstrap or not root; the Debian 11 test will skip" >&2
  fi
fi
exit 0
