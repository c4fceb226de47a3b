//! `compare` and `resume` end to end, with real agents and the real result store.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Both tests measure on this machine's CPUs: one at a time, or each is the other's noise.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A CPU-bound shell loop of `n` iterations: the work of each side of a comparison.
fn spin(n: u32) -> String {
    format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done")
}

fn compare(a: &str, b: &str, json: &std::path::Path, db: &std::path::Path) -> Value {
    let stdout = common::succeed(
        Command::new(common::quietbench_bin())
            .args([
                "compare",
                "--local",
                "--shell",
                "--rounds",
                "10",
                "--warmup",
                "1",
                "--duration",
                "0.4",
                "--a",
                a,
                "--b",
                b,
                "--json",
            ])
            .arg(json)
            .arg("--db")
            .arg(db),
    );
    assert!(
        stdout.contains("rounds on 1 host"),
        "the verdict sentence is printed:\n{stdout}"
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

#[test]
fn identical_commands_come_out_alike_and_five_percent_more_work_is_detected() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.sqlite3");

    let same = compare(
        &spin(20_000),
        &spin(20_000),
        &dir.path().join("aa.json"),
        &db,
    );
    assert_eq!(same["schema"], "quietbench.compare.v1");
    assert_eq!(same["rounds"], 10);
    assert_eq!(same["hosts"], 1);
    let ratio = same["ratio"].as_f64().unwrap();
    let mde = same["mde"].as_f64().unwrap();
    let (lo, hi) = (
        same["ci_low"].as_f64().unwrap(),
        same["ci_high"].as_f64().unwrap(),
    );
    assert!(lo <= ratio && ratio <= hi && mde > 0.0, "{same}");
    // A calibrated test calls a difference in 5% of identical pairs, but an estimate beyond the
    // run's own minimum detectable effect (2.8 standard errors) happens about 0.5% of the time.
    assert!(
        (ratio - 1.0).abs() < mde.max(0.02),
        "A/A ratio {ratio} with MDE {mde}"
    );

    let slower = compare(
        &spin(20_000),
        &spin(21_000),
        &dir.path().join("ab.json"),
        &db,
    );
    let lo = slower["ci_low"].as_f64().unwrap();
    assert!(lo <= slower["ratio"].as_f64().unwrap());
    // The promise: it either detects the 5%, or says it could not have detected that little.
    match slower["verdict"].as_str().unwrap() {
        "a_faster" => assert!(lo > 1.0),
        "no_difference" => assert!(slower["mde"].as_f64().unwrap() > 0.03, "{slower}"),
        other => panic!("B doing more work came out {other}: {slower}"),
    }

    // Both runs are in the store, with their A and B trials.
    let out = Command::new(common::quietbench_bin())
        .args(["runs", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        listing.lines().filter(|l| l.contains("complete")).count(),
        2,
        "{listing}"
    );

    // The two stored runs compared by id, without pairing: A against A and B against B.
    let runs_json = dir.path().join("runs.json");
    let ids = [
        same["run_id"].as_str().unwrap(),
        slower["run_id"].as_str().unwrap(),
    ];
    let stdout = common::succeed(
        Command::new(common::quietbench_bin())
            .args(["compare", "--runs", ids[0], ids[1], "--db"])
            .arg(&db)
            .arg("--json")
            .arg(&runs_json),
    );
    assert!(stdout.contains("the runs were not interleaved"), "{stdout}");
    let runs: Value = serde_json::from_str(&std::fs::read_to_string(&runs_json).unwrap()).unwrap();
    assert_eq!(runs["schema"], "quietbench.compare-runs.v1");
    let variants: Vec<&str> = runs["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["A", "B"], "{runs}");
    for c in runs["comparisons"].as_array().unwrap() {
        assert_eq!(c["units"], "trials");
        assert_eq!(c["units_a"], 10);
        assert_eq!(c["metric"], "median_wall_time_per_invocation");
        let (lo, r, hi) = (
            c["ci_low"].as_f64().unwrap(),
            c["ratio"].as_f64().unwrap(),
            c["ci_high"].as_f64().unwrap(),
        );
        assert!(lo <= r && r <= hi, "{c}");
    }

    // --fail-if-slower turns the second verdict into a failing exit status (3).
    let out = Command::new(common::quietbench_bin())
        .args([
            "compare",
            "--local",
            "--shell",
            "--rounds",
            "8",
            "--duration",
            "0.3",
            "--no-store",
            "--fail-if-slower",
            "1",
        ])
        .args(["--a", &spin(20_000), "--b", &spin(23_000)])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_plan_with_two_variants_ends_with_a_verdict_for_the_second() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "hosts = \"local\"\nrounds = 6\nwarmup = 1\nduration_s = 0.4\n\
             [[variant]]\nname = \"fast\"\nprobe = \"exec\"\nparams = {{ cmd = \"{}\", shell = true }}\n\
             [[variant]]\nname = \"slow\"\nprobe = \"exec\"\nparams = {{ cmd = \"{}\", shell = true }}\n",
            spin(20_000),
            spin(30_000)
        ),
    )
    .unwrap();
    let stdout = common::succeed(
        Command::new(common::quietbench_bin())
            .args(["run", "--no-store", "--plan"])
            .arg(&plan),
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("slow (B) against fast (A), median_wall_time_per_invocation: "))
        .unwrap_or_else(|| panic!("no verdict line:\n{stdout}"));
    // 50% more work: detected as A faster, or the run says it could not detect that much.
    assert!(
        line.contains(": A is ") || line.contains("no difference detected (could have detected ≥ "),
        "{line}"
    );
    assert!(line.contains("6 rounds on 1 host"), "{line}");
}

fn stored_trials(db: &std::path::Path, run: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("show.json");
    common::succeed(
        Command::new(common::quietbench_bin())
            .args(["show", run, "--db"])
            .arg(db)
            .arg("--json")
            .arg(&json),
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    report["trials"].as_array().unwrap().clone()
}

#[test]
fn a_killed_controller_resumes_without_losing_or_repeating_trials() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.sqlite3");
    let json = dir.path().join("live.json");
    let mut controller = Command::new(common::quietbench_bin())
        .args([
            "run",
            "--local",
            "--rounds",
            "8",
            "--duration",
            "0.5",
            "--db",
        ])
        .arg(&db)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for at least two finished trials (the JSON report is rewritten after each).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (run_id, before) = loop {
        assert!(Instant::now() < deadline, "no trial finished in 30 s");
        std::thread::sleep(Duration::from_millis(100));
        let Ok(text) = std::fs::read_to_string(&json) else {
            continue;
        };
        let Ok(report) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if report["trials"].as_array().is_some_and(|t| t.len() >= 2) {
            break (
                report["run_id"].as_str().unwrap().to_string(),
                report["trials"].as_array().unwrap().clone(),
            );
        }
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(controller.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    controller.wait().unwrap();

    let kept = stored_trials(&db, &run_id);
    assert!(kept.len() >= before.len(), "the store lost finished trials");
    // No controller holds the run any more: `runs` and `show` say interrupted, not running.
    let listing = common::succeed(
        Command::new(common::quietbench_bin())
            .args(["runs", "--db"])
            .arg(&db),
    );
    let line = listing
        .lines()
        .find(|l| l.starts_with(run_id.as_str()))
        .unwrap_or_else(|| panic!("{run_id} is not listed:\n{listing}"));
    assert!(line.contains(" interrupted "), "{line}");
    assert!(listing.contains("quietbench resume RUN"), "{listing}");
    let shown = common::succeed(
        Command::new(common::quietbench_bin())
            .args(["show", &run_id, "--db"])
            .arg(&db),
    );
    assert!(
        shown.starts_with(&format!("run {run_id} (interrupted)")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("quietbench resume {run_id}")),
        "{shown}"
    );
    common::succeed(
        Command::new(common::quietbench_bin())
            .args(["resume", &run_id, "--db"])
            .arg(&db),
    );

    let after = stored_trials(&db, &run_id);
    assert_eq!(after.len(), 8, "every planned trial ran exactly once");
    for (old, new) in kept.iter().zip(&after) {
        assert_eq!(
            old["trial_id"], new["trial_id"],
            "a finished trial was run again"
        );
    }
    let mut rounds: Vec<u64> = after.iter().map(|t| t["round"].as_u64().unwrap()).collect();
    rounds.sort_unstable();
    assert_eq!(rounds, (1..=8).collect::<Vec<_>>());
    let listing = common::succeed(
        Command::new(common::quietbench_bin())
            .args(["runs", "--db"])
            .arg(&db),
    );
    let line = listing
        .lines()
        .find(|l| l.starts_with(run_id.as_str()))
        .unwrap_or_else(|| panic!("{run_id} is not listed:\n{listing}"));
    assert!(line.contains(" complete "), "{line}");
}
