#!/usr/bin/env bash
# Controller scale: what the `quietbench` controller costs when it drives N agents that each
# stream one interval per second. For each fleet size it runs one `quietbench run` over the
# first N agents and prints the controller's CPU share (CPU seconds / wall seconds, in cores),
# its peak RSS and how many trials it stored, so the growth from 10 to 200 agents is visible.
# Goal on a 2-core machine: 200 agents at no more than 0.5 core and 200 MB RSS.
#
# How 200 agents fit on one small box: they are not real agents. `agent-farm` (a binary of the
# benches crate, benches/src/bin/agent_farm.rs) serves N `quietbench.v1.AgentService` instances in
# one process, each on its own loopback port (127.0.0.1:0), each a synthetic host (hostname
# farm-NNN, a Xeon fingerprint, its own events/s figure within ±3% of 1379). Their probe
# measures nothing: for any probe name it streams the event sequence a real agent streams
# (accepted, placement, one interval per interval_ms with real HdrHistogram V2+DEFLATE bytes and
# metrics, then the result), driven by timers on one small runtime thread, so the farm costs a
# few hundredths of a core and the controller gets both CPUs. GetHost waits 250 ms, as a real
# agent's interrupt observation window does. The farm speaks the wire contract only; the
# controller cannot tell it from a fleet. The farm's own CPU share is printed too: if it grows
# large, the machine, not the controller, is the limit.
#
# How it is measured: the controller runs under a small python3 parent that reaps it with
# wait4(), whose rusage gives exact CPU seconds and peak RSS at the end; while it runs, the
# script samples /proc/PID/stat (utime + stime) and /proc/PID/status (VmHWM) every 0.5 s, for
# the busiest WINDOW seconds (the "peak" column: the steady state of a long run, which the mean
# dilutes with connection set-up) and as a cross-check of the peak RSS.
#
# Usage: benches/fleet/controller_scale.sh
# Environment (all optional):
#   SIZES="10 50 100 200"   fleet sizes, in order; the farm serves the largest
#   DURATION=10 ROUNDS=2    seconds per trial and rounds: each agent streams DURATION x ROUNDS
#                           intervals of INTERVAL=1 s
#   PROBE=cpu.primes        the probe name sent (the farm answers any)
#   WINDOW=5                seconds of the "peak" column's window
#   GOAL_AGENTS=200 GOAL_CORES=0.5 GOAL_RSS_MB=200
#   CONTROLLER_PACKAGE=quietbench              the package of the `quietbench` binary
#   REPORTS=DIR             keep each run's JSON report and output there (run-N.json, run-N.log)
#   STORE=1                 also keep every trial in a result store (a fresh SQLite file per
#                           size, each trial committed as it finishes), as a real run does
# The controller runs hosts concurrently: every agent streams at once and a run takes about
# DURATION x ROUNDS seconds whatever N (a controller that ran hosts one at a time took N times
# as long).
# Needs: python3, and the release build this script runs first.
set -euo pipefail

sizes=${SIZES:-"10 50 100 200"}
duration=${DURATION:-10}
rounds=${ROUNDS:-2}
interval=${INTERVAL:-1}
probe=${PROBE:-cpu.primes}
window=${WINDOW:-5}
goal_agents=${GOAL_AGENTS:-200}
goal_cores=${GOAL_CORES:-0.5}
goal_rss_mb=${GOAL_RSS_MB:-200}
controller_package=${CONTROLLER_PACKAGE:-quietbench}
reports=${REPORTS:-}

command -v python3 >/dev/null || { echo "error: python3 is not installed (see the header of $0)" >&2; exit 1; }
max=0
for n in $sizes; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "error: SIZES must be positive integers, got '$n'" >&2; exit 1; }
  if (( n > max )); then max=$n; fi
done
(( max > 0 )) || { echo "error: SIZES is empty" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
# One cargo invocation, so both binaries share one feature resolution (and one set of deps).
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" \
  -p quietbench-benches --bin agent-farm -p "$controller_package" --bin quietbench
farm="$repo/target/release/agent-farm"
qb="$repo/target/release/quietbench"
ticks_per_sec=$(getconf CLK_TCK)

work=$(mktemp -d)
if [[ -n $reports ]]; then
  mkdir -p "$reports"
  reports=$(cd "$reports" && pwd)
else
  reports=$work
fi
farm_pid=
controller_pid=
cleanup() {
  # The controller first (it would report the farm's loss as an error), then the farm.
  for pid in $controller_pid $farm_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The parent that reaps the controller: writes its pid to $1 for the sampler, its output to $2,
# and prints "wall_s cpu_s maxrss_kb exit_code" from wait4() at the end.
cat > "$work/reap.py" <<'EOF'
import os, subprocess, sys, time
pid_file, log_file, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
start = time.monotonic()
with open(log_file, "wb") as log:
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
with open(pid_file + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(pid_file + ".tmp", pid_file)
_, status, usage = os.wait4(child.pid, 0)
wall = time.monotonic() - start
cpu = usage.ru_utime + usage.ru_stime
print(f"{wall:.3f} {cpu:.3f} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
EOF

# CPU ticks (utime + stime) of a process, from /proc/PID/stat; fails once it is gone.
cpu_ticks() {
  local stat
  { read -r stat < "/proc/$1/stat"; } 2>/dev/null || return 1
  # Fields after the ")" that closes the command name (which may hold spaces): state is
  # field 3, utime field 14, stime field 15.
  local -a f
  read -r -a f <<< "${stat##*) }"
  echo $(( f[11] + f[12] ))
}

# Peak RSS (VmHWM) of a process in kB; fails once it is gone.
hwm_kb() {
  local key value rest
  while read -r key value rest; do
    [[ $key == VmHWM: ]] && { echo "$value"; return 0; }
  done < "/proc/$1/status"
  return 1
} 2>/dev/null

echo "controller scale: sizes $sizes; $probe, $rounds round(s) x ${duration}s, ${interval}s intervals"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
"$farm" --agents "$max" --addresses-file "$work/agents.txt" > /dev/null 2> "$work/farm.log" &
farm_pid=$!
for _ in $(seq 1 300); do
  [[ -s $work/agents.txt ]] && break
  kill -0 "$farm_pid" 2>/dev/null || { echo "error: agent-farm exited:" >&2; cat "$work/farm.log" >&2; exit 1; }
  sleep 0.1
done
[[ -s $work/agents.txt ]] || { echo "error: agent-farm did not list its agents in 30 s" >&2; exit 1; }
mapfile -t agents < "$work/agents.txt"
echo "agent-farm: pid $farm_pid, ${#agents[@]} agents on 127.0.0.1 ports ${agents[0]##*:}.."
echo

failed=0
rows=()
for n in $sizes; do
  args=()
  for a in "${agents[@]:0:n}"; do args+=(--agent "$a"); done
  if [[ ${STORE:-0} == 1 ]]; then store_args=(--db "$work/store-$n.sqlite3"); else store_args=(--no-store); fi
  json="$reports/run-$n.json"
  farm_before=$(cpu_ticks "$farm_pid")
  rm -f "$work/pid"
  python3 "$work/reap.py" "$work/pid" "$reports/run-$n.log" "$qb" run "${args[@]}" \
    --probe "$probe" --rounds "$rounds" --duration "$duration" --interval "$interval" \
    "${store_args[@]}" --json "$json" > "$work/usage-$n" &
  reaper=$!
  until [[ -s $work/pid ]]; do
    kill -0 "$reaper" 2>/dev/null || { echo "error: could not start $qb" >&2; exit 1; }
    sleep 0.05
  done
  controller_pid=$(< "$work/pid")
  t0=$(date +%s.%N)
  : > "$work/samples-$n"
  while ticks=$(cpu_ticks "$controller_pid") && hwm=$(hwm_kb "$controller_pid"); do
    echo "$(date +%s.%N) $t0 $ticks $hwm" >> "$work/samples-$n"
    sleep 0.5
  done
  wait "$reaper" || true
  controller_pid=
  farm_after=$(cpu_ticks "$farm_pid")
  read -r wall cpu maxrss_kb code < "$work/usage-$n"
  # The busiest WINDOW seconds of the samples, and the highest VmHWM seen.
  read -r peak_cores sampled_hwm_kb < <(awk -v w="$window" -v hz="$ticks_per_sec" '
    { t[NR] = $1 - $2; c[NR] = $3; if ($4 > hwm) hwm = $4 }
    END {
      best = -1
      for (i = 1; i <= NR; i++)
        for (j = i + 1; j <= NR; j++)
          if (t[j] - t[i] >= w) { s = (c[j] - c[i]) / hz / (t[j] - t[i]); if (s > best) best = s; break }
      printf "%s %d\n", (best < 0 ? "-" : sprintf("%.3f", best)), hwm
    }' "$work/samples-$n")
  rss_kb=$(( maxrss_kb > sampled_hwm_kb ? maxrss_kb : sampled_hwm_kb ))
  counted=$(python3 -c '
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("0 0 0"); sys.exit()
names = {h["fingerprint"].get("hostname", "") for h in r["hosts"]}
print(len(r["hosts"]), len(names), len(r["trials"]))' "$json")
  read -r hosts distinct trials <<< "$counted"
  expected=$(( n * rounds ))
  cores=$(awk -v c="$cpu" -v w="$wall" 'BEGIN { printf "%.3f", c / w }')
  farm_cores=$(awk -v a="$farm_before" -v b="$farm_after" -v hz="$ticks_per_sec" -v w="$wall" \
    'BEGIN { printf "%.3f", (b - a) / hz / w }')
  rss_mb=$(awk -v k="$rss_kb" 'BEGIN { printf "%.1f", k / 1024 }')
  status=ok
  if (( code != 0 )) || (( trials != expected )) || (( hosts != n )) || (( distinct != n )); then
    status="FAILED (exit $code, $hosts hosts, $distinct hostnames)"
    failed=1
    echo "quietbench run over $n agents failed; the end of its output:" >&2
    tail -n 15 "$reports/run-$n.log" >&2
  fi
  rows+=("$n $wall $trials/$expected $cores $peak_cores $rss_mb $farm_cores $status")
  printf '%6s agents: %7.1f s, %s trials, controller %s cores (peak %s s: %s), peak RSS %s MB, farm %s cores: %s\n' \
    "$n" "$wall" "$trials/$expected" "$cores" "$window" "$peak_cores" "$rss_mb" "$farm_cores" "$status"
done

echo
printf '%-7s %8s %9s %17s %15s %12s %11s  %s\n' agents "wall s" trials "controller cores" "peak ${window}s cores" "peak RSS MB" "farm cores" status
for row in "${rows[@]}"; do
  read -r n wall trials cores peak rss farm_cores status <<< "$row"
  printf '%-7s %8.1f %9s %17s %15s %12s %11s  %s\n' "$n" "$wall" "$trials" "$cores" "$peak" "$rss" "$farm_cores" "$status"
done
echo
goal="goal: $goal_agents agents at <= $goal_cores core and <= $goal_rss_mb MB RSS"
verdict="not measured (add $goal_agents to SIZES)"
for row in "${rows[@]}"; do
  read -r n _ _ cores peak rss _ status <<< "$row"
  [[ $n == "$goal_agents" ]] || continue
  # The mean share judges; the peak window is shown beside it for the steady state.
  if [[ $status != ok ]]; then
    verdict="not met (the run failed)"
  elif awk -v c="$cores" -v r="$rss" -v gc="$goal_cores" -v gr="$goal_rss_mb" 'BEGIN { exit !(c <= gc && r <= gr) }'; then
    verdict="met ($cores cores, peak ${window}s $peak, $rss MB)"
  else
    verdict="not met ($cores cores, peak ${window}s $peak, $rss MB)"
  fi
done
echo "$goal: $verdict"
exit "$failed"
