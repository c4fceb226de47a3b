//! The crash-safety promise of host tuning, for real, as root: prepare (ASLR and IRQ
//! affinities changed), SIGKILL the agent, start it again: every value is back as before.
//!
//! This test changes the machine it runs on (and puts it back). It needs root; CI runs as root.
//! It fails, rather than skips, without root: a skipped crash-safety test proves nothing.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;

const ASLR: &str = "/proc/sys/kernel/randomize_va_space";

/// ASLR and every IRQ's affinity list.
fn snapshot() -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    values.insert(
        ASLR.to_string(),
        std::fs::read_to_string(ASLR).unwrap().trim().to_string(),
    );
    for entry in std::fs::read_dir("/proc/irq").unwrap().flatten() {
        let path = entry.path().join("smp_affinity_list");
        if let Ok(text) = std::fs::read_to_string(&path) {
            values.insert(path.display().to_string(), text.trim().to_string());
        }
    }
    values
}

/// Puts the snapshot back if the test fails midway, so a failure never leaves the host tuned.
struct Guard(BTreeMap<String, String>);

impl Drop for Guard {
    fn drop(&mut self) {
        for (path, value) in &self.0 {
            if std::fs::read_to_string(path)
                .map(|t| t.trim() != value)
                .unwrap_or(false)
            {
                let _ = std::fs::write(path, format!("{value}\n"));
            }
        }
    }
}

fn start_agent(state_dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(common::quietbench_bin())
        .args(["agent", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state_dir)
        .env("QUIETBENCH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    (child, format!("http://{addr}"))
}

#[tokio::test]
async fn sigkill_after_prepare_then_restart_restores_every_value() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test changes ASLR and IRQ affinities and must run as root (CI does)"
    );
    let before = snapshot();
    let _guard = Guard(before.clone());
    let cpus = quietbench_host::read_fingerprint(&quietbench_host::HostRoot::live()).online_cpus;
    let probe_cpu = *cpus.last().unwrap();
    let state = tempfile::tempdir().unwrap();

    let (mut agent, endpoint) = start_agent(state.path());
    let mut client = AgentServiceClient::connect(endpoint).await.unwrap();
    let response = client
        .prepare(pb::PrepareRequest {
            aslr_off: true,
            steer_irqs: true,
            probe_cpus: vec![probe_cpu],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let tuned = snapshot();
    assert_eq!(tuned[ASLR], "0", "{:?}", response.controls);
    if cpus.len() > 1 {
        let moved = before
            .iter()
            .filter(|(k, v)| k.contains("/irq/") && tuned[*k] != **v)
            .count();
        assert!(
            moved >= 1,
            "no IRQ affinity changed: {:?}",
            response.controls
        );
    }
    assert!(state.path().join("restore-journal.jsonl").exists());

    kill(Pid::from_raw(agent.id() as i32), Signal::SIGKILL).unwrap();
    agent.wait().unwrap();
    assert_eq!(
        snapshot()[ASLR],
        "0",
        "a killed agent cannot have restored anything"
    );

    // A new agent on the same state directory restores before it starts serving.
    let (mut again, _) = start_agent(state.path());
    let after = snapshot();
    let _ = again.kill();
    let _ = again.wait();
    assert_eq!(after, before, "values differ after the restart's restore");
    assert!(!state.path().join("restore-journal.jsonl").exists());
}
