//! The per-sample path of every probe thread: read the clock, record into the thread's own
//! histogram, check the cancel flag. This is the agent's overhead per event; compare it with the
//! event itself (`sysbench_cpu_event/10000`, one cpu.primes event) to get the overhead share.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use quietbench_probe::histogram::{new_latency_histogram, record_clamped};
use quietbench_probe::primes::sysbench_cpu_event;

fn per_sample(c: &mut Criterion) {
    let mut hist = new_latency_histogram();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    c.bench_function("record_clamped", |b| {
        b.iter(|| {
            // xorshift: spread values over the range, as real latencies are.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            black_box(record_clamped(&mut hist, black_box(x % 10_000_000)))
        })
    });

    let cancel = AtomicBool::new(false);
    let mut hist = new_latency_histogram();
    let mut t0 = Instant::now();
    c.bench_function("event_overhead_clock_record_cancel", |b| {
        b.iter(|| {
            let t1 = Instant::now();
            let ns = t1.duration_since(t0).as_nanos() as u64;
            let clamped = record_clamped(&mut hist, ns);
            t0 = t1;
            black_box((clamped, cancel.load(Ordering::Relaxed)))
        })
    });

    c.bench_function("sysbench_cpu_event/10000", |b| {
        b.iter(|| sysbench_cpu_event(black_box(10_000)))
    });
}

criterion_group!(benches, per_sample);
criterion_main!(benches);
