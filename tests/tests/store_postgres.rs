//! A PostgreSQL store shared by controllers (`--db postgres://…`), end to end: two controllers
//! write their runs to one database at the same time and lose nothing; `runs`, `show`,
//! `history` and a `quietbench serve` read and write the same database. On a real server
//! (Debian's postgresql, started by the test; see the support file).

mod common;

#[path = "../../crates/quietbench-controller/tests/support/postgres_server.rs"]
mod postgres_server;

use std::process::Stdio;

fn run_on(url: &str, rounds: &str) -> std::process::Child {
    common::quietbench()
        .args([
            "run",
            "--local",
            "--probe",
            "cpu.primes",
            "--rounds",
            rounds,
        ])
        .args(["--duration", "0.3", "--warmup", "0", "--db", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_controllers_write_one_postgres_store_at_once_and_lose_nothing() {
    let url = postgres_server::fresh_database();
    // At once: both open (and one migrates) the empty database, then write trial by trial.
    let writers = [run_on(&url, "6"), run_on(&url, "6")];
    for writer in writers {
        let out = writer.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("stored in postgresql:///"), "{said}");
    }
    let listed = common::succeed(common::quietbench().args(["runs", "--db", &url]));
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{listed}");
    for row in &rows {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((fields[2], fields[4]), ("complete", "6"), "{listed}");
    }
    let id = rows[0].split_whitespace().next().unwrap();
    let shown = common::succeed(common::quietbench().args(["show", &id[..8], "--db", &url]));
    assert!(shown.contains("cpu.primes  events_per_sec"), "{shown}");
    let history = common::succeed(common::quietbench().args([
        "history",
        "--probe",
        "cpu.primes",
        "--metric",
        "events_per_sec",
        "--db",
        &url,
    ]));
    assert!(history.contains(": 12 points"), "{history}");
}

#[test]
fn a_service_keeps_its_runs_in_the_shared_store() {
    use std::io::{BufRead, BufReader};
    let url = postgres_server::fresh_database();
    let state = tempfile::tempdir().unwrap();
    let mut service = common::quietbench()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
            &url,
            "--state-dir",
        ])
        .arg(state.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(service.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || lines.for_each(drop));
    let address = first
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    assert!(first.contains("store postgresql:///"), "{first}");
    let out = common::quietbench()
        .args(["run", "--controller", &address, "--local", "--rounds", "2"])
        .args(["--duration", "0.3"])
        .output()
        .unwrap();
    let _ = service.kill();
    let _ = service.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another controller, reading the same database directly, sees the service's run.
    let listed = common::succeed(common::quietbench().args(["runs", "--db", &url]));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.contains("complete"), "{listed}");
}
