//! `http2=true` end to end: `quietbench run --local` starts the test server in its HTTP/2
//! mode (`--h2`, the `h2` crate's server side: an implementation that is not ours) for each
//! trial, and the load agent's hand-written HTTP/2 client sends it requests. What a response
//! says (its status, its body's length, a POST's body, a HEAD's lack of one) is read through
//! that server; the client's framing on its own is unit-tested in the probe crate
//! (crates/quietbench-probe/src/http/h2/tests.rs, on a real nginx's bytes).

mod common;

use std::path::Path;

use common::servers::{own_server, processes_of};
use serde_json::Value;

/// One measuring test at a time (see tests/http_server.rs).
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))
}

fn value(trial: &Value, name: &str) -> f64 {
    metric(trial, name)["value"].as_f64().unwrap()
}

/// `run --local --probe http --param http2=true` against `server --h2 SERVER_ARGS`, one trial
/// of 1 s at 200 requests/s on 4 connections; the report's trials.
fn run_http2(dir: &Path, name: &str, server_args: &str, extra: &[&str]) -> Vec<Value> {
    let server = own_server(dir, name);
    let json = dir.join(format!("{name}.json"));
    let out = common::quietbench()
        .args(["run", "--local", "--probe", "http", "--no-store"])
        .args(["--param", "http2=true", "--param", "rate=200"])
        .args(["--param", "connections=4", "--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --h2 --port {{port}} {server_args}",
            server.display()
        ))
        .args(["--rounds", "1", "--warmup", "0", "--duration", "1"])
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived its trial"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    report["trials"].as_array().unwrap().clone()
}

#[test]
fn an_http2_server_is_timed_and_its_statuses_counted() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // A body larger than one 16 KiB frame, with work per request.
    let trials = run_http2(
        dir.path(),
        "qb-h2-ok",
        "--work 20000 --body-bytes 40000",
        &["--param", "path=/search?from=A&to=B"],
    );
    assert_eq!(trials.len(), 1);
    let trial = &trials[0];
    assert_eq!(trial["params"]["http2"], "true");
    let count = metric(trial, "request_latency")["count"].as_u64().unwrap();
    // 200/s for 1 s: at most 200 were due, whatever the machine's speed.
    assert!((1..=201).contains(&count), "{count} requests recorded");
    assert_eq!(
        metric(trial, "service_time")["count"].as_u64().unwrap(),
        count
    );
    for errors in [
        "errors_connect",
        "errors_timeout",
        "errors_4xx",
        "errors_5xx",
        "errors_io",
    ] {
        assert_eq!(value(trial, errors), 0.0, "{errors}: {trial}");
    }
    // One connection each, kept: HTTP/2 reopened none.
    assert_eq!(value(trial, "reconnects"), 0.0);
    assert!(value(trial, "server_cpu_per_request") > 0.0);

    // Every answer a 503: counted as errors, never as latency.
    let trials = run_http2(dir.path(), "qb-h2-503", "--status 503", &[]);
    let trial = &trials[0];
    let sent = value(trial, "requests_sent");
    assert!(sent >= 1.0, "{trial}");
    let unanswered = value(trial, "requests_abandoned");
    assert_eq!(value(trial, "errors_5xx") + unanswered, sent, "{trial}");
    assert_eq!(value(trial, "errors_io"), 0.0, "{trial}");
    assert_eq!(
        metric(trial, "request_latency")["count"].as_u64(),
        Some(0),
        "{trial}"
    );
}

#[test]
fn http2_requests_of_a_file_with_bodies_and_heads_arrive_as_sent() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paths.log");
    let requests = dir.path().join("requests.txt");
    std::fs::write(&requests, "/a?x=1\nPOST /b\nHEAD /c\n").unwrap();
    let trials = run_http2(
        dir.path(),
        "qb-h2-file",
        &format!("--body-bytes 100 --paths-log {}", log.display()),
        &[
            "--param",
            &format!("requests={}", requests.display()),
            "--param",
            "body=hello",
            "--param",
            "header.X-Trace=e2e",
        ],
    );
    let trial = &trials[0];
    // The HEAD's answer has no body though its content-length says 100: read as complete.
    assert_eq!(value(trial, "errors_io"), 0.0, "{trial}");
    assert_eq!(value(trial, "errors_4xx"), 0.0, "{trial}");
    let logged = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = logged.lines().collect();
    assert!(lines.len() >= 3, "{logged}");
    // Sent in the file's order, wrapping; four connections may deliver two neighbours in
    // either order, so the server's log is checked as counts: each line, as often as the others
    // give or take one.
    let counts = ["GET /a?x=1", "POST /b", "HEAD /c"]
        .map(|expected| lines.iter().filter(|l| **l == expected).count());
    assert_eq!(counts.iter().sum::<usize>(), lines.len(), "{logged}");
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(max - min <= 1, "{counts:?}: {logged}");
}

#[test]
fn http2_refuses_what_it_cannot_send_before_any_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-h2-refused");
    let started = dir.path().join("started");
    for (params, expected) in [
        (["http2=maybe", "rate=10"], "true or false"),
        (["http2=true", "header.Upgrade=h2c"], "connection-specific"),
        (["http2=true", "header.TE=gzip"], "connection-specific"),
    ] {
        let param = params[1];
        let out = common::quietbench()
            .args(["run", "--local", "--probe", "http", "--no-store"])
            .args(["--param", params[0], "--param", param])
            .args(["--param", "server_shell=true", "--param"])
            .arg(format!(
                "server=touch {} && exec {} --h2 --port {{port}}",
                started.display(),
                server.display()
            ))
            .args(["--rounds", "1", "--warmup", "0", "--duration", "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{param}: {stderr}");
        assert!(stderr.contains(expected), "{param}: {stderr}");
        // The load agent checked the parameters before the server's start: it never ran.
        assert!(!started.exists(), "{param}: the server was started");
    }
}
