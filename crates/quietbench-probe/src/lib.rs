//! quietbench's probes: native workloads that measure the machine, run on plain OS threads
//! pinned to chosen CPUs, each recording into its own HDR histogram.
//!
//! Nothing here knows about gRPC or async: the agent calls [`run_trial`] on a thread of its own
//! and translates the [`TrialEvent`]s it gets. That keeps the measured path free of the
//! runtime: a probe thread's loop only runs the workload, reads the clock, and records into a
//! histogram it owns; it never allocates, locks, logs or awaits per sample (see `worker.rs`).

pub mod affinity;
pub mod catalog;
pub mod context;
pub mod disk;
pub mod exec;
pub mod histogram;
pub mod http;
pub mod mem;
pub mod net;
pub mod perf_counter;
pub mod placement;
pub mod primes;
mod rng;
mod runner;
/// `disk.scan` lives with the other disk probes; this keeps its old path.
pub use disk::scan;
pub mod spawn;
pub mod spec;
pub mod tcp;
#[cfg(test)]
mod vocab_tests;
mod worker;

pub use catalog::{resolve_probe, resolve_probe_in};
pub use context::ProbeContext;
pub use placement::{PlacementError, PlacementPlan, ThreadPlacement, plan_placement};
pub use runner::{
    IntervalReport, MetricSetReport, RunError, TrialEvent, TrialOutcome, TrialSettings, run_trial,
};
pub use spec::{IntParam, ParamError, ProbeSpec};

use quietbench_vocab::metrics;

/// A probe's work, driven by a probe thread's measuring loop. Each call of [`Workload::step`]
/// does one unit of work and says what it measured: either one event the harness times around
/// the call (cpu.primes, cpu.spawn), or samples the workload timed itself and put into
/// [`Samples`] (an I/O completion's latency at queue depth 16, a round trip). The harness never
/// allocates or locks; what the workload itself does is what it measures, and a workload must
/// not allocate per step either unless allocation is what it measures.
pub trait Workload: Send + 'static {
    /// The metric sets of this workload's samples, each reported as its own metrics. Most have
    /// one; cpu.spawn alternates ASLR on and off; a mixed disk probe has reads and writes.
    /// The probe's [`ProbeSpec::metric_sets`] is what the harness sizes and merges by; this must
    /// name the same metric sets (tests check it).
    fn metric_sets(&self) -> &'static [MetricSet] {
        &[MetricSet::EVENTS]
    }

    /// Runs one unit of work.
    fn step(&mut self, samples: &mut Samples<'_>) -> Step;

    /// Why the last step failed.
    fn take_error(&mut self) -> Option<String> {
        None
    }

    /// Called once after the measuring loop, off the measured path: wait for work in flight,
    /// close what was opened. Samples recorded here are not counted.
    fn finish(&mut self) {}

    /// Whole-trial figures the workload kept itself (TCP retransmits, the cold fraction of a
    /// scan), read once after [`Workload::finish`]. Merged across threads as each says.
    fn counters(&mut self) -> Vec<Counter> {
        Vec::new()
    }
}

/// A whole-trial figure kept by a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    /// Metric name, e.g. "tcp_retransmits".
    pub name: &'static str,
    /// Unit, e.g. "segments", "us", "fraction".
    pub unit: &'static str,
    /// The value.
    pub value: f64,
    /// How threads' values combine.
    pub merge: Merge,
}

/// How a counter's per-thread values combine into the trial's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Added (retransmits, bytes).
    Sum,
    /// Averaged over the threads that reported it (RTT).
    Mean,
    /// The largest (worst) value.
    Max,
}

/// What one [`Workload::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// One event of this metric set, timed by the harness around the call, moving `bytes`.
    Timed {
        /// Index into [`Workload::metric_sets`].
        metric_set: usize,
        /// Bytes moved (0 where the probe has no throughput).
        bytes: u64,
    },
    /// The workload recorded its own samples (possibly none) into [`Samples`].
    Recorded,
    /// The workload has done all its work (a scan reached the end): the thread stops
    /// measuring, normally, before the trial's duration is up.
    Finished,
    /// The step failed: the trial stops and [`Workload::take_error`] says why.
    Failed,
}

/// How a metric set's rate is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateBasis {
    /// Events over the thread's measured time: what sysbench, fio and iperf3 report. With
    /// several metric sets running concurrently (reads and writes in flight together), each
    /// metric set's events over the same elapsed time.
    Elapsed,
    /// Events over the time spent in that metric set's own events: for metric sets that alternate
    /// one after another (cpu.spawn's ASLR on and off), so each rate is as if it ran alone.
    OwnTime,
}

/// Where a workload records the samples it timed itself. Fixed-size histograms: recording
/// never allocates.
pub struct Samples<'a> {
    rec: &'a mut worker::Recording,
}

impl Samples<'_> {
    /// Records one sample of `metric_set`: its latency and the bytes it moved.
    #[inline]
    pub fn record(&mut self, metric_set: usize, latency_ns: u64, bytes: u64) {
        self.rec.record(metric_set, latency_ns, bytes);
    }
}

/// The metric names of one metric set of a workload's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricSet {
    /// The rate metric, e.g. "events_per_sec"; empty for a metric set whose samples are not
    /// events with a rate (exec's per-pair B/A ratios).
    pub rate_metric: &'static str,
    /// The rate's unit, e.g. "events/s".
    pub rate_unit: &'static str,
    /// The latency metric, e.g. "event_latency".
    pub latency_metric: &'static str,
    /// The unit of the latency metric's samples: "ns" for times, "ppm" for exec's B/A ratios.
    pub latency_unit: &'static str,
    /// The throughput metric, for metric sets that move bytes.
    pub throughput: Option<Throughput>,
}

/// A throughput metric: bytes per second in a unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    /// e.g. "read_mb_per_sec", "gbit_per_sec".
    pub metric: &'static str,
    /// e.g. "MB/s", "Gbit/s".
    pub unit: &'static str,
    /// Bytes per unit: 1e6 for MB/s, 1.25e8 for Gbit/s.
    pub bytes_per_unit: f64,
}

impl Eq for Throughput {}

impl MetricSet {
    /// The single metric set of most probes.
    pub const EVENTS: MetricSet = MetricSet {
        rate_metric: metrics::EVENTS_PER_SEC,
        rate_unit: "events/s",
        latency_metric: metrics::EVENT_LATENCY,
        latency_unit: "ns",
        throughput: None,
    };
}

/// Probe parameters from pairs, for the tests.
#[cfg(test)]
pub(crate) fn test_params(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
