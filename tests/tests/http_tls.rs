//! `tls=true` end to end: `quietbench run --local` starts the test server in its TLS modes
//! (`--tls`: HTTP/1.1, `--tls --h2`: HTTP/2 by ALPN; rustls's buffered server, not the
//! unbuffered client the load uses), and the load agent times it through its own TLS; and
//! what a user who gets the protocol wrong is told.

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

/// `run --local --probe http --param tls=true PARAMS` against `server SERVER_ARGS`: one trial
/// of 1 s at 200 requests/s on 4 connections. The run's output and the server's path.
fn run_tls(
    dir: &Path,
    name: &str,
    server_args: &str,
    params: &[&str],
) -> (std::process::Output, std::path::PathBuf) {
    let server = own_server(dir, name);
    let mut command = common::quietbench();
    command
        .args(["run", "--local", "--probe", "http", "--no-store"])
        .args(["--param", "tls=true", "--param", "rate=200"])
        .args(["--param", "connections=4", "--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --port {{port}} {server_args}",
            server.display()
        ))
        .args(["--rounds", "1", "--warmup", "0", "--duration", "1"])
        .arg("--json")
        .arg(dir.join(format!("{name}.json")));
    for param in params {
        command.args(["--param", param]);
    }
    (command.output().unwrap(), server)
}

#[test]
fn http1_and_http2_over_tls_are_timed() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    for (name, server_args, params) in [
        (
            "qb-tls-h1",
            "--tls --work 20000 --body-bytes 40000",
            &["path=/a?b=c"][..],
        ),
        (
            "qb-tls-h2",
            "--tls --h2 --work 20000 --body-bytes 40000",
            &["http2=true"][..],
        ),
    ] {
        let (out, server) = run_tls(dir.path(), name, server_args, params);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(
            processes_of(&server).is_empty(),
            "{name}: a server outlived its trial"
        );
        let json = dir.path().join(format!("{name}.json"));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        let trial = &report["trials"][0];
        assert_eq!(trial["params"]["tls"], "true", "{name}");
        let count = metric(trial, "request_latency")["count"].as_u64().unwrap();
        // 200/s for 1 s: at most 200 were due, whatever the machine's speed.
        assert!(
            (1..=201).contains(&count),
            "{name}: {count} requests recorded"
        );
        for errors in [
            "errors_connect",
            "errors_timeout",
            "errors_4xx",
            "errors_5xx",
            "errors_io",
        ] {
            assert_eq!(value(trial, errors), 0.0, "{name} {errors}: {trial}");
        }
        // TLS 1.3 session tickets arrive on idle connections: taken in, not a reconnect.
        assert_eq!(value(trial, "reconnects"), 0.0, "{name}: {trial}");
    }
}

#[test]
fn the_wrong_protocol_is_named() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    for (name, server_args, params, expected) in [
        // A cleartext server.
        (
            "qb-tls-plain",
            "",
            &[][..],
            "does it serve cleartext on that port?",
        ),
        // A TLS server that offers HTTP/1.1 only, asked for HTTP/2.
        (
            "qb-tls-no-h2",
            "--tls",
            &["http2=true"][..],
            "did not agree to the protocol asked for by ALPN",
        ),
    ] {
        let (out, server) = run_tls(dir.path(), name, server_args, params);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(
            processes_of(&server).is_empty(),
            "{name}: a server outlived its trial"
        );
    }
}
