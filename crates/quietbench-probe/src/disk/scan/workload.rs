//! The `disk.scan` workload: one thread's share of the survey or the pre-warm.

use std::sync::Arc;
use std::time::Instant;

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    First,
    Reread,
    Done,
}

/// One thread of disk.scan: the survey, or the pre-warm when it has a state file.
pub(super) struct ScanWorkload {
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
    pub(super) fn new(config: Arc<ScanConfig>, thread: usize) -> Result<Self, String> {
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
    fn metric_sets(&self) -> &'static [MetricSet] {
        if self.state.is_some() {
            PREWARM_METRIC_SETS
        } else {
            SURVEY_METRIC_SETS
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
                    metrics::PREWARM_COMPLETE,
                    "bool",
                    f64::from(u8::from(done == self.stripe_bytes)),
                    Merge::Mean,
                ),
                c(
                    metrics::PREWARM_BYTES_READ,
                    "bytes",
                    self.read_bytes as f64,
                    Merge::Sum,
                ),
                c(
                    metrics::PREWARM_BYTES_DONE,
                    "bytes",
                    done as f64,
                    Merge::Sum,
                ),
                c(
                    metrics::PREWARM_BYTES_SKIPPED,
                    "bytes",
                    self.skipped_bytes as f64,
                    Merge::Sum,
                ),
                c(
                    metrics::PREWARM_BYTES_TOTAL,
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
            metrics::SCAN_COMPLETE,
            "bool",
            f64::from(u8::from(complete)),
            Merge::Mean,
        ));
        out.push(c(
            metrics::REGIONS_READ,
            "regions",
            summary.regions_read as f64,
            Merge::Sum,
        ));
        if let (Some(start), Some(end)) = (self.survey_start, self.survey_end) {
            let seconds = end.duration_since(start).as_secs_f64();
            if seconds > 0.0 {
                let mb = self.read_bytes as f64 / seconds / 1e6;
                out.push(c(metrics::SURVEY_MB_PER_SEC, "MB/s", mb, Merge::Sum));
            }
        }
        if let Some((p50, min, max)) = summary.region_mb_per_sec {
            out.push(c(metrics::REGION_MB_PER_SEC_P50, "MB/s", p50, Merge::Mean));
            out.push(c(metrics::REGION_MB_PER_SEC_MIN, "MB/s", min, Merge::Mean));
            out.push(c(metrics::REGION_MB_PER_SEC_MAX, "MB/s", max, Merge::Max));
        }
        if summary.resampled > 0 {
            out.push(c(
                metrics::RESAMPLED_REGIONS,
                "regions",
                summary.resampled as f64,
                Merge::Sum,
            ));
            out.push(c(
                metrics::COLD_REGIONS,
                "regions",
                summary.cold as f64,
                Merge::Sum,
            ));
            out.push(c(
                metrics::COLD_FRACTION,
                "fraction",
                summary.cold as f64 / summary.resampled as f64,
                Merge::Mean,
            ));
        }
        if let Some(slowdown) = summary.slowdown {
            out.push(c(metrics::SLOWDOWN, "ratio", slowdown, Merge::Mean));
        }
        out
    }
}
