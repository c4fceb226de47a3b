#!/usr/bin/env bash
# Coordinated omission, shown: a 1-second stall of the server (SIGSTOP, then SIGCONT) in the
# middle of a SECONDS-long run, measured by quietbench's http probe in an open loop at RATE
# requests/s, by wrk (closed loop: it sends nothing while the server is stopped, so the stall
# is one slow request per connection) and, where installed, by oha at the same rate with and
# without --latency-correction. Prints p50, p99 and max of each. The server is Debian's nginx
# (one pinned process, a 13-byte file), as in http_vs_wrk.sh.
#
# Usage: benches/peer/http_stall.sh [SECONDS=6] [RATE=1000] [CONNECTIONS=16]
# Environment: SERVER_CPU (1), LOAD_CPU (0), QUIETBENCH, OHA: as in http_vs_wrk.sh.
# Needs: nginx, wrk, taskset, pgrep, python3; this script installs nothing.
set -euo pipefail

seconds=${1:-6}
rate=${2:-1000}
connections=${3:-16}
server_cpu=${SERVER_CPU:-1}
load_cpu=${LOAD_CPU:-0}
for tool in nginx wrk taskset pgrep python3; do
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
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
# A signal (timeout, Ctrl-C) exits through the EXIT trap too: no nginx or work folder is left.
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM
. "$(dirname "$0")/nginx_server.sh"

# stall PATTERN: after a third of the run, stops the process matching PATTERN for 1 s.
stall() {
  (
    sleep "$(python3 -c "print($seconds/3)")"
    pid=$(pgrep -f "$1" | head -1)
    [ -n "$pid" ] || { echo "stall: no process matches $1" >&2; exit 1; }
    kill -STOP "$pid"; sleep 1; kill -CONT "$pid"
  ) &
  staller=$!
}

echo "a 1 s stall of nginx a third into a ${seconds}s run, $connections connections: p50 / p99 / max in ms"

# quietbench: nginx started by its agent on a port it picks; the stall finds it by its config.
stall "nginx -p $work/ -c $work/nginx-[0-9]+.conf"
"$qb" run --local --probe http --no-store --cpus "$server_cpu" \
  --param server_shell=true --param "server=$(nginx_cmd '{port}')" \
  --param path=/index.html --param "rate=$rate" --param "connections=$connections" \
  --param max_lag_ms=1000 --param timeout_ms=5000 \
  --rounds 1 --warmup 0 --duration "$seconds" --json "$work/qb.json" >"$work/qb.log" 2>&1 ||
  { cat "$work/qb.log" >&2; exit 1; }
wait "$staller"
python3 - "$work/qb.json" "$rate" <<'PY'
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["trials"][0]["metrics"]}
for name, what in (("request_latency", "from the intended send"), ("service_time", "from the actual send")):
    h = m[name]
    print(f'  quietbench open loop {sys.argv[2]}/s, {what}: {h["p50"]/1e6:.2f} / {h["p99"]/1e6:.2f} / {h["max"]/1e6:.2f} ({h["count"]} requests)')
PY

# The peers' nginx on a fixed port.
port=18090
start_peer_nginx "$port" "$server_cpu"
url="http://127.0.0.1:$port/index.html"

stall "nginx -p $work/ -c $work/nginx-$port.conf"
taskset -c "$load_cpu" wrk -t1 -c"$connections" -d"${seconds}s" --latency "$url" > "$work/wrk.txt"
wait "$staller"
python3 - "$work/wrk.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 1e-3, "ms": 1, "s": 1e3}[u]
p50 = ms(re.search(r"50%\s+(\S+)", text).group(1))
p99 = ms(re.search(r"99%\s+(\S+)", text).group(1))
mx = ms(re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", text).group(1))
n = re.search(r"(\d+) requests in", text).group(1)
print(f"  wrk closed loop: {p50:.2f} / {p99:.2f} / {mx:.2f} ({n} requests)")
PY

if [ -n "$oha" ]; then
  for correction in "" --latency-correction; do
    stall "nginx -p $work/ -c $work/nginx-$port.conf"
    taskset -c "$load_cpu" "$oha" -z "${seconds}s" -c "$connections" -q "$rate" $correction --no-tui \
      --output-format json "$url" > "$work/oha.json"
    wait "$staller"
    python3 - "$work/oha.json" "$rate" "${correction:-(no correction)}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(f'  oha {sys.argv[2]}/s {sys.argv[3]}: {p["p50"]*1e3:.2f} / {p["p99"]*1e3:.2f} / {d["summary"]["slowest"]*1e3:.2f}')
PY
  done
else
  echo "  oha is not installed (cargo install oha): its figures are skipped"
fi
