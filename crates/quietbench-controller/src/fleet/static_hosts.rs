//! The static fleet: agents already running, named with `--agent`, in a plan's `hosts`, or in a
//! hosts file. Nothing is started or stopped; releasing leaves them running.

use super::{Fleet, FleetFuture, HostEntry, Target};
use crate::connection::AgentAccess;
use crate::progress::Progress;
use crate::record::HostKind;

/// Agents that run already.
pub struct StaticFleet {
    hosts: Vec<HostEntry>,
    peers: Vec<String>,
    /// How its agents and peers are reached.
    access: AgentAccess,
}

impl StaticFleet {
    /// A fleet of `hosts`, with one peer for all of them or one per host (network probes),
    /// each reached as `access` says.
    pub fn new(
        hosts: Vec<HostEntry>,
        peers: Vec<String>,
        access: AgentAccess,
    ) -> anyhow::Result<Self> {
        if hosts.is_empty() {
            anyhow::bail!("no host to measure on: give --agent HOST:PORT or --hosts FILE");
        }
        if !peers.is_empty() && peers.len() != 1 && peers.len() != hosts.len() {
            anyhow::bail!(
                "give one --peer for all agents or one per agent ({} agents, {} peers)",
                hosts.len(),
                peers.len()
            );
        }
        Ok(Self {
            hosts,
            peers,
            access,
        })
    }

    /// Hosts named on the command line (`--agent`), in order.
    pub fn from_addresses(
        addresses: &[String],
        peers: &[String],
        access: AgentAccess,
    ) -> anyhow::Result<Self> {
        let hosts = addresses
            .iter()
            .map(|a| HostEntry {
                address: a.clone(),
                label: None,
                source: "--agent".into(),
            })
            .collect();
        Self::new(hosts, peers.to_vec(), access)
    }
}

impl Fleet for StaticFleet {
    fn kind(&self) -> &'static str {
        "static"
    }

    fn acquire<'a>(&'a mut self, _progress: &'a Progress) -> FleetFuture<'a, Vec<Target>> {
        Box::pin(async move {
            Ok(self
                .hosts
                .iter()
                .enumerate()
                .map(|(i, host)| Target {
                    address: host.address.clone(),
                    kind: HostKind::Remote,
                    label: match &host.label {
                        Some(label) => format!("{label} ({})", host.address),
                        None => host.address.clone(),
                    },
                    obtained: host.source.clone(),
                    instance_id: None,
                    access: self.access.clone(),
                    peer: self.peers.get(i).or(self.peers.first()).map(|p| {
                        Box::new(Target {
                            address: p.clone(),
                            kind: HostKind::Remote,
                            label: format!("{p} (peer)"),
                            obtained: "--peer".into(),
                            instance_id: None,
                            access: self.access.clone(),
                            peer: None,
                            inner_ip: None,
                        })
                    }),
                    inner_ip: None,
                })
                .collect())
        })
    }

    fn release<'a>(&'a mut self, _progress: &'a Progress) -> FleetFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn report_lines(&self) -> Vec<String> {
        let mut sources: Vec<String> = Vec::new();
        for host in &self.hosts {
            // "hosts.txt line 3" -> "hosts.txt"; "--agent" stays.
            let source = host
                .source
                .rsplit_once(" line ")
                .map_or(host.source.as_str(), |(file, _)| file)
                .to_string();
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
        vec![format!(
            "fleet: static, {} running agent(s) from {} (left running after the run)",
            self.hosts.len(),
            sources.join(", ")
        )]
    }
}
