#!/usr/bin/env bash
# mem.bandwidth and mem.latency against peers, side by side on the same pinned CPU.
#
# Peers, in order of preference:
#   latency:   lmbench's `lat_mem_rd -t` (random "thrash" order, 64-byte stride) when installed;
#              Debian 12 ships no lmbench package (apt-cache policy lmbench: no candidate), so
#              otherwise a tiny C pointer chase this script compiles from the heredoc below.
#   bandwidth: a tiny STREAM-like C program compiled from the heredoc below (STREAM itself is
#              not packaged either). It is NOT STREAM: same kernels, same byte counting, but
#              it also has a read kernel (sum into 8 scalar partial sums, so gcc -O2 does not
#              serialize it on one FP add chain) and runs for a fixed time like the probe.
# Both C peers are labelled "C peer (not lmbench/STREAM)" in the output. They are compiled with
# gcc -O2 (STREAM's own flags) plus -fno-tree-loop-distribute-patterns, so gcc keeps the copy
# loop a loop with ordinary stores instead of calling glibc's memcpy (which switches to
# non-temporal stores above an L3-derived size): the probe's kernels use ordinary stores too.
# Like the probe's default (huge_pages=1), the C peers advise MADV_HUGEPAGE (HUGE=0 for neither).
#
# Prints, per kernel and per working-set size: peer, ours, ratio ours/peer. For bandwidth 1.00
# means the same GB/s (higher is better); for latency the same ns per load (lower is better).
#
# Usage: benches/peer/mem_vs_peers.sh [SIZE_MIB=256] [SECONDS=5] [CPU=last online CPU] [MAX_LAT_MIB=256]
# Env: HUGE=1|0 (default 1); QB_BIN=path of a quietbench binary to use instead of building one
# (to measure a host that has no Rust toolchain: copy the binary there).
# Needs: gcc, taskset (util-linux), python3, and a release build (without QB_BIN the script runs
# `cargo build --release -p quietbench` first).
set -euo pipefail

size_mib=${1:-256}
seconds=${2:-5}
cpu=${3:-$(($(nproc) - 1))}
max_lat_mib=${4:-256}
huge=${HUGE:-1}

for tool in gcc taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${QB_BIN:-}" ]; then
  qb=$QB_BIN
else
  cargo build --release -p quietbench --manifest-path "$repo/Cargo.toml" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; exit 1; }
  qb="$repo/target/release/quietbench"
fi

cat >"$work/stream_peer.c" <<'C'
/* STREAM-like peer: read (sum), copy, triad over three f64 arrays, one pass per kernel in turn
 * for a fixed time; GB/s = STREAM's bytes (8, 16, 24 per element) / time in that kernel. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double *alloc(size_t bytes, int huge, double fill) {
  double *p; if (posix_memalign((void **)&p, 2 << 20, bytes)) { perror("posix_memalign"); exit(1); }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < bytes / 8; i++) p[i] = fill;
  return p;
}
int main(int argc, char **argv) {
  size_t bytes = (size_t)atol(argv[1]) << 20, n = bytes / 8;
  double secs = atof(argv[2]); int huge = atoi(argv[3]);
  double *restrict a = alloc(bytes, huge, 0.0), *restrict b = alloc(bytes, huge, 1.0), *restrict c = alloc(bytes, huge, 2.0);
  double t[3] = {0}, best[3] = {1e30, 1e30, 1e30}, sink = 0; long passes[3] = {0};
  const double mult[3] = {8, 16, 24}; const char *names[3] = {"read", "copy", "triad"};
  for (int warm = 1, k = 0;; k = (k + 1) % 3) {
    double t0 = now();
    if (k == 0) {
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
      for (size_t i = 0; i < n; i += 8) {
        s0 += b[i]; s1 += b[i + 1]; s2 += b[i + 2]; s3 += b[i + 3];
        s4 += b[i + 4]; s5 += b[i + 5]; s6 += b[i + 6]; s7 += b[i + 7];
      }
      sink += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    } else if (k == 1) {
      for (size_t i = 0; i < n; i++) a[i] = b[i];
    } else {
      for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
    }
    double dt = now() - t0;
    if (warm) { if (k == 2) { warm = 0; secs += now(); } continue; }
    t[k] += dt; passes[k]++; if (dt < best[k]) best[k] = dt;
    if (k == 2 && now() > secs) break;
  }
  for (int k = 0; k < 3; k++)
    printf("%s %.3f %.3f\n", names[k], passes[k] * mult[k] * n / t[k] / 1e9, mult[k] * n / best[k] / 1e9);
  fprintf(stderr, "(checksum %g)\n", sink + a[n / 2]);
  return 0;
}
C

cat >"$work/chase_peer.c" <<'C'
/* Pointer-chase peer: one random cycle (Sattolo, SplitMix64) over every 64-byte line of each
 * working set; ns per load = time of the timed walks / their loads, ~0.5 s per size. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static uint64_t state;
static uint64_t next(void) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
int main(int argc, char **argv) {
  int huge = atoi(argv[1]);
  for (int arg = 2; arg < argc; arg++) {
    size_t bytes = (size_t)atol(argv[arg]), lines = bytes / 64;
    uintptr_t *buf;
    if (posix_memalign((void **)&buf, 2 << 20, bytes)) { perror("posix_memalign"); return 1; }
    if (huge) madvise(buf, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < lines; i++) buf[i * 8] = i;
    for (size_t i = lines - 1; i > 0; i--) {
      size_t j = (size_t)(((unsigned __int128)next() * i) >> 64), x = buf[i * 8];
      buf[i * 8] = buf[j * 8]; buf[j * 8] = x;
    }
    for (size_t i = 0; i < lines; i++) buf[i * 8] = (uintptr_t)&buf[buf[i * 8] * 8];
    volatile uintptr_t *p = (volatile uintptr_t *)buf;
    for (size_t i = 0; i < lines; i++) p = (volatile uintptr_t *)*p;
    const long loads = 1 << 16; long total = 0; double ns = 0, end = now() + 0.5;
    while (now() < end) {
      double t0 = now();
      for (long i = 0; i < loads; i++) p = (volatile uintptr_t *)*p;
      ns += (now() - t0) * 1e9; total += loads;
    }
    printf("%zu %.3f\n", bytes, ns / total);
    fprintf(stderr, "(end %p)\n", (void *)p);
    free(buf);
  }
  return 0;
}
C

gcc -O2 -fno-tree-loop-distribute-patterns -o "$work/stream_peer" "$work/stream_peer.c"
gcc -O2 -o "$work/chase_peer" "$work/chase_peer.c"

metrics() { # JSON file -> "name value" lines of trials[0].metrics
  python3 -c 'import json,sys
for m in json.load(open(sys.argv[1]))["trials"][0]["metrics"]:
    if m.get("value") is not None: print(m["name"], m["value"])' "$1"
}
qb_run() { # probe, then params
  local probe=$1; shift
  local args=()
  for p in "$@"; do args+=(--param "$p"); done
  "$qb" run --local --cpus "$cpu" --probe "$probe" "${args[@]}" --rounds 1 --duration "$seconds" \
    --json "$work/qb.json" >/dev/null 2>"$work/qb.err" || { cat "$work/qb.err" >&2; exit 1; }
  metrics "$work/qb.json"
}

echo "CPU $cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); L3 $(lscpu | awk -F: '/L3/ {gsub(/^ +/, "", $2); print $2}')"
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null); huge_pages=$huge for both sides"
echo
echo "== mem.bandwidth: ${size_mib} MiB per array, ${seconds}s, 1 thread"
echo "peer: C peer (not STREAM), gcc $(gcc -dumpfullversion) -O2; GB/s = mean over the run (STREAM prints the best pass: shown too)"
taskset -c "$cpu" "$work/stream_peer" "$size_mib" "$seconds" "$huge" >"$work/peer_bw" 2>/dev/null
qb_run mem.bandwidth "size_mib=$size_mib" "huge_pages=$huge" >"$work/ours_bw"
printf '  %-6s %12s %12s %12s %8s\n' kernel "peer GB/s" "peer best" "ours GB/s" ratio
while read -r kernel mean best; do
  ours=$(awk -v k="gb_per_sec_$kernel" '$1 == k {print $2}' "$work/ours_bw")
  printf '  %-6s %12.2f %12.2f %12.2f %8.3f\n' "$kernel" "$mean" "$best" "$ours" "$(python3 -c "print($ours / $mean)")"
done <"$work/peer_bw"

echo
echo "== mem.latency: rungs up to ${max_lat_mib} MiB, ${seconds}s, 1 thread"
sizes=()
labels=()
for pair in 16384:16k 131072:128k 1048576:1m 8388608:8m 67108864:64m 268435456:256m 1073741824:1g; do
  bytes=${pair%%:*}
  ((bytes <= max_lat_mib * 1048576)) || continue
  sizes+=("$bytes"); labels+=("${pair##*:}")
done
lat_mem_rd=$(command -v lat_mem_rd || ls /usr/lib/lmbench/bin/*/lat_mem_rd 2>/dev/null | head -1 || true)
if [ -n "$lat_mem_rd" ]; then
  echo "peer: lmbench $lat_mem_rd -t (random order), 64-byte stride"
  # lat_mem_rd prints "size_in_MB latency_ns" on stderr.
  taskset -c "$cpu" "$lat_mem_rd" -t "$max_lat_mib" 64 2>&1 | python3 -c '
import sys
rows = [l.split() for l in sys.stdin if len(l.split()) == 2]
rows = [(float(a), float(b)) for a, b in rows if a[0].isdigit()]
for want in map(int, sys.argv[1:]):
    mb, ns = min(rows, key=lambda r: abs(r[0] * 1048576 - want))
    print(want, ns)' "${sizes[@]}" >"$work/peer_lat"
else
  echo "peer: lmbench is not installed (Debian 12 has no lmbench package): C peer (not lmbench), gcc -O2 pointer chase, same Sattolo cycle"
  taskset -c "$cpu" "$work/chase_peer" "$huge" "${sizes[@]}" >"$work/peer_lat" 2>/dev/null
fi
qb_run mem.latency "max_size_mib=$max_lat_mib" "huge_pages=$huge" >"$work/ours_lat"
printf '  %-6s %12s %12s %8s\n' size "peer ns" "ours ns" ratio
i=0
while read -r _bytes peer_ns; do
  label=${labels[$i]}
  ours=$(awk -v k="load_ns_$label" '$1 == k {print $2}' "$work/ours_lat")
  printf '  %-6s %12.2f %12.2f %8.3f\n' "$label" "$peer_ns" "$ours" "$(python3 -c "print($ours / $peer_ns)")"
  i=$((i + 1))
done <"$work/peer_lat"
