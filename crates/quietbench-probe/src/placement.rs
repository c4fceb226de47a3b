//! Where probe threads go: a pure function from what the agent knows about the machine (a
//! [`MachineLayout`]) and what a probe asks for (a [`PlacementRequest`]) to one CPU per thread
//! (a [`PlacementPlan`]), with a human-readable note for every compromise.
//!
//! The roles (DESIGN.md, "Placement"):
//! - the **housekeeping CPU** is the lowest allowed CPU: the agent's gRPC runtime and supervisor
//!   live there, so probe threads go there last;
//! - **RSS CPUs** service NIC queue interrupts;
//! - **quiet CPUs** are the allowed CPUs that are neither, and none of whose SMT siblings is
//!   either (a sibling taking interrupts steals the core's execution units).
//!
//! Compute threads (cpu, memory and disk probes) take CPUs in this order:
//! 1. one probe thread per physical core first: a thread goes onto a core that already runs one
//!    only when every core with an allowed non-housekeeping CPU runs one. Two busy hyperthreads
//!    slow each other by far more than an interrupt now and then does, which is why this rule
//!    outranks the tiers below rather than the other way round;
//! 2. within that, by tier: quiet CPUs, then non-RSS CPUs whose sibling is busy (housekeeping or
//!    RSS), then RSS CPUs; within a tier the lowest `interrupt_load` first, ties by CPU id;
//! 3. then the housekeeping CPU;
//! 4. then, with more threads than allowed CPUs, threads share CPUs in the same order.
//!
//! Network threads go one per RSS CPU (one flow per queue CPU), CPUs on the NIC's NUMA node
//! first, in queue order; more threads than RSS CPUs wrap round them. The housekeeping CPU is
//! never an RSS target: it would put a flow beside the agent's own runtime. Without an RSS CPU
//! the compute order is used, with a note.
//!
//! Network threads whose peer runs on this same machine (loopback, or an address of this host)
//! send through no NIC, so RSS CPUs mean nothing to them, and the peer's readers follow their
//! flows onto the senders' CPUs: keeping the housekeeping CPU out would leave senders and
//! readers one CPU short (on 2 vCPUs, all of them on one CPU while iperf3 has two). They take
//! the compute order instead, which ends with the housekeeping CPU, so with as many flows as
//! CPUs every CPU carries one, as iperf3's unpinned threads would ([`network_kind`]).
//!
//! An explicit CPU list always wins: threads take its CPUs in turn.
//!
//! The planner is pure so that every rule is tested on captured machines and on random layouts;
//! reading /proc and sysfs is the agent's job (through quietbench-host, which this crate does not
//! depend on, so the probes never link the host readers).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

mod order;
use order::{View, compute_plan, explicit_notes, join_cpus, network_plan, take_in_turn};

/// The most threads one plan may hold. The catalog caps probes at 1024; this bound only keeps a
/// malformed request from allocating without limit.
pub const MAX_THREADS: usize = 1 << 16;

/// What the agent knows about the machine, filled from /proc/interrupts, /proc/irq and sysfs.
/// Maps may name CPUs outside `allowed_cpus` (the machine's other CPUs); they are taken into
/// account (a busy sibling is busy even if the agent may not run there) but never chosen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MachineLayout {
    /// The agent's CPU affinity: the only CPUs a plan may use.
    pub allowed_cpus: Vec<u32>,
    /// CPU → the other hardware threads of its core (itself excluded); absent: none known. Read
    /// as symmetric: listing b as a sibling of a makes a a sibling of b.
    pub smt_siblings: BTreeMap<u32, Vec<u32>>,
    /// CPU → its NUMA node; absent: unknown.
    pub numa_node: BTreeMap<u32, u32>,
    /// NIC queue interrupts and the CPUs that service them, the NIC under test first.
    pub nic_queues: Vec<NicQueueCpus>,
    /// Interrupts per CPU over a short observation window; absent CPUs count as 0.
    pub interrupt_load: BTreeMap<u32, u64>,
}

impl MachineLayout {
    /// A layout that knows only the allowed CPUs: no SMT, NUMA or interrupt information.
    pub fn allowed_only(allowed_cpus: &[u32]) -> Self {
        Self {
            allowed_cpus: allowed_cpus.to_vec(),
            ..Self::default()
        }
    }
}

/// One NIC queue interrupt and the CPUs that service it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicQueueCpus {
    /// The device as the driver names it (`eth0`, `virtio2`, a PCI address).
    pub device: String,
    /// The queue index, when the interrupt's name gives one.
    pub queue: Option<u32>,
    /// The CPUs that service it, most-serviced first where the agent knows; network threads take
    /// them in this order.
    pub cpus: Vec<u32>,
    /// The NIC's NUMA node, when known.
    pub numa_node: Option<u32>,
}

impl NicQueueCpus {
    /// `eth0 queue 3`, or the device alone when the queue is unknown.
    pub fn label(&self) -> String {
        match self.queue {
            Some(q) => format!("{} queue {q}", self.device),
            None => self.device.clone(),
        }
    }
}

/// What the probe threads do (defined with the probe spec, which carries it).
pub use crate::spec::WorkKind;

/// The kind of placement a network probe's threads get: [`WorkKind::SameMachineNetwork`] when
/// its peer is on this machine (a loopback address, or one of this host's own), else `kind`
/// unchanged. `is_own_address` says whether an address belongs to this host (the agent tries
/// to bind it); it is asked only about non-loopback peers.
pub fn network_kind(
    kind: WorkKind,
    peer: Option<std::net::IpAddr>,
    is_own_address: impl Fn(std::net::IpAddr) -> bool,
) -> WorkKind {
    match (kind, peer) {
        (WorkKind::Network, Some(ip)) if ip.is_loopback() || is_own_address(ip) => {
            WorkKind::SameMachineNetwork
        }
        _ => kind,
    }
}

/// What a probe asks of placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementRequest {
    /// How many probe threads to place.
    pub threads: usize,
    /// What they do.
    pub kind: WorkKind,
    /// The caller's CPUs, taken in turn; empty: the planner chooses.
    pub explicit_cpus: Vec<u32>,
}

/// The policy that chose the CPUs, as reported in every result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlacementPolicy {
    /// The caller's CPU list.
    Explicit,
    /// The compute order: quiet CPUs first (also used for network threads when no RSS CPU is
    /// known, with a note).
    QuietFirst,
    /// Network threads on the CPUs that service NIC queue interrupts.
    Rss,
    /// Network threads with their peer on this machine: every allowed CPU, in the compute order.
    SameMachine,
}

impl PlacementPolicy {
    /// The name used on the wire and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Explicit => "explicit",
            Self::QuietFirst => "quiet-first",
            Self::Rss => "rss",
            Self::SameMachine => "same-machine",
        }
    }
}

/// The planned CPU of each probe thread, and the housekeeping CPUs left to everything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementPlan {
    /// How the CPUs were chosen.
    pub policy: PlacementPolicy,
    /// `thread_cpus[i]` is the CPU of probe thread i.
    pub thread_cpus: Vec<u32>,
    /// CPUs for the agent's runtime and supervisor threads.
    pub housekeeping_cpus: Vec<u32>,
    /// True when two probe threads share a CPU.
    pub shares_cpus: bool,
    /// One sentence per compromise (a thread off a quiet CPU, on a busy core, sharing), for the
    /// report. Empty when every thread got what its kind wants.
    pub notes: Vec<String>,
}

/// The request cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// No thread to place.
    #[error("a probe needs at least one thread")]
    NoThreads,
    /// More threads than any probe may ask for.
    #[error("{threads} probe threads is too many: ask for at most {max}")]
    TooManyThreads {
        /// The threads asked for.
        threads: usize,
        /// The limit, [`MAX_THREADS`].
        max: usize,
    },
    /// The process may run nowhere (an empty affinity mask).
    #[error("the agent's CPU affinity is empty: it may run on no CPU")]
    NoAllowedCpus,
    /// An explicit CPU is outside what the agent may use.
    #[error(
        "CPU {cpu} is not available to the agent (it may use CPUs {allowed}); pick CPUs from that list"
    )]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: u32,
        /// The allowed CPUs, in list format.
        allowed: String,
    },
}

/// What one CPU is to placement, for `quietbench host` to print.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuRoles {
    /// The agent's own runtime lives here.
    pub housekeeping: bool,
    /// Allowed, not housekeeping, no NIC queue interrupts on it or on an SMT sibling.
    pub quiet: bool,
    /// The NIC queues it services, e.g. `eth0 queue 3`, in layout order.
    pub rss_queues: Vec<String>,
    /// Its SMT siblings, ascending (symmetric closure of the layout's lists).
    pub smt_siblings: Vec<u32>,
    /// Its NUMA node, when known.
    pub numa_node: Option<u32>,
}

/// The roles of every CPU the layout names (allowed or not, ascending). CPUs outside the
/// affinity are never housekeeping or quiet.
pub fn cpu_roles(layout: &MachineLayout) -> BTreeMap<u32, CpuRoles> {
    let view = View::new(layout);
    let mut cpus: BTreeSet<u32> = view.allowed.iter().copied().collect();
    cpus.extend(view.siblings.keys());
    cpus.extend(layout.numa_node.keys());
    cpus.extend(view.rss.keys());
    cpus.extend(layout.interrupt_load.keys());
    cpus.into_iter()
        .map(|cpu| {
            let roles = CpuRoles {
                housekeeping: view.housekeeping == Some(cpu),
                quiet: view.is_quiet(cpu),
                rss_queues: view.rss.get(&cpu).cloned().unwrap_or_default(),
                smt_siblings: view.siblings_of(cpu).collect(),
                numa_node: layout.numa_node.get(&cpu).copied(),
            };
            (cpu, roles)
        })
        .collect()
}

/// Plans where the request's threads run on `layout`. See the module documentation for the
/// order CPUs are taken in; every compromise is a sentence in [`PlacementPlan::notes`].
pub fn plan(
    layout: &MachineLayout,
    request: &PlacementRequest,
) -> Result<PlacementPlan, PlacementError> {
    let threads = request.threads;
    if threads == 0 {
        return Err(PlacementError::NoThreads);
    }
    if threads > MAX_THREADS {
        return Err(PlacementError::TooManyThreads {
            threads,
            max: MAX_THREADS,
        });
    }
    let view = View::new(layout);
    let Some(housekeeping) = view.housekeeping else {
        return Err(PlacementError::NoAllowedCpus);
    };
    if let Some(&cpu) = request.explicit_cpus.iter().find(|&&c| !view.is_allowed(c)) {
        return Err(PlacementError::CpuNotAllowed {
            cpu,
            allowed: join_cpus(&view.allowed),
        });
    }

    let mut notes = Vec::new();
    let (policy, thread_cpus) = if !request.explicit_cpus.is_empty() {
        let cpus = take_in_turn(&request.explicit_cpus, threads);
        explicit_notes(&view, request.kind, &cpus, &mut notes);
        (PlacementPolicy::Explicit, cpus)
    } else {
        match request.kind {
            WorkKind::Compute => (
                PlacementPolicy::QuietFirst,
                compute_plan(&view, threads, &mut notes),
            ),
            WorkKind::Network => network_plan(&view, threads, &mut notes),
            WorkKind::SameMachineNetwork => {
                notes.push(format!(
                    "the peer runs on this machine, so no NIC queue carries the flows: threads \
                     may use every allowed CPU, the housekeeping CPU {housekeeping} last, as \
                     iperf3's threads may"
                ));
                (
                    PlacementPolicy::SameMachine,
                    compute_plan(&view, threads, &mut notes),
                )
            }
        }
    };
    let distinct: BTreeSet<u32> = thread_cpus.iter().copied().collect();
    Ok(PlacementPlan {
        policy,
        shares_cpus: distinct.len() < thread_cpus.len(),
        thread_cpus,
        housekeeping_cpus: vec![housekeeping],
        notes,
    })
}

/// Compute threads on a layout that knows only the allowed CPUs: the agent's interface before
/// it fills a [`MachineLayout`]. Kept so callers can move to [`plan`] one at a time.
pub fn plan_placement(
    threads: usize,
    allowed_cpus: &[u32],
    explicit_cpus: &[u32],
) -> Result<PlacementPlan, PlacementError> {
    plan(
        &MachineLayout::allowed_only(allowed_cpus),
        &PlacementRequest {
            threads,
            kind: WorkKind::Compute,
            explicit_cpus: explicit_cpus.to_vec(),
        },
    )
}

/// How far a CPU is from quiet, for compute threads. The order of the metric sets is the order
/// CPUs are taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    /// No NIC queue interrupts on it or its siblings.
    Quiet,
    /// Not RSS itself, but a sibling is the housekeeping CPU or an RSS CPU.
    BusySibling,
    /// Services NIC queue interrupts.
    Rss,
}

/// Where one probe thread ended up, read back from the kernel after pinning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadPlacement {
    /// Thread index within the trial.
    pub thread_index: u32,
    /// The CPU it was planned to run on.
    pub planned_cpu: u32,
    /// Its affinity mask read back with sched_getaffinity.
    pub affinity_cpus: Vec<u32>,
    /// The CPU it was on when it started (sched_getcpu).
    pub observed_cpu: u32,
    /// Its kernel thread id, for the noise monitors' /proc/self/task/TID reads.
    pub tid: i32,
}

#[cfg(test)]
mod tests;
