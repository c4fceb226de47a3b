//! `mem.latency`: a pointer chase over one random cycle per rung of the working-set ladder.

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::alloc::{for_a_setup_step, reserve};
use super::{LATENCY_METRIC_SETS, LINE_BYTES, RUNG_BYTES, RUNG_COUNTERS};
use crate::rng::Rng;
use crate::{Counter, Merge, MetricSet, Samples, Step, Workload};

/// One cache line of a pointer chase: the address of the next line, then padding.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line {
    next: usize,
    _pad: [usize; 7],
}

const _: () = assert!(std::mem::size_of::<Line>() == LINE_BYTES);

/// Lines in a 2 MiB huge page.
pub(super) const HUGE_PAGE_LINES: usize = (2 << 20) / LINE_BYTES;

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
    rng: Rng,
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
            rng: Rng::new(seed),
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
    rng: Rng,
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
    fn metric_sets(&self) -> &'static [MetricSet] {
        &LATENCY_METRIC_SETS[..self.rungs]
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
