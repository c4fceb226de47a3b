#!/usr/bin/env bash
# net.throughput against iperf3, side by side, on loopback and across two network namespaces
# joined by a veth pair (qbA 10.201.0.1/24 <-> qbB 10.201.0.2/24, created here and deleted on
# exit). For each of 1, 2 and 4 flows (iperf3 -P, our threads=), ROUNDS interleaved runs of
# SECONDS each; prints every figure, each tool's best, and the ratio of the bests
# (quietbench / iperf3; the target is >= 1.00).
#
# iperf3 (3.x before 3.16) runs every stream on one thread; quietbench runs one pinned thread per
# flow, which is the point (CONTEXT.md §4), so the bests differ most at -P 4.
#
# quietbench runs twice per configuration: with its default placement and with every CPU
# (--cpus 0-(N-1)), as iperf3 has them. The peer's readers follow their flows (each reader moves
# to the CPU that handles its flow's packets: on one machine, its sender's). On loopback the
# measuring agent sees its peer on its own machine and its default already takes every CPU,
# the housekeeping CPU 0 last ("same-machine" placement), so the two runs place alike there.
# Across the veth pair the agent cannot tell that the peer shares the machine (another
# namespace), and its default keeps CPU 0 for housekeeping: on a 2-CPU machine that leaves
# senders and readers one CPU against iperf3's two, so the all-CPU run is the one to compare.
# Each is printed; quietbench's best is the better of the two.
# Both count bytes handed to the sender's socket (iperf3's "sender" line, sum_sent).
#
# Usage: sudo benches/peer/net_vs_iperf3.sh [SECONDS=5] [ROUNDS=2]
#   FLOWS="4" and PLACES="veth" (environment) narrow the run to some flow counts or places.
# Needs: iperf3 (Debian: apt-get install iperf3; this script installs nothing), python3, root and
# iproute2 (ip) for the veth half (without them it measures loopback only), and a release build
# (the script runs `cargo build --release -p quietbench` first, unless QUIETBENCH
# names a quietbench binary to use).
set -euo pipefail

seconds=${1:-5}
rounds=${2:-2}
read -r -a flows <<< "${FLOWS:-1 2 4}"

for tool in iperf3 python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done
read -r -a places <<< "${PLACES:-loopback veth}"
if ! command -v ip >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "note: the veth half needs root and iproute2 (ip); measuring on loopback only" >&2
  places=(loopback)
fi
for where in "${places[@]}"; do
  case $where in loopback | veth) ;; *) echo "error: PLACES: unknown place '$where' (loopback, veth)" >&2; exit 1 ;; esac
done
veth=false
[[ " ${places[*]} " == *" veth "* ]] && veth=true
for ns in qbA qbB; do
  if $veth && ip netns list | grep -qw "$ns"; then
    echo "error: network namespace $ns already exists (a previous run killed hard?): ip netns del $ns" >&2
    exit 1
  fi
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
  # Deleting a namespace deletes its end of the veth pair, and the pair with it.
  if $veth; then
    ip netns del qbA 2>/dev/null || true
    ip netns del qbB 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# start_agent NS ADDR: starts an agent in NS listening on ADDR (in this shell, so cleanup
# knows its pid: `ip netns exec` execs the agent in place).
start_agent() {
  ip netns exec "$1" "$qb" agent --listen "$2:0" --insecure > "$work/agent-$1.out" 2>"$work/agent-$1.err" &
  pids+=($!)
}

# agent_address NS: the HOST:PORT the agent in NS printed ("quietbench-agent listening on ADDR").
agent_address() {
  for _ in $(seq 100); do
    if grep -q "listening on" "$work/agent-$1.out" 2>/dev/null; then
      awk '/listening on/ {print $NF; exit}' "$work/agent-$1.out"
      return
    fi
    sleep 0.1
  done
  echo "error: the agent in $1 did not start:" >&2
  cat "$work/agent-$1.err" >&2
  exit 1
}

if $veth; then
  ip netns add qbA
  ip netns add qbB
  ip link add qbvA type veth peer name qbvB
  ip link set qbvA netns qbA
  ip link set qbvB netns qbB
  ip -n qbA addr add 10.201.0.1/24 dev qbvA
  ip -n qbB addr add 10.201.0.2/24 dev qbvB
  for ns in qbA qbB; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "qbv${ns#qb}" up
  done
  start_agent qbA 10.201.0.1
  start_agent qbB 10.201.0.2
  agent_a=$(agent_address qbA)
  agent_b=$(agent_address qbB)
fi

# in_ns NS COMMAND...: runs COMMAND in namespace NS, or here when NS is empty.
in_ns() {
  local ns=$1
  shift
  if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

# iperf_gbit CLIENT_NS SERVER_NS SERVER_ADDR FLOWS: one iperf3 run, sender Gbit/s.
iperf_gbit() {
  in_ns "$2" iperf3 -s -1 -B "$3" -p 5201 >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  in_ns "$1" iperf3 -c "$3" -p 5201 -t "$seconds" -P "$4" -J > "$work/iperf.json" || { cat "$work/iperf.json" >&2; exit 1; }
  wait "$server" || true
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_sent"]["bits_per_second"] / 1e9)' "$work/iperf.json"
}

# ours_gbit NS THREADS RUN-ARGS...: one quietbench run, Gbit/s.
ours_gbit() {
  local ns=$1 n=$2
  shift 2
  in_ns "$ns" "$qb" run "$@" --probe net.throughput --param "threads=$n" --rounds 1 \
    --duration "$seconds" --json "$work/qb.json" >/dev/null 2>"$work/qb.err" || {
    cat "$work/qb.err" >&2
    echo "(if the agents cannot pair yet, the unit-level loopback figure is:" >&2
    echo " QB_NET_FIGURES_MS=${seconds}000 cargo test --release -p quietbench-probe --lib net::tests::loopback_figures -- --nocapture)" >&2
    exit 1
  }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print([m["value"] for m in r["trials"][0]["metrics"] if m["name"]=="gbit_per_sec"][0])' "$work/qb.json"
}

echo "net.throughput vs iperf3: ${seconds}s runs, $rounds rounds, flows ${flows[*]}"
echo "iperf3: $(iperf3 --version | head -1)   CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
: > "$work/results"
for round in $(seq 1 "$rounds"); do
  for n in "${flows[@]}"; do
    # Alternate which tool goes first, so drift over time favours neither.
    for tool in $( ((round % 2)) && echo "iperf3 quietbench quietbench-all" || echo "quietbench-all quietbench iperf3"); do
      for where in "${places[@]}"; do
        all=()
        [ "$tool" = quietbench-all ] && all=(--cpus "0-$(( $(nproc) - 1 ))")
        if [ "$tool" = iperf3 ]; then
          if [ $where = loopback ]; then v=$(iperf_gbit "" "" 127.0.0.1 "$n"); else v=$(iperf_gbit qbA qbB 10.201.0.2 "$n"); fi
        else
          if [ $where = loopback ]; then v=$(ours_gbit "" "$n" --local "${all[@]}"); else v=$(ours_gbit qbA "$n" --agent "$agent_a" --peer "$agent_b" "${all[@]}"); fi
        fi
        printf '  round %d %-8s %d flow(s) %-14s %7.2f Gbit/s\n' "$round" "$where" "$n" "$tool" "$v"
        echo "$where $tool $n $v $round" >> "$work/results"
      done
    done
  done
done

python3 - "$work/results" <<'PY'
import collections, statistics, sys
best = collections.defaultdict(float)
by_round = collections.defaultdict(float)  # (place, round, side) -> that side's best that round
for line in open(sys.argv[1]):
    where, tool, n, v, rnd = line.split()
    side = "quietbench" if tool.startswith("quietbench") else "iperf3"
    by_round[where, rnd, side] = max(by_round[where, rnd, side], float(v))
    for key in (tool, "quietbench-best" if tool.startswith("quietbench") else None):
        if key:
            best[where, key, int(n)] = max(best[where, key, int(n)], float(v))
            best[where, key, "best"] = max(best[where, key, "best"], float(v))
for where in sorted({w for w, _, _ in best}):
    print(f"{where}:")
    counts = sorted({n for (w, _, n) in best if w == where and n != "best"})
    for n in counts + ["best"]:
        i, d, a = (best[where, t, n] for t in ("iperf3", "quietbench", "quietbench-all"))
        q = best[where, "quietbench-best", n]
        label = f"-P {n}" if n != "best" else "best of all"
        print(f"  {label:12} iperf3 {i:6.2f}  quietbench {d:6.2f} (default) {a:6.2f} (all CPUs) "
              f"Gbit/s  ratio {q / i if i else float('nan'):.3f}")
    i, q = best[where, "iperf3", "best"], best[where, "quietbench-best", "best"]
    print(f"  target quietbench best >= 1.00 x iperf3 best: {'met' if q >= i else 'NOT met'}")
    # Each round's bests are minutes apart at most: their ratio cancels the machine's drift,
    # which the bests over all rounds do not.
    paired = sorted(by_round[where, r, "quietbench"] / by_round[where, r, "iperf3"]
                    for (w, r, side) in list(by_round) if w == where and side == "iperf3")
    if paired:
        print(f"  paired by round (each side's best that round): ratios {' '.join(f'{x:.3f}' for x in paired)}"
              f", median {statistics.median(paired):.3f}")
PY
