#!/usr/bin/env bash
# What placement and host tuning buy: cpu.primes CV over N interleaved trials with the agent's
# placement plus --tune, against N unpinned trials without tuning (the scheduler decides where
# the probe runs). Then one N-round run that checks the read-back placement of every trial.
# Prints both CVs and their ratio, and the placement count.
#
# Usage: benches/peer/placement_cv.sh [N=20] [SECONDS=3]
# Needs: python3, and root for --tune (without root the tuned trials report every control as
# skipped, and the comparison is of placement alone).
set -euo pipefail
n=${1:-20}
seconds=${2:-3}

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

value() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["trials"][0]
rate = [m["value"] for m in t["metrics"] if m["name"] == "events_per_sec"][0]
noise = t.get("noise") or {}
wait = (noise.get("runqueue_wait_s") or 0) / max(noise.get("elapsed_s") or 1, 1e-9)
print(f'{rate} {noise.get("interrupts")} {wait:.5f}')
PY
}

echo "cpu.primes: $n interleaved pairs x ${seconds}s; placed+tuned vs unpinned"
for i in $(seq 1 "$n"); do
  for mode in $( ((i % 2)) && echo "placed unpinned" || echo "unpinned placed"); do
    if [ "$mode" = placed ]; then flags=(--tune); else flags=(--unpinned); fi
    "$qb" run --local --rounds 1 --duration "$seconds" "${flags[@]}" --json "$work/$mode.json" \
      >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    value "$work/$mode.json" >> "$work/$mode.values"
  done
  printf '  pair %2d: placed+tuned %s   unpinned %s  (events/s, interrupts on probe CPUs, run-queue wait share)\n' \
    "$i" "$(tail -1 "$work/placed.values")" "$(tail -1 "$work/unpinned.values")"
done

python3 - "$work/placed.values" "$work/unpinned.values" <<'PY'
import statistics, sys
def col(p, i): return [float(l.split()[i]) for l in open(p) if l.split()[i] != "None"]
p, u = col(sys.argv[1], 0), col(sys.argv[2], 0)
cv = lambda v: statistics.stdev(v) / statistics.mean(v) * 100
print(f"placed+tuned: median {statistics.median(p):9.2f} events/s  CV {cv(p):5.2f}%  median interrupts/trial {statistics.median(col(sys.argv[1], 1)):.0f}")
print(f"unpinned:     median {statistics.median(u):9.2f} events/s  CV {cv(u):5.2f}%  median interrupts/trial {statistics.median(col(sys.argv[2], 1)):.0f}")
print(f"CV ratio placed+tuned / unpinned: {cv(p) / cv(u):.2f}")
PY

"$qb" run --local --rounds "$n" --duration 1 --json "$work/rounds.json" >/dev/null 2>&1
python3 - "$work/rounds.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = sum(1 for t in r["trials"] if t["placement"]["matches_plan"])
print(f"read-back placement matched the plan in {ok} of {len(r['trials'])} trials")
for t in r["trials"]:
    if not t["placement"]["matches_plan"]:
        print("  mismatch:", t["trial_id"], t["placement"])
PY
