#!/usr/bin/env bash
# The red team's lock-out attacks, on loopback, against a plain agent, a token-mode agent (TLS,
# no client certificate) and `quietbench serve`, each while a legitimate caller makes a health
# check on a fresh connection every 100 ms: calls served and failed during the attack, their
# latency, the time until it is served again, and the server's peak memory (VmHWM).
# Before the connection gate, 64 idle sockets or 64 token-less TLS handshakes served 0 calls.
#
# Usage: benches/abuse/lockout.sh [SECONDS=10] [COUNT=300]   (PROFILE=debug: the debug build)
set -euo pipefail
seconds=${1:-10}
count=${2:-300}
profile=${PROFILE:-release}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --profile "$([ "$profile" = debug ] && echo dev || echo release)" --quiet \
  -p quietbench -p quietbench-benches --bin quietbench --bin abuse --manifest-path "$repo/Cargo.toml"
qb="$repo/target/$profile/quietbench"
abuse="$repo/target/$profile/abuse"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
# Enough descriptors for the attack's sockets on both ends.
ulimit -n 4096

start() { # name command... ; sets $addr and $pid
  local name=$1; shift
  QUIETBENCH_LOG=error "$@" > "$work/$name.out" 2>"$work/$name.err" &
  pid=$!; pids+=("$pid")
  for _ in $(seq 1 200); do
    addr=$({ grep -ho 'listening on [0-9.:]*' "$work/$name.out" "$work/$name.err" || true; } | awk '{print $3}' | head -1)
    [ -n "$addr" ] && return 0
    sleep 0.05
  done
  echo "error: $name did not start" >&2; cat "$work/$name.err" >&2; exit 1
}
peak() { awk '/VmHWM/ {print $2 / 1024 " MiB"}' "/proc/$1/status"; }

"$qb" certs init --dir "$work/tls" >/dev/null
"$qb" certs issue --dir "$work/tls" --agent a1 --san 127.0.0.1 >/dev/null
head -c 32 /dev/urandom | base64 | tr -d '\n=+/' > "$work/token"; chmod 600 "$work/token"

start plain "$qb" agent --listen 127.0.0.1:0 --state-dir "$work/s1"
plain=$addr plain_pid=$pid
start token "$qb" agent --listen 127.0.0.1:0 --state-dir "$work/s2" \
  --tls-cert "$work/tls/agent-a1.pem" --tls-key "$work/tls/agent-a1.key" --token-file "$work/token"
token=$addr token_pid=$pid
start serve "$qb" serve --listen 127.0.0.1:0 --state-dir "$work/serve" --db "$work/serve.sqlite3"
serve=$addr serve_pid=$pid

row() { # label pid args...
  local label=$1 p=$2; shift 2
  printf '%-34s ' "$label"
  "$abuse" --seconds "$seconds" "$@" | tr '\n' ' '
  printf '| peak %s\n' "$(peak "$p")"
}
echo "lock-out attacks, $seconds s each, $count connections"
row "agent (plain), idle sockets" "$plain_pid" --target "$plain" --attack idle --count "$count"
row "agent (plain), connection churn" "$plain_pid" --target "$plain" --attack churn --count 20000
row "agent (token), idle sockets" "$token_pid" --target "$token" --attack idle --count "$count" \
  --ca "$work/tls/ca.pem" --token "$(cat "$work/token")"
row "agent (token), tokenless handshakes" "$token_pid" --target "$token" --attack handshake \
  --count "$count" --ca "$work/tls/ca.pem" --token "$(cat "$work/token")"
row "serve (loopback), idle sockets" "$serve_pid" --target "$serve" --attack idle --count "$count"
row "serve (loopback), connection churn" "$serve_pid" --target "$serve" --attack churn --count 20000
