#!/usr/bin/env bash
# Orphaned EC2 resources after each fault scenario of `quietbench run --ec2`, against moto's EC2
# server on loopback (no AWS account, no traffic off this machine), N repetitions each:
#   sigkill   the controller SIGKILLed right after RunInstances, then `quietbench gc --run RUN`
#   ctrl-c    SIGINT during the launch (the controller releases on its own)
#   half      a launch in which one of three agents never answers (the launch fails)
# After each, `quietbench fleet ls` counts what is left. Prints one line per repetition and a
# total per scenario. Usage: benches/fault/ec2_orphans.sh [N=20]
set -euo pipefail
N=${1:-20}
cd "$(dirname "$0")/../.."
cargo build --quiet --bin quietbench --features ec2
Q=$PWD/target/debug/quietbench
MOTO=${QUIETBENCH_MOTO_SERVER:-$PWD/target/ci-venvs/moto/bin/moto_server}
[ -x "$MOTO" ] || { echo "error: no moto_server at $MOTO (bash .ci/run installs it)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

port=$(free_port)
"$MOTO" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 & pids+=($!)
until (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; do sleep 0.1; done
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export XDG_DATA_HOME=$work/xdg
EP=(--endpoint-url "http://127.0.0.1:$port")
ami=$(curl -s -X POST -d 'Action=DescribeImages&Owner.1=amazon&Version=2016-11-15' \
  -H 'Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0' \
  "http://127.0.0.1:$port/" | grep -o 'ami-[0-9a-f]*' | sed -n 1p)
"$Q" certs init --dir "$work/ca" >/dev/null
"$Q" certs issue --dir "$work/ca" --agent quietbench-agent >/dev/null
# Two agents that answer, for the half-failed launch.
agents=()
for i in 1 2; do
  QUIETBENCH_LOG=warn "$Q" agent --listen 127.0.0.1:0 --state-dir "$work/state$i" \
    --tls-cert "$work/ca/agent-quietbench-agent.pem" --tls-key "$work/ca/agent-quietbench-agent.key" \
    --client-ca "$work/ca/ca.pem" >"$work/agent$i.out" 2>/dev/null & pids+=($!)
  until grep -q listening "$work/agent$i.out" 2>/dev/null; do sleep 0.1; done
  agents+=("$(awk '{print $NF}' "$work/agent$i.out")")
done

# fleet ls exits 1 on moto: it cannot list placement groups (HTTP 500); the count is still right.
live() { { "$Q" fleet ls "${EP[@]}" 2>/dev/null || true; } | sed -n 's/^\([0-9]*\) resource(s) in .*/\1/p'; }
# An array, not a function: `$!` of a backgrounded function is a subshell's pid, and the
# signals below must reach the controller itself. A background job of a script starts with
# SIGINT ignored (a controller at a terminal does not): env restores the default.
RUN=(env --default-signal=INT "$Q" run --ec2 --instance-type c5.large --ami "$ami" "${EP[@]}"
  --ca-dir "$work/ca" --rounds 1 --duration 0.2 --interval 0.2 --no-store)
stuck() {  # starts a run whose agents never answer; returns once moto has its instances
  local closed; closed=127.0.0.1:$(free_port)
  QUIETBENCH_EC2_AGENT_MAP=$closed,$closed "${RUN[@]}" --count 2 --boot-timeout 5m >/dev/null 2>&1 &
  pid=$!
  until [ "$(live)" -gt 0 ]; do sleep 0.1; done
}

declare -A total
for scenario in sigkill ctrl-c half; do total[$scenario]=0; done
for i in $(seq 1 "$N"); do
  stuck; kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  before=$(live)
  run=$({ "$Q" fleet ls "${EP[@]}" 2>/dev/null || true; } | awk '$1=="instance"{r=$3} END{print r}')
  "$Q" gc --run "$run" "${EP[@]}" >/dev/null 2>&1 || true  # moto cannot list placement groups
  left=$(live); total[sigkill]=$((total[sigkill] + left))
  echo "sigkill #$i: $before resource(s) after the kill, $left after gc --run"

  stuck; kill -INT "$pid"; code=0; wait "$pid" || code=$?
  left=$(live); total[ctrl-c]=$((total[ctrl-c] + left))
  echo "ctrl-c  #$i: exit $code, $left resource(s) left"

  closed=127.0.0.1:$(free_port)
  code=0
  QUIETBENCH_EC2_AGENT_MAP=${agents[0]},$closed,${agents[1]} "${RUN[@]}" --count 3 --boot-timeout 2s \
    >/dev/null 2>&1 || code=$?
  left=$(live); total[half]=$((total[half] + left))
  echo "half    #$i: exit $code, $left resource(s) left"
done
echo "orphaned resources over $N repetitions: sigkill+gc ${total[sigkill]}, ctrl-c ${total[ctrl-c]}, half-failed launch ${total[half]}"
