//! `disk.scan`: a first-touch survey of a device or file, and its pre-warm (CONTEXT.md §5: a
//! volume restored from a snapshot is slow on the first read of each block, ~10x on a query).
//!
//! The survey reads the whole target once, region by region, in large direct reads, recording
//! each read's latency and each region's throughput; then it reads the first few requests of a
//! sample of regions again. A region whose first reads were much slower than the same reads
//! again is cold: `cold_fraction` is the share of sampled regions that were, `slowdown` the
//! median first-read latency over the median re-read latency. Re-reads come after the whole
//! pass, so a device cache smaller than the target has long forgotten the first reads.
//!
//! `prewarm=true` reads everything once, at full speed, every thread its own stripe of regions
//! with a queue of requests in flight, and remembers which regions are done in a small state
//! file, so a run interrupted (killed, or ended by its duration) resumes where it stopped. The
//! trial ends early, normally, when everything is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quietbench_vocab::metrics;

use crate::disk::engine::{EngineKind, IoQueue};
use crate::disk::params::{Params, TextParam};
use crate::disk::scan_state::ScanState;
use crate::disk::survey::{RegionPass, Walk, region_bounds, spread, summarize};
use crate::disk::target::{self, TargetInfo};
use crate::disk::{READ, engine_counters, stripe};
use crate::spec::IntParam;
use crate::{Counter, Merge, MetricSet, ParamError, ProbeSpec, RateBasis, Samples, Step, Workload};

#[cfg(test)]
mod tests;
mod workload;

use workload::ScanWorkload;

/// The folder of the agent's state directory that holds pre-warm progress files.
pub const STATE_FOLDER: &str = "scan";

/// Reads of the sampled regions' second pass, per region.
const REREADS_PER_REGION: u64 = 4;

/// Re-reads of the survey's sample of regions.
pub const REREAD: MetricSet = MetricSet {
    rate_metric: metrics::REREAD_IOPS,
    rate_unit: "IOPS",
    latency_metric: metrics::REREAD_LATENCY,
    latency_unit: "ns",
    throughput: Some(crate::Throughput {
        metric: metrics::REREAD_MB_PER_SEC,
        unit: "MB/s",
        bytes_per_unit: 1e6,
    }),
};

const SURVEY_METRIC_SETS: &[MetricSet] = &[READ, REREAD];
const PREWARM_METRIC_SETS: &[MetricSet] = &[READ];

const INTS: &[IntParam] = &[
    IntParam {
        name: "regions",
        default: 64,
        min: 1,
        max: 1 << 24,
        meaning: "parts the target is surveyed in (pre-warm: tracked in; default there one per 64 MiB, \
         at least 64)",
    },
    IntParam {
        name: "read_kib",
        default: 1024,
        min: 4,
        max: 16 << 10,
        meaning: "KiB per read, a multiple of 4",
    },
    IntParam {
        name: "qd",
        default: 4,
        min: 1,
        max: 1024,
        meaning: "reads in flight per thread; for more, prefer more threads (each its own stripe): \
         deep queues of large sequential reads were slower on virtio disks",
    },
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: 256,
        meaning: "probe threads, each reading its own stripe of regions",
    },
    IntParam {
        name: "resample",
        default: 8,
        min: 0,
        max: 1 << 24,
        meaning: "regions read a second time to tell cold from warm",
    },
    IntParam {
        name: "cold_factor",
        default: 2,
        min: 1,
        max: 1000,
        meaning: "a region is cold when its first reads took this many times as long as the re-reads",
    },
    IntParam {
        name: "region_read_mib",
        default: 0,
        min: 0,
        max: 1 << 30,
        meaning: "survey: MiB read at the start of each region, 0 for all of it (a quick survey of a \
         large device reads a sample)",
    },
    crate::disk::SUBMIT_BATCH,
];

const TEXTS: &[TextParam] = &[
    ("path", "", "the file or block device to read"),
    (
        "prewarm",
        "false",
        "true to read everything once, resumably, instead of surveying",
    ),
    (
        "state",
        "",
        "name of the pre-warm progress file, kept in the agent's state directory under scan/ \
         (default: made from the path)",
    ),
    (
        "engine",
        "auto",
        "auto (io_uring, else threads), io_uring or threads",
    ),
];

const PREWARM_REGION_BYTES: u64 = 64 << 20;

/// A disk.scan trial, shared by its threads.
#[derive(Debug)]
struct ScanConfig {
    target: TargetInfo,
    size: u64,
    regions: usize,
    read: u64,
    qd: usize,
    submit_batch: usize,
    /// Survey: bytes read at the start of each region (None: all).
    region_read: Option<u64>,
    threads: usize,
    engine: EngineKind,
    prewarm: Option<PathBuf>,
    /// Regions (global indices) read twice.
    resampled: Vec<usize>,
    cold_factor: f64,
}

impl ScanConfig {
    /// Region `r`'s bytes: whole 4 KiB blocks, the last region up to the end.
    fn region(&self, r: usize) -> (u64, u64) {
        region_bounds(self.size, self.regions, r)
    }
}

/// The default name of the progress file of a pre-warm of `target`: its path in safe
/// characters, and a hash of the whole path, so `/a/b_c` and `/a_b/c` never share one.
pub(crate) fn default_state_name(target: &TargetInfo) -> String {
    let path = target.path.to_string_lossy();
    let readable: String = path
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    // FNV-1a: a stable name across agent versions (std's hasher promises no stability).
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{readable}-{hash:016x}.qbscan")
}

/// Checks a user's `state=` name: a plain file name, so the file stays in the agent's state
/// directory whatever the name says.
fn check_state_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        Ok(())
    } else {
        Err(
            "a plain file name (letters, digits, '-', '_', '.'; not starting with '.'; at most \
             128 characters): the file is kept in the agent's state directory under scan/, \
             never at a path a request names"
                .to_string(),
        )
    }
}

/// Where a pre-warm's progress file is: `<state dir>/scan/<name>`.
pub fn state_path(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join(STATE_FOLDER).join(name)
}

/// Resolves disk.scan.
pub fn resolve(
    probe: &'static str,
    params: &BTreeMap<String, String>,
    context: &crate::ProbeContext,
) -> Result<ProbeSpec, ParamError> {
    if probe != "disk.scan" {
        return Err(ParamError::UnknownProbe(probe.to_string()));
    }
    let p = Params::parse(probe, params, INTS, TEXTS)?;
    let path = PathBuf::from(p.required("path", "the file or block device to scan")?);
    let prewarm = p.flag("prewarm")?;
    if !prewarm {
        for key in ["state"] {
            if p.given(key) {
                return Err(p.bad(key, "applies to prewarm=true only"));
            }
        }
    } else {
        for key in ["resample", "cold_factor", "region_read_mib"] {
            if p.given(key) {
                return Err(p.bad(key, "applies to the survey only, not to prewarm=true"));
            }
        }
    }
    let engine = crate::disk::engine_param(&p)?;
    let read_bytes = crate::disk::request_bytes(&p, "read_kib")?;
    target::require_absolute(&path).map_err(|why| p.bad("path", why))?;
    let target = target::inspect(&path).map_err(|why| p.bad("path", why))?;
    let size = match target.size {
        Some(size) if size >= 4096 => size,
        Some(size) => {
            return Err(p.bad(
                "path",
                format!("{} holds only {size} bytes", path.display()),
            ));
        }
        None => return Err(p.bad("path", format!("{} does not exist", path.display()))),
    };
    let regions = if prewarm && !p.given("regions") {
        (size / PREWARM_REGION_BYTES).clamp(64, 1 << 24) as usize
    } else {
        p.int("regions") as usize
    };
    if regions as u64 > size / 4096 {
        return Err(p.bad(
            "regions",
            format!(
                "{} is {size} bytes: at most {} regions of 4 KiB",
                path.display(),
                size / 4096
            ),
        ));
    }
    let threads = p.int("threads") as usize;
    if threads > regions {
        return Err(p.bad(
            "threads",
            format!("more threads than the {regions} regions"),
        ));
    }
    let qd = p.int("qd");
    let mut resolved = crate::spec::as_text(&p.ints);
    resolved.insert("regions".into(), regions.to_string());
    resolved.insert("qd".into(), qd.to_string());
    resolved.insert("path".into(), path.display().to_string());
    resolved.insert("prewarm".into(), prewarm.to_string());
    resolved.insert("engine".into(), engine.name().to_string());
    let state = if prewarm {
        let name = match p.text("state") {
            s if s.is_empty() => default_state_name(&target),
            s => {
                check_state_name(&s).map_err(|why| p.bad("state", why))?;
                s
            }
        };
        let Some(state_dir) = &context.state_dir else {
            return Err(p.bad(
                "prewarm",
                "a pre-warm keeps its progress in the agent's state directory, and this caller \
                 gave none",
            ));
        };
        let state = state_path(state_dir, &name);
        resolved.insert("state".into(), state.display().to_string());
        resolved.remove("resample");
        resolved.remove("cold_factor");
        resolved.remove("region_read_mib");
        Some(state)
    } else {
        None
    };
    let config = Arc::new(ScanConfig {
        target,
        size,
        regions,
        read: read_bytes,
        qd: qd as usize,
        submit_batch: p.int("submit_batch") as usize,
        region_read: match p.int("region_read_mib") {
            0 => None,
            mib => Some(mib << 20),
        },
        threads,
        engine,
        resampled: if prewarm {
            Vec::new()
        } else {
            spread(regions, p.int("resample") as usize)
        },
        cold_factor: p.int("cold_factor") as f64,
        prewarm: state,
    });
    Ok(ProbeSpec {
        name: probe,
        threads,
        resolved_params: resolved,
        metric_sets: if prewarm {
            PREWARM_METRIC_SETS
        } else {
            SURVEY_METRIC_SETS
        },
        basis: RateBasis::Elapsed,
        work: crate::placement::WorkKind::Compute,
        factory: Arc::new(move |thread| {
            Ok(Box::new(ScanWorkload::new(Arc::clone(&config), thread)?) as Box<dyn Workload>)
        }),
    })
}
