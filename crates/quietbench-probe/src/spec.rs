//! What a resolved probe request is, and the parameter vocabulary every probe module shares:
//! [`ProbeSpec`], [`IntParam`] and [`ParamError`].
//!
//! A leaf: it depends on no other module of the crate, only on the crate root's workload
//! vocabulary ([`Workload`], [`MetricSet`], [`RateBasis`]). The probe modules (mem, net, disk,
//! exec) import their parameter types from here, and the catalog imports the probe modules to
//! dispatch; before, both directions went through the catalog, a cycle between it and every
//! probe module.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;

use crate::{MetricSet, RateBasis, Workload};

/// What the probe threads do, which decides where they belong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WorkKind {
    /// CPU, memory and disk probes: as far from interrupts as possible.
    Compute,
    /// Network probes: on the CPUs that service the NIC's queues.
    Network,
    /// Network probes whose peer runs on this machine: every allowed CPU, in the compute order
    /// (the housekeeping CPU last, but used), since no NIC queue carries the flows.
    SameMachineNetwork,
}

/// Names of every probe, for help and error messages.
pub const PROBE_NAMES: &[&str] = &[
    "cpu.primes",
    "cpu.spawn",
    "mem.latency",
    "mem.bandwidth",
    "net.throughput",
    "net.rr",
    "disk.seq",
    "disk.rand",
    "disk.scan",
    "exec",
    "http",
    "tcp",
];

/// Makes one thread's workload; given the thread index.
pub type WorkloadFactory =
    Arc<dyn Fn(usize) -> Result<Box<dyn Workload>, String> + Send + Sync + 'static>;

/// A probe request with its parameters checked and defaults applied.
#[derive(Clone)]
pub struct ProbeSpec {
    /// Probe name, e.g. `cpu.primes`.
    pub name: &'static str,
    /// Number of probe threads.
    pub threads: usize,
    /// Every parameter after defaults, as text, for the report.
    pub resolved_params: BTreeMap<String, String>,
    /// The metric sets of the probe's samples (their metric names).
    pub metric_sets: &'static [MetricSet],
    /// How per-metric set rates are computed.
    pub basis: RateBasis,
    /// Compute (CPU, memory, disk: quiet CPUs) or network (RSS CPUs) placement.
    pub work: WorkKind,
    /// Makes each thread's workload.
    pub factory: WorkloadFactory,
}

impl std::fmt::Debug for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSpec")
            .field("name", &self.name)
            .field("threads", &self.threads)
            .field("resolved_params", &self.resolved_params)
            .finish_non_exhaustive()
    }
}

impl ProbeSpec {
    /// A fresh workload for probe thread `thread`.
    pub fn workload(&self, thread: usize) -> Result<Box<dyn Workload>, String> {
        (self.factory)(thread)
    }

    /// This spec, with every workload it makes bounded by `bounds`: a workload that waits on
    /// something outside the process (exec's commands) stops waiting when the trial is
    /// cancelled or runs past its deadline, instead of when the thing it waits for ends.
    ///
    /// The bounds reach the workload through a thread-local set only while the factory runs,
    /// on the thread that calls it (the runner builds each workload on its own probe thread).
    /// The obvious alternatives would change code every probe shares: a field here (every
    /// probe module builds a `ProbeSpec` literal), or an argument of the factory or of
    /// [`Workload::step`] (the runner and every workload). Workloads that never wait on
    /// anything outside the process ignore the bounds, as they ignore the thread-local.
    pub fn with_bounds(mut self, bounds: TrialBounds) -> Self {
        let make = Arc::clone(&self.factory);
        self.factory = Arc::new(move |thread| {
            let previous = BOUNDS.with(|b| b.replace(Some(bounds.clone())));
            let made = make(thread);
            BOUNDS.with(|b| b.replace(previous));
            made
        });
        self
    }
}

thread_local! {
    /// The bounds of the trial whose workload this thread is making (see
    /// [`ProbeSpec::with_bounds`]); None outside a factory call, and for unbounded specs.
    static BOUNDS: RefCell<Option<TrialBounds>> = const { RefCell::new(None) };
}

/// The bounds of the trial whose workload is being made on this thread, if it has any: for a
/// factory to keep in the workload it makes.
pub(crate) fn bounds_in_force() -> Option<TrialBounds> {
    BOUNDS.with(|b| b.borrow().clone())
}

/// The shortest grace a trial's last command gets past the trial's duration.
pub const MIN_GRACE: Duration = Duration::from_secs(5);

/// How long a trial may run and the flag that cancels it, for workloads that wait on something
/// outside the process.
#[derive(Debug, Clone)]
pub struct TrialBounds {
    /// Set when the trial is cancelled: the Cancel RPC, the caller hung up, the agent stops.
    pub cancel: Arc<AtomicBool>,
    /// The trial's measuring time: no new work starts after it.
    pub duration: Duration,
    /// How long work started before the end of `duration` may still run after it.
    pub grace: Duration,
}

impl TrialBounds {
    /// The bounds of a trial of `duration` on an agent whose longest trial is `max_trial`:
    /// the grace is the trial's own duration, at least [`MIN_GRACE`], and never carries the
    /// trial past `max_trial`. A trial's duration is what its caller expects one piece of work
    /// to fit in many times over (a trial wants many samples), so a command still running a
    /// whole duration after the trial's end is stuck, not slow; a fixed grace instead would
    /// kill a long trial's slow-but-honest last command. A trial as long as `max_trial` gets
    /// no grace at all: `--max-trial-secs` is the agent owner's ceiling, above any caller's.
    pub fn new(cancel: Arc<AtomicBool>, duration: Duration, max_trial: Duration) -> Self {
        let grace = duration
            .max(MIN_GRACE)
            .min(max_trial.saturating_sub(duration));
        Self {
            cancel,
            duration,
            grace,
        }
    }

    /// The whole time the trial may take: its duration and the grace.
    pub fn limit(&self) -> Duration {
        self.duration.saturating_add(self.grace)
    }
}

/// An integer parameter of a probe, with its default and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntParam {
    /// The parameter's key, e.g. `max_prime`.
    pub name: &'static str,
    /// Its value when not given.
    pub default: u64,
    /// The smallest value accepted.
    pub min: u64,
    /// The largest value accepted.
    pub max: u64,
    /// What it means, for help.
    pub meaning: &'static str,
}

/// Integer parameters after defaults, as text for the report.
pub fn as_text(values: &BTreeMap<&'static str, u64>) -> BTreeMap<String, String> {
    values
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A probe name or parameter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// No such probe.
    #[error("unknown probe '{0}'; available probes: {list}", list = PROBE_NAMES.join(", "))]
    UnknownProbe(String),
    /// No such parameter for this probe.
    #[error("probe {probe} has no parameter '{key}'; its parameters are: {known}")]
    UnknownParam {
        /// The probe.
        probe: &'static str,
        /// The parameter given.
        key: String,
        /// The parameters it has.
        known: String,
    },
    /// Each value is within its range, but together they ask for more than this host can give
    /// (see [`admit`]).
    #[error("{probe}: {why}")]
    TooLarge {
        /// The probe.
        probe: &'static str,
        /// What the request needs, what the host has, and the rule.
        why: String,
    },
    /// The value does not parse or is out of range.
    #[error("{probe} parameter {key}={value} is invalid: {why}")]
    BadValue {
        /// The probe.
        probe: &'static str,
        /// The parameter.
        key: String,
        /// The value given.
        value: String,
        /// What is allowed.
        why: String,
    },
}

/// Checks integer parameters against their table and applies defaults. Other modules' probes
/// use it for their integer parameters.
pub fn resolve_integers(
    probe: &'static str,
    table: &[IntParam],
    params: &BTreeMap<String, String>,
) -> Result<BTreeMap<&'static str, u64>, ParamError> {
    if let Some(key) = params.keys().find(|k| !table.iter().any(|p| *k == p.name)) {
        return Err(ParamError::UnknownParam {
            probe,
            key: key.clone(),
            known: table.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        });
    }
    let mut values = BTreeMap::new();
    for &IntParam {
        name,
        default,
        min,
        max,
        ..
    } in table
    {
        let value = match params.get(name) {
            None => default,
            Some(text) => {
                let bad = |why: String| ParamError::BadValue {
                    probe,
                    key: name.to_string(),
                    value: text.clone(),
                    why,
                };
                let v: u64 = text
                    .trim()
                    .replace('_', "")
                    .parse()
                    .map_err(|_| bad(format!("expected a whole number from {min} to {max}")))?;
                if !(min..=max).contains(&v) {
                    return Err(bad(format!("must be from {min} to {max}")));
                }
                v
            }
        };
        values.insert(name, value);
    }
    Ok(values)
}

/// Probe threads allowed per CPU of the host (see [`admit`]).
pub const THREADS_PER_CPU: usize = 4;

/// What a request would take from the host, as [`admit`] weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// The probe.
    pub probe: &'static str,
    /// Probe threads.
    pub threads: usize,
    /// Bytes of the buffers each thread's workload allocates (arrays, I/O buffers); 0 for none.
    pub buffer_bytes_per_thread: u64,
    /// What those buffers are, in the request's own terms, e.g. "3 arrays of size_mib=2048";
    /// empty for none.
    pub buffers: String,
    /// Bytes the harness keeps for each thread whatever the probe: its histograms.
    pub harness_bytes_per_thread: u64,
}

impl Demand {
    /// Bytes one thread costs.
    pub fn bytes_per_thread(&self) -> u64 {
        self.buffer_bytes_per_thread
            .saturating_add(self.harness_bytes_per_thread)
    }

    /// Bytes the whole request costs.
    pub fn bytes(&self) -> u64 {
        self.bytes_per_thread().saturating_mul(self.threads as u64)
    }
}

/// What this host can give a trial, read when a request is resolved. None where it could not
/// be read: that rule is then not applied (refusing every request would make the agent
/// useless on a host whose /proc or /sys is hidden).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCapacity {
    /// CPUs online.
    pub cpus: Option<usize>,
    /// `MemAvailable` of /proc/meminfo, bytes.
    pub mem_available_bytes: Option<u64>,
}

/// Admits a request by what it asks of the host as a whole, not parameter by parameter: each
/// value can lie within its range while together they ask for terabytes.
///
/// - Memory: every thread's buffers and histograms together may use at most half of what the
///   kernel says is available. Past it the probe measures reclaim and swap instead of memory,
///   or the OOM killer takes the agent; the other half is left for the page cache and the
///   rest of the host, which a benchmark must not evict either.
/// - Threads: at most [`THREADS_PER_CPU`] per CPU. A probe thread that has a CPU measures;
///   the rest only queue for one (the same work split more finely), and each still costs the
///   agent its histograms and the supervisor time merging them: 1024 threads on 2 CPUs held
///   an agent for 45 s and 2 GB. Four per CPU still lets probes that mostly wait (disk queue
///   depth spread over threads, request-response flows) oversubscribe.
pub fn admit(demand: &Demand, host: &HostCapacity) -> Result<(), ParamError> {
    let refuse = |why: String| ParamError::TooLarge {
        probe: demand.probe,
        why,
    };
    let threads = demand.threads;
    if let Some(available) = host.mem_available_bytes {
        let needed = demand.bytes();
        if needed > available / 2 {
            let what = if demand.buffers.is_empty() {
                format!("threads={threads}")
            } else {
                format!("threads={threads} x {}", demand.buffers)
            };
            return Err(refuse(format!(
                "{what} needs {} ({} per thread, histograms included); this host has {} \
                 available (MemAvailable); at most half of it may be used: lower threads{}",
                binary_size(needed),
                binary_size(demand.bytes_per_thread()),
                binary_size(available),
                if demand.buffers.is_empty() {
                    ""
                } else {
                    " or the buffers' size"
                }
            )));
        }
    }
    if let Some(cpus) = host.cpus {
        let most = cpus.saturating_mul(THREADS_PER_CPU).max(1);
        if threads > most {
            return Err(refuse(format!(
                "threads={threads} is more than {THREADS_PER_CPU} per CPU of this host's {cpus} \
                 CPUs (at most {most}): threads beyond that only queue for a CPU, and each costs \
                 the agent {} of histograms; lower threads",
                binary_size(demand.harness_bytes_per_thread)
            )));
        }
    }
    Ok(())
}

/// Bytes in binary units with one decimal where it matters: "6 TiB", "23.1 GiB", "512 B".
pub fn binary_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0} {}", UNITS[unit])
    } else {
        format!("{rounded:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn bandwidth(threads: usize, size_mib: u64) -> Demand {
        Demand {
            probe: "mem.bandwidth",
            threads,
            buffer_bytes_per_thread: 3 * size_mib * MIB,
            buffers: format!("3 arrays of size_mib={size_mib}"),
            harness_bytes_per_thread: 3 * MIB,
        }
    }

    fn host(cpus: usize, available: u64) -> HostCapacity {
        HostCapacity {
            cpus: Some(cpus),
            mem_available_bytes: Some(available),
        }
    }

    #[test]
    fn the_red_teams_bandwidth_request_is_refused_with_the_numbers() {
        // 23.1 GiB available, as on the development VM, and enough CPUs that only memory
        // refuses it.
        let available = (23.1 * GIB as f64) as u64;
        let err = admit(&bandwidth(1024, 2048), &host(1024, available))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "mem.bandwidth: threads=1024 x 3 arrays of size_mib=2048 needs 6 TiB (6 GiB per \
             thread, histograms included); this host has 23.1 GiB available (MemAvailable); \
             at most half of it may be used: lower threads or the buffers' size"
        );
    }

    #[test]
    fn memory_up_to_half_of_what_is_available_is_admitted() {
        // One thread of 3 x 256 MiB arrays and 3 MiB of histograms: 771 MiB.
        let one = bandwidth(1, 256);
        assert_eq!(one.bytes(), 771 * MIB);
        assert!(admit(&one, &host(2, 2 * 771 * MIB)).is_ok());
        assert!(admit(&one, &host(2, 2 * 771 * MIB - 2)).is_err());
        // Unknown memory: only the thread rule applies.
        let unknown = HostCapacity {
            cpus: Some(2),
            mem_available_bytes: None,
        };
        assert!(admit(&bandwidth(8, 2048), &unknown).is_ok());
        // Sizes that overflow u64 saturate and are refused, not wrapped into small numbers.
        let huge = Demand {
            buffer_bytes_per_thread: u64::MAX / 2,
            ..bandwidth(1024, 1)
        };
        assert!(admit(&huge, &host(1024, u64::MAX)).is_err());
    }

    #[test]
    fn threads_are_bounded_by_four_per_cpu() {
        let spawn = |threads| Demand {
            probe: "cpu.spawn",
            threads,
            buffer_bytes_per_thread: 0,
            buffers: String::new(),
            harness_bytes_per_thread: 2 * MIB,
        };
        assert!(admit(&spawn(8), &host(2, 64 * GIB)).is_ok());
        let err = admit(&spawn(1024), &host(2, 64 * GIB))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "cpu.spawn: threads=1024 is more than 4 per CPU of this host's 2 CPUs (at most 8): \
             threads beyond that only queue for a CPU, and each costs the agent 2 MiB of \
             histograms; lower threads"
        );
        assert!(admit(&spawn(9), &host(2, 64 * GIB)).is_err());
        let unknown = HostCapacity {
            cpus: None,
            mem_available_bytes: Some(64 * GIB),
        };
        assert!(admit(&spawn(1024), &unknown).is_ok());
    }

    #[test]
    fn histograms_alone_can_exceed_the_memory() {
        let err = admit(
            &Demand {
                probe: "cpu.primes",
                threads: 8,
                buffer_bytes_per_thread: 0,
                buffers: String::new(),
                harness_bytes_per_thread: 2 * MIB,
            },
            &host(2, 16 * MIB),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("cpu.primes: threads=8 needs 16 MiB (2 MiB per thread"),
            "{err}"
        );
        assert!(err.ends_with("lower threads"), "{err}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(binary_size(512), "512 B");
        assert_eq!(binary_size(6 << 40), "6 TiB");
        assert_eq!(binary_size((23.1 * GIB as f64) as u64), "23.1 GiB");
        assert_eq!(binary_size(1536 * MIB), "1.5 GiB");
        assert_eq!(binary_size(u64::MAX), "16384 PiB");
    }

    #[test]
    fn the_grace_is_the_duration_at_least_five_seconds_within_the_agents_ceiling() {
        let flag = Arc::new(AtomicBool::new(false));
        let hour = Duration::from_secs(3600);
        let bounds = |d: f64, max: Duration| {
            TrialBounds::new(Arc::clone(&flag), Duration::from_secs_f64(d), max).grace
        };
        assert_eq!(bounds(0.5, hour), MIN_GRACE);
        assert_eq!(bounds(60.0, hour), Duration::from_secs(60));
        // Never past --max-trial-secs: 2 s allowed, 0.5 s asked: 1.5 s of grace.
        assert_eq!(
            bounds(0.5, Duration::from_secs(2)),
            Duration::from_millis(1500)
        );
        assert_eq!(bounds(3600.0, hour), Duration::ZERO);
        let b = TrialBounds::new(Arc::clone(&flag), Duration::from_millis(500), hour);
        assert_eq!(b.limit(), Duration::from_millis(5500));
    }

    #[test]
    fn bounds_reach_the_factory_only_of_a_bounded_spec_and_only_while_it_runs() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let spec = ProbeSpec {
            name: "cpu.primes",
            threads: 1,
            resolved_params: BTreeMap::new(),
            metric_sets: &[MetricSet::EVENTS],
            basis: RateBasis::Elapsed,
            work: WorkKind::Compute,
            factory: Arc::new(move |_| {
                record
                    .lock()
                    .unwrap()
                    .push(bounds_in_force().map(|b| b.duration));
                Ok(Box::new(crate::primes::PrimesWorkload { max_prime: 10 }))
            }),
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let bounded = spec.clone().with_bounds(TrialBounds::new(
            Arc::clone(&cancel),
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
        spec.workload(0).unwrap();
        bounded.workload(0).unwrap();
        // Made on another thread, as the runner's probe threads do.
        std::thread::spawn(move || bounded.workload(1).map(|_| ()))
            .join()
            .unwrap()
            .unwrap();
        assert!(bounds_in_force().is_none());
        assert_eq!(
            *seen.lock().unwrap(),
            [
                None,
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(1))
            ]
        );
        assert!(!cancel.load(Ordering::Relaxed));
    }
}
