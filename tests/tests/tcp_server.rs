//! The `tcp` probe end to end: `quietbench run --local` starts an agent for the measured host
//! and a load agent, the first starts the test server in its line mode
//! (tests/src/bin/testserver.rs `--raw`) for each trial, the second sends it raw requests at a
//! constant rate, and the report has the latency from each request's intended send, the
//! service time beside it, and the server's CPU time: `http`'s machinery with raw framing.
//!
//! Each test runs its own copy of the test server under a name of its own, so that it can
//! check that none of its processes is left without touching another test's.

mod common;

use common::servers::{own_server, processes_of};

/// One measuring test at a time: on a 2-CPU machine another test's load and servers in
/// parallel move a server's latency by tens of percent.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

use std::path::Path;

use serde_json::Value;

fn metric<'a>(trial: &'a Value, name: &str) -> Option<&'a Value> {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
}

fn value(trial: &Value, name: &str) -> f64 {
    let m = metric(trial, name).unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"));
    m["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} is not a number: {m}"))
}

/// `run --local --probe tcp` against `server --raw` with these extra arguments.
fn run_tcp(server: &Path, extra: &[&str], json: &Path) -> std::process::Output {
    let mut command = common::quietbench();
    command
        .args(["run", "--local", "--probe", "tcp", "--no-store"])
        // The generator's lag bound is the probe's own test; on a bursty 2-vCPU host a 10 ms
        // hiccup of the load's CPU would void these trials, which test other things.
        .args(["--param", "max_lag_ms=1000"])
        .arg("--param")
        .arg(format!(
            "server={} --raw --port {{port}} --work 20000",
            server.display()
        ))
        .args(extra)
        .arg("--json")
        .arg(json);
    command.output().unwrap()
}

#[test]
fn the_load_agent_times_a_raw_server_the_measured_host_started_and_stopped() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-tcp-e2e-server");
    let json = dir.path().join("report.json");
    let out = run_tcp(
        &server,
        &[
            "--param",
            "rate=200",
            "--param",
            "connections=4",
            "--param",
            "request=GET k\\r\\n",
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
        assert_eq!(trial["probe"], "tcp");
        let params = &trial["params"];
        assert!(
            params["server"]
                .as_str()
                .is_some_and(|s| s.contains("qb-tcp-e2e-server")),
            "{params}"
        );
        assert_eq!(params["request"], "GET k\\r\\n", "{params}");
        assert_eq!(params["response_terminator"], "\\n", "{params}");
        let latency = metric(trial, "request_latency").expect("request_latency");
        assert_eq!(latency["unit"], "ns");
        let count = latency["count"].as_u64().unwrap();
        // 200/s for 1 s: at most 200 were due (whatever the machine's speed, never more).
        assert!((1..=201).contains(&count), "{count} requests recorded");
        let service = metric(trial, "service_time").expect("service_time");
        assert_eq!(service["count"].as_u64().unwrap(), count);
        assert!(value(trial, "server_cpu_time") > 0.0);
        assert!(value(trial, "server_cpu_per_request") > 0.0);
        for errors in ["errors_connect", "errors_timeout", "errors_io"] {
            assert_eq!(value(trial, errors), 0.0, "{errors}");
        }
        // A raw response has no status: no status counts, not even zeros.
        assert!(metric(trial, "errors_4xx").is_none(), "{trial}");
        assert!(metric(trial, "errors_5xx").is_none(), "{trial}");
    }
}

#[test]
fn a_fixed_length_answer_is_read_whole_and_bad_parameters_are_refused_plainly() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-tcp-fixed-server");
    let json = dir.path().join("report.json");
    // The test server's answers are 21 bytes: framed by their length, not their newline.
    let out = run_tcp(
        &server,
        &[
            "--param",
            "rate=0",
            "--param",
            "connections=2",
            "--param",
            "response_bytes=21",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--duration",
            "1",
        ],
        &json,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trial = &report["trials"][0];
    assert_eq!(trial["params"]["response_bytes"], "21");
    let count = metric(trial, "request_latency").expect("latency")["count"]
        .as_u64()
        .unwrap();
    assert!(count > 0, "{trial}");
    assert_eq!(value(trial, "errors_io"), 0.0);

    for (param, said) in [
        ("request=PING\\q", "unknown escape \\q at byte 4"),
        ("response_bytes=0", "from 1 to 1073741824"),
        ("requests_order=random", "give requests=FILE too"),
        ("path=/x", "http's parameter"),
    ] {
        let out = run_tcp(
            &server,
            &["--param", param, "--rounds", "1", "--warmup", "0"],
            &json,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{param}");
        assert!(stderr.contains(said), "{param}: {stderr}");
    }
    assert!(processes_of(&server).is_empty());
}

/// `compare --probe tcp`: two raw servers, B sleeping 24 ms per request and A 20 ms,
/// judged on the p50 latency like http's (the statistics are http's; this checks the wiring:
/// the probe, its figures, both servers started and stopped).
#[test]
fn compare_judges_two_raw_servers_on_their_latency() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-tcp-compare-server");
    let json = dir.path().join("verdict.json");
    let side = |delay: u32| {
        format!(
            "{} --raw --port {{port}} --delay-us {delay}",
            server.display()
        )
    };
    let out = common::quietbench()
        .args(["compare", "--local", "--probe", "tcp", "--no-store"])
        .args(["--param", "rate=50", "--param", "connections=4"])
        // The generator's lag bound is the probe's own test, not this one's.
        .args(["--param", "max_lag_ms=1000"])
        .args([
            "--rounds",
            "5",
            "--warmup",
            "1",
            "--duration",
            "1",
            "--seed",
            "5",
        ])
        .arg("--a")
        .arg(side(20000))
        .arg("--b")
        .arg(side(24000))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived its trial"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["probe"], "tcp", "{v:#}");
    assert_eq!(v["figure"], "p50", "{v:#}");
    assert_eq!(v["rounds"], 5, "{v:#}");
    // 20% more sleep, less this machine's share of each request: B is slower, whatever the
    // machine (the bound is as loose as http's test of the same pair).
    let ratio = v["ratio"].as_f64().unwrap();
    assert!((1.05..=1.25).contains(&ratio), "B/A {ratio}: {v:#}");
}
