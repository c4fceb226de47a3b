#!/usr/bin/env bash
# Regenerates fuzz/corpus/TARGET/, which git does not keep (fuzz/.gitignore, fuzz/README.md),
# from what git does keep: the named seeds and regressions (fuzz/seeds/TARGET/,
# fuzz/regressions/TARGET/), the /proc and /sys files captured from machines
# (crates/quietbench-host/tests/fixtures, cited in its README), the plans of docs/, and what the
# real encoders write (crates/quietbench-fuzz/examples/write_seeds.rs). benches/fuzz/run.sh
# grows the rest by fuzzing. Files are named by their SHA-1, as libFuzzer names what it adds, so
# seeding twice adds nothing and what a fuzzing run found stays.
set -euo pipefail
cd "$(dirname "$0")/../.."
corpus=fuzz/corpus
fixtures=crates/quietbench-host/tests/fixtures

add() { # add TARGET FILE...
    local target=$1
    shift
    mkdir -p "$corpus/$target"
    for f in "$@"; do
        [ -s "$f" ] || continue
        cp "$f" "$corpus/$target/$(sha1sum "$f" | cut -c1-40)"
    done
}

# Every named seed and regression, whatever its target: a folder there that names no target
# fails the replay test (crates/quietbench-fuzz/tests/replay.rs), not this script.
for dir in fuzz/seeds/*/ fuzz/regressions/*/; do
    [ -d "$dir" ] || continue
    mapfile -t kept < <(find "$dir" -type f ! -name '.*')
    add "$(basename "$dir")" "${kept[@]}"
done

mapfile -t interrupts < <(find "$fixtures" -path '*proc*' -name 'interrupts*' -type f)
mapfile -t stats < <(find "$fixtures" -path '*proc*' \( -name 'stat' -o -name 'stat-t*' -o -name 'softirqs*' \) -type f)
mapfile -t tasks < <(find "$fixtures" -path '*proc*' \( -name status -o -name sched -o -name schedstat -o -name stat -o -name smaps \) -type f)
mapfile -t cpuinfos < <(find "$fixtures" -name cpuinfo -type f)
mapfile -t sys_cpu < <(find "$fixtures" \( -path '*/sys/devices/system/cpu/*' -o -path '*/proc/irq/*' -o -path '*/transparent_hugepage/*' \) -type f -size -4k)
mapfile -t kernel < <(find "$fixtures" \( -name cmdline -o -name randomize_va_space \) -type f)

add proc_interrupts "${interrupts[@]}"
add proc_stat "${stats[@]}"
add proc_task "${tasks[@]}"
add cpuinfo "${cpuinfos[@]}"
add sys_cpu "${sys_cpu[@]}"
add kernel_files "${kernel[@]}"

# Plans: every ```toml block of docs/plans.md and the example plan (a hosts file is among the
# named seeds, fuzz/seeds/plan/hosts-file).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v dir="$tmp" '/^```toml/{n++; f=sprintf("%s/plan-%02d.toml", dir, n); next} /^```/{f=""; next} f{print > f}' docs/plans.md
add plan "$tmp"/*.toml docs/plan-example.toml

cargo run -q -p quietbench-fuzz --example write_seeds -- "$tmp/encoded"
for dir in "$tmp"/encoded/*/; do
    add "$(basename "$dir")" "$dir"*
done

for dir in "$corpus"/*/; do
    printf '%-16s %4d inputs\n' "$(basename "$dir")" "$(find "$dir" -type f | wc -l)"
done
