#!/usr/bin/env bash
# fr-analyze speed: synthetic dump sets of 1,024, 4,096 and 16,384 ranks x 2,048 records with a
# planted host hang (256 ranks a node), each analysed once; prints wall and CPU time, peak memory (whole and per
# rank), and seconds per million records, whose spread over the sizes says how linear the
# analysis is in ranks. Says whether the 4,096-rank target (<= 5 s, <= 2 GiB) and the 16,384-rank
# one (<= 3 s, <= 1 GiB, <= 64 KiB per rank) are met: figures only, a missed target is printed as
# such and never fails the run (only a wrong analysis does). Then, at the largest size, the same job written as
# one dump set per node (fr-gendumps --dir-per-node, 256 ranks a node) and analysed in one
# fr-analyze over all of them must give the same analysis as the single dump set. Then the same
# for PyTorch Flight Recorder pickles, beside PyTorch's fr_trace on the same files (see below).
# Dump sets live in a temporary directory that is removed on exit (the largest is 5.5 GB); a size
# the free disk cannot hold is scaled down, with a note saying so.
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
gen=$build/bin/fr-gendumps
analyze=$build/bin/fr-analyze
for b in "$gen" "$analyze"; do
  [[ -x $b ]] || { echo "missing $b: build fr-gendumps and fr-analyze first" >&2; exit 2; }
done
entries=${FR_BENCH_ENTRIES:-2048}
sizes=${FR_BENCH_RANKS:-"1024 4096 16384"}
per_node=${FR_BENCH_RANKS_PER_NODE:-256}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-analyzer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

have_time=0
[[ -x /usr/bin/time ]] && have_time=1
status=0
met() { [[ $1 == yes ]] && echo "target met" || echo "target not met"; }

# Disk a dump set of n ranks takes (a dump holds the ring, the communicator table and a header),
# with 10% to spare; and what the disk under $tmp has free, less 1 GiB for everyone else.
set_mib() { echo $(( ($1 * (entries * 128 + 256 * 256 + 4096) * 11 / 10) >> 20 )); }
free_mib() { echo $(( $(df -Pk "$tmp" | awk 'NR == 2 { print $4 }') / 1024 - 1024 )); }

# Runs fr-analyze once: sets wall, cpu and rss_kb, writes the JSON to $2.
run_analyze() {
  local out=$1
  shift
  if (( have_time )); then
    /usr/bin/time -f "%e %M %U %S" -o "$tmp/time" "$analyze" --json "$@" >"$out"
    read -r wall rss_kb usr sys <"$tmp/time"
    cpu=$(awk -v u="$usr" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
  else
    local s
    s=$(date +%s.%N)
    "$analyze" --json "$@" >"$out"
    wall=$(echo "$(date +%s.%N) - $s" | bc)
    rss_kb=0
    cpu="?"
  fi
}

# The analysis less what names the inputs (paths differ between one dump set and per-node sets).
normalized() {
  python3 - "$1" <<'PY'
import json, sys
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in ("paths", "file", "files", "path", "dir")}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
print(json.dumps(strip(json.load(open(sys.argv[1]))), sort_keys=True))
PY
}

# s/Mrec: wall seconds per million records; cpu/Mrec the same in CPU seconds, which a busy machine
# moves less.
# FR_BENCH_TORCH_ONLY=1 runs only the PyTorch part below.
[[ ${FR_BENCH_TORCH_ONLY:-0} != 0 ]] && sizes=""
[[ -n $sizes ]] &&
  printf '%-7s %-9s %-8s %-9s %-7s %-9s %-9s %-8s %-9s %s\n' ranks records gen_s analyze_s cpu_s peak_MiB KiB/rank s/Mrec cpu/Mrec verdict
largest=0
for n in $sizes; do
  need=$(set_mib "$n")
  avail=$(free_mib)
  if (( need > avail )); then
    m=$n
    while (( m > 1 && $(set_mib "$m") > avail )); do m=$((m / 2)); done
    echo "note: $n ranks need about $need MiB of disk, $avail MiB are free: scaled down to $m ranks"
    n=$m
  fi
  dir=$tmp/d$n
  t0=$(date +%s.%N)
  "$gen" --ranks "$n" --entries "$entries" --fault "kind=hang-host,rank=$((n / 2 + 1))" \
    --ranks-per-host "$per_node" --out "$dir" >/dev/null
  t1=$(date +%s.%N)
  sync  # the set just written goes to disk first, not while it is analysed
  run_analyze "$tmp/out$n.json" "$dir"
  verdict=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["kind"], v["culprit_ranks"])' "$tmp/out$n.json" 2>/dev/null || echo "?")
  records=$((n * entries))
  per_m=$(awk -v w="$wall" -v r="$records" 'BEGIN { printf "%.3f", w / (r / 1e6) }')
  cpu_m=$(awk -v c="$cpu" -v r="$records" 'BEGIN { printf "%.3f", c / (r / 1e6) }')
  printf '%-7s %-9s %-8.2f %-9.2f %-7s %-9.0f %-9.1f %-8s %-9s %s\n' "$n" "$records" "$(echo "$t1 - $t0" | bc)" "$wall" "$cpu" \
    "$(awk -v k="$rss_kb" 'BEGIN { print k / 1024 }')" "$(awk -v k="$rss_kb" -v n="$n" 'BEGIN { print k / n }')" "$per_m" "$cpu_m" "$verdict"
  if [[ $n == 4096 && $entries == 2048 ]]; then
    ok_t=$(awk -v w="$wall" 'BEGIN { print (w <= 5.0) ? "yes" : "no" }')
    ok_m=$(awk -v k="$rss_kb" 'BEGIN { print (k <= 2 * 1024 * 1024) ? "yes" : "no" }')
    echo "target 4096 x 2048: time <= 5 s: $ok_t; peak memory <= 2 GiB: $ok_m;" \
      "$(met "$([[ $ok_t == yes && $ok_m == yes ]] && echo yes)")"
  fi
  if [[ $n == 16384 && $entries == 2048 ]]; then
    ok_t=$(awk -v w="$wall" 'BEGIN { print (w <= 3.0) ? "yes" : "no" }')
    ok_m=$(awk -v k="$rss_kb" 'BEGIN { print (k <= 1024 * 1024) ? "yes" : "no" }')
    ok_r=$(awk -v k="$rss_kb" -v n="$n" 'BEGIN { print (k / n <= 64) ? "yes" : "no" }')
    echo "target 16384 x 2048: time <= 3 s: $ok_t; peak memory <= 1 GiB: $ok_m; <= 64 KiB per rank: $ok_r;" \
      "$(met "$([[ $ok_t == yes && $ok_m == yes && $ok_r == yes ]] && echo yes)")"
  fi
  rm -rf "$dir"
  (( n > largest )) && largest=$n
done

# One dump set per node, read in one run: the same analysis as the one set of the same job.
if (( largest >= 2 )); then
  n=$largest
  dir=$tmp/nodes$n
  "$gen" --ranks "$n" --entries "$entries" --fault "kind=hang-host,rank=$((n / 2 + 1))" \
    --ranks-per-host "$per_node" --dir-per-node --out "$dir" >/dev/null
  sync
  sets=("$dir"/node*)
  run_analyze "$tmp/nodes$n.json" "${sets[@]}"
  rm -rf "$dir"
  if [[ "$(normalized "$tmp/out$n.json")" == "$(normalized "$tmp/nodes$n.json")" ]]; then
    same=yes
  else
    same=no
    status=1
  fi
  printf '%s ranks as %s per-node dump sets in one run: %.2f s, %s MiB peak; same analysis as one dump set: %s\n' \
    "$n" "${#sets[@]}" "$wall" "$(awk -v k="$rss_kb" 'BEGIN { printf "%.0f", k / 1024 }')" "$same"
fi

# PyTorch Flight Recorder pickles: 1,024 ranks x 2,000 entries with 16 stack frames each (as
# torch's own test-dump generator shapes them), written by gen_torch_pickles.py; fr-analyze's
# time and peak memory (target <= 2 s, <= 1 GiB), then PyTorch's fr_trace on the same files when
# torch imports (FR_BENCH_FR_TRACE=0 leaves it out; it is bounded by FR_BENCH_FR_TRACE_LIMIT s),
# and, where valgrind is installed, the instructions reading one rank file takes.
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
      cpu="?"
    fi
    printf '%-11s %-9s %-10s %-8.2f %-7s %-9s %s\n' "$label" "$t_ranks" "$((t_ranks * t_entries))" "$wall" "$cpu" \
      "$(awk -v k="${rss_kb:-0}" 'BEGIN { printf "%.0f", k / 1024 }')" "rc $rc"
  }
  echo
  printf 'torch pickles: %s ranks x %s entries x %s frames, %s MiB, generated in %.1f s\n' \
    "$t_ranks" "$t_entries" "$t_frames" "$mib" "$(echo "$t1 - $t0" | bc)"
  printf '%-11s %-9s %-10s %-8s %-7s %-9s %s\n' tool ranks entries wall_s cpu_s peak_MiB result
  # The generator's 2.7 GB are written back before timing, so that the disk's writeback does not
  # share the two cores with the analysis; then the median of FR_BENCH_TORCH_RUNS runs (3).
  sync
  runs=${FR_BENCH_TORCH_RUNS:-3}
  rows=()
  for ((r = 0; r < runs; r++)); do
    measure fr-analyze "$analyze" --json "$tdir" >"$tmp/mline"
    rows+=("$(cat "$tmp/mline")|$wall|$rss_kb|$cpu")
  done
  row=$(printf '%s\n' "${rows[@]}" | sort -t'|' -k2,2n | sed -n "$(( (runs + 1) / 2 ))p")
  IFS='|' read -r line wall rss_kb cpu <<<"$row"
  echo "$line (median of $runs runs; walls: $(printf '%s\n' "${rows[@]}" | cut -d'|' -f2 | tr '\n' ' ' | sed 's/ $//'))"
  verdict=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["verdict"]; print(v["kind"], v["culprit_ranks"], v.get("op"), v.get("seq"))' "$tmp/tout" 2>/dev/null || echo "?")
  ok_t=$(awk -v w="$wall" 'BEGIN { print (w <= 2.0) ? "yes" : "no" }')
  ok_m=$(awk -v k="${rss_kb:-0}" 'BEGIN { print (k <= 1024 * 1024) ? "yes" : "no" }')
  echo "fr-analyze verdict: $verdict; target <= 2 s: $ok_t; peak <= 1 GiB: $ok_m;" \
      "$(met "$([[ $ok_t == yes && $ok_m == yes ]] && echo yes)")"
  # Instructions to read one rank file (callgrind's count inside the torch reader), a figure a busy
  # machine does not move; and the CPU seconds of the whole run per rank file.
  echo "fr-analyze CPU per rank file: $(awk -v c="$cpu" -v n="$t_ranks" 'BEGIN { printf "%.2f", 1000 * c / n }') ms"
  if command -v valgrind >/dev/null 2>&1; then
    valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.out" \
      --toggle-collect='fr::analyzer::torch::read_torch_dump_bytes*' \
      "$analyze" --json "$tdir/nccl_trace_rank_0" >/dev/null 2>"$tmp/callgrind.err" || true
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$tmp/callgrind.out" 2>/dev/null)
    echo "reading one rank file: ${ir:-?} instructions (callgrind, inside the torch reader)"
  else
    echo "reading one rank file: instructions not counted (valgrind not installed)"
  fi
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
