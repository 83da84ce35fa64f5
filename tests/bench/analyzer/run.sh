#!/usr/bin/env bash
# fr-analyze speed: synthetic dump sets of 256, 1,024 and 4,096 ranks x 2,048 records with a
# planted host hang, each analysed once; prints wall time, peak memory and seconds per million
# records, and checks the 4,096-rank target (<= 5 s, <= 2 GiB). Dump sets live in a temporary
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
exit $status
