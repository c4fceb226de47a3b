//! The memory probes' inner loops, in isolation: the pointer chase at L1 and L2 sizes (its
//! loop must cost nothing beside the load: one load per ~4-5 cycles at 16 KiB), and the
//! STREAM kernels on cache-resident arrays, where a kernel that failed to vectorize shows at
//! once (DRAM-sized arrays would hide it behind memory). The DRAM figures come from the probes
//! themselves and the peer script (peer/mem_vs_peers.sh).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quietbench_probe::mem::{Kernel, LINE_BYTES, PointerCycle, StreamArrays};

fn chase(c: &mut Criterion) {
    const LOADS: u64 = 4096;
    let mut group = c.benchmark_group("mem_chase");
    group.throughput(Throughput::Elements(LOADS));
    for (name, bytes) in [("16k", 16 << 10), ("128k", 128 << 10)] {
        let mut cycle = PointerCycle::new(bytes / LINE_BYTES, 1, true).expect("allocate");
        cycle.walk(cycle.len() as u64);
        group.bench_function(name, |b| b.iter(|| cycle.walk(black_box(LOADS))));
    }
    group.finish();
}

fn kernels(c: &mut Criterion) {
    let mut group = c.benchmark_group("mem_kernels_32k");
    // 32 KiB per array: b and c (and a) stay in L1/L2, so the kernels' own speed shows.
    let mut arrays = StreamArrays::new(32 << 10, true).expect("allocate");
    for (name, kernel) in [
        ("read", Kernel::Read),
        ("copy", Kernel::Copy),
        ("triad", Kernel::Triad),
    ] {
        group.throughput(Throughput::Bytes(arrays.bytes(kernel)));
        group.bench_function(name, |b| b.iter(|| arrays.pass(black_box(kernel))));
    }
    group.finish();
}

criterion_group!(benches, chase, kernels);
criterion_main!(benches);
