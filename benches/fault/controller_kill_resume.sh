#!/usr/bin/env bash
# The controller's crash-safety, repeated: N times, start three agents on loopback, run 6
# rounds of 1 s on them at once, SIGKILL the controller after a random number (1..12) of its 18
# trials are stored (the last rounds' trials end together, so later may find it finished), `resume` the run, and check that every (host, round) was measured exactly once and
# no trial stored before the kill was run again. Prints the count that held and the trials lost
# or repeated in all (both must be 0).
#
# Usage: benches/fault/controller_kill_resume.sh [N=20]
set -euo pipefail
n=${1:-20}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

agents=()
for i in 1 2 3; do
  QUIETBENCH_LOG=warn "$qb" agent --listen 127.0.0.1:0 --state-dir "$work/state$i" > "$work/agent$i.out" 2>"$work/agent$i.err" &
  pids+=($!)
  for _ in $(seq 1 200); do grep -q listening "$work/agent$i.out" && break; sleep 0.05; done
  agents+=(--agent "$(awk '/listening/ {print $NF}' "$work/agent$i.out")")
done

held=0 lost=0 repeated=0
for i in $(seq 1 "$n"); do
  db="$work/run$i.sqlite3" json="$work/live$i.json"
  kill_after=$(( (RANDOM % 12) + 1 ))
  "$qb" run "${agents[@]}" --rounds 6 --duration 1 --db "$db" --json "$json" > /dev/null 2>&1 &
  controller=$!
  # Each stored trial has one "trial_id" in the live report (rewritten whole after each).
  until [ "$(grep -o '"trial_id"' "$json" 2>/dev/null | wc -l)" -ge "$kill_after" ]; do
    kill -0 "$controller" 2>/dev/null || { echo "run $i: the run ended before the kill" >&2; exit 1; }
    sleep 0.05
  done
  kill -9 "$controller" 2>/dev/null || { echo "run $i: the run ended before the kill" >&2; exit 1; }
  wait "$controller" 2>/dev/null || true
  run_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$json")
  "$qb" show "$run_id" --db "$db" --json "$work/before.json" > /dev/null 2>&1
  "$qb" resume "$run_id" --db "$db" > /dev/null 2>"$work/resume.err" || { echo "run $i: resume failed: $(cat "$work/resume.err")" >&2; exit 1; }
  "$qb" show "$run_id" --db "$db" --json "$work/after.json" > /dev/null 2>&1
  read -r l r stored <<<"$(python3 - "$work/before.json" "$work/after.json" <<'PY'
import collections, json, sys
before = json.load(open(sys.argv[1]))["trials"]
after = json.load(open(sys.argv[2]))["trials"]
ids = {t["trial_id"] for t in after}
lost = sum(1 for t in before if t["trial_id"] not in ids)
count = collections.Counter((t["host"], t["round"]) for t in after)
planned = {(h, r) for h in {t["host"] for t in after} for r in range(1, 7)}
repeated = sum(c - 1 for c in count.values()) + len(planned - set(count)) + (3 - len({t["host"] for t in after}))
print(lost, repeated, len(before))
PY
)"
  lost=$((lost + l)) repeated=$((repeated + r))
  if [ "$l" = 0 ] && [ "$r" = 0 ]; then held=$((held + 1)); else echo "run $i: lost $l, repeated or missing $r"; fi
  echo "run $i: killed after $stored stored trials; resumed to 18: lost $l, repeated or missing $r"
done
echo "controller SIGKILLed mid-run on 3 hosts, then resumed: $held of $n complete; $lost trials lost, $repeated repeated or missing"
[ "$held" = "$n" ]
