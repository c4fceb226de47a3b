#!/usr/bin/env bash
# The http probe's load generator against wrk (closed loop) and oha --latency-correction (open
# loop), on the same server: Debian's nginx serving a 13-byte static file from one pinned
# process. PAIRS interleaved runs of SECONDS each; prints every run's figure, each tool's
# median and the ratios (issue 29's targets: closed-loop requests/s >= 1.0x wrk and oha; at
# half that rate in an open loop, p50 and p99 no higher than oha's).
#
# Placement is matched: nginx on SERVER_CPU, every generator on LOAD_CPU with one thread and
# CONNECTIONS connections. quietbench's measured-host agent starts nginx itself for each trial
# (pinned with --cpus SERVER_CPU) and its load agent takes the CPUs the server does not use, so
# LOAD_CPU must be the only other CPU (the defaults fit a 2-vCPU machine: server 1, load 0).
# wrk and oha get a separately started nginx, pinned with taskset.
#
# Usage: benches/peer/http_vs_wrk.sh [SECONDS=10] [PAIRS=3] [CONNECTIONS=16]
# Environment: TLS=1 (HTTP/1.1 over TLS on every side; needs openssl for the server's
# certificate), SERVER_CPU (1), LOAD_CPU (0), QUIETBENCH (a quietbench binary; default: a release
# build made first), OHA (an oha binary; default: oha on PATH; without one the open-loop
# comparison is skipped, and says so).
# Needs: nginx (Debian: nginx-light), wrk, taskset, python3; this script installs nothing.
set -euo pipefail

seconds=${1:-10}
pairs=${2:-3}
connections=${3:-16}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
for tool in nginx wrk taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done
oha=${OHA:-$(command -v oha || true)}

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${QUIETBENCH:-}" ]; then
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

# TLS=1: HTTP/1.1 over TLS on every side, instead of cleartext.
tls=${TLS:-0}
mode=; scheme=http; tls_flag=false; insecure=()
if [ "$tls" = 1 ]; then
  command -v openssl >/dev/null || { echo "error: TLS=1 needs openssl (to make the server's certificate)" >&2; exit 1; }
  mode=tls; scheme=https; tls_flag=true; insecure=(--insecure)
fi
NGINX_TLS=$tls
. "$(dirname "$0")/nginx_server.sh"

# The peers' nginx, pinned like ours.
port=18089
start_peer_nginx "$port" "$server_cpu" "$mode"
url="$scheme://127.0.0.1:$port/index.html"

# ours RATE: one trial; prints "REQUESTS_PER_SEC P50_US P99_US LAG_MAX_US".
ours() {
  "$qb" run --local --probe http --no-store --cpus "$server_cpu" \
    --param server_shell=true --param "server=$(nginx_cmd '{port}' "$mode")" --param "tls=$tls_flag" \
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
print(f'{m["requests_per_sec"]["value"]:.0f} {lat["p50"]/1e3:.1f} {lat["p99"]/1e3:.1f} {m.get("send_lag_max_us", {}).get("value", 0):.0f} load-cpus={cpus}')
PY
}

wrk_rate() {
  taskset -c "$load_cpu" wrk -t1 -c"$connections" -d"${seconds}s" "$url" |
    awk '/Requests\/sec/ {printf "%.0f\n", $2}'
}

# oha RATE: prints "REQUESTS_PER_SEC P50_US P99_US" (RATE 0: as fast as it goes).
oha_run() {
  local q=()
  [ "$1" != 0 ] && q=(-q "$1" --latency-correction)
  taskset -c "$load_cpu" "$oha" -z "${seconds}s" -c "$connections" "${q[@]}" "${insecure[@]}" --no-tui \
    --output-format json "$url" > "$work/oha.json"
  python3 - "$work/oha.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(f'{d["summary"]["requestsPerSec"]:.0f} {p["p50"]*1e6:.1f} {p["p99"]*1e6:.1f}')
PY
}

median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "closed loop, $connections connections, 1 thread, ${seconds}s x $pairs, nginx on CPU $server_cpu, load on CPU $load_cpu"
q_rates=(); w_rates=(); o_rates=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag cpus <<<"$(ours 0)"; q_rates+=("$r")
  w=$(wrk_rate); w_rates+=("$w")
  msg="  run $i: quietbench $r req/s (p50 $p50 us, p99 $p99 us, $cpus) | wrk $w req/s"
  if [ -n "$oha" ]; then o=$(oha_run 0); o_rates+=("${o%% *}"); msg+=" | oha ${o%% *} req/s"; fi
  echo "$msg"
done
qm=$(median "${q_rates[@]}"); wm=$(median "${w_rates[@]}")
echo "median requests/s: quietbench $qm, wrk $wm, ratio $(python3 -c "print(f'{$qm/$wm:.3f}')")"
if [ -n "$oha" ]; then
  om=$(median "${o_rates[@]}")
  echo "median requests/s: oha $om, ratio quietbench/oha $(python3 -c "print(f'{$qm/$om:.3f}')")"
fi

rate=$(python3 -c "print(int($wm/2))")
echo
echo "open loop at $rate requests/s (half of wrk's), $connections connections: p50 / p99 in us"
if [ -z "$oha" ]; then
  echo "  oha is not installed (cargo install oha): only quietbench's figures"
fi
q50=(); q99=(); o50=(); o99=()
for i in $(seq "$pairs"); do
  read -r r p50 p99 lag cpus <<<"$(ours "$rate")"; q50+=("$p50"); q99+=("$p99")
  msg="  run $i: quietbench $r req/s p50 $p50 p99 $p99 (lag max $lag us)"
  if [ -n "$oha" ]; then
    read -r orate op50 op99 <<<"$(oha_run "$rate")"; o50+=("$op50"); o99+=("$op99")
    msg+=" | oha $orate req/s p50 $op50 p99 $op99"
  fi
  echo "$msg"
done
if [ -n "$oha" ]; then
  a=$(median "${q50[@]}"); b=$(median "${o50[@]}"); c=$(median "${q99[@]}"); d=$(median "${o99[@]}")
  echo "median p50: quietbench $a us, oha $b us, ratio $(python3 -c "print(f'{$a/$b:.3f}')") (lower is better)"
  echo "median p99: quietbench $c us, oha $d us, ratio $(python3 -c "print(f'{$c/$d:.3f}')")"
fi
