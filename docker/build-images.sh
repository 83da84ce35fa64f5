#!/usr/bin/env bash
# `make images`: builds the two container images with buildah, on this machine, with no registry.
#   fr-agent-init:<version>  the agent's init container (docker/agent-init/Dockerfile)
#   fr-frd:<version>         frd (node sidecar and coordinator) and fr-analyze, built from source
#                            in a builder stage (docker/frd/Dockerfile)
# Both start from fr-base:bookworm, a Debian bookworm minbase root made here by debootstrap and
# imported with `buildah from scratch`, since no registry can be pulled from. The debootstrap root
# is cached as a tarball (FR_IMAGE_CACHE, default ~/.cache/fr-images) and the base image stays in
# buildah's storage, so only the first run pays for it; the builder stage's compiler cache lives
# there too. buildah runs with chroot isolation and the vfs driver, which work inside an
# unprivileged container as root without user namespaces or overlayfs.
#   usage: docker/build-images.sh [build-dir]    (the build dir provides libfr_agent.so)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cache=${FR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fr-images}
mirror=${FR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
bah=(buildah --storage-driver vfs)
version=$(sed -n 's/^project(fr VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
version=${version:-0.0.0}
base=localhost/fr-base:bookworm

step() { printf '== %s (%ss)\n' "$1" "$SECONDS"; }
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "images: $tool is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
[[ -f $build/lib/libfr_agent.so ]] || {
  echo "images: $build/lib/libfr_agent.so is missing; build the fr_agent target first" >&2; exit 1; }

# 1. The base: a minbase root, cached as a tarball, imported once into buildah's storage.
mkdir -p "$cache/ccache"
if ! "${bah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  tarball=$cache/bookworm-minbase.tar
  if [[ -e $tarball || -L $tarball ]] && { [[ ! -f $tarball || -L $tarball ]] || ! tar -tf "$tarball" >/dev/null 2>&1; }; then
    echo "images: the cached base $tarball is not a readable tar file; making it again" >&2
    rm -rf "$tarball"
  fi
  if [[ ! -s $tarball ]]; then
    step "debootstrap --variant=minbase bookworm (once; cached in $cache)"
    root=$(mktemp -d "$cache/root-XXXXXX")
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
      tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  step "import the base as $base"
  ctr=$("${bah[@]}" from scratch)
  "${bah[@]}" add "$ctr" "$tarball" /
  "${bah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr"
  "${bah[@]}" commit --rm "$ctr" "$base" >/dev/null
fi

bud() { "${bah[@]}" bud --isolation chroot --pull=never --build-arg "BASE=$base" "$@"; }

# 2. The agent's init container, from a context holding only the agent this checkout built; one
# layer, nothing worth caching.
step "fr-agent-init:$version"
context=$(mktemp -d "${TMPDIR:-/tmp}/fr-agent-init-XXXXXX")
trap 'rm -rf "$context"' EXIT
cp "$build/lib/libfr_agent.so" "$context/"
bud --layers=false -f docker/agent-init/Dockerfile -t "localhost/fr-agent-init:$version" "$context"

# 3. frd from source. Layers are kept (the package installs are the slow steps, and with vfs
# every layer is a full copy, so the Dockerfile has few); the builder's ccache is a volume.
# The builder stage gets a tag of its own, so that pruning the images that earlier builds left
# behind (with vfs each is a full copy: 13 GB after a dozen rebuilds) keeps its package layer.
step "fr-frd:$version"
bud --layers --target build -f docker/frd/Dockerfile -v "$cache/ccache:/ccache" \
  -t localhost/fr-frd-builder:cache .
bud --layers -f docker/frd/Dockerfile -v "$cache/ccache:/ccache" -t "localhost/fr-frd:$version" .
"${bah[@]}" rmi --prune >/dev/null 2>&1 || true
step "done"
"${bah[@]}" images --filter reference='localhost/fr-*'
