#!/usr/bin/env bash
# The http probe's gRPC calls (--param grpc=...) against nghttp2's h2load sending the same call,
# on the same server: the tests' grpcserver (tonic, one runtime worker, pinned), calling
# qbtest.v1.Bench/Echo with the message `text: "route A to B"`. One call in flight per
# connection on both sides (h2load -m 1). PAIRS interleaved runs of SECONDS each: closed loop
# (as fast as it goes), then an open loop at half h2load's closed-loop rate. Prints every run's
# figure, each tool's median and the ratios quietbench/h2load.
#
# h2load knows nothing of gRPC: it POSTs the same framed message with the same content-type and
# te headers, and counts HTTP 2xx replies; it cannot see a grpc-status. quietbench reads each
# call's grpc-status (the server here answers every call OK, which the errors column shows).
# h2load's open loop (--rps, per client) times from the actual send, not from when a call was
# due; at half the closed-loop rate little waits and the two should agree. h2load prints no
# percentiles: they come from its --log-file.
#
# Placement is matched: the server on SERVER_CPU, every generator on LOAD_CPU with one thread and
# CONNECTIONS connections. quietbench's measured-host agent starts the server itself for each
# trial (pinned with --cpus SERVER_CPU) and its load agent takes the other CPU (the defaults fit
# a 2-vCPU machine: server 1, load 0). h2load gets a separately started server, pinned with
# taskset.
#
# Usage: benches/peer/grpc_vs_h2load.sh [SECONDS=10] [PAIRS=3] [CONNECTIONS=16]
# Environment: SERVER_CPU (1), LOAD_CPU (0), QUIETBENCH and GRPCSERVER (binaries; default: release
# builds made first).
# Needs: h2load (Debian: nghttp2-client, 1.52's --rps and --log-file), taskset, python3; this
# script installs nothing.
set -euo pipefail

seconds=${1:-10}
pairs=${2:-3}
connections=${3:-16}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
for tool in h2load taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${QUIETBENCH:-}" ] || [ -z "${GRPCSERVER:-}" ]; then
  cargo build --release --quiet -p quietbench -p quietbench-tests --bin quietbench --bin grpcserver \
    --manifest-path "$repo/Cargo.toml"
fi
qb=${QUIETBENCH:-$repo/target/release/quietbench}
server=${GRPCSERVER:-$repo/target/release/grpcserver}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
# A signal (timeout, Ctrl-C) exits through the EXIT trap too: no server or work folder is left.
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

# The request: JSON for quietbench (encoded by the controller from the descriptor set), and the
# same message framed by hand for h2load: a byte 0 (not compressed), its length, the message.
"$server" --descriptor-out "$work/bench.pb"
echo '{"text": "route A to B"}' > "$work/request.json"
python3 - "$work/body.bin" <<'PY'
import struct, sys
text = b"route A to B"
message = bytes([0x0a, len(text)]) + text
open(sys.argv[1], "wb").write(b"\x00" + struct.pack(">I", len(message)) + message)
PY

# The peer's server, pinned like ours.
port=18091
taskset -c "$server_cpu" "$server" --port "$port" --workers 1 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$work/server.log" && break; sleep 0.1; done
url="http://127.0.0.1:$port/qbtest.v1.Bench/Echo"

# ours RATE: one trial; prints "CALLS_PER_SEC P50_US P99_US LAG_MAX_US SERVICE_P50/P99_US ERRORS".
ours() {
  "$qb" run --local --probe http --no-store --cpus "$server_cpu" \
    --param "server=$server --port {port} --workers 1" \
    --param grpc=qbtest.v1.Bench/Echo --param "grpc_request=$work/request.json" \
    --param "grpc_descriptor=$work/bench.pb" \
    --param "rate=$1" --param "connections=$connections" \
    --param threads=1 --param max_lag_ms=1000 \
    --rounds 1 --warmup 0 --duration "$seconds" --json "$work/qb.json" >"$work/qb.log" 2>&1 ||
    { cat "$work/qb.log" >&2; return 1; }
  python3 - "$work/qb.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
m = {x["name"]: x for x in t["metrics"]}
lat, svc = m["request_latency"], m["service_time"]
errors = sum(x["value"] for n, x in m.items() if n.startswith("errors_"))
print(f'{m["requests_per_sec"]["value"]:.0f} {lat["p50"]/1e3:.1f} {lat["p99"]/1e3:.1f} {m.get("send_lag_max_us", {}).get("value", 0):.0f} {svc["p50"]/1e3:.1f}/{svc["p99"]/1e3:.1f} {errors:.0f}')
PY
}

# h2load_run RPS_PER_CLIENT: prints "CALLS_PER_SEC P50_US P99_US FAILED" (0: as fast as it goes).
h2load_run() {
  local extra=()
  [ "$1" != 0 ] && extra=(--rps "$1" --log-file "$work/h2load.log")
  rm -f "$work/h2load.log"
  taskset -c "$load_cpu" h2load -c "$connections" -m 1 -t 1 -D "$seconds" "${extra[@]}" \
    -d "$work/body.bin" -H 'content-type: application/grpc' -H 'te: trailers' "$url" \
    > "$work/h2load.out" 2>&1 || { cat "$work/h2load.out" >&2; return 1; }
  python3 "$repo/benches/peer/h2load_summary.py" "$work/h2load.out" "$work/h2load.log"
}

median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "closed loop, gRPC unary calls, $connections connections x 1 stream, 1 thread, ${seconds}s x $pairs, server on CPU $server_cpu, load on CPU $load_cpu"
q_rates=(); h_rates=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag _ errors <<<"$(ours 0)"; q_rates+=("$r")
  read -r h _ _ hfailed <<<"$(h2load_run 0)"; h_rates+=("$h")
  echo "  run $i: quietbench $r calls/s (p50 $p50 us, p99 $p99 us, $errors errors) | h2load $h req/s ($hfailed failed)"
done
qm=$(median "${q_rates[@]}"); hm=$(median "${h_rates[@]}")
echo "median calls/s: quietbench $qm, h2load $hm, ratio quietbench/h2load $(python3 -c "print(f'{$qm/$hm:.3f}')")"

per_client=$(python3 -c "print(max(1, int($hm / 2 / $connections)))")
rate=$((per_client * connections))
echo
echo "open loop at $rate calls/s (half of h2load's; $per_client per connection), $connections connections: p50 / p99 in us"
q50=(); q99=(); s99=(); h50=(); h99=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag svc errors <<<"$(ours "$rate")"
  q50+=("$p50"); q99+=("$p99"); s99+=("${svc#*/}")
  read -r hrate hp50 hp99 hfailed <<<"$(h2load_run "$per_client")"; h50+=("$hp50"); h99+=("$hp99")
  echo "  run $i: quietbench $r calls/s p50 $p50 p99 $p99, service p50/p99 $svc (lag max $lag us, $errors errors) | h2load $hrate req/s p50 $hp50 p99 $hp99 ($hfailed failed)"
done
a=$(median "${q50[@]}"); b=$(median "${h50[@]}"); c=$(median "${q99[@]}"); d=$(median "${h99[@]}")
echo "median p50: quietbench $a us, h2load $b us, ratio $(python3 -c "print(f'{$a/$b:.3f}')") (lower is better)"
echo "median p99: quietbench $c us, h2load $d us, ratio $(python3 -c "print(f'{$c/$d:.3f}')")"
e=$(median "${s99[@]}")
echo "median service-time p99 (from the actual send, as h2load times): quietbench $e us, ratio $(python3 -c "print(f'{$e/$d:.3f}')")"
