//! Records built in memory for unit tests: hosts of a named CPU model, trials that carry one
//! value, and settings with nothing else in them.
//!
//! [`sample_run`]: a whole run shaped like a real experiment, for the reports and the store;
//! [`http_run`]: http trials of known histograms, and a whole `compare --probe http` run.

pub mod http_run;
pub mod sample_run;

use std::collections::BTreeMap;

use quietbench_proto::v1 as pb;

use super::{HostKind, HostRecord, MetricRecord, RunRecord, RunSettings, TrialRecord};
use crate::record::figures::TrialFigure;
use crate::schedule::VariantSpec;

/// Host `i` on 127.0.0.1:7000+i, whose CPU is `model`.
pub fn host(i: usize, model: &str) -> HostRecord {
    HostRecord {
        address: format!("127.0.0.1:{}", 7000 + i),
        kind: HostKind::Remote,
        agent_version: "test".into(),
        fingerprint: pb::Fingerprint {
            cpu: Some(pb::CpuIdentity {
                model_name: model.into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        tuning: Vec::new(),
        caps: None,
    }
}

/// A trial of `probe` (the variant named `variant`) on `host` in `round` with one metric.
pub fn value_trial(
    (probe, variant): (&str, &str),
    host: usize,
    round: u32,
    (metric, unit, value): (&str, &str, f64),
) -> TrialRecord {
    TrialRecord {
        probe: probe.into(),
        variant: variant.into(),
        warmup: false,
        host,
        round,
        trial_id: format!("{host}-{round}-{variant}"),
        start_unix_ns: 0,
        end_unix_ns: 0,
        cancelled: false,
        params: BTreeMap::new(),
        placement: None,
        intervals: 1,
        metrics: vec![MetricRecord {
            name: metric.into(),
            unit: unit.into(),
            value: Some(value),
            interval_values: Vec::new(),
            histogram: None,
        }],
        noise: None,
        peer: None,
        block_device: None,
        interval_records: Vec::new(),
    }
}

/// An empty run of `probe` with these variants (names; each of `probe`), `rounds` rounds and,
/// for a compare run, its figure.
pub fn empty_run(
    probe: &str,
    variants: &[&str],
    rounds: u32,
    compare_figure: Option<TrialFigure>,
) -> RunRecord {
    let settings = RunSettings {
        probes: vec![probe.into()],
        params: BTreeMap::new(),
        rounds,
        duration_ms: 1000,
        interval_ms: 1000,
        cpus: Vec::new(),
        tune: false,
        unpinned: false,
        variants: variants
            .iter()
            .map(|name| VariantSpec {
                name: (*name).into(),
                probe: probe.into(),
                params: BTreeMap::new(),
            })
            .collect(),
        warmup: 0,
        seed: 7,
        round_sync: true,
        compare_figure,
        exec_figure: None,
        capacity_slo: None,
    };
    RunRecord::new(
        "test-run".into(),
        std::time::SystemTime::UNIX_EPOCH,
        settings,
    )
}
