//! The server side of two-agent network probes, run on the peer agent.

use std::net::IpAddr;
use std::sync::Mutex;

use quietbench_probe::placement::{MachineLayout, PlacementRequest, WorkKind, plan};
use quietbench_proto::v1 as pb;
use tonic::Status;

/// The peer server this agent runs, if any.
#[derive(Default)]
pub struct PeerSlot {
    running: Mutex<Option<Running>>,
}

/// Placeholder until the probe crate's peer server lands: it keeps the RPCs' shape.
struct Running;

impl PeerSlot {
    /// Starts (or restarts) the peer server on `bind`, its threads on the RSS CPUs that
    /// network placement picks.
    pub fn start(
        &self,
        bind: IpAddr,
        layout: &MachineLayout,
    ) -> Result<pb::StartPeerResponse, Status> {
        let threads = layout.nic_queues.len().max(1);
        let cpus = plan(
            layout,
            &PlacementRequest {
                threads,
                kind: WorkKind::Network,
                explicit_cpus: Vec::new(),
            },
        )
        .map(|p| p.thread_cpus)
        .unwrap_or_default();
        let _ = (bind, cpus, &self.running, Running);
        Err(Status::unimplemented(
            "the network peer server is not built into this agent yet",
        ))
    }

    /// Stops the peer server; false when none ran.
    pub fn stop(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some()
    }
}
