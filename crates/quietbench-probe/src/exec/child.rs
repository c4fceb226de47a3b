//! One command's processes, from fork to reaping, inside the trial's bounds.
//!
//! Every command runs in a process group of its own (the child calls `setpgid(0, 0)` before
//! exec; the parent calls it too, so the group exists whichever runs first), and the whole
//! group is killed with SIGKILL when the command ends, when the trial is cancelled (the Cancel
//! RPC, a caller that hung up, the agent stopping) and when the command runs past the trial's
//! deadline. What the command started and left behind (`sleep 300 &`) goes with it: nothing a
//! trial starts outlives it. A process that leaves the group on purpose (setsid, a shell's job
//! control) escapes; only a cgroup would hold that too, and the agent may not own one.
//!
//! The wait never blocks in a plain wait4: the leader's exit is awaited on a pidfd with
//! poll(2), waking every [`WATCH_EVERY`] to look at the cancel flag and the deadline. poll
//! returns the moment the leader exits, as wait4 would, so the wall time gains nothing; the
//! wakeups cost the command's CPU a few microseconds in 50 ms. Kernels without pidfd_open
//! (before 5.3, or a seccomp filter refusing it) fall back to looking every [`NAP`] with a
//! non-blocking waitid, which adds up to that much to each wall time.
//!
//! The group is killed while the leader is still a zombie (waitid with WNOWAIT sees its exit
//! without reaping it): its pid, and so the group's id, cannot be reused before the kill, so
//! the kill can never reach another process's group.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::libc;

use crate::spec::TrialBounds;

/// How often a wait looks at the cancel flag and the deadline.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(50);
/// The look interval without a pidfd.
const NAP: Duration = Duration::from_millis(1);

/// When a trial's commands must stop: at a cancel, and past the deadline.
#[derive(Debug, Default)]
pub(super) struct Watch {
    bounds: Option<TrialBounds>,
    cancel: Option<Arc<AtomicBool>>,
    /// Set at the first command: the trial measures from about then.
    deadline: Option<Instant>,
}

impl Watch {
    /// Watches for `bounds`; with none (a library caller that set none), commands run to
    /// their end, but still in their own group, killed when they end.
    pub(super) fn new(bounds: Option<TrialBounds>) -> Self {
        Self {
            cancel: bounds.as_ref().map(|b| Arc::clone(&b.cancel)),
            bounds,
            deadline: None,
        }
    }

    /// Starts the deadline's clock, once: at the trial's first command.
    pub(super) fn start(&mut self) {
        if self.deadline.is_none() {
            self.deadline = self.bounds.as_ref().map(|b| Instant::now() + b.limit());
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Why the command must stop now, if it must.
    fn stop(&self, now: Instant) -> Option<Stopped> {
        if self.cancelled() {
            return Some(Stopped::Cancelled);
        }
        match self.deadline {
            Some(deadline) if now >= deadline => Some(Stopped::Overran),
            _ => None,
        }
    }

    /// How long to wait before looking again.
    fn next_look(&self, now: Instant, every: Duration) -> Duration {
        match self.deadline {
            Some(deadline) => every.min(deadline.saturating_duration_since(now)),
            None => every,
        }
    }

    /// The failure of a command killed at the deadline, naming it as the caller does ("the
    /// command", "command B").
    pub(super) fn overran(&self, name: &str) -> String {
        let (limit, duration, grace) = match &self.bounds {
            Some(b) => (b.limit(), b.duration, b.grace),
            None => Default::default(),
        };
        format!(
            "exec: {name} ran past the trial's deadline of {} s (duration {} s + grace {} s); \
             it was killed. Give the trial a longer duration, or time a command that ends \
             within the grace",
            seconds(limit),
            seconds(duration),
            seconds(grace)
        )
    }
}

/// Seconds to the millisecond, without trailing zeros: "0.5", "5", "5.5".
fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    let (whole, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:03}")
            .trim_end_matches('0')
            .to_string()
    }
}

/// Why a command was stopped before it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopped {
    /// The trial was cancelled: not a failure.
    Cancelled,
    /// The command ran past the trial's deadline: the trial fails.
    Overran,
}

/// A forked command's process group, whose id is the leader's pid. Killed and reaped on drop
/// unless reaped before: a panic or an early return between fork and reaping leaves nothing
/// running.
pub(super) struct Group {
    pid: libc::pid_t,
    reaped: bool,
}

/// How the leader ended, from wait4.
pub(super) struct Ended {
    pub(super) status: libc::c_int,
    pub(super) usage: libc::rusage,
}

impl Group {
    /// Takes charge of `pid`, just forked, whose child side calls `setpgid(0, 0)` first thing.
    pub(super) fn adopt(pid: libc::pid_t) -> Self {
        // SAFETY: setpgid on our own child. It fails harmlessly (EACCES) if the child has
        // already exec'd, and then it has already made the group itself.
        unsafe { libc::setpgid(pid, pid) };
        Self { pid, reaped: false }
    }

    /// The leader's pid.
    pub(super) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits until the leader exits, without reaping it, or until `watch` says stop.
    pub(super) fn wait_exit(&self, watch: &Watch) -> Result<(), Stopped> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; the pid
        // is our unreaped child, so it names no other process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid, 0) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        });
        loop {
            let now = Instant::now();
            if let Some(why) = watch.stop(now) {
                return Err(why);
            }
            let exited = match &pidfd {
                Some(fd) => readable(fd, watch.next_look(now, WATCH_EVERY)),
                None => {
                    let exited = self.has_exited();
                    if !exited {
                        std::thread::sleep(watch.next_look(now, NAP));
                    }
                    exited
                }
            };
            if exited {
                return Ok(());
            }
        }
    }

    /// Whether the leader has exited (it is a zombie, not yet reaped).
    fn has_exited(&self) -> bool {
        // SAFETY: an all-zero siginfo is valid; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with a valid siginfo; WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid (0 when no child has changed state).
        r == 0 && unsafe { info.si_pid() } == self.pid
    }

    /// SIGKILL to every process of the group. The leader is unreaped, so the group's id is
    /// still ours.
    pub(super) fn kill(&self) {
        // SAFETY: kill(2) with a negative pid signals that process group; it is our child's.
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
    }

    /// Reaps the leader: its status and resource usage (its own and that of the children it
    /// waited for).
    pub(super) fn reap(&mut self) -> std::io::Result<Ended> {
        // Reaped or not ours to wait for any more (reaped elsewhere): nothing is left to reap.
        self.reaped = true;
        let (status, usage) = wait4_child(self.pid)?;
        Ok(Ended { status, usage })
    }
}

/// Waits for child `pid` to end (retrying when a signal interrupts): its wait status and its
/// resource usage, its own and that of the children it waited for. An error means it is not
/// ours to wait for any more. Shared with the agent's user servers.
pub fn wait4_child(pid: libc::pid_t) -> std::io::Result<(libc::c_int, libc::rusage)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and usage are valid, writable locations; wait4 on a pid that is not
        // our child fails with ECHILD and writes nothing.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if waited == pid {
            return Ok((status, usage));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
            let _ = self.reap();
        }
    }
}

/// Whether `fd` became readable within `timeout` (a pidfd is readable once its process has
/// exited).
fn readable(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up: a wait shorter than a millisecond must not become a busy loop.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd, for the duration of the call.
    let r = unsafe { libc::poll(&mut poll, 1, ms) };
    r > 0 && poll.revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_people_write_them() {
        assert_eq!(seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(seconds(Duration::from_secs(5)), "5");
        assert_eq!(seconds(Duration::from_millis(5500)), "5.5");
        assert_eq!(seconds(Duration::from_millis(1234)), "1.234");
        assert_eq!(seconds(Duration::ZERO), "0");
    }

    #[test]
    fn a_watch_stops_at_a_cancel_and_past_its_deadline_and_not_before() {
        let cancel = Arc::new(AtomicBool::new(false));
        let bounds = TrialBounds {
            cancel: Arc::clone(&cancel),
            duration: Duration::from_millis(500),
            grace: Duration::from_secs(5),
        };
        let mut watch = Watch::new(Some(bounds));
        let now = Instant::now();
        // Not started: no deadline yet.
        assert_eq!(watch.stop(now + Duration::from_secs(100)), None);
        watch.start();
        let deadline = watch.deadline.unwrap();
        watch.start();
        assert_eq!(watch.deadline, Some(deadline), "the clock starts once");
        assert_eq!(watch.stop(deadline - Duration::from_millis(1)), None);
        assert_eq!(watch.stop(deadline), Some(Stopped::Overran));
        assert_eq!(
            watch.next_look(deadline - Duration::from_millis(10), WATCH_EVERY),
            Duration::from_millis(10)
        );
        cancel.store(true, Ordering::Relaxed);
        assert_eq!(watch.stop(now), Some(Stopped::Cancelled));
        assert_eq!(
            watch.overran("the command"),
            "exec: the command ran past the trial's deadline of 5.5 s (duration 0.5 s + grace \
             5 s); it was killed. Give the trial a longer duration, or time a command that ends \
             within the grace"
        );
        let unbounded = Watch::new(None);
        assert_eq!(unbounded.stop(now + Duration::from_secs(1 << 20)), None);
        assert_eq!(unbounded.next_look(now, WATCH_EVERY), WATCH_EVERY);
    }
}
