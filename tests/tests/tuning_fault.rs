//! The crash-safety promise of host tuning, for real, as root: tune (ASLR and IRQ
//! affinities changed), SIGKILL the agent, start it again: every value is back as before.
//!
//! This test changes the machine it runs on (and puts it back). It needs root; CI runs as root.
//! It fails, rather than skips, without root: a skipped crash-safety test proves nothing.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

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
    let mut child = common::quietbench()
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

/// Both tests change the same host values: one at a time, or each would see the other's
/// changes in its before/after comparison.
static HOST: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn sigkill_after_prepare_then_restart_restores_every_value() {
    let _host = HOST.lock().await;
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

#[tokio::test]
async fn run_with_tune_tunes_reports_and_restores() {
    let _host = HOST.lock().await;
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test tunes the host and must run as root (CI does)"
    );
    let before = snapshot();
    let _guard = Guard(before.clone());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tuned.json");
    let state = dir.path().join("state");
    let out = common::quietbench()
        .args([
            "run",
            "--local",
            "--tune",
            "--rounds",
            "1",
            "--duration",
            "0.5",
            "--json",
        ])
        .arg(&json)
        .env("QUIETBENCH_STATE_DIR", &state)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tuned 127.0.0.1:") && stderr.contains("restored 127.0.0.1:"),
        "{stderr}"
    );
    assert_eq!(snapshot(), before, "the run left the host changed");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["settings"]["tune"], true);
    let tuning = report["hosts"][0]["tuning"].as_array().unwrap();
    assert!(!tuning.is_empty());
    for control in tuning {
        assert!(
            ["applied", "skipped", "failed"].contains(&control["outcome"].as_str().unwrap()),
            "{control}"
        );
        assert!(!control["detail"].as_str().unwrap().is_empty(), "{control}");
    }
    // --tune never touches system-wide ASLR: that takes an explicit `tune --aslr-off`.
    assert!(tuning.iter().all(|c| c["control"] != "aslr"));
}
