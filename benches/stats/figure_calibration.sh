#!/usr/bin/env bash
# Calibration of `compare`'s figures and designs on this machine: for one way of taking turns
# (back-to-back pairs, or a duet at the same time on two CPUs), N A/A comparisons of the same
# CPU-bound command (how many call a difference?), N comparisons with B doing EFFECT more work
# (how many detect it?), and the smallest difference detectable in a fixed time budget. Every
# run is judged on the wall-time figure and, from the same trials, on the CPU-time figure (the
# JSON's other_figures), so one batch calibrates both.
#
# Usage: benches/stats/figure_calibration.sh INTERLEAVE [N=20] [ROUNDS=30] [TRIAL_SECS=1]
#        [BUDGET_SECS=120 (0: none)] [EFFECT=0.02] [CPUS]
#   INTERLEAVE: invocations | duet;  CPUS: compare's --cpus (e.g. 2,4 for a duet), optional
# Environment: QB=path to a built quietbench (default: build the release binary here).
# Needs: python3.
set -euo pipefail
interleave=${1:?give invocations or duet}
n=${2:-20}
rounds=${3:-30}
secs=${4:-1}
budget=${5:-120}
effect=${6:-0.02}
cpus=${7:-}

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QB:-}" ]; then
  cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
  QB="$repo/target/release/quietbench"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu_args=()
[ -n "$cpus" ] && cpu_args=(--cpus "$cpus")

spin() { echo "i=0; while [ \$i -lt $1 ]; do i=\$((i+1)); done"; }
base=$(spin 40000)

run_compare() { # $1=A $2=B $3=json [$4...=extra]
  local a=$1 b=$2 json=$3
  shift 3
  "$QB" compare --local --shell --no-store --warmup 2 --duration "$secs" \
    --interleave "$interleave" "${cpu_args[@]}" --a "$a" --b "$b" --json "$json" "$@" \
    >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
}

# One line per run: the wall figure's verdict and the CPU figure's.
summary() {
  python3 - "$1" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
cpu = next(o for o in v["other_figures"] if o["figure"] == "cpu")
print(f'wall {v["verdict"]:<13} {v["ratio"]:.4f} [{v["ci_low"]:.4f}, {v["ci_high"]:.4f}] MDE {v["mde"]*100:.2f}%   '
      f'cpu {cpu["verdict"]:<13} {cpu["ratio"]:.4f} [{cpu["ci_low"]:.4f}, {cpu["ci_high"]:.4f}] MDE {cpu["mde"]*100:.2f}%')
PY
}

# B must take EFFECT longer than A, not merely loop EFFECT more: starting the shell is a fixed
# cost that does not grow with the loop. Measure it (spin 0 against spin 40000) and add the
# iterations that make up for it: T0 + nB*k = (1+e) * (T0 + 40000*k).
run_compare "$(spin 0)" "$base" "$work/cal.json" --rounds 20
r=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ratio"])' "$work/cal.json")
iters=$(python3 -c "print(round(40000 * (1 + $effect) + $effect * 40000 / ($r - 1)))")
slower=$(spin "$iters")
echo "interleave=$interleave rounds=$rounds trial=${secs}s cpus=${cpus:-placement}"
echo "calibration: spin 40000 takes $r x the shell's start-up alone, so B loops $iters times to take $effect more"

echo "A/A: $n comparisons of the same command"
for i in $(seq 1 "$n"); do
  run_compare "$base" "$base" "$work/aa$i.json" --rounds "$rounds"
  printf '  %2d: %s\n' "$i" "$(summary "$work/aa$i.json")"
done
echo "A/B: $n comparisons, B does $effect more work"
for i in $(seq 1 "$n"); do
  run_compare "$base" "$slower" "$work/ab$i.json" --rounds "$rounds"
  printf '  %2d: %s\n' "$i" "$(summary "$work/ab$i.json")"
done
python3 - "$work" "$n" "$effect" <<'PY'
import json, sys
work, n, effect = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def load(kind, i):
    v = json.load(open(f"{work}/{kind}{i}.json"))
    cpu = next(o for o in v["other_figures"] if o["figure"] == "cpu")
    return {"wall": v, "cpu": cpu}
for fig in ("wall", "cpu"):
    aa = [load("aa", i)[fig] for i in range(1, n + 1)]
    ab = [load("ab", i)[fig] for i in range(1, n + 1)]
    fp = sum(v["verdict"] != "no_difference" for v in aa)
    det = sum(v["verdict"] == "a_faster" for v in ab)
    cover = sum(v["ci_low"] <= 1 + effect <= v["ci_high"] for v in ab)
    mde = sorted(v["mde"] for v in aa)[n // 2]
    print(f"{fig}: A/A false positives {fp}/{n}; {effect*100:.0f}% detected {det}/{n}, "
          f"interval covers it {cover}/{n}; median MDE {mde*100:.2f}%")
PY

[ "$budget" = 0 ] && exit 0  # BUDGET_SECS=0: no budget run (parallel batches run it once)
echo "MDE in a ${budget}s budget (A/A)"
run_compare "$base" "$base" "$work/budget.json" --rounds 100000 --budget "$budget"
echo "  $(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v["rounds"], "rounds")' "$work/budget.json"): $(summary "$work/budget.json")"
