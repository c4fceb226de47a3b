//! The probes an agent can run, their parameters, defaults and limits.
//!
//! Parameters arrive as text (`--param KEY=VALUE` on the CLI, a string map on the wire), so the
//! one place that turns them into typed values also gives the errors a user reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::primes::PrimesWorkload;
use crate::spawn::SpawnWorkload;
use crate::spec::WorkKind;
use crate::{MetricSet, RateBasis};

// The parameter vocabulary lives in the leaf module `spec`; these keep the old paths working.
pub use crate::spec::{
    IntParam, PROBE_NAMES, ParamError, ProbeSpec, WorkloadFactory, as_text, resolve_integers,
};

/// cpu.primes parameters.
const PRIMES_PARAMS: &[IntParam] = &[
    IntParam {
        name: "max_prime",
        default: 10_000,
        min: 3,
        max: 1_000_000,
        meaning: "upper bound of the numbers tested, as sysbench's --cpu-max-prime",
    },
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: 1024,
        meaning: "probe threads, each pinned to its own CPU where possible",
    },
];

/// cpu.spawn parameters.
const SPAWN_PARAMS: &[IntParam] = &[IntParam {
    name: "threads",
    default: 1,
    min: 1,
    max: 1024,
    meaning: "probe threads, each spawning children in a loop",
}];

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
                metric_sets: &[MetricSet::EVENTS],
                basis: RateBasis::Elapsed,
                work: WorkKind::Compute,
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
                metric_sets: crate::spawn::METRIC_SETS,
                basis: RateBasis::OwnTime,
                work: WorkKind::Compute,
                factory: Arc::new(move |_| Ok(Box::new(SpawnWorkload::new(&program)?))),
            })
        }
        "mem.latency" => crate::mem::resolve("mem.latency", params),
        "mem.bandwidth" => crate::mem::resolve("mem.bandwidth", params),
        "net.throughput" => crate::net::resolve("net.throughput", params),
        "net.rr" => crate::net::resolve("net.rr", params),
        "disk.seq" => crate::disk::resolve("disk.seq", params),
        "disk.rand" => crate::disk::resolve("disk.rand", params),
        "disk.scan" => crate::disk::scan::resolve("disk.scan", params),
        "exec" => crate::exec::resolve(params),
        other => Err(ParamError::UnknownProbe(other.to_string())),
    }
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
