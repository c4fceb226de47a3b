//! The spread of runs built in memory with a known truth: two CPU models a set percentage apart,
//! hosts scattered around their model, an injected outlier.

use std::time::SystemTime;

use super::*;
use crate::record::test_records::{empty_run, host, value_trial};

const SLOW: &str = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz";
const FAST: &str = "Intel(R) Xeon(R) Processor";

/// A run of `hosts` (model, value of each round) of cpu.primes.
fn run(hosts: &[(&str, Vec<f64>)]) -> RunRecord {
    let mut record = empty_run("cpu.primes", &[], 2, None);
    record.started_at = SystemTime::UNIX_EPOCH;
    for (i, (model, values)) in hosts.iter().enumerate() {
        record.hosts.push(host(i, model));
        for (r, v) in values.iter().enumerate() {
            record.trials.push(value_trial(
                ("cpu.primes", "cpu.primes"),
                i,
                r as u32 + 1,
                ("events_per_sec", "events/s", *v),
            ));
        }
    }
    record
}

/// 10 hosts of each model, FAST 6% above SLOW, hosts scattered evenly over ±0.5% and rounds by
/// ±0.1%; `outliers` hosts (by index) 4% below their model.
fn lottery(outliers: &[usize]) -> RunRecord {
    let hosts: Vec<(&str, Vec<f64>)> = (0..20)
        .map(|i| {
            let (model, base) = if i % 2 == 0 {
                (SLOW, 100.0)
            } else {
                (FAST, 106.0)
            };
            let scatter = 1.0 + ((i / 2) as f64 / 9.0 - 0.5) * 0.01;
            let off = if outliers.contains(&i) { 0.96 } else { 1.0 };
            let v = base * scatter * off;
            (model, vec![v * 0.999, v * 1.001])
        })
        .collect();
    run(&hosts)
}

#[test]
fn two_models_split_into_their_rows_their_difference_and_most_of_the_spread() {
    let spreads = fleet_spread(&lottery(&[]));
    assert_eq!(spreads.len(), 1);
    let s = &spreads[0];
    assert_eq!((s.hosts, s.trials), (20, 40));
    assert_eq!(s.metric, "events_per_sec");
    // Equal host counts: the reference is the first by name.
    let names: Vec<&str> = s.models.iter().map(|m| m.cpu_model.as_str()).collect();
    assert_eq!(names, [SLOW, FAST]);
    assert!(s.models.iter().all(|m| m.hosts == 10 && m.trials == 20));
    assert!((s.models[0].mean - 100.0).abs() < 0.1, "{:?}", s.models[0]);
    assert!(s.models[0].cv.unwrap() < 0.005);
    // The difference: +6%, its interval around it and away from zero.
    let d = &s.differences[0];
    assert_eq!((d.cpu_model.as_str(), d.reference.as_str()), (FAST, SLOW));
    assert!((d.ratio - 1.06).abs() < 1e-3, "{d:?}");
    let (lo, hi) = (d.ci_low.unwrap(), d.ci_high.unwrap());
    assert!(lo > 1.05 && lo < 1.06 && hi > 1.06 && hi < 1.07, "{d:?}");
    assert!(d.sentence.contains("+6.0% against"), "{}", d.sentence);
    assert!(
        d.sentence.contains("(faster; 10 hosts against 10)"),
        "{}",
        d.sentence
    );
    // The split: the CPU model dominates, and its sentence comes first.
    let split = s.split.as_ref().unwrap();
    assert!(split.between_models.unwrap() > 0.9, "{split:?}");
    let total = split.between_models.unwrap() + split.between_hosts + split.within_host;
    assert!((total - 1.0).abs() < 1e-9);
    assert!(split.sentences[0].contains("comes from the CPU model"));
    assert_eq!(split.sentences.len(), 3);
    assert!(s.outliers.is_empty(), "{:?}", s.outliers);
}

#[test]
fn an_injected_outlier_is_named_with_how_far_off_it_is() {
    let s = &fleet_spread(&lottery(&[6]))[0];
    let flagged: Vec<&str> = s.outliers.iter().map(|o| o.address.as_str()).collect();
    assert_eq!(flagged, ["127.0.0.1:7006"]);
    let o = &s.outliers[0];
    assert_eq!(o.cpu_model, SLOW);
    assert!(o.z < -3.5);
    // 4% below a host that itself sits 0.17% below the middle of its model.
    assert!((o.off + 0.04).abs() < 0.005, "{o:?}");
}

#[test]
fn one_model_splits_hosts_from_rounds_and_one_host_is_not_split() {
    let hosts: Vec<(&str, Vec<f64>)> = (0..4)
        .map(|i| (SLOW, vec![100.0 + i as f64, 100.5 + i as f64]))
        .collect();
    let s = &fleet_spread(&run(&hosts))[0];
    assert_eq!(s.models.len(), 1);
    assert!(s.differences.is_empty());
    let split = s.split.as_ref().unwrap();
    assert_eq!(split.between_models, None);
    assert!(split.between_hosts > 0.9, "{split:?}");
    assert_eq!(split.sentences.len(), 2);
    assert!(
        split
            .sentences
            .iter()
            .all(|s| !s.contains("CPU model") && !s.contains("of one model"))
    );
    assert!(fleet_spread(&run(&hosts[..1])).is_empty());
}

#[test]
fn what_cannot_be_estimated_is_said() {
    // Two hosts of each model: a difference but no interval; identical values: no split.
    let hosts = [
        (SLOW, vec![100.0, 100.0]),
        (SLOW, vec![100.0, 100.0]),
        (FAST, vec![106.0, 106.0]),
        (FAST, vec![106.0, 106.0]),
    ];
    let s = &fleet_spread(&run(&hosts))[0];
    let d = &s.differences[0];
    assert_eq!((d.ci_low, d.ci_high), (None, None));
    assert!(s.notes.iter().any(|n| n.contains("no interval")), "{s:?}");
    let same = [(SLOW, vec![5.0, 5.0]), (SLOW, vec![5.0, 5.0])];
    let s = &fleet_spread(&run(&same))[0];
    assert!(s.split.is_none());
    assert!(s.notes.iter().any(|n| n.contains("no spread")), "{s:?}");
}
