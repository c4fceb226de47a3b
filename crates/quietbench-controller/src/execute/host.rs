//! One host's part of a run: its own randomized interleaved schedule, one trial at a time,
//! waiting at round boundaries for the others, each finished trial sent to the run's writer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use quietbench_proto::v1 as pb;
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc, watch};

use super::peer::{inner_ip, with_peer_flows};
use crate::connection::intake::RunBudget;
use crate::connection::{AgentAccess, AgentConnection, AgentError};
use crate::fleet::Target;
use crate::progress::HostProgress;
use crate::record::{
    IntervalRecord, MetricRecord, RunSettings, TrialRecord, queries, trial_metrics,
};
use crate::schedule::PlannedTrial;

mod duet;
pub(super) mod servers;
mod void;

/// What a host tells the run's writer.
#[derive(Debug)]
pub enum HostEvent {
    /// A trial finished (boxed: a record with its histograms is large).
    Trial {
        /// Which one.
        planned: PlannedTrial,
        /// Its record.
        record: Box<TrialRecord>,
    },
    /// The host finished a round.
    RoundFinished {
        /// Index into the run's hosts.
        host: usize,
        /// The round.
        round: u32,
    },
    /// The host is done: its schedule finished, the run stopped, or it failed (`error`).
    Left {
        /// Index into the run's hosts.
        host: usize,
        /// Why it stopped before its schedule was done.
        error: Option<String>,
    },
}

/// The other end of a host's network probes.
pub struct PeerLink {
    /// Its connection.
    pub conn: AgentConnection,
    /// Its target.
    pub target: Target,
    /// Its machine's host name, to tell whether both agents share one machine.
    pub hostname: Option<String>,
}

/// Locks on agents, so that no agent measures and serves as another host's peer at once: a
/// trial holds the lock of every agent it uses (its own, and its peer's for network probes),
/// taken in address order so two hosts that are each other's peers cannot deadlock. Hosts that
/// share one peer take turns for network trials; hosts with their own agents never wait.
#[derive(Clone, Default)]
pub struct AgentLocks(Arc<std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>>);

impl AgentLocks {
    async fn hold(&self, addresses: &[&str]) -> Vec<OwnedMutexGuard<()>> {
        let mut sorted: Vec<&str> = addresses.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let locks: Vec<Arc<Mutex<()>>> = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            sorted
                .iter()
                .map(|a| map.entry((*a).to_string()).or_default().clone())
                .collect()
        };
        let mut guards = Vec::with_capacity(locks.len());
        for lock in locks {
            guards.push(lock.lock_owned().await);
        }
        guards
    }
}

/// Everything one host's task owns.
pub struct HostTask {
    /// Index into the run's hosts.
    pub index: usize,
    /// The host.
    pub target: Target,
    /// Its agent.
    pub conn: AgentConnection,
    /// Its host name (from the fingerprint).
    pub hostname: String,
    /// Its network probes' peer, if it has one.
    pub peer: Option<PeerLink>,
    /// The run's settings.
    pub settings: Arc<RunSettings>,
    /// The run's id (trial ids are made from it).
    pub run_id: String,
    /// Its trials, each with its number in the whole schedule, in schedule order.
    pub trials: Vec<(usize, PlannedTrial)>,
    /// Where finished trials go.
    pub events: mpsc::Sender<HostEvent>,
    /// The highest round it may start.
    pub released: watch::Receiver<u32>,
    /// True once the run stops (adaptive rule met, or another host failed with --fail-fast).
    pub stop: watch::Receiver<bool>,
    /// Its progress line.
    pub progress: HostProgress,
    /// Agents in use.
    pub locks: AgentLocks,
    /// How long a lost agent is waited for before the host fails; `None`: not at all.
    pub reconnect_within: Option<std::time::Duration>,
    /// The bytes the run's trial records may hold, shared by every host of the run.
    pub budget: RunBudget,
    /// Every restart=run server of the run, stopped by the session whatever ends the run.
    pub kept_servers: servers::KeptServers,
    /// This host's restart=run servers, by variant.
    pub kept: BTreeMap<usize, servers::Kept>,
    /// The variants whose load parameters the load agent has checked for this host.
    pub load_checked: std::collections::BTreeSet<usize>,
}

impl HostTask {
    /// Runs the host's schedule, then tells the writer it left (with the error if it failed).
    pub async fn run(mut self) {
        let outcome = self.schedule().await;
        // restart=run servers live as long as the schedule, however it ended.
        self.stop_kept().await;
        let error = outcome.err().map(|e| format!("{e:#}"));
        if let Some(e) = &error {
            self.progress.failed(e);
        }
        let host = self.index;
        // The writer outlives every host task; a send fails only when the run was aborted.
        let _ = self.events.send(HostEvent::Left { host, error }).await;
    }

    async fn schedule(&mut self) -> anyhow::Result<()> {
        let total_rounds = self.settings.warmup + self.settings.rounds;
        let trials = std::mem::take(&mut self.trials);
        for round in 1..=total_rounds {
            if !self.wait_for_round(round).await {
                return Ok(());
            }
            for (number, planned) in trials.iter().filter(|(_, p)| p.round == round) {
                if *self.stop.borrow() {
                    return Ok(());
                }
                let record = self.valid_trial(*number, planned).await?;
                self.progress.trial_done(&format!(
                    "round {round}/{total_rounds}{} {}: {}",
                    if planned.warmup { " warm-up" } else { "" },
                    record.variant,
                    headline_of(&record)
                ));
                self.send(HostEvent::Trial {
                    planned: *planned,
                    record: Box::new(record),
                })
                .await?;
            }
            self.send(HostEvent::RoundFinished {
                host: self.index,
                round,
            })
            .await?;
        }
        Ok(())
    }

    /// After a trial failed: when the agent (or its peer) was lost or went silent, waits for it
    /// to come back on its address and runs the trial once more; otherwise, or when it does not
    /// come back in time, the host fails with the first error.
    async fn retry(
        &mut self,
        number: usize,
        planned: &PlannedTrial,
        lost: anyhow::Error,
    ) -> anyhow::Result<TrialRecord> {
        let connection_lost = matches!(
            lost.downcast_ref::<AgentError>(),
            Some(
                AgentError::Lost { .. }
                    | AgentError::Stalled { .. }
                    | AgentError::Unreachable { .. }
            )
        );
        // A local agent is this controller's child: one that lost its connection has died
        // (the fleet reports how at once), and no agent will come back on its address.
        let local = matches!(self.target.access, AgentAccess::Local { .. });
        let Some(window) = self.reconnect_within.filter(|_| connection_lost && !local) else {
            return Err(lost);
        };
        self.progress.say(&format!(
            "{lost:#}; reconnecting for up to {} s to run round {}'s trial again",
            window.as_secs(),
            planned.round
        ));
        if let Err(why) = self.reconnect(window).await {
            anyhow::bail!(
                "{lost:#}; it did not come back within {} s ({why})",
                window.as_secs()
            );
        }
        self.progress.say(&format!(
            "back; running round {}'s trial again",
            planned.round
        ));
        self.trial(number, planned)
            .await
            .map_err(|again| anyhow::anyhow!("{again:#} (the retry after {lost:#})"))
    }

    /// Connects again to the agent (and its peer), until they answer GetHost or `window` ends.
    async fn reconnect(&mut self, window: std::time::Duration) -> Result<(), AgentError> {
        let deadline = tokio::time::Instant::now() + window;
        loop {
            match self.reconnect_once().await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
            }
        }
    }

    async fn reconnect_once(&mut self) -> Result<(), AgentError> {
        let mut conn = AgentConnection::connect_with(
            &self.target.address,
            self.target.label.clone(),
            &self.target.access,
        )
        .await?;
        conn.get_host().await?;
        let peer = match &self.peer {
            Some(p) => {
                let mut peer_conn = AgentConnection::connect_with(
                    &p.target.address,
                    p.target.label.clone(),
                    &p.target.access,
                )
                .await?;
                peer_conn.get_host().await?;
                Some(peer_conn)
            }
            None => None,
        };
        self.conn = conn;
        if let (Some(link), Some(peer_conn)) = (self.peer.as_mut(), peer) {
            link.conn = peer_conn;
        }
        Ok(())
    }

    async fn send(&self, event: HostEvent) -> anyhow::Result<()> {
        self.events
            .send(event)
            .await
            .map_err(|_| anyhow::anyhow!("the run's writer stopped"))
    }

    /// Waits until `round` may start; false when the run stopped first.
    async fn wait_for_round(&mut self, round: u32) -> bool {
        if *self.released.borrow() >= round {
            return true;
        }
        self.progress.status(format!(
            "waiting for the other hosts to finish round {}",
            round - 1
        ));
        loop {
            let renew = tokio::select! {
                released = self.released.wait_for(|r| *r >= round) => return released.is_ok(),
                _ = self.stop.wait_for(|s| *s) => return false,
                _ = tokio::time::sleep(servers::RENEW_EVERY), if !self.kept.is_empty() => true,
            };
            // Kept servers must outlive the wait: their max life is renewed meanwhile (an agent
            // lost now is the next trial's to find).
            if renew {
                let _ = self.renew_kept().await;
            }
        }
    }

    /// Runs one trial to its end and builds its record.
    async fn trial(
        &mut self,
        number: usize,
        planned: &PlannedTrial,
    ) -> anyhow::Result<TrialRecord> {
        let settings = self.settings.clone();
        let spec = &settings.variants[planned.variant];
        let probe = &spec.probe;
        let mut params: HashMap<String, String> = spec.params.clone().into_iter().collect();
        let network = crate::run::needs_peer(probe);
        // `http`: the user's server runs here and the peer sends the load.
        let serving = crate::run::runs_server(probe);
        let server_split = if serving {
            let split =
                super::server::split(&params).map_err(|why| anyhow::anyhow!("{probe}: {why}"))?;
            params = split.load.clone();
            Some(split)
        } else {
            None
        };
        let mut agents = vec![self.target.address.clone()];
        if network {
            let Some(peer) = &self.peer else {
                if serving {
                    anyhow::bail!(
                        "{probe} needs a load agent to send the requests to {}: give --load-from \
                         HOST:PORT (run --local starts one)",
                        self.target.address
                    );
                }
                anyhow::bail!(
                    "{probe} needs a peer agent for {}: give --peer HOST:PORT (run --local starts one)",
                    self.target.address
                );
            };
            agents.push(peer.target.address.clone());
        }
        let agent_refs: Vec<&str> = agents.iter().map(String::as_str).collect();
        let _held = self.locks.hold(&agent_refs).await;
        let mut peer_address = None;
        let mut peer_on_this_machine = false;
        if let Some(peer) = self.peer.as_mut().filter(|_| network && !serving) {
            let ip = inner_ip(&peer.target)?;
            // Same host name: two agents on one machine (namespaces share the UTS name).
            let same_machine = peer
                .hostname
                .as_ref()
                .is_some_and(|h| !h.is_empty() && *h == self.hostname);
            peer_on_this_machine = same_machine;
            // A fresh secret per trial (uuid v4: 122 bits from the OS's random source): the
            // peer serves only connections carrying it, on ports that close with the trial.
            let secret: String = uuid::Uuid::new_v4()
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let ports = peer
                .conn
                .start_peer(&ip.to_string(), same_machine, &secret)
                .await?;
            let server = std::net::SocketAddr::new(ip, ports.tcp_port as u16);
            params.insert("peer".into(), server.to_string());
            params.insert("peer_secret".into(), secret);
            params.insert("peer_udp".into(), ports.udp_port.to_string());
            peer_address = Some(peer.target.address.clone());
        }
        let mut probe_cpus = settings.cpus.clone();
        let mut server_started = None;
        if let Some(split) = &server_split {
            self.check_load(planned.variant, probe, &params).await?;
            let server = self.server_for_trial(number, planned, split).await?;
            peer_on_this_machine = server.started.same_machine;
            probe_cpus = server.started.load_cpus.clone();
            params.insert("target".into(), server.started.target.to_string());
            if let Some(b) = &server.duet_b {
                params.insert("duet_target".into(), b.started.target.to_string());
                if b.b_first {
                    params.insert("duet_b_first".into(), "true".into());
                }
            }
            peer_address = Some(server.started.load_address.clone());
            server_started = Some(server);
        }
        let request = pb::RunProbeRequest {
            probe: probe.clone(),
            params,
            duration_ms: settings.duration_ms,
            interval_ms: settings.interval_ms,
            cpus: probe_cpus,
            unpinned: settings.unpinned,
            trial_id: format!("{}-{}", self.run_id, number + 1),
            check_only: false,
        };
        let total_rounds = settings.warmup + settings.rounds;
        let what = format!(
            "round {}/{total_rounds}{} {}",
            planned.round,
            if planned.warmup { " warm-up" } else { "" },
            spec.name
        );
        self.progress.status(what.clone());
        let progress = self.progress.clone();
        let on_event = |event: &pb::probe_event::Event| {
            if let pb::probe_event::Event::Interval(i) = event {
                progress.status(format!(
                    "{what}: interval {} {}",
                    i.index + 1,
                    headline(&i.metrics)
                ));
            }
        };
        // The probe runs where it measures: here, or for `http` on the load agent.
        let completed = match self.peer.as_mut().filter(|_| serving) {
            Some(load) => {
                load.conn
                    .run_probe_within(request, &self.budget, on_event)
                    .await
            }
            None => {
                self.conn
                    .run_probe_within(request, &self.budget, on_event)
                    .await
            }
        };
        let mut peer_flow_cpus = Vec::new();
        if let Some(peer) = self.peer.as_mut().filter(|_| network && !serving) {
            peer_flow_cpus = peer.conn.stop_peer().await;
        }
        // The server stops (or, kept, is sampled) whatever the trial's outcome; what it cost
        // is part of the trial.
        let (server_stopped, b_stopped) = match &server_started {
            Some(server) => (
                Some(self.server_after_trial(server).await),
                self.duet_b_after_trial(server).await,
            ),
            None => (None, None),
        };
        let mut completed = completed?;
        let mut server_figures = match (server_stopped, &server_split) {
            (Some(stopped), Some(split)) => {
                super::server::account(stopped?, split, &mut completed)?
            }
            _ => Vec::new(),
        };
        if let Some(stopped) = b_stopped {
            server_figures.extend(super::server::account_b(stopped?, &completed)?);
        }
        // This controller never cancels a trial it waits for (an interrupted run stops by
        // hanging up): a cancelled one was stopped by someone else, or by the agent shutting
        // down, and a run that quietly lost a trial would pass one trial short.
        if completed.result.cancelled {
            return Err(AgentError::Protocol {
                agent: self.conn.label().to_string(),
                what: format!(
                    "trial {} was cancelled on the agent, not by this run (another caller of the \
                     agent, or the agent stopping): the run cannot count it",
                    completed.result.trial_id
                ),
            }
            .into());
        }
        let mut metrics = trial_metrics(&completed.result, &completed.intervals).map_err(|e| {
            AgentError::Protocol {
                agent: self.conn.label().to_string(),
                what: e.to_string(),
            }
        })?;
        metrics.extend(server_figures.into_iter().map(|f| MetricRecord {
            name: f.name.to_string(),
            unit: f.unit.to_string(),
            value: Some(f.value),
            interval_values: Vec::new(),
            histogram: None,
        }));
        let interval_records = completed
            .intervals
            .iter()
            .map(IntervalRecord::from_wire)
            .collect();
        // The record goes to the run's writer, which keeps it for the run.
        completed.retained.keep();
        Ok(TrialRecord {
            probe: probe.clone(),
            variant: spec.name.clone(),
            warmup: planned.warmup,
            host: self.index,
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
                .collect::<BTreeMap<_, _>>(),
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
                })
                .map(|placement| match &server_started {
                    Some(server) => server.note(placement),
                    None => placement,
                }),
            intervals: completed.result.intervals,
            metrics,
            noise: completed.result.noise.clone(),
            peer: peer_address,
            block_device: completed.result.block_device.clone(),
            interval_records,
        })
    }
}

/// An interval's headline metric, e.g. "1379.2 events/s", for progress lines.
pub fn headline(metrics: &[pb::Metric]) -> String {
    queries::headline(metrics)
        .and_then(|m| m.value.map(|v| format!("{v:.1} {}", m.unit)))
        .unwrap_or_default()
}

/// A finished trial's headline metric, for progress lines.
fn headline_of(record: &TrialRecord) -> String {
    let mut line = queries::headline(&record.metrics)
        .and_then(|m| m.value.map(|v| format!("{v:.1} {}", m.unit)))
        .unwrap_or_default();
    // `http`: the rate alone says only that the load kept its schedule; the tail is the news.
    if let Some(p99) = super::server::p99_of(&record.metrics) {
        line.push_str(&format!(", {p99}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn agents_used_together_are_locked_in_one_order() {
        let locks = AgentLocks::default();
        // Two hosts that are each other's peers ask in opposite orders: no deadlock, and the
        // second waits for the first.
        let first = locks.hold(&["b:1", "a:1"]).await;
        let second = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.hold(&["a:1", "b:1"]).await.len() })
        };
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "a:1 and b:1 are held");
        // An agent nobody holds is free at once.
        assert_eq!(locks.hold(&["c:1", "c:1"]).await.len(), 1);
        drop(first);
        assert_eq!(second.await.unwrap(), 2);
    }
}
