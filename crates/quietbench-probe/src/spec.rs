//! What a resolved probe request is, and the parameter vocabulary every probe module shares:
//! [`ProbeSpec`], [`IntParam`] and [`ParamError`].
//!
//! A leaf: it depends on no other module of the crate, only on the crate root's workload
//! vocabulary ([`Workload`], [`MetricSet`], [`RateBasis`]). The probe modules (mem, net, disk,
//! exec) import their parameter types from here, and the catalog imports the probe modules to
//! dispatch; before, both directions went through the catalog, a cycle between it and every
//! probe module.

use std::collections::BTreeMap;
use std::sync::Arc;

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
