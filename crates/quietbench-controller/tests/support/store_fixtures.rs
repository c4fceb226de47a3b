//! Runs, hosts and trials built in memory for the store tests (tests/store.rs and
//! tests/store_history.rs): exact values, so a round trip can be compared field by field.

#![allow(dead_code)] // each test file uses a different subset

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use quietbench_controller::record::figures::TrialFigure;
use quietbench_controller::record::{
    HistogramRecord, HostKind, HostRecord, IntervalRecord, MetricRecord, RunRecord, RunSettings,
    TrialRecord,
};
use quietbench_controller::schedule::VariantSpec;
use quietbench_proto::v1 as pb;

pub const EPYC: &str = "AMD EPYC 7R13 Processor";
pub const XEON: &str = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz";

#[path = "postgres_server.rs"]
pub mod postgres_server;

/// The store a test uses: an SQLite file in `dir`, or with `QUIETBENCH_TEST_STORE=postgres` a
/// fresh database on a real PostgreSQL server. `.ci/run` runs the store's tests both ways.
pub fn store_path(dir: &tempfile::TempDir) -> PathBuf {
    if on_postgres() {
        PathBuf::from(postgres_server::fresh_database())
    } else {
        sqlite_path(dir)
    }
}

/// An SQLite store file in `dir`, for what only SQLite has (files, WAL, damage on disk).
pub fn sqlite_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("nested/folder/results.sqlite3")
}

/// The store tests run on PostgreSQL (`QUIETBENCH_TEST_STORE=postgres`).
pub fn on_postgres() -> bool {
    match std::env::var("QUIETBENCH_TEST_STORE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("QUIETBENCH_TEST_STORE={other}: give sqlite or postgres"),
    }
}

/// A histogram recorded here and sent through the agent's encoding, decoded the way the
/// controller decodes what it receives.
pub fn histogram(values: &[u64], clamped: u64, dropped: u64) -> (Histogram<u64>, HistogramRecord) {
    let mut original = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for &v in values {
        original.record(v).unwrap();
    }
    let mut encoded = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&original, &mut encoded)
        .unwrap();
    let hist: Histogram<u64> = Deserializer::new()
        .deserialize(&mut encoded.as_slice())
        .unwrap();
    let record = HistogramRecord {
        hist,
        encoded,
        clamped,
        dropped,
    };
    (original, record)
}

pub fn fingerprint(model: &str, hostname: &str) -> pb::Fingerprint {
    pb::Fingerprint {
        cpu: Some(pb::CpuIdentity {
            vendor: "AuthenticAMD".into(),
            model_name: model.into(),
            family: Some(25),
            model: Some(1),
            stepping: Some(1),
            microcode: Some("0xa0011d1".into()),
        }),
        logical_cpus: 4,
        online_cpus: vec![0, 1, 2, 3],
        kernel_release: "6.8.0-1021-aws".into(),
        clocksource: "kvm-clock".into(),
        hostname: hostname.into(),
        cpu_flags: vec!["avx2".into(), "sse4_2".into()],
        topology: Some(pb::Topology {
            sockets: 1,
            cores: 2,
            threads_per_core: 2,
            nodes: vec![pb::NumaNode {
                id: 0,
                cpus: vec![0, 1, 2, 3],
            }],
            caches: vec![pb::CacheLevel {
                level: 3,
                kind: "Unified".into(),
                size_bytes: Some(32 << 20),
                instances: 1,
                shared_cpus: vec![0, 1, 2, 3],
            }],
        }),
        instance: Some(pb::InstanceIdentity {
            instance_type: Some("c6a.xlarge".into()),
            availability_zone: Some("eu-west-1a".into()),
            ..Default::default()
        }),
        steal_fraction_since_boot: Some(0.0012),
        ..Default::default()
    }
}

pub fn host(idx: usize, model: &str) -> HostRecord {
    HostRecord {
        address: format!("10.0.0.{}:7420", idx + 1),
        kind: if idx == 0 {
            HostKind::Local
        } else {
            HostKind::Remote
        },
        agent_version: "0.1.0".into(),
        fingerprint: fingerprint(model, &format!("ip-10-0-0-{}", idx + 1)),
        tuning: vec![
            pb::ControlReport {
                control: "governor".into(),
                target: "cpu2".into(),
                outcome: pb::control_report::Outcome::Applied as i32,
                detail: "powersave -> performance".into(),
            },
            pb::ControlReport {
                control: "aslr".into(),
                target: "system".into(),
                outcome: pb::control_report::Outcome::Skipped as i32,
                detail: String::new(),
            },
        ],
        caps: None,
    }
}

pub fn settings() -> RunSettings {
    RunSettings {
        probes: vec!["cpu.primes".into()],
        params: BTreeMap::from([("max_prime".into(), "10000".into())]),
        rounds: 2,
        duration_ms: 300,
        interval_ms: 100,
        cpus: vec![2, 3],
        tune: true,
        unpinned: false,
        variants: vec![VariantSpec {
            name: "cpu.primes".into(),
            probe: "cpu.primes".into(),
            params: BTreeMap::from([("max_prime".into(), "10000".into())]),
        }],
        warmup: 1,
        // Above i64::MAX, as half of all seeds are.
        seed: 0xdead_beef_cafe_f00d,
        // Not the default, so the round trip shows it is kept.
        round_sync: false,
        // Kept for compare runs; round-tripped here like every other setting.
        compare_figure: Some(TrialFigure::Mean),
        exec_figure: None,
        capacity_slo: None,
    }
}

pub fn new_run(run_id: &str, started_secs: u64) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        started_at: UNIX_EPOCH + Duration::new(started_secs, 123_456_789),
        finished_at: None,
        settings: settings(),
        hosts: Vec::new(),
        trials: Vec::new(),
        error: None,
        host_failures: Vec::new(),
        fleet: Vec::new(),
    }
}

/// A trial of `cpu.primes` whose events_per_sec is `rate`; `seq` varies the optional parts.
pub fn trial(seq: usize, host: usize, round: u32, rate: f64) -> TrialRecord {
    let start = 1_750_000_000_000_000_000 + seq as u64 * 1_000_000_000;
    let (_, latency) = histogram(&[900 + seq as u64, 1_000, 1_100, 250_000], seq as u64, 2);
    TrialRecord {
        probe: "cpu.primes".into(),
        variant: "cpu.primes".into(),
        warmup: round == 1,
        host,
        round,
        trial_id: format!("run-{seq}"),
        start_unix_ns: start,
        end_unix_ns: start + 300_000_123,
        cancelled: seq == 5,
        params: BTreeMap::from([
            ("max_prime".into(), "10000".into()),
            ("threads".into(), "1".into()),
        ]),
        placement: (seq % 3 != 2).then(|| pb::Placement {
            policy: "quiet".into(),
            threads: vec![pb::ThreadPlacement {
                thread_index: 0,
                planned_cpu: 2,
                affinity_cpus: vec![2],
                observed_cpu: 2,
            }],
            housekeeping_cpus: vec![0],
            notes: vec!["cpu 1 takes NIC interrupts".into()],
            shares_cpus: false,
            peer_flow_cpus: vec![pb::PeerFlowCpu { cpu: 1, flows: 4 }],
        }),
        intervals: 3,
        metrics: vec![
            MetricRecord {
                name: "events_per_sec".into(),
                unit: "events/s".into(),
                value: Some(rate),
                interval_values: vec![rate * 0.99, rate * 1.01, f64::INFINITY, f64::NAN],
                histogram: None,
            },
            MetricRecord {
                name: "event_latency".into(),
                unit: "ns".into(),
                value: (seq != 1).then_some(1_000.5),
                interval_values: Vec::new(),
                histogram: Some(latency),
            },
        ],
        noise: match seq % 3 {
            0 => Some(pb::NoiseSample {
                elapsed_ns: 300_000_000,
                cpus: vec![2],
                steal_fraction: Some(0.003),
                interrupts: Some(12),
                involuntary_switches: Some(1),
                cpu_mhz: Some(2_900.25),
                unavailable: vec!["migrations".into()],
                ..Default::default()
            }),
            // A sample with every field at its default encodes to no bytes: still Some.
            1 => Some(pb::NoiseSample::default()),
            _ => None,
        },
        peer: (seq == 4).then(|| "10.0.0.9:7420".to_string()),
        block_device: None,
        interval_records: (0..3)
            .map(|index| IntervalRecord {
                index,
                start_unix_ns: start + u64::from(index) * 100_000_000,
                end_unix_ns: start + u64::from(index + 1) * 100_000_000,
                values: vec![("events_per_sec".into(), rate + f64::from(index) / 7.0)],
                histograms: vec![(
                    "event_latency".into(),
                    histogram(&[1_000 + u64::from(index)], 0, 0).1.encoded,
                )],
                noise: (index != 1).then(|| pb::NoiseSample {
                    elapsed_ns: 100_000_000,
                    migrations: Some(u64::from(index)),
                    ..Default::default()
                }),
            })
            .collect(),
    }
}

/// Records have no PartialEq (histograms, protobuf and f64 inside); their Debug form shows
/// every field, NaN included, so equal Debug output is an exact match.
pub fn assert_same_run(a: &RunRecord, b: &RunRecord) {
    assert_eq!(format!("{a:#?}"), format!("{b:#?}"));
}
