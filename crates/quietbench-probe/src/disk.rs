//! `disk.seq` and `disk.rand`: sequential 128 KiB and random 16 KiB direct I/O at a queue depth,
//! the two shapes by which clouds cap a disk (MB/s at 128 KiB, IOPS at 16 KiB; CONTEXT.md §2),
//! compared with fio.
//!
//! Each probe thread owns a queue of `qd` requests (an io_uring ring, or helper threads where
//! io_uring is refused; see `disk/engine.rs`) and its own region of the target. A step reaps
//! whatever completed, records each request's submit-to-complete latency, and refills the queue
//! at once, so `qd` requests stay at the device, as fio keeps its iodepth.
//!
//! A block device is opened read-only unless `destructive=true`: a write mode on a device
//! without it is refused before anything is opened. A file is written only when the probe
//! created it (its mark is in the file's first block) or the user said `destructive=true`; a
//! file that is neither is refused in every mode, `mode=read` included, since laying out a
//! short file writes it (`disk/target.rs` has the rules).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use quietbench_vocab::metrics;

use crate::spec::IntParam;
use crate::{
    Counter, Merge, MetricSet, ParamError, ProbeSpec, RateBasis, Samples, Step, Throughput,
    Workload,
};

pub(crate) mod aligned;
pub(crate) mod engine;
pub(crate) mod params;
pub mod scan;
pub(crate) mod scan_state;
pub(crate) mod survey;
pub(crate) mod target;

use crate::rng::Rng;
use engine::{EngineChoice, EngineKind, IoQueue};
use params::{Params, TextParam};
use target::{TargetInfo, TargetKind};

const MIB: u64 = 1 << 20;

/// MB/s, decimal, as fio and the cloud providers' caps count.
const MB_PER_SEC: Throughput = Throughput {
    metric: metrics::READ_MB_PER_SEC,
    unit: "MB/s",
    bytes_per_unit: 1e6,
};

/// Reads.
pub const READ: MetricSet = MetricSet {
    rate_metric: metrics::READ_IOPS,
    rate_unit: "IOPS",
    latency_metric: metrics::READ_LATENCY,
    latency_unit: "ns",
    throughput: Some(MB_PER_SEC),
};

/// Writes.
pub const WRITE: MetricSet = MetricSet {
    rate_metric: metrics::WRITE_IOPS,
    rate_unit: "IOPS",
    latency_metric: metrics::WRITE_LATENCY,
    latency_unit: "ns",
    throughput: Some(Throughput {
        metric: metrics::WRITE_MB_PER_SEC,
        ..MB_PER_SEC
    }),
};

const READS: &[MetricSet] = &[READ];
const WRITES: &[MetricSet] = &[WRITE];
const READS_AND_WRITES: &[MetricSet] = &[READ, WRITE];

/// Integer parameters of disk.seq; disk.rand differs in its defaults only.
const SEQ_INTS: &[IntParam] = &[
    IntParam {
        name: "size_mib",
        default: 1024,
        min: 1,
        max: 1 << 30,
        meaning: "MiB of the target used: the file's size, or the first MiB of a device (default for a \
         device: all of it)",
    },
    IntParam {
        name: "block_kib",
        default: 128,
        min: 4,
        max: 16 << 10,
        meaning: "KiB per request, a multiple of 4",
    },
    IntParam {
        name: "qd",
        default: 16,
        min: 1,
        max: 1024,
        meaning: "requests kept in flight by each thread",
    },
    IntParam {
        name: "read_pct",
        default: 70,
        min: 0,
        max: 100,
        meaning: "percent of requests that read, in mode=mixed",
    },
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: 256,
        meaning: "probe threads, each with its own queue and its own region of the target",
    },
    SUBMIT_BATCH,
];

/// How many requests go to the kernel per submission system call.
pub(crate) const SUBMIT_BATCH: IntParam = IntParam {
    name: "submit_batch",
    default: 1,
    min: 1,
    max: 1024,
    meaning: "requests sent per submission system call (io_uring): 1 sends each as soon as its slot \
     frees, as fio does by default (iodepth_batch_submit=1); more saves system calls where the \
     CPU, not the device, is the limit",
};

const RAND_INTS: &[IntParam] = &[
    SEQ_INTS[0],
    IntParam {
        name: "block_kib",
        default: 16,
        min: 4,
        max: 16 << 10,
        meaning: "KiB per request, a multiple of 4",
    },
    IntParam {
        name: "qd",
        default: 32,
        min: 1,
        max: 1024,
        meaning: "requests kept in flight by each thread",
    },
    SEQ_INTS[3],
    SEQ_INTS[4],
    SUBMIT_BATCH,
];

const TEXTS: &[TextParam] = &[
    (
        "path",
        "",
        "an absolute path: a new file (created and filled with data), a file an earlier disk \
         probe created, or a block device",
    ),
    ("mode", "read", "read, write or mixed"),
    (
        "destructive",
        "false",
        "true to allow writing a block device, or a file no disk probe created (destroys its \
         data)",
    ),
    (
        "engine",
        "auto",
        "auto (io_uring, else threads), io_uring or threads",
    ),
];

/// Read, write or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
    Mixed { read_pct: u64 },
}

/// Everything a disk.seq/disk.rand thread needs, shared by the threads of a trial.
#[derive(Debug)]
struct Config {
    probe: &'static str,
    target: TargetInfo,
    random: bool,
    mode: Mode,
    /// Bytes of the target used.
    size: u64,
    block: u64,
    qd: usize,
    submit_batch: usize,
    threads: usize,
    engine: EngineKind,
    writable: bool,
    destructive: bool,
    /// Where the target's data starts: after the mark's block in a file, 0 on a device.
    base: u64,
    /// The file laid out for this trial, once, by whichever thread comes first: the others
    /// wait, then open that very file.
    prepared: OnceLock<Result<target::FileId, String>>,
}

/// Resolves disk.seq and disk.rand.
pub fn resolve(
    probe: &'static str,
    params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    let random = match probe {
        "disk.seq" => false,
        "disk.rand" => true,
        other => return Err(ParamError::UnknownProbe(other.to_string())),
    };
    let p = Params::parse(
        probe,
        params,
        if random { RAND_INTS } else { SEQ_INTS },
        TEXTS,
    )?;
    let path = PathBuf::from(p.required("path", "a file to create and use, or a block device")?);
    let mode = match p.choice("mode", &["read", "write", "mixed"])? {
        "read" => Mode::Read,
        "write" => Mode::Write,
        _ => Mode::Mixed {
            read_pct: p.int("read_pct"),
        },
    };
    if p.given("read_pct") && !matches!(mode, Mode::Mixed { .. }) {
        return Err(p.bad("read_pct", "applies to mode=mixed only"));
    }
    let destructive = p.flag("destructive")?;
    let engine = engine_param(&p)?;
    let block = request_bytes(&p, "block_kib")?;
    target::require_absolute(&path).map_err(|why| p.bad("path", why))?;
    let target = target::inspect(&path).map_err(|why| p.bad("path", why))?;
    let writes = mode != Mode::Read;
    let size = match target.kind {
        TargetKind::BlockDevice => {
            if writes && !destructive {
                return Err(ParamError::BadValue {
                    probe,
                    key: "mode".into(),
                    value: p.text("mode"),
                    why: format!(
                        "{} is a block device: writing it destroys the data on it, so it is \
                         opened read-only; pass destructive=true to write it",
                        path.display()
                    ),
                });
            }
            if writes && is_symlink(&path) {
                let real = std::fs::canonicalize(&path)
                    .map(|r| format!(" ({})", r.display()))
                    .unwrap_or_default();
                return Err(p.bad(
                    "path",
                    format!(
                        "{} is a symbolic link: a device is written only by its real path{real}",
                        path.display()
                    ),
                ));
            }
            let device = target::usable(target.size.unwrap_or(0));
            if p.given("size_mib") {
                let asked = p.int("size_mib") * MIB;
                if asked > device {
                    return Err(p.bad(
                        "size_mib",
                        format!("{} holds only {} MiB", path.display(), device / MIB),
                    ));
                }
                asked
            } else {
                device
            }
        }
        TargetKind::File => {
            target::check_file_target(&path, destructive).map_err(|why| p.bad("path", why))?;
            // The file is size_mib long; its first block is the probe's mark, not data.
            p.int("size_mib") * MIB - target::HEADER_BYTES
        }
    };
    let threads = p.int("threads") as usize;
    if size / threads as u64 / block == 0 {
        return Err(p.bad(
            "size_mib",
            format!(
                "too small for {threads} thread(s) of {} KiB requests: each thread needs a \
                 region of at least one request",
                block >> 10
            ),
        ));
    }
    let mut resolved = crate::spec::as_text(&p.ints);
    if !matches!(mode, Mode::Mixed { .. }) {
        resolved.remove("read_pct");
    }
    let size_mib = match target.kind {
        TargetKind::File => p.int("size_mib"),
        TargetKind::BlockDevice => size / MIB,
    };
    resolved.insert("size_mib".into(), size_mib.to_string());
    resolved.insert("path".into(), path.display().to_string());
    resolved.insert("mode".into(), p.text("mode"));
    resolved.insert("destructive".into(), destructive.to_string());
    resolved.insert("engine".into(), engine.name().to_string());
    // Where the data starts: after the mark's block in a file, at 0 on a device.
    let base = match target.kind {
        TargetKind::File => target::HEADER_BYTES,
        TargetKind::BlockDevice => 0,
    };
    let config = Arc::new(Config {
        probe,
        target,
        random,
        mode,
        size,
        block,
        qd: p.int("qd") as usize,
        submit_batch: p.int("submit_batch") as usize,
        threads,
        engine,
        writable: writes,
        destructive,
        base,
        prepared: OnceLock::new(),
    });
    Ok(ProbeSpec {
        name: probe,
        threads,
        resolved_params: resolved,
        metric_sets: match mode {
            Mode::Read => READS,
            Mode::Write => WRITES,
            Mode::Mixed { .. } => READS_AND_WRITES,
        },
        basis: RateBasis::Elapsed,
        work: crate::placement::WorkKind::Compute,
        factory: Arc::new(move |thread| {
            Ok(Box::new(RwWorkload::new(Arc::clone(&config), thread)?) as Box<dyn Workload>)
        }),
    })
}

/// Whether `path` itself is a symbolic link.
fn is_symlink(path: &std::path::Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// The file a thread's queue works on: a file is laid out first (once per trial).
fn open_target(config: &Config, seed: u64) -> Result<Arc<File>, String> {
    let target = &config.target;
    let prepared = match target.kind {
        TargetKind::File => Some(
            config
                .prepared
                .get_or_init(|| {
                    target::prepare_file(&target.path, config.size, seed, config.destructive)
                        .map(|p| p.id)
                })
                .clone()?,
        ),
        TargetKind::BlockDevice => None,
    };
    // The kind is re-read: the path may have changed since the parameters were checked, and a
    // device must never be opened for writing on the strength of an old look.
    let now = target::inspect(&target.path)?;
    if now.kind != target.kind {
        return Err(format!(
            "{} changed from a {:?} to a {:?} since the probe was set up",
            target.path.display(),
            target.kind,
            now.kind
        ));
    }
    let file = target::open_direct(&target.path, target.kind, config.writable)?;
    if let Some(id) = prepared {
        use std::os::unix::fs::MetadataExt;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", target.path.display()))?;
        if (meta.dev(), meta.ino()) != id {
            return Err(format!(
                "{} was replaced after it was laid out: refusing to use another file",
                target.path.display()
            ));
        }
    }
    Ok(Arc::new(file))
}

/// One thread of disk.seq or disk.rand.
struct RwWorkload {
    config: Arc<Config>,
    queue: IoQueue,
    region_start: u64,
    region_blocks: u64,
    next_block: u64,
    rng: Rng,
    slot_offset: Vec<u64>,
    slot_write: Vec<bool>,
    started: bool,
    error: Option<String>,
}

impl RwWorkload {
    fn new(config: Arc<Config>, thread: usize) -> Result<Self, String> {
        let seed = 0x5157_6265_6e63_6800 ^ thread as u64;
        let file = open_target(&config, seed)?;
        let (region_start, region_len) = stripe(config.size, config.threads, thread, config.block);
        let queue = IoQueue::new(
            config.engine,
            file,
            config.qd,
            config.block as usize,
            seed,
            config.submit_batch,
        )?;
        let slots = queue.slots();
        Ok(Self {
            region_start,
            region_blocks: region_len / config.block,
            next_block: 0,
            rng: Rng::new(seed),
            slot_offset: vec![0; slots],
            slot_write: vec![false; slots],
            started: false,
            error: None,
            queue,
            config,
        })
    }

    /// Sends the next request on `slot`.
    #[inline]
    fn issue(&mut self, slot: usize) -> Result<(), String> {
        let write = match self.config.mode {
            Mode::Read => false,
            Mode::Write => true,
            Mode::Mixed { read_pct } => self.rng.below(100) >= read_pct,
        };
        let block = if self.config.random {
            self.rng.below(self.region_blocks)
        } else {
            let b = self.next_block;
            self.next_block = if b + 1 == self.region_blocks {
                0
            } else {
                b + 1
            };
            b
        };
        let offset = self.config.base + self.region_start + block * self.config.block;
        self.slot_offset[slot] = offset;
        self.slot_write[slot] = write;
        self.queue
            .submit(slot, write, offset, self.config.block as usize)
            .map_err(|e| self.io_error(write, offset, &e.to_string()))
    }

    fn io_error(&self, write: bool, offset: u64, why: &str) -> String {
        format!(
            "{}: {} of {} bytes at offset {offset} of {} failed: {why}",
            self.config.probe,
            if write { "write" } else { "read" },
            self.config.block,
            self.config.target.path.display()
        )
    }

    fn fail(&mut self, message: String) -> Step {
        self.error = Some(message);
        Step::Failed
    }
}

impl Workload for RwWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        match self.config.mode {
            Mode::Read => READS,
            Mode::Write => WRITES,
            Mode::Mixed { .. } => READS_AND_WRITES,
        }
    }

    #[inline]
    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        if !self.started {
            self.started = true;
            for slot in 0..self.queue.slots() {
                if let Err(message) = self.issue(slot) {
                    return self.fail(message);
                }
            }
        }
        let n = match self.queue.reap(1) {
            Ok(n) => n,
            Err(e) => {
                return self.fail(format!(
                    "{}: waiting for I/O failed: {e}",
                    self.config.probe
                ));
            }
        };
        let write_metric_set = usize::from(matches!(self.config.mode, Mode::Mixed { .. }));
        for i in 0..n {
            let c = self.queue.completion(i);
            let write = self.slot_write[c.slot];
            if c.result != self.config.block as i64 {
                let why = if c.result < 0 {
                    std::io::Error::from_raw_os_error(-c.result as i32).to_string()
                } else {
                    format!("only {} bytes transferred", c.result)
                };
                let message = self.io_error(write, self.slot_offset[c.slot], &why);
                return self.fail(message);
            }
            let metric_set = if write { write_metric_set } else { 0 };
            samples.record(metric_set, c.latency_ns, self.config.block);
            if let Err(message) = self.issue(c.slot) {
                return self.fail(message);
            }
        }
        Step::Recorded
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        self.queue.drain();
    }

    fn counters(&mut self) -> Vec<Counter> {
        engine_counters(&self.queue)
    }
}

/// Most bytes of I/O buffers one thread allocates (and io_uring pins): qd x request size.
pub(crate) const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// The `engine` parameter, resolved against what this kernel allows.
pub(crate) fn engine_param(p: &Params<'_>) -> Result<EngineKind, ParamError> {
    EngineChoice::parse(&p.text("engine"))
        .ok_or_else(|| p.bad("engine", "expected auto, io_uring or threads"))?
        .resolve()
        .map_err(|why| p.bad("engine", why))
}

/// The request size in bytes from `size_key` (KiB): a multiple of 4, and `qd` such requests
/// within the per-thread buffer limit.
pub(crate) fn request_bytes(p: &Params<'_>, size_key: &'static str) -> Result<u64, ParamError> {
    let kib = p.int(size_key);
    if !kib.is_multiple_of(4) {
        return Err(p.bad(
            size_key,
            "must be a multiple of 4 (direct I/O moves whole 4 KiB pages)",
        ));
    }
    check_buffers(p, size_key, p.int("qd"), kib << 10)?;
    Ok(kib << 10)
}

fn check_buffers(p: &Params<'_>, size_key: &str, qd: u64, request: u64) -> Result<(), ParamError> {
    if qd * request > MAX_BUFFER_BYTES {
        return Err(p.bad(
            size_key,
            format!(
                "qd={qd} requests of {} KiB need {} MiB of buffers per thread, more than the \
                 {} MiB allowed: lower qd or the request size",
                request >> 10,
                (qd * request) >> 20,
                MAX_BUFFER_BYTES >> 20
            ),
        ));
    }
    Ok(())
}

/// Which engine ran, as counters (1 or 0; averaged over threads), and how much of the I/O
/// buffers huge pages back (absent when /proc/self/smaps could not say).
pub(crate) fn engine_counters(queue: &IoQueue) -> Vec<Counter> {
    let huge = queue.huge_page_pct().map(|pct| Counter {
        name: metrics::IO_BUFFERS_HUGE_PAGES,
        unit: "%",
        value: pct,
        merge: Merge::Mean,
    });
    let mut counters = vec![
        Counter {
            name: metrics::ENGINE_IO_URING,
            unit: "bool",
            value: f64::from(u8::from(queue.kind() == EngineKind::IoUring)),
            merge: Merge::Mean,
        },
        Counter {
            name: metrics::IO_URING_FIXED_BUFFERS,
            unit: "bool",
            value: f64::from(u8::from(queue.fixed_buffers())),
            merge: Merge::Mean,
        },
    ];
    counters.extend(huge);
    counters
}

/// Thread `thread`'s region of a target of `size` bytes split `threads` ways: its start and
/// length, both whole multiples of `unit` (the remainder past the last whole unit is unused).
pub(crate) fn stripe(size: u64, threads: usize, thread: usize, unit: u64) -> (u64, u64) {
    let units = size / unit;
    let threads = threads.max(1) as u64;
    let t = thread as u64;
    let first = units * t / threads;
    let end = units * (t + 1) / threads;
    (first * unit, (end - first) * unit)
}

/// A scratch directory for tests on the real disk (direct I/O does not work on tmpfs), removed
/// when dropped. `QB_DISK_TEST_DIR` chooses where; the default is the temp directory.
#[cfg(test)]
pub(crate) struct ScratchDir(PathBuf);

#[cfg(test)]
impl ScratchDir {
    pub(crate) fn new() -> Self {
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let base = std::env::var_os("QB_DISK_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "qb-disk-test-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `spec` for `ms` milliseconds on one thread per CPU the placement gives, for tests.
#[cfg(test)]
pub(crate) fn run_for(spec: &ProbeSpec, ms: u64) -> Result<crate::TrialOutcome, crate::RunError> {
    use std::sync::atomic::AtomicBool;
    let allowed = crate::affinity::current_thread_affinity().unwrap();
    let plan = crate::plan_placement(spec.threads, &allowed, &[]).unwrap();
    let settings = crate::TrialSettings {
        duration: std::time::Duration::from_millis(ms),
        interval: std::time::Duration::from_millis(ms.min(250)),
        plan,
        unpinned: None,
    };
    crate::run_trial(
        spec,
        &settings,
        &Arc::new(AtomicBool::new(false)),
        &mut |_| true,
    )
}

#[cfg(test)]
mod tests;
