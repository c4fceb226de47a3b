//! The `http` probe end to end: `quietbench run --local` starts an agent for the measured host
//! and a load agent, the first starts the test server (tests/src/bin/testserver.rs) for each
//! trial, the second sends it requests at a constant rate, and the report has the latency from
//! each request's intended send, the service time beside it, and the server's CPU time.
//!
//! Each test runs its own copy of the test server under a name of its own, so that it can find
//! that server's processes in /proc (to stall it, and to check that none is left) without
//! touching another test's.

mod common;

use common::servers::{own_server, processes_of};

/// One measuring test at a time: on a 2-CPU machine, the load and servers of another test of
/// this file in parallel moved a 3-ms server's per-trial p50 by tens of percent.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

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
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
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
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
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
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
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

/// `compare --local --probe http` of two servers, `--a` and `--b` each started for its own
/// trials; `b_args` are B's, A's are `--delay-us 20000`.
fn compare_servers(server: &Path, b_args: &str, seed: &str, json: &Path) -> Value {
    let side = |args: &str| format!("{} --port {{port}} {args}", server.display());
    let out = common::quietbench()
        .args(["compare", "--local", "--probe", "http", "--no-store"])
        .args(["--param", "rate=50", "--param", "connections=4"])
        // As in run_http: the generator's lag bound is not what these trials test.
        .args(["--param", "max_lag_ms=1000"])
        .args(["--rounds", "6", "--warmup", "1", "--duration", "1"])
        .args(["--seed", seed])
        .arg("--a")
        .arg(side("--delay-us 20000"))
        .arg("--b")
        .arg(side(b_args))
        .arg("--json")
        .arg(json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("compared: the median latency of each trial's requests"),
        "{stdout}"
    );
    assert!(
        processes_of(server).is_empty(),
        "a server outlived its trial"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["probe"], "http", "{v:#}");
    assert_eq!(v["figure"], "p50", "{v:#}");
    assert_eq!(v["interleave"], "trials", "{v:#}");
    assert_eq!(v["rounds"], 6, "{v:#}");
    assert_eq!(v["a"], side("--delay-us 20000"), "{v:#}");
    let others: Vec<&str> = v["other_figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["figure"].as_str().unwrap())
        .collect();
    assert_eq!(others, ["p99", "server-cpu"], "{v:#}");
    v
}

/// Two builds of a server: B sleeps 24 ms per request, A 20 ms. B's p50 latency is 20% higher
/// less this machine's share of each request (the loopback, the load generator, a late wake-up),
/// which is well under 60 ms on any host: the verdict must call A faster by 5% to 25%. The same
/// server against itself must claim nothing its interval does not allow: its centre within
/// three half-widths of 1 (a bias, not noise, would break that; 5% of A/A runs may still
/// exclude 1 by chance, so the verdict's word is not asserted).
#[test]
fn compare_tells_two_servers_apart_and_a_server_from_itself_not() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-http-compare-server");

    let v = compare_servers(
        &server,
        "--delay-us 24000",
        "11",
        &dir.path().join("ab.json"),
    );
    let ratio = f(&v["ratio"]);
    assert_eq!(v["verdict"], "a_faster", "{v:#}");
    assert!((1.05..=1.25).contains(&ratio), "B/A {ratio}: {v:#}");

    let v = compare_servers(
        &server,
        "--delay-us 20000",
        "12",
        &dir.path().join("aa.json"),
    );
    let (lo, hi) = (f(&v["ci_low"]), f(&v["ci_high"]));
    let (centre, half) = ((hi.ln() + lo.ln()) / 2.0, (hi.ln() - lo.ln()) / 2.0);
    assert!(
        centre.abs() <= 3.0 * half,
        "an A/A's interval [{lo:.4}, {hi:.4}] is {:.1} half-widths from 1: {v:#}",
        centre.abs() / half
    );
}

/// What compare cannot measure for servers is refused before anything starts, with the way
/// that can.
#[test]
fn compare_refuses_what_two_servers_cannot_be_measured_by() {
    let cases: &[(&[&str], &str)] = &[
        (&["--interleave", "invocations"], "--interleave trials"),
        (
            &["--interleave", "duet", "--slo", "p99<20ms@100rps"],
            "not built for --interleave duet",
        ),
        (
            &["--interleave", "duet", "--param", "server_b=./x"],
            "--param server_b=",
        ),
        (&["--figure", "cpu"], "p50, p99 or server-cpu"),
        (&["--param", "target=10.0.0.9:80"], "--param target="),
        (&["--param", "server=./x"], "--param server="),
        (
            &["--load-from", "127.0.0.1:1"],
            "with --local a second agent",
        ),
    ];
    for (extra, says) in cases {
        let out = common::quietbench()
            .args(["compare", "--local", "--probe", "http", "--no-store"])
            .args(["--a", "./a --port {port}", "--b", "./b --port {port}"])
            .args(*extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
    let out = common::quietbench()
        .args(["compare", "--local", "--a", "true", "--b", "true"])
        .args(["--param", "rate=5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is for --probe http"), "{stderr}");
}
