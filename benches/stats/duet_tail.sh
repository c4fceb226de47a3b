#!/usr/bin/env bash
# Where does a duet's wall figure read a known difference too large? (docs/statistics.md §1c:
# with B looping 2% more, the duet's wall figure read +2.11% where its cpu figure and pairs'
# read +1.9%.) In a duet the longer command runs alone at the end of each pair (its "tail")
# while the shorter one's side has ended and waits at the meeting. The excess, wall log B/A minus
# cpu log B/A of the same run, tells two explanations apart:
#   - a fixed cost that lands in the longer side's wall time once a pair (the shorter side's
#     exit, its reaping, its thread going to sleep) adds the same microseconds whatever the
#     commands' length: the excess in percent shrinks as the commands grow (LOOPS x4: excess /4)
#     and stays the same when the difference grows (PCT 2 -> 4);
#   - a tail that runs slower than the overlap (or is stolen from) grows with the tail: the
#     excess stays when the commands grow, doubles when the difference doubles.
# Pairs (--interleave invocations) of the same commands are the reference: no tail.
#
# Usage: [RUNS=20] [BUDGET=10] [TRIAL_SECS=0.5] [VARIANTS="duet:40000:2 duet:40000:4
#        duet:160000:2 invocations:40000:2"] benches/stats/duet_tail.sh
# A variant is MODE:LOOPS:PCT: A a shell loop of LOOPS, B of LOOPS * (100 + PCT) / 100.
# Takes RUNS x variants x (BUDGET + about 1) seconds: with the defaults about 15 minutes.
# Environment: QB = a built quietbench (default target/release/quietbench, built if missing).
# Needs: python3.
set -euo pipefail
runs=${RUNS:-20}
budget=${BUDGET:-10}
secs=${TRIAL_SECS:-0.5}
variants=${VARIANTS:-duet:40000:2 duet:40000:4 duet:160000:2 invocations:40000:2}
case $runs in '' | *[!0-9]* | 0*) echo "duet_tail: RUNS must be a number from 1 (got '$runs')" >&2; exit 2 ;; esac
for v in $variants; do
  if ! [[ $v =~ ^(duet|invocations):[1-9][0-9]*:[1-9][0-9]*$ ]]; then
    echo "duet_tail: a variant is MODE:LOOPS:PCT with MODE duet or invocations (got '$v')" >&2
    exit 2
  fi
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QB:-}" ]; then
  QB="$repo/target/release/quietbench"
  [ -x "$QB" ] || cargo build --release --bin quietbench --manifest-path "$repo/Cargo.toml"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Killed (SIGTERM, ^C): exit through the EXIT trap, so the temporary directory goes too.
trap 'exit 130' INT TERM

spin() { echo "i=0; while [ \$i -lt $1 ]; do i=\$((i+1)); done"; }
echo "duet_tail: RUNS=$runs BUDGET=${budget}s TRIAL_SECS=$secs VARIANTS=\"$variants\""
for v in $variants; do
  IFS=: read -r mode loops pct <<<"$v"
  a=$(spin "$loops")
  b=$(spin $((loops * (100 + pct) / 100)))
  # A's own time, to turn the excess into microseconds a pair (the report holds only ratios).
  python3 - "$v" "$a" <<'PY'
import statistics, subprocess, sys, time
t = []
for _ in range(7):
    s = time.perf_counter()
    subprocess.run(["sh", "-c", sys.argv[2]], check=True)
    t.append(time.perf_counter() - s)
print(f"  {sys.argv[1]:<22} A alone: {statistics.median(t) * 1e3:.2f} ms (median of 7)")
PY
  for i in $(seq 1 "$runs"); do
    json="$work/$mode-$loops-$pct-$i.json"
    if ! "$QB" compare --local --shell --no-store --rounds 100000 --budget "$budget" \
      --duration "$secs" --interleave "$mode" --seed "$i" --a "$a" --b "$b" --json "$json" \
      >/dev/null 2>"$work/err"; then
      echo "duet_tail: compare failed ($v, run $i):" >&2
      cat "$work/err" >&2
      exit 1
    fi
    python3 - "$json" "$v" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = next(o for o in r["other_figures"] if o["figure"] == "cpu")
print(f'  {sys.argv[2]:<22} run {sys.argv[3]}: wall B/A {r["ratio"]:.4f}, cpu B/A {cpu["ratio"]:.4f}, '
      f'{r["rounds"]} rounds')
PY
  done
done | tee "$work/lines"

echo
python3 - "$work/lines" <<'PY'
import math, re, statistics as st, sys
cells, a_ms = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\S+)\s+A alone: ([\d.]+) ms', line)
    if m:
        a_ms[m.group(1)] = float(m.group(2))
    m = re.match(r'\s+(\S+)\s+run \d+: wall B/A ([\d.]+), cpu B/A ([\d.]+)', line)
    if m:
        cells.setdefault(m.group(1), []).append((math.log(float(m.group(2))), math.log(float(m.group(3)))))
def mean_se(xs):
    return st.mean(xs) * 100, (st.stdev(xs) / math.sqrt(len(xs)) * 100 if len(xs) > 1 else float("nan"))
print(f'{"variant":<22} {"runs":>4}  {"wall log B/A (se)":<18} {"cpu log B/A (se)":<18} {"excess: wall - cpu (se)":<24} {"excess, us a pair":>17}')
for v, xs in cells.items():
    w, c, d = mean_se([x for x, _ in xs]), mean_se([y for _, y in xs]), mean_se([x - y for x, y in xs])
    print(f'{v:<22} {len(xs):>4}  {w[0]:+.2f}% ({w[1]:.2f}%){"":<4} {c[0]:+.2f}% ({c[1]:.2f}%){"":<4} {d[0]:+.3f}% ({d[1]:.3f}%){"":<5} {d[0] / 100 * a_ms.get(v, float("nan")) * 1e3:>+17.0f}')
PY
