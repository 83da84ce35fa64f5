#!/usr/bin/env bash
# Packs what the GPU check needs from a build into one folder that travels to a bare GPU machine:
# the agent, frd and fr-analyze (stripped), the shared libraries frd and fr-analyze load beyond
# glibc's own (gRPC, protobuf, libdw, ...: a machine without the Debian packages has none of
# them), and py-spy when it is installed here. run.sh uses BUILD/gpu-bundle before the build's
# own outputs. About 35 MiB; BUILD/ is ignored by git, so carry the folder explicitly.
#
#   bash tests/gpu/bundle.sh [BUILD]      # writes BUILD/gpu-bundle
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
out=$build/gpu-bundle
for f in lib/libfr_agent.so bin/frd bin/fr-analyze; do
  [[ -f $build/$f ]] || { echo "bundle: $build/$f is missing (build it first)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/deps"
strip --strip-unneeded -o "$out/lib/libfr_agent.so" "$build/lib/libfr_agent.so"
for tool in frd fr-analyze; do
  strip --strip-unneeded -o "$out/bin/$tool" "$build/bin/$tool"
done
# glibc's own libraries come from the machine they run on; everything else travels.
ldd "$build/bin/frd" "$build/bin/fr-analyze" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
      *) cp -L "$lib" "$out/deps/" ;;
    esac
  done
spy=$(command -v pyenv >/dev/null && pyenv which py-spy 2>/dev/null || command -v py-spy || true)
if [[ -n $spy ]] && head -c 4 "$spy" | grep -q ELF; then
  cp -L "$spy" "$out/bin/py-spy"
else
  echo "bundle: no py-spy binary here; the stacks check will report Python frames as not taken" >&2
fi
echo "bundle: $out ($(du -sm "$out" | cut -f1) MiB): carry it as ${out#"$PWD"/}"
