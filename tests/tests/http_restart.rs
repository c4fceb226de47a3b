//! `restart=run` end to end: `run --local --probe http` and `compare --local --probe http`
//! keep one server process per variant for the whole run (the measured host's agent keeps it
//! under a name, and samples it at each trial's start and end), each trial's server CPU time is
//! that trial's share, and no server is left after the run: neither after one that succeeded
//! nor after a server that died between trials failed it.
//!
//! Each test runs its own copy of the test server (tests/src/bin/testserver.rs) under a name of
//! its own, as tests/http_server.rs does, so that it can find that server's processes in /proc
//! without touching another test's.

mod common;

use common::servers::{own_server, processes_of};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// A trial's note on its server ("... the server (pid 1234) ran ...") and the pid in it.
fn server_note(trial: &Value) -> (i32, String) {
    let note = trial["placement"]["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|n| n.contains("the server (pid "))
        .unwrap_or_else(|| panic!("no note on the server: {}", trial["placement"]));
    let pid = note
        .split("the server (pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {note:?}"));
    (pid, note.to_string())
}

/// What a watch of a server's processes saw while a command ran.
#[derive(Debug, Default)]
struct Seen {
    /// Every pid of the server's executable seen alive.
    pids: BTreeSet<i32>,
    /// The most seen alive at once.
    most_at_once: usize,
}

/// Watches the live processes of `exe` every 10 ms until `done`.
fn watch(exe: PathBuf, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        while !done.load(Ordering::Relaxed) {
            let alive = processes_of(&exe);
            seen.most_at_once = seen.most_at_once.max(alive.len());
            seen.pids.extend(alive);
            std::thread::sleep(Duration::from_millis(10));
        }
        seen
    })
}

/// Runs `command`, watching `exe`'s processes meanwhile.
fn watched(mut command: std::process::Command, exe: &Path) -> (std::process::Output, Seen) {
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch(exe.to_path_buf(), done.clone());
    let out = command.output().unwrap();
    done.store(true, Ordering::Relaxed);
    (out, watcher.join().unwrap())
}

#[test]
fn one_server_process_serves_every_trial_and_each_trial_gets_its_own_cpu_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-restart-run-server");
    let json = dir.path().join("report.json");
    let mut command = common::quietbench();
    command
        .args(["run", "--local", "--probe", "http", "--no-store"])
        // As in tests/http_server.rs: the generator's lag bound is not what this tests.
        .args(["--param", "max_lag_ms=1000", "--param", "restart=run"])
        .arg("--param")
        // A known cost per request, so that every trial's share of CPU time is many ticks.
        .arg(format!(
            "server={} --port {{port}} --work 300000",
            server.display()
        ))
        .args(["--param", "rate=200", "--param", "connections=4"])
        .args(["--rounds", "3", "--warmup", "1", "--duration", "1"])
        .arg("--json")
        .arg(&json);
    let (out, seen) = watched(command, &server);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        processes_of(&server).is_empty(),
        "the kept server outlived the run: {:?}",
        processes_of(&server)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4, "a warm-up and 3 rounds");
    let notes: Vec<(i32, String)> = trials.iter().map(server_note).collect();
    let pid = notes[0].0;
    assert!(
        notes.iter().all(|(p, _)| *p == pid),
        "one process for the run: {notes:#?}"
    );
    assert_eq!(
        seen.pids,
        BTreeSet::from([pid]),
        "and no other was ever started"
    );
    assert!(
        notes[0].1.contains("started for this trial (trial 1)"),
        "{}",
        notes[0].1
    );
    for (_, note) in &notes[1..] {
        assert!(
            note.contains("reused: started for trial 1 (round 1)"),
            "{note}"
        );
    }
    for trial in trials {
        assert_eq!(trial["params"]["restart"], "run", "{}", trial["params"]);
    }
    // Each trial's CPU time is its own share: the server's whole life's would grow trial by
    // trial (the last at least the sum of the others' shares), where the same load for the
    // same time gives each trial about the same share.
    let cpu: Vec<f64> = trials
        .iter()
        .map(|t| f(&metric(t, "server_cpu_time")["value"]))
        .collect();
    let sum: f64 = cpu.iter().sum();
    let (least, most) = cpu
        .iter()
        .fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    assert!(least > 0.0, "every trial's share is some time: {cpu:?}");
    assert!(
        cpu.iter().all(|v| *v < 0.6 * sum),
        "no trial holds most of the run's CPU time: {cpu:?}"
    );
    assert!(most <= 3.0 * least, "like loads, like shares: {cpu:?}");
    for trial in trials {
        assert!(f(&metric(trial, "server_cpu_per_request")["value"]) > 0.0);
        assert!(f(&metric(trial, "server_peak_rss")["value"]) > 0.0);
    }
}

/// `compare --local --probe http --param restart=run` of `server`, A and B told apart by their
/// arguments (both are the same program, so that one watch sees both).
fn compare_kept(server: &Path) -> std::process::Command {
    let side = |args: &str| format!("{} --port {{port}} {args}", server.display());
    let mut command = common::quietbench();
    command
        .args(["compare", "--local", "--probe", "http", "--no-store"])
        .args(["--param", "rate=100", "--param", "connections=2"])
        .args(["--param", "max_lag_ms=1000", "--param", "restart=run"])
        // compare's fewest rounds.
        .args(["--rounds", "5", "--warmup", "0", "--duration", "1"])
        .args(["--seed", "7"])
        .arg("--a")
        .arg(side("--delay-us 1000"))
        .arg("--b")
        .arg(side("--delay-us 1100"));
    command
}

#[test]
fn compare_keeps_both_servers_alive_side_by_side_and_stops_both() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-restart-compare-server");
    let (out, seen) = watched(compare_kept(&server), &server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Ten trials, two processes: one per build, for the whole run, both alive at once (the
    // interleaved order switches between them).
    assert_eq!(seen.pids.len(), 2, "{seen:?}");
    assert_eq!(seen.most_at_once, 2, "{seen:?}");
    assert!(
        processes_of(&server).is_empty(),
        "a kept server outlived the run: {:?}",
        processes_of(&server)
    );
}

#[test]
fn a_kept_server_killed_between_its_trials_fails_its_next_trial_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-restart-killed-server");
    // Once both servers run, the one started first has finished its first trial and the other
    // is in (or about to start) its own: the first is between its trials. Kill it there.
    let done = Arc::new(AtomicBool::new(false));
    let killer = {
        let (server, done) = (server.clone(), done.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut first = None;
            while !done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let alive = processes_of(&server);
                match (first, alive.as_slice()) {
                    (None, [one]) => first = Some(*one),
                    (Some(pid), [_, _]) => {
                        nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        )
                        .unwrap();
                        return Some(pid);
                    }
                    _ => {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };
    let out = compare_kept(&server).output().unwrap();
    done.store(true, Ordering::Relaxed);
    let killed = killer
        .join()
        .unwrap()
        .expect("both servers were never seen running");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the server kept for the run (restart=run, pid {killed}, started for trial"
        )) && stderr.contains("killed by signal 9 (SIGKILL) between trials, before this one"),
        "{stderr}"
    );
    // Its stderr's tail: the test server says where it listens as it starts.
    assert!(
        stderr.contains("its stderr ended with: listening on"),
        "{stderr}"
    );
    assert!(
        processes_of(&server).is_empty(),
        "the other server outlived the failed run: {:?}",
        processes_of(&server)
    );
}

#[test]
fn a_run_interrupted_mid_trial_stops_its_kept_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = own_server(dir.path(), "qb-restart-interrupted-server");
    let child = common::quietbench()
        .args(["run", "--local", "--probe", "http", "--no-store"])
        .args(["--param", "max_lag_ms=1000", "--param", "restart=run"])
        .arg("--param")
        .arg(format!("server={} --port {{port}}", server.display()))
        .args(["--param", "rate=100"])
        .args(["--rounds", "5", "--warmup", "0", "--duration", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while processes_of(&server).is_empty() && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let running = processes_of(&server);
    // Into the first trial, then Ctrl-C to the controller alone: it stops the server it kept
    // (and says so) before it lets its agents go, and nothing is left.
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(running.len(), 1, "the server ran: {stderr}");
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("quietbench: stopped the server kept for the run on"),
        "{stderr}"
    );
    assert!(
        processes_of(&server).is_empty(),
        "the kept server outlived the interrupted run: {:?}",
        processes_of(&server)
    );
}
