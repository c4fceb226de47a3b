//! `quietbench changes --csv`: the built binary on series nobody stored, as a user exporting
//! histories from another tool would give them: a step at a known row is found there and a flat
//! series has none, in the table and in JSON, from a file and from standard input; a bad CSV is
//! refused with its line and exit code 2; `--fail-on-change` exits 3 on the row that brings the
//! step to light.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// 60 rows: "step" is 100 for rows 0–29 and 120 from row 30, "flat" 50; both ±1 in a fixed
/// pattern (no generator), labelled by a date.
fn two_series(rows: usize) -> String {
    let wobble = [0.0, 0.7, -0.4, 1.0, -0.9, 0.3, -0.6];
    let mut text = String::from("date,step,flat\r\n");
    for r in 0..rows {
        let level = if r >= 30 { 120.0 } else { 100.0 };
        let w = wobble[r % wobble.len()];
        text.push_str(&format!(
            "2024-{:02}-{:02},{},{}\r\n",
            1 + r / 28,
            1 + r % 28,
            level + w,
            50.0 + w
        ));
    }
    text
}

fn changes(args: &[&str]) -> Command {
    let mut command = common::quietbench();
    command.arg("changes").args(args);
    command
}

fn with_stdin(mut command: Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    // A writer of its own: the command may refuse the input before reading all of it.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_step_is_found_at_its_row_and_a_flat_series_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "series.csv", &two_series(60));
    let text = common::succeed(&mut changes(&["--csv", &file]));
    assert!(text.contains("step: 60 points"), "{text}");
    assert!(
        text.contains("flat: 60 points, median 50, no change point"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.contains("2024-02-03"))
        .unwrap_or_else(|| panic!("no row for the step's date:\n{text}"));
    assert!(row.trim_start().starts_with("30 "), "{row}");
    assert!(row.contains("+20.0%") && row.contains("change"), "{row}");
    assert!(
        text.contains("1 change point in 2 series of 60 points"),
        "{text}"
    );
    assert!(text.contains("  the gate flags a 2% step "), "{text}");
    assert!(
        text.contains("the newest row brings no change to light"),
        "{text}"
    );

    let json: Value =
        serde_json::from_str(&common::succeed(&mut changes(&["--csv", &file, "--json"]))).unwrap();
    assert_eq!(json["schema"], "quietbench.changes.v1");
    assert_eq!(json["index_column"], "date");
    assert_eq!(json["rows"], 60);
    assert_eq!(json["method"]["name"], "mean-shift");
    assert_eq!(json["method"]["significance"], 0.01);
    assert_eq!(json["method"]["permutations"], 999);
    assert_eq!(json["method"]["min_segment"], 2);
    let series = json["series"].as_array().unwrap();
    assert_eq!(series[0]["name"], "step");
    let found = series[0]["change_points"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{json}");
    assert_eq!(found[0]["index"], 30);
    assert_eq!(found[0]["label"], "2024-02-03");
    assert_eq!(found[0]["kind"], "change");
    assert!((found[0]["change"].as_f64().unwrap() - 0.2).abs() < 0.01);
    assert!(found[0]["p_value"].as_f64().unwrap() <= 0.01);
    assert!((found[0]["before_median"].as_f64().unwrap() - 100.0).abs() < 1.0);
    assert!((found[0]["after_median"].as_f64().unwrap() - 120.0).abs() < 1.0);
    assert_eq!(series[1]["name"], "flat");
    assert!(series[1]["change_points"].as_array().unwrap().is_empty());
    // How many rows the gate needs for a 2% and a 5% step at the flat series' ±1.4% noise:
    // a 5% step sooner than a 2% one (which may be "never", null).
    let reach = series[1]["runs_to_detect"].as_array().unwrap();
    assert_eq!(reach.len(), 2, "{json}");
    assert_eq!(reach[0]["shift"], 0.02);
    assert_eq!(reach[1]["shift"], 0.05);
    let five = reach[1]["runs"]
        .as_u64()
        .expect("a 5% step is seen at this noise");
    assert!(five >= 2, "{json}");
    if let Some(two) = reach[0]["runs"].as_u64() {
        assert!(two >= five, "{json}");
    }
    assert!(series[1]["new_change"].is_null());

    // Standard input gives the same document, but for its source.
    let out = with_stdin(changes(&["--csv", "-", "--json"]), &two_series(60));
    assert!(out.status.success(), "{out:?}");
    let mut from_stdin: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_stdin["source"], "-");
    from_stdin["source"] = json["source"].clone();
    assert_eq!(from_stdin, json);
}

#[test]
fn fail_on_change_trips_on_the_row_that_brings_the_step_to_light_once() {
    let mut tripped = Vec::new();
    for rows in 31..40 {
        let out = with_stdin(
            changes(&["--csv", "-", "--fail-on-change", "--better", "lower"]),
            &two_series(rows),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            Some(3) => {
                assert!(
                    stderr.contains("brings a regression to light in \"step\""),
                    "{stderr}"
                );
                tripped.push(rows);
            }
            other => panic!("{rows} rows: exit {other:?}: {stderr}"),
        }
    }
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    // Higher is better: the same step is an improvement, and trips nothing.
    let out = with_stdin(
        changes(&["--csv", "-", "--fail-on-change", "--better", "higher"]),
        &two_series(tripped[0]),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn the_detectors_settings_are_history_s() {
    let history = common::quietbench()
        .args(["history", "--help"])
        .output()
        .unwrap();
    let changes = changes(&["--help"]).output().unwrap();
    let section = |out: &Output| {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let from = text
            .find("Change-point detector:")
            .expect("a detector section");
        text[from..]
            .lines()
            .skip(1)
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .filter(|l| l.trim_start().starts_with("--"))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let ours = section(&changes);
    assert_eq!(
        ours,
        vec![
            "--method",
            "--significance",
            "--permutations",
            "--min-segment",
            "--seed"
        ]
    );
    assert!(section(&history).starts_with(&ours), "{history:?}");
}

#[test]
fn bad_csv_is_refused_with_its_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        ("", "the input is empty"),
        ("run,a\n", "line 1: a header and no rows"),
        (
            "run,a,b\nr1,1,2\nr2,1\n",
            "line 3: 2 fields where the header has 3",
        ),
        (
            "run,a\nr1,1\nr2,12ms\n",
            "line 3, column 2 (\"a\"): \"12ms\" is not a number",
        ),
        (
            "a\n1\nNaN\n",
            "line 3, column 1 (\"a\"): \"NaN\" is not a finite number",
        ),
        (
            "a,b\n1,2\n3,\n",
            "line 3, column 2 (\"b\"): the value is missing",
        ),
        (
            "a,b,a\n1,2,3\n",
            "line 1: columns 1 and 3 are both named \"a\"",
        ),
        ("a,,b\n1,2,3\n", "line 1: column 2 has no name"),
        ("a,b\n1,2\n\n3,4\n", "line 3 is blank"),
        (
            "a\n\"1\n",
            "line 2: a quoted field opens here and never closes",
        ),
    ];
    for (i, (text, says)) in cases.iter().enumerate() {
        let file = write(dir.path(), &format!("bad{i}.csv"), text);
        let out = changes(&["--csv", &file]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(
            stderr.contains(&format!("quietbench: error: {file}: {says}")),
            "{text:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{text:?}");
        // The same from standard input.
        let out = with_stdin(changes(&["--csv", "-"]), text);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(
            stderr.contains(&format!("error: standard input: {says}")),
            "{text:?}: {stderr}"
        );
    }
    let out = changes(&["--csv", "/nonexistent/series.csv"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/series.csv: cannot read it"),
        "{stderr}"
    );
    let file = write(dir.path(), "ok.csv", "x,y\n1,2\n");
    let out = changes(&["--csv", &file, "--index", "run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no column is named \"run\""), "{stderr}");
}

#[test]
fn endless_or_oversized_input_is_refused_at_its_bound() {
    // /dev/zero as the file: refused at 64 MiB, not read until memory runs out.
    let out = changes(&["--csv", "/dev/zero"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("larger than 67108864 bytes (64 MiB)"),
        "{stderr}"
    );
    // Standard input past the bound.
    let mut command = changes(&["--csv", "-"]);
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let out = command.stdin(zero).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("larger than 67108864 bytes"), "{stderr}");
    // More rows than the detector is run on.
    let mut long = String::from("a\n");
    for i in 0..10_001 {
        long.push_str(&format!("{}\n", i % 7));
    }
    let out = with_stdin(changes(&["--csv", "-"]), &long);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("10001 rows") && stderr.contains("at most 10000 rows"),
        "{stderr}"
    );
}
