#!/usr/bin/env bash
# The crash-safety of host tuning, repeated: N times, start an agent, tune it (system-wide ASLR
# off and IRQ affinities steered off the last CPU), SIGKILL the agent, start a new one on the
# same state directory, and check that ASLR and every IRQ affinity read exactly as before.
# Prints the count restored. Changes this machine (and puts it back): needs root.
#
# Usage: sudo benches/fault/sigkill_restore.sh [N=20]
set -euo pipefail
n=${1:-20}
[ "$(id -u)" = 0 ] || { echo "error: needs root (it changes ASLR and IRQ affinities)" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
agent_pid=
cleanup() { [ -n "$agent_pid" ] && kill -9 "$agent_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

snapshot() {
  { echo "aslr $(cat /proc/sys/kernel/randomize_va_space)"
    for f in /proc/irq/*/smp_affinity_list; do echo "$f $(cat "$f")"; done; } > "$1"
}

start_agent() {
  : > "$work/agent.out"
  QUIETBENCH_LOG=warn "$qb" agent --listen 127.0.0.1:0 --state-dir "$work/state" > "$work/agent.out" 2>>"$work/agent.err" &
  agent_pid=$!
  for _ in $(seq 1 200); do
    grep -q listening "$work/agent.out" && break
    sleep 0.05
  done
  addr=$(awk '/listening/ {print $NF}' "$work/agent.out")
  [ -n "$addr" ] || { echo "error: the agent did not start: $(cat "$work/agent.err")" >&2; exit 1; }
}

cpu=$(( $(nproc) - 1 ))
snapshot "$work/before"
restored=0
for i in $(seq 1 "$n"); do
  start_agent
  "$qb" tune --agent "$addr" --aslr-off --steer-irqs --cpus "$cpu" > "$work/tune.out"
  snapshot "$work/tuned"
  if cmp -s "$work/before" "$work/tuned"; then
    echo "run $i: tune changed nothing: $(cat "$work/tune.out")" >&2; exit 1
  fi
  kill -9 "$agent_pid"; wait "$agent_pid" 2>/dev/null || true
  start_agent   # restores the orphaned journal before it listens
  snapshot "$work/after"
  kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=
  if cmp -s "$work/before" "$work/after"; then
    restored=$((restored + 1))
  else
    echo "run $i: NOT restored:"; diff "$work/before" "$work/after" || true
  fi
done
echo "SIGKILL after tune, then restart: $restored of $n restored every value"
[ "$restored" = "$n" ]
