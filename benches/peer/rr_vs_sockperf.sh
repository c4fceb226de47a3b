#!/usr/bin/env bash
# net.rr against sockperf ping-pong on loopback, TCP and UDP, same message size both ways:
# PAIRS interleaved runs of SECONDS each; prints every median round trip, the median of each
# tool's medians, and the ratio (quietbench / sockperf; the target is within 10%, 0.90..1.10).
#
# Placement is matched: the sockperf client is pinned to the CPU the local agent pins net.rr's
# probe thread to (read from the first run's report); both servers are left to the scheduler,
# as the local peer agent leaves its own. A round trip across two CPUs costs several times one
# on a single CPU, so unmatched placement would compare the scheduler, not the tools.
# sockperf prints half the round trip unless --full-rtt, which this script passes.
#
# Without sockperf, qperf's tcp_lat/udp_lat stand in: it reports the MEAN one-way latency, so
# its figure is doubled and compared with our median: read that ratio as a rough one.
#
# Usage: benches/peer/rr_vs_sockperf.sh [SECONDS=5] [PAIRS=5] [BYTES=32]
# Needs: sockperf (Debian: apt-get install sockperf) or qperf (apt-get install qperf); this
# script installs nothing. taskset (util-linux), python3, and a release build (the script runs
# `cargo build --release -p quietbench` first,
# unless QUIETBENCH names a quietbench binary to use). BYTES is at least 32 (net.rr's UDP
# request: a 16-byte header and the trial's 16-byte secret; sockperf's minimum is 14).
set -euo pipefail

seconds=${1:-5}
pairs=${2:-5}
bytes=${3:-32}

if command -v sockperf >/dev/null; then peer=sockperf
elif command -v qperf >/dev/null; then peer=qperf
else echo "error: neither sockperf nor qperf is installed (see the header of $0)" >&2; exit 1; fi
for tool in taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${QUIETBENCH:-}" ]; then
  qb=$QUIETBENCH # a quietbench binary built elsewhere (a machine without cargo)
else
  cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
  qb="$repo/target/release/quietbench"
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ $peer = sockperf ]; then
  sockperf server -i 127.0.0.1 -p 11111 >/dev/null 2>&1 & pids+=($!)
  sockperf server --tcp -i 127.0.0.1 -p 11112 >/dev/null 2>&1 & pids+=($!)
else
  qperf >/dev/null 2>&1 & pids+=($!)
fi
sleep 1

# ours PROTOCOL: one net.rr run; prints "MEDIAN_US CPU".
ours() {
  "$qb" run --local --probe net.rr --param "protocol=$1" --param "request_bytes=$bytes" \
    --param "response_bytes=$bytes" --rounds 1 --duration "$seconds" --json "$work/qb.json" \
    >/dev/null 2>"$work/qb.err" || {
    cat "$work/qb.err" >&2
    echo "(if the agents cannot pair yet, the unit-level loopback figures are:" >&2
    echo " QB_NET_FIGURES_MS=${seconds}000 cargo test --release -p quietbench-probe --lib net::tests::loopback_figures -- --nocapture)" >&2
    exit 1
  }
  python3 - "$work/qb.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
p50 = [m["p50"] for m in t["metrics"] if m["name"] == "round_trip_latency"][0]
print(p50 / 1e3, t["placement"]["threads"][0]["observed_cpu"])
PY
}

# theirs PROTOCOL CPU: one sockperf (or qperf) run pinned to CPU; prints the round trip in us.
theirs() {
  if [ $peer = sockperf ]; then
    local port=11111 tcp=()
    if [ "$1" = tcp ]; then port=11112; tcp=(--tcp); fi
    taskset -c "$2" sockperf ping-pong "${tcp[@]}" --full-rtt -m "$bytes" -i 127.0.0.1 -p "$port" -t "$seconds" \
      | awk '/percentile 50.000 =/ {print $NF}'
  else
    taskset -c "$2" qperf -t "$seconds" -m "$bytes" 127.0.0.1 "${1}_lat" \
      | awk '/latency/ {v=$3; if ($4=="ms") v*=1000; if ($4=="ns") v/=1000; print 2*v}'
  fi
}

cpu=$(ours tcp | awk '{print $2}')
echo "net.rr vs $peer: $pairs pairs x ${seconds}s, ${bytes}-byte requests and responses, clients on CPU $cpu"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
: > "$work/results"
for protocol in tcp udp; do
  for i in $(seq 1 "$pairs"); do
    for tool in $( ((i % 2)) && echo "$peer quietbench" || echo "quietbench $peer"); do
      if [ "$tool" = quietbench ]; then v=$(ours "$protocol" | awk '{print $1}'); else v=$(theirs "$protocol" "$cpu"); fi
      echo "$protocol $tool $v" >> "$work/results"
    done
    printf '  %s pair %2d: %s %8.2f us  quietbench %8.2f us\n' "$protocol" "$i" "$peer" \
      "$(grep "^$protocol $peer" "$work/results" | tail -1 | cut -d' ' -f3)" \
      "$(grep "^$protocol quietbench" "$work/results" | tail -1 | cut -d' ' -f3)"
  done
done

python3 - "$work/results" "$peer" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    protocol, tool, v = line.split()
    runs[protocol, tool].append(float(v))
peer = sys.argv[2]
for protocol in ("tcp", "udp"):
    p, q = statistics.median(runs[protocol, peer]), statistics.median(runs[protocol, "quietbench"])
    verdict = "met" if 0.9 <= q / p <= 1.1 else "NOT met"
    print(f"{protocol}: {peer} {p:8.2f} us  quietbench {q:8.2f} us (medians of median round trips)"
          f"  ratio {q / p:.3f}  target within 10%: {verdict}")
PY
