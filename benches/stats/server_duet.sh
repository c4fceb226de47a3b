#!/usr/bin/env bash
# Does running two servers in duet narrow the interval, against alternating trials? N A/A
# comparisons of one server build with itself in each mode, the modes interleaved run by run
# so that the machine's moods fall on both: `compare --probe http` with `--interleave trials`
# (A and B in separate trials, a fresh random order every round) and `--interleave duet` (both
# at once on their own CPUs, the load alternating between them). Prints each run's verdict,
# B/A, interval and MDE, then per mode: how many called a difference (the false-positive
# rate), the median MDE and the median wall time of a run.
#
# The server is the tests' testserver with a known CPU cost per request (--work, a fixed integer
# loop) and a sleep (--delay-us), at RATE requests/s on 4 connections. NOISE=1 adds the tests'
# seeded bursty noise injector (busy spells of 100-500 ms at a 30% duty on every CPU), the
# bursty host of issue 28.
#
# Usage: benches/stats/server_duet.sh [N=20] [ROUNDS=10] [TRIAL_SECS=1] [RATE=200] [WORK=20000]
# Environment: NOISE=1; QUIETBENCH, TESTSERVER, NOISE_BIN (binaries; default: release builds
# made first). Needs: python3.
set -euo pipefail
n=${1:-20}
rounds=${2:-10}
secs=${3:-1}
rate=${4:-200}
work_iters=${5:-20000}

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QUIETBENCH:-}" ] || [ -z "${TESTSERVER:-}" ] || [ -z "${NOISE_BIN:-}" ]; then
  cargo build --release --quiet -p quietbench -p quietbench-tests --bin quietbench \
    --bin testserver --bin noise --manifest-path "$repo/Cargo.toml"
fi
qb=${QUIETBENCH:-$repo/target/release/quietbench}
server=${TESTSERVER:-$repo/target/release/testserver}
noise_bin=${NOISE_BIN:-$repo/target/release/noise}
work=$(mktemp -d)
noise_pid=
cleanup() {
  [ -n "$noise_pid" ] && { kill "$noise_pid" 2>/dev/null || true; wait "$noise_pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

if [ "${NOISE:-0}" = 1 ]; then
  cpus=$(( $(nproc) - 1 ))
  "$noise_bin" --cpu-hog "0-$cpus" --duty 0.3 --spell-ms 100-500 --seed 28 &
  noise_pid=$!
  echo "noise: busy spells of 100-500 ms at a 30% duty on CPUs 0-$cpus (seed 28)"
fi

cmd="$server --port {port} --work $work_iters --delay-us 500"
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v[sys.argv[2]])' "$1" "$2"; }

# run MODE I: one A/A comparison; prints its line and appends "verdict mde seconds" to MODE.txt.
run() {
  local mode=$1 i=$2 json="$work/$1-$2.json" start end
  start=$(date +%s.%N)
  "$qb" compare --local --probe http --interleave "$mode" --no-store --seed "$i" \
    --rounds "$rounds" --warmup 1 --duration "$secs" \
    --param "rate=$rate" --param connections=4 --param max_lag_ms=1000 \
    --a "$cmd" --b "$cmd" --json "$json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  end=$(date +%s.%N)
  local v ratio lo hi mde wall
  v=$(field "$json" verdict); ratio=$(field "$json" ratio); mde=$(field "$json" mde)
  lo=$(field "$json" ci_low); hi=$(field "$json" ci_high)
  wall=$(python3 -c "print(f'{$end - $start:.0f}')")
  printf '  %-6s %2d: %-14s B/A %.4f  CI [%.4f, %.4f]  MDE %.2f%%  %ss\n' "$mode" "$i" "$v" "$ratio" "$lo" "$hi" \
    "$(python3 -c "print($mde * 100)")" "$wall"
  echo "$v $mde $wall" >> "$work/$mode.txt"
}

echo "A/A, $n runs per mode: testserver --work $work_iters --delay-us 500 at $rate requests/s, $rounds rounds x ${secs}s, on $(nproc) CPUs"
for i in $(seq 1 "$n"); do
  if [ $((i % 2)) = 1 ]; then run trials "$i"; run duet "$i"; else run duet "$i"; run trials "$i"; fi
done

echo
for mode in trials duet; do
  python3 - "$work/$mode.txt" "$mode" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
called = sum(1 for v, _, _ in rows if v != "no_difference")
mdes = [float(m) * 100 for _, m, _ in rows]
walls = [float(w) for _, _, w in rows]
print(f"{sys.argv[2]:>6}: {called} of {len(rows)} A/A runs called a difference; "
      f"MDE median {statistics.median(mdes):.2f}% (range {min(mdes):.2f}-{max(mdes):.2f}%); "
      f"a run takes {statistics.median(walls):.0f} s (median)")
PY
done
