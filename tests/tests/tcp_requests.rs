//! The `tcp` probe's request files end to end: `quietbench run --local --probe tcp --param
//! requests=FILE` reads the file on the controller's machine (relative to where it runs), the
//! load agent sends each line's bytes to the test server in its line mode
//! (tests/src/bin/testserver.rs `--raw`, which logs each request line with `--paths-log`), and
//! the record keeps `requests` as given. A bad file stops the run before any server starts,
//! naming the line.

mod common;

use common::servers::own_server;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))
}

/// `run --local --probe tcp` in `dir` (so a relative `requests=` is read there), its raw server
/// logging the request lines it gets to `dir/lines.log`, with these extra arguments.
fn run_in(dir: &Path, server: &Path, extra: &[&str]) -> std::process::Output {
    let mut command = common::quietbench();
    command
        .current_dir(dir)
        .args(["run", "--local", "--probe", "tcp", "--no-store"])
        // The generator's lag bound is the probe's own test: a bursty 2-vCPU host must not void
        // these trials, which test other things.
        .args(["--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --raw --port {{port}} --paths-log {}",
            server.display(),
            dir.join("lines.log").display()
        ))
        .args(extra);
    command.output().unwrap()
}

/// Each request ends in the newline the line server reads up to; the file's own line ends
/// (LF, CRLF) are not sent.
const KEYS: &str = "# Monday's keys\nGET user:42\\r\\n\r\n\nSET k\\tv\\n\n  # indented comment\n\
                    GET \\x41\\x42\\n\n";
/// What the server logs of each: the line without its end.
const SENT: [&str; 3] = ["GET user:42", "SET k\tv", "GET AB"];

#[test]
fn a_request_file_is_replayed_line_by_line_and_the_record_keeps_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-tcp-requests-server");
    std::fs::write(dir.path().join("keys.txt"), KEYS).unwrap();
    let json = dir.path().join("report.json");
    let out = run_in(
        dir.path(),
        &server,
        &[
            "--param",
            "requests=keys.txt",
            "--param",
            "rate=150",
            "--param",
            "connections=3",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--duration",
            "1",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    // Three connections may reorder neighbours, but in sequence order the schedule sends the
    // file's lines in turn: each line as often as the others, give or take the request the
    // trial's end cut short and one the server's stop caught before it read it.
    let log = std::fs::read_to_string(dir.path().join("lines.log")).unwrap();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in log.lines() {
        assert!(
            SENT.contains(&line),
            "unexpected request {line:?} in {log:?}"
        );
        *counts.entry(line).or_default() += 1;
    }
    assert_eq!(counts.len(), SENT.len(), "{counts:?}");
    let (least, most) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(most - least <= 2, "{counts:?}");
    assert!(*least >= 10, "{counts:?}");

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 1);
    let params = &trials[0]["params"];
    // The file's name as given, never its text.
    assert_eq!(params["requests"], "keys.txt", "{params}");
    assert_eq!(params["requests_order"], "sequence", "{params}");
    assert!(params.get("requests_text").is_none(), "{params}");
    assert!(params.get("request").is_none(), "{params}");
    assert!(
        !report.to_string().contains("user:42"),
        "the file's text is in the report"
    );
    let recorded = metric(&trials[0], "request_latency")["count"]
        .as_u64()
        .unwrap();
    assert!(recorded > 0 && recorded as usize <= log.lines().count());
    for errors in ["errors_io", "errors_timeout", "errors_connect"] {
        assert_eq!(metric(&trials[0], errors)["value"], 0.0, "{errors}");
    }
}

#[test]
fn a_bad_request_file_stops_the_run_before_any_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-tcp-requests-bad-server");
    std::fs::write(dir.path().join("bad.txt"), "PING\\n\n# fine\nGET \\q\\n\n").unwrap();
    std::fs::write(dir.path().join("good.txt"), "PING\\n\n").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--param", "requests=bad.txt"],
            "tcp: requests=bad.txt: line 3: 'GET \\q\\n': unknown escape \\q at byte 4",
        ),
        (
            &["--param", "requests=missing.txt"],
            "tcp: requests=missing.txt: cannot read it",
        ),
        (
            &["--param", "requests=good.txt", "--param", "request=PING\\n"],
            "request= and requests= both say what to send",
        ),
        (
            &["--param", "requests_text=PING\\n"],
            "requests_text= is not yours to set",
        ),
    ];
    for (extra, says) in cases {
        let mut args = extra.to_vec();
        args.extend(["--rounds", "1", "--warmup", "0", "--duration", "1"]);
        let out = run_in(dir.path(), &server, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        // No trial ran: the server never started, so it never opened its log.
        assert!(
            !dir.path().join("lines.log").exists(),
            "{extra:?}: a server started: {stderr}"
        );
    }
}
