#!/usr/bin/env bash
# disk.rand and disk.seq against fio, side by side on the same file, the same size, the same
# duration, the same pinned CPU: random 16 KiB reads at queue depth 32 and sequential 128 KiB
# reads at queue depth 16, O_DIRECT. fio runs with each of its engines (io_uring, io_uring with
# registered buffers and file, libaio) and, run as root, io_uring with registered buffers in
# huge pages (--mem=shmhuge); its best median is the reference.
#
# Why huge pages count: quietbench's I/O buffers sit in transparent huge pages (it reports
# io_buffers_huge_pages), so a 128 KiB request is one DMA segment, not 32. On a virtio disk
# without indirect descriptors that decides how many requests fit in its ring, and fio's
# default malloc'd buffers moved about half the MB/s here. fio's huge-page buffers come from
# the hugetlb pool: the script reserves 8 pages (vm.nr_hugepages) for the run and puts the
# old value back on exit; without root it says so and leaves that configuration out. Runs interleave,
# the order rotating each repeat, so drift does not favour one side. Prints every run, then
# per test: fio's best engine, our median, and the ratio (ours / fio; 1.00 means equal).
#
# Usage: benches/peer/disk_vs_fio.sh [REPEATS=5] [SECONDS=5] [SIZE_MIB=1024] [FILE] [CPU]
#   FILE defaults to /var/tmp/quietbench-disk-peer.dat (created and filled with data once by
#   quietbench; it must be on the disk under test, not tmpfs); CPU to the last online CPU.
# Needs: fio (Debian: apt-get install fio), python3, taskset (util-linux), and a release build
# (the script runs `cargo build --release -p quietbench` first).
set -euo pipefail

repeats=${1:-5}
seconds=${2:-5}
size_mib=${3:-1024}
file=${4:-/var/tmp/quietbench-disk-peer.dat}
cpu=${5:-$(( $(nproc) - 1 ))}

for tool in fio taskset python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed (see the header of $0)" >&2; exit 1; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
cargo build --release --quiet -p quietbench --manifest-path "$repo/Cargo.toml"
qb="$repo/target/release/quietbench"
work=$(mktemp -d)
hugepages_before=
cleanup() {
  if [ -n "$hugepages_before" ]; then echo "$hugepages_before" > /proc/sys/vm/nr_hugepages; fi
  rm -rf "$work"
}
trap cleanup EXIT

tools=(quietbench fio:io_uring fio:io_uring_fixed fio:libaio)
if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/nr_hugepages ]; then
  hugepages_before=$(cat /proc/sys/vm/nr_hugepages)
  echo $((hugepages_before + 8)) > /proc/sys/vm/nr_hugepages
  if [ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge 4 ]; then
    tools+=(fio:io_uring_fixed_huge)
  else
    echo "note: the kernel gave no free huge pages; fio runs without huge-page buffers" >&2
  fi
else
  echo "note: not root: fio runs without huge-page buffers (quietbench's are in huge pages)" >&2
fi

# Lay the file out (quietbench writes real data once; fio then finds it complete).
"$qb" run --local --cpus "$cpu" --probe disk.seq --param "path=$file" --param "size_mib=$size_mib" \
  --duration 0.5 --rounds 1 >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }

echo "disk.rand / disk.seq vs fio: $repeats repeats x ${seconds}s, CPU $cpu, $file (${size_mib} MiB)"
echo "$(fio --version)   device: $(df --output=source "$file" | tail -1)   kernel $(uname -r)"

# test name -> fio arguments and quietbench probe
declare -A fio_rw=([rand]=randread [seq]=read)
declare -A fio_bs=([rand]=16k [seq]=128k)
declare -A qd=([rand]=32 [seq]=16)
declare -A probe=([rand]=disk.rand [seq]=disk.seq)

run_fio() { # test engine
  local extra=()
  case $2 in
    io_uring) engine=io_uring ;;
    io_uring_fixed) engine=io_uring; extra=(--fixedbufs=1 --registerfiles=1) ;;
    libaio) engine=libaio ;;
    io_uring_fixed_huge) engine=io_uring; extra=(--fixedbufs=1 --registerfiles=1 --mem=shmhuge --hugepage-size=2m) ;;
  esac
  fio --name=peer --filename="$file" --size="${size_mib}M" --rw="${fio_rw[$1]}" --bs="${fio_bs[$1]}" \
    --iodepth="${qd[$1]}" --direct=1 --ioengine="$engine" "${extra[@]}" --time_based \
    --runtime="$seconds" --norandommap --randrepeat=0 --cpus_allowed="$cpu" --output-format=json \
    > "$work/fio.json" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["jobs"][0]["read"]; print(r["iops"], r["bw_bytes"]/1e6)' "$work/fio.json"
}

run_qb() { # test
  "$qb" run --local --cpus "$cpu" --probe "${probe[$1]}" --param "path=$file" --param "size_mib=$size_mib" \
    --duration "$seconds" --rounds 1 --json "$work/qb.json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
  python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
m = {x["name"]: x["value"] for x in t["metrics"]}
print(m["read_iops"], m["read_mb_per_sec"], t["params"]["engine"], "huge-pages=%g%%" % m.get("io_buffers_huge_pages", float("nan")))' "$work/qb.json"
}

for i in $(seq 1 "$repeats"); do
  for test in rand seq; do
    # Rotate the order each repeat.
    n=${#tools[@]}
    for k in $(seq 0 $((n - 1))); do
      tool=${tools[$(( (k + i) % n ))]}
      if [ "$tool" = quietbench ]; then
        line=$(run_qb "$test")
      else
        line=$(run_fio "$test" "${tool#fio:}")
      fi
      echo "$test $tool $line $i" >> "$work/results"
      printf '  repeat %2d %-4s %-22s %10.0f IOPS %8.1f MB/s  %s\n' "$i" "$test" "$tool" $(echo "$line" | cut -d' ' -f1-2) "$(echo "$line" | cut -d' ' -f3-)"
    done
  done
done

python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for test, label in (("rand", "16k randread QD32"), ("seq", "128k read QD16")):
    by = {}
    for r in rows:
        if r[0] == test:
            by.setdefault(r[1], []).append((float(r[2]), float(r[3])))
    med = {tool: (statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals), vals)
           for tool, vals in by.items()}
    ours = med.pop("quietbench")
    best = max(med, key=lambda t: med[t][0])
    cv = lambda vals: statistics.stdev(v[0] for v in vals) / statistics.mean(v[0] for v in vals) * 100 if len(vals) > 1 else float("nan")
    print(f"{label}:")
    for tool, (iops, mb, vals) in sorted(med.items()):
        print(f"  {tool:22s} median {iops:10.0f} IOPS {mb:8.1f} MB/s  CV {cv(vals):5.1f}%")
    print(f"  {'quietbench':22s} median {ours[0]:10.0f} IOPS {ours[1]:8.1f} MB/s  CV {cv(ours[2]):5.1f}%")
    print(f"  ratio quietbench / fio best ({best}): IOPS {ours[0] / med[best][0]:.3f}  MB/s {ours[1] / med[best][1]:.3f}")
    # The device drifts between repeats (15-27% on a cloud VM's virtio disk), and the best of
    # three engines' medians is biased upward by that noise (the winner's curse). Runs of one
    # repeat are adjacent in time: the median over repeats of ours / fio's best engine in the
    # same repeat cancels the drift.
    per = {}
    for r in rows:
        if r[0] == test and r[1] in ("quietbench", best):
            per.setdefault(r[-1], {})[r[1]] = float(r[2])
    paired = [v["quietbench"] / v[best] for v in per.values() if len(v) == 2]
    if paired:
        print(f"  ratio paired by repeat (median of {len(paired)} per-repeat ratios to {best}): {statistics.median(paired):.3f}")
PY
