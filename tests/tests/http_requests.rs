//! The `http` probe's request files end to end: `quietbench run --local --probe http --param
//! requests=FILE` reads the file on the controller's machine (relative to where it runs), the
//! load agent replays its lines to the test server (tests/src/bin/testserver.rs, which logs
//! each request's line with `--paths-log`), and the record keeps `requests` as given. A bad
//! file stops the run before any server starts, naming the line.

mod common;

use common::servers::own_server;

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

/// `run --local --probe http` in `dir` (so a relative `requests=` is read there), its server
/// logging the requests it gets to `dir/paths.log`, with these extra arguments.
fn run_in(dir: &Path, server: &Path, extra: &[&str]) -> std::process::Output {
    let mut command = common::quietbench();
    command
        .current_dir(dir)
        .args(["run", "--local", "--probe", "http", "--no-store"])
        // The generator's lag bound is the probe's own test: a bursty 2-vCPU host must not void
        // these trials, which test other things.
        .args(["--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --port {{port}} --paths-log {}",
            server.display(),
            dir.join("paths.log").display()
        ))
        .args(extra);
    command.output().unwrap()
}

const ROUTES: &str =
    "# Monday's queries\n/search?from=A&to=B\n\nPOST /orders\r\ndelete /orders/7\n";
const SENT: [&str; 3] = [
    "GET /search?from=A&to=B",
    "POST /orders",
    "DELETE /orders/7",
];

#[test]
fn a_request_file_is_replayed_in_its_order_and_the_record_keeps_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-requests-server");
    std::fs::write(dir.path().join("routes.txt"), ROUTES).unwrap();
    let json = dir.path().join("report.json");
    let out = run_in(
        dir.path(),
        &server,
        &[
            "--param",
            "requests=routes.txt",
            "--param",
            "rate=100",
            "--param",
            "connections=1",
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

    // One thread, one connection: the server got the file's lines in order, wrapping.
    let log = std::fs::read_to_string(dir.path().join("paths.log")).unwrap();
    let seen: Vec<&str> = log.lines().collect();
    assert!(seen.len() > SENT.len(), "{seen:?}");
    for (k, line) in seen.iter().enumerate() {
        assert_eq!(*line, SENT[k % SENT.len()], "request {k} of {seen:?}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 1);
    let params = &trials[0]["params"];
    // The file's name as given, never its text.
    assert_eq!(params["requests"], "routes.txt", "{params}");
    assert_eq!(params["requests_order"], "sequence", "{params}");
    assert!(params.get("requests_text").is_none(), "{params}");
    assert!(params.get("path").is_none(), "{params}");
    assert!(
        !report.to_string().contains("/orders/7"),
        "the file's text is in the report"
    );
    assert!(
        metric(&trials[0], "request_latency")["count"]
            .as_u64()
            .unwrap()
            > 0
    );
    for errors in ["errors_4xx", "errors_5xx", "errors_io", "errors_timeout"] {
        assert_eq!(metric(&trials[0], errors)["value"], 0.0, "{errors}");
    }
}

#[test]
fn a_bad_request_file_stops_the_run_before_any_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-requests-bad-server");
    std::fs::write(dir.path().join("bad.txt"), "/ok\n# fine\nsearch?q=1\n").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--param", "requests=bad.txt"],
            "http: requests=bad.txt: line 3: 'search?q=1' must start with '/'",
        ),
        (
            &["--param", "requests=missing.txt"],
            "http: requests=missing.txt: cannot read it",
        ),
        (
            &["--param", "requests_text=/a"],
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
            !dir.path().join("paths.log").exists(),
            "{extra:?}: a server started: {stderr}"
        );
    }
}
