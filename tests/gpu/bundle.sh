#!/usr/bin/env bash
# Packs everything the GPU check needs, beside the GPU machine's own PyTorch, into one folder that
# travels to a bare GPU machine and runs there with one command, `bash run.sh` in it:
#
#   run.sh                  the entry: check/run.sh on this bundle, 300 s in all (FR_GPU_TOTAL_LIMIT)
#   check/                  run.sh, preamble.py, check.py, torch_job.py (tests/gpu/)
#   bin/                    frd, fr-analyze, fr-run (stripped); py-spy when installed here
#   lib/libfr_agent.so      the agent (stripped; needs nothing beyond glibc)
#   share/fr/python/        fr-run's Python hook (found by fr-run in ../share/fr/python)
#   deps/                   the shared libraries frd, fr-analyze and fr-run load beyond glibc's own
#                           (gRPC, protobuf, libdw, libstdc++, ...), on LD_LIBRARY_PATH for those
#                           tools only, never for the torch job
#   MANIFEST                fr's version, the commit, the glibc the binaries need, every file
#
# At most 60 MiB (it fails beyond). BUILD/ is ignored by git, so carry the folder explicitly.
#
#   bash tests/gpu/bundle.sh [BUILD [OUT]]      # writes OUT, default BUILD/gpu-bundle
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
out=$(realpath -m "${2:-$build/gpu-bundle}")
limit_mib=60
for f in lib/libfr_agent.so bin/frd bin/fr-analyze bin/fr-run; do
  [[ -f $build/$f ]] || { echo "bundle: $build/$f is missing (build it first)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/deps" "$out/check" "$out/share/fr/python"
strip --strip-unneeded -o "$out/lib/libfr_agent.so" "$build/lib/libfr_agent.so"
for tool in frd fr-analyze fr-run; do
  strip --strip-unneeded -o "$out/bin/$tool" "$build/bin/$tool"
done
cp "$root/cli/fr-run/sitecustomize.py" "$out/share/fr/python/"
cp "$here/run.sh" "$here/preamble.py" "$here/check.py" "$here/torch_job.py" "$out/check/"
# glibc's own libraries come from the machine they run on; everything else travels.
ldd "$build/bin/frd" "$build/bin/fr-analyze" "$build/bin/fr-run" "$build/lib/libfr_agent.so" |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
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
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# The fr GPU check from this bundle (tests/gpu/bundle.sh; tests/gpu/README.md): `bash run.sh`.
# Prints the preamble, a line per check and one table; exit 0 all passed, 1 a check failed,
# 77 no GPU here. FR_GPU_SAVE=DIR leaves DIR/gpu-check.tgz with every step's output.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export FR_GPU_BUNDLE=$here FR_GPU_TOTAL_LIMIT=${FR_GPU_TOTAL_LIMIT:-300} FR_GPU_STEP_LIMIT=${FR_GPU_STEP_LIMIT:-120}
exec bash "$here/check/run.sh" "$here"
EOF
# The newest GLIBC_ symbol version any packed binary asks for: the machine needs that glibc.
glibc=$(find "$out/bin" "$out/lib" "$out/deps" -type f -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_2\.[0-9]*' | sort -t . -k 2 -n -u | tail -n 1)
glibc=${glibc#GLIBC_}
{
  echo "fr=$("$build/bin/fr-run" --version 2>&1 | head -n 1)"
  echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "glibc_needed=${glibc:-unknown}"
  echo "files:"
  (cd "$out" && find . -type f ! -name MANIFEST -printf '%P %s\n' | sort)
} >"$out/MANIFEST"
bytes=$(du -sb "$out" | cut -f1)
mib=$(((bytes + 1048575) / 1048576))
if ((bytes > limit_mib * 1048576)); then
  echo "bundle: $out is $mib MiB, over the $limit_mib MiB limit" >&2
  exit 1
fi
echo "bundle: $out ($mib MiB, needs glibc ${glibc:-unknown} or newer): carry it as ${out#"$PWD"/}"
