//! The arithmetic of disk.scan's survey, kept apart from its I/O: how a target splits into
//! regions, which regions are read twice, the order of reads, and what the two passes' latencies
//! say about cold blocks.

use std::time::Instant;

use super::aligned::round_up;

/// Start and end of region `r` of `regions` over `size` bytes.
pub(crate) fn region_bounds(size: u64, regions: usize, r: usize) -> (u64, u64) {
    let at = |i: usize| {
        let raw = (u128::from(size) * i as u128 / regions as u128) as u64;
        raw / 4096 * 4096
    };
    let end = if r + 1 == regions { size } else { at(r + 1) };
    (at(r), end)
}

/// `count` regions of `regions`, spread evenly (the middle of each of `count` equal parts).
pub(crate) fn spread(regions: usize, count: usize) -> Vec<usize> {
    let count = count.min(regions);
    (0..count)
        .map(|i| ((2 * i + 1) * regions) / (2 * count))
        .collect()
}

/// Reads over a list of byte ranges, in order, in reads of at most `read` bytes.
///
/// One stream per thread: walking several parts of a stripe side by side from one thread did
/// not read faster on the development VM (virtio-blk), while more threads did (see
/// benches/peer/scan_vs_dd.sh).
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// (region, start, end).
    ranges: Vec<(usize, u64, u64)>,
    index: usize,
    pos: u64,
}

impl Walk {
    pub(crate) fn new(ranges: Vec<(usize, u64, u64)>) -> Self {
        Self {
            ranges,
            index: 0,
            pos: 0,
        }
    }

    /// The next read: region, offset, and length (rounded up to whole 4 KiB blocks: the last
    /// read of a target whose size is not a multiple of 4 KiB comes back short).
    pub(crate) fn next(&mut self, read: u64) -> Option<(usize, u64, usize)> {
        while let Some(&(r, start, end)) = self.ranges.get(self.index) {
            self.pos = self.pos.max(start);
            if self.pos < end {
                let len = read.min(end - self.pos);
                let offset = self.pos;
                self.pos += len;
                return Some((r, offset, round_up(len) as usize));
            }
            self.index += 1;
        }
        None
    }
}

/// One region's first pass, as this thread saw it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RegionPass {
    pub bytes: u64,
    pub start: Option<Instant>,
    pub end: Option<Instant>,
    /// Bytes not yet read (pre-warm: the region is done at zero).
    pub remaining: u64,
}

/// What a survey found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub regions_read: usize,
    /// Median, min and max of the regions' MB/s.
    pub region_mb_per_sec: Option<(f64, f64, f64)>,
    /// Regions read twice, and of them those whose first reads were `cold_factor` times slower.
    pub resampled: usize,
    pub cold: usize,
    /// Median first-read latency over median re-read latency, over every sampled read.
    pub slowdown: Option<f64>,
}

/// Summarizes a survey: `first` and `second` hold `per` latencies per sampled region (0: not
/// read).
pub(crate) fn summarize(
    passes: &[RegionPass],
    first: &[u64],
    second: &[u64],
    per: usize,
    cold_factor: f64,
) -> Summary {
    let mut rates: Vec<f64> = passes
        .iter()
        .filter(|p| p.remaining == 0 && p.bytes > 0)
        .filter_map(|p| {
            let seconds = p.end?.duration_since(p.start?).as_secs_f64();
            (seconds > 0.0).then(|| p.bytes as f64 / seconds / 1e6)
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    let region_mb_per_sec =
        (!rates.is_empty()).then(|| (median(&rates), rates[0], rates[rates.len() - 1]));
    let (mut resampled, mut cold) = (0, 0);
    let (mut all_first, mut all_second) = (Vec::new(), Vec::new());
    for (f, s) in first.chunks(per.max(1)).zip(second.chunks(per.max(1))) {
        let pairs: Vec<(f64, f64)> = f
            .iter()
            .zip(s)
            .filter(|(a, b)| **a > 0 && **b > 0)
            .map(|(&a, &b)| (a as f64, b as f64))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let mut a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let mut b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        resampled += 1;
        if median(&a) >= cold_factor * median(&b) {
            cold += 1;
        }
        all_first.extend(a);
        all_second.extend(b);
    }
    all_first.sort_by(f64::total_cmp);
    all_second.sort_by(f64::total_cmp);
    Summary {
        regions_read: rates.len(),
        region_mb_per_sec,
        resampled,
        cold,
        slowdown: (!all_first.is_empty()).then(|| median(&all_first) / median(&all_second)),
    }
}

/// The median of sorted, non-empty values.
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests;
