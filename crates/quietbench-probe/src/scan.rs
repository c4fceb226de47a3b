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
use std::time::Instant;

use crate::disk::engine::{EngineKind, IoQueue};
use crate::disk::params::{Params, TextParam};
use crate::disk::scan_state::ScanState;
use crate::disk::survey::{RegionPass, Walk, region_bounds, spread, summarize};
use crate::disk::target::{self, TargetInfo, TargetKind};
use crate::disk::{READ, engine_counters, stripe};
use crate::spec::IntParam;
use crate::{Counter, Merge, ParamError, ProbeSpec, RateBasis, Samples, Step, Variant, Workload};

/// Where device pre-warms keep their state by default.
pub const DEVICE_STATE_DIR: &str = "/var/lib/quietbench-agent";

/// Reads of the sampled regions' second pass, per region.
const REREADS_PER_REGION: u64 = 4;

/// Re-reads of the survey's sample of regions.
pub const REREAD: Variant = Variant {
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

const SURVEY_VARIANTS: &[Variant] = &[READ, REREAD];
const PREWARM_VARIANTS: &[Variant] = &[READ];

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
        variants: if prewarm {
            PREWARM_VARIANTS
        } else {
            SURVEY_VARIANTS
        },
        basis: RateBasis::Elapsed,
        work: crate::placement::WorkKind::Compute,
        factory: Arc::new(move |thread| {
            Ok(Box::new(ScanWorkload::new(Arc::clone(&config), thread)?) as Box<dyn Workload>)
        }),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    First,
    Reread,
    Done,
}

/// One thread of disk.scan: the survey, or the pre-warm when it has a state file.
struct ScanWorkload {
    config: Arc<ScanConfig>,
    queue: IoQueue,
    phase: Phase,
    walk: Walk,
    free: Vec<usize>,
    slot_region: Vec<usize>,
    slot_offset: Vec<u64>,
    slot_len: Vec<usize>,
    /// This thread's regions: the first's global index, and each one's pass.
    first_region: usize,
    passes: Vec<RegionPass>,
    /// Per resampled region of this stripe (local index, or None): first and second latencies
    /// of its first [`REREADS_PER_REGION`] reads, 0 where not (yet) read.
    sample_of: Vec<Option<usize>>,
    first_ns: Vec<u64>,
    second_ns: Vec<u64>,
    survey_start: Option<Instant>,
    survey_end: Option<Instant>,
    state: Option<ScanState>,
    stripe_bytes: u64,
    skipped_bytes: u64,
    read_bytes: u64,
    error: Option<String>,
}

impl ScanWorkload {
    fn new(config: Arc<ScanConfig>, thread: usize) -> Result<Self, String> {
        let (first_region, count) = stripe(config.regions as u64, config.threads, thread, 1);
        let (first_region, count) = (first_region as usize, count as usize);
        let state = match &config.prewarm {
            Some(path) => Some(ScanState::open(path, config.size, config.regions)?),
            None => None,
        };
        let mut passes = vec![RegionPass::default(); count];
        let mut ranges = Vec::with_capacity(count);
        let (mut stripe_bytes, mut skipped_bytes) = (0, 0);
        for (local, pass) in passes.iter_mut().enumerate() {
            let r = first_region + local;
            let (start, end) = config.region(r);
            stripe_bytes += end - start;
            if state.as_ref().is_some_and(|s| s.is_done(r)) {
                skipped_bytes += end - start;
                continue;
            }
            let end = match config.region_read {
                Some(limit) => end.min(start + limit),
                None => end,
            };
            pass.remaining = end - start;
            ranges.push((r, start, end));
        }
        let mut sample_of = vec![None; count];
        let mut sampled = 0;
        for &r in &config.resampled {
            if (first_region..first_region + count).contains(&r) {
                sample_of[r - first_region] = Some(sampled);
                sampled += 1;
            }
        }
        let per = REREADS_PER_REGION as usize;
        let file = target::open_direct(&config.target.path, config.target.kind, false)?;
        let queue = IoQueue::new(
            config.engine,
            Arc::new(file),
            config.qd,
            config.read as usize,
            thread as u64,
            config.submit_batch,
        )?;
        let slots = queue.slots();
        Ok(Self {
            queue,
            phase: Phase::First,
            walk: Walk::new(ranges),
            free: (0..slots).rev().collect(),
            slot_region: vec![0; slots],
            slot_offset: vec![0; slots],
            slot_len: vec![0; slots],
            first_region,
            passes,
            sample_of,
            first_ns: vec![0; sampled * per],
            second_ns: vec![0; sampled * per],
            survey_start: None,
            survey_end: None,
            state,
            stripe_bytes,
            skipped_bytes,
            read_bytes: 0,
            error: None,
            config,
        })
    }

    /// Sends reads on every free slot while the walk has some.
    fn fill(&mut self) -> Result<(), String> {
        while let Some(&slot) = self.free.last() {
            let Some((r, offset, len)) = self.walk.next(self.config.read) else {
                break;
            };
            self.free.pop();
            if self.phase == Phase::First {
                let pass = &mut self.passes[r - self.first_region];
                pass.start.get_or_insert_with(Instant::now);
            }
            self.slot_region[slot] = r;
            self.slot_offset[slot] = offset;
            self.slot_len[slot] = len;
            self.queue.submit(slot, false, offset, len).map_err(|e| {
                format!(
                    "disk.scan: read of {len} bytes at offset {offset} of {} failed: {e}",
                    self.config.target.path.display()
                )
            })?;
        }
        Ok(())
    }

    /// Reaps at least `min` reads; records them unless `quiet` (after the trial).
    fn reap(&mut self, min: usize, samples: Option<&mut Samples<'_>>) -> Result<(), String> {
        let n = self
            .queue
            .reap(min)
            .map_err(|e| format!("disk.scan: waiting for reads failed: {e}"))?;
        let now = Instant::now();
        let mut samples = samples;
        for i in 0..n {
            let c = self.queue.completion(i);
            self.free.push(c.slot);
            let (r, offset, len) = (
                self.slot_region[c.slot],
                self.slot_offset[c.slot],
                self.slot_len[c.slot],
            );
            // A short read is right only where the target ends.
            let ok = c.result == len as i64
                || (c.result >= 0 && offset + c.result as u64 == self.config.size);
            if !ok {
                let why = if c.result < 0 {
                    std::io::Error::from_raw_os_error(-c.result as i32).to_string()
                } else {
                    format!("only {} bytes transferred", c.result)
                };
                return Err(format!(
                    "disk.scan: read of {len} bytes at offset {offset} of {} failed: {why}",
                    self.config.target.path.display()
                ));
            }
            let bytes = c.result as u64;
            let local = r - self.first_region;
            let k = ((offset - self.config.region(r).0) / self.config.read) as usize;
            let sample = self.sample_of[local]
                .filter(|_| k < REREADS_PER_REGION as usize)
                .map(|s| s * REREADS_PER_REGION as usize + k);
            match self.phase {
                Phase::First => {
                    let pass = &mut self.passes[local];
                    pass.bytes += bytes;
                    pass.end = Some(now);
                    pass.remaining = pass.remaining.saturating_sub(len as u64);
                    self.read_bytes += bytes;
                    if let Some(i) = sample {
                        self.first_ns[i] = c.latency_ns.max(1);
                    }
                    if pass.remaining == 0
                        && let Some(state) = &mut self.state
                    {
                        state.mark_done(r)?;
                    }
                    if let Some(s) = samples.as_deref_mut() {
                        s.record(0, c.latency_ns, bytes);
                    }
                }
                Phase::Reread | Phase::Done => {
                    if let Some(i) = sample {
                        self.second_ns[i] = c.latency_ns.max(1);
                    }
                    if let Some(s) = samples.as_deref_mut() {
                        s.record(1, c.latency_ns, bytes);
                    }
                }
            }
        }
        Ok(())
    }

    fn advance(&mut self, samples: &mut Samples<'_>) -> Result<Step, String> {
        loop {
            self.fill()?;
            if self.queue.inflight() > 0 {
                self.reap(1, Some(samples))?;
                self.fill()?;
                return Ok(Step::Recorded);
            }
            // Nothing in flight and nothing left to send: this phase is over.
            match self.phase {
                Phase::First => {
                    self.survey_end = Some(Instant::now());
                    if let Some(state) = &mut self.state {
                        state.sync()?;
                    }
                    let ranges: Vec<_> = (0..self.passes.len())
                        .filter(|&l| self.sample_of[l].is_some())
                        .map(|l| {
                            let r = self.first_region + l;
                            let (start, end) = self.config.region(r);
                            (
                                r,
                                start,
                                // The same reads as the first pass made.
                                end.min(start + REREADS_PER_REGION * self.config.read).min(
                                    start.saturating_add(
                                        self.config.region_read.unwrap_or(u64::MAX),
                                    ),
                                ),
                            )
                        })
                        .collect();
                    self.walk = Walk::new(ranges);
                    self.phase = Phase::Reread;
                }
                Phase::Reread | Phase::Done => {
                    self.phase = Phase::Done;
                    return Ok(Step::Finished);
                }
            }
        }
    }
}

impl Workload for ScanWorkload {
    fn variants(&self) -> &'static [Variant] {
        if self.state.is_some() {
            PREWARM_VARIANTS
        } else {
            SURVEY_VARIANTS
        }
    }

    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        self.survey_start.get_or_insert_with(Instant::now);
        match self.advance(samples) {
            Ok(step) => step,
            Err(message) => {
                self.error = Some(message);
                Step::Failed
            }
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        // Reads still in flight complete; for a pre-warm they may finish a region.
        while self.queue.inflight() > 0 {
            if self.reap(self.queue.inflight(), None).is_err() {
                self.queue.drain();
                break;
            }
        }
        if let Some(state) = &mut self.state {
            let _ = state.sync();
        }
    }

    fn counters(&mut self) -> Vec<Counter> {
        let mut out = engine_counters(&self.queue);
        let c = |name, unit, value, merge| Counter {
            name,
            unit,
            value,
            merge,
        };
        let complete = self.phase == Phase::Done;
        if self.state.is_some() {
            let done = self.skipped_bytes
                + self
                    .passes
                    .iter()
                    .filter(|p| p.start.is_some() && p.remaining == 0)
                    .map(|p| p.bytes)
                    .sum::<u64>();
            out.extend([
                c(
                    "prewarm_complete",
                    "bool",
                    f64::from(u8::from(done == self.stripe_bytes)),
                    Merge::Mean,
                ),
                c(
                    "prewarm_bytes_read",
                    "bytes",
                    self.read_bytes as f64,
                    Merge::Sum,
                ),
                c("prewarm_bytes_done", "bytes", done as f64, Merge::Sum),
                c(
                    "prewarm_bytes_skipped",
                    "bytes",
                    self.skipped_bytes as f64,
                    Merge::Sum,
                ),
                c(
                    "prewarm_bytes_total",
                    "bytes",
                    self.stripe_bytes as f64,
                    Merge::Sum,
                ),
            ]);
            return out;
        }
        let summary = summarize(
            &self.passes,
            &self.first_ns,
            &self.second_ns,
            REREADS_PER_REGION as usize,
            self.config.cold_factor,
        );
        out.push(c(
            "scan_complete",
            "bool",
            f64::from(u8::from(complete)),
            Merge::Mean,
        ));
        out.push(c(
            "regions_read",
            "regions",
            summary.regions_read as f64,
            Merge::Sum,
        ));
        if let (Some(start), Some(end)) = (self.survey_start, self.survey_end) {
            let seconds = end.duration_since(start).as_secs_f64();
            if seconds > 0.0 {
                let mb = self.read_bytes as f64 / seconds / 1e6;
                out.push(c("survey_mb_per_sec", "MB/s", mb, Merge::Sum));
            }
        }
        if let Some((p50, min, max)) = summary.region_mb_per_sec {
            out.push(c("region_mb_per_sec_p50", "MB/s", p50, Merge::Mean));
            out.push(c("region_mb_per_sec_min", "MB/s", min, Merge::Mean));
            out.push(c("region_mb_per_sec_max", "MB/s", max, Merge::Max));
        }
        if summary.resampled > 0 {
            out.push(c(
                "resampled_regions",
                "regions",
                summary.resampled as f64,
                Merge::Sum,
            ));
            out.push(c(
                "cold_regions",
                "regions",
                summary.cold as f64,
                Merge::Sum,
            ));
            out.push(c(
                "cold_fraction",
                "fraction",
                summary.cold as f64 / summary.resampled as f64,
                Merge::Mean,
            ));
        }
        if let Some(slowdown) = summary.slowdown {
            out.push(c("slowdown", "ratio", slowdown, Merge::Mean));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{ScratchDir, run_for};
    use crate::test_params as params;

    fn counter(outcome: &crate::TrialOutcome, name: &str) -> Option<f64> {
        outcome
            .counters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
    }

    /// A file of `mib` MiB of data, laid out as disk.seq does.
    fn data_file(dir: &ScratchDir, mib: u64) -> PathBuf {
        let path = dir.path().join("scan.dat");
        target::prepare_file(&path, mib << 20, 9).unwrap();
        path
    }

    #[test]
    fn state_files_default_beside_a_file_or_under_the_agents_directory() {
        let file = TargetInfo {
            path: "/data/x.img".into(),
            kind: TargetKind::File,
            size: None,
        };
        assert_eq!(default_state_path(&file), Path::new("/data/x.img.qbscan"));
        let dev = TargetInfo {
            path: "/dev/nvme1n1".into(),
            kind: TargetKind::BlockDevice,
            size: None,
        };
        assert_eq!(
            default_state_path(&dev),
            Path::new("/var/lib/quietbench-agent/dev_nvme1n1.qbscan")
        );
    }

    #[test]
    fn refuses_bad_parameters_with_clear_errors() {
        let dir = ScratchDir::new();
        let path = data_file(&dir, 4);
        let p = path.to_str().unwrap();
        let missing = dir.path().join("nope");
        let m = missing.to_str().unwrap();
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("path", m)], "does not exist"),
            (&[("path", p), ("state", "/tmp/s")], "prewarm=true only"),
            (
                &[("path", p), ("prewarm", "true"), ("resample", "2")],
                "survey only",
            ),
            (&[("path", p), ("regions", "2000")], "at most 1024 regions"),
            (
                &[("path", p), ("regions", "4"), ("threads", "5")],
                "more threads",
            ),
            (&[("path", p), ("read_kib", "5")], "multiple of 4"),
            (&[("path", p), ("depth", "5")], "cold_factor, engine, path"),
            (
                &[("path", p), ("prewarm", "1"), ("region_read_mib", "1")],
                "survey only",
            ),
            (
                &[("path", p), ("qd", "512"), ("read_kib", "4096")],
                "lower qd",
            ),
        ];
        for (given, expected) in cases {
            let err = resolve("disk.scan", &params(given))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{given:?}: {err}");
        }
        let spec = resolve("disk.scan", &params(&[("path", p), ("prewarm", "yes")])).unwrap();
        assert_eq!(spec.resolved_params["qd"], "4");
        assert_eq!(spec.resolved_params["regions"], "64");
        assert_eq!(spec.resolved_params["state"], format!("{p}.qbscan"));
        assert!(!spec.resolved_params.contains_key("resample"));
        let spec = resolve("disk.scan", &params(&[("path", p)])).unwrap();
        assert_eq!(spec.resolved_params["qd"], "4");
        assert_eq!(spec.variants, SURVEY_VARIANTS);
    }

    #[test]
    fn a_survey_reads_everything_then_rereads_a_sample_and_finishes_early() {
        let dir = ScratchDir::new();
        let path = data_file(&dir, 32);
        let spec = resolve(
            "disk.scan",
            &params(&[
                ("path", path.to_str().unwrap()),
                ("regions", "16"),
                ("resample", "4"),
            ]),
        )
        .unwrap();
        let started = Instant::now();
        let outcome = run_for(&spec, 60_000).unwrap();
        assert!(
            started.elapsed().as_secs() < 30,
            "the scan ends when it is done"
        );
        let first = &outcome.total.variants[0];
        let again = &outcome.total.variants[1];
        assert_eq!(first.bytes, 32 << 20);
        assert_eq!(first.events, 32);
        // Four regions of 2 MiB: their first (up to 4) 1 MiB reads again.
        assert_eq!(
            (again.variant, again.events, again.bytes),
            (REREAD, 8, 8 << 20)
        );
        assert_eq!(counter(&outcome, "scan_complete"), Some(1.0));
        assert_eq!(counter(&outcome, "regions_read"), Some(16.0));
        assert_eq!(counter(&outcome, "resampled_regions"), Some(4.0));
        let cold = counter(&outcome, "cold_fraction").unwrap();
        assert!((0.0..=1.0).contains(&cold));
        assert!(counter(&outcome, "slowdown").unwrap() > 0.0);
        assert!(counter(&outcome, "survey_mb_per_sec").unwrap() > 0.0);
        let (min, p50) = (
            counter(&outcome, "region_mb_per_sec_min").unwrap(),
            counter(&outcome, "region_mb_per_sec_p50").unwrap(),
        );
        assert!(min > 0.0 && min <= p50);
    }

    #[test]
    fn a_quick_survey_reads_the_start_of_each_region() {
        let dir = ScratchDir::new();
        let path = data_file(&dir, 32);
        let spec = resolve(
            "disk.scan",
            &params(&[
                ("path", path.to_str().unwrap()),
                ("regions", "16"),
                ("region_read_mib", "1"),
                ("resample", "2"),
            ]),
        )
        .unwrap();
        let outcome = run_for(&spec, 60_000).unwrap();
        assert_eq!(outcome.total.variants[0].bytes, 16 << 20);
        assert_eq!(outcome.total.variants[1].bytes, 2 << 20);
        assert_eq!(counter(&outcome, "regions_read"), Some(16.0));
        assert_eq!(counter(&outcome, "scan_complete"), Some(1.0));
    }

    #[test]
    fn a_prewarm_resumes_where_an_interrupted_one_stopped() {
        let dir = ScratchDir::new();
        let path = data_file(&dir, 32);
        let state = dir.path().join("progress.qbscan");
        let given = params(&[
            ("path", path.to_str().unwrap()),
            ("prewarm", "true"),
            ("regions", "32"),
            ("qd", "2"),
            ("state", state.to_str().unwrap()),
        ]);
        let spec = resolve("disk.scan", &given).unwrap();

        // Interrupted: a few steps, then the trial ends (finish reaps what is in flight).
        let mut workload = spec.workload(0).unwrap();
        let mut rec = crate::worker::Recording::new(1);
        for _ in 0..5 {
            assert_eq!(
                workload.step(&mut Samples { rec: &mut rec }),
                Step::Recorded
            );
        }
        workload.finish();
        let first_run = workload.counters();
        drop(workload);
        let read_first: f64 = first_run
            .iter()
            .find(|c| c.name == "prewarm_bytes_read")
            .unwrap()
            .value;
        let marks = std::fs::read(&state).unwrap();
        let done = marks.iter().filter(|&&b| b == b'#').count();
        assert!(
            (4..32).contains(&done),
            "{done} regions marked after 5 steps"
        );
        assert_eq!(read_first, (done << 20) as f64);

        // Resumed: only the rest is read, and the trial finishes by itself.
        let outcome = run_for(&spec, 60_000).unwrap();
        assert_eq!(
            counter(&outcome, "prewarm_bytes_skipped"),
            Some((done << 20) as f64)
        );
        assert_eq!(
            counter(&outcome, "prewarm_bytes_read"),
            Some(((32 - done) << 20) as f64)
        );
        assert_eq!(
            counter(&outcome, "prewarm_bytes_done"),
            Some((32 << 20) as f64)
        );
        assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
        assert_eq!(outcome.total.variants[0].bytes, ((32 - done) << 20) as u64);
        let marks = std::fs::read(&state).unwrap();
        assert!(marks.ends_with(&[b'#'; 32]));

        // Done already: nothing to read, finished at once.
        let outcome = run_for(&spec, 60_000).unwrap();
        assert_eq!(counter(&outcome, "prewarm_bytes_read"), Some(0.0));
        assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
    }

    #[test]
    fn a_parallel_prewarm_splits_the_target_into_disjoint_stripes() {
        let dir = ScratchDir::new();
        let path = data_file(&dir, 16);
        let spec = resolve(
            "disk.scan",
            &params(&[
                ("path", path.to_str().unwrap()),
                ("prewarm", "true"),
                ("threads", "2"),
                ("regions", "64"),
            ]),
        )
        .unwrap();
        let outcome = run_for(&spec, 60_000).unwrap();
        assert_eq!(
            counter(&outcome, "prewarm_bytes_read"),
            Some((16 << 20) as f64)
        );
        assert_eq!(outcome.total.variants[0].bytes, 16 << 20);
        assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
        let state = std::fs::read(format!("{}.qbscan", path.display())).unwrap();
        assert!(state.ends_with(&[b'#'; 64]));
    }
}
