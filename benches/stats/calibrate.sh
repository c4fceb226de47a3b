#!/usr/bin/env bash
# Does `compare` keep its verdicts on a bursty host (issue 28)? For each way of taking turns
# (--interleave invocations, trials, duet) and each kind of noise (quiet; cpu: the seeded bursty
# injector tests/src/bin/noise.rs busy on every CPU in random spells, 30% of the time), RUNS
# A/A comparisons of the same CPU-bound command, each in a fixed time budget. The table says how
# many 95% intervals excluded 1 (false positives: a calibrated test has about 1 in 20) and the
# median MDE. DIFF=1 makes B loop 2% more (its time grows a little less than 2%: the shell's
# start-up does not grow with the loop) and the table gives the detection rate instead.
#
# Takes RUNS x modes x noises x BUDGET seconds plus a few seconds a run: with the defaults
# 5 x 3 x 2 x 20 s, about 11 minutes. A verdict needs 5 rounds after compare's 2 warm-up rounds:
# BUDGET 10 is about the least for invocations (a round is one 1 s trial), 15 for trials (two). Its figures, with the machine and the date, belong in
# docs/statistics.md (beside §1b's calibration).
#
# Every figure the report prints is counted: the verdict's (FIGURE: median, the default, or
# mean; a duet refuses mean and is skipped for it) and the one printed beside it (cpu). NOISES
# may also name memory: the injector's memory hog (256 MiB streamed, unpinned) in spells 30% of
# the time; and throttle: compare (with its agent and the commands) runs in a cgroup of its own
# whose CPU cap (v2 cpu.max, or v1 cpu.cfs_quota_us) the injector sets to 25% of all CPUs in
# spells 30% of the time, as a cloud instance out of CPU credits or a container at its quota
# is (needs root; the cgroup is made and removed here).
#
# Usage: [RUNS=5] [BUDGET=20] [MODES="invocations trials duet"] [NOISES="quiet cpu" (or memory, throttle)]
#        [FIGURE=median|mean] [DIFF=0|1] [FIRST=1] benches/stats/calibrate.sh
# KEEP=DIR keeps every run's JSON verdict there. FIRST=K numbers the runs (and seeds the injector
# and compare) from K instead of 1, so that a cell of 20 runs can be grown to 40 with FIRST=21.
# Environment: QB, NOISE_BIN = built quietbench and noise binaries (default: target/release/
# quietbench and target/debug/noise, built if missing); TRIAL_SECS = compare's --duration (1).
# Needs: python3.
set -euo pipefail
runs=${RUNS:-5}
budget=${BUDGET:-20}
modes=${MODES:-invocations trials duet}
noises=${NOISES:-quiet cpu}
figure=${FIGURE:-median}
diff=${DIFF:-0}
first=${FIRST:-1}
case $first in '' | *[!0-9]* | 0*) echo "calibrate: FIRST must be a run number from 1 (got '$first')" >&2; exit 2 ;; esac
case $figure in median | mean) ;; *) echo "calibrate: unknown FIGURE '$figure' (median or mean)" >&2; exit 2 ;; esac
if [ "$figure" = mean ]; then
  # A duet's two sides share one invocation rate: compare refuses --figure mean there.
  kept=
  for mode in $modes; do [ "$mode" = duet ] || kept+="$mode "; done
  modes=${kept% }
fi
secs=${TRIAL_SECS:-1}
for noise in $noises; do
  case $noise in quiet | cpu | memory | throttle) ;; *) echo "calibrate: unknown noise '$noise' (quiet, cpu, memory or throttle)" >&2; exit 2 ;; esac
done

# throttle's cgroup: v2 where the unified hierarchy is mounted at /sys/fs/cgroup, else v1's cpu
# controller.
cgroup=
if [[ " $noises " == *" throttle "* ]]; then
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cgroup=/sys/fs/cgroup/qb-calibrate-$$
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
  elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_period_us ]; then
    cgroup=/sys/fs/cgroup/cpu/qb-calibrate-$$
  else
    echo "calibrate: throttle needs a cgroup with a CPU cap (v2, or v1's cpu controller); none is mounted" >&2
    exit 2
  fi
  mkdir "$cgroup"
fi

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QB:-}" ]; then
  QB="$repo/target/release/quietbench"
  [ -x "$QB" ] || cargo build --release --bin quietbench --manifest-path "$repo/Cargo.toml"
fi
if [ -z "${NOISE_BIN:-}" ]; then
  # Debug is enough: a busy loop keeps a CPU as busy at any optimization level.
  NOISE_BIN="$repo/target/debug/noise"
  [ -x "$NOISE_BIN" ] || cargo build -p quietbench-tests --bin noise --manifest-path "$repo/Cargo.toml"
fi

# The CPU hogs go on every CPU this script may use (the ones compare --local measures on).
cpus=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')

work=$(mktemp -d)
injector=
cleanup() {
  # The injector of an interrupted run: stopped with SIGTERM, so it ends its spells cleanly.
  if [ -n "$injector" ]; then
    kill -TERM "$injector" 2>/dev/null || true
    wait "$injector" 2>/dev/null || true
  fi
  # Empty once compare has ended: its processes were the only ones put there.
  if [ -n "$cgroup" ]; then rmdir "$cgroup" 2>/dev/null || echo "calibrate: could not remove $cgroup" >&2; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every command as it ran, quoted for a shell, for the reader to repeat (in an empty directory:
# the JSON reports are written to the current one).
quote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
line() {
  local out= arg
  for arg in "$@"; do out+="$(quote "$arg") "; done
  printf '%s' "${out% }"
}

loops=40000
spin() { echo "i=0; while [ \$i -lt $1 ]; do i=\$((i+1)); done"; }
a=$(spin "$loops")
if [ "$diff" = 1 ]; then b=$(spin $((loops * 102 / 100))); else b=$a; fi

echo "calibrate: RUNS=$runs FIRST=$first BUDGET=${budget}s TRIAL_SECS=$secs MODES=\"$modes\" NOISES=\"$noises\" FIGURE=$figure DIFF=$diff" \
  "(A: $loops loops, B: $( [ "$diff" = 1 ] && echo "$((loops * 102 / 100)) loops" || echo "the same"))"
for mode in $modes; do
  for noise in $noises; do
    for i in $(seq "$first" $((first + runs - 1))); do
      json="$mode-$noise-$i.json"
      log="$work/noise-$mode-$i.log"
      : >"$log"
      if [ "$noise" != quiet ]; then
        case $noise in
          cpu) cmd=("$NOISE_BIN" --cpu-hog "$cpus" --duty 0.3 --seed "$i") ;;
          memory) cmd=("$NOISE_BIN" --memory-hog 256 --duty 0.3 --seed "$i") ;;
          throttle) cmd=("$NOISE_BIN" --cpu-max 25 --cgroup "$cgroup" --duty 0.3 --seed "$i") ;;
        esac
        echo "$(line "${cmd[@]}") &" >>"$work/commands"
        "${cmd[@]}" 2>"$log" &
        injector=$!
      fi
      cmd=("$QB" compare --local --shell --no-store --rounds 100000 --budget "$budget"
        --duration "$secs" --interleave "$mode" --figure "$figure" --seed "$i" --a "$a" --b "$b"
        --json "$json")
      if [ "$noise" = throttle ]; then
        # compare, its agent and the commands, all in the throttled cgroup (children inherit it).
        cmd=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cgroup" "${cmd[@]}")
      fi
      line "${cmd[@]}" >>"$work/commands"
      echo >>"$work/commands"
      if ! (cd "$work" && "${cmd[@]}" >/dev/null 2>"$work/err"); then
        echo "calibrate: compare failed ($mode, $noise, run $i):" >&2
        cat "$work/err" >&2
        exit 1
      fi
      if [ -n "$injector" ]; then
        # Gone already means it failed: its log says why.
        kill -TERM "$injector" 2>/dev/null || true
        if ! wait "$injector"; then
          injector=
          echo "calibrate: the noise injector failed ($mode, run $i):" >&2
          cat "$log" >&2
          exit 1
        fi
        injector=
        echo 'kill -TERM $!' >>"$work/commands"
      fi
      python3 - "$work/$json" "$mode" "$noise" "$i" "$log" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
# The injector's last line: the time each hog was actually on.
on = open(sys.argv[5]).read().strip().splitlines()[-1:]
on = "; " + on[0].split("; ", 1)[-1] if on else ""
others = "".join(f'; {o["figure"]} {o["ratio"]:.4f} [{o["ci_low"]:.4f}, {o["ci_high"]:.4f}], '
                 f'MDE {o["mde"]*100:.2f}%' for o in v.get("other_figures", []))
print(f'  {sys.argv[2]:<11} {sys.argv[3]:<8} run {sys.argv[4]}: {v["figure"]} B/A {v["ratio"]:.4f} '
      f'[{v["ci_low"]:.4f}, {v["ci_high"]:.4f}], MDE {v["mde"]*100:.2f}%{others}, {v["rounds"]} rounds{on}')
PY
    done
  done
done

echo
if [ -n "${KEEP:-}" ]; then
  # The verdicts themselves, for a reader who wants more than the table.
  mkdir -p "$KEEP" && cp "$work"/*.json "$KEEP"/
  echo "calibrate: the verdicts (JSON) are in $KEEP"
fi
python3 - "$work" "$runs" "$diff" "$modes" "$noises" "$first" <<'PY'
import json, statistics, sys
work, runs, diff, first = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[6])
# A/A: any interval that excludes 1 is a false positive. DIFF: B is slower, so a detection is
# an interval wholly above 1. One row per printed figure: the verdict's, then each one printed
# beside it (other_figures), each with its own interval.
head = "detected (CI > 1)" if diff else "false positives (CI excludes 1)"
print(f'{"mode":<12} {"noise":<8} {"figure":<7} {"runs":>4}  {head:<31} {"median MDE":>10}  {"median B/A":>10}  {"rounds":>6}')
for mode in sys.argv[4].split():
    for noise in sys.argv[5].split():
        v = [json.load(open(f"{work}/{mode}-{noise}-{i}.json")) for i in range(first, first + runs)]
        figures = [[r] + [o for o in r.get("other_figures", [])] for r in v]
        for k in range(min(len(f) for f in figures)):
            rows = [f[k] for f in figures]
            name = rows[0]["figure"]
            if diff:
                hits = sum(r["ci_low"] > 1 for r in rows)
            else:
                hits = sum(r["ci_low"] > 1 or r["ci_high"] < 1 for r in rows)
            mde = statistics.median(r["mde"] for r in rows) * 100
            ratio = statistics.median(r["ratio"] for r in rows)
            rounds = statistics.median(r["rounds"] for r in v)
            print(f'{mode:<12} {noise:<8} {name:<7} {runs:>4}  {f"{hits} of {runs}":<31} {mde:>9.2f}%  {ratio:>10.4f}  {rounds:>6g}')
PY

echo
echo "commands run:"
sed 's/^/  /' "$work/commands"
