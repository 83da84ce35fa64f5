#!/usr/bin/env bash
# gpu_bundle_test: the GPU-check bundle (tests/gpu/bundle.sh, `make gpu-bundle`) packed from this
# build, checked and run here, where there is no GPU:
#   - it is at most 60 MiB and holds the entry run.sh, the check scripts, frd, fr-analyze, fr-run,
#     the agent, fr-run's Python hook and a MANIFEST naming the glibc it needs and every file;
#   - its binaries find every library they load in the bundle or in glibc (ldd: none "not found");
#   - moved elsewhere and run with `bash run.sh`, it prints the preamble, a "no GPU: ..." line and
#     one table with every check NOT RUN, and exits 77: not 0, not a hang, not a traceback;
#   - the preamble's driver probe, given a libcuda.so.1 whose cuInit fails, prints the call with
#     its CUresult and a FAIL row, and no traceback.
# On a machine with a GPU the run would be the real check (gpu_run_test): skipped there.
#
#   bash tests/gpu/bundle_test.sh BUILD
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-build}" && pwd)
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "FR-SKIPPED: a GPU is here: the bundle would run the real check (gpu_run_test runs it)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fr-bundle-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

if ! bash "$here/bundle.sh" "$build" "$work/packed/gpu-bundle" >"$work/bundle.log" 2>&1; then
  cat "$work/bundle.log"
  echo "FAIL bundle.sh"
  exit 1
fi
# Moved after packing: nothing in it may point back at the build or the source tree.
mv "$work/packed/gpu-bundle" "$work/unpacked"
b=$work/unpacked

bytes=$(du -sb "$b" | cut -f1)
if ((bytes <= 60 * 1048576)); then ok "size $((bytes / 1048576)) MiB <= 60 MiB"
else fail "size $bytes bytes > 60 MiB"; fi

for f in run.sh MANIFEST check/run.sh check/preamble.py check/check.py check/torch_job.py bin/frd \
  bin/fr-analyze bin/fr-run lib/libfr_agent.so share/fr/python/sitecustomize.py; do
  [[ -s $b/$f ]] || fail "the bundle has no $f"
done
for f in bin/frd bin/fr-analyze bin/fr-run lib/libfr_agent.so check/preamble.py; do
  grep -q "^$f [0-9]*$" "$b/MANIFEST" || fail "MANIFEST does not list $f"
done
grep -q '^glibc_needed=2\.[0-9]*$' "$b/MANIFEST" || fail "MANIFEST names no glibc: $(grep glibc "$b/MANIFEST")"
grep -q '^fr=fr-run [0-9]' "$b/MANIFEST" || fail "MANIFEST names no fr version"
missing=$(LD_LIBRARY_PATH=$b/deps ldd "$b"/bin/frd "$b"/bin/fr-analyze "$b"/bin/fr-run "$b"/lib/libfr_agent.so 2>&1 |
  grep 'not found')
if [[ -z $missing ]]; then ok "every library the binaries load is in the bundle or glibc"
else fail "libraries not found: $missing"; fi
if LD_LIBRARY_PATH=$b/deps "$b/bin/fr-analyze" --version >/dev/null 2>&1 &&
   LD_LIBRARY_PATH=$b/deps "$b/bin/frd" --version >/dev/null 2>&1 && "$b/bin/fr-run" --version >/dev/null 2>&1; then
  ok "frd, fr-analyze and fr-run run from the bundle"
else fail "a bundled tool does not run"; fi

# The whole check, as on the GPU machine; no GPU here. PATH keeps no nvidia-smi of the caller's.
start=$SECONDS
(cd "$work" && timeout -k 5 240 bash "$b/run.sh") >"$work/run.out" 2>&1
rc=$?
took=$((SECONDS - start))
out=$(cat "$work/run.out")
echo "---- run.sh ($took s, exit $rc)"
sed 's/^/     /' "$work/run.out"
echo "----"
case $rc in
  77) ok "exit 77 (no GPU)" ;;
  124|137) fail "run.sh did not finish in 240 s" ;;
  *) fail "exit $rc, 77 expected" ;;
esac
grep -q '^== preamble' <<<"$out" || fail "no preamble"
for w in "glibc: " "/dev/shm: " "fr: fr-run "; do grep -q "^  $w" <<<"$out" || fail "the preamble prints no '$w' line"; done
grep -q 'no GPU: ' <<<"$out" || fail "no 'no GPU: ...' line"
grep -q '^gpu-check: NOT RUN: no GPU: ' <<<"$out" || fail "no final 'gpu-check: NOT RUN: no GPU: ...' line"
grep -q 'Traceback' <<<"$out" && fail "a Python traceback"
[[ $(grep -c '^| check | result | detail |$' <<<"$out") == 1 ]] || fail "not exactly one table"
for c in "#9 agent, backend nccl " "#9 agent, backend nccl-legacy" "#10 graph, 100 replays" \
  "#10 graph, replay 60 stalls" "#13 stacks + NVML" "#34 plugin via fr-run" "probe: cuInit + context" \
  "probe: cuMemHostRegister" "probe: cuStreamWriteValue64" "probe: captured write, replayed"; do
  grep -q "^| $c *| NOT RUN |" <<<"$out" || fail "the table does not mark '$c' NOT RUN"
done
((failures)) || ok "run.sh: preamble, 'no GPU' and one table of checks not run"

# The probe's error path: a libcuda.so.1 whose cuInit answers CUDA_ERROR_NO_DEVICE (100).
if command -v cc >/dev/null; then
  mkdir -p "$work/fakecuda"
  cat >"$work/fakecuda/cuda.c" <<'EOF'
int cuInit(unsigned flags) { (void)flags; return 100; }
int cuGetErrorName(int r, const char** s) { *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN"; return 0; }
EOF
  if cc -shared -fPIC -o "$work/fakecuda/libcuda.so.1" "$work/fakecuda/cuda.c" 2>"$work/fakecuda/cc.log"; then
    LD_LIBRARY_PATH=$work/fakecuda timeout -k 5 120 python3 "$b/check/preamble.py" >"$work/pre.out" 2>&1
    pre=$(cat "$work/pre.out")
    if grep -q '^  init: cuInit = CUDA_ERROR_NO_DEVICE (100)$' <<<"$pre" &&
       grep -q '^row=probe: cuInit + context|FAIL|cuInit failed$' <<<"$pre" &&
       grep -q '^row=probe: cuStreamWriteValue64|NOT RUN|' <<<"$pre" &&
       grep -q '^nogpu=cuInit failed$' <<<"$pre" && ! grep -q Traceback <<<"$pre"; then
      ok "the probe prints cuInit's CUresult and a FAIL row when it fails"
    else
      fail "the probe with a failing cuInit:"
      sed 's/^/     /' "$work/pre.out"
    fi
  else
    fail "cannot compile the stand-in libcuda.so.1: $(cat "$work/fakecuda/cc.log")"
  fi
else
  echo "note no C compiler: the probe's error path not checked"
fi

echo "bundle_test: $failures failure(s)"
((failures == 0))
