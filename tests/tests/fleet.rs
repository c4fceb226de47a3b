//! Several hosts at once: real agent processes on loopback, each running its own schedule at
//! the same time as the others; one killed mid-run while the others finish.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::AgentProcess;
use serde_json::Value;

/// (host index, round, start ns, end ns) of every trial in a JSON report.
fn trial_spans(report: &Value) -> Vec<(usize, u64, u64, u64)> {
    let hosts: Vec<&str> = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["address"].as_str().unwrap())
        .collect();
    report["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let started = humantime::parse_rfc3339(t["started_at"].as_str().unwrap()).unwrap();
            let start = started
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            let length = Duration::from_secs_f64(t["duration_s"].as_f64().unwrap());
            (
                hosts
                    .iter()
                    .position(|h| *h == t["host"].as_str().unwrap())
                    .unwrap(),
                t["round"].as_u64().unwrap(),
                start,
                start + length.as_nanos() as u64,
            )
        })
        .collect()
}

fn read_report(path: &std::path::Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// `quietbench run ARGS --agent ...` on every agent, its output piped.
fn spawn_run(agents: &[AgentProcess], args: &[String]) -> std::process::Child {
    let mut command = common::quietbench();
    command.args(args);
    for a in agents {
        command.arg("--agent").arg(a.addr.to_string());
    }
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until host `host` has a finished trial in the JSON report (rewritten as trials end).
fn wait_for_trial(json: &std::path::Path, host: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_report(json).is_none_or(|r| !trial_spans(&r).iter().any(|t| t.0 == host)) {
        assert!(
            Instant::now() < deadline,
            "host {host} never finished a trial"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hosts_measure_at_once_and_a_killed_host_leaves_the_others_finishing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let db = dir.path().join("store.sqlite3");
    let mut agents: Vec<AgentProcess> = (0..4).map(|_| AgentProcess::start()).collect();
    let rounds = 3;
    let args: Vec<String> = [
        "run",
        "--rounds",
        &rounds.to_string(),
        "--duration",
        "1",
        "--json",
        &json.display().to_string(),
        "--db",
        &db.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let controller = spawn_run(&agents, &args);
    // Kill host 2's agent once its first trial is stored (the JSON is rewritten per trial).
    let victim = 2;
    wait_for_trial(&json, victim);
    agents[victim].child.kill().unwrap();
    let _ = agents[victim].child.wait();
    let out = controller.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let victim_addr = agents[victim].addr.to_string();
    assert!(
        stderr.contains(&format!("host {victim_addr} failed")),
        "the failure names the host:\n{stderr}"
    );

    let report = read_report(&json).unwrap();
    let spans = trial_spans(&report);
    // Every other host finished its whole schedule.
    for host in (0..4).filter(|&h| h != victim) {
        let done: BTreeSet<u64> = spans.iter().filter(|t| t.0 == host).map(|t| t.1).collect();
        assert_eq!(done, (1..=rounds).collect(), "host {host}: {spans:?}");
    }
    // The victim's missing trials are reported by host, with the reason.
    let missing = report["missing_trials"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0]["host"], victim);
    assert_eq!(missing[0]["address"], victim_addr.as_str());
    let victim_done = spans.iter().filter(|t| t.0 == victim).count();
    assert_eq!(
        missing[0]["trials"].as_u64().unwrap() as usize,
        rounds as usize - victim_done
    );
    assert!(
        missing[0]["reason"]
            .as_str()
            .unwrap()
            .contains(&victim_addr),
        "{missing:?}"
    );
    assert!(stdout.contains("missing trials"), "{stdout}");
    assert_eq!(report["complete"], false);
    // Hosts measured at the same time: some round-1 trials of different hosts overlap.
    let round1: Vec<_> = spans.iter().filter(|t| t.1 == 1).collect();
    let overlapping = round1
        .iter()
        .any(|a| round1.iter().any(|b| a.0 != b.0 && a.2 < b.3 && b.2 < a.3));
    assert!(overlapping, "no two hosts measured at once: {round1:?}");
    // Rounds in step: no host started round r+1 before every host still measuring had
    // finished round r.
    for &(host, round, start, _) in &spans {
        for &(other, other_round, _, other_end) in &spans {
            if other_round + 1 == round {
                assert!(
                    start >= other_end,
                    "host {host} started round {round} before host {other} ended round {other_round}"
                );
            }
        }
    }
    // Every finished trial is in the store too; `resume` would run only the missing ones.
    let runs =
        common::succeed(common::quietbench().args(["runs", "--db", &db.display().to_string()]));
    assert!(runs.contains("failed"), "{runs}");
    assert!(
        runs.contains(&format!("{:>6}", spans.len())) || runs.contains(&spans.len().to_string()),
        "{runs}"
    );
}

#[test]
fn a_hosts_file_names_the_agents_and_bad_lines_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<AgentProcess> = (0..2).map(|_| AgentProcess::start()).collect();
    let hosts = dir.path().join("hosts.txt");
    std::fs::write(
        &hosts,
        format!(
            "# two agents\n{} first\n{} second # the other\n",
            agents[0].addr, agents[1].addr
        ),
    )
    .unwrap();
    let json = dir.path().join("run.json");
    common::succeed(common::quietbench().env("XDG_DATA_HOME", dir.path()).args([
        "run",
        "--hosts",
        &hosts.display().to_string(),
        "--rounds",
        "1",
        "--duration",
        "0.3",
        "--no-store",
        "--no-round-sync",
        "--json",
        &json.display().to_string(),
    ]));
    // The run gave its hosts back: the fleet ledger holds nothing for `release`.
    let ledger = dir.path().join("quietbench/fleets");
    assert_eq!(std::fs::read_dir(&ledger).unwrap().count(), 0);
    let report = read_report(&json).unwrap();
    assert_eq!(report["hosts"].as_array().unwrap().len(), 2);
    assert_eq!(trial_spans(&report).len(), 2);
    assert_eq!(report["settings"]["round_sync"], false);
    assert!(
        report["fleet"][0].as_str().unwrap().contains("hosts.txt"),
        "{}",
        report["fleet"]
    );

    std::fs::write(&hosts, format!("{}\nnot-an-address\n", agents[0].addr)).unwrap();
    let out = common::quietbench()
        .args(["run", "--hosts", &hosts.display().to_string(), "--no-store"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hosts.txt line 2") && stderr.contains("no port"),
        "{stderr}"
    );
}

#[test]
fn a_run_refused_before_its_first_trial_is_not_kept_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    let agent = AgentProcess::start();
    let out = common::quietbench()
        .args([
            "run",
            "--agent",
            &agent.addr.to_string(),
            "--probe",
            "no.such.probe",
            "--db",
            &db.display().to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no.such.probe"), "{stderr}");
    assert!(
        stderr.contains("measured nothing and is not kept"),
        "{stderr}"
    );
    let runs =
        common::succeed(common::quietbench().args(["runs", "--db", &db.display().to_string()]));
    assert!(!runs.contains("failed"), "a refused run is listed:\n{runs}");
}

#[test]
fn release_restores_the_hosts_a_killed_controller_tuned() {
    let data = tempfile::tempdir().unwrap();
    let agent = AgentProcess::start_in(&data.path().join("agent-state"));
    let json = data.path().join("run.json");
    let mut controller = common::quietbench()
        .args([
            "run",
            "--agent",
            &agent.addr.to_string(),
            "--tune",
            "--rounds",
            "20",
            "--duration",
            "0.5",
            "--no-store",
            "--json",
            &json.display().to_string(),
        ])
        .env("XDG_DATA_HOME", data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_report(&json).is_none_or(|r| r["trials"].as_array().is_none_or(|t| t.is_empty())) {
        if let Some(status) = controller.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut controller.stderr.take().unwrap(), &mut stderr)
                .unwrap();
            panic!("the run ended ({status}) before its first trial:\n{stderr}");
        }
        assert!(Instant::now() < deadline, "the run never finished a trial");
        std::thread::sleep(Duration::from_millis(20));
    }
    controller.kill().unwrap(); // SIGKILL: no restore, no release
    controller.wait().unwrap();
    let ledger = data.path().join("quietbench/fleets");
    assert_eq!(std::fs::read_dir(&ledger).unwrap().count(), 1);

    let released = common::succeed(
        common::quietbench()
            .arg("release")
            .env("XDG_DATA_HOME", data.path()),
    );
    assert!(
        released.contains("restoring 1 tuned host") && released.contains("released"),
        "{released}"
    );
    assert_eq!(std::fs::read_dir(&ledger).unwrap().count(), 0);
    // The agent holds nothing more to undo, and a second release has nothing to do.
    let restore =
        common::succeed(common::quietbench().args(["restore", "--agent", &agent.addr.to_string()]));
    assert!(restore.contains("nothing to restore"), "{restore}");
    let again = common::succeed(
        common::quietbench()
            .arg("release")
            .env("XDG_DATA_HOME", data.path()),
    );
    assert!(again.contains("nothing to release"), "{again}");
}

/// A host that goes silent mid-trial (its agent SIGSTOPped: the connection stays open, nothing
/// arrives) is reported within the watchdog's bound (the interval plus 3 s of slack, then the
/// reconnect window) and the other hosts carry on.
#[test]
fn a_silent_host_is_reported_within_the_watchdog_bound_and_the_others_finish() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let agents: Vec<AgentProcess> = (0..3).map(|_| AgentProcess::start()).collect();
    let args: Vec<String> = [
        "run",
        "--rounds",
        "3",
        "--duration",
        "2",
        "--no-store",
        "--json",
        &json.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let controller = spawn_run(&agents, &args);
    // Stop host 1's agent once its first trial is stored, half a second into its second.
    let victim = 1;
    wait_for_trial(&json, victim);
    std::thread::sleep(Duration::from_millis(500));
    let pid = Pid::from_raw(agents[victim].child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let stopped_at = Instant::now();
    let out = controller.wait_with_output().unwrap();
    let _ = kill(pid, Signal::SIGCONT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report = read_report(&json).unwrap();
    let missing = report["missing_trials"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(
        missing[0]["address"],
        agents[victim].addr.to_string().as_str()
    );
    let reason = missing[0]["reason"].as_str().unwrap();
    assert!(reason.contains("sent nothing for"), "{reason}");
    // The others finished all three rounds.
    let spans = trial_spans(&report);
    for host in [0, 2] {
        let done: BTreeSet<u64> = spans.iter().filter(|t| t.0 == host).map(|t| t.1).collect();
        assert_eq!(done, (1..=3).collect(), "host {host}: {spans:?}");
    }
    // Within the bound: the rest of the stopped trial's interval (1 s) plus the 3 s slack, and
    // the others' last rounds (2 s each) that the run waits for anyway; far from forever.
    // The stall is noticed after the interval plus 3 s of slack; then the agent is given
    // --reconnect-within (10 s by default) to come back, each attempt bounded by the connect
    // (5 s) and first-answer (10 s) timeouts: far from forever.
    let took = stopped_at.elapsed();
    assert!(took < Duration::from_secs(45), "reported after {took:?}");
    println!("silent host reported; run ended {took:?} after the SIGSTOP");
}

/// An agent on a fixed address, started by hand (`AgentProcess` picks a free port).
fn agent_on(addr: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut child = common::agent_command()
        .args(["--listen", addr])
        .env("QUIETBENCH_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains(addr), "{line}");
    child
}

/// An agent restarted on its address mid-run: the controller reconnects, runs the lost trial
/// again, and the run completes with every trial.
#[test]
fn an_agent_restarted_on_its_address_is_reconnected_and_its_trial_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut agent = agent_on(&addr);
    let controller = common::quietbench()
        .args([
            "run",
            "--agent",
            &addr,
            "--rounds",
            "3",
            "--duration",
            "2",
            "--no-store",
            "--json",
        ])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_report(&json).is_none_or(|r| trial_spans(&r).is_empty()) {
        assert!(Instant::now() < deadline, "no trial finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Half a second into round 2: kill the agent and start another on the same address.
    std::thread::sleep(Duration::from_millis(500));
    agent.kill().unwrap();
    let _ = agent.wait();
    let mut again = agent_on(&addr);
    let out = controller.wait_with_output().unwrap();
    let _ = again.kill();
    let _ = again.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("reconnecting for up to 10 s"), "{stderr}");
    assert!(
        stderr.contains("back; running round 2's trial again"),
        "{stderr}"
    );
    let report = read_report(&json).unwrap();
    let rounds: BTreeSet<u64> = trial_spans(&report).iter().map(|t| t.1).collect();
    assert_eq!(rounds, (1..=3).collect(), "{report:#}");
    assert_eq!(report["complete"], true);
}
