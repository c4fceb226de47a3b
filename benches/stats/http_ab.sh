#!/usr/bin/env bash
# Can `quietbench compare --probe http` tell two builds of a server apart when B does 2% more
# work per request, within a time budget (issue 29: 120 s on this 2-vCPU machine)? Runs REPS
# A/A and REPS A/B comparisons of the tests crate's test server (tests/src/bin/testserver.rs:
# `--work N` iterations of a fixed integer loop per request), alternating A/A and A/B, each
# stopped by `--budget BUDGET_SECS`, and prints per run the verdict on the p50 latency, the p99
# and server-CPU-per-request figures beside it, and the MDE of each; then how many A/A runs
# called a difference and how many A/B runs found B slower.
#
# The server runs on one CPU (placement's choice), the load agent on the other; the offered
# load is RATE requests/s in an open loop. WORK sets A's per-request cost; B's is
# round(1.02 * WORK). The script prints what A's work costs in CPU time per request, so the
# 2% can be read against the fixed costs of each request (the loopback, the parsing) that
# dilute it in the latency.
#
# Usage: benches/stats/http_ab.sh [REPS=2] [BUDGET_SECS=120] [RATE=500] [WORK=100000] [TRIAL_SECS=2]
# Environment: QUIETBENCH (a quietbench binary) and TESTSERVER (the test server): default,
# release builds made first.
# Needs: python3.
set -euo pipefail
reps=${1:-2}
budget=${2:-120}
rate=${3:-500}
work_a=${4:-100000}
secs=${5:-2}
work_b=$(python3 -c "print(round(1.02 * $work_a))")

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QUIETBENCH:-}" ] || [ -z "${TESTSERVER:-}" ]; then
  cargo build --release --quiet -p quietbench -p quietbench-tests --bin quietbench --bin testserver \
    --manifest-path "$repo/Cargo.toml"
fi
qb=${QUIETBENCH:-$repo/target/release/quietbench}
server=${TESTSERVER:-$repo/target/release/testserver}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap "exit 130" INT
trap "exit 143" TERM

run_compare() { # $1=B's work $2=json
  "$qb" compare --local --probe http --no-store --rounds 10000 --warmup 1 --duration "$secs" \
    --budget "$budget" --param rate="$rate" --param connections=8 --param warmup=0.2 \
    --a "$server --port {port} --work $work_a" --b "$server --port {port} --work $1" \
    --json "$2" >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err" >&2; exit 1; }
}

echo "A: testserver --work $work_a; B: --work $work_b (+2.0% work per request); $rate requests/s;"
echo "each comparison stopped after $budget s; trials of $secs s"
printf '%-4s %-3s %-14s %-26s %-8s %-24s %-24s %s\n' \
  run kind verdict "p50 B/A [95% CI]" "p50 MDE" "p99 B/A [95% CI]" "server-cpu B/A [95% CI]" "rounds"
results="$work/results.jsonl"
for i in $(seq 1 "$reps"); do
  for kind in AA AB; do
    b=$work_a; [ "$kind" = AB ] && b=$work_b
    run_compare "$b" "$work/$kind$i.json"
    python3 - "$work/$kind$i.json" "$i" "$kind" "$results" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
others = {o["figure"]: o for o in v["other_figures"]}
ci = lambda f: f"{f['ratio']:.4f} [{f['ci_low']:.4f}, {f['ci_high']:.4f}]"
cpu = others.get("server-cpu")
print(f"{sys.argv[2]:<4} {sys.argv[3]:<3} {v['verdict']:<14} {ci(v):<26} {v['mde']*100:5.2f}%   "
      f"{ci(others['p99']) if 'p99' in others else '-':<24} {ci(cpu) if cpu else '-':<24} {v['rounds']}")
with open(sys.argv[4], "a") as out:
    out.write(json.dumps({"kind": sys.argv[3], "verdict": v["verdict"], "mde": v["mde"],
                          "cpu": cpu}) + "\n")
EOF
  done
done
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
aa = [r for r in rows if r["kind"] == "AA"]
ab = [r for r in rows if r["kind"] == "AB"]
fp = sum(r["verdict"] != "no_difference" for r in aa)
found = sum(r["verdict"] == "a_faster" for r in ab)
cpu_found = sum(1 for r in ab if r["cpu"] and r["cpu"]["verdict"] == "a_faster")
cpu_fp = sum(1 for r in aa if r["cpu"] and r["cpu"]["verdict"] != "no_difference")
print(f"p50 figure: A/A called a difference in {fp} of {len(aa)}; A/B found B slower in {found} of {len(ab)}; "
      f"median MDE {statistics.median(r['mde'] for r in rows) * 100:.2f}%")
cpu_mde = [r["cpu"]["mde"] for r in rows if r["cpu"]]
if cpu_mde:
    print(f"server-cpu figure: A/A called a difference in {cpu_fp} of {len(aa)}; A/B found B slower in "
          f"{cpu_found} of {len(ab)}; median MDE {statistics.median(cpu_mde) * 100:.2f}%")
EOF
