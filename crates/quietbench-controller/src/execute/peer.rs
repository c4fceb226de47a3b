//! A host's peer: where the other end of its network probes, or the load of `http`, runs.

use quietbench_proto::v1 as pb;

use crate::connection::AgentError;

/// Adds where the peer's readers ran to a trial's placement, with a note when both agents
/// share one machine and the default placement left the readers on the senders' CPUs (with
/// CPUs to spare, that measures the placement, not the machine). An agent that saw its peer
/// on its own machine (policy "same-machine": a loopback peer) already spread the senders over
/// every CPU, so --cpus has nothing to add and no note is due.
pub fn with_peer_flows(
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

/// The IP address of an agent address (HOST:PORT), resolving a name if needed: the address a
/// peer server listens on and the client connects to.
pub(super) fn host_ip(address: &str) -> Result<std::net::IpAddr, AgentError> {
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

/// The IP a host's peer (or, for `http`, its load agent) reaches it at: the fleet's inner
/// address when it has one (an EC2 instance's private IP), else the agent address's.
pub(super) fn inner_ip(target: &crate::fleet::Target) -> Result<std::net::IpAddr, AgentError> {
    match target.inner_ip {
        Some(ip) => Ok(ip),
        None => host_ip(&target.address),
    }
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
