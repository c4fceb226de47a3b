//! `grpc=` end to end: `quietbench run --local` starts a tonic gRPC server (tests'
//! `grpcserver`, an implementation that is not ours) for the trial, the controller encodes the
//! JSON request from the server's descriptor set, and the load agent's hand-written HTTP/2
//! client calls it. The server fails every 10th call with UNAVAILABLE (14), so the counts by
//! code are known. The reader on its own is unit-tested on tonic's captured bytes
//! (crates/quietbench-probe/src/http/h2/tests.rs), the encoding on the agent's descriptor set
//! (crates/quietbench-controller/src/execute/grpc_call.rs).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::servers::processes_of;
use serde_json::Value;

/// One measuring test at a time (see tests/http_server.rs).
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn value(trial: &Value, name: &str) -> f64 {
    let metric = trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"));
    // A histogram's figure is its count of requests; a counter's, its value.
    match metric["histogram"].is_null() {
        true => metric["value"].as_f64().unwrap(),
        false => metric["count"].as_f64().unwrap(),
    }
}

/// A copy of the gRPC server under a name of this test's, and its descriptor set.
fn own_grpc_server(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let server = dir.join(name);
    std::fs::copy(env!("CARGO_BIN_EXE_grpcserver"), &server).unwrap();
    let set = dir.join("bench.pb");
    let out = std::process::Command::new(&server)
        .arg("--descriptor-out")
        .arg(&set)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (server, set)
}

/// `run --local --probe http` calling `method` on the server, one 1-s trial at 200 calls/s on
/// 4 connections, the request `json`.
fn run_grpc(dir: &Path, server: &Path, set: &Path, method: &str, json: &str) -> Output {
    let request = dir.join("request.json");
    std::fs::write(&request, json).unwrap();
    common::quietbench()
        .current_dir(dir)
        .args(["run", "--local", "--probe", "http", "--no-store"])
        .arg("--param")
        .arg(format!(
            "server={} --port {{port}} --fail-every 10 --fail-code 14",
            server.display()
        ))
        .args(["--param", &format!("grpc={method}")])
        .args(["--param", "grpc_request=request.json"])
        .arg("--param")
        .arg(format!("grpc_descriptor={}", set.display()))
        .args(["--param", "rate=200", "--param", "connections=4"])
        .args(["--param", "max_lag_ms=1000"])
        .args(["--rounds", "1", "--warmup", "0", "--duration", "1"])
        .args(["--json", "out.json"])
        .output()
        .unwrap()
}

#[test]
fn a_tonic_server_is_called_and_its_statuses_counted_by_code() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (server, set) = own_grpc_server(dir.path(), "qb-grpc-ok");
    // Every kind of field the JSON mapping has: a string, repeated int64 as strings and
    // numbers, a nested message, bytes in base64.
    let json = r#"{"text": "route A to B", "numbers": ["1", 2, 3],
                   "shape": {"name": "square", "size": 2.5}, "blob": "AAEC"}"#;
    let out = run_grpc(dir.path(), &server, &set, "qbtest.v1.Bench/Echo", json);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived its trial"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 1);
    let trial = &trials[0];
    assert_eq!(trial["params"]["grpc"], "qbtest.v1.Bench/Echo");
    assert_eq!(trial["params"]["path"], "/qbtest.v1.Bench/Echo");
    assert_eq!(trial["params"]["grpc_request"], "request.json");
    assert!(trial["params"].get("grpc_message").is_none(), "{trial}");
    let sent = value(trial, "requests_sent");
    let recorded = value(trial, "request_latency");
    let unavailable = value(trial, "errors_grpc_unavailable");
    let abandoned = value(trial, "requests_abandoned");
    // 200/s for 1 s: at most 201 were due, whatever the machine's speed; the server fails
    // every 10th call it answers.
    assert!((20.0..=201.0).contains(&sent), "{sent} sent");
    assert_eq!(recorded + unavailable + abandoned, sent, "{trial}");
    let answered = recorded + unavailable;
    assert_eq!(unavailable, (answered / 10.0).floor(), "{trial}");
    for code in [
        "cancelled",
        "unknown",
        "invalid_argument",
        "internal",
        "unimplemented",
    ] {
        assert_eq!(value(trial, &format!("errors_grpc_{code}")), 0.0, "{code}");
    }
    assert_eq!(value(trial, "errors_io"), 0.0, "{trial}");
    // The table shows the code that occurred, and not the fifteen that did not.
    assert!(stdout.contains("errors_grpc_unavailable"), "{stdout}");
    assert!(!stdout.contains("errors_grpc_cancelled"), "{stdout}");
}

#[test]
fn a_method_that_cannot_be_called_stops_the_run_before_any_server_starts() {
    // Also one at a time with the other: a copy being written while the other test forks is
    // "text file busy" at its exec.
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (server, set) = own_grpc_server(dir.path(), "qb-grpc-refused");
    for (method, json, expected) in [
        (
            "qbtest.v1.Bench/Watch",
            "{}",
            "qbtest.v1.Bench/Watch streams; quietbench times unary calls only",
        ),
        (
            "qbtest.v1.Bench/Echo",
            r#"{"txt": "typo"}"#,
            "not a qbtest.v1.EchoRequest in JSON",
        ),
    ] {
        let out = run_grpc(dir.path(), &server, &set, method, json);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        // The report says why, and holds no trial.
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
                .unwrap();
        assert_eq!(report["complete"], false);
        assert!(
            report["error"].as_str().unwrap().contains(expected),
            "{report}"
        );
        assert_eq!(report["trials"].as_array().map_or(0, Vec::len), 0);
    }
    assert!(processes_of(&server).is_empty());
}
