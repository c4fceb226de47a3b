//! A run built in memory for the report tests, shaped like the route-search team's experiment
//! (docs: CONTEXT.md §1): c5.large hosts that drew different CPUs, A and B on each, a warm-up
//! round, interval histograms and noise. Shared by the store's and the reports' unit tests and
//! the controller's report tests (tests/html_report.rs, tests/json_report.rs), through the
//! `test-records` feature.
//!
//! Values are made by a fixed linear congruential generator, not a random crate: the reports are
//! pure functions of the record and the tests check exact counts.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use quietbench_proto::v1 as pb;

use crate::record::{
    HistogramRecord, HostKind, HostRecord, IntervalRecord, MetricRecord, RunRecord, RunSettings,
    TrialRecord,
};
use crate::schedule::VariantSpec;

/// The run's start, ns since the epoch.
pub const START_NS: u64 = 1_700_000_000_000_000_000;
/// Intervals per trial.
pub const INTERVALS: u32 = 3;
/// Latency samples recorded per interval.
pub const SAMPLES: u64 = 400;
/// Where the sample's injection attempts sit: a hostname and a parameter value.
pub const EVIL_HOSTNAME: &str = "<script>alert('host')</script>";
/// A --param value that tries to close an attribute.
pub const EVIL_PARAM: &str = "\"><img src=x onerror=alert(1)>";

/// CPU models of the sample's hosts, with the speed each gives `cpu.primes`.
const MODELS: [(&str, u32, f64); 3] = [
    ("Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz", 4, 1000.0),
    ("Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz", 7, 1060.0),
    ("Intel(R) Xeon(R) Platinum 8223CL CPU @ 3.00GHz", 7, 1030.0),
];

pub(super) struct Lcg(pub(super) u64);

impl Lcg {
    /// Uniform in [0, 1).
    pub(super) fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(super) fn encode(h: &Histogram<u64>) -> Vec<u8> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("a histogram encodes");
    bytes
}

fn host(i: usize, model: usize) -> HostRecord {
    let (name, stepping, _) = MODELS[model];
    HostRecord {
        address: format!("10.0.1.{}:7171", 10 + i),
        kind: HostKind::Remote,
        agent_version: "0.1.0".into(),
        fingerprint: pb::Fingerprint {
            cpu: Some(pb::CpuIdentity {
                vendor: "GenuineIntel".into(),
                model_name: name.into(),
                family: Some(6),
                model: Some(85),
                stepping: Some(stepping),
                microcode: None,
            }),
            logical_cpus: 2,
            online_cpus: vec![0, 1],
            kernel_release: "6.1.0-18-cloud-amd64".into(),
            clocksource: "kvm-clock".into(),
            hostname: if i == 0 {
                EVIL_HOSTNAME.into()
            } else {
                format!("ip-10-0-1-{}", 10 + i)
            },
            ..Default::default()
        },
        tuning: Vec::new(),
        caps: None,
    }
}

/// Hosts by CPU model index: two models interleaved as EC2 hands them out, and one rare one.
pub const HOST_MODELS: [usize; 7] = [1, 0, 0, 1, 2, 0, 1];

/// The sample run: 7 hosts, variants A and B of cpu.primes, 1 warm-up + 4 measured rounds,
/// every trial with `INTERVALS` intervals of rates, latency histograms and noise. Built once
/// per test binary (encoding its histograms takes most of a second unoptimized), then cloned.
pub fn sample_run() -> RunRecord {
    static RUN: OnceLock<RunRecord> = OnceLock::new();
    RUN.get_or_init(build).clone()
}

fn build() -> RunRecord {
    let hosts: Vec<HostRecord> = HOST_MODELS
        .iter()
        .enumerate()
        .map(|(i, &m)| host(i, m))
        .collect();
    let mut params = BTreeMap::new();
    params.insert("limit".to_string(), EVIL_PARAM.to_string());
    let variants = vec![
        VariantSpec {
            name: "A".into(),
            probe: "cpu.primes".into(),
            params: params.clone(),
        },
        VariantSpec {
            name: "B".into(),
            probe: "cpu.primes".into(),
            params: BTreeMap::from([("limit".to_string(), "20000".to_string())]),
        },
    ];
    let settings = RunSettings {
        probes: vec!["cpu.primes".into()],
        params,
        rounds: 4,
        duration_ms: 3000,
        interval_ms: 1000,
        cpus: Vec::new(),
        tune: true,
        unpinned: false,
        variants: variants.clone(),
        warmup: 1,
        seed: 42,
        round_sync: true,
        compare_figure: None,
        exec_figure: None,
        capacity_slo: None,
    };
    let mut rng = Lcg(7);
    let mut trials = Vec::new();
    let rounds = settings.warmup + settings.rounds;
    for round in 1..=rounds {
        for (v, variant) in variants.iter().enumerate() {
            for (h, &model) in HOST_MODELS.iter().enumerate() {
                let slot = u64::from(round - 1) * 2 + v as u64;
                let start = START_NS + slot * 4_000_000_000 + h as u64 * 50_000_000;
                let host_bias = 1.0 + ((h * 37 % 11) as f64 - 5.0) / 500.0;
                let warm = if round <= settings.warmup { 0.96 } else { 1.0 };
                let rate = MODELS[model].2 * host_bias * warm * if v == 1 { 1.025 } else { 1.0 };
                let mut merged =
                    Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds");
                let mut interval_records = Vec::new();
                let mut interval_values = Vec::new();
                for i in 0..INTERVALS {
                    let value = rate * (1.0 + (rng.next() - 0.5) * 0.01);
                    let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3)
                        .expect("valid bounds");
                    let mean_ns = 1e9 / value;
                    for _ in 0..SAMPLES {
                        let u = rng.next();
                        let tail = if u > 0.99 { 4.0 + u * 10.0 } else { 1.0 };
                        let ns = mean_ns * (0.9 + rng.next() * 0.2) * tail;
                        hist.record(ns as u64).expect("in range");
                    }
                    merged.add(&hist).expect("same bounds");
                    let i_start = start + u64::from(i) * 1_000_000_000;
                    let steal = if h == 3 && round == 3 {
                        0.04 + rng.next() * 0.02
                    } else {
                        rng.next() * 0.002
                    };
                    interval_records.push(IntervalRecord {
                        index: i,
                        start_unix_ns: i_start,
                        end_unix_ns: i_start + 1_000_000_000,
                        values: vec![("events_per_sec".into(), value)],
                        histograms: vec![("event_latency".into(), encode(&hist))],
                        noise: Some(pb::NoiseSample {
                            elapsed_ns: 1_000_000_000,
                            cpus: vec![1],
                            steal_fraction: Some(steal),
                            interrupts: Some(150 + (rng.next() * 100.0) as u64),
                            softirqs: Some(40),
                            foreign_cpu_fraction: Some(rng.next() * 0.004 + steal / 2.0),
                            runqueue_wait_ns: None,
                            involuntary_switches: Some(2),
                            migrations: Some(0),
                            cpu_mhz: None,
                            unavailable: Vec::new(),
                            ..Default::default()
                        }),
                    });
                    interval_values.push(value);
                }
                let mean = interval_values.iter().sum::<f64>() / interval_values.len() as f64;
                trials.push(TrialRecord {
                    probe: variant.probe.clone(),
                    variant: variant.name.clone(),
                    warmup: round <= settings.warmup,
                    host: h,
                    round,
                    trial_id: format!("t-{round}-{v}-{h}"),
                    start_unix_ns: start,
                    end_unix_ns: start + u64::from(INTERVALS) * 1_000_000_000,
                    cancelled: false,
                    params: variant.params.clone(),
                    placement: None,
                    intervals: INTERVALS,
                    metrics: vec![
                        MetricRecord {
                            name: "events_per_sec".into(),
                            unit: "events/s".into(),
                            value: Some(mean),
                            interval_values,
                            histogram: None,
                        },
                        MetricRecord {
                            name: "event_latency".into(),
                            unit: "ns".into(),
                            value: Some(merged.mean()),
                            interval_values: Vec::new(),
                            histogram: Some(HistogramRecord {
                                encoded: encode(&merged),
                                hist: merged,
                                clamped: 0,
                                dropped: 0,
                            }),
                        },
                    ],
                    noise: interval_records.last().and_then(|r| r.noise.clone()),
                    peer: None,
                    block_device: None,
                    interval_records,
                });
            }
        }
    }
    // Trials in the order they ran, as the controller keeps them.
    trials.sort_by_key(|t| t.start_unix_ns);
    RunRecord {
        run_id: "3f0c9a2e-7d41-4c1b-9a55-0c7e2b1d9f10".into(),
        started_at: UNIX_EPOCH + Duration::from_nanos(START_NS),
        finished_at: Some(UNIX_EPOCH + Duration::from_nanos(START_NS + 45_000_000_000)),
        settings,
        hosts,
        trials,
        error: None,
        host_failures: Vec::new(),
        fleet: Vec::new(),
    }
}

/// Hosts of the sample compare run.
pub const COMPARE_HOSTS: usize = 2;
/// Its measured rounds, after one warm-up round.
pub const COMPARE_ROUNDS: u32 = 8;

/// A `compare` run as `quietbench compare --agent X --agent Y` records it: one paired exec
/// variant ("A+B") on two hosts, 1 warm-up + 8 measured rounds, B about 3% slower than A in
/// every trial's pairs. Each trial carries what the verdict reads: A's wall times and the
/// per-pair B/A ratios (ppm) as histograms, and both sides' invocation rates.
pub fn sample_compare_run() -> RunRecord {
    let mut run = sample_run();
    let cmd = |c: &str| c.to_string();
    let params = BTreeMap::from([
        ("cmd".to_string(), cmd("gzip -kf corpus.bin")),
        ("cmd_b".to_string(), cmd("zstd -qf corpus.bin")),
        ("shell".to_string(), cmd("false")),
        ("aslr".to_string(), cmd("on")),
    ]);
    run.run_id = "9a41c3d0-5b2e-4f6a-8c17-3e5d0b9a2f64".into();
    run.hosts.truncate(COMPARE_HOSTS);
    run.settings = RunSettings {
        probes: vec!["exec".into()],
        params: BTreeMap::new(),
        rounds: COMPARE_ROUNDS,
        duration_ms: 1000,
        interval_ms: 1000,
        cpus: Vec::new(),
        tune: false,
        unpinned: false,
        variants: vec![VariantSpec {
            name: "A+B".into(),
            probe: "exec".into(),
            params: params.clone(),
        }],
        warmup: 1,
        seed: 7,
        round_sync: true,
        compare_figure: Some(crate::record::figures::TrialFigure::Median),
        exec_figure: None,
        capacity_slo: None,
    };
    let mut rng = Lcg(11);
    let histogram = |values: &[u64]| {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds");
        for v in values {
            h.record(*v).expect("in range");
        }
        HistogramRecord {
            encoded: encode(&h),
            hist: h,
            clamped: 0,
            dropped: 0,
        }
    };
    let metric =
        |name: &str, unit: &str, value: Option<f64>, h: Option<HistogramRecord>| MetricRecord {
            name: name.into(),
            unit: unit.into(),
            value,
            interval_values: value.into_iter().collect(),
            histogram: h,
        };
    run.trials.clear();
    for round in 1..=COMPARE_ROUNDS + 1 {
        for host in 0..COMPARE_HOSTS {
            // 20 pairs of about 47 ms (A) and 3% more (B), a little noise on each.
            let a: Vec<u64> = (0..20)
                .map(|_| (47e6 * (1.0 + (rng.next() - 0.5) * 0.02)) as u64)
                .collect();
            let ratios: Vec<u64> = (0..20)
                .map(|_| (1.03e6 * (1.0 + (rng.next() - 0.5) * 0.01)) as u64)
                .collect();
            let a_total_s = a.iter().sum::<u64>() as f64 / 1e9;
            let start = START_NS + u64::from(round) * 4_000_000_000 + host as u64 * 50_000_000;
            run.trials.push(TrialRecord {
                probe: "exec".into(),
                variant: "A+B".into(),
                warmup: round == 1,
                host,
                round,
                trial_id: format!("c-{round}-{host}"),
                start_unix_ns: start,
                end_unix_ns: start + 2_000_000_000,
                cancelled: false,
                params: params.clone(),
                placement: None,
                intervals: 1,
                metrics: vec![
                    metric(
                        "invocations_per_sec",
                        "invocations/s",
                        Some(20.0 / a_total_s),
                        None,
                    ),
                    metric(
                        "b_invocations_per_sec",
                        "invocations/s",
                        Some(20.0 / (a_total_s * 1.03)),
                        None,
                    ),
                    metric("wall_time", "ns", None, Some(histogram(&a))),
                    metric("b_over_a_wall_ppm", "ppm", None, Some(histogram(&ratios))),
                ],
                noise: None,
                peer: None,
                block_device: None,
                interval_records: Vec::new(),
            });
        }
    }
    run
}
