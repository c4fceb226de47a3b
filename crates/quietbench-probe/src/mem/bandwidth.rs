//! `mem.bandwidth`: STREAM's kernels (and a read-only sum) over arrays far larger than the caches.

use std::hint::black_box;

use super::alloc::{for_a_setup_step, reserve};
use super::{BANDWIDTH_METRIC_SETS, LINE_BYTES, STREAM_BYTES_PER_ELEM, TRIAD_SCALAR};
use crate::{MetricSet, Samples, Step, Workload};

/// Eight f64, one cache line, aligned: vector loads never split a line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct Block(pub(super) [f64; 8]);

/// Which kernel a pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `sum += a[i]`
    Read,
    /// `a[i] = b[i]`
    Copy,
    /// `a[i] = b[i] + s * c[i]`
    Triad,
}

impl Kernel {
    /// The three, in metric set order.
    pub const ALL: [Kernel; 3] = [Kernel::Read, Kernel::Copy, Kernel::Triad];
}

/// STREAM's three arrays of one thread, and kernels over them.
pub struct StreamArrays {
    pub(super) a: Vec<Block>,
    pub(super) b: Vec<Block>,
    c: Vec<Block>,
    /// Blocks in each array once touched.
    target: usize,
    pub(super) avx2: bool,
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
pub(super) fn read_pass(b: &[Block], avx2: bool) -> f64 {
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
    fn metric_sets(&self) -> &'static [MetricSet] {
        BANDWIDTH_METRIC_SETS
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
        let metric_set = self.next;
        self.next = (metric_set + 1) % Kernel::ALL.len();
        let kernel = Kernel::ALL[metric_set];
        arrays.pass(kernel);
        if self.warm_passes > 0 {
            self.warm_passes -= 1;
            return Step::Recorded;
        }
        Step::Timed {
            metric_set,
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
