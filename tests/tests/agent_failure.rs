//! Failure paths with real processes: an agent killed mid-run, an agent that is not there.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The agent's probe thread `qb-probe-0` exists: the trial is measuring.
fn has_probe_thread(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|c| c.trim() == "qb-probe-0")
        })
}

#[test]
fn killing_the_agent_mid_run_fails_clearly_before_the_trial_ends() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let mut controller = common::quietbench()
        .args([
            "run",
            "--local",
            "--rounds",
            "1",
            "--duration",
            "60",
            "--json",
        ])
        .arg(&json_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent = common::wait_for_child(controller.id(), Duration::from_secs(10))
        .expect("the controller starts a local agent");
    // Let the trial get going: the host line is printed once the agent answered GetHost.
    // (The fleet's line comes first.)
    let mut stderr = BufReader::new(controller.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("fleet: local"), "{line}");
    line.clear();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("host 127.0.0.1:"), "{line}");
    // Killed mid-trial: once its probe thread runs (not after a guessed sleep, which a loaded
    // machine can outlast).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !has_probe_thread(agent) {
        assert!(
            Instant::now() < deadline,
            "the agent started no probe thread in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    kill(Pid::from_raw(agent as i32), Signal::SIGKILL).unwrap();
    let killed_at = Instant::now();
    let status = loop {
        if let Some(status) = controller.try_wait().unwrap() {
            break status;
        }
        // The controller learns of the death from its broken connection and the child's exit,
        // not from the trial's 60 s running out: well before then, however loaded the machine
        // (a fixed few seconds is what an idle machine takes, not a guarantee).
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "the controller did not exit within 30 s of the agent's death (the trial is 60 s)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(!status.success());
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains(&format!("pid {agent}")),
        "the error names the agent:\n{rest}"
    );
    assert!(
        rest.contains("killed by SIGKILL"),
        "the error says how it died:\n{rest}"
    );
    assert!(
        rest.contains("lost agent") || rest.contains("mid-trial"),
        "{rest}"
    );
    // Reported at once: the controller does not wait for its own dead child to come back.
    assert!(!rest.contains("reconnecting"), "{rest}");

    // Nothing is lost: the report is there and says the run is incomplete, and why.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(report["complete"], false);
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("killed by SIGKILL")
    );
    assert_eq!(report["hosts"].as_array().unwrap().len(), 1);
}

#[test]
fn an_unreachable_agent_is_named_and_fails_fast() {
    // A port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let out = common::quietbench()
        .args([
            "run",
            "--agent",
            &format!("127.0.0.1:{port}"),
            "--rounds",
            "1",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach agent 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_remote_agent_runs_trials_and_answers_host() {
    let agent = common::AgentProcess::start();
    let addr = agent.addr.to_string();
    let out = common::quietbench()
        .args([
            "run",
            "--agent",
            &addr,
            "--rounds",
            "1",
            "--duration",
            "0.3",
            "--param",
            "max_prime=5000",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("host {addr} (remote)")),
        "{stdout}"
    );

    let out = common::quietbench()
        .args(["host", "--agent", &addr, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let host: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(host["address"], addr.as_str());
    assert!(host["fingerprint"]["logical_cpus"].as_u64().unwrap() >= 1);
}
