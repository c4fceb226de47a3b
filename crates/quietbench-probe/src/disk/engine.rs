//! The I/O engines behind the disk probes: a queue of `slots` requests kept in flight, each
//! with its own aligned buffer, reaped in batches with each request's submit-to-complete time.
//!
//! - **io_uring**: one ring per probe thread, its buffers and file registered once (fixed
//!   buffers skip the per-I/O page pinning, a fixed file the per-I/O file lookup). A step waits
//!   in one `io_uring_enter` for at least one completion; the requests that refill the freed
//!   slots are sent `batch` at a time. The default batch is 1, each request sent as soon as its
//!   slot frees, as fio does by default (iodepth_batch_submit=1): on the development VM's
//!   virtio disk, refilling 32 slots in one system call made the host answer in bursts and
//!   cost ~15% of the random-read IOPS, while the extra system calls cost a few percent of one
//!   CPU. Where the kernel has them, the ring is single-issuer with deferred task work, so
//!   completions are processed in the waiting system call rather than by interrupting the
//!   probe thread.
//! - **threads**: where io_uring is refused (seccomp profiles of container runtimes answer
//!   EPERM; `kernel.io_uring_disabled`; old kernels), one helper thread per slot does a blocking
//!   `pread`/`pwrite`. Slower per I/O (two context switches), but it keeps `slots` requests at
//!   the device, which is what the device's numbers depend on.
//!
//! Nothing here allocates after construction: completions land in a vector sized once.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use io_uring::{IoUring, types};

use super::aligned::AlignedBuf;

/// Which engine runs the I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EngineKind {
    /// io_uring.
    IoUring,
    /// One blocking helper thread per slot.
    Threads,
}

impl EngineKind {
    /// The name in parameters and reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Threads => "threads",
        }
    }
}

/// The `engine` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EngineChoice {
    /// io_uring where the kernel allows it, threads otherwise.
    Auto,
    /// Only this engine.
    Only(EngineKind),
}

impl EngineChoice {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "auto" => Some(Self::Auto),
            "io_uring" | "io-uring" | "uring" => Some(Self::Only(EngineKind::IoUring)),
            "threads" | "thread" | "psync" => Some(Self::Only(EngineKind::Threads)),
            _ => None,
        }
    }

    /// The engine this choice runs on this machine: `auto` tries to set up a tiny ring, so the
    /// report says what will run, not what was asked.
    pub(crate) fn resolve(self) -> Result<EngineKind, String> {
        match self {
            Self::Only(EngineKind::Threads) => Ok(EngineKind::Threads),
            Self::Only(EngineKind::IoUring) => io_uring_available()
                .map(|()| EngineKind::IoUring)
                .map_err(|e| {
                    format!(
                        "io_uring is not available here ({e}); use engine=auto or engine=threads"
                    )
                }),
            Self::Auto => Ok(if io_uring_available().is_ok() {
                EngineKind::IoUring
            } else {
                EngineKind::Threads
            }),
        }
    }
}

/// Whether this process may create an io_uring instance.
pub(crate) fn io_uring_available() -> io::Result<()> {
    IoUring::new(2).map(drop)
}

/// One finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The slot it used.
    pub slot: usize,
    /// Bytes transferred, or a negative errno.
    pub result: i64,
    /// Submit to completion, in nanoseconds.
    pub latency_ns: u64,
}

/// Requests kept in flight against one file, one buffer per slot.
pub(crate) struct IoQueue {
    backend: Backend,
    submitted: Vec<Instant>,
    inflight: usize,
    done: Vec<Completion>,
    serial: u64,
    buf_len: usize,
    /// Share of the buffers' mapping backed by huge pages (0-100); `None` when
    /// /proc/self/smaps could not say.
    huge_page_pct: Option<f64>,
    /// Requests gathered before a submission system call, and those gathered so far.
    batch: usize,
    queued: usize,
}

// One per probe thread, built once: the ring's inline size costs nothing, a box would cost a
// pointer chase per request.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Uring(UringQueue),
    Threads(ThreadQueue),
}

impl IoQueue {
    /// A queue of `slots` requests of up to `buf_len` bytes on `file`, sent `batch` at a time
    /// (io_uring; helper threads take each at once). Write buffers hold pseudo-random data
    /// from `seed`.
    pub(crate) fn new(
        kind: EngineKind,
        file: Arc<File>,
        slots: usize,
        buf_len: usize,
        seed: u64,
        batch: usize,
    ) -> Result<Self, String> {
        let slots = slots.max(1);
        let buffers = AlignedBuf::many_random(slots, buf_len, |slot| seed ^ (slot as u64) << 32)?;
        // Filled, so every page is faulted in: what backs them now is what the I/O will use.
        let huge_page_pct = buffers[0].huge_page_pct();
        let backend = match kind {
            EngineKind::IoUring => Backend::Uring(UringQueue::new(file, buffers)?),
            EngineKind::Threads => Backend::Threads(ThreadQueue::new(file, buffers)?),
        };
        let now = Instant::now();
        Ok(Self {
            backend,
            submitted: vec![now; slots],
            inflight: 0,
            done: Vec::with_capacity(slots),
            serial: 0,
            buf_len,
            huge_page_pct,
            batch: batch.clamp(1, slots),
            queued: 0,
        })
    }

    /// The engine that runs.
    pub(crate) fn kind(&self) -> EngineKind {
        match self.backend {
            Backend::Uring(_) => EngineKind::IoUring,
            Backend::Threads(_) => EngineKind::Threads,
        }
    }

    /// Whether io_uring uses registered (fixed) buffers.
    pub(crate) fn fixed_buffers(&self) -> bool {
        matches!(&self.backend, Backend::Uring(u) if u.fixed_bufs)
    }

    /// Share of the I/O buffers backed by huge pages, 0-100 (`None`: unknown).
    pub(crate) fn huge_page_pct(&self) -> Option<f64> {
        self.huge_page_pct
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> usize {
        self.submitted.len()
    }

    /// Requests in flight.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight
    }

    /// Queues a read or write of `len` bytes at `offset` on a free `slot`. With io_uring it is
    /// sent once `batch` requests are queued, or by the next [`IoQueue::reap`]; with threads
    /// at once.
    #[inline]
    pub(crate) fn submit(
        &mut self,
        slot: usize,
        write: bool,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        debug_assert!(len <= self.buf_len);
        self.serial += 1;
        let serial = self.serial;
        self.submitted[slot] = Instant::now();
        match &mut self.backend {
            Backend::Uring(u) => {
                u.push(slot, write, offset, len, serial)?;
                self.queued += 1;
                if self.queued >= self.batch {
                    u.flush()?;
                    self.queued = 0;
                }
            }
            Backend::Threads(t) => t.send(slot, write, offset, len, serial)?,
        }
        self.inflight += 1;
        Ok(())
    }

    /// Sends queued requests and waits until at least `min` (at most those in flight) have
    /// completed. Returns how many completed; read them with [`IoQueue::completion`].
    #[inline]
    pub(crate) fn reap(&mut self, min: usize) -> io::Result<usize> {
        self.done.clear();
        self.queued = 0;
        let min = min.min(self.inflight);
        match &mut self.backend {
            Backend::Uring(u) => u.reap(min, &self.submitted, &mut self.done)?,
            Backend::Threads(t) => t.reap(min, &self.submitted, &mut self.done)?,
        }
        self.inflight -= self.done.len();
        Ok(self.done.len())
    }

    /// The `i`th completion of the last [`IoQueue::reap`].
    #[inline]
    pub(crate) fn completion(&self, i: usize) -> Completion {
        self.done[i]
    }

    /// Waits for every request in flight, discarding their results.
    pub(crate) fn drain(&mut self) {
        while self.inflight > 0 {
            if self.reap(self.inflight).is_err() {
                // The ring cannot be waited on: nothing more will complete through it. The
                // buffers stay registered (pinned by the kernel) until the ring closes.
                break;
            }
        }
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        // The kernel may still be writing into the slots' buffers: never free them under it.
        self.drain();
    }
}

/// io_uring: one ring, fixed buffers and a fixed file where the kernel allows them.
struct UringQueue {
    ring: IoUring,
    /// The ring was created disabled, to be enabled by the thread that submits (single issuer).
    enabled: bool,
    fixed_file: bool,
    fixed_bufs: bool,
    /// Declared after the ring so it outlives it; the queue drains before either drops.
    buffers: Vec<AlignedBuf>,
    file: Arc<File>,
}

impl UringQueue {
    fn new(file: Arc<File>, buffers: Vec<AlignedBuf>) -> Result<Self, String> {
        let entries = (buffers.len() as u32).next_power_of_two().max(2);
        // Best first: single issuer with deferred task work (Linux 6.1), created disabled so
        // the probe thread that later submits becomes its issuer even when the workload is
        // built on another thread; then cooperative task running (5.19); then plain.
        let attempts: [fn(&mut io_uring::Builder) -> &mut io_uring::Builder; 3] = [
            |b| {
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_r_disabled()
            },
            |b| b.setup_coop_taskrun(),
            |b| b,
        ];
        let mut last_error = None;
        let mut built = None;
        for (i, attempt) in attempts.iter().enumerate() {
            let mut builder = IoUring::builder();
            attempt(&mut builder);
            match builder.setup_cqsize(entries * 2).build(entries) {
                Ok(ring) => {
                    built = Some((ring, i == 0));
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let Some((ring, disabled)) = built else {
            let e = last_error.map_or_else(|| "unknown error".to_string(), |e| e.to_string());
            return Err(format!("cannot set up io_uring: {e}"));
        };
        let iovecs: Vec<nix::libc::iovec> = buffers
            .iter()
            .map(|b| nix::libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: every iovec points at a live buffer owned by this queue, which keeps it until
        // after the ring (and so the registration) is gone: field order and the drain in
        // IoQueue's Drop.
        let fixed_bufs = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
        let fixed_file = ring.submitter().register_files(&[file.as_raw_fd()]).is_ok();
        Ok(Self {
            ring,
            enabled: !disabled,
            fixed_file,
            fixed_bufs,
            buffers,
            file,
        })
    }

    #[inline]
    fn push(
        &mut self,
        slot: usize,
        write: bool,
        offset: u64,
        len: usize,
        serial: u64,
    ) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        let buf = &mut self.buffers[slot];
        if write {
            buf.stamp(offset, serial);
        }
        let ptr = buf.as_mut_ptr();
        let len = len as u32;
        let entry = if self.fixed_file {
            build(
                types::Fixed(0),
                write,
                self.fixed_bufs,
                ptr,
                len,
                slot,
                offset,
            )
        } else {
            let fd = types::Fd(self.file.as_raw_fd());
            build(fd, write, self.fixed_bufs, ptr, len, slot, offset)
        };
        // SAFETY: the entry points at this slot's buffer, which stays alive and untouched by us
        // until its completion is reaped (a slot is resubmitted only after that).
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| io::Error::other("the io_uring submission queue is full"))
    }

    /// Sends what is queued, without waiting.
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        match self.ring.submit() {
            Ok(_) => Ok(()),
            // Interrupted, or short of resources until completions are reaped: the entries
            // stay queued and go with the next reap.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(nix::libc::EINTR | nix::libc::EAGAIN | nix::libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    #[inline]
    fn reap(
        &mut self,
        min: usize,
        submitted: &[Instant],
        done: &mut Vec<Completion>,
    ) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(min) {
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(nix::libc::EINTR | nix::libc::EAGAIN | nix::libc::EBUSY)
                    ) =>
                {
                    // Interrupted, or the kernel wants completions reaped first: take what is
                    // there, and wait again if that is not enough.
                    if self.ring.completion().is_empty() {
                        continue;
                    }
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            done.push(Completion {
                slot,
                result: i64::from(cqe.result()),
                latency_ns: nanos_between(submitted[slot], now),
            });
        }
        Ok(())
    }
}

/// A read or write entry for `slot`: through its registered buffer (registered at the slot's
/// index) where buffers are registered.
#[inline]
fn build(
    fd: impl io_uring_fd::Target,
    write: bool,
    fixed_bufs: bool,
    ptr: *mut u8,
    len: u32,
    slot: usize,
    offset: u64,
) -> io_uring::squeue::Entry {
    let buf_index = fixed_bufs.then_some(slot as u16);
    fd.entry(write, buf_index, ptr, len, offset)
        .user_data(slot as u64)
}

/// The two kinds of file reference io_uring's opcodes take (a descriptor, or an index into the
/// registered files), behind one call.
mod io_uring_fd {
    use io_uring::{opcode, squeue::Entry, types};

    pub(super) trait Target: Copy {
        fn entry(
            self,
            write: bool,
            buf_index: Option<u16>,
            ptr: *mut u8,
            len: u32,
            offset: u64,
        ) -> Entry;
    }

    macro_rules! target {
        ($t:ty) => {
            impl Target for $t {
                #[inline]
                fn entry(
                    self,
                    write: bool,
                    buf_index: Option<u16>,
                    ptr: *mut u8,
                    len: u32,
                    offset: u64,
                ) -> Entry {
                    match (write, buf_index) {
                        (false, Some(i)) => opcode::ReadFixed::new(self, ptr, len, i)
                            .offset(offset)
                            .build(),
                        (true, Some(i)) => opcode::WriteFixed::new(self, ptr, len, i)
                            .offset(offset)
                            .build(),
                        (false, None) => opcode::Read::new(self, ptr, len).offset(offset).build(),
                        (true, None) => opcode::Write::new(self, ptr, len).offset(offset).build(),
                    }
                }
            }
        };
    }
    target!(types::Fd);
    target!(types::Fixed);
}

/// One blocking helper thread per slot.
struct ThreadQueue {
    jobs: Vec<SyncSender<Job>>,
    completions: Receiver<(usize, i64, Instant)>,
    helpers: Vec<JoinHandle<()>>,
}

#[derive(Clone, Copy)]
struct Job {
    write: bool,
    offset: u64,
    len: usize,
    serial: u64,
}

impl ThreadQueue {
    fn new(file: Arc<File>, buffers: Vec<AlignedBuf>) -> Result<Self, String> {
        let slots = buffers.len();
        let (done_tx, completions) = sync_channel(slots);
        let mut jobs = Vec::with_capacity(slots);
        let mut helpers = Vec::with_capacity(slots);
        for (slot, mut buf) in buffers.into_iter().enumerate() {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let file = Arc::clone(&file);
            let done_tx = done_tx.clone();
            let helper = std::thread::Builder::new()
                .name(format!("qb-disk-io-{slot}"))
                .spawn(move || {
                    // Ends when the queue drops its sender.
                    for job in job_rx {
                        let result = if job.write {
                            buf.stamp(job.offset, job.serial);
                            file.write_at(&buf.as_slice()[..job.len], job.offset)
                        } else {
                            file.read_at(&mut buf.as_mut_slice()[..job.len], job.offset)
                        };
                        let end = Instant::now();
                        let result = match result {
                            Ok(n) => n as i64,
                            Err(e) => -i64::from(e.raw_os_error().unwrap_or(nix::libc::EIO)),
                        };
                        if done_tx.send((slot, result, end)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| format!("cannot start I/O helper thread {slot}: {e}"))?;
            jobs.push(job_tx);
            helpers.push(helper);
        }
        Ok(Self {
            jobs,
            completions,
            helpers,
        })
    }

    fn send(
        &mut self,
        slot: usize,
        write: bool,
        offset: u64,
        len: usize,
        serial: u64,
    ) -> io::Result<()> {
        self.jobs[slot]
            .send(Job {
                write,
                offset,
                len,
                serial,
            })
            .map_err(|_| io::Error::other(format!("I/O helper thread {slot} has exited")))
    }

    fn reap(
        &mut self,
        min: usize,
        submitted: &[Instant],
        done: &mut Vec<Completion>,
    ) -> io::Result<()> {
        let mut push = |(slot, result, end): (usize, i64, Instant)| {
            done.push(Completion {
                slot,
                result,
                latency_ns: nanos_between(submitted[slot], end),
            });
        };
        for _ in 0..min {
            let c = self
                .completions
                .recv()
                .map_err(|_| io::Error::other("every I/O helper thread has exited"))?;
            push(c);
        }
        while let Ok(c) = self.completions.try_recv() {
            push(c);
        }
        Ok(())
    }
}

impl Drop for ThreadQueue {
    fn drop(&mut self) {
        self.jobs.clear();
        for helper in self.helpers.drain(..) {
            let _ = helper.join();
        }
    }
}

#[inline]
fn nanos_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}
