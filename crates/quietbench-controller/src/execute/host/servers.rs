//! The `http` probe's server on a host's agent, trial by trial: started fresh and stopped after
//! each trial (restart=trial, the default), or kept for the run (restart=run): one process per
//! variant on this host, started at the variant's first trial here and sampled at the start and
//! end of each of its trials (the difference is the trial's CPU time). A kept server's max life
//! is renewed at every trial and while the host waits for a round, so that it outlives any gap
//! between its trials yet dies soon after a controller that died; it is stopped when the host's
//! schedule ends, however it ended.
//!
//! Every kept server is also in the run's [`KeptServers`], which the session empties after the
//! run on every path: a host task aborted by `--fail-fast`, or dropped at Ctrl-C, runs no code
//! of its own.
//!
//! With two variants both servers are alive at once, each on its own port, both on the CPUs
//! placement gives the server (the agent places them alike): only the one whose trial runs is
//! loaded. Stopping one at every switch of variant instead would restart the server at most
//! trials of an interleaved schedule, which is restart=trial by another name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use quietbench_proto::v1 as pb;
use tokio::task::JoinSet;

use super::HostTask;
use crate::connection::{AgentAccess, AgentConnection};
use crate::execute::peer::inner_ip;
use crate::execute::server::{self, Restart, Reuse, Split};
use crate::progress::Progress;
use crate::schedule::PlannedTrial;

/// How often a host that waits for a round renews its kept servers' max life: well inside the
/// shortest life it gives them (two minutes and more, [`server::max_life_ms`]).
pub(super) const RENEW_EVERY: Duration = Duration::from_secs(30);

/// A server started on this host, and where its load goes.
#[derive(Debug, Clone)]
pub(super) struct Started {
    pub response: pb::StartServerResponse,
    /// The server's address as the load agent reaches it.
    pub target: std::net::SocketAddr,
    /// The load's CPUs (empty: the load agent's own placement).
    pub load_cpus: Vec<u32>,
    /// The load agent shares the measured host's machine.
    pub same_machine: bool,
    pub load_address: String,
}

/// A server this host keeps for the run (restart=run), for one variant.
#[derive(Debug)]
pub struct Kept {
    /// Its name on the agent (StartServer's `keep_as`).
    name: String,
    started: Started,
    /// The trial it was started for (its number in the run, as in trial ids), and its round.
    first_trial: usize,
    first_round: u32,
    /// The max life it is given at each renewal, ms.
    life_ms: u64,
    /// Its last sample while it ran.
    last: pb::StopServerResponse,
    /// Why its variant's next trial fails: it ended since its last trial (a renewal saw it).
    ended: Option<String>,
    /// Its agent no longer has it (the agent restarted): started again at its next trial.
    lost: bool,
}

/// The server one trial sends its load to.
#[derive(Debug)]
pub(super) struct TrialServer {
    pub started: Started,
    /// Server B of a duet, started beside A for this trial.
    pub duet_b: Option<DuetB>,
    /// restart=run: which variant's kept server, what it had cost when the trial began, and
    /// what the trial's note says of it.
    kept: Option<KeptUse>,
}

/// Server B of one trial's duet.
#[derive(Debug)]
pub(super) struct DuetB {
    pub started: Started,
    /// Its name on the agent.
    pub name: String,
    /// B was started first this trial (even rounds), so it also has the load's first slot of
    /// each pair and the first of its threads: every asymmetry of the host swaps with the
    /// rounds (host/duet.rs).
    pub b_first: bool,
}

#[derive(Debug)]
struct KeptUse {
    variant: usize,
    before: pb::StopServerResponse,
    reuse: Reuse,
}

impl TrialServer {
    /// A duet's servers for one trial: both started for it.
    pub(super) fn duet(a: Started, b: DuetB) -> Self {
        Self {
            started: a,
            duet_b: Some(b),
            kept: None,
        }
    }

    /// The trial's placement with the server's note.
    pub(super) fn note(&self, placement: pb::Placement) -> pb::Placement {
        let mut placement = server::with_server_note(
            placement,
            &self.started.response,
            self.kept.as_ref().map(|k| k.reuse),
        );
        if let Some(DuetB { started: b, .. }) = &self.duet_b {
            let cpus: Vec<String> = b.response.cpus.iter().map(u32::to_string).collect();
            placement.notes.push(format!(
                "in duet: server B (pid {}) ran at the same time on CPU {}, ready {:.1} ms \
                 after its start; the note above is server A's",
                b.response.pid,
                cpus.join(","),
                b.response.ready_ns as f64 / 1e6
            ));
        }
        placement
    }
}

/// The name a host keeps a variant's server under on its agent: the run's id (printable
/// ASCII only, cut to 80 characters, as the agent takes at most 128), the host and the variant.
pub fn keep_name(run_id: &str, host: usize, variant: usize) -> String {
    let run: String = run_id
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(80)
        .collect();
    format!("{run}/host{host}/variant{variant}")
}

/// Every restart=run server a run has started and not yet stopped, by name, with its host and
/// a connection to its agent. A host stops its own when its schedule ends; the session stops
/// what is left after the run, whatever ended it.
#[derive(Clone, Default)]
pub struct KeptServers(Arc<Mutex<BTreeMap<String, Registered>>>);

/// A kept server's host and agent.
#[derive(Clone)]
struct Registered {
    host: usize,
    conn: AgentConnection,
    /// Its agent is this controller's child (`run --local`): one that cannot be reached has
    /// stopped, and its servers with it (its own stop, or its sentinels), so that is no news.
    local: bool,
}

impl KeptServers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Registered>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before its StartServer: a start cut short by Ctrl-C may still leave it on the agent.
    pub(super) fn register(&self, name: &str, host: usize, conn: &AgentConnection, local: bool) {
        let conn = conn.clone();
        self.lock()
            .insert(name.to_string(), Registered { host, conn, local });
    }

    pub(super) fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    fn of_host(&self, host: usize) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, kept)| kept.host == host)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Stops every server still kept, on all their agents at once, saying what it did.
    pub async fn stop_all(&self, progress: &Progress) {
        let left = std::mem::take(&mut *self.lock());
        let mut stops = JoinSet::new();
        for (name, mut kept) in left {
            stops.spawn(async move {
                let stopped = kept.conn.stop_server(&name).await;
                (name, kept.conn.label().to_string(), kept.local, stopped)
            });
        }
        while let Some(joined) = stops.join_next().await {
            let Ok((name, agent, local, stopped)) = joined else {
                continue;
            };
            match stopped {
                Ok(report) if report.stopped => progress.line(&format!(
                    "quietbench: stopped the server kept for the run on {agent} ({name})"
                )),
                Ok(_) => {}
                Err(_) if local => {}
                Err(err) => progress.line(&format!(
                    "quietbench: warning: cannot stop the server kept for the run on {agent} \
                     ({name}): {err:#}; its agent stops it at its max life"
                )),
            }
        }
    }
}

impl HostTask {
    /// The server for one trial: started for it (restart=trial), or this host's kept one for
    /// the variant, started now when it has none, and sampled (restart=run).
    pub(super) async fn server_for_trial(
        &mut self,
        number: usize,
        planned: &PlannedTrial,
        split: &Split,
    ) -> anyhow::Result<TrialServer> {
        if let Some(b) = &split.duet_b {
            return self.start_duet(planned, split, b).await;
        }
        if split.restart == Restart::Trial {
            let started = self.start_server(split, "").await?;
            return Ok(TrialServer {
                started,
                duet_b: None,
                kept: None,
            });
        }
        // Every kept server of this host must outlive this trial, the other variants' too.
        self.renew_kept().await?;
        let variant = planned.variant;
        if let Some(kept) = self.kept.get(&variant) {
            if let Some(why) = kept.ended.clone() {
                self.forget_kept(variant);
                anyhow::bail!("{why}");
            }
            if kept.lost {
                self.progress.say(&format!(
                    "the agent no longer has the server kept for the run (pid {}; did it \
                     restart?): starting it again",
                    kept.started.response.pid
                ));
                self.forget_kept(variant);
            }
        }
        if let Some(kept) = self.kept.get(&variant) {
            return Ok(TrialServer {
                started: kept.started.clone(),
                duet_b: None,
                kept: Some(KeptUse {
                    variant,
                    before: kept.last.clone(),
                    reuse: Reuse {
                        first_trial: kept.first_trial,
                        first_round: kept.first_round,
                        started_here: false,
                    },
                }),
            });
        }
        let name = keep_name(&self.run_id, self.index, variant);
        let local = matches!(self.target.access, AgentAccess::Local { .. });
        self.kept_servers
            .register(&name, self.index, &self.conn, local);
        let started = self.start_server(split, &name).await?;
        let life_ms = server::max_life_ms(self.settings.duration_ms, split.start.ready_timeout_ms);
        let first = self.conn.sample_server(&name, life_ms).await?;
        if !first.stopped || !first.ended.is_empty() {
            self.kept_servers.forget(&name);
            let gone = pb::StopServerResponse {
                exited_early: true,
                ended: if first.stopped {
                    first.ended.clone()
                } else {
                    "was gone from its agent".into()
                },
                ..first
            };
            anyhow::bail!("{}", server::ended_early(&gone).unwrap_or_default());
        }
        let reuse = Reuse {
            first_trial: number + 1,
            first_round: planned.round,
            started_here: true,
        };
        self.kept.insert(
            variant,
            Kept {
                name,
                started: started.clone(),
                first_trial: reuse.first_trial,
                first_round: reuse.first_round,
                life_ms,
                last: first.clone(),
                ended: None,
                lost: false,
            },
        );
        Ok(TrialServer {
            started,
            duet_b: None,
            kept: Some(KeptUse {
                variant,
                before: first,
                reuse,
            }),
        })
    }

    /// What the trial's server cost over the trial: a per-trial server is stopped; a kept one
    /// is sampled, its figures the difference from the trial's start. A kept server that ended
    /// during the trial is forgotten and reported as an early exit, as a per-trial one is.
    pub(super) async fn server_after_trial(
        &mut self,
        trial_server: &TrialServer,
    ) -> anyhow::Result<pb::StopServerResponse> {
        let Some(used) = &trial_server.kept else {
            return Ok(self.conn.stop_server("").await?);
        };
        let Some(kept) = self.kept.get(&used.variant) else {
            anyhow::bail!("the server kept for the run was forgotten during the trial");
        };
        let (name, life_ms) = (kept.name.clone(), kept.life_ms);
        let after = self.conn.sample_server(&name, life_ms).await?;
        if !after.stopped {
            self.forget_kept(used.variant);
            anyhow::bail!(
                "the agent no longer had the server kept for the run (pid {}) at the trial's end: \
                 someone else stopped it, or the agent restarted",
                trial_server.started.response.pid
            );
        }
        if !after.ended.is_empty() {
            self.forget_kept(used.variant);
            return Ok(pb::StopServerResponse {
                exited_early: true,
                ..after
            });
        }
        if let Some(kept) = self.kept.get_mut(&used.variant) {
            kept.last = after.clone();
        }
        Ok(server::trial_share(&used.before, after))
    }

    /// Samples every server this host keeps, renewing its max life. One found ended is kept
    /// aside for its variant's next trial to fail with (the agent reports it once); one its
    /// agent no longer has is started again at its next trial.
    pub(super) async fn renew_kept(&mut self) -> Result<(), crate::connection::AgentError> {
        for kept in self.kept.values_mut() {
            if kept.ended.is_some() || kept.lost {
                continue;
            }
            let sample = self.conn.sample_server(&kept.name, kept.life_ms).await?;
            if !sample.stopped {
                kept.lost = true;
            } else if !sample.ended.is_empty() {
                kept.ended = Some(server::ended_between_trials(
                    kept.started.response.pid,
                    kept.first_trial,
                    &sample,
                ));
                self.kept_servers.forget(&kept.name);
            } else {
                kept.last = sample;
            }
        }
        Ok(())
    }

    fn forget_kept(&mut self, variant: usize) {
        if let Some(kept) = self.kept.remove(&variant) {
            self.kept_servers.forget(&kept.name);
        }
    }

    /// Stops every server this host keeps for the run: its schedule ended, however it ended.
    /// Each is forgotten once stopped, so a task aborted midway leaves the rest to the session.
    pub(super) async fn stop_kept(&mut self) {
        self.kept.clear();
        for name in self.kept_servers.of_host(self.index) {
            match self.conn.stop_server(&name).await {
                Ok(_) => self.kept_servers.forget(&name),
                Err(err) => self.progress.say(&format!(
                    "cannot stop the server kept for the run ({name}): {err:#}; its agent stops \
                     it at its max life"
                )),
            }
        }
    }

    /// Starts the user's server on this host (kept under `keep_as` when not empty) and says
    /// where the load goes.
    /// Has the load agent check a variant's load parameters before its first server starts
    /// on this host, so that a bad one (`rate=abc`, `http2=maybe`) is refused at once rather
    /// than after the server's start and readiness wait. The target is a stand-in on this
    /// host's address; the trial's own is the started server's.
    pub(super) async fn check_load(
        &mut self,
        variant: usize,
        probe: &str,
        params: &std::collections::HashMap<String, String>,
    ) -> anyhow::Result<()> {
        if self.load_checked.contains(&variant) {
            return Ok(());
        }
        let ip = inner_ip(&self.target)?;
        let mut params = params.clone();
        params.insert(
            "target".into(),
            std::net::SocketAddr::new(ip, 1).to_string(),
        );
        let request = pb::RunProbeRequest {
            probe: probe.to_string(),
            params,
            duration_ms: self.settings.duration_ms,
            interval_ms: self.settings.interval_ms,
            cpus: Vec::new(),
            unpinned: self.settings.unpinned,
            trial_id: String::new(),
            check_only: true,
        };
        let load = self
            .peer
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("{probe} needs a load agent"))?;
        load.conn.check_probe(request).await?;
        self.load_checked.insert(variant);
        Ok(())
    }

    async fn start_server(&mut self, split: &Split, keep_as: &str) -> anyhow::Result<Started> {
        let cpus = self.settings.cpus.clone();
        self.start_command(split.start.clone(), cpus, keep_as).await
    }

    /// Starts a server of `start`'s command on `cpus` (empty: the agent's placement).
    pub(super) async fn start_command(
        &mut self,
        mut start: pb::StartServerRequest,
        cpus: Vec<u32>,
        keep_as: &str,
    ) -> anyhow::Result<Started> {
        let load = self
            .peer
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("http needs a load agent"))?;
        // The load agent reaches the server at this host's address, as it reaches the agent
        // (an EC2 instance's private IP: its public one is not on the instance).
        let ip = inner_ip(&self.target)?;
        let same_machine = load
            .hostname
            .as_ref()
            .is_some_and(|h| !h.is_empty() && *h == self.hostname);
        let load_address = load.target.address.clone();
        start.bind_address = ip.to_string();
        // --cpus pins the server, the thing measured; the load agent places its own threads.
        start.cpus = cpus;
        start.max_life_ms = server::max_life_ms(self.settings.duration_ms, start.ready_timeout_ms);
        start.keep_as = keep_as.to_string();
        self.progress
            .status(format!("starting the server: {}", start.command));
        let response = self.conn.start_server(start).await?;
        let load_cpus = if same_machine {
            server::load_cpus_beside(&response.cpus, &response.free_cpus)
        } else {
            Vec::new()
        };
        Ok(Started {
            target: std::net::SocketAddr::new(ip, response.port as u16),
            response,
            load_cpus,
            same_machine,
            load_address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_servers_name_is_printable_short_and_names_host_and_variant() {
        assert_eq!(
            keep_name("5d2b7e10-8c3f-4a9e-b1d6-2f7a9c4e8b03", 0, 1),
            "5d2b7e10-8c3f-4a9e-b1d6-2f7a9c4e8b03/host0/variant1"
        );
        let odd = keep_name(
            &format!("my run\n{}", "é".repeat(3) + &"x".repeat(200)),
            12,
            3,
        );
        assert!(
            odd.starts_with("myrunxxx") && odd.ends_with("/host12/variant3"),
            "{odd}"
        );
        assert!(
            odd.len() <= 128 && odd.bytes().all(|b| b.is_ascii_graphic()),
            "{odd}"
        );
    }
}
