//! Interval encoding on the supervisor thread: HdrHistogram V2 + DEFLATE of one interval's
//! histogram, and decoding it again (what the controller does per interval).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hdrhistogram::Histogram;
use quietbench_probe::histogram::{
    decode_v2, encode_v2_deflate, new_latency_histogram, record_clamped,
};

/// `samples` latencies around `center_ns` with a long tail, from a fixed-seed generator.
fn interval(samples: usize, center_ns: u64) -> Histogram<u64> {
    let mut hist = new_latency_histogram();
    let mut x: u64 = 42;
    for _ in 0..samples {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        // Exponential tail on top of the center: most samples near it, a few far out.
        let v = center_ns as f64 * (1.0 + 0.05 * -(1.0 - u).ln());
        record_clamped(&mut hist, v as u64);
    }
    hist
}

fn codec(c: &mut Criterion) {
    // cpu.primes: ~2,500 events of ~400 us in a 1 s interval.
    let primes = interval(2_500, 400_000);
    // A fast probe: a million ~2 us samples in an interval, a much wider histogram.
    let fast = interval(1_000_000, 2_000);
    for (name, hist) in [
        ("cpu_primes_interval", &primes),
        ("million_samples_interval", &fast),
    ] {
        let bytes = encode_v2_deflate(hist).unwrap();
        println!(
            "{name}: {} samples encode to {} bytes",
            hist.len(),
            bytes.len()
        );
        c.bench_function(&format!("encode_v2_deflate/{name}"), |b| {
            b.iter(|| encode_v2_deflate(black_box(hist)).unwrap())
        });
        c.bench_function(&format!("decode_v2/{name}"), |b| {
            b.iter(|| decode_v2(black_box(&bytes)).unwrap())
        });
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
