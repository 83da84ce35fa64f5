#!/usr/bin/env bash
# fr-analyze speed: synthetic dump sets of 256, 1,024 and 4,096 ranks x 2,048 records with a
# planted host hang, each analysed once; prints wall time, peak memory and seconds per million
# records, and checks the 4,096-rank target (<= 5 s, <= 2 GiB). Then the same for PyTorch Flight
# Recorder pickles, beside PyTorch's fr_trace on the same files (see below). Dump sets live in a temporary
# directory that is removed on exit (the largest is 1 GiB).
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
gen=$build/bin/fr-gendumps
analyze=$build/bin/fr-analyze
for b in "$gen" "$analyze"; do
  [[ -x $b ]] || { echo "missing $b: build fr-gendumps and fr-analyze first" >&2; exit 2; }
done
entries=${FR_BENCH_ENTRIES:-2048}
sizes=${FR_BENCH_RANKS:-"256 1024 4096"}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-analyzer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

have_time=0
[[ -x /usr/bin/time ]] && have_time=1
status=0
printf '%-7s %-8s %-12s %-9s %-11s %-10s %s\n' ranks records gen_s analyze_s peak_MiB s/Mrec verdict
for n in $sizes; do
  dir=$tmp/d$n
  t0=$(date +%s.%N)
  "$gen" --ranks "$n" --entries "$entries" --fault "kind=hang-host,rank=$((n / 2 + 1))" --out "$dir" >/dev/null
  t1=$(date +%s.%N)
  if (( have_time )); then
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$analyze" --json "$dir" >"$tmp/out.json"
    read -r wall rss_kb <"$tmp/time"
  else
    s=$(date +%s.%N)
    "$analyze" --json "$dir" >"$tmp/out.json"
    wall=$(echo "$(date +%s.%N) - $s" | bc)
    rss_kb=0
  fi
  verdict=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["kind"], v["culprit_ranks"])' "$tmp/out.json" 2>/dev/null || echo "?")
  records=$((n * entries))
  per_m=$(awk -v w="$wall" -v r="$records" 'BEGIN { printf "%.3f", w / (r / 1e6) }')
  printf '%-7s %-8s %-12.2f %-9.2f %-11.0f %-10s %s\n' "$n" "$records" "$(echo "$t1 - $t0" | bc)" "$wall" \
    "$(awk -v k="$rss_kb" 'BEGIN { print k / 1024 }')" "$per_m" "$verdict"
  if [[ $n == 4096 && $entries == 2048 ]]; then
    ok_t=$(awk -v w="$wall" 'BEGIN { print (w <= 5.0) ? "yes" : "no" }')
    ok_m=$(awk -v k="$rss_kb" 'BEGIN { print (k <= 2 * 1024 * 1024) ? "yes" : "no" }')
    echo "target 4096 x 2048: time <= 5 s: $ok_t; peak memory <= 2 GiB: $ok_m"
    [[ $ok_t == yes && $ok_m == yes ]] || status=1
  fi
  rm -rf "$dir"
done

# PyTorch Flight Recorder pickles: 1,024 ranks x 2,000 entries with 16 stack frames each (as
# torch's own test-dump generator shapes them), written by gen_torch_pickles.py; fr-analyze's
# time and peak memory (target <= 2 s, <= 1 GiB), then PyTorch's fr_trace on the same files when
# torch imports (FR_BENCH_FR_TRACE=0 leaves it out; it is bounded by FR_BENCH_FR_TRACE_LIMIT s).
# Figures only: this part never changes the exit status.
if [[ ${FR_BENCH_TORCH:-1} != 0 ]]; then
  here=$(cd "$(dirname "$0")" && pwd)
  t_ranks=${FR_BENCH_TORCH_RANKS:-1024}
  t_entries=${FR_BENCH_TORCH_ENTRIES:-2000}
  t_frames=${FR_BENCH_TORCH_FRAMES:-16}
  tdir=$tmp/torch
  t0=$(date +%s.%N)
  python3 "$here/gen_torch_pickles.py" "$tdir" "$t_ranks" "$t_entries" "$t_frames"
  t1=$(date +%s.%N)
  mib=$(du -sm "$tdir" | cut -f1)
  measure() {  # label, command...: wall and CPU seconds, peak MiB (CPU time tells a busy machine)
    local label=$1 rc=0
    shift
    if (( have_time )); then
      /usr/bin/time -f "%e %M %U %S" -o "$tmp/ttime" "$@" >"$tmp/tout" 2>"$tmp/terr" || rc=$?
      # A failing command adds a "Command exited ..." line before the figures.
      read -r wall rss_kb usr sys < <(tail -n 1 "$tmp/ttime") || true
      cpu=$(awk -v u="${usr:-0}" -v s="${sys:-0}" 'BEGIN { printf "%.2f", u + s }')
    else
      local s
      s=$(date +%s.%N)
      "$@" >"$tmp/tout" 2>"$tmp/terr" || rc=$?
      wall=$(echo "$(date +%s.%N) - $s" | bc)
      rss_kb=0
      cpu=?
    fi
    printf '%-11s %-9s %-10s %-8.2f %-7s %-9s %s\n' "$label" "$t_ranks" "$((t_ranks * t_entries))" "$wall" "$cpu" \
      "$(awk -v k="${rss_kb:-0}" 'BEGIN { printf "%.0f", k / 1024 }')" "rc $rc"
  }
  echo
  printf 'torch pickles: %s ranks x %s entries x %s frames, %s MiB, generated in %.1f s\n' \
    "$t_ranks" "$t_entries" "$t_frames" "$mib" "$(echo "$t1 - $t0" | bc)"
  printf '%-11s %-9s %-10s %-8s %-7s %-9s %s\n' tool ranks entries wall_s cpu_s peak_MiB result
  measure fr-analyze "$analyze" --json "$tdir"
  verdict=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["kind"], v["culprit_ranks"], v.get("op"), v.get("seq"))' "$tmp/tout" 2>/dev/null || echo "?")
  ok_t=$(awk -v w="$wall" 'BEGIN { print (w <= 2.0) ? "yes" : "no" }')
  ok_m=$(awk -v k="${rss_kb:-0}" 'BEGIN { print (k <= 1024 * 1024) ? "yes" : "no" }')
  echo "fr-analyze verdict: $verdict; target <= 2 s: $ok_t; peak <= 1 GiB: $ok_m"
  if [[ ${FR_BENCH_FR_TRACE:-1} != 0 ]] && python3 -c 'import torch.distributed.flight_recorder.fr_trace' >/dev/null 2>&1; then
    measure fr_trace timeout "${FR_BENCH_FR_TRACE_LIMIT:-600}" python3 -m torch.distributed.flight_recorder.fr_trace \
      -p nccl_trace_rank_ "$tdir"
    echo "fr_trace says: $(grep -m1 -E 'missing ranks|Error' "$tmp/tout" "$tmp/terr" | cut -c1-120)"
  else
    echo "fr_trace: not run (torch not importable, or FR_BENCH_FR_TRACE=0)"
  fi
  rm -rf "$tdir"
fi
exit $status
