//! Compare runs judged per CPU model, on runs built in memory: B 3% faster on one model and
//! unchanged on the other is an interaction; B 3% faster on both is not.

use std::collections::BTreeMap;

use quietbench_proto::v1 as pb;

use super::*;
use crate::record::{HostKind, HostRecord, MetricRecord, RunSettings, TrialRecord};
use crate::schedule::VariantSpec;

const ROUNDS: u32 = 8;

fn trial(host: usize, round: u32, variant: &str, rate: f64) -> TrialRecord {
    TrialRecord {
        probe: "exec".into(),
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
            name: "invocations_per_sec".into(),
            unit: "invocations/s".into(),
            value: Some(rate),
            interval_values: Vec::new(),
            histogram: None,
        }],
        noise: None,
        peer: None,
        interval_records: Vec::new(),
    }
}

/// A compare run with separate A and B trials (`--interleave trials`, `--figure mean`) on
/// hosts of the given models; B's time is A's times `b_over_a(model)`, with a little noise.
fn compare_run(models: &[&str], b_over_a: impl Fn(&str) -> f64) -> RunRecord {
    let variant = |name: &str| VariantSpec {
        name: name.into(),
        probe: "exec".into(),
        params: BTreeMap::new(),
    };
    let mut run = crate::run::new_record(RunSettings {
        probes: vec!["exec".into()],
        params: BTreeMap::new(),
        rounds: ROUNDS,
        duration_ms: 1000,
        interval_ms: 1000,
        cpus: Vec::new(),
        tune: false,
        unpinned: false,
        variants: vec![variant("A"), variant("B")],
        warmup: 0,
        seed: 7,
        round_sync: true,
        compare_figure: Some(TrialFigure::Mean),
    });
    for (h, model) in models.iter().enumerate() {
        run.hosts.push(HostRecord {
            address: format!("127.0.0.1:{}", 7100 + h),
            kind: HostKind::Remote,
            agent_version: "test".into(),
            fingerprint: pb::Fingerprint {
                cpu: Some(pb::CpuIdentity {
                    model_name: (*model).into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            tuning: Vec::new(),
        });
        for r in 1..=ROUNDS {
            // A round's drift hits A and B alike; B's own noise is ±0.1%.
            let a_rate = 100.0 * (1.0 + 0.01 * f64::from(r % 3)) * (1.0 + 0.002 * h as f64);
            let wiggle = 1.0
                + 0.001
                    * if (r + h as u32).is_multiple_of(2) {
                        1.0
                    } else {
                        -1.0
                    };
            run.trials.push(trial(h, r, "A", a_rate));
            run.trials
                .push(trial(h, r, "B", a_rate / (b_over_a(model) * wiggle)));
        }
    }
    run
}

#[test]
fn a_change_on_one_model_only_is_reported_as_such() {
    let models = ["x", "y", "x", "y", "x", "y"];
    let run = compare_run(&models, |m| if m == "x" { 0.97 } else { 1.0 });
    let b = judge_by_model(&run, TrialFigure::Mean).expect("two models");
    assert_eq!(b.models.len(), 2);
    assert_eq!(b.models[0].hosts.len(), 3);
    let ratio = |m: &str| {
        let v = b.models.iter().find(|v| v.cpu_model == m).unwrap();
        v.verdict.as_ref().unwrap().ratio
    };
    assert!((ratio("x") - 0.97).abs() < 0.002, "{}", ratio("x"));
    assert!((ratio("y") - 1.0).abs() < 0.002, "{}", ratio("y"));
    let i = b.interaction.expect("both judged");
    assert_eq!((i.low.as_str(), i.high.as_str()), ("x", "y"));
    assert!(i.difference.differs, "{i:?}");
    assert!(
        i.sentence
            .starts_with("the change differs between CPU models")
    );
}

#[test]
fn the_same_change_on_both_models_is_alike() {
    let models = ["x", "y", "x", "y"];
    let b = judge_by_model(&compare_run(&models, |_| 0.97), TrialFigure::Mean).unwrap();
    let i = b.interaction.expect("both judged");
    assert!(!i.difference.differs, "{i:?}");
    assert!(
        i.sentence
            .starts_with("the change is alike on every CPU model")
    );
    // One model: no split, the pooled verdict is that model's.
    assert!(judge_by_model(&compare_run(&["x", "x"], |_| 0.97), TrialFigure::Mean).is_none());
}
