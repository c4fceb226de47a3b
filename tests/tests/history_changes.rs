//! `history --change-points` and `--fail-on-change` on stored runs: a nightly job whose command
//! takes 20 ms longer, checked after each night as CI would, must fail on exactly one night: the
//! one on which the regression becomes significant; and text, JSON and the HTML chart show it.
//!
//! The nights run on a fake agent (quietbench-testkit) that reports the times this file
//! injects (10 ms, then 30 ms, each trial 2% off by a fixed draw), so which night trips depends
//! on the history's statistics alone, never on this machine's speed.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quietbench_testkit::{Cpu, FakeFleet, FakeHost, normal, splitmix64};
use serde_json::Value;

/// One fake host whose invocations take what `night_ms` holds, each trial 2% off by a draw
/// fixed by the night and the trial.
fn nightly_agent(night_ms: Arc<AtomicU64>) -> FakeFleet {
    let cpu = Cpu::intel("Intel(R) Xeon(R) Processor", 207, 2, "0x1");
    let host = FakeHost::new("nightly", cpu, move |ask| {
        let ms = night_ms.load(Ordering::Relaxed);
        let noise = 1.0 + 0.02 * normal(splitmix64(ask.trial));
        quietbench_testkit::exec(ms as f64 * 1e6 * noise, 1e6)
    });
    FakeFleet::start(vec![host]).unwrap()
}

/// One night's run: two 1-second rounds on the nightly agent.
fn nightly_run(db: &Path, agent: &FakeFleet) {
    common::succeed(common::quietbench().args([
        "run",
        "--agent",
        &agents_address(agent),
        "--probe",
        "exec",
        "--param",
        "cmd=./nightly-job",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--duration",
        "1",
        "--db",
        db.to_str().unwrap(),
    ]));
}

fn agents_address(agent: &FakeFleet) -> String {
    agent.addresses()[0].to_string()
}

fn history(db: &Path, extra: &[&str]) -> Command {
    let mut command = common::quietbench();
    command.args([
        "history",
        "--probe",
        "exec",
        "--metric",
        "wall_time",
        "--db",
        db.to_str().unwrap(),
    ]);
    command.args(extra);
    command
}

#[test]
fn fail_on_change_trips_on_the_night_a_regression_becomes_significant_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    // Ten nights at 10 ms, then six at 30 ms.
    let night_ms = Arc::new(AtomicU64::new(10));
    let agent = nightly_agent(Arc::clone(&night_ms));
    let mut exits = Vec::new();
    for night in 1..=16 {
        night_ms.store(if night <= 10 { 10 } else { 30 }, Ordering::Relaxed);
        nightly_run(&db, &agent);
        if night >= 10 {
            let out = history(&db, &["--fail-on-change"]).output().unwrap();
            exits.push((night, out.status.code()));
            if out.status.code() == Some(3) {
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.contains("the newest run brings a regression to light"),
                    "{stderr}"
                );
            }
        }
    }
    println!("exit code per night: {exits:?}");
    // Exactly one night fails, and not before the second slow night: one odd run is not a new
    // level (segments need two runs). How many slow nights it takes depends on the history's
    // length, not on noise: with k runs after a step, no shuffle test can give a p-value below
    // about 2/C(n, k), so with 10 runs before it needs 3 or 4 (docs/statistics.md §9c).
    let tripped: Vec<u32> = exits
        .iter()
        .filter(|(_, code)| *code == Some(3))
        .map(|(night, _)| *night)
        .collect();
    assert_eq!(tripped.len(), 1, "{exits:?}");
    assert!((12..=15).contains(&tripped[0]), "{exits:?}");
    assert!(
        exits.iter().all(|(_, code)| matches!(code, Some(0 | 3))),
        "{exits:?}"
    );

    let text = common::succeed(&mut history(&db, &["--change-points"]));
    println!("{text}");
    assert!(text.contains("16 runs, 1 change point"), "{text}");
    assert!(text.contains("◆ regression +"), "{text}");
    assert!(
        text.contains("the newest run brings no regression to light"),
        "{text}"
    );

    let html = dir.path().join("history.html");
    let json: Value = serde_json::from_str(&common::succeed(&mut history(
        &db,
        &["--json", "--html", html.to_str().unwrap()],
    )))
    .unwrap();
    let series = json["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{json}");
    let s = &series[0];
    assert_eq!(s["points"].as_array().unwrap().len(), 16);
    let changes = s["change_points"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{json}");
    let c = &changes[0];
    assert_eq!(c["index"], 10);
    assert_eq!(c["kind"], "regression");
    assert_eq!(c["run_id"], s["points"][10]["run_id"]);
    // The step is 20 ms, 200%, within the trials' 2% draws; the relative figure is the
    // medians' ratio.
    let before = c["before_median"].as_f64().unwrap();
    let after = c["after_median"].as_f64().unwrap();
    assert!((before / 10e6 - 1.0).abs() < 0.02, "{before}: {json}");
    assert!((after / 30e6 - 1.0).abs() < 0.02, "{after}: {json}");
    let change = c["change"].as_f64().unwrap();
    assert!((change - (after / before - 1.0)).abs() < 1e-9, "{change}");
    assert!(c["p_value"].as_f64().unwrap() <= 0.01);
    assert_eq!(json["method"]["name"], "mean-shift");
    assert!(s["new_regression"].is_null());
    // Six runs since the step: too few to estimate the noise the gate would face.
    assert_eq!(s["runs_to_detect"], serde_json::json!([]), "{json}");

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"<svg id="chart-history-0""#));
    assert!(page.contains("class=\"change\""));
    assert!(!page.contains("<script"));

    // Normalized by a control these runs never had: each run is left out, with the reason.
    let out = history(&db, &["--change-points", "--normalize-by", "control"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("left out:").count(), 16, "{stderr}");

    // Piped into a reader that has gone (`| head -1` after its line), the store's readers stop
    // quietly, as `ls` does, instead of panicking in println!.
    for args in [
        vec!["runs"],
        vec!["history", "--probe", "exec", "--metric", "wall_time"],
    ] {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        drop(read_end);
        let out = common::quietbench()
            .args(&args)
            .arg("--db")
            .arg(&db)
            .stdout(std::process::Stdio::from(write_end))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(13),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

#[test]
fn bad_change_point_settings_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    for (args, says) in [
        (
            vec!["--change-points", "--significance", "1.5"],
            "not a p-value",
        ),
        (
            vec!["--change-points", "--significance", "x"],
            "not a number",
        ),
        (
            vec!["--change-points", "--permutations", "0"],
            "permutations",
        ),
    ] {
        let out = history(&db, &args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // An empty store is not an error: there is simply nothing to find.
    let out = common::succeed(&mut history(&db, &["--change-points"]));
    assert!(out.contains("no stored trial of exec"), "{out}");
}
