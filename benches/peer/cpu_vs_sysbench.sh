#!/usr/bin/env bash
# cpu.primes against sysbench cpu, side by side: N interleaved pairs on the same pinned CPU, the
# same max_prime and the same measuring time. Prints both medians, both CVs and the ratio
# (quietbench / sysbench; 1.00 means the same events per second).
#
# Usage: benches/peer/cpu_vs_sysbench.sh [PAIRS=10] [SECONDS=5] [CPU=last online CPU] [MAX_PRIME=10000]
# Needs: sysbench (Debian: apt-get install sysbench), taskset (util-linux), python3, and a
# release build (the script runs `cargo build --release -p quietbench` first).
set -euo pipefail

pairs=${1:-10}
seconds=${2:-5}
cpu=${3:-$(( $(nproc) - 1 ))}
max_prime=${4:-10000}

for tool in sysbench taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "cpu.primes vs sysbench cpu: $pairs pairs x ${seconds}s, CPU $cpu, max_prime $max_prime"
echo "sysbench: $(sysbench --version)   CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
for i in $(seq 1 "$pairs"); do
  # Alternate which tool goes first, so drift over time does not favour one.
  for tool in $( ((i % 2)) && echo "sysbench quietbench" || echo "quietbench sysbench"); do
    if [ "$tool" = sysbench ]; then
      taskset -c "$cpu" sysbench cpu --cpu-max-prime="$max_prime" --threads=1 --time="$seconds" run \
        | awk '/events per second:/ {print $4}' >> "$work/sysbench"
    else
      "$qb" run --local --no-store --cpus "$cpu" --rounds 1 --duration "$seconds" --param "max_prime=$max_prime" \
        --json "$work/qb.json" >/dev/null 2>"$work/qb.err" || { cat "$work/qb.err" >&2; exit 1; }
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print([m["value"] for m in r["trials"][0]["metrics"] if m["name"]=="events_per_sec"][0])' \
        "$work/qb.json" >> "$work/quietbench"
    fi
  done
  printf '  pair %2d: sysbench %9.2f  quietbench %9.2f events/s\n' "$i" "$(tail -1 "$work/sysbench")" "$(tail -1 "$work/quietbench")"
done

python3 - "$work/sysbench" "$work/quietbench" <<'PY'
import statistics, sys
def load(p): return [float(x) for x in open(p)]
s, q = load(sys.argv[1]), load(sys.argv[2])
def cv(v): return statistics.stdev(v) / statistics.mean(v) * 100 if len(v) > 1 else float("nan")
ms, mq = statistics.median(s), statistics.median(q)
print(f"sysbench   median {ms:10.2f} events/s  CV {cv(s):5.2f}%")
print(f"quietbench median {mq:10.2f} events/s  CV {cv(q):5.2f}%")
print(f"ratio quietbench/sysbench (medians): {mq / ms:.4f}")
PY
