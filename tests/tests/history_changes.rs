//! `history --change-points` and `--fail-on-change` on real runs: a nightly job whose command
//! sleeps 20 ms longer, checked after each night as CI would, must fail on exactly one night: the
//! one on which the regression becomes significant; and text, JSON and the HTML chart show it.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One night's run: `sleep_s` per invocation, two 1-second rounds, on a local agent.
fn nightly_run(db: &Path, sleep_s: f64) {
    common::succeed(common::quietbench().args([
        "run",
        "--local",
        "--probe",
        "exec",
        "--param",
        &format!("cmd=sleep {sleep_s}"),
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
    // Ten nights at 10 ms, then six at 30 ms. A step of 20 ms dwarfs the run-to-run noise of a
    // sleep and of fork and exec's cost around it (a few ms on a loaded machine at most), so the
    // outcome does not depend on the machine's speed.
    let mut exits = Vec::new();
    for night in 1..=16 {
        nightly_run(&db, if night <= 10 { 0.010 } else { 0.030 });
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
    // The step is 20 ms of sleep. In relative terms it is less than 200%, by how much depends
    // on the machine: the wall time includes fork and exec (3 ms on a loaded 2-vCPU CI machine).
    // So check the absolute step, and that the relative figure is the medians' ratio.
    let before = c["before_median"].as_f64().unwrap();
    let after = c["after_median"].as_f64().unwrap();
    let step_ms = (after - before) / 1e6;
    assert!((16.0..24.0).contains(&step_ms), "{step_ms} ms: {json}");
    let change = c["change"].as_f64().unwrap();
    assert!((change - (after / before - 1.0)).abs() < 1e-9, "{change}");
    assert!(c["p_value"].as_f64().unwrap() <= 0.01);
    assert_eq!(json["method"]["name"], "e-divisive means");
    assert!(s["new_regression"].is_null());

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"<svg id="chart-history-0""#));
    assert!(page.contains("class=\"change\""));
    assert!(!page.contains("<script"));

    // Normalised by a control these runs never had: each run is left out, with the reason.
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
