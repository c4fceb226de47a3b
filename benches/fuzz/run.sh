#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser that reads outside input (crates/quietbench-fuzz
# names them), with libFuzzer through cargo fuzz on the stable toolchain (--sanitizer none: the
# address sanitizer needs nightly; Rust's own bounds checks and overflow checks, which cargo fuzz
# turns on, catch what it would in safe code).
#
#   benches/fuzz/run.sh [RUNS_PER_TARGET]   (default 1200000: 12 million executions in all)
#
# It seeds the corpora (seed.sh: git keeps only the named seeds and regressions, fuzz/README.md),
# runs each target for RUNS executions (two at a time), then minimizes each corpus (cargo fuzz
# cmin) so the local fuzz/corpus stays small, and prints a table: executions, crashes, corpus
# size. A crash leaves its input in fuzz/artifacts/TARGET/ and makes the script exit 1; keep it
# as fuzz/regressions/TARGET/NAME (fuzz/README.md says how). CI replays the named seeds and
# regressions (crates/quietbench-fuzz/tests/replay.rs); it does not fuzz.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-1200000}
jobs=${FUZZ_JOBS:-$(nproc)}

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
bash benches/fuzz/seed.sh >/dev/null
cargo fuzz build --sanitizer none
targets=$(cargo fuzz list)
logs=fuzz/target/logs
rm -rf "$logs"
mkdir -p "$logs"

fuzz_one() {
    local t=$1
    # -rss_limit_mb: a parser that allocates a gigabyte on 1 MiB of input is a finding too.
    cargo fuzz run --sanitizer none "$t" "fuzz/corpus/$t" -- \
        -runs="$runs" -rss_limit_mb=1024 -timeout=10 -max_len=65536 -print_final_stats=1 \
        >"$logs/$t.log" 2>&1 || echo "$t" >>"$logs/FAILED"
}
export -f fuzz_one
export runs logs
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'fuzz_one {}'

for t in $targets; do
    cargo fuzz cmin --sanitizer none "$t" "fuzz/corpus/$t" >"$logs/$t.cmin.log" 2>&1
done

total=0
printf '%-16s %12s %8s %8s %10s\n' target executions crashes corpus exec/s
for t in $targets; do
    execs=$(awk '/stat::number_of_executed_units/{print $2}' "$logs/$t.log" | tail -1)
    rate=$(awk '/stat::average_exec_per_sec/{print $2}' "$logs/$t.log" | tail -1)
    crashes=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | wc -l)
    corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
    printf '%-16s %12s %8s %8s %10s\n' "$t" "${execs:-?}" "$crashes" "$corpus" "${rate:-?}"
    total=$((total + ${execs:-0}))
done
echo "executions in all: $total"
if [ -s "$logs/FAILED" ]; then
    echo "FAILED: $(tr '\n' ' ' <"$logs/FAILED") (inputs in fuzz/artifacts/, logs in $logs/;" \
        "keep each, minimized, as fuzz/regressions/TARGET/NAME: fuzz/README.md)" >&2
    exit 1
fi
