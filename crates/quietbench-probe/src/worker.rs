//! One probe thread: pin, allocate, wait for the start, then measure.
//!
//! The measured loop is the product's most sensitive code. Per event it runs the workload, reads
//! the monotonic clock (vDSO, no system call on tsc/kvm-clock), records into a fixed-size
//! histogram it owns, and loads one relaxed atomic. At an interval boundary it hands its
//! recording to the supervisor through a bounded, preallocated channel and takes a spare one back
//! from another: no allocation, no lock, no log, no await, ever, inside the loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::affinity::{current_cpu, current_thread_affinity, pin_current_thread};
use crate::histogram::{new_latency_histogram, record_clamped};
use crate::placement::ThreadPlacement;
use crate::{Counter, Samples, Step, Workload};

/// Recordings per thread: one recording, the rest in flight or spare. Four gives the supervisor
/// three intervals of slack before a thread must stretch an interval instead of swapping.
pub(crate) const RECORDINGS_PER_THREAD: usize = 4;

/// What a thread records in one interval: one histogram per metric set of its workload, with the
/// exact sum of each metric set's samples (for per-metric set rates) and the clamped count.
pub(crate) struct Recording {
    pub hists: Vec<Histogram<u64>>,
    pub sum_ns: Vec<u64>,
    pub bytes: Vec<u64>,
    pub clamped: u64,
}

impl Recording {
    pub(crate) fn new(metric_sets: usize) -> Self {
        Self {
            hists: (0..metric_sets).map(|_| new_latency_histogram()).collect(),
            sum_ns: vec![0; metric_sets],
            bytes: vec![0; metric_sets],
            clamped: 0,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.hists.iter_mut().for_each(Histogram::reset);
        self.sum_ns.iter_mut().for_each(|s| *s = 0);
        self.bytes.iter_mut().for_each(|s| *s = 0);
        self.clamped = 0;
    }

    /// One sample; an out-of-range metric set goes to the last one rather than panicking.
    #[inline]
    pub(crate) fn record(&mut self, metric_set: usize, latency_ns: u64, bytes: u64) {
        let v = metric_set.min(self.hists.len() - 1);
        self.clamped += u64::from(record_clamped(&mut self.hists[v], latency_ns));
        self.sum_ns[v] = self.sum_ns[v].saturating_add(latency_ns);
        self.bytes[v] = self.bytes[v].saturating_add(bytes);
    }

    pub(crate) fn events(&self) -> u64 {
        self.hists.iter().map(Histogram::len).sum()
    }
}

/// One thread's recording of one interval, handed to the supervisor.
pub(crate) struct Chunk {
    pub thread: usize,
    pub index: u32,
    pub start: Instant,
    pub end: Instant,
    pub recording: Recording,
    /// Samples lost because the supervisor's channel was full (cannot happen by construction:
    /// its capacity covers every recording in flight; counted rather than assumed).
    pub dropped: u64,
    pub last: bool,
    /// Set on the last chunk when the workload failed.
    pub error: Option<String>,
    /// Set on the last chunk: the workload's own whole-trial figures.
    pub counters: Vec<Counter>,
}

/// Everything a probe thread needs, moved into it at spawn.
pub(crate) struct Worker {
    pub thread: usize,
    pub cpu: u32,
    /// The affinity to set: `[cpu]`, or every allowed CPU for an unpinned baseline.
    pub pin_to: Vec<u32>,
    /// Builds this thread's workload, on this thread, after pinning.
    pub factory: crate::spec::WorkloadFactory,
    /// Histograms per recording: the probe's metric sets, as the supervisor merges them.
    pub metric_sets: usize,
    pub duration: Duration,
    pub interval: Duration,
    pub chunks: SyncSender<Chunk>,
    pub spares_in: SyncSender<Recording>,
    pub spares: Receiver<Recording>,
    pub ready: Sender<Result<ThreadPlacement, String>>,
    pub start: Arc<Barrier>,
    pub abort: Arc<AtomicBool>,
    pub cancel: Arc<AtomicBool>,
    pub exit_gate: Arc<ExitGate>,
}

impl Worker {
    pub(crate) fn run(mut self) {
        let placement = match self.pin() {
            Ok(placement) => placement,
            Err(message) => {
                let _ = self.ready.send(Err(message));
                self.start.wait();
                return;
            }
        };
        // Built and allocated after pinning, so its pages are first touched on this CPU's NUMA
        // node (and a workload that fails to build fails the setup, before anything starts).
        let mut workload = match (self.factory)(self.thread) {
            Ok(workload) => workload,
            Err(message) => {
                let _ = self.ready.send(Err(message));
                self.start.wait();
                return;
            }
        };
        let metric_sets = self.metric_sets;
        let recording = Recording::new(metric_sets);
        for _ in 1..RECORDINGS_PER_THREAD {
            let _ = self.spares_in.try_send(Recording::new(metric_sets));
        }
        let _ = self.ready.send(Ok(placement));
        self.start.wait();
        if self.abort.load(Ordering::Acquire) {
            return;
        }
        self.measure(recording, workload.as_mut());
    }

    fn pin(&self) -> Result<ThreadPlacement, String> {
        pin_current_thread(&self.pin_to).map_err(|e| {
            let cpus: Vec<String> = self.pin_to.iter().map(u32::to_string).collect();
            format!(
                "cannot pin probe thread {} to CPU {}: {e}",
                self.thread,
                cpus.join(",")
            )
        })?;
        let affinity_cpus = current_thread_affinity().map_err(|e| e.to_string())?;
        let observed_cpu = current_cpu().map_err(|e| e.to_string())?;
        Ok(ThreadPlacement {
            thread_index: self.thread as u32,
            planned_cpu: self.cpu,
            affinity_cpus,
            observed_cpu,
            tid: nix::unistd::gettid().as_raw(),
        })
    }

    fn measure(&mut self, mut rec: Recording, workload: &mut dyn Workload) {
        let start = Instant::now();
        let end = start + self.duration;
        let mut boundary = start + self.interval;
        let mut interval_start = start;
        let mut index = 0u32;
        let mut dropped = 0u64;
        let mut t0 = start;
        let mut failed = false;
        loop {
            let step = workload.step(&mut Samples { rec: &mut rec });
            let t1 = Instant::now();
            match step {
                Step::Timed { metric_set, bytes } => {
                    let ns = u64::try_from(t1.duration_since(t0).as_nanos()).unwrap_or(u64::MAX);
                    rec.record(metric_set, ns, bytes);
                }
                Step::Recorded => {}
                Step::Finished => break,
                Step::Failed => {
                    failed = true;
                    break;
                }
            }
            t0 = t1;
            if t1 >= end || self.cancel.load(Ordering::Relaxed) {
                break;
            }
            if t1 >= boundary {
                while boundary <= t1 {
                    boundary += self.interval;
                }
                // No spare back yet: keep recording, this interval simply runs longer.
                let Ok(fresh) = self.spares.try_recv() else {
                    continue;
                };
                let chunk = Chunk {
                    thread: self.thread,
                    index,
                    start: interval_start,
                    end: t1,
                    recording: std::mem::replace(&mut rec, fresh),
                    dropped,
                    last: false,
                    error: None,
                    counters: Vec::new(),
                };
                match self.chunks.try_send(chunk) {
                    Ok(()) => {}
                    // The supervisor is gone: nobody will read further results.
                    Err(TrySendError::Disconnected(_)) => return,
                    Err(TrySendError::Full(lost)) => {
                        dropped += lost.recording.events();
                        continue;
                    }
                }
                index += 1;
                dropped = 0;
                interval_start = t1;
            }
        }
        // Off the measured path from here: the loop has ended.
        workload.finish();
        let counters = workload.counters();
        let error = if failed {
            Some(
                workload
                    .take_error()
                    .unwrap_or_else(|| "the workload failed".to_string()),
            )
        } else {
            None
        };
        let last = Chunk {
            thread: self.thread,
            index,
            start: interval_start,
            end: t0,
            recording: rec,
            dropped,
            last: true,
            error,
            counters,
        };
        let _ = self.chunks.send(last);
        // Stay alive (off the measured path) until the supervisor has read this thread's
        // counters for the last interval.
        self.exit_gate.wait();
    }
}

/// Where probe threads wait, after their last chunk, until the supervisor has reported every
/// interval. A gate rather than a barrier: a thread that panicked never arrives, and that must
/// not block the others.
#[derive(Default)]
pub(crate) struct ExitGate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl ExitGate {
    pub(crate) fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.opened.notify_all();
    }

    pub(crate) fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}
