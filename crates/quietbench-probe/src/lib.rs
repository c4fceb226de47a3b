//! quietbench's probes: native workloads that measure the machine, run on plain OS threads
//! pinned to chosen CPUs, each recording into its own HDR histogram.
//!
//! Nothing here knows about gRPC or async: the agent calls [`run_trial`] on a thread of its own
//! and translates the [`TrialEvent`]s it gets. That keeps the measured path free of the
//! runtime: a probe thread's loop only runs the workload, reads the clock, and records into a
//! histogram it owns; it never allocates, locks, logs or awaits per sample (see `worker.rs`).

pub mod affinity;
pub mod catalog;
pub mod histogram;
pub mod placement;
pub mod primes;
mod runner;
mod worker;

pub use catalog::{ParamError, ProbeSpec, resolve_probe};
pub use placement::{PlacementError, PlacementPlan, plan_placement};
pub use runner::{
    IntervalReport, RunError, ThreadPlacement, TrialEvent, TrialOutcome, TrialSettings, run_trial,
};

/// A unit of probe work whose duration is one latency sample: one `event` is one sysbench
/// "event" for cpu.primes. Implementations must not allocate or lock inside `event`.
pub trait Workload: Send + 'static {
    /// Runs one event.
    fn event(&mut self);
}
