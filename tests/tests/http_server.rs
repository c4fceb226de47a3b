//! The `http` probe end to end: `quietbench run --local` starts an agent for the measured host
//! and a load agent, the first starts the test server (tests/src/bin/testserver.rs) for each
//! trial, the second sends it requests at a constant rate, and the report has the latency from
//! each request's intended send, the service time beside it, and the server's CPU time.
//!
//! Each test runs its own copy of the test server under a name of its own, so that it can find
//! that server's processes in /proc (to stall it, and to check that none is left) without
//! touching another test's.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// A copy of the test server named for this test, in `dir`.
fn own_server(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(env!("CARGO_BIN_EXE_testserver"), &path).unwrap();
    path
}

/// Pids of live processes whose executable is `exe`.
fn processes_of(exe: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|target| target == exe)
                // Zombies have no exe link; a stopped or running process does.
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
        })
        .collect()
}

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `run --local --probe http` against `server` with these extra arguments.
fn run_http(server: &Path, server_args: &str, extra: &[&str], json: &Path) -> std::process::Output {
    let mut command = common::quietbench();
    command
        .args(["run", "--local", "--probe", "http", "--no-store"])
        // The generator's lag bound is the probe's own test; on a bursty 2-vCPU host a 10 ms
        // hiccup of the load's CPU would void these trials, which test other things.
        .args(["--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --port {{port}} {server_args}",
            server.display()
        ))
        .args(extra)
        .arg("--json")
        .arg(json);
    command.output().unwrap()
}

#[test]
fn the_load_agent_times_the_server_the_measured_host_started_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-e2e-server");
    let json = dir.path().join("report.json");
    let out = run_http(
        &server,
        "--work 20000",
        &[
            "--param",
            "rate=200",
            "--param",
            "connections=4",
            "--param",
            "path=/search?from=A&to=B",
            "--rounds",
            "2",
            "--duration",
            "1",
        ],
        &json,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived its trial: {:?}",
        processes_of(&server)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    for trial in trials {
        assert_eq!(trial["probe"], "http");
        // The record keeps the server's command beside the load's parameters.
        assert!(
            trial["params"]["server"]
                .as_str()
                .is_some_and(|s| s.contains("qb-http-e2e-server")),
            "{}",
            trial["params"]
        );
        assert_eq!(trial["params"]["rate"], "200");
        let latency = metric(trial, "request_latency");
        assert_eq!(latency["unit"], "ns");
        let count = latency["count"].as_u64().unwrap();
        // 200/s for 1 s: at most 200 were due (whatever the machine's speed, never more).
        assert!((1..=201).contains(&count), "{count} requests recorded");
        let service = metric(trial, "service_time");
        assert_eq!(service["count"].as_u64().unwrap(), count);
        // A request's time from its intended send includes its time from its actual send.
        assert!(
            f(&latency["max"]) >= f(&service["max"]) * 0.99,
            "{latency} {service}"
        );
        assert!(f(&metric(trial, "server_cpu_time")["value"]) > 0.0);
        assert!(f(&metric(trial, "server_cpu_per_request")["value"]) > 0.0);
        assert!(f(&metric(trial, "server_peak_rss")["value"]) > 0.0);
        for errors in [
            "errors_connect",
            "errors_timeout",
            "errors_5xx",
            "errors_io",
        ] {
            assert_eq!(f(&metric(trial, errors)["value"]), 0.0, "{errors}");
        }
    }
}

#[test]
fn a_stalled_server_shows_in_the_latency_from_the_intended_send() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-stall-server");
    let json = dir.path().join("report.json");
    // Stops the server for 1 s once it has served a while, from outside (SIGSTOP, SIGCONT).
    let staller = {
        let server = server.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let pid = loop {
                if let Some(pid) = processes_of(&server).first() {
                    break *pid;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no server started"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            std::thread::sleep(Duration::from_millis(700));
            let pid = nix::unistd::Pid::from_raw(pid);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
            std::thread::sleep(Duration::from_secs(1));
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
        })
    };
    let out = run_http(
        &server,
        "",
        &[
            "--param",
            "rate=100",
            "--param",
            "connections=4",
            "--param",
            "timeout_ms=5000",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--duration",
            "3",
        ],
        &json,
    );
    staller.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trial = &report["trials"][0];
    let latency = metric(trial, "request_latency");
    // A request due when the stall began waited all of it: however fast this machine is, the
    // stall is 1 s of wall time that an open loop cannot hide.
    assert!(f(&latency["max"]) >= 0.9e9, "{latency}");
    // About a third of the trial's requests were due during the stall, each waiting out the
    // rest of it: the p90 shows it (a closed loop would have sent none of them).
    assert!(f(&latency["p90"]) >= 0.1e9, "{latency}");
    assert!(processes_of(&server).is_empty());
}

#[test]
fn a_server_that_exits_or_does_not_exist_fails_the_run_with_the_reason_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-exit-server");
    let json = dir.path().join("report.json");
    let out = run_http(
        &server,
        "--exit-after-ms 300",
        &["--rounds", "1", "--warmup", "0", "--duration", "2"],
        &json,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("exited with status 3"), "{stderr}");
    assert!(processes_of(&server).is_empty());

    let missing = dir.path().join("no-such-server");
    let out = run_http(&missing, "", &["--rounds", "1", "--warmup", "0"], &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no-such-server"), "{stderr}");

    // The load goes to the server the trial started, nowhere else.
    let out = run_http(
        &server,
        "",
        &[
            "--param",
            "target=10.1.2.3:80",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ],
        &json,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not yours to set"), "{stderr}");
}
