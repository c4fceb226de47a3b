//! The store across runs: a metric's history per host and CPU model, and two stored runs
//! compared without pairing.

use quietbench_controller::store::{RunStatus, Store};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

#[path = "support/store_fixtures.rs"]
mod store_fixtures;
use store_fixtures::*;

/// A run of `cpu.primes` on hosts with these CPU models, one measured trial per host with
/// events_per_sec = `base + host index`, after a warm-up trial per host that must not count.
fn store_history_run(store: &Store, run_id: &str, started: u64, models: &[&str], base: f64) {
    let run = new_run(run_id, started);
    store.begin_run(&run, None).unwrap();
    for (idx, model) in models.iter().enumerate() {
        store.add_host(run_id, idx, &host(idx, model)).unwrap();
    }
    let mut seq = 0;
    for round in 1..=2 {
        for idx in 0..models.len() {
            let mut t = trial(seq, idx, round, base + idx as f64);
            t.cancelled = false;
            store.add_trial(run_id, seq, &t).unwrap();
            seq += 1;
        }
    }
    store.finish_run(&run, RunStatus::Complete).unwrap();
}

#[test]
fn history_spans_runs_and_filters_by_cpu_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&store_path(&dir)).unwrap();
    store_history_run(&store, "monday", 1_000, &[EPYC], 100.0);
    store_history_run(&store, "tuesday", 2_000, &[XEON, EPYC], 200.0);

    let all = store
        .history("cpu.primes", "events_per_sec", None, 10)
        .unwrap();
    let seen: Vec<(&str, &str, f64)> = all
        .iter()
        .map(|p| (p.run_id.as_str(), p.cpu_model.as_str(), p.value))
        .collect();
    assert_eq!(
        seen,
        [
            ("monday", EPYC, 100.0),
            ("tuesday", XEON, 200.0),
            ("tuesday", EPYC, 201.0)
        ],
        "warm-ups left out, oldest run first"
    );
    assert_eq!(all[0].host, "10.0.0.1:7420");
    assert_eq!(all[0].round, 2);
    assert_eq!(all[0].variant, "cpu.primes");
    assert_eq!(all[0].params["threads"], "1");
    assert_eq!(
        all[1].started_at,
        UNIX_EPOCH + Duration::new(2_000, 123_456_789)
    );

    let epyc = store
        .history("cpu.primes", "events_per_sec", Some("epyc 7r13"), 10)
        .unwrap();
    let values: Vec<f64> = epyc.iter().map(|p| p.value).collect();
    assert_eq!(values, [100.0, 201.0]);
    assert!(epyc.iter().all(|p| p.cpu_model == EPYC));

    let latest = store
        .history("cpu.primes", "events_per_sec", Some("EPYC"), 1)
        .unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].run_id, "tuesday");

    // A metric without values for some trials, and names that match nothing.
    let latency = store
        .history("cpu.primes", "event_latency", None, 10)
        .unwrap();
    assert!(latency.iter().all(|p| p.value == 1_000.5));
    assert!(
        store
            .history("cpu.primes", "nope", None, 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .history("mem.latency", "events_per_sec", None, 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .history("cpu.primes", "events_per_sec", Some("Graviton"), 10)
            .unwrap()
            .is_empty()
    );
}

/// A stored run of `rounds` measured cpu.primes trials on one host, rates `base` · (1 + wiggle).
fn store_rates_run(store: &Store, run_id: &str, started: u64, base: f64) {
    let run = new_run(run_id, started);
    store.begin_run(&run, None).unwrap();
    store.add_host(run_id, 0, &host(0, XEON)).unwrap();
    let wiggle = [
        0.004, -0.003, 0.001, -0.002, 0.0, 0.003, -0.004, 0.002, -0.001, 0.0,
    ];
    for (seq, w) in wiggle.iter().enumerate() {
        let mut t = trial(seq, 0, seq as u32 + 2, base * (1.0 + w));
        t.cancelled = false;
        store.add_trial(run_id, seq, &t).unwrap();
    }
    store.finish_run(&run, RunStatus::Complete).unwrap();
}

fn compare_runs(
    path: &Path,
    a: &str,
    b: &str,
    fail_if_slower: Option<f64>,
) -> (std::process::ExitCode, serde_json::Value) {
    // Beside the test's other files, not beside the store: a PostgreSQL store has no folder.
    let scratch = tempfile::tempdir().unwrap();
    let json = scratch.path().join("verdicts.json");
    let code = quietbench_controller::commands::compare_runs::run_compare_runs(
        quietbench_controller::commands::compare_runs::RunsRequest {
            baseline: a.into(),
            candidate: b.into(),
            metric: None,
            figure: quietbench_controller::record::figures::TrialFigure::Median,
            normalize_by: None,
            target_mde: 0.02,
            db: Some(path.to_path_buf()),
            json: Some(json.clone()),
            fail_if_slower,
        },
    )
    .unwrap();
    let body = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (code, body)
}

#[test]
fn two_stored_runs_compare_by_id_without_pairing() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let store = Store::open(&path).unwrap();
    store_rates_run(&store, "aaaa0000-run", 1_000, 1000.0);
    store_rates_run(&store, "bbbb0000-run", 2_000, 1050.0);
    store_rates_run(&store, "cccc0000-run", 3_000, 1000.0);

    // 5% more events/s in the second run: detected, by prefix, with the interval around 1.05.
    let (code, v) = compare_runs(&path, "aaaa", "bbbb", Some(1.0));
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert_eq!(v["schema"], "quietbench.compare-runs.v1");
    let c = &v["comparisons"][0];
    assert_eq!(c["variant"], "cpu.primes");
    assert_eq!(c["metric"], "events_per_sec");
    assert_eq!(c["verdict"], "b_faster");
    assert_eq!(
        (c["units"].as_str(), c["units_a"].as_u64()),
        (Some("trials"), Some(10))
    );
    let (lo, hi) = (
        c["ci_low"].as_f64().unwrap(),
        c["ci_high"].as_f64().unwrap(),
    );
    assert!(lo < 1.05 && 1.05 < hi && lo > 1.04, "[{lo}, {hi}]");
    assert!(
        c["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not interleaved")
    );
    assert!(
        c["sentence"]
            .as_str()
            .unwrap()
            .contains("run bbbb0000 is 5.0% faster than run aaaa0000"),
        "{c}"
    );

    // The same the other way round trips --fail-if-slower (exit 3); identical runs do not differ.
    let (code, v) = compare_runs(&path, "bbbb", "aaaa", Some(1.0));
    assert_eq!(code, std::process::ExitCode::from(3));
    assert_eq!(v["comparisons"][0]["verdict"], "a_faster");
    let (code, v) = compare_runs(&path, "aaaa", "cccc", Some(1.0));
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert_eq!(v["comparisons"][0]["verdict"], "no_difference");
    assert!((v["comparisons"][0]["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-12);
}

#[test]
fn comparing_stored_runs_refuses_what_it_cannot_judge() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let store = Store::open(&path).unwrap();
    store_rates_run(&store, "aaaa0000-run", 1_000, 1000.0);
    store_history_run(&store, "dddd0000-run", 2_000, &[XEON], 1000.0);
    let request = |b: &str, metric: Option<&str>| {
        quietbench_controller::commands::compare_runs::RunsRequest {
            baseline: "aaaa".into(),
            candidate: b.into(),
            metric: metric.map(str::to_string),
            figure: quietbench_controller::record::figures::TrialFigure::Median,
            normalize_by: None,
            target_mde: 0.02,
            db: Some(path.clone()),
            json: None,
            fail_if_slower: None,
        }
    };
    let run = quietbench_controller::commands::compare_runs::run_compare_runs;
    // Two measured trials are too few to know the scatter.
    let e = run(request("dddd", None)).unwrap_err().to_string();
    assert!(e.contains("at least 3 trials in the candidate"), "{e}");
    let e = run(request("zzzz", None)).unwrap_err().to_string();
    assert!(e.contains("zzzz"), "{e}");
    let e = run(request("aaaa", Some("no_such_metric")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("share no variant with the metric no_such_metric"),
        "{e}"
    );
}
