//! `mem.latency` and `mem.bandwidth`: what the memory hierarchy gives one pinned thread.
//!
//! - `mem.latency` chases pointers through a single random cycle over every 64-byte line of a
//!   working set, for a fixed ladder of sizes from L1 to DRAM (lmbench's `lat_mem_rd -t` is the
//!   anchor). Each load's address comes from the previous load, so the time per load is the
//!   latency of the level the working set lives in; the order is a seeded random permutation
//!   (Sattolo's algorithm), so no hardware prefetcher can guess the next line. Rungs are
//!   visited in turn, each visit rebuilding its working set and then timing it for `visit_ms`
//!   (see [`LatencyWorkload`] for the measurements behind that). One sample is the mean latency
//!   of `loads_per_step` loads, in whole ns: the histograms are of per-step means, the rates
//!   (`loads_per_sec_*`) are 1e9 over the mean, and the exact means are the `load_ns_*`
//!   counters (an L1 hit is 1-2 ns, where whole ns are too coarse).
//! - `mem.bandwidth` runs STREAM's kernels (plus a read-only sum) over arrays far larger than
//!   the caches, and counts bytes as STREAM does.
//!
//! Memory is allocated and first touched on the probe thread, in its own
//! [`Workload::step`](crate::Workload::step)s, not when the workload is made: the probe thread is pinned by then, so
//! Linux's first-touch policy puts the pages on the pinned CPU's NUMA node (the workload may
//! be built on the supervisor's thread). Set-up is spread over steps of at most
//! `SETUP_STEP` (200 ms) that record nothing, and both probes use [`RateBasis::OwnTime`], so set-up
//! time counts in no rate (it does count in the trial's duration: building a 256 MiB rung
//! takes about a second, a 1 GiB rung several).
//!
//! With `huge_pages=1` (the default) the buffers are advised `MADV_HUGEPAGE` before they are
//! touched. Otherwise the result would depend on the host's THP setting (`madvise` on Debian
//! and most clouds, where plain allocations get 4 KiB pages) and measure the page walker as
//! much as memory: on the H100 host, 4 KiB pages made the 1 MiB rung 11 instead of 7 ns and
//! the 256 MiB rung 169 instead of 138 ns. `huge_pages=0` keeps whatever the host gives, which
//! is what lmbench and STREAM get.

mod alloc;
mod bandwidth;
mod latency;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use quietbench_host::HostRoot;
use quietbench_vocab::metrics;

use crate::placement::WorkKind;
use crate::spec::{IntParam, as_text, resolve_integers};
use crate::{MetricSet, ParamError, ProbeSpec, RateBasis, Throughput};

pub use bandwidth::{BandwidthWorkload, Kernel, StreamArrays};
pub use latency::{CycleBuilder, LatencyWorkload, PointerCycle};

/// Bytes in a cache line as the ladder and the chase count them (every x86-64 and most arm64
/// server parts; on 128-byte lines each load would simply share its line with another).
pub const LINE_BYTES: usize = 64;

/// The working-set sizes of `mem.latency`, smallest first: L1, L2, L2/L3, L3, L3/DRAM, DRAM.
/// Fixed rather than derived from the host's caches, so metric names (and so comparisons
/// across machines) never change; `max_size_mib` drops the larger rungs.
pub const RUNG_BYTES: [usize; 7] = [
    16 << 10,
    128 << 10,
    1 << 20,
    8 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
];

/// The precise per-rung mean, as counters: the histograms hold integer nanoseconds, which for
/// an L1 hit (1 to 2 ns) is too coarse to compare machines.
pub(crate) const RUNG_COUNTERS: [&str; 7] = [
    metrics::LOAD_NS_16K,
    metrics::LOAD_NS_128K,
    metrics::LOAD_NS_1M,
    metrics::LOAD_NS_8M,
    metrics::LOAD_NS_64M,
    metrics::LOAD_NS_256M,
    metrics::LOAD_NS_1G,
];

const fn rung(rate_metric: &'static str, latency_metric: &'static str) -> MetricSet {
    MetricSet {
        rate_metric,
        rate_unit: "loads/s",
        latency_metric,
        latency_unit: "ns",
        throughput: None,
    }
}

/// One metric set per rung of [`RUNG_BYTES`]. A trial uses the prefix `max_size_mib` allows.
pub const LATENCY_METRIC_SETS: &[MetricSet] = &[
    rung(metrics::LOADS_PER_SEC_16K, metrics::LOAD_LATENCY_16K),
    rung(metrics::LOADS_PER_SEC_128K, metrics::LOAD_LATENCY_128K),
    rung(metrics::LOADS_PER_SEC_1M, metrics::LOAD_LATENCY_1M),
    rung(metrics::LOADS_PER_SEC_8M, metrics::LOAD_LATENCY_8M),
    rung(metrics::LOADS_PER_SEC_64M, metrics::LOAD_LATENCY_64M),
    rung(metrics::LOADS_PER_SEC_256M, metrics::LOAD_LATENCY_256M),
    rung(metrics::LOADS_PER_SEC_1G, metrics::LOAD_LATENCY_1G),
];

const fn kernel(
    rate_metric: &'static str,
    latency_metric: &'static str,
    gb_metric: &'static str,
) -> MetricSet {
    MetricSet {
        rate_metric,
        rate_unit: "passes/s",
        latency_metric,
        latency_unit: "ns",
        throughput: Some(Throughput {
            metric: gb_metric,
            unit: "GB/s",
            bytes_per_unit: 1e9,
        }),
    }
}

/// read (sum of one array), copy (a = b), triad (a = b + s*c): one pass per event.
pub const BANDWIDTH_METRIC_SETS: &[MetricSet] = &[
    kernel(
        metrics::PASSES_PER_SEC_READ,
        metrics::PASS_LATENCY_READ,
        metrics::GB_PER_SEC_READ,
    ),
    kernel(
        metrics::PASSES_PER_SEC_COPY,
        metrics::PASS_LATENCY_COPY,
        metrics::GB_PER_SEC_COPY,
    ),
    kernel(
        metrics::PASSES_PER_SEC_TRIAD,
        metrics::PASS_LATENCY_TRIAD,
        metrics::GB_PER_SEC_TRIAD,
    ),
];

/// Bytes per element each kernel is credited with, as STREAM counts them: what the program
/// reads and writes, not the write-allocate reads the hardware adds for copy and triad.
const STREAM_BYTES_PER_ELEM: [u64; 3] = [8, 16, 24];

/// STREAM's triad scalar.
const TRIAD_SCALAR: f64 = 3.0;

const THREADS: IntParam = IntParam {
    name: "threads",
    default: 1,
    min: 1,
    max: 1024,
    meaning: "probe threads, each pinned to its own CPU and with its own memory",
};
const HUGE_PAGES: IntParam = IntParam {
    name: "huge_pages",
    default: 1,
    min: 0,
    max: 1,
    meaning: "1: advise transparent huge pages (MADV_HUGEPAGE) before first touch; 0: the host's default",
};

/// mem.latency parameters: name, default, minimum, maximum, meaning.
pub const LATENCY_PARAMS: &[IntParam] = &[
    IntParam {
        name: "max_size_mib",
        default: 256,
        min: 1,
        max: 1024,
        meaning: "largest working set in MiB: rungs (16 KiB, 128 KiB, 1, 8, 64, 256, 1024 MiB) above it are dropped",
    },
    IntParam {
        name: "loads_per_step",
        default: 1 << 16,
        min: 1 << 10,
        max: 1 << 22,
        meaning: "dependent loads timed as one sample (the sample is their mean latency); at most 2^22, \
         about a second of DRAM loads",
    },
    IntParam {
        name: "visit_ms",
        default: 250,
        min: 10,
        max: 10_000,
        meaning: "time spent on one rung before moving to the next (see the module doc: an L3-sized rung \
         needs many passes to settle in the L3)",
    },
    THREADS,
    HUGE_PAGES,
];

/// mem.bandwidth parameters.
pub const BANDWIDTH_PARAMS: &[IntParam] = &[
    IntParam {
        name: "size_mib",
        default: 256,
        min: 1,
        max: 2048,
        meaning: "MiB of each of the three f64 arrays per thread; STREAM's rule: at least 4x the last-level cache \
         (at most 2048: one pass is one event, and a triad pass over 2 GiB arrays already moves 8 GiB)",
    },
    THREADS,
    HUGE_PAGES,
];

/// Resolves this module's probes.
pub fn resolve(
    probe: &'static str,
    params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    match probe {
        "mem.latency" => {
            let values = resolve_integers(probe, LATENCY_PARAMS, params)?;
            let rungs = rungs_up_to(values["max_size_mib"]);
            let loads_per_step = values["loads_per_step"];
            let visit = Duration::from_millis(values["visit_ms"]);
            let threads = values["threads"] as usize;
            let huge_pages = values["huge_pages"] == 1;
            let per_thread: usize = RUNG_BYTES[..rungs].iter().sum();
            Ok(ProbeSpec {
                name: probe,
                threads,
                resolved_params: as_text(&values),
                metric_sets: &LATENCY_METRIC_SETS[..rungs],
                // Per-rung (per-kernel) samples alternate: each rate over its own samples' time.
                basis: RateBasis::OwnTime,
                work: WorkKind::Compute,
                factory: Arc::new(move |thread| {
                    if thread == 0 {
                        check_memory(probe, per_thread, threads, mem_available(&HostRoot::live()))?;
                    }
                    Ok(Box::new(LatencyWorkload::new(
                        rungs,
                        loads_per_step,
                        visit,
                        huge_pages,
                        thread as u64,
                    )))
                }),
            })
        }
        "mem.bandwidth" => {
            let values = resolve_integers(probe, BANDWIDTH_PARAMS, params)?;
            let bytes_each = (values["size_mib"] as usize) << 20;
            let threads = values["threads"] as usize;
            let huge_pages = values["huge_pages"] == 1;
            Ok(ProbeSpec {
                name: probe,
                threads,
                resolved_params: as_text(&values),
                metric_sets: BANDWIDTH_METRIC_SETS,
                basis: RateBasis::OwnTime,
                work: WorkKind::Compute,
                factory: Arc::new(move |thread| {
                    if thread == 0 {
                        check_memory(
                            probe,
                            3 * bytes_each,
                            threads,
                            mem_available(&HostRoot::live()),
                        )?;
                    }
                    Ok(Box::new(BandwidthWorkload::new(bytes_each, huge_pages)))
                }),
            })
        }
        other => Err(ParamError::UnknownProbe(other.to_string())),
    }
}

/// What each thread of a resolved mem probe allocates, for admission
/// ([`crate::spec::admit`]): bytes, and what they are in the request's own terms. Read back
/// from the resolved parameters (every key there: resolve wrote them), with the sizes the
/// factories use: three arrays of `size_mib` for bandwidth, every rung up to `max_size_mib`
/// for latency (a thread keeps its rungs between visits).
pub(crate) fn buffers_per_thread(
    probe: &str,
    resolved: &BTreeMap<String, String>,
) -> (u64, String) {
    let int = |key: &str| {
        resolved
            .get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match probe {
        "mem.bandwidth" => {
            let size_mib = int("size_mib");
            (
                size_mib.saturating_mul(3 << 20),
                format!("3 arrays of size_mib={size_mib}"),
            )
        }
        "mem.latency" => {
            let max_size_mib = int("max_size_mib");
            let bytes: usize = RUNG_BYTES[..rungs_up_to(max_size_mib)].iter().sum();
            (
                bytes as u64,
                format!("rungs up to max_size_mib={max_size_mib}"),
            )
        }
        _ => (0, String::new()),
    }
}

/// How many rungs fit in `max_size_mib` (at least the three below 1 MiB).
fn rungs_up_to(max_size_mib: u64) -> usize {
    let max = usize::try_from(max_size_mib)
        .unwrap_or(usize::MAX)
        .saturating_mul(1 << 20);
    RUNG_BYTES.iter().filter(|&&b| b <= max).count()
}

/// Refuses a trial whose buffers would not fit in the memory the kernel says is available:
/// past it the probe would measure swap or be OOM-killed (taking the agent with it), not
/// measure memory. `available` is None where /proc/meminfo cannot be read: then allow it.
fn check_memory(
    probe: &str,
    per_thread: usize,
    threads: usize,
    available: Option<u64>,
) -> Result<(), String> {
    let needed = (per_thread as u64).saturating_mul(threads as u64);
    match available {
        Some(available) if needed > available / 10 * 9 => Err(format!(
            "{probe} needs {} MiB ({} MiB per thread x {threads} threads) but /proc/meminfo \
             has only {} MiB available; lower size_mib/max_size_mib or threads",
            needed >> 20,
            per_thread >> 20,
            available >> 20
        )),
        _ => Ok(()),
    }
}

/// `MemAvailable` of `/proc/meminfo` under `root`, in bytes; None where it cannot be read.
pub(crate) fn mem_available(root: &HostRoot) -> Option<u64> {
    parse_mem_available(&root.read("/proc/meminfo").ok()?)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
