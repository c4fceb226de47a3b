#!/usr/bin/env bash
# Hosts measure at once: the wall time of one run on 1 agent and on N agents (default 4), each
# agent a real `quietbench agent` on loopback. Trials are time-bounded (--duration), so with hosts
# running concurrently the N-agent run should take about as long as the 1-agent run; run one
# after another (as before the fleet work) it would take N times as long.
#
#   benches/fleet/hosts_at_once.sh [N] [ROUNDS] [DURATION_S]
#
# Prints each run's wall time, trials stored and the ratio N-agent / 1-agent.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-4}
ROUNDS=${2:-3}
DURATION=${3:-2}
cargo build --release -q -p quietbench
Q=target/release/quietbench
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
agents=()
for i in $(seq 1 "$N"); do
  "$Q" agent --listen 127.0.0.1:0 >"$work/agent$i.txt" 2>/dev/null &
  pids+=($!)
done
for i in $(seq 1 "$N"); do
  for _ in $(seq 1 100); do [ -s "$work/agent$i.txt" ] && break; sleep 0.05; done
  agents+=("$(awk '{print $NF}' "$work/agent$i.txt")")
done

run() { # $1: how many agents
  local args=()
  for a in "${agents[@]:0:$1}"; do args+=(--agent "$a"); done
  local start end
  start=$(date +%s.%N)
  "$Q" run "${args[@]}" --rounds "$ROUNDS" --duration "$DURATION" --no-store \
    --json "$work/run$1.json" >/dev/null 2>&1
  end=$(date +%s.%N)
  local trials
  trials=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['trials']))" "$work/run$1.json")
  echo "$1 $(echo "$end - $start" | bc) $trials"
}
read -r _ one t1 < <(run 1)
read -r _ many tn < <(run "$N")
printf '1 agent:   %6.2f s wall, %d trials stored\n' "$one" "$t1"
printf '%d agents:  %6.2f s wall, %d trials stored\n' "$N" "$many" "$tn"
printf 'ratio %d-agent / 1-agent wall time: %.2f (one after another would be %d)\n' \
  "$N" "$(echo "$many / $one" | bc -l)" "$N"
