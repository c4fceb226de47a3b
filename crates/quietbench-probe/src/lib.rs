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
pub mod spawn;
mod worker;

pub use catalog::{ParamError, ProbeSpec, resolve_probe};
pub use placement::{PlacementError, PlacementPlan, plan_placement};
pub use runner::{
    IntervalReport, RunError, ThreadPlacement, TrialEvent, TrialOutcome, TrialSettings,
    VariantReport, run_trial,
};

/// A unit of probe work whose duration is one latency sample: one `event` is one sysbench
/// "event" for cpu.primes, one fork+exec+wait for cpu.spawn. The measuring harness around it
/// never allocates or locks; what the workload itself does is what it measures.
pub trait Workload: Send + 'static {
    /// The variants this workload's events fall into, each reported as its own rate and
    /// latency metric. Most workloads have one; cpu.spawn alternates ASLR on and off.
    fn variants(&self) -> &'static [Variant] {
        &[Variant::EVENTS]
    }

    /// Runs one event and says which variant it was (an index into [`Workload::variants`]),
    /// or `None` when the event failed: the trial then stops and [`Workload::take_error`] says
    /// why.
    fn event(&mut self) -> Option<usize>;

    /// Why the last event failed.
    fn take_error(&mut self) -> Option<String> {
        None
    }
}

/// The metric names of one variant of a workload's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// The rate metric, e.g. "events_per_sec".
    pub rate_metric: &'static str,
    /// The rate's unit, e.g. "events/s".
    pub rate_unit: &'static str,
    /// The latency metric, e.g. "event_latency".
    pub latency_metric: &'static str,
}

impl Variant {
    /// The single variant of most probes.
    pub const EVENTS: Variant = Variant {
        rate_metric: "events_per_sec",
        rate_unit: "events/s",
        latency_metric: "event_latency",
    };
}
