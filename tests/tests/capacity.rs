//! `quietbench capacity` end to end: the test server with a known capacity (`--slots N` requests
//! served at once, each sleeping `--delay-us`: N / delay requests/s whatever the CPU's speed),
//! searched by the real load agent on this machine; two builds whose capacities differ by 10%
//! and whose latency at half load is the same are told apart on capacity and not on latency.
//! The bounds are wide enough for a bursty host: the search's resolution is 5%, the test asks
//! for the capacity within 20% below the truth.

mod common;

use common::servers::{own_server, processes_of};
use serde_json::Value;

/// One measuring test at a time (see tests/http_server.rs): the capacity search and the SLO
/// gate, run side by side on a 2-vCPU host, took each other's CPU, and the fast build of the
/// gate once saw a 50 ms stall.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn capacity(args: &[&str]) -> std::process::Output {
    common::quietbench()
        .arg("capacity")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_tenth_less_capacity_is_found_and_latency_at_half_load_is_not_called_different() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-capacity-server");
    let json = dir.path().join("capacity.json");
    let db = dir.path().join("store.sqlite3");
    let html = dir.path().join("capacity.html");
    // A: 10 slots of 5 ms, 2,000 requests/s; B: 9 slots, 1,800 requests/s. Latency below
    // capacity is the 5 ms sleep for both.
    let a = format!(
        "{} --port {{port}} --delay-us 5000 --slots 10",
        server.display()
    );
    let b = format!(
        "{} --port {{port}} --delay-us 5000 --slots 9",
        server.display()
    );
    let out = capacity(&[
        "--local",
        "--a",
        &a,
        "--b",
        &b,
        "--slo",
        "p99<50ms",
        "--start",
        "1000",
        "--duration",
        "3",
        "--load-rounds",
        "5",
        "--seed",
        "11",
        // The generator's own lag bound is the http probe's test; a 10 ms hiccup of a bursty
        // 2-vCPU host's load thread would void trials that test the search.
        "--param",
        "max_lag_ms=1000",
        "--db",
        db.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "quietbench.capacity.v1");
    let build = |i: usize| &report["builds"][i];
    for (i, truth) in [(0, 2000.0), (1, 1800.0)] {
        let held = build(i)["capacity"]
            .as_f64()
            .unwrap_or_else(|| panic!("{report}"));
        let failed = build(i)["failed_at"].as_f64().unwrap();
        assert!(
            held <= truth && held >= 0.8 * truth,
            "build {i}: held {held}, truth {truth}\n{stdout}"
        );
        assert!(
            failed > held && failed <= truth * 1.1,
            "build {i}: {failed}\n{stdout}"
        );
        assert_eq!(build(i)["settled"], true);
        // The curve has every step, the held rate confirmed among them.
        let steps = build(i)["steps"].as_array().unwrap();
        assert!(
            steps
                .iter()
                .any(|s| s["rate"] == held && s["confirm"] == true)
        );
        assert!(
            steps
                .iter()
                .any(|s| s["rate"] == failed && s["passed"] == false)
        );
    }
    assert_eq!(report["comparison"]["call"], "b_lower", "{stdout}");
    assert!(
        stdout.contains("B has less capacity than A: B/A 0.9"),
        "{stdout}"
    );
    // At half of A's capacity both wait 5 ms: no difference worth a release decision.
    let at_load = &report["at_load"];
    let p50 = at_load["p50"]["ratio"]
        .as_f64()
        .unwrap_or_else(|| panic!("{at_load}"));
    assert!((0.95..=1.05).contains(&p50), "{at_load}");
    assert!(stdout.contains("latency at "), "{stdout}");
    // Every step is a variant of one stored run, which `show` reads back.
    let run_id = report["run_id"].as_str().unwrap();
    let shown = common::quietbench()
        .args(["show", run_id, "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    let shown_text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown_text}");
    assert!(
        shown_text.contains("A@1000") && shown_text.contains("B.load@"),
        "{shown_text}"
    );
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived the search"
    );
}

#[test]
fn bad_requests_are_refused_before_anything_starts() {
    for (args, words) in [
        (
            &["--local", "--a", "./s {port}", "--slo", "p99"][..],
            "no '<'",
        ),
        (
            &["--local", "--a", "./s {port}", "--slo", "p99<20"][..],
            "give the bound's unit",
        ),
        (
            &[
                "--local",
                "--a",
                "./s {port}",
                "--slo",
                "p99<20ms",
                "--param",
                "rate=5",
            ][..],
            "the search chooses each step's rate",
        ),
        (
            &[
                "--local",
                "--a",
                "./s {port}",
                "--slo",
                "p99<20ms",
                "--start",
                "5",
            ][..],
            "min (10) <= start (5)",
        ),
        (
            &[
                "--local",
                "--a",
                "./s {port}",
                "--slo",
                "p99<20ms",
                "--resolution",
                "0",
            ][..],
            "--resolution 0 must be",
        ),
        (&["--a", "./s {port}", "--slo", "p99<20ms"][..], "--local"),
    ] {
        let out = capacity(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(words), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `compare --slo p99<20ms@RATErps` on two servers: exit 3 when B breaks the SLO surely, 0 when
/// it keeps it, the shares in the JSON either way.
#[test]
fn an_slo_gate_fails_the_build_that_breaks_it_and_passes_the_one_that_keeps_it() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-slo-gate-server");
    let fast = format!("{} --port {{port}} --delay-us 2000", server.display());
    // Every request of the slow build takes 30 ms: far over 20 ms, however noisy the host.
    let slow = format!("{} --port {{port}} --delay-us 30000", server.display());
    let json = dir.path().join("verdict.json");
    let gate = |b: &str| {
        common::quietbench()
            .args(["compare", "--local", "--no-store", "--probe", "http"])
            .args(["--a", &fast, "--b", b])
            .args(["--slo", "p99<20ms@100rps", "--rounds", "5", "--warmup", "0"])
            .args(["--duration", "1.5", "--seed", "3"])
            .args(["--param", "max_lag_ms=1000", "--param", "warmup=0.5"])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap()
    };
    let out = gate(&slow);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("SLO p99 < 20 ms at 100 requests/s: B breaks it: 100.00% of its requests"),
        "{stdout}"
    );
    // A (2 ms a request) keeps it, or on a host that stalled once may not be sure: never
    // surely broken.
    assert!(
        stdout.contains("A keeps it") || stdout.contains("A may break it"),
        "{stdout}"
    );
    assert!(
        stderr.contains("B breaks the SLO with 95% confidence"),
        "{stderr}"
    );
    let verdict: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(verdict["slo"]["b_breaks"], true);
    assert_eq!(verdict["slo"]["rate"], 100);
    assert!(verdict["slo"]["b"]["confidence_broken"].as_f64().unwrap() >= 0.95);
    // A's requests take 2 ms; a stall of the host may push a few past 20 ms, never many.
    assert!(verdict["slo"]["a"]["share"].as_f64().unwrap() < 0.05);

    let out = gate(&fast);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("B keeps it") || stdout.contains("B may break it"),
        "{stdout}"
    );
    let verdict: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(verdict["slo"]["b_breaks"], false);
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived the gate"
    );

    // The rate is the gate's: another one given beside it, or a gate on commands, is refused.
    let out = common::quietbench()
        .args(["compare", "--local", "--no-store", "--probe", "http"])
        .args(["--a", &fast, "--b", &fast, "--slo", "p99<20ms@100rps"])
        .args(["--param", "rate=200"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("give the rate once, in --slo"), "{stderr}");
    let out = common::quietbench()
        .args([
            "compare",
            "--local",
            "--no-store",
            "--a",
            "true",
            "--b",
            "true",
        ])
        .args(["--slo", "p99<20ms@100rps"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("it needs --probe http or tcp"), "{stderr}");
}
