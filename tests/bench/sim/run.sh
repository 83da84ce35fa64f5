#!/usr/bin/env bash
# Speed of the simulated job: a healthy 16-rank job (2 nodes x 8 ranks, TP 2, PP 2, DP 4),
# 100 steps, run with and without the agent. Prints the wall time of each run (fr-simjob's
# duration_s: from the first rank started to the last one exited, dump set included), the median
# of each side and the agent's overhead in percent (target: seconds; <= 10 % with the agent).
# The time is the job's (job_s: first rank started to last rank exited); fr-simjob's own work
# after that (the dump set) is reported apart. On a loaded machine wall times scatter, so the
# ranks' CPU time (user + system) is reported too.
#   usage: tests/bench/sim/run.sh <build-dir> [repeats]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repeats=${2:-7}
simjob="$build/bin/fr-simjob"
[[ -x $simjob ]] || { echo "bench/sim: $simjob is not built" >&2; exit 1; }
out=$(mktemp -d "${TMPDIR:-/tmp}/fr-bench-sim-XXXXXX")
trap 'rm -rf "$out"' EXIT

shape=(--nodes 2 --ranks-per-node 8 --tp 2 --pp 2 --quiet)
steps=(--steps 100)

# One run; prints its duration_s, or fails loudly when the job did not complete.
run_once() {
  local dir=$1; shift
  if ! "$simjob" "${shape[@]}" "${steps[@]}" "$@" --out "$dir" >"$out/last.log" 2>&1; then
    echo "bench/sim: fr-simjob failed:" >&2; cat "$out/last.log" >&2; exit 1
  fi
  python3 - "$dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if not r["completed"]:
    sys.exit("bench/sim: the job did not complete: " + sys.argv[1])
print("%.3f %.3f %.3f" % (r["job_s"], r["duration_s"] - r["job_s"], r["ranks_cpu_s"]))
PY
}

minimum() { printf '%s\n' "$@" | sort -g | head -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Warm-up (page cache, first exec), then alternate the two sides so machine load hits both alike.
run_once "$out/warm" --no-agent >/dev/null
with=() without=() dump=() cpu_with=() cpu_without=()
for ((i = 1; i <= repeats; i++)); do
  read -r t _ c < <(run_once "$out/without" --no-agent)
  without+=("$t")
  cpu_without+=("$c")
  read -r t d c < <(run_once "$out/with")
  with+=("$t")
  dump+=("$d")
  cpu_with+=("$c")
done
m_without=$(median "${without[@]}")
m_with=$(median "${with[@]}")
n_without=$(minimum "${without[@]}")
n_with=$(minimum "${with[@]}")
echo "simulated job: 16 ranks (2 nodes x 8, TP 2, PP 2, DP 4), 100 steps, $repeats runs each"
echo "  without agent: ${without[*]} s  (median $m_without s, best $n_without s)"
echo "  with agent:    ${with[*]} s  (median $m_with s, best $n_with s)"
echo "  dump set after the job (with agent): median $(median "${dump[@]}") s"
c_without=$(median "${cpu_without[@]}")
c_with=$(median "${cpu_with[@]}")
echo "  CPU of the 16 ranks (user+sys, median): $c_without s without, $c_with s with the agent"
awk -v a="$m_with" -v b="$m_without" -v c="$n_with" -v d="$n_without" 'BEGIN {
  printf "  agent overhead (wall): %+.1f %% on medians, %+.1f %% on best runs (target <= 10 %%)\n",
         (a - b) / b * 100, (c - d) / d * 100 }'
awk -v a="$c_with" -v b="$c_without" 'BEGIN { printf "  agent overhead (CPU, less sensitive to machine load): %+.1f %%\n", (a - b) / b * 100 }'

# Where the overhead comes from: the same job with a single step is almost only process start-up
# (exec, library loading, the agent's initialization), so its CPU difference is the agent's fixed
# cost per process, paid once however long the job runs.
steps=(--steps 1)
s_with=() s_without=()
for ((i = 1; i <= repeats; i++)); do
  read -r _ _ c < <(run_once "$out/without1" --no-agent)
  s_without+=("$c")
  read -r _ _ c < <(run_once "$out/with1")
  s_with+=("$c")
done
awk -v a="$(median "${s_with[@]}")" -v b="$(median "${s_without[@]}")" 'BEGIN {
  printf "  start-up (1-step job, CPU of 16 ranks, median): %.3f s without, %.3f s with the agent: %.1f ms per process\n",
         b, a, (a - b) / 16 * 1000 }'
