//! The supervisor of one trial: spawns and pins the probe threads, starts them together, merges
//! their interval histograms, and reports. It runs on the caller's thread (the agent pins that
//! thread to a housekeeping CPU); all allocation and encoding happen here, never on a probe
//! thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;

use crate::histogram::new_latency_histogram;
use crate::placement::{PlacementPlan, ThreadPlacement};
use crate::worker::{Chunk, ExitGate, RECORDINGS_PER_THREAD, Recording, Worker};
use crate::{Counter, Merge, MetricSet, ProbeSpec, RateBasis};

/// How long and where a trial runs.
#[derive(Debug, Clone)]
pub struct TrialSettings {
    /// Measuring time.
    pub duration: Duration,
    /// Reporting interval.
    pub interval: Duration,
    /// The planned CPU of each thread (`plan.thread_cpus.len()` threads run).
    pub plan: PlacementPlan,
    /// When set, threads are not pinned to their planned CPU but allowed on all of these, and
    /// the scheduler places them: the "no placement" baseline that placement is measured
    /// against.
    pub unpinned: Option<Vec<u32>>,
}

/// One metric set's measurements in an interval (or a whole trial).
#[derive(Debug, Clone)]
pub struct MetricSetReport {
    /// Its metric names and unit.
    pub metric_set: MetricSet,
    /// Events completed, all threads.
    pub events: u64,
    /// Events per second, summed over threads. With one metric set: each thread's events over its
    /// own measured time, as sysbench counts. With several (interleaved): each metric set's events
    /// over the time spent in that metric set's events.
    pub events_per_sec: f64,
    /// Per-event latency in nanoseconds, all threads merged.
    pub latency_ns: Histogram<u64>,
    /// Samples clamped into the histogram's range.
    pub clamped: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Bytes per second in the metric set's throughput unit, for metric sets that have one, computed
    /// like `events_per_sec`.
    pub throughput: Option<f64>,
}

/// Measurements of one interval (or, in [`TrialOutcome::total`], of the whole trial).
#[derive(Debug, Clone)]
pub struct IntervalReport {
    /// Interval number, from 0 (the number of intervals, for a total).
    pub index: u32,
    /// Earliest thread start of the interval.
    pub start: SystemTime,
    /// Latest thread end of the interval.
    pub end: SystemTime,
    /// One entry per metric set of the workload.
    pub metric_sets: Vec<MetricSetReport>,
    /// Samples lost (reported, never hidden; zero unless something is badly wrong).
    pub dropped: u64,
}

impl IntervalReport {
    /// Events of every metric set.
    pub fn events(&self) -> u64 {
        self.metric_sets.iter().map(|v| v.events).sum()
    }
}

/// Progress of a trial, as it happens.
#[derive(Debug)]
pub enum TrialEvent<'a> {
    /// Every thread is pinned; measuring starts now.
    Placement(&'a [ThreadPlacement]),
    /// One interval is complete.
    Interval(&'a IntervalReport),
}

/// A finished trial.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    /// Where the threads ran.
    pub placements: Vec<ThreadPlacement>,
    /// Whole-trial totals.
    pub total: IntervalReport,
    /// Number of intervals reported.
    pub intervals: u32,
    /// Stopped early by the cancel flag.
    pub cancelled: bool,
    /// The workloads' own whole-trial figures, merged across threads.
    pub counters: Vec<Counter>,
}

/// The trial could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No thread planned.
    #[error("the placement plan has no thread")]
    NoThreads,
    /// A probe thread could not be started.
    #[error("cannot start probe thread {thread}: {source}")]
    Spawn {
        /// Thread index.
        thread: usize,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A probe thread could not be pinned or read back.
    #[error("{0}")]
    Setup(String),
    /// A probe thread panicked.
    #[error("probe thread {0} panicked; the trial's results are incomplete")]
    Panicked(usize),
    /// The workload failed (e.g. a spawned child exited with an error).
    #[error("{}{}", quietbench_vocab::PROBE_FAILED, .0)]
    Workload(String),
}

/// Runs one trial of `spec` on the planned CPUs, calling `sink` with its progress. `sink`
/// returns false when nobody listens any more, which cancels the trial. `cancel` may be set at
/// any time from elsewhere (the agent's Cancel RPC).
pub fn run_trial(
    spec: &ProbeSpec,
    settings: &TrialSettings,
    cancel: &Arc<AtomicBool>,
    sink: &mut dyn FnMut(TrialEvent<'_>) -> bool,
) -> Result<TrialOutcome, RunError> {
    let threads = settings.plan.thread_cpus.len();
    if threads == 0 {
        return Err(RunError::NoThreads);
    }
    let (chunk_tx, chunk_rx) = mpsc::sync_channel::<Chunk>(threads * RECORDINGS_PER_THREAD);
    let (ready_tx, ready_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(threads + 1));
    let abort = Arc::new(AtomicBool::new(false));
    let exit_gate = Arc::new(ExitGate::default());
    let mut spare_returns: Vec<SyncSender<Recording>> = Vec::with_capacity(threads);
    let mut handles = Vec::with_capacity(threads);

    for (thread, &cpu) in settings.plan.thread_cpus.iter().enumerate() {
        let (spare_tx, spare_rx) = mpsc::sync_channel(RECORDINGS_PER_THREAD);
        spare_returns.push(spare_tx.clone());
        let pin_to = match &settings.unpinned {
            Some(cpus) => cpus.clone(),
            None => vec![cpu],
        };
        let worker = Worker {
            thread,
            cpu,
            pin_to,
            factory: std::sync::Arc::clone(&spec.factory),
            metric_sets: spec.metric_sets.len().max(1),
            duration: settings.duration,
            interval: settings.interval,
            chunks: chunk_tx.clone(),
            spares_in: spare_tx,
            spares: spare_rx,
            ready: ready_tx.clone(),
            start: Arc::clone(&start),
            abort: Arc::clone(&abort),
            cancel: Arc::clone(cancel),
            exit_gate: Arc::clone(&exit_gate),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("qb-probe-{thread}"))
            .spawn(move || worker.run());
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(source) => {
                // Threads already started wait at the barrier: release them to exit.
                exit_gate.open();
                abort.store(true, Ordering::Release);
                drain_ready(&ready_rx, handles.len());
                release_and_join(&start, handles, threads);
                return Err(RunError::Spawn { thread, source });
            }
        }
    }
    drop(chunk_tx);
    drop(ready_tx);

    let mut placements = Vec::with_capacity(threads);
    let mut setup_error = None;
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(placement)) => placements.push(placement),
            Ok(Err(message)) => setup_error = Some(message),
            Err(_) => setup_error = Some("a probe thread exited during setup".to_string()),
        }
    }
    placements.sort_by_key(|p| p.thread_index);
    if let Some(message) = setup_error {
        exit_gate.open();
        abort.store(true, Ordering::Release);
        start.wait();
        join_all(handles)?;
        return Err(RunError::Setup(message));
    }
    if !sink(TrialEvent::Placement(&placements)) {
        cancel.store(true, Ordering::Relaxed);
    }

    start.wait();
    let clock = Clock::now();
    let mut merger = Merger::new(threads, clock, spec.metric_sets, spec.basis);
    // Until every thread has sent its last chunk (or died: the channel then disconnects).
    let mut finished = vec![false; threads];
    while finished.iter().any(|f| !f) {
        let chunk = match chunk_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(chunk) => chunk,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // A thread that ended without its last chunk panicked: stop waiting for it.
                let died = handles
                    .iter()
                    .zip(&finished)
                    .any(|(h, &f)| !f && h.is_finished());
                if died {
                    break;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let thread = chunk.thread;
        finished[thread] |= chunk.last;
        let mut recording = merger.add(chunk);
        recording.reset();
        let _ = spare_returns[thread].try_send(recording);
        while let Some(report) = merger.next_complete() {
            if !sink(TrialEvent::Interval(&report)) {
                cancel.store(true, Ordering::Relaxed);
            }
        }
    }
    // The last intervals are reported while the probe threads still exist (they wait at the
    // exit gate), so a sink that reads their /proc/self/task entries still finds them.
    while let Some(report) = merger.flush_one() {
        if !sink(TrialEvent::Interval(&report)) {
            cancel.store(true, Ordering::Relaxed);
        }
    }
    exit_gate.open();
    join_all(handles)?;
    if let Some(error) = merger.error.take() {
        return Err(RunError::Workload(error));
    }
    Ok(TrialOutcome {
        placements,
        intervals: merger.emitted,
        total: merger.total(),
        counters: merger.merged_counters(),
        cancelled: cancel.load(Ordering::Relaxed),
    })
}

fn drain_ready(ready: &mpsc::Receiver<Result<ThreadPlacement, String>>, started: usize) {
    for _ in 0..started {
        let _ = ready.recv();
    }
}

fn release_and_join(start: &Barrier, handles: Vec<std::thread::JoinHandle<()>>, planned: usize) {
    // The barrier counts every planned thread; stand in for those never started.
    let missing = planned - handles.len();
    std::thread::scope(|scope| {
        for _ in 0..missing {
            scope.spawn(|| start.wait());
        }
        start.wait();
    });
    for handle in handles {
        let _ = handle.join();
    }
}

fn join_all(handles: Vec<std::thread::JoinHandle<()>>) -> Result<(), RunError> {
    let mut panicked = None;
    for (thread, handle) in handles.into_iter().enumerate() {
        if handle.join().is_err() {
            panicked.get_or_insert(thread);
        }
    }
    panicked.map_or(Ok(()), |t| Err(RunError::Panicked(t)))
}

/// Converts the probe threads' monotonic instants to wall-clock times for reports.
#[derive(Clone, Copy)]
struct Clock {
    wall: SystemTime,
    mono: Instant,
}

impl Clock {
    fn now() -> Self {
        Self {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }

    fn wall(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.mono) {
            Some(after) => self.wall + after,
            None => self.wall - self.mono.duration_since(at),
        }
    }
}

/// One metric set's share of an interval being assembled.
struct PendingMetricSet {
    hist: Histogram<u64>,
    events_per_sec: f64,
    bytes_per_sec: f64,
    bytes: u64,
    clamped: u64,
}

/// One interval being assembled from the threads' chunks.
struct Pending {
    metric_sets: Vec<PendingMetricSet>,
    start: Instant,
    end: Instant,
    dropped: u64,
    threads_reported: usize,
}

fn pending_metric_sets(n: usize) -> Vec<PendingMetricSet> {
    (0..n)
        .map(|_| PendingMetricSet {
            hist: new_latency_histogram(),
            events_per_sec: 0.0,
            bytes_per_sec: 0.0,
            bytes: 0,
            clamped: 0,
        })
        .collect()
}

/// The seconds one metric set's rate divides by, for one thread over `elapsed` seconds
/// (see [`RateBasis`]).
fn rate_seconds(basis: RateBasis, elapsed: f64, own_ns: u64) -> f64 {
    match basis {
        RateBasis::Elapsed => elapsed,
        RateBasis::OwnTime => own_ns as f64 / 1e9,
    }
}

/// Events and bytes per second of one metric set in one chunk.
fn chunk_rates(
    basis: RateBasis,
    rec: &Recording,
    metric_set: usize,
    chunk_seconds: f64,
) -> (f64, f64) {
    let seconds = rate_seconds(basis, chunk_seconds, rec.sum_ns[metric_set]);
    if seconds > 0.0 {
        (
            rec.hists[metric_set].len() as f64 / seconds,
            rec.bytes[metric_set] as f64 / seconds,
        )
    } else {
        (0.0, 0.0)
    }
}

/// Merges chunks into intervals, in order, and keeps the trial's totals.
struct Merger {
    clock: Clock,
    metric_sets: &'static [MetricSet],
    basis: RateBasis,
    pending: BTreeMap<u32, Pending>,
    next: u32,
    emitted: u32,
    final_index: Vec<Option<u32>>,
    /// Per thread: first start, last end, and per-metric set events and sample sums.
    thread_span: Vec<Option<(Instant, Instant)>>,
    thread_events: Vec<Vec<u64>>,
    thread_sum_ns: Vec<Vec<u64>>,
    thread_bytes: Vec<Vec<u64>>,
    total: Vec<PendingMetricSet>,
    total_dropped: u64,
    error: Option<String>,
    /// Per counter name: the values threads reported.
    counters: Vec<(Counter, Vec<f64>)>,
}

impl Merger {
    fn new(
        threads: usize,
        clock: Clock,
        metric_sets: &'static [MetricSet],
        basis: RateBasis,
    ) -> Self {
        let n = metric_sets.len();
        Self {
            clock,
            metric_sets,
            basis,
            pending: BTreeMap::new(),
            next: 0,
            emitted: 0,
            final_index: vec![None; threads],
            thread_span: vec![None; threads],
            thread_events: vec![vec![0; n]; threads],
            thread_sum_ns: vec![vec![0; n]; threads],
            thread_bytes: vec![vec![0; n]; threads],
            total: pending_metric_sets(n),
            total_dropped: 0,
            error: None,
            counters: Vec::new(),
        }
    }

    /// Takes a chunk in and gives its recording back for reuse.
    fn add(&mut self, chunk: Chunk) -> Recording {
        let n = self.metric_sets.len();
        let seconds = chunk
            .end
            .saturating_duration_since(chunk.start)
            .as_secs_f64();
        let pending = self.pending.entry(chunk.index).or_insert_with(|| Pending {
            metric_sets: pending_metric_sets(n),
            start: chunk.start,
            end: chunk.end,
            dropped: 0,
            threads_reported: 0,
        });
        let rec = &chunk.recording;
        for v in 0..n.min(rec.hists.len()) {
            // Same bounds on both sides: adding cannot fail.
            let _ = pending.metric_sets[v].hist.add(&rec.hists[v]);
            let _ = self.total[v].hist.add(&rec.hists[v]);
            let (events_per_sec, bytes_per_sec) = chunk_rates(self.basis, rec, v, seconds);
            pending.metric_sets[v].events_per_sec += events_per_sec;
            pending.metric_sets[v].bytes_per_sec += bytes_per_sec;
            pending.metric_sets[v].bytes += rec.bytes[v];
            self.total[v].bytes += rec.bytes[v];
            self.thread_events[chunk.thread][v] += rec.hists[v].len();
            self.thread_sum_ns[chunk.thread][v] += rec.sum_ns[v];
            self.thread_bytes[chunk.thread][v] += rec.bytes[v];
        }
        // Clamping is counted per recording; it is reported on the first metric set.
        pending.metric_sets[0].clamped += rec.clamped;
        self.total[0].clamped += rec.clamped;
        pending.start = pending.start.min(chunk.start);
        pending.end = pending.end.max(chunk.end);
        pending.dropped += chunk.dropped;
        pending.threads_reported += 1;
        self.total_dropped += chunk.dropped;
        let span = self.thread_span[chunk.thread].get_or_insert((chunk.start, chunk.end));
        span.0 = span.0.min(chunk.start);
        span.1 = span.1.max(chunk.end);
        if chunk.last {
            self.final_index[chunk.thread] = Some(chunk.index);
        }
        if chunk.error.is_some() && self.error.is_none() {
            self.error = chunk.error;
        }
        for counter in chunk.counters {
            match self
                .counters
                .iter_mut()
                .find(|(c, _)| c.name == counter.name)
            {
                Some((_, values)) => values.push(counter.value),
                None => {
                    let value = counter.value;
                    self.counters.push((counter, vec![value]));
                }
            }
        }
        chunk.recording
    }

    /// The next interval, once every thread that will report it has.
    fn next_complete(&mut self) -> Option<IntervalReport> {
        let expected = self
            .final_index
            .iter()
            .filter(|f| f.is_none_or(|last| last >= self.next))
            .count();
        let ready = self.pending.get(&self.next)?.threads_reported >= expected;
        if ready { self.flush_one() } else { None }
    }

    /// The next interval, complete or not (after every thread has exited).
    fn flush_one(&mut self) -> Option<IntervalReport> {
        let pending = self.pending.remove(&self.next)?;
        let report = IntervalReport {
            index: self.next,
            start: self.clock.wall(pending.start),
            end: self.clock.wall(pending.end),
            metric_sets: pending
                .metric_sets
                .into_iter()
                .zip(self.metric_sets)
                .map(|(p, &metric_set)| MetricSetReport {
                    metric_set,
                    events: p.hist.len(),
                    events_per_sec: p.events_per_sec,
                    throughput: metric_set
                        .throughput
                        .map(|t| p.bytes_per_sec / t.bytes_per_unit),
                    bytes: p.bytes,
                    latency_ns: p.hist,
                    clamped: p.clamped,
                })
                .collect(),
            dropped: pending.dropped,
        };
        self.next += 1;
        self.emitted += 1;
        Some(report)
    }

    /// The counters merged across threads.
    fn merged_counters(&self) -> Vec<Counter> {
        self.counters
            .iter()
            .map(|(c, values)| Counter {
                value: match c.merge {
                    Merge::Sum => values.iter().sum(),
                    Merge::Mean => values.iter().sum::<f64>() / values.len().max(1) as f64,
                    Merge::Max => values.iter().copied().fold(f64::MIN, f64::max),
                },
                ..c.clone()
            })
            .collect()
    }

    fn total(&self) -> IntervalReport {
        let n = self.metric_sets.len();
        let mut rates = vec![0.0; n];
        let mut byte_rates = vec![0.0; n];
        let mut start: Option<Instant> = None;
        let mut end: Option<Instant> = None;
        for (t, span) in self.thread_span.iter().enumerate() {
            let Some((s, e)) = *span else { continue };
            let elapsed = e.saturating_duration_since(s).as_secs_f64();
            for v in 0..n {
                let seconds = rate_seconds(self.basis, elapsed, self.thread_sum_ns[t][v]);
                if seconds > 0.0 {
                    rates[v] += self.thread_events[t][v] as f64 / seconds;
                    byte_rates[v] += self.thread_bytes[t][v] as f64 / seconds;
                }
            }
            start = Some(start.map_or(s, |x| x.min(s)));
            end = Some(end.map_or(e, |x| x.max(e)));
        }
        let start = start.map_or(self.clock.wall, |s| self.clock.wall(s));
        IntervalReport {
            index: self.emitted,
            start,
            end: end.map_or(start, |e| self.clock.wall(e)),
            metric_sets: (0..n)
                .map(|v| {
                    let metric_set = self.metric_sets[v];
                    MetricSetReport {
                        metric_set,
                        events: self.total[v].hist.len(),
                        events_per_sec: rates[v],
                        throughput: metric_set
                            .throughput
                            .map(|t| byte_rates[v] / t.bytes_per_unit),
                        bytes: self.total[v].bytes,
                        latency_ns: self.total[v].hist.clone(),
                        clamped: self.total[v].clamped,
                    }
                })
                .collect(),
            dropped: self.total_dropped,
        }
    }
}

#[cfg(test)]
mod tests;
