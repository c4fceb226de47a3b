//! The local fleet: one agent process started on this machine for the run (and a second as the
//! peer of network probes), stopped when the fleet is released or the controller dies.

use std::time::Duration;

use super::{Fleet, FleetFuture, Target};
use crate::local_agent::{LocalAgent, describe_status};
use crate::progress::Progress;
use crate::record::HostKind;

/// Agents started here.
#[derive(Default)]
pub struct LocalFleet {
    wants_peer: bool,
    agent: Option<LocalAgent>,
    peer: Option<LocalAgent>,
}

impl LocalFleet {
    /// A fleet of one local agent, plus a local peer agent when `wants_peer` (network probes).
    pub fn new(wants_peer: bool) -> Self {
        Self {
            wants_peer,
            ..Self::default()
        }
    }
}

/// A local agent as a target.
pub fn local_target(agent: &LocalAgent, role: &str) -> Target {
    Target {
        address: agent.addr().to_string(),
        kind: HostKind::Local,
        label: format!("{} ({role}, pid {})", agent.addr(), agent.pid()),
        obtained: format!("started here (pid {})", agent.pid()),
        instance_id: None,
        access: crate::connection::AgentAccess::Local {
            secret: agent.secret().to_string(),
        },
        peer: None,
        inner_ip: None,
    }
}

impl Fleet for LocalFleet {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn acquire<'a>(&'a mut self, progress: &'a Progress) -> FleetFuture<'a, Vec<Target>> {
        Box::pin(async move {
            // Started from the thread that polls this future, the main thread: the agents'
            // parent-death signal follows it.
            progress.status("starting a local agent".into());
            let agent = self.agent.insert(LocalAgent::start()?);
            let mut target = local_target(agent, "local agent");
            if self.wants_peer {
                // Network probes on this machine: a second local agent serves the other end.
                let peer = self.peer.insert(LocalAgent::start()?);
                target.peer = Some(Box::new(local_target(peer, "local peer agent")));
            }
            keep_off_probe_cpus();
            Ok(vec![target])
        })
    }

    fn release<'a>(&'a mut self, _progress: &'a Progress) -> FleetFuture<'a, ()> {
        Box::pin(async move {
            // Dropping a LocalAgent stops it (SIGTERM, then SIGKILL after a grace period).
            self.agent.take();
            self.peer.take();
            Ok(())
        })
    }

    fn report_lines(&self) -> Vec<String> {
        let mut line = "fleet: local (an agent started on this machine".to_string();
        if self.wants_peer {
            line.push_str(
                ", and a peer agent: the other end of network probes, or the load of http and tcp",
            );
        }
        line.push(')');
        vec![line]
    }

    fn explain_failure(&mut self) -> Option<String> {
        let agent = self.agent.as_mut()?;
        let status = agent.wait_exit(Duration::from_millis(500))?;
        Some(format!(
            "the local agent, pid {}, {}",
            agent.pid(),
            describe_status(status)
        ))
    }
}

/// Pins the controller (this thread, and so every thread it starts later: the runtime's, the
/// progress bar's ticker) to the lowest CPU it may use, the one the local agent keeps for
/// housekeeping, so the controller never runs where a probe measures. Called after the agents
/// started, so they keep the full CPU set. (A few lines of nix rather than the probe crate's
/// helpers: the controller links no probe code.)
fn keep_off_probe_cpus() {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    let Ok(allowed) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if cpus.len() < 2 {
        return; // one CPU: nowhere else to go
    }
    let mut housekeeping = CpuSet::new();
    if housekeeping.set(cpus[0]).is_ok()
        && let Err(err) = sched_setaffinity(Pid::from_raw(0), &housekeeping)
    {
        eprintln!(
            "quietbench: warning: cannot pin the controller to CPU {}: {err}",
            cpus[0]
        );
    }
}
