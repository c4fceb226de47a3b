//! Page-aligned I/O buffers and the pseudo-random data the disk probes write.
//!
//! O_DIRECT wants the buffer, the offset and the length aligned to the device's logical block
//! size (512 or 4096 bytes on every device we meet). Buffers here are aligned to [`ALIGN`] and
//! sized in whole multiples of it, so they satisfy either; they are allocated once, when a
//! workload is built, never on the measured path, a queue's buffers in one mapping backed by
//! huge pages where the kernel allows ([`Region`] says why).

use std::ptr::NonNull;
use std::sync::Arc;

use nix::libc;
use quietbench_host::HostRoot;
use quietbench_host::smaps::read_smaps_mapping;

use crate::rng::Rng;

/// Alignment of every I/O buffer, offset and length: the largest logical block size in use.
pub(crate) const ALIGN: usize = 4096;

/// Rounds `n` up to a multiple of [`ALIGN`].
pub(crate) const fn round_up(n: u64) -> u64 {
    n.div_ceil(ALIGN as u64) * ALIGN as u64
}

/// Rounds `n` down to a multiple of [`ALIGN`].
pub(crate) const fn round_down(n: u64) -> u64 {
    n / ALIGN as u64 * ALIGN as u64
}

/// The huge-page size the region is aligned to and rounded up to (x86-64 and arm64 with 4 KiB
/// pages: 2 MiB).
const HUGE_PAGE: usize = 2 << 20;

/// One anonymous mapping that holds a queue's buffers, aligned to [`HUGE_PAGE`] and backed by
/// transparent huge pages where the kernel gives them (MADV_HUGEPAGE).
///
/// Why huge pages: a request's buffer is split into one DMA segment per physically contiguous
/// run, so a 128 KiB buffer in scattered 4 KiB pages is 32 segments. A virtio disk without
/// indirect descriptors (Firecracker's, for one) spends a ring descriptor per segment, so its
/// ring fills at a handful of such requests; the rest wait in the I/O scheduler, where the
/// sequential ones merge, and the device sees a few large requests instead of sixteen. On this
/// project's VM, disk.seq (128 KiB, QD16) moved 1.6 GB/s in 680 KiB device requests from 4 KiB
/// pages and 3.1 GB/s in 128 KiB requests from huge pages. A real device's limit, not the
/// buffer's layout, is what the probe is for.
struct Region {
    /// The whole mapping, as mmap returned it (for munmap).
    map: NonNull<u8>,
    map_len: usize,
    /// The first [`HUGE_PAGE`]-aligned byte within it.
    start: NonNull<u8>,
}

// SAFETY: the region is plain memory owned by this value (munmap works from any thread); the
// buffers carved from it are disjoint, and each is accessed only through the one AlignedBuf
// that owns it.
unsafe impl Send for Region {}
// SAFETY: shared references to a Region only read its addresses, never its bytes.
unsafe impl Sync for Region {}

impl Region {
    /// A zeroed region of at least `len` bytes (rounded up to [`HUGE_PAGE`]).
    fn new(len: usize) -> Result<Self, String> {
        let len = len.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // One huge page more than needed, so an aligned start always fits.
        let map_len = len + HUGE_PAGE;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {map_len} bytes of I/O buffers: {}",
                std::io::Error::last_os_error()
            ));
        }
        let map = NonNull::new(raw.cast::<u8>()).ok_or("mmap returned a null address")?;
        let offset = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
        // SAFETY: offset < HUGE_PAGE, and the mapping is HUGE_PAGE longer than `len`.
        let start = unsafe { map.add(offset) };
        // A hint: where transparent huge pages are off ("never") the region stays in 4 KiB
        // pages, which only costs the speed above. Anonymous memory reads as zeroes.
        // SAFETY: the range lies within the mapping just made.
        unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        Ok(Self {
            map,
            map_len,
            start,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; every AlignedBuf carved from it
        // holds an Arc to this region, so none outlives it.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

/// A zero-initialised I/O buffer aligned to [`ALIGN`], its length a multiple of it: one of the
/// disjoint slices of a [`Region`].
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Keeps the mapping alive while this buffer is.
    region: Arc<Region>,
}

// SAFETY: the buffer is plain bytes that only this value reaches (the buffers of one region
// are disjoint), like a Vec<u8>; the engine that lends its address to the kernel guarantees no
// I/O is in flight when the value moves threads or drops.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes (rounded up to [`ALIGN`]).
    pub(crate) fn new(len: usize) -> Result<Self, String> {
        let mut one = Self::many(1, len)?;
        Ok(one.remove(0))
    }

    /// `count` zeroed buffers of at least `len` bytes each, back to back in one region.
    pub(crate) fn many(count: usize, len: usize) -> Result<Vec<Self>, String> {
        let len = round_up(len.max(1) as u64) as usize;
        let total = len
            .checked_mul(count)
            .ok_or_else(|| format!("{count} I/O buffers of {len} bytes overflow"))?;
        let region = Arc::new(Region::new(total)?);
        Ok((0..count)
            .map(|i| Self {
                // SAFETY: i * len + len <= total, within the region.
                ptr: unsafe { region.start.add(i * len) },
                len,
                region: Arc::clone(&region),
            })
            .collect())
    }

    /// A buffer of `len` bytes filled with pseudo-random data from `seed`.
    pub(crate) fn random(len: usize, seed: u64) -> Result<Self, String> {
        let mut buf = Self::new(len)?;
        fill_random(buf.as_mut_slice(), seed);
        Ok(buf)
    }

    /// `count` buffers of `len` bytes, buffer `i` filled with pseudo-random data from
    /// `seed(i)`.
    pub(crate) fn many_random(
        count: usize,
        len: usize,
        seed: impl Fn(usize) -> u64,
    ) -> Result<Vec<Self>, String> {
        let mut bufs = Self::many(count, len)?;
        for (i, buf) in bufs.iter_mut().enumerate() {
            fill_random(buf.as_mut_slice(), seed(i));
        }
        Ok(bufs)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The share (0-100) of this buffer's region that huge pages back, from /proc/self/smaps:
    /// what the MADV_HUGEPAGE hint got. `None` when smaps could not say. Ask after the pages
    /// are touched (filled), since a page is only backed at its first touch.
    pub(crate) fn huge_page_pct(&self) -> Option<f64> {
        let start = self.region.start.as_ptr() as u64;
        read_smaps_mapping(&HostRoot::live(), std::process::id(), start)
            .ok()
            .flatten()
            .map(|m| m.huge_page_pct())
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is len bytes of a live mapping (the Arc keeps it), initialised (anonymous
        // memory is zero), and the shared borrow of self prevents a concurrent &mut.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; the exclusive borrow of self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Writes `offset` and `serial` into the first 16 bytes, so no two blocks a probe writes
    /// are identical (storage that deduplicates or compresses would otherwise skip the work).
    pub(crate) fn stamp(&mut self, offset: u64, serial: u64) {
        let s = self.as_mut_slice();
        s[..8].copy_from_slice(&offset.to_le_bytes());
        s[8..16].copy_from_slice(&serial.to_le_bytes());
    }
}

/// Fills `buf` with pseudo-random bytes from `seed`.
pub(crate) fn fill_random(buf: &mut [u8], seed: u64) {
    let mut rng = Rng::new(seed);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let last = rng.next_u64().to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
}

#[cfg(test)]
mod tests;
