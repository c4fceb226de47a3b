//! Page-aligned I/O buffers and the pseudo-random data the disk probes write.
//!
//! O_DIRECT wants the buffer, the offset and the length aligned to the device's logical block
//! size (512 or 4096 bytes on every device we meet). Buffers here are aligned to [`ALIGN`] and
//! sized in whole multiples of it, so they satisfy either; they are allocated once, when a
//! workload is built, never on the measured path.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

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

/// A zero-initialised heap buffer aligned to [`ALIGN`], its length a multiple of it.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain bytes owned by this value alone (no aliasing handles are kept),
// like a Vec<u8>; the engine that lends its address to the kernel guarantees no I/O is in flight
// when the value moves threads or drops.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` bytes (rounded up to [`ALIGN`]).
    pub(crate) fn new(len: usize) -> Result<Self, String> {
        let len = round_up(len.max(1) as u64) as usize;
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|e| format!("cannot lay out a {len}-byte I/O buffer: {e}"))?;
        // SAFETY: the layout has a non-zero size (len >= ALIGN).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| format!("cannot allocate a {len}-byte aligned I/O buffer"))?;
        Ok(Self { ptr, len })
    }

    /// A buffer of `len` bytes filled with pseudo-random data from `seed`.
    pub(crate) fn random(len: usize, seed: u64) -> Result<Self, String> {
        let mut buf = Self::new(len)?;
        fill_random(buf.as_mut_slice(), seed);
        Ok(buf)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len bytes, initialised (zeroed at allocation),
        // and the shared borrow of self prevents a concurrent &mut.
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

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this size and alignment (checked there).
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, ALIGN),
            )
        };
    }
}

/// A small, fast pseudo-random generator (xorshift64*), seeded through splitmix64 so nearby
/// seeds (thread indices) give unrelated streams. Not cryptographic; it picks offsets and
/// makes incompressible data.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self(z | 1)
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform value in `0..n` (n > 0), by multiply-high: no division, bias below 2^-32 for
    /// any n a disk offers.
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
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
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_whole_pages() {
        for len in [1, 512, 4096, 4097, 16 << 10, 128 << 10, 1 << 20] {
            let buf = AlignedBuf::new(len).unwrap();
            assert_eq!(buf.as_ptr() as usize % ALIGN, 0, "len {len}");
            assert_eq!(buf.len() % ALIGN, 0);
            assert!(buf.len() >= len);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn rounding_is_to_whole_pages() {
        assert_eq!(round_up(0), 0);
        assert_eq!(round_up(1), 4096);
        assert_eq!(round_up(4096), 4096);
        assert_eq!(round_up(4097), 8192);
        assert_eq!(round_down(4095), 0);
        assert_eq!(round_down(8191), 4096);
    }

    #[test]
    fn random_data_is_not_zero_and_differs_by_seed() {
        let a = AlignedBuf::random(64 << 10, 1).unwrap();
        let b = AlignedBuf::random(64 << 10, 2).unwrap();
        assert_ne!(a.as_slice(), b.as_slice());
        let zeros = a.as_slice().iter().filter(|&&b| b == 0).count();
        // About 1 in 256 bytes is zero in random data.
        assert!(zeros < a.len() / 100, "{zeros} zero bytes");
    }

    #[test]
    fn stamps_make_blocks_differ() {
        let mut a = AlignedBuf::random(4096, 7).unwrap();
        let before = a.as_slice().to_vec();
        a.stamp(8192, 3);
        assert_eq!(&a.as_slice()[..8], &8192u64.to_le_bytes());
        assert_eq!(&a.as_slice()[8..16], &3u64.to_le_bytes());
        assert_eq!(&a.as_slice()[16..], &before[16..]);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(42);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let v = rng.below(10);
            assert!(v < 10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
