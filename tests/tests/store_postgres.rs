//! A PostgreSQL store shared by controllers (`--db postgres://…`), end to end: two controllers
//! write their runs to one database at the same time and lose nothing; `runs`, `show`,
//! `history` and a `quietbench serve` read and write the same database, and the service keeps
//! its password off command lines; a run reaches a store over verified TLS. On a real server
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
fn a_service_keeps_its_runs_in_the_shared_store_and_its_password_off_command_lines() {
    // The test server trusts its socket, so the password is never asked for: it is here to be
    // looked for, in the service's messages and on every process's command line.
    let secret = format!("s3cret-{}", std::process::id());
    let url = format!("{}&password={secret}", postgres_server::fresh_database());
    let state = tempfile::tempdir().unwrap();
    let mut service = common::quietbench()
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .env("QUIETBENCH_DB", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (first, address) = common::serve_address(&mut service);
    assert!(first.contains("store postgresql:///"), "{first}");
    assert!(
        first.contains("password=***") && !first.contains(&secret),
        "{first}"
    );
    let mut client = common::quietbench()
        .args(["run", "--controller", &address, "--local", "--rounds", "2"])
        .args(["--duration", "0.3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every process's command line while the run goes on: the service's run process must be
    // seen (or the look proves nothing), and none may carry the password.
    let (mut saw_run_process, mut leaks) = (false, Vec::new());
    while client.try_wait().unwrap().is_none() {
        for (pid, cmdline) in command_lines() {
            saw_run_process |= cmdline.contains(" run-request ");
            if cmdline.contains(&secret) {
                leaks.push(format!("{pid}: {cmdline}"));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = client.wait_with_output().unwrap();
    let _ = service.kill();
    let _ = service.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(saw_run_process, "the run's process was never seen");
    assert!(
        leaks.is_empty(),
        "the password is on command lines: {leaks:?}"
    );
    // Another controller, reading the same database directly, sees the service's run.
    let listed = common::succeed(common::quietbench().args(["runs", "--db", &url]));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.contains("complete"), "{listed}");
}

/// Each process's command line, its arguments joined by spaces.
fn command_lines() -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may end between the listing and the read.
        if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            lines.push((pid, text));
        }
    }
    lines
}

#[test]
fn a_run_reaches_a_store_over_verified_tls() {
    let server = postgres_server::tls_server();
    let url = server.fresh_database(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", server.ca.display()),
    );
    // The store named by QUIETBENCH_DB, as a CI job's secret would name it.
    common::succeed(
        common::quietbench()
            .args(["run", "--local", "--probe", "cpu.primes", "--rounds", "2"])
            .args(["--duration", "0.3", "--warmup", "0"])
            .env("QUIETBENCH_DB", &url),
    );
    let listed = common::succeed(common::quietbench().args(["runs", "--db", &url]));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.contains("complete"), "{listed}");
    // The same server with another CA's certificate named: refused, and why.
    let wrong = url.replace(
        &server.ca.display().to_string(),
        &server.other_ca.display().to_string(),
    );
    let out = common::quietbench()
        .args(["runs", "--db", &wrong])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("invalid peer certificate"),
        "{stderr}"
    );
}
