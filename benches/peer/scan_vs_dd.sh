#!/usr/bin/env bash
# disk.scan against dd, reading the same whole file with direct I/O: `dd bs=1M iflag=direct` (one
# 1 MiB read at a time), the disk.scan survey (one thread, its first pass: survey_mb_per_sec),
# and the parallel pre-warm (prewarm=true with PREWARM_THREADS threads, a fresh state file each
# run, so it reads everything; its read_mb_per_sec over the whole trial, which ends when the
# file is read). Runs interleave, the
# order rotating each repeat; as root the page cache is dropped before each run (direct I/O
# bypasses it, but a drop also evens out what the kernel keeps around). Prints every run, the
# medians and the ratios (quietbench / dd; 1.00 means the same MB/s).
#
# Usage: benches/peer/scan_vs_dd.sh [REPEATS=5] [SIZE_MIB=1024] [FILE] [CPU] [PREWARM_THREADS=4]
#   FILE defaults to /var/tmp/quietbench-scan-peer.dat (created and filled with data once; it must
#   be on the disk under test, not tmpfs); CPU to the last online CPU, where dd is pinned too.
#   The survey runs on CPU; the pre-warm's threads where the agent's placement puts them.
# Needs: dd (coreutils), python3, taskset (util-linux), and a release build (the script runs
# `cargo build --release -p quietbench` first). Root for dropping caches.
set -euo pipefail

repeats=${1:-5}
size_mib=${2:-1024}
file=${3:-/var/tmp/quietbench-scan-peer.dat}
cpu=${4:-$(( $(nproc) - 1 ))}
prewarm_threads=${5:-4}

for tool in dd taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done
if [ "$(id -u)" -ne 0 ]; then
  echo "note: not root, so caches are not dropped between runs" >&2
fi

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$qb" run --local --cpus "$cpu" --probe disk.seq --param "path=$file" --param "size_mib=$size_mib" \
  --duration 0.5 --rounds 1 >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
bytes=$(stat -c %s "$file")

drop_caches() {
  sync
  if [ "$(id -u)" -eq 0 ]; then echo 3 > /proc/sys/vm/drop_caches; fi
}

run_dd() {
  local start end
  start=$(date +%s.%N)
  taskset -c "$cpu" dd if="$file" of=/dev/null bs=1M iflag=direct status=none
  end=$(date +%s.%N)
  python3 -c 'import sys; print(int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e6)' "$bytes" "$start" "$end"
}

run_qb() { # cpus metric extra-params...
  local cpus=$1 metric=$2; shift 2
  local params=()
  for p in "$@"; do params+=(--param "$p"); done
  "$qb" run --local ${cpus:+--cpus "$cpus"} --probe disk.scan --param "path=$file" "${params[@]}" \
    --duration 600 --rounds 1 --json "$work/qb.json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
m = {x["name"]: x["value"] for x in t["metrics"]}
print(m[sys.argv[2]])' "$work/qb.json" "$metric"
}

echo "disk.scan vs dd: $repeats repeats, CPU $cpu, $file ($((bytes >> 20)) MiB)"
tools=(dd scan prewarm)
for i in $(seq 1 "$repeats"); do
  n=${#tools[@]}
  for k in $(seq 0 $((n - 1))); do
    tool=${tools[$(( (k + i) % n ))]}
    drop_caches
    case $tool in
      dd) mb=$(run_dd) ;;
      scan) mb=$(run_qb "$cpu" survey_mb_per_sec) ;;
      prewarm)
        mb=$(run_qb "" read_mb_per_sec prewarm=true "state=scan-vs-dd-$$.$i" "threads=$prewarm_threads") ;;
    esac
    echo "$tool $mb" >> "$work/results"
    printf '  repeat %2d %-8s %8.1f MB/s\n' "$i" "$tool" "$mb"
  done
done

python3 - "$work/results" <<'PY'
import statistics, sys
by = {}
for tool, mb in (l.split() for l in open(sys.argv[1])):
    by.setdefault(tool, []).append(float(mb))
med = {t: statistics.median(v) for t, v in by.items()}
cv = lambda v: statistics.stdev(v) / statistics.mean(v) * 100 if len(v) > 1 else float("nan")
for t in ("dd", "scan", "prewarm"):
    print(f"{t:8s} median {med[t]:8.1f} MB/s  CV {cv(by[t]):5.1f}%")
print(f"ratio scan / dd:    {med['scan'] / med['dd']:.3f}")
print(f"ratio prewarm / dd: {med['prewarm'] / med['dd']:.3f}")
PY
