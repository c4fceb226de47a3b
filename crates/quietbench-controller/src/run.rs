//! `quietbench run`: rounds of trials on one or more agents, recorded as they finish.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use indicatif::{ProgressBar, ProgressStyle};
use quietbench_proto::v1 as pb;

use crate::connection::{AgentConnection, AgentError};
use crate::report::record::{IntervalRecord, trial_metrics};
use crate::report::{HostKind, HostRecord, RunRecord, RunSettings, TrialRecord, json};
use crate::schedule::PlannedTrial;

/// An agent to measure on.
#[derive(Debug, Clone)]
pub struct Target {
    /// HOST:PORT.
    pub address: String,
    /// Local or remote.
    pub kind: HostKind,
    /// How messages name it, e.g. "127.0.0.1:41234 (local agent, pid 812)".
    pub label: String,
    /// The agent that serves the other end of network probes for this one.
    pub peer: Option<Box<Target>>,
}

/// Adds where the peer's readers ran to a trial's placement, with a note when both agents
/// share one machine and the default placement left the readers on the senders' CPUs (with
/// CPUs to spare, that measures the placement, not the machine). An agent that saw its peer
/// on its own machine (policy "same-machine": a loopback peer) already spread the senders over
/// every CPU, so --cpus has nothing to add and no note is due.
fn with_peer_flows(
    mut placement: pb::Placement,
    peer_flow_cpus: Vec<pb::PeerFlowCpu>,
    peer_on_this_machine: bool,
    cpus_given: bool,
) -> pb::Placement {
    let sender_cpus: Vec<u32> = placement.threads.iter().map(|t| t.planned_cpu).collect();
    let crowded = peer_on_this_machine
        && !cpus_given
        && placement.policy != "same-machine"
        && !peer_flow_cpus.is_empty()
        && peer_flow_cpus.iter().all(|f| sender_cpus.contains(&f.cpu));
    if crowded {
        placement.notes.push(
            "both agents share this machine: the peer's readers followed their flows onto the \
             senders' CPUs; give --cpus with more CPUs to spread senders and readers"
                .to_string(),
        );
    }
    placement.peer_flow_cpus = peer_flow_cpus;
    placement
}

/// True for probes that need a peer agent.
pub fn needs_peer(probe: &str) -> bool {
    probe.starts_with("net.")
}

/// The IP address of an agent address (HOST:PORT), resolving a name if needed: the address a
/// peer server listens on and the client connects to.
fn host_ip(address: &str) -> Result<std::net::IpAddr, AgentError> {
    use std::net::ToSocketAddrs;
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .map(|a| a.ip())
        .ok_or_else(|| AgentError::BadAddress {
            agent: address.to_string(),
            why: "cannot resolve its host".into(),
        })
}

/// A new, empty record for a run with these settings.
pub fn new_record(settings: RunSettings) -> RunRecord {
    RunRecord {
        run_id: uuid::Uuid::new_v4().to_string(),
        started_at: SystemTime::now(),
        finished_at: None,
        settings,
        hosts: Vec::new(),
        trials: Vec::new(),
        error: None,
    }
}

/// Progress for people: a bar on a terminal, one line per trial otherwise.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `trials` trials, drawn on stderr when it is a terminal.
    pub fn new(trials: u64) -> Self {
        let bar = ProgressBar::new(trials);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} trials  {msg}",
            )
            .expect("constant template is valid"),
        );
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Self { bar }
    }

    /// A line above the bar (or on stderr when there is no bar).
    pub fn line(&self, text: &str) {
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    fn status(&self, text: String) {
        self.bar.set_message(text);
    }

    fn trial_done(&self) {
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Writes the report atomically (temporary file, then rename), so a reader or a crash never
/// sees half a file.
pub fn write_json(path: &Path, run: &RunRecord) -> anyhow::Result<()> {
    use anyhow::Context;
    let report = json::build(run);
    let text = serde_json::to_string_pretty(&report)?;
    let tmp = path.with_extension("json.partial");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
}

/// Whether a run goes on after a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Run the next trial.
    Continue,
    /// Stop here (an adaptive rule is satisfied); the run is complete.
    Stop,
}

/// Runs the run's randomized interleaved schedule on every target, appending to `run` as trials
/// finish and calling `on_trial` after each one (which saves it: JSON, store), so an
/// interrupted run keeps what it measured. Trials in `done` (finished before an interruption)
/// are skipped. `on_trial` may stop the run early (adaptive stopping).
pub async fn execute(
    targets: &[Target],
    run: &mut RunRecord,
    progress: &Progress,
    done: &[PlannedTrial],
    on_trial: &mut dyn FnMut(&RunRecord, &PlannedTrial) -> anyhow::Result<Flow>,
) -> Result<(), anyhow::Error> {
    let mut connections = Vec::with_capacity(targets.len());
    let mut peers: Vec<Option<AgentConnection>> = Vec::with_capacity(targets.len());
    let mut peer_hostnames: Vec<Option<String>> = Vec::with_capacity(targets.len());
    for target in targets {
        match &target.peer {
            Some(peer) => {
                let mut conn = AgentConnection::connect(&peer.address, peer.label.clone()).await?;
                let host = conn.get_host().await?;
                peer_hostnames.push(host.fingerprint.map(|f| f.hostname));
                peers.push(Some(conn));
            }
            None => {
                peer_hostnames.push(None);
                peers.push(None);
            }
        }
        progress.status(format!("connecting to {}", target.label));
        let mut conn = AgentConnection::connect(&target.address, target.label.clone()).await?;
        let host = conn.get_host().await?;
        let mut record = HostRecord {
            address: target.address.clone(),
            kind: target.kind,
            agent_version: host.agent_version,
            fingerprint: host.fingerprint.unwrap_or_default(),
            tuning: Vec::new(),
        };
        progress.line(&crate::report::table::host_line(&record));
        if run.settings.tune {
            progress.status(format!("tuning {}", target.label));
            let tuned = conn.prepare(tune_request(&run.settings.cpus)).await?;
            progress.line(&format!(
                "tuned {} (undone after the run):\n{}",
                target.address,
                crate::report::table::controls(&tuned.controls).trim_end()
            ));
            record.tuning = tuned.controls;
        }
        run.hosts.push(record);
        connections.push(conn);
    }
    let settings = run.settings.clone();
    let schedule = crate::schedule::rmit(
        settings.variants.len(),
        connections.len(),
        settings.rounds,
        settings.warmup,
        settings.seed,
    );
    let total_rounds = settings.warmup + settings.rounds;
    for (trial_number, planned) in schedule.iter().enumerate() {
        if done.iter().any(|d| d == planned) {
            continue; // finished before an interruption: `resume` does not run it again
        }
        let host = planned.host;
        let spec = &settings.variants[planned.variant];
        let probe = &spec.probe;
        let conn = &mut connections[host];
        let mut params: HashMap<String, String> = spec.params.clone().into_iter().collect();
        let mut peer_address = None;
        let mut peer_on_this_machine = false;
        if needs_peer(probe) {
            let (Some(peer), Some(peer_target)) = (peers[host].as_mut(), &targets[host].peer)
            else {
                anyhow::bail!(
                    "{probe} needs a peer agent for {}: give --peer HOST:PORT (run --local starts one)",
                    targets[host].address
                );
            };
            let ip = host_ip(&peer_target.address)?;
            // Same host name: two agents on one machine (namespaces share the UTS name).
            let same_machine = peer_hostnames[host]
                .as_ref()
                .is_some_and(|h| !h.is_empty() && *h == run.hosts[host].fingerprint.hostname);
            peer_on_this_machine = same_machine;
            let ports = peer.start_peer(&ip.to_string(), same_machine).await?;
            let server = std::net::SocketAddr::new(ip, ports.tcp_port as u16);
            params.insert("peer".into(), server.to_string());
            params.insert("peer_udp".into(), ports.udp_port.to_string());
            peer_address = Some(peer_target.address.clone());
        }
        let request = pb::RunProbeRequest {
            probe: probe.clone(),
            params,
            duration_ms: settings.duration_ms,
            interval_ms: settings.interval_ms,
            cpus: settings.cpus.clone(),
            unpinned: settings.unpinned,
            trial_id: format!("{}-{}", run.run_id, trial_number + 1),
        };
        let label = if spec.name == *probe {
            probe.clone()
        } else {
            format!("{} ({probe})", spec.name)
        };
        let warm = if planned.warmup { " warm-up" } else { "" };
        let what = format!(
            "round {}/{total_rounds}{warm} {label} on {}",
            planned.round, targets[host].address
        );
        progress.status(what.clone());
        let completed = conn
            .run_probe(request, |event| {
                if let pb::probe_event::Event::Interval(i) = event {
                    progress.status(format!(
                        "{what}: interval {} {}",
                        i.index + 1,
                        headline(&i.metrics)
                    ));
                }
            })
            .await;
        let mut peer_flow_cpus = Vec::new();
        if let Some(peer) = peers[host].as_mut().filter(|_| needs_peer(probe)) {
            peer_flow_cpus = peer.stop_peer().await;
        }
        let completed = completed?;
        let metrics = trial_metrics(&completed.result, &completed.intervals).map_err(|e| {
            AgentError::Protocol {
                agent: conn.label().to_string(),
                what: e.to_string(),
            }
        })?;
        let record = TrialRecord {
            probe: probe.clone(),
            variant: spec.name.clone(),
            warmup: planned.warmup,
            host,
            round: planned.round,
            trial_id: completed.result.trial_id.clone(),
            start_unix_ns: completed.result.start_unix_ns,
            end_unix_ns: completed.result.end_unix_ns,
            cancelled: completed.result.cancelled,
            params: completed
                .accepted
                .resolved_params
                .clone()
                .into_iter()
                .collect(),
            placement: completed
                .result
                .placement
                .clone()
                .or(completed.placement)
                .map(|placement| {
                    with_peer_flows(
                        placement,
                        peer_flow_cpus,
                        peer_on_this_machine,
                        !settings.cpus.is_empty(),
                    )
                }),
            intervals: completed.result.intervals,
            metrics,
            noise: completed.result.noise.clone(),
            peer: peer_address,
            interval_records: completed
                .intervals
                .iter()
                .map(IntervalRecord::from_wire)
                .collect(),
        };
        progress.line(&format!("{what}: {}", headline(&completed.result.metrics)));
        run.trials.push(record);
        progress.trial_done();
        if on_trial(run, planned)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

/// The controls `run --tune` applies: the quiet ones. System-wide ASLR is a security setting
/// and THP changes what the probe measures, so both stay explicit (`quietbench prepare`).
pub fn tune_request(cpus: &[u32]) -> pb::PrepareRequest {
    pb::PrepareRequest {
        steer_irqs: true,
        pause_irqbalance: true,
        performance_governor: true,
        probe_cpus: cpus.to_vec(),
        ..Default::default()
    }
}

/// Restores every tuned target; each failure is reported, none stops the others.
pub async fn restore_all(targets: &[Target], progress: &Progress) -> bool {
    let mut all_ok = true;
    for target in targets {
        let restored = async {
            let mut conn = AgentConnection::connect(&target.address, target.label.clone()).await?;
            conn.restore().await
        };
        match restored.await {
            Ok(response) => progress.line(&format!(
                "restored {}:\n{}",
                target.address,
                crate::report::table::controls(&response.controls).trim_end()
            )),
            Err(err) => {
                all_ok = false;
                progress.line(&format!(
                    "quietbench: error: cannot restore {}: {err}",
                    target.label
                ));
            }
        }
    }
    all_ok
}

/// The first value metric, e.g. "1379.2 events/s", for progress lines.
fn headline(metrics: &[pb::Metric]) -> String {
    metrics
        .iter()
        .find(|m| m.histogram.is_none())
        .and_then(|m| m.value.map(|v| format!("{v:.1} {}", m.unit)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement_on(cpus: &[u32]) -> pb::Placement {
        pb::Placement {
            policy: "rss".into(),
            threads: cpus
                .iter()
                .enumerate()
                .map(|(i, &cpu)| pb::ThreadPlacement {
                    thread_index: i as u32,
                    planned_cpu: cpu,
                    affinity_cpus: vec![cpu],
                    observed_cpu: cpu,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn flows(pairs: &[(u32, u64)]) -> Vec<pb::PeerFlowCpu> {
        pairs
            .iter()
            .map(|&(cpu, flows)| pb::PeerFlowCpu { cpu, flows })
            .collect()
    }

    #[test]
    fn peer_readers_are_added_and_crowding_on_one_machine_is_noted() {
        // One machine, default placement, readers on the senders' CPU: a note.
        let p = with_peer_flows(placement_on(&[1, 1]), flows(&[(1, 2)]), true, false);
        assert_eq!(p.peer_flow_cpus, flows(&[(1, 2)]));
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].contains("--cpus"), "{:?}", p.notes);
        // CPUs chosen by the user, two machines, or a reader elsewhere: no note.
        for (same, given, readers) in [
            (true, true, flows(&[(1, 2)])),
            (false, false, flows(&[(1, 2)])),
            (true, false, flows(&[(0, 1), (1, 1)])),
            (true, false, Vec::new()),
        ] {
            let p = with_peer_flows(placement_on(&[1, 1]), readers.clone(), same, given);
            assert!(
                p.notes.is_empty(),
                "{same} {given} {readers:?}: {:?}",
                p.notes
            );
            assert_eq!(p.peer_flow_cpus, readers);
        }
        // The agent saw its peer on its own machine and spread the senders itself: no note.
        let mut spread = placement_on(&[1, 0]);
        spread.policy = "same-machine".into();
        let p = with_peer_flows(spread, flows(&[(0, 1), (1, 1)]), true, false);
        assert!(p.notes.is_empty(), "{:?}", p.notes);
    }
}
