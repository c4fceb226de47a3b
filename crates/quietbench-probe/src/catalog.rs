//! The probes an agent can run, their parameters, defaults and limits.
//!
//! Parameters arrive as text (`--param KEY=VALUE` on the CLI, a string map on the wire), so the
//! one place that turns them into typed values also gives the errors a user reads.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use quietbench_host::HostRoot;

use crate::primes::PrimesWorkload;
use crate::spawn::SpawnWorkload;
use crate::spec::{Demand, HostCapacity, WorkKind, admit};
use crate::worker::RECORDINGS_PER_THREAD;
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

/// Checks a probe name and its text parameters, and applies defaults, with no agent context
/// (a pre-warm then has no state directory and is refused).
pub fn resolve_probe(
    probe: &str,
    params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    resolve_probe_in(probe, params, &crate::ProbeContext::default())
}

/// Checks a probe name and its text parameters, and applies defaults, for the agent that
/// `context` describes; then admits the request as a whole against what this host has
/// ([`admit`]).
pub fn resolve_probe_in(
    probe: &str,
    params: &BTreeMap<String, String>,
    context: &crate::ProbeContext,
) -> Result<ProbeSpec, ParamError> {
    let spec = resolve_each_param(probe, params, context)?;
    admit(&demand(&spec), &host_capacity(&HostRoot::live()))?;
    Ok(spec)
}

/// What the request would take from the host: its threads, the buffers each thread's workload
/// allocates (read back from the resolved parameters), and the harness's histograms.
pub fn demand(spec: &ProbeSpec) -> Demand {
    let int = |key: &str| {
        spec.resolved_params
            .get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (buffer_bytes_per_thread, buffers) = match spec.name {
        "mem.latency" | "mem.bandwidth" => {
            crate::mem::buffers_per_thread(spec.name, &spec.resolved_params)
        }
        // One buffer per request in flight.
        "disk.seq" | "disk.rand" => (
            int("qd")
                .saturating_mul(int("block_kib"))
                .saturating_mul(1024),
            format!("qd={} x block_kib={}", int("qd"), int("block_kib")),
        ),
        "disk.scan" => (
            int("qd")
                .saturating_mul(int("read_kib"))
                .saturating_mul(1024),
            format!("qd={} x read_kib={}", int("qd"), int("read_kib")),
        ),
        // A write and a read buffer.
        "net.throughput" => (
            int("write_kib").saturating_mul(2048),
            format!("2 buffers of write_kib={}", int("write_kib")),
        ),
        "http" | "tcp" => crate::http::buffers_per_thread(&spec.resolved_params),
        // The socket buffers the kernel keeps are not the agent's to count; cpu.*, net.rr's
        // few bytes and exec allocate nothing per thread that matters.
        _ => (0, String::new()),
    };
    Demand {
        probe: spec.name,
        threads: spec.threads,
        buffer_bytes_per_thread,
        buffers,
        harness_bytes_per_thread: harness_bytes_per_thread(spec.metric_sets.len()),
    }
}

/// What the harness keeps per probe thread: [`RECORDINGS_PER_THREAD`] recordings of one
/// histogram per metric set (270 KiB each: nanoseconds up to an hour at three digits).
fn harness_bytes_per_thread(metric_sets: usize) -> u64 {
    static HISTOGRAM_BYTES: OnceLock<u64> = OnceLock::new();
    let histogram = *HISTOGRAM_BYTES.get_or_init(|| {
        let counts = crate::histogram::new_latency_histogram().distinct_values() as u64;
        counts * std::mem::size_of::<u64>() as u64
    });
    (RECORDINGS_PER_THREAD * metric_sets.max(1)) as u64 * histogram
}

/// What this host can give a trial, read under `root`: its online CPUs and `MemAvailable`.
///
/// The host's CPUs rather than the agent's affinity: by the time a request is resolved, the
/// agent's own threads are pinned to its housekeeping CPU, so an affinity read here would be
/// that one CPU. The CPUs the agent was started with would be closer still; the agent knows
/// them, and can pass them in once the probe context carries them.
pub fn host_capacity(root: &HostRoot) -> HostCapacity {
    let cpus = root
        .read("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| quietbench_host::parse_cpu_list(&list).ok())
        .map(|cpus| cpus.len())
        .filter(|&n| n > 0);
    HostCapacity {
        cpus,
        mem_available_bytes: crate::mem::mem_available(root),
    }
}

/// Resolves each parameter of `probe` by its own range and rules; the request as a whole is
/// admitted after ([`resolve_probe_in`]).
fn resolve_each_param(
    probe: &str,
    params: &BTreeMap<String, String>,
    context: &crate::ProbeContext,
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
        "disk.scan" => crate::disk::scan::resolve("disk.scan", params, context),
        "exec" => crate::exec::resolve(params),
        "http" => crate::http::resolve(params),
        "tcp" => crate::tcp::resolve(params),
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
    fn a_request_is_admitted_by_what_all_its_threads_take_together() {
        // Each value within its range: resolved one by one, it passes...
        let asked = params(&[("size_mib", "2048"), ("threads", "1024")]);
        let spec = resolve_each_param("mem.bandwidth", &asked, &Default::default()).unwrap();
        let demand = demand(&spec);
        assert_eq!(demand.buffer_bytes_per_thread, 6 << 30);
        assert_eq!(demand.buffers, "3 arrays of size_mib=2048");
        // Four recordings of three histograms (one per kernel), each over 200 KiB.
        assert!(
            demand.harness_bytes_per_thread > (12 * 200) << 10
                && demand.harness_bytes_per_thread < 12 << 20,
            "{}",
            demand.harness_bytes_per_thread
        );
        // ... but together it is 6 TiB: refused on this host, whatever it is (the resolve the
        // agent calls reads the live host).
        let err = resolve_probe("mem.bandwidth", &asked).unwrap_err();
        assert!(matches!(err, ParamError::TooLarge { .. }), "{err}");
        let err = err.to_string();
        assert!(
            err.starts_with("mem.bandwidth: threads=1024 x 3 arrays of size_mib=2048 needs 6 TiB"),
            "{err}"
        );
        assert!(err.contains("at most half of it may be used"), "{err}");

        let latency = resolve_each_param(
            "mem.latency",
            &params(&[("max_size_mib", "64"), ("threads", "2")]),
            &Default::default(),
        )
        .unwrap();
        let demand = super::demand(&latency);
        assert_eq!(
            demand.buffer_bytes_per_thread,
            (16 << 10) + (128 << 10) + (1 << 20) + (8 << 20) + (64 << 20)
        );
        assert_eq!(demand.buffers, "rungs up to max_size_mib=64");

        let spawn = resolve_each_param(
            "cpu.spawn",
            &params(&[("threads", "1024")]),
            &Default::default(),
        )
        .unwrap();
        let demand = super::demand(&spawn);
        assert_eq!((demand.threads, demand.buffer_bytes_per_thread), (1024, 0));
        let two_cpus = HostCapacity {
            cpus: Some(2),
            mem_available_bytes: Some(64 << 30),
        };
        let err = admit(&demand, &two_cpus).unwrap_err().to_string();
        assert!(err.contains("at most 8"), "{err}");
    }

    #[test]
    fn reads_the_hosts_cpus_and_available_memory_below_its_root() {
        let dir = std::env::temp_dir().join(format!("qb-capacity-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::create_dir_all(dir.join("sys/devices/system/cpu")).unwrap();
        // Captured from the development VM (2 vCPUs, 24 GiB).
        std::fs::write(
            dir.join("proc/meminfo"),
            "MemTotal:       24684112 kB\nMemFree:        21290056 kB\n\
             MemAvailable:   24042400 kB\n",
        )
        .unwrap();
        std::fs::write(dir.join("sys/devices/system/cpu/online"), "0-1\n").unwrap();
        let found = host_capacity(&HostRoot::at(&dir));
        let missing = host_capacity(&HostRoot::at(dir.join("nowhere")));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            found,
            HostCapacity {
                cpus: Some(2),
                mem_available_bytes: Some(24_042_400 * 1024),
            }
        );
        assert_eq!(
            missing,
            HostCapacity {
                cpus: None,
                mem_available_bytes: None,
            }
        );
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
