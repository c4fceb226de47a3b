//! The server side of two-agent network probes, run on the peer agent.

use std::net::IpAddr;
use std::sync::Mutex;

use quietbench_probe::net::{PeerServer, Secret};
use quietbench_probe::placement::{MachineLayout, PlacementRequest, WorkKind, plan};
use quietbench_proto::v1 as pb;
use tonic::Status;

/// The peer server this agent runs, if any.
#[derive(Default)]
pub struct PeerSlot {
    running: Mutex<Option<PeerServer>>,
}

impl PeerSlot {
    /// Starts (or restarts) the peer server on `bind`. Its connection threads go to the CPUs
    /// that service the NIC's queues (network placement), and each throughput connection to
    /// the one of them its flow hashes to, so each flow's receive work and its reader share a
    /// CPU, as CONTEXT.md §4's 85 Gbps setup did. When both agents share one machine
    /// (loopback, or two network namespaces), no CPU is excluded: a throughput connection
    /// moves to its sender's CPU, where the stack handles its packets, and the rest are left
    /// to the scheduler.
    pub fn start(
        &self,
        bind: IpAddr,
        same_machine: bool,
        layout: &MachineLayout,
        secret: Secret,
    ) -> Result<pb::StartPeerResponse, Status> {
        let cpus = if bind.is_loopback() || same_machine {
            Vec::new()
        } else {
            let threads = layout.nic_queues.len().max(1);
            let request = PlacementRequest {
                threads,
                kind: WorkKind::Network,
                explicit_cpus: Vec::new(),
            };
            let mut cpus = plan(layout, &request)
                .map(|p| p.thread_cpus)
                .unwrap_or_default();
            cpus.dedup();
            cpus
        };
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = running.take() {
            old.stop();
        }
        let server = PeerServer::start(bind, &cpus, secret).map_err(|e| {
            Status::failed_precondition(format!("cannot start the peer server on {bind}: {e}"))
        })?;
        let response = pb::StartPeerResponse {
            tcp_port: server.tcp_port().into(),
            udp_port: server.udp_port().into(),
            cpus,
        };
        *running = Some(server);
        Ok(response)
    }

    /// Stops the peer server: whether one ran, and where its throughput connections moved.
    pub fn stop(&self) -> pb::StopPeerResponse {
        let server = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match server {
            Some(server) => {
                let flows_followed = server
                    .flows_followed()
                    .into_iter()
                    .map(|(cpu, flows)| pb::PeerFlowCpu { cpu, flows })
                    .collect();
                server.stop();
                pb::StopPeerResponse {
                    stopped: true,
                    flows_followed,
                }
            }
            None => pb::StopPeerResponse::default(),
        }
    }
}
