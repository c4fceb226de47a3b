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

use crate::disk::engine::{EngineKind, IoQueue};
use crate::disk::params::{Params, TextParam};
use crate::disk::scan_state::ScanState;
use crate::disk::survey::{RegionPass, Walk, region_bounds, spread, summarize};
use crate::disk::target::{self, TargetInfo, TargetKind};
use crate::disk::{READ, engine_counters, stripe};
use crate::spec::IntParam;
use crate::{Counter, Merge, MetricSet, ParamError, ProbeSpec, RateBasis, Samples, Step, Workload};

#[cfg(test)]
mod tests;
mod workload;

use workload::ScanWorkload;

/// Where device pre-warms keep their state by default.
pub const DEVICE_STATE_DIR: &str = "/var/lib/quietbench-agent";

/// Reads of the sampled regions' second pass, per region.
const REREADS_PER_REGION: u64 = 4;

/// Re-reads of the survey's sample of regions.
pub const REREAD: MetricSet = MetricSet {
    rate_metric: "reread_iops",
    rate_unit: "IOPS",
    latency_metric: "reread_latency",
    latency_unit: "ns",
    throughput: Some(crate::Throughput {
        metric: "reread_mb_per_sec",
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
        "pre-warm progress file (default <path>.qbscan for a file, under /var/lib/quietbench-agent for a device)",
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

/// The default state file for a pre-warm of `target`.
pub(crate) fn default_state_path(target: &TargetInfo) -> PathBuf {
    match target.kind {
        TargetKind::File => {
            let mut name = target.path.clone().into_os_string();
            name.push(".qbscan");
            PathBuf::from(name)
        }
        TargetKind::BlockDevice => {
            let name: String = target
                .path
                .to_string_lossy()
                .trim_start_matches('/')
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            Path::new(DEVICE_STATE_DIR).join(format!("{name}.qbscan"))
        }
    }
}

/// Resolves disk.scan.
pub fn resolve(
    probe: &'static str,
    params: &BTreeMap<String, String>,
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
        let state = match p.text("state") {
            s if s.is_empty() => default_state_path(&target),
            s => PathBuf::from(s),
        };
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
