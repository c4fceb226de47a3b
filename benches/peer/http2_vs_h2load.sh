#!/usr/bin/env bash
# The http probe's HTTP/2 load generator (--param http2=true: cleartext, prior knowledge) against
# nghttp2's h2load, on the same server: Debian's nginx speaking h2c (`listen ... http2`), serving
# a 13-byte static file from one pinned process (nginx_server.sh). One request in flight per
# connection on both sides (h2load -m 1), so that the figures compare with http_vs_wrk.sh's.
# PAIRS interleaved runs of SECONDS each: closed loop (as fast as it goes), then an open loop at
# half h2load's closed-loop rate. Prints every run's figure, each tool's median and the ratios
# quietbench/h2load.
#
# h2load's open loop (--rps, requests per second per client; -r is connections per second) is
# not latency-corrected: a request that waits for the connection's one stream is timed from
# when it is sent, not from when it was due, so past saturation its p99 is lower than the
# truth. quietbench times each request from its intended send. At half the closed-loop rate
# little waits and the two should agree; the lag column says how late quietbench's sends were.
# h2load prints no percentiles: they come from its --log-file (a line per request).
#
# Placement is matched: nginx on SERVER_CPU, every generator on LOAD_CPU with one thread and
# CONNECTIONS connections. quietbench's measured-host agent starts nginx itself for each trial
# (pinned with --cpus SERVER_CPU) and its load agent takes the CPUs the server does not use, so
# LOAD_CPU must be the only other CPU (the defaults fit a 2-vCPU machine: server 1, load 0).
# h2load gets a separately started nginx, pinned with taskset.
#
# Usage: benches/peer/http2_vs_h2load.sh [SECONDS=10] [PAIRS=3] [CONNECTIONS=16]
# Environment: TLS=1 (HTTP/2 over TLS with ALPN h2 on both sides; needs openssl for the server's
# certificate), SERVER_CPU (1), LOAD_CPU (0), QUIETBENCH (a quietbench binary; default: a release
# build made first), PEER_ONLY=1 (only h2load against nginx: checks this script's peer half on a
# machine without quietbench's http2).
# Needs: nginx (Debian: nginx-light, 1.22 or later, with the http_v2 module), h2load (Debian:
# nghttp2-client, 1.52's --rps and --log-file), taskset, python3; this script installs nothing.
set -euo pipefail

seconds=${1:-10}
pairs=${2:-3}
connections=${3:-16}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
peer_only=${PEER_ONLY:-0}
for tool in nginx h2load taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$peer_only" = 1 ]; then
  qb=
elif [ -n "${QUIETBENCH:-}" ]; then
  qb=$QUIETBENCH
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
# A signal (timeout, Ctrl-C) exits through the EXIT trap too: no nginx or work folder is left.
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

# TLS=1: HTTP/2 over TLS (ALPN h2) on both sides, instead of cleartext.
tls=${TLS:-0}
mode=http2; scheme=http; protocol="HTTP/2 cleartext"
if [ "$tls" = 1 ]; then
  command -v openssl >/dev/null || { echo "error: TLS=1 needs openssl (to make the server's certificate)" >&2; exit 1; }
  mode=h2tls; scheme=https; protocol="HTTP/2 over TLS"
fi
NGINX_TLS=$tls
. "$(dirname "$0")/nginx_server.sh"

# The peer's nginx, pinned like ours.
port=18090
start_peer_nginx "$port" "$server_cpu" "$mode"
url="$scheme://127.0.0.1:$port/index.html"

# ours RATE: one trial; prints "REQUESTS_PER_SEC P50_US P99_US LAG_MAX_US SERVICE_P50/P99_US
# load-cpus=[...]" (latency from the intended send; the service time from the actual send, which
# is what h2load's open loop times).
ours() {
  if [ -z "$qb" ]; then echo "- - - - -"; return; fi
  "$qb" run --local --probe http --no-store --cpus "$server_cpu" \
    --param server_shell=true --param "server=$(nginx_cmd '{port}' "$mode")" \
    --param http2=true --param "tls=$([ "$tls" = 1 ] && echo true || echo false)" \
    --param path=/index.html --param "rate=$1" --param "connections=$connections" \
    --param threads=1 --param max_lag_ms=1000 \
    --rounds 1 --warmup 0 --duration "$seconds" --json "$work/qb.json" >"$work/qb.log" 2>&1 ||
    { cat "$work/qb.log" >&2; return 1; }
  python3 - "$work/qb.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
m = {x["name"]: x for x in t["metrics"]}
lat = m["request_latency"]
cpus = [th["planned_cpu"] for th in t["placement"]["threads"]]
svc = m["service_time"]
print(f'{m["requests_per_sec"]["value"]:.0f} {lat["p50"]/1e3:.1f} {lat["p99"]/1e3:.1f} {m.get("send_lag_max_us", {}).get("value", 0):.0f} {svc["p50"]/1e3:.1f}/{svc["p99"]/1e3:.1f} load-cpus={cpus}')
PY
}

# h2load_run RPS_PER_CLIENT: prints "REQUESTS_PER_SEC P50_US P99_US FAILED" (0: as fast as it
# goes, and no per-request log, whose writes would cost the closed loop).
h2load_run() {
  local extra=()
  [ "$1" != 0 ] && extra=(--rps "$1" --log-file "$work/h2load.log")
  rm -f "$work/h2load.log"
  taskset -c "$load_cpu" h2load -c "$connections" -m 1 -t 1 -D "$seconds" "${extra[@]}" "$url" \
    > "$work/h2load.out" 2>&1 || { cat "$work/h2load.out" >&2; return 1; }
  python3 "$repo/benches/peer/h2load_summary.py" "$work/h2load.out" "$work/h2load.log"
}

median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "closed loop, $protocol, $connections connections x 1 stream, 1 thread, ${seconds}s x $pairs, nginx on CPU $server_cpu, load on CPU $load_cpu"
[ -z "$qb" ] && echo "  PEER_ONLY=1: h2load only"
q_rates=(); h_rates=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag _ cpus <<<"$(ours 0)"
  read -r h _ _ hfailed <<<"$(h2load_run 0)"; h_rates+=("$h")
  msg="  run $i:"
  if [ -n "$qb" ]; then q_rates+=("$r"); msg+=" quietbench $r req/s (p50 $p50 us, p99 $p99 us, $cpus) |"; fi
  echo "$msg h2load $h req/s ($hfailed failed)"
done
hm=$(median "${h_rates[@]}")
if [ -n "$qb" ]; then
  qm=$(median "${q_rates[@]}")
  echo "median requests/s: quietbench $qm, h2load $hm, ratio quietbench/h2load $(python3 -c "print(f'{$qm/$hm:.3f}')")"
else
  echo "median requests/s: h2load $hm"
fi

# h2load's rate is per client: the total is the per-client rate times the connections, and
# quietbench gets that same total.
per_client=$(python3 -c "print(max(1, int($hm / 2 / $connections)))")
rate=$((per_client * connections))
echo
echo "open loop at $rate requests/s (half of h2load's; $per_client per connection), $connections connections: p50 / p99 in us"
q50=(); q99=(); s99=(); h50=(); h99=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag svc cpus <<<"$(ours "$rate")"
  read -r hrate hp50 hp99 hfailed <<<"$(h2load_run "$per_client")"; h50+=("$hp50"); h99+=("$hp99")
  msg="  run $i:"
  if [ -n "$qb" ]; then
    q50+=("$p50"); q99+=("$p99"); s99+=("${svc#*/}")
    msg+=" quietbench $r req/s p50 $p50 p99 $p99, service p50/p99 $svc (lag max $lag us) |"
  fi
  echo "$msg h2load $hrate req/s p50 $hp50 p99 $hp99 ($hfailed failed)"
done
b=$(median "${h50[@]}"); d=$(median "${h99[@]}")
if [ -n "$qb" ]; then
  a=$(median "${q50[@]}"); c=$(median "${q99[@]}")
  echo "median p50: quietbench $a us, h2load $b us, ratio $(python3 -c "print(f'{$a/$b:.3f}')") (lower is better)"
  echo "median p99: quietbench $c us, h2load $d us, ratio $(python3 -c "print(f'{$c/$d:.3f}')")"
  e=$(median "${s99[@]}")
  echo "median service-time p99 (from the actual send, as h2load times): quietbench $e us, ratio $(python3 -c "print(f'{$e/$d:.3f}')")"
else
  echo "median p50: h2load $b us; median p99: h2load $d us"
fi
