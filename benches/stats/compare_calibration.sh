#!/usr/bin/env bash
# Is `quietbench compare` calibrated on this machine? N A/A comparisons of the same CPU-bound
# command (how many call a difference?), N comparisons with B doing 3% more work (how many
# detect it, with the interval covering 3%?), and the smallest difference `compare` can detect
# in a fixed time budget, next to what hyperfine claims from the same budget.
#
# Usage: benches/stats/compare_calibration.sh [N=20] [ROUNDS=30] [TRIAL_SECS=1] [BUDGET_SECS=120]
# (ROUNDS and TRIAL_SECS default to `compare`'s own defaults)
# Needs: python3; hyperfine for the last part (Debian: apt-get install hyperfine).
set -euo pipefail
n=${1:-20}
rounds=${2:-30}
secs=${3:-1}
budget=${4:-120}

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

spin() { echo "i=0; while [ \$i -lt $1 ]; do i=\$((i+1)); done"; }
base=$(spin 40000)

field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v[sys.argv[2]])' "$1" "$2"; }

run_compare() { # $1=A $2=B $3=json
  "$qb" compare --local --shell --no-store --rounds "$rounds" --warmup 2 --duration "$secs" \
    --a "$1" --b "$2" --json "$3" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
}

# B must take 3% longer than A, not merely loop 3% more: starting the shell is a fixed cost
# that does not grow with the loop. Measure it (spin 0 against spin 40000) and add the
# iterations that make up for it: T0 + nB*k = 1.03 * (T0 + 40000*k).
"$qb" compare --local --shell --no-store --rounds 20 --warmup 2 --duration "$secs" \
  --a "$(spin 0)" --b "$base" --json "$work/cal.json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
r=$(field "$work/cal.json" ratio)
iters=$(python3 -c "print(round(41200 + 0.03 * 40000 / ($r - 1)))")
slower=$(spin "$iters")
echo "calibration: spin 40000 takes $r x the shell's start-up alone, so B loops $iters times to take 3.0% longer"

echo "A/A: $n comparisons of the same command ($rounds rounds x ${secs}s per trial)"
false_pos=0
for i in $(seq 1 "$n"); do
  run_compare "$base" "$base" "$work/aa$i.json"
  v=$(field "$work/aa$i.json" verdict)
  [ "$v" = no_difference ] || false_pos=$((false_pos + 1))
  printf '  %2d: %-14s ratio %s  CI [%s, %s]  MDE %s\n' "$i" "$v" "$(field "$work/aa$i.json" ratio)" \
    "$(field "$work/aa$i.json" ci_low)" "$(field "$work/aa$i.json" ci_high)" "$(field "$work/aa$i.json" mde)"
done
echo "A/A: $false_pos of $n called a difference (a calibrated 5% test stays at <= 2 in 92% of batches of 20)"

echo "A/B: $n comparisons, B does 3% more work"
detected=0; covered=0
for i in $(seq 1 "$n"); do
  run_compare "$base" "$slower" "$work/ab$i.json"
  v=$(field "$work/ab$i.json" verdict)
  [ "$v" = a_faster ] && detected=$((detected + 1))
  lo=$(field "$work/ab$i.json" ci_low); hi=$(field "$work/ab$i.json" ci_high)
  python3 -c "import sys; sys.exit(0 if $lo <= 1.03 <= $hi else 1)" && covered=$((covered + 1))
  printf '  %2d: %-14s ratio %s  CI [%s, %s]\n' "$i" "$v" "$(field "$work/ab$i.json" ratio)" "$lo" "$hi"
done
echo "A/B 3%: detected in $detected of $n; interval covers 1.03 in $covered of $n"

echo "MDE in a ${budget}s budget"
"$qb" compare --local --shell --no-store --rounds 100000 --warmup 2 --duration "$secs" --budget "$budget" \
  --a "$base" --b "$base" --json "$work/budget.json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
echo "  quietbench compare: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sentence"].splitlines()[0])' "$work/budget.json")"
if command -v hyperfine >/dev/null; then
  # The same budget for hyperfine: as many runs of each as fit in it.
  hyperfine --runs 5 --export-json "$work/probe.json" "sh -c '$base'" >/dev/null 2>&1
  one=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"])' "$work/probe.json")
  runs=$(python3 -c "print(max(2, int($budget / 2 / $one)))")
  hyperfine --runs "$runs" --export-json "$work/hf.json" "sh -c '$base'" "sh -c '$base'" >/dev/null 2>&1
  python3 - "$work/hf.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))["results"]
a, b = r[0], r[1]
ratio = b["mean"] / a["mean"]
# hyperfine's own "x ± y times faster": propagated standard deviations of the two means' runs.
err = ratio * math.sqrt((a["stddev"] / a["mean"]) ** 2 + (b["stddev"] / b["mean"]) ** 2)
print(f"  hyperfine ({len(a['times'])} runs each): B/A = {ratio:.4f} ± {err:.4f}, i.e. it claims ±{err*100:.1f}% "
      f"from the same budget, with no statement of what it could have missed")
PY
else
  echo "  hyperfine is not installed (apt-get install hyperfine): skipped that comparison"
fi
