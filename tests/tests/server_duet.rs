//! Two servers in duet end to end: `compare --local --probe http --interleave duet` starts
//! builds A and B together for every trial, on disjoint CPUs swapped every round, and one load
//! alternates its requests between them. The statistics of the duet are calibrated in
//! benches/stats/server_duet.sh (an A/A false-positive rate and MDE against alternating
//! trials); this checks that the path works and tells a real difference.

mod common;

use std::path::Path;

use common::servers::processes_of;
use serde_json::Value;

/// One measuring test at a time (see tests/http_server.rs).
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn copy_server(dir: &Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::copy(env!("CARGO_BIN_EXE_testserver"), &path).unwrap();
    path
}

/// B sleeps 24 ms per request, A 20 ms, both at once: B's p50 latency is 20% higher less this
/// machine's share of each request, well under 60 ms on any host, so the verdict must call A
/// faster by 5% to 25%. Each trial's record has both servers' figures, and its placement says
/// where each ran: on different CPUs, swapped between rounds.
#[test]
fn a_duet_of_servers_tells_them_apart_with_both_on_their_own_cpus() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let a = copy_server(dir.path(), "qb-duet-a");
    let b = copy_server(dir.path(), "qb-duet-b");
    let json = dir.path().join("v.json");
    let db = dir.path().join("runs.db");
    let out = common::quietbench()
        .args([
            "compare",
            "--local",
            "--probe",
            "http",
            "--interleave",
            "duet",
        ])
        .args(["--param", "rate=50", "--param", "connections=4"])
        .args(["--param", "max_lag_ms=1000"])
        .args([
            "--rounds",
            "6",
            "--warmup",
            "1",
            "--duration",
            "1",
            "--seed",
            "5",
        ])
        .arg("--a")
        .arg(format!("{} --port {{port}} --delay-us 20000", a.display()))
        .arg("--b")
        .arg(format!("{} --port {{port}} --delay-us 24000", b.display()))
        .arg("--json")
        .arg(&json)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("both servers running at once on their own CPUs"),
        "{stdout}"
    );
    assert!(processes_of(&a).is_empty() && processes_of(&b).is_empty());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["interleave"], "duet", "{v:#}");
    assert_eq!(v["verdict"], "a_faster", "{v:#}");
    let ratio = v["ratio"].as_f64().unwrap();
    assert!((1.05..=1.25).contains(&ratio), "B/A {ratio}: {v:#}");

    // The stored run: one trial a round, both servers' figures in it, their CPUs apart and
    // swapped between odd and even rounds.
    let shown = common::quietbench()
        .args(["show", "--db"])
        .arg(&db)
        .args([v["run_id"].as_str().unwrap(), "--json"])
        .arg(dir.path().join("run.json"))
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run.json")).unwrap())
            .unwrap();
    let trials: Vec<&Value> = run["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["warmup"] == false)
        .collect();
    assert_eq!(trials.len(), 6);
    let mut a_cpus = Vec::new();
    for t in &trials {
        let names: Vec<&str> = t["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        for name in [
            "request_latency",
            "b_request_latency",
            "server_cpu_per_request",
        ] {
            assert!(names.contains(&name), "{name} missing: {names:?}");
        }
        assert!(names.contains(&"b_server_cpu_per_request"), "{names:?}");
        let notes: Vec<&str> = t["placement"]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let a_cpu = notes
            .iter()
            .find(|n| n.contains("the server (pid"))
            .unwrap();
        let b_cpu = notes.iter().find(|n| n.contains("server B (pid")).unwrap();
        // "... ran on CPU 1 of the measured host", "... at the same time on CPU 0, ready ...".
        let cpus = |n: &str| {
            let after = n.split(" CPU ").nth(1).unwrap();
            after.split([' ', ',']).next().unwrap().to_string()
        };
        assert_ne!(cpus(a_cpu), cpus(b_cpu), "{notes:?}");
        a_cpus.push((t["round"].as_u64().unwrap(), cpus(a_cpu)));
    }
    // A's CPU in odd rounds is B's in even ones.
    let odd: Vec<&String> = a_cpus
        .iter()
        .filter(|(r, _)| r % 2 == 1)
        .map(|(_, c)| c)
        .collect();
    let even: Vec<&String> = a_cpus
        .iter()
        .filter(|(r, _)| r % 2 == 0)
        .map(|(_, c)| c)
        .collect();
    assert!(odd.iter().all(|c| *c == odd[0]) && even.iter().all(|c| *c == even[0]));
    assert_ne!(odd[0], even[0], "{a_cpus:?}");
}
