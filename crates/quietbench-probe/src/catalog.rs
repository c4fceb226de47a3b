//! The probes an agent can run, their parameters, defaults and limits.
//!
//! Parameters arrive as text (`--param KEY=VALUE` on the CLI, a string map on the wire), so the
//! one place that turns them into typed values also gives the errors a user reads.

use std::collections::BTreeMap;

use std::sync::Arc;

use crate::primes::PrimesWorkload;
use crate::spawn::SpawnWorkload;
use crate::{RateBasis, Variant, Workload};

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
    /// The variants of the probe's samples (their metric names).
    pub variants: &'static [Variant],
    /// How per-variant rates are computed.
    pub basis: RateBasis,
    /// Compute (CPU, memory, disk: quiet CPUs) or network (RSS CPUs) placement.
    pub work: crate::placement::WorkKind,
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

/// An integer parameter: name, default, minimum, maximum, meaning.
pub type IntParam = (&'static str, u64, u64, u64, &'static str);

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

/// cpu.primes parameters: name, default, minimum, maximum, meaning.
const PRIMES_PARAMS: &[(&str, u64, u64, u64, &str)] = &[
    (
        "max_prime",
        10_000,
        3,
        1_000_000,
        "upper bound of the numbers tested, as sysbench's --cpu-max-prime",
    ),
    (
        "threads",
        1,
        1,
        1024,
        "probe threads, each pinned to its own CPU where possible",
    ),
];

/// cpu.spawn parameters.
const SPAWN_PARAMS: &[(&str, u64, u64, u64, &str)] = &[(
    "threads",
    1,
    1,
    1024,
    "probe threads, each spawning children in a loop",
)];

/// Checks a probe name and its text parameters, and applies defaults.
pub fn resolve_probe(
    probe: &str,
    params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    match probe {
        "cpu.primes" => {
            let name = "cpu.primes";
            let values = resolve_integers(name, PRIMES_PARAMS, params)?;
            let max_prime = values["max_prime"];
            Ok(ProbeSpec {
                name,
                threads: values["threads"] as usize,
                resolved_params: as_text(&values),
                variants: &[Variant::EVENTS],
                basis: RateBasis::Elapsed,
                work: crate::placement::WorkKind::Compute,
                factory: Arc::new(move |_| Ok(Box::new(PrimesWorkload { max_prime }))),
            })
        }
        "cpu.spawn" => {
            let name = "cpu.spawn";
            let values = resolve_integers(name, SPAWN_PARAMS, params)?;
            // The child is this very program in its no-op mode: nothing to install, and the
            // same binary on every host.
            let program = std::env::current_exe().map_err(|e| ParamError::BadValue {
                probe: name,
                key: "program".into(),
                value: "current executable".into(),
                why: e.to_string(),
            })?;
            Ok(ProbeSpec {
                name,
                threads: values["threads"] as usize,
                resolved_params: as_text(&values),
                variants: crate::spawn::VARIANTS,
                basis: RateBasis::OwnTime,
                work: crate::placement::WorkKind::Compute,
                factory: Arc::new(move |_| Ok(Box::new(SpawnWorkload::new(&program)?))),
            })
        }
        "mem.latency" => crate::mem::resolve("mem.latency", params),
        "mem.bandwidth" => crate::mem::resolve("mem.bandwidth", params),
        "net.throughput" => crate::net::resolve("net.throughput", params),
        "net.rr" => crate::net::resolve("net.rr", params),
        "disk.seq" => crate::disk::resolve("disk.seq", params),
        "disk.rand" => crate::disk::resolve("disk.rand", params),
        "disk.scan" => crate::scan::resolve("disk.scan", params),
        "exec" => crate::exec::resolve(params),
        other => Err(ParamError::UnknownProbe(other.to_string())),
    }
}

/// Checks integer parameters against their table and applies defaults. Other modules' probes
/// use it for their integer parameters.
pub fn resolve_integers(
    probe: &'static str,
    table: &[(&'static str, u64, u64, u64, &str)],
    params: &BTreeMap<String, String>,
) -> Result<BTreeMap<&'static str, u64>, ParamError> {
    if let Some(key) = params.keys().find(|k| !table.iter().any(|(n, ..)| n == k)) {
        return Err(ParamError::UnknownParam {
            probe,
            key: key.clone(),
            known: table
                .iter()
                .map(|(n, ..)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut values = BTreeMap::new();
    for &(name, default, min, max, _) in table {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_params as params;

    #[test]
    fn applies_sysbench_defaults() {
        let spec = resolve_probe("cpu.primes", &BTreeMap::new()).unwrap();
        assert_eq!(spec.threads, 1);
        assert_eq!(spec.resolved_params["max_prime"], "10000");
        assert_eq!(spec.resolved_params["threads"], "1");
    }

    #[test]
    fn takes_valid_values() {
        let spec = resolve_probe(
            "cpu.primes",
            &params(&[("max_prime", "20_000"), ("threads", "2")]),
        )
        .unwrap();
        assert_eq!(spec.threads, 2);
        assert_eq!(spec.resolved_params["max_prime"], "20000");
    }

    #[test]
    fn names_what_is_wrong() {
        let err = resolve_probe("cpu.prime", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("cpu.primes"), "{err}");
        let err = resolve_probe("cpu.primes", &params(&[("maxprime", "5")])).unwrap_err();
        assert!(err.to_string().contains("max_prime, threads"), "{err}");
        let err = resolve_probe("cpu.primes", &params(&[("threads", "0")])).unwrap_err();
        assert!(err.to_string().contains("from 1 to 1024"), "{err}");
        let err = resolve_probe("cpu.primes", &params(&[("max_prime", "-4")])).unwrap_err();
        assert!(err.to_string().contains("whole number"), "{err}");
    }
}
