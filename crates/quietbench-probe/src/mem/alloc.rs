//! Memory for the memory probes: reserved untouched (so the pinned probe thread's first touch
//! places it), advised for huge pages, and set up in bounded steps.

use std::time::{Duration, Instant};

/// Longest a set-up step (allocating, touching, shuffling) runs before it hands back to the
/// harness. Set-up is spread over steps so that no step outlasts the reporting interval (the
/// controller takes an agent that sends nothing for a few seconds for a stalled one) and a
/// cancel is seen promptly; a 1 GiB rung takes several seconds to shuffle.
const SETUP_STEP: Duration = Duration::from_millis(200);

/// Work done between two looks at the clock during set-up: lines, or array blocks.
const SETUP_BATCH: usize = 1 << 15;

/// Runs `work(SETUP_BATCH)` until it reports done or [`SETUP_STEP`] has passed.
pub(super) fn for_a_setup_step(mut work: impl FnMut(usize) -> bool) -> bool {
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

/// An empty vector with room for `len` elements, advised for huge pages when asked, and not
/// yet touched: the caller's writes are the first touch, on its (pinned) thread. Fails,
/// rather than aborting the agent, when the allocation is refused.
pub(super) fn reserve<T>(len: usize, huge_pages: bool) -> Result<Vec<T>, String> {
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
