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
//! [`Workload::step`]s, not when the workload is made: the probe thread is pinned by then, so
//! Linux's first-touch policy puts the pages on the pinned CPU's NUMA node (the workload may
//! be built on the supervisor's thread). Set-up is spread over steps of at most
//! [`SETUP_STEP`] that record nothing, and both probes use [`RateBasis::OwnTime`], so set-up
//! time counts in no rate (it does count in the trial's duration: building a 256 MiB rung
//! takes about a second, a 1 GiB rung several).
//!
//! With `huge_pages=1` (the default) the buffers are advised `MADV_HUGEPAGE` before they are
//! touched. Otherwise the result would depend on the host's THP setting (`madvise` on Debian
//! and most clouds, where plain allocations get 4 KiB pages) and measure the page walker as
//! much as memory: on the H100 host, 4 KiB pages made the 1 MiB rung 11 instead of 7 ns and
//! the 256 MiB rung 169 instead of 138 ns. `huge_pages=0` keeps whatever the host gives, which
//! is what lmbench and STREAM get.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::{IntParam, as_text, resolve_integers};
use crate::placement::WorkKind;
use crate::{
    Counter, Merge, ParamError, ProbeSpec, RateBasis, Samples, Step, Throughput, Variant, Workload,
};

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
const RUNG_COUNTERS: [&str; 7] = [
    "load_ns_16k",
    "load_ns_128k",
    "load_ns_1m",
    "load_ns_8m",
    "load_ns_64m",
    "load_ns_256m",
    "load_ns_1g",
];

const fn rung(rate_metric: &'static str, latency_metric: &'static str) -> Variant {
    Variant {
        rate_metric,
        rate_unit: "loads/s",
        latency_metric,
        latency_unit: "ns",
        throughput: None,
    }
}

/// One variant per rung of [`RUNG_BYTES`]. A trial uses the prefix `max_size_mib` allows.
pub const LATENCY_VARIANTS: &[Variant] = &[
    rung("loads_per_sec_16k", "load_latency_16k"),
    rung("loads_per_sec_128k", "load_latency_128k"),
    rung("loads_per_sec_1m", "load_latency_1m"),
    rung("loads_per_sec_8m", "load_latency_8m"),
    rung("loads_per_sec_64m", "load_latency_64m"),
    rung("loads_per_sec_256m", "load_latency_256m"),
    rung("loads_per_sec_1g", "load_latency_1g"),
];

const fn kernel(
    rate_metric: &'static str,
    latency_metric: &'static str,
    gb_metric: &'static str,
) -> Variant {
    Variant {
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
pub const BANDWIDTH_VARIANTS: &[Variant] = &[
    kernel(
        "passes_per_sec_read",
        "pass_latency_read",
        "gb_per_sec_read",
    ),
    kernel(
        "passes_per_sec_copy",
        "pass_latency_copy",
        "gb_per_sec_copy",
    ),
    kernel(
        "passes_per_sec_triad",
        "pass_latency_triad",
        "gb_per_sec_triad",
    ),
];

/// Bytes per element each kernel is credited with, as STREAM counts them: what the program
/// reads and writes, not the write-allocate reads the hardware adds for copy and triad.
const STREAM_BYTES_PER_ELEM: [u64; 3] = [8, 16, 24];

/// STREAM's triad scalar.
const TRIAD_SCALAR: f64 = 3.0;

const THREADS: IntParam = (
    "threads",
    1,
    1,
    1024,
    "probe threads, each pinned to its own CPU and with its own memory",
);
const HUGE_PAGES: IntParam = (
    "huge_pages",
    1,
    0,
    1,
    "1: advise transparent huge pages (MADV_HUGEPAGE) before first touch; 0: the host's default",
);

/// mem.latency parameters: name, default, minimum, maximum, meaning.
pub const LATENCY_PARAMS: &[IntParam] = &[
    (
        "max_size_mib",
        256,
        1,
        1024,
        "largest working set in MiB: rungs (16 KiB, 128 KiB, 1, 8, 64, 256, 1024 MiB) above it are dropped",
    ),
    (
        "loads_per_step",
        1 << 16,
        1 << 10,
        1 << 22,
        "dependent loads timed as one sample (the sample is their mean latency); at most 2^22, \
         about a second of DRAM loads",
    ),
    (
        "visit_ms",
        250,
        10,
        10_000,
        "time spent on one rung before moving to the next (see the module doc: an L3-sized rung \
         needs many passes to settle in the L3)",
    ),
    THREADS,
    HUGE_PAGES,
];

/// mem.bandwidth parameters.
pub const BANDWIDTH_PARAMS: &[IntParam] = &[
    (
        "size_mib",
        256,
        1,
        2048,
        "MiB of each of the three f64 arrays per thread; STREAM's rule: at least 4x the last-level cache \
         (at most 2048: one pass is one event, and a triad pass over 2 GiB arrays already moves 8 GiB)",
    ),
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
                variants: &LATENCY_VARIANTS[..rungs],
                // Per-rung (per-kernel) samples alternate: each rate over its own samples' time.
                basis: RateBasis::OwnTime,
                work: WorkKind::Compute,
                factory: Arc::new(move |thread| {
                    if thread == 0 {
                        check_memory(probe, per_thread, threads, mem_available())?;
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
                variants: BANDWIDTH_VARIANTS,
                basis: RateBasis::OwnTime,
                work: WorkKind::Compute,
                factory: Arc::new(move |thread| {
                    if thread == 0 {
                        check_memory(probe, 3 * bytes_each, threads, mem_available())?;
                    }
                    Ok(Box::new(BandwidthWorkload::new(bytes_each, huge_pages)))
                }),
            })
        }
        other => Err(ParamError::UnknownProbe(other.to_string())),
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

fn mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// SplitMix64 (Steele, Lea and Flood): tiny, seedable, and good enough to shuffle with. The
/// shuffle only has to defeat prefetchers; a fixed seed makes a rung's layout the same on
/// every run, so runs differ by the machine, not by the permutation.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift; the bias is below 2^-32 for any
    /// bound this module uses).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
    }
}

/// One cache line of a pointer chase: the address of the next line, then padding.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line {
    next: usize,
    _pad: [usize; 7],
}

const _: () = assert!(std::mem::size_of::<Line>() == LINE_BYTES);

/// Longest a set-up step (allocating, touching, shuffling) runs before it hands back to the
/// harness. Set-up is spread over steps so that no step outlasts the reporting interval (the
/// controller takes an agent that sends nothing for a few seconds for a stalled one) and a
/// cancel is seen promptly; a 1 GiB rung takes several seconds to shuffle.
const SETUP_STEP: Duration = Duration::from_millis(200);

/// Work done between two looks at the clock during set-up: lines, or array blocks.
const SETUP_BATCH: usize = 1 << 15;

/// Runs `work(SETUP_BATCH)` until it reports done or [`SETUP_STEP`] has passed.
fn for_a_setup_step(mut work: impl FnMut(usize) -> bool) -> bool {
    let start = Instant::now();
    loop {
        if work(SETUP_BATCH) {
            return true;
        }
        if start.elapsed() >= SETUP_STEP {
            return false;
        }
    }
}

/// Lines in a 2 MiB huge page.
const HUGE_PAGE_LINES: usize = (2 << 20) / LINE_BYTES;

/// A [`PointerCycle`] under construction, built a batch at a time: first touch (each line
/// holding its own index), Sattolo's shuffle of those indices, then indices turned into
/// addresses.
///
/// Sattolo's algorithm is Fisher-Yates with j < i strictly: the result is a uniformly random
/// permutation with exactly one cycle, so the walk visits every line before it returns. It
/// runs in place on the buffer: no separate index array (64 MiB for a 1 GiB rung).
///
/// With huge pages the cycle starts on a 2 MiB boundary of an allocation that extends at
/// least 2 MiB past it, so the kernel can back even the 1 MiB rung with one huge page: on 4
/// KiB pages its 256 pages overflow the first-level TLB, and on the development VM every load
/// then paid a second-level TLB hit (9.8 instead of 7.3 ns per load). The padding costs at
/// most 4 MiB of address space per rung.
pub struct CycleBuilder {
    /// `start` padding lines, then the cycle's lines.
    lines: Vec<Line>,
    start: usize,
    target: usize,
    rng: SplitMix64,
    /// The next line Sattolo's loop swaps (it runs from the top down); done at 0.
    shuffle_at: usize,
    /// Lines whose index has been turned into an address.
    linked: usize,
}

impl CycleBuilder {
    /// Reserves `lines` cache lines (at least one), touching none yet.
    pub fn new(lines: usize, seed: u64, huge_pages: bool) -> Result<Self, String> {
        let target = lines.max(1);
        let padding = if huge_pages { 2 * HUGE_PAGE_LINES } else { 0 };
        let buf: Vec<Line> = reserve(target + padding, huge_pages)?;
        let start = if huge_pages {
            // The allocation is line-aligned, so whole lines reach the boundary.
            let huge = HUGE_PAGE_LINES * LINE_BYTES;
            (huge - buf.as_ptr().addr() % huge) % huge / LINE_BYTES
        } else {
            0
        };
        Ok(Self {
            lines: buf,
            start,
            target,
            rng: SplitMix64(seed),
            shuffle_at: target - 1,
            linked: 0,
        })
    }

    /// Does up to `budget` lines' worth of work; true when the cycle is complete.
    pub fn work(&mut self, budget: usize) -> bool {
        let mut budget = budget.max(1);
        let start = self.start;
        let filled = self.lines.len();
        if filled < start + self.target {
            let k = budget.min(start + self.target - filled);
            // Within the reserved capacity: never reallocates. Padding lines hold 0.
            self.lines.extend((filled..filled + k).map(|i| Line {
                next: i.saturating_sub(start),
                _pad: [0; 7],
            }));
            budget -= k;
        }
        let from = start.min(self.lines.len());
        let cycle = &mut self.lines[from..];
        while budget > 0 && self.shuffle_at > 0 {
            let i = self.shuffle_at;
            let j = self.rng.below(i as u64) as usize;
            let (a, b) = (cycle[i].next, cycle[j].next);
            cycle[i].next = b;
            cycle[j].next = a;
            self.shuffle_at -= 1;
            budget -= 1;
        }
        if budget > 0 && self.shuffle_at == 0 {
            let base = cycle.as_ptr().addr();
            let k = budget.min(self.target - self.linked);
            for line in &mut cycle[self.linked..self.linked + k] {
                line.next = base + line.next * LINE_BYTES;
            }
            self.linked += k;
        }
        self.linked == self.target
    }

    /// The cycle, once [`CycleBuilder::work`] has returned true; the builder back otherwise.
    pub fn finish(self) -> Result<PointerCycle, Self> {
        if self.linked < self.target {
            return Err(self);
        }
        let cursor = self.lines[self.start..].as_ptr().addr();
        Ok(PointerCycle {
            lines: self.lines,
            start: self.start,
            cursor,
            rng: self.rng,
        })
    }
}

/// A single random cycle through every line of a buffer, and where the walk stands.
///
/// Invariant: every line's `next` from `start` on, and `cursor`, are addresses of lines of
/// `lines[start..]`; `lines` is never resized after construction (only
/// [`CycleBuilder::finish`] makes one).
pub struct PointerCycle {
    lines: Vec<Line>,
    start: usize,
    cursor: usize,
    /// Where the seeded stream of permutations stands, for [`PointerCycle::rebuild`].
    rng: SplitMix64,
}

impl PointerCycle {
    /// Builds, in one go, a cycle over `lines` cache lines in the order of a seeded random
    /// cyclic permutation, allocating and first touching the memory on the calling thread.
    pub fn new(lines: usize, seed: u64, huge_pages: bool) -> Result<Self, String> {
        let mut builder = CycleBuilder::new(lines, seed, huge_pages)?;
        while !builder.work(usize::MAX) {}
        Ok(builder
            .finish()
            .unwrap_or_else(|_| panic!("a builder that reported done finishes")))
    }

    /// Number of lines in the cycle.
    pub fn len(&self) -> usize {
        self.lines.len() - self.start
    }

    /// Always false: a cycle has at least one line.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of the line the walk stands on.
    pub fn position(&self) -> usize {
        (self.cursor - self.lines[self.start..].as_ptr().addr()) / LINE_BYTES
    }

    /// Takes the cycle apart to build the next permutation of the seeded stream in the same
    /// memory: same lines, same pages, a fresh random order (see [`LatencyWorkload`] for why
    /// a visit rebuilds its rung).
    pub fn rebuild(self) -> CycleBuilder {
        let target = self.len();
        let mut lines = self.lines;
        // Line is Copy: truncating frees nothing, and the builder refills the same capacity.
        lines.truncate(self.start);
        CycleBuilder {
            lines,
            start: self.start,
            target,
            rng: self.rng,
            shuffle_at: target - 1,
            linked: 0,
        }
    }

    /// The address of the cycle's first line.
    pub fn base_addr(&self) -> usize {
        self.lines[self.start..].as_ptr().addr()
    }

    /// Walks `loads` dependent loads from where the last walk stopped.
    #[inline(never)]
    pub fn walk(&mut self, loads: u64) {
        let base = self.lines.as_ptr().cast::<usize>();
        let mut p = self.cursor;
        for _ in 0..loads {
            // SAFETY: by the invariant, `p` is the address of a line of `lines`, whose first
            // field is an initialized, aligned usize; `with_addr` keeps the buffer's
            // provenance. Volatile: each load must happen, in order, and none be merged.
            p = unsafe { base.with_addr(p).read_volatile() };
        }
        self.cursor = black_box(p);
    }
}

/// The largest rung a visit rebuilds (2^20 lines, 64 MiB: a rebuild is then at most ~0.3 s,
/// in bounded set-up steps). A larger rung opens its visit with a short untimed walk instead,
/// a quarter of a timed one, which only refills the TLB: it lives in DRAM anyway.
const REBUILD_MAX_LINES: usize = 1 << 20;

/// One rung of a thread's ladder.
enum Rung {
    /// Not allocated yet: its first visit builds it.
    Unbuilt,
    Building(CycleBuilder),
    Ready(PointerCycle),
}

/// `mem.latency` for one thread. It visits the rungs in turn, smallest first. A visit opens
/// with untimed set-up steps that record nothing: the rung's first visit allocates and builds
/// it, later visits of a rung up to 64 MiB rebuild it (a fresh permutation, in place), larger
/// ones take a short walk. Then come timed steps until `visit` has passed.
///
/// Why visits, and why rebuild: measured on the H100 host (Sapphire Rapids-class, 300 MiB L3
/// shared with other tenants), an 8 MiB cycle chased right after it is built reads 36-42 ns
/// per load (L3). Once a DRAM-sized walk has run in between (as the larger rungs do on every
/// round), read-only passes over the same 8 MiB come from DRAM, 110-120 ns, for 10 to more
/// than 40 whole passes before the L3's adaptive insertion lets them back in; a sequential
/// write pass or a walk that writes each line did not help, a rebuild did at once (43-46 ns).
/// One rung per step read 123-137 ns for 8 MiB against 40-62 ns for a C chase that, like
/// lmbench's lat_mem_rd, initializes each size just before chasing it. Rebuilding at each
/// visit measures what those tools measure: a freshly initialized working set of that size,
/// chased for `visit`. Visits of 250 ms still interleave all rungs within a second or two, so
/// drift touches them alike.
pub struct LatencyWorkload {
    rungs: usize,
    loads_per_step: u64,
    visit: Duration,
    huge_pages: bool,
    seed: u64,
    ladder: Vec<Rung>,
    /// The rung being visited, and when its timed steps began (None: still setting up).
    rung: usize,
    visit_began: Option<Instant>,
    /// Per rung: nanoseconds and loads of the timed walks, for the precise means.
    total_ns: Vec<u128>,
    total_loads: Vec<u64>,
    error: Option<String>,
}

impl LatencyWorkload {
    /// The first `rungs` rungs of [`RUNG_BYTES`]; `thread` varies the seed.
    pub fn new(
        rungs: usize,
        loads_per_step: u64,
        visit: Duration,
        huge_pages: bool,
        thread: u64,
    ) -> Self {
        let rungs = rungs.clamp(1, RUNG_BYTES.len());
        Self {
            rungs,
            loads_per_step: loads_per_step.max(1),
            visit,
            huge_pages,
            seed: 0x6d65_6d2e_6c61_7400 ^ thread.wrapping_mul(0x1000_0000_01b3),
            ladder: (0..rungs).map(|_| Rung::Unbuilt).collect(),
            rung: 0,
            visit_began: None,
            total_ns: vec![0; rungs],
            total_loads: vec![0; rungs],
            error: None,
        }
    }

    /// One untimed step that opens a visit: allocate, build, rebuild or warm the rung.
    fn setup_step(&mut self) -> Step {
        let rung = self.rung;
        match std::mem::replace(&mut self.ladder[rung], Rung::Unbuilt) {
            Rung::Unbuilt => {
                let lines = RUNG_BYTES[rung] / LINE_BYTES;
                match CycleBuilder::new(lines, self.seed ^ rung as u64, self.huge_pages) {
                    Ok(builder) => self.ladder[rung] = Rung::Building(builder),
                    Err(e) => {
                        self.error = Some(e);
                        return Step::Failed;
                    }
                }
            }
            Rung::Building(mut builder) => {
                self.ladder[rung] = if for_a_setup_step(|batch| builder.work(batch)) {
                    match builder.finish() {
                        Ok(cycle) => {
                            self.visit_began = Some(Instant::now());
                            Rung::Ready(cycle)
                        }
                        Err(builder) => Rung::Building(builder),
                    }
                } else {
                    Rung::Building(builder)
                };
            }
            Rung::Ready(cycle) if cycle.len() <= REBUILD_MAX_LINES => {
                self.ladder[rung] = Rung::Building(cycle.rebuild());
            }
            Rung::Ready(mut cycle) => {
                cycle.walk(self.loads_per_step / 4);
                self.ladder[rung] = Rung::Ready(cycle);
                self.visit_began = Some(Instant::now());
            }
        }
        Step::Recorded
    }
}

impl Workload for LatencyWorkload {
    fn variants(&self) -> &'static [Variant] {
        &LATENCY_VARIANTS[..self.rungs]
    }

    /// A visit's set-up step, or `loads_per_step` timed loads of the rung being visited,
    /// recorded as ONE sample, their mean in ns (rounded): the histogram is of per-step mean
    /// latencies, not of single loads (one load is far below the clock's resolution).
    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        let (Some(began), Rung::Ready(cycle)) = (self.visit_began, &mut self.ladder[self.rung])
        else {
            return self.setup_step();
        };
        let rung = self.rung;
        let t0 = Instant::now();
        cycle.walk(self.loads_per_step);
        let t1 = Instant::now();
        let ns = t1.duration_since(t0).as_nanos();
        let loads = self.loads_per_step;
        self.total_ns[rung] += ns;
        self.total_loads[rung] += loads;
        let per_load = (ns + u128::from(loads / 2)) / u128::from(loads);
        samples.record(rung, u64::try_from(per_load).unwrap_or(u64::MAX), 0);
        if t1.duration_since(began) >= self.visit {
            self.rung = (rung + 1) % self.rungs;
            self.visit_began = None;
        }
        Step::Recorded
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        // Give the memory back now rather than when the thread's workload is dropped.
        self.ladder.clear();
    }

    /// The mean ns per load of each rung measured (none for a rung the trial never timed).
    fn counters(&mut self) -> Vec<Counter> {
        (0..self.rungs)
            .filter(|&r| self.total_loads[r] > 0)
            .map(|r| Counter {
                name: RUNG_COUNTERS[r],
                unit: "ns",
                value: self.total_ns[r] as f64 / self.total_loads[r] as f64,
                merge: Merge::Mean,
            })
            .collect()
    }
}

/// Eight f64, one cache line, aligned: vector loads never split a line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([f64; 8]);

/// Which kernel a pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// sum += a[i]
    Read,
    /// a[i] = b[i]
    Copy,
    /// a[i] = b[i] + s * c[i]
    Triad,
}

impl Kernel {
    /// The three, in variant order.
    pub const ALL: [Kernel; 3] = [Kernel::Read, Kernel::Copy, Kernel::Triad];
}

/// STREAM's three arrays of one thread, and kernels over them.
pub struct StreamArrays {
    a: Vec<Block>,
    b: Vec<Block>,
    c: Vec<Block>,
    /// Blocks in each array once touched.
    target: usize,
    avx2: bool,
}

impl StreamArrays {
    /// Three arrays of `bytes_each` bytes (rounded down to whole lines, at least one),
    /// allocated and first touched on the calling thread.
    pub fn new(bytes_each: usize, huge_pages: bool) -> Result<Self, String> {
        let mut arrays = Self::reserve(bytes_each, huge_pages)?;
        while !arrays.touch(usize::MAX) {}
        Ok(arrays)
    }

    /// Reserves the arrays without touching them; [`StreamArrays::touch`] fills them.
    pub fn reserve(bytes_each: usize, huge_pages: bool) -> Result<Self, String> {
        let target = (bytes_each / LINE_BYTES).max(1);
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Ok(Self {
            a: reserve(target, huge_pages)?,
            b: reserve(target, huge_pages)?,
            c: reserve(target, huge_pages)?,
            target,
            avx2,
        })
    }

    /// Fills (first touches) up to `budget` more blocks: a = 0, b = 1, c = 2, as STREAM starts
    /// (scaled). True once every array is full.
    pub fn touch(&mut self, budget: usize) -> bool {
        let mut budget = budget.max(1);
        for (array, value) in [(&mut self.a, 0.0), (&mut self.b, 1.0), (&mut self.c, 2.0)] {
            let k = budget.min(self.target - array.len());
            // Within the reserved capacity: never reallocates.
            array.resize(array.len() + k, Block([value; 8]));
            budget -= k;
        }
        self.c.len() == self.target
    }

    /// Bytes one pass of `kernel` is credited with, as STREAM counts.
    pub fn bytes(&self, kernel: Kernel) -> u64 {
        (self.target * 8) as u64 * STREAM_BYTES_PER_ELEM[kernel as usize]
    }

    /// One full pass of `kernel` (over what has been touched so far).
    pub fn pass(&mut self, kernel: Kernel) {
        match kernel {
            Kernel::Read => {
                black_box(read_pass(&self.b, self.avx2));
            }
            Kernel::Copy => copy_pass(&mut self.a, &self.b, self.avx2),
            Kernel::Triad => triad_pass(&mut self.a, &self.b, &self.c, self.avx2),
        }
        black_box(self.a.as_ptr());
    }

    /// The first element of `a`, for tests.
    pub fn first_of_a(&self) -> f64 {
        self.a[0].0[0]
    }
}

// The kernels: plain Rust over whole cache lines, compiled twice (SSE2, the x86-64 baseline,
// and AVX2 chosen at run time), so one binary is fast everywhere without -C target-cpu.
// - read keeps 32 partial sums: eight 4-wide chains hide the 4-cycle FP add, which a single
//   sum (the compiler may not reorder FP adds) would serialize at one add per 4 cycles.
// - copy adds 0.0 to each element. A bare copy loop is turned into a call to memcpy by LLVM,
//   and glibc's memcpy switches to non-temporal stores above a size it derives from the
//   host's L3, so the instruction mix would change from host to host. x + 0.0 is not an
//   identity (-0.0 + 0.0 = +0.0), so it survives, and costs nothing in a memory-bound loop.
// - triad does not fuse multiply and add, like STREAM compiled by gcc -O2.
// Stores are ordinary ones, as gcc emits for STREAM: the hardware reads each destination line
// before writing it (write-allocate), so copy and triad move 24 and 32 B/element, credited
// 16 and 24 as STREAM does.

#[inline(always)]
fn read_body(b: &[Block]) -> f64 {
    let (quads, rest) = b.as_chunks::<4>();
    let mut acc = [[0.0f64; 8]; 4];
    for quad in quads {
        for (lanes, block) in acc.iter_mut().zip(quad) {
            for (sum, x) in lanes.iter_mut().zip(&block.0) {
                *sum += x;
            }
        }
    }
    // The remainder (at most three lines) into a separate sum: folding it into `acc` makes
    // LLVM keep the accumulators in memory for the whole main loop.
    let mut total = 0.0;
    for block in rest {
        for x in block.0 {
            total += x;
        }
    }
    for lanes in acc {
        for x in lanes {
            total += x;
        }
    }
    total
}

#[inline(always)]
fn copy_body(a: &mut [Block], b: &[Block]) {
    for (d, s) in a.iter_mut().zip(b) {
        for (x, y) in d.0.iter_mut().zip(&s.0) {
            *x = y + 0.0;
        }
    }
}

#[inline(always)]
fn triad_body(a: &mut [Block], b: &[Block], c: &[Block]) {
    for ((d, x), y) in a.iter_mut().zip(b).zip(c) {
        for (out, (x, y)) in d.0.iter_mut().zip(x.0.iter().zip(&y.0)) {
            *out = x + TRIAD_SCALAR * y;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_avx2(b: &[Block]) -> f64 {
    read_body(b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn copy_avx2(a: &mut [Block], b: &[Block]) {
    copy_body(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn triad_avx2(a: &mut [Block], b: &[Block], c: &[Block]) {
    triad_body(a, b, c)
}

#[inline(never)]
fn read_pass(b: &[Block], avx2: bool) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only when the running CPU reported AVX2 (StreamArrays::new).
        return unsafe { read_avx2(b) };
    }
    let _ = avx2;
    read_body(b)
}

#[inline(never)]
fn copy_pass(a: &mut [Block], b: &[Block], avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in read_pass.
        return unsafe { copy_avx2(a, b) };
    }
    let _ = avx2;
    copy_body(a, b)
}

#[inline(never)]
fn triad_pass(a: &mut [Block], b: &[Block], c: &[Block], avx2: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in read_pass.
        return unsafe { triad_avx2(a, b, c) };
    }
    let _ = avx2;
    triad_body(a, b, c)
}

/// `mem.bandwidth` for one thread: set-up steps that record nothing (reserve, touch the
/// arrays in bounded steps, one untimed pass of each kernel), then kernels in turn, one full
/// pass per step, timed by the harness.
pub struct BandwidthWorkload {
    bytes_each: usize,
    huge_pages: bool,
    arrays: Option<StreamArrays>,
    touched: bool,
    /// Untimed passes left (faults, TLB, the first pass's odd cache state).
    warm_passes: usize,
    next: usize,
    error: Option<String>,
}

impl BandwidthWorkload {
    /// Three arrays of `bytes_each` bytes.
    pub fn new(bytes_each: usize, huge_pages: bool) -> Self {
        Self {
            bytes_each,
            huge_pages,
            arrays: None,
            touched: false,
            warm_passes: Kernel::ALL.len(),
            next: 0,
            error: None,
        }
    }
}

impl Workload for BandwidthWorkload {
    fn variants(&self) -> &'static [Variant] {
        BANDWIDTH_VARIANTS
    }

    fn step(&mut self, _samples: &mut Samples<'_>) -> Step {
        let Some(arrays) = &mut self.arrays else {
            return match StreamArrays::reserve(self.bytes_each, self.huge_pages) {
                Ok(arrays) => {
                    self.arrays = Some(arrays);
                    Step::Recorded
                }
                Err(e) => {
                    self.error = Some(e);
                    Step::Failed
                }
            };
        };
        if !self.touched {
            self.touched = for_a_setup_step(|batch| arrays.touch(batch));
            return Step::Recorded;
        }
        let variant = self.next;
        self.next = (variant + 1) % Kernel::ALL.len();
        let kernel = Kernel::ALL[variant];
        arrays.pass(kernel);
        if self.warm_passes > 0 {
            self.warm_passes -= 1;
            return Step::Recorded;
        }
        Step::Timed {
            variant,
            bytes: arrays.bytes(kernel),
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        self.arrays = None;
    }
}

/// An empty vector with room for `len` elements, advised for huge pages when asked, and not
/// yet touched: the caller's writes are the first touch, on its (pinned) thread. Fails,
/// rather than aborting the agent, when the allocation is refused.
fn reserve<T>(len: usize, huge_pages: bool) -> Result<Vec<T>, String> {
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(len).map_err(|e| {
        format!(
            "cannot allocate {} MiB for a memory probe: {e}",
            (len * std::mem::size_of::<T>()) >> 20
        )
    })?;
    if huge_pages {
        advise_huge_pages(v.as_ptr().addr(), len * std::mem::size_of::<T>());
    }
    Ok(v)
}

/// MADV_HUGEPAGE over the whole pages of `[start, start + len)`. Best effort: a kernel
/// without THP refuses it, and the probe then runs on small pages.
fn advise_huge_pages(start: usize, len: usize) {
    const PAGE: usize = 4096;
    let first = start.next_multiple_of(PAGE);
    let end = (start + len) / PAGE * PAGE;
    if end <= first {
        return;
    }
    // SAFETY: the range lies inside an allocation this thread owns and has not yet touched;
    // madvise(MADV_HUGEPAGE) changes how the kernel backs it, never its contents or validity.
    unsafe {
        nix::libc::madvise(
            first as *mut nix::libc::c_void,
            end - first,
            nix::libc::MADV_HUGEPAGE,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use proptest::prelude::*;

    use super::*;
    use crate::affinity::current_thread_affinity;
    use crate::test_params as params;
    use crate::{TrialOutcome, TrialSettings, plan_placement, run_trial};

    /// Walks one full cycle from line 0's successor and checks every line comes up once and
    /// the walk is back where it started after exactly `n` loads.
    fn assert_single_cycle(lines: usize, seed: u64) {
        assert_single_cycle_of(PointerCycle::new(lines, seed, false).unwrap(), lines);
    }

    fn assert_single_cycle_of(mut cycle: PointerCycle, lines: usize) {
        let n = cycle.len();
        assert_eq!(n, lines.max(1));
        let start = cycle.position();
        let mut seen = vec![false; n];
        for step in 0..n {
            cycle.walk(1);
            let at = cycle.position();
            assert!(
                !seen[at],
                "line {at} visited twice before step {n} (step {step})"
            );
            seen[at] = true;
            assert_eq!(
                at == start,
                step == n - 1,
                "back at the start at step {step}"
            );
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn the_permutation_is_one_cycle_over_every_line() {
        for lines in [1, 2, 3, 7, 256, 1000, RUNG_BYTES[1] / LINE_BYTES] {
            assert_single_cycle(lines, 42);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_size_and_seed_gives_one_cycle(lines in 1usize..3000, seed in any::<u64>()) {
            assert_single_cycle(lines, seed);
        }
    }

    #[test]
    fn with_huge_pages_the_cycle_starts_on_a_huge_page_boundary() {
        for lines in [1, 256, 16_384, HUGE_PAGE_LINES + 3] {
            let cycle = PointerCycle::new(lines, 5, true).unwrap();
            assert_eq!(cycle.base_addr() % (2 << 20), 0, "{lines} lines");
            assert_single_cycle_of(cycle, lines);
        }
    }

    #[test]
    fn building_in_small_batches_gives_the_same_cycle() {
        let order = |cycle: &mut PointerCycle| {
            (0..cycle.len())
                .map(|_| {
                    cycle.walk(1);
                    cycle.position()
                })
                .collect::<Vec<_>>()
        };
        let mut builder = CycleBuilder::new(1000, 9, false).unwrap();
        let mut calls = 0;
        while !builder.work(7) {
            calls += 1;
        }
        // Fill, shuffle and link: 1000 + 999 + 1000 lines of work, 7 at a time.
        assert!(calls >= 2999 / 7 - 1, "{calls} calls");
        let mut batched = builder.finish().ok().unwrap();
        let mut whole = PointerCycle::new(1000, 9, false).unwrap();
        assert_eq!(order(&mut batched), order(&mut whole));
        let unfinished = CycleBuilder::new(1000, 9, false).unwrap();
        assert!(unfinished.finish().is_err());
        // With huge pages: padding first, same cycle after it.
        let mut builder = CycleBuilder::new(1000, 9, true).unwrap();
        while !builder.work(7) {}
        let mut padded = builder.finish().ok().unwrap();
        assert_eq!(order(&mut padded), order(&mut whole));
    }

    #[test]
    fn a_rebuild_is_a_new_single_cycle_in_the_same_memory() {
        let order = |cycle: &mut PointerCycle| {
            (0..cycle.len())
                .map(|_| {
                    cycle.walk(1);
                    cycle.position()
                })
                .collect::<Vec<_>>()
        };
        let mut first = PointerCycle::new(3000, 11, true).unwrap();
        let (base, before) = (first.base_addr(), order(&mut first));
        let mut builder = first.rebuild();
        while !builder.work(100) {}
        let mut second = builder.finish().ok().unwrap();
        assert_eq!(second.base_addr(), base);
        assert_ne!(order(&mut second), before);
        assert_single_cycle_of(second, 3000);
    }

    #[test]
    fn the_shuffle_defeats_a_stride_prefetcher() {
        // Few successors are the next line: a sequential layout would have them all.
        let mut cycle = PointerCycle::new(4096, 7, false).unwrap();
        let mut sequential = 0;
        for _ in 0..4096 {
            let from = cycle.position();
            cycle.walk(1);
            sequential += usize::from(cycle.position() == from + 1);
        }
        assert!(sequential < 16, "{sequential} sequential successors");
    }

    #[test]
    fn the_same_seed_gives_the_same_layout() {
        let order = |seed| {
            let mut c = PointerCycle::new(512, seed, false).unwrap();
            (0..512)
                .map(|_| {
                    c.walk(1);
                    c.position()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(order(3), order(3));
        assert_ne!(order(3), order(4));
    }

    #[test]
    fn defaults_and_ladder() {
        let spec = resolve("mem.latency", &BTreeMap::new()).unwrap();
        assert_eq!(spec.threads, 1);
        assert_eq!(spec.resolved_params["max_size_mib"], "256");
        assert_eq!(spec.resolved_params["loads_per_step"], "65536");
        assert_eq!(spec.resolved_params["huge_pages"], "1");
        assert_eq!(spec.resolved_params["visit_ms"], "250");
        let names: Vec<_> = spec.variants.iter().map(|v| v.latency_metric).collect();
        assert_eq!(names.first(), Some(&"load_latency_16k"));
        assert_eq!(names.last(), Some(&"load_latency_256m"));
        assert_eq!(spec.variants.len(), 6);
        assert_eq!(spec.basis, RateBasis::OwnTime);

        let small = resolve("mem.latency", &params(&[("max_size_mib", "8")])).unwrap();
        assert_eq!(small.variants.len(), 4);
        let tiny = resolve("mem.latency", &params(&[("max_size_mib", "1")])).unwrap();
        assert_eq!(
            tiny.variants.last().unwrap().rate_metric,
            "loads_per_sec_1m"
        );
        let all = resolve("mem.latency", &params(&[("max_size_mib", "1024")])).unwrap();
        assert_eq!(all.variants, LATENCY_VARIANTS);
        // The workload's variants are the spec's.
        let w = LatencyWorkload::new(4, 1024, Duration::from_millis(10), false, 0);
        assert_eq!(w.variants(), small.variants);

        let bw = resolve("mem.bandwidth", &BTreeMap::new()).unwrap();
        assert_eq!(bw.resolved_params["size_mib"], "256");
        assert_eq!(bw.variants.len(), 3);
        assert_eq!(
            bw.variants[2].throughput.unwrap().metric,
            "gb_per_sec_triad"
        );
    }

    #[test]
    fn bad_parameters_say_what_is_allowed() {
        let err = resolve("mem.latency", &params(&[("size_mib", "8")])).unwrap_err();
        assert!(
            err.to_string().contains("max_size_mib, loads_per_step"),
            "{err}"
        );
        let err = resolve("mem.latency", &params(&[("max_size_mib", "0")])).unwrap_err();
        assert!(err.to_string().contains("from 1 to 1024"), "{err}");
        let err = resolve("mem.latency", &params(&[("loads_per_step", "10")])).unwrap_err();
        assert!(err.to_string().contains("from 1024 to 4194304"), "{err}");
        let err = resolve("mem.latency", &params(&[("visit_ms", "1")])).unwrap_err();
        assert!(err.to_string().contains("from 10 to 10000"), "{err}");
        let err = resolve("mem.bandwidth", &params(&[("size_mib", "4096")])).unwrap_err();
        assert!(err.to_string().contains("from 1 to 2048"), "{err}");
        let err = resolve("mem.bandwidth", &params(&[("size_mib", "lots")])).unwrap_err();
        assert!(err.to_string().contains("whole number"), "{err}");
        let err = resolve("mem.bandwidth", &params(&[("huge_pages", "2")])).unwrap_err();
        assert!(err.to_string().contains("from 0 to 1"), "{err}");
        let err = resolve("mem.bandwidth", &params(&[("max_size_mib", "8")])).unwrap_err();
        assert!(
            err.to_string().contains("size_mib, threads, huge_pages"),
            "{err}"
        );
        assert!(matches!(
            resolve("mem.nope", &BTreeMap::new()),
            Err(ParamError::UnknownProbe(_))
        ));
    }

    #[test]
    fn refuses_more_memory_than_is_available() {
        let gib = 1u64 << 30;
        assert!(check_memory("mem.bandwidth", 3 << 30, 1, Some(16 * gib)).is_ok());
        assert!(check_memory("mem.bandwidth", 3 << 30, 1, None).is_ok());
        let err = check_memory("mem.bandwidth", 3 << 30, 4, Some(8 * gib)).unwrap_err();
        assert!(
            err.contains("12288 MiB (3072 MiB per thread x 4 threads)"),
            "{err}"
        );
        assert!(err.contains("8192 MiB available"), "{err}");
    }

    #[test]
    fn reads_mem_available() {
        // Captured from the development VM (Debian 12, 24 GiB).
        let meminfo = "MemTotal:       24684112 kB\nMemFree:        21290056 kB\n\
                       MemAvailable:   24042400 kB\nBuffers:           88328 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(24_042_400 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn kernels_compute_what_stream_computes() {
        let mut arrays = StreamArrays::new(64 * 37 + 5, false).unwrap();
        // 37 lines of 8 elements: exercises the remainder of the read kernel's 4-line chunks.
        assert_eq!(arrays.bytes(Kernel::Read), 37 * 8 * 8);
        assert_eq!(arrays.bytes(Kernel::Triad), 37 * 8 * 24);
        assert_eq!(read_pass(&arrays.b, arrays.avx2), 37.0 * 8.0);
        assert_eq!(read_pass(&arrays.b, false), 37.0 * 8.0);
        arrays.pass(Kernel::Copy);
        assert_eq!(arrays.first_of_a(), 1.0);
        arrays.pass(Kernel::Triad);
        assert!(arrays.a.iter().all(|b| b.0 == [7.0; 8]));
    }

    fn run(probe: &'static str, pairs: &[(&str, &str)], millis: u64) -> TrialOutcome {
        let spec = resolve(probe, &params(pairs)).unwrap();
        let allowed = current_thread_affinity().unwrap();
        let plan = plan_placement(spec.threads, &allowed, &[]).unwrap();
        let settings = TrialSettings {
            duration: Duration::from_millis(millis),
            interval: Duration::from_millis(250),
            plan,
            unpinned: None,
        };
        let cancel = Arc::new(AtomicBool::new(false));
        run_trial(&spec, &settings, &cancel, &mut |_| true).unwrap()
    }

    #[test]
    fn latency_rises_from_l1_to_the_largest_rung() {
        // 64 MiB: past any L2, and on most machines past the L3 a 2-core VM gets to use.
        let outcome = run(
            "mem.latency",
            &[
                ("max_size_mib", "64"),
                ("loads_per_step", "16384"),
                ("visit_ms", "50"),
            ],
            2000,
        );
        let ns = |name: &str| {
            outcome
                .counters
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("no {name} in {:?}", outcome.counters))
                .value
        };
        let (l1, big) = (ns("load_ns_16k"), ns("load_ns_64m"));
        assert!(
            l1 > 0.1 && big > 3.0 * l1,
            "16 KiB: {l1} ns, 64 MiB: {big} ns"
        );
        for v in &outcome.total.variants {
            assert!(v.events > 0, "{} has no sample", v.variant.latency_metric);
            assert_eq!(v.bytes, 0);
        }
        assert_eq!(outcome.counters.len(), 5);
    }

    #[test]
    fn bandwidth_counts_bytes_as_stream_does() {
        let outcome = run("mem.bandwidth", &[("size_mib", "4")], 600);
        for (v, per_elem) in outcome.total.variants.iter().zip(STREAM_BYTES_PER_ELEM) {
            assert!(v.events > 0, "{} has no pass", v.variant.rate_metric);
            assert_eq!(v.bytes, v.events * (4 << 20) / 8 * per_elem);
            assert!(v.throughput.unwrap() > 0.0);
        }
    }
}
