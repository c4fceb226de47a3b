//! `cpu.spawn`: fork + exec + wait of a child that does nothing, with address-space
//! randomization on and off in alternate events of the same trial (CONTEXT.md §3: on one
//! platform a bug made exec slow only with ASLR on; measuring both side by side, interleaved,
//! shows such a gap and cancels out drift).
//!
//! The child is this same program in a do-nothing mode ([`NOOP_ARG`], handled by
//! [`exit_if_noop`] first thing in `main`), so the probe needs nothing installed and measures
//! the kernel's work (fork, exec, the dynamic loader, exit, wait) on a real binary.

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use quietbench_vocab::metrics;

use crate::exec::Prepared;
use crate::{MetricSet, Samples, Step, Workload};

/// The argument that makes a quietbench binary exit at once, successfully.
pub const NOOP_ARG: &str = "--quietbench-noop";

/// Exits the process with status 0 when it was started as a cpu.spawn child. Call it first in
/// `main`, before any allocation that is not needed, so the child costs what exec costs.
pub fn exit_if_noop() {
    if std::env::args_os().nth(1).is_some_and(|a| a == NOOP_ARG) {
        std::process::exit(0);
    }
}

/// ADDR_NO_RANDOMIZE from linux/personality.h.
const ADDR_NO_RANDOMIZE: nix::libc::c_ulong = 0x0040000;

/// The two metric sets: events alternate between them.
pub const METRIC_SETS: &[MetricSet] = &[
    MetricSet {
        rate_metric: metrics::SPAWNS_PER_SEC_ASLR_ON,
        rate_unit: "spawns/s",
        latency_metric: metrics::SPAWN_LATENCY_ASLR_ON,
        latency_unit: "ns",
        throughput: None,
    },
    MetricSet {
        rate_metric: metrics::SPAWNS_PER_SEC_ASLR_OFF,
        rate_unit: "spawns/s",
        latency_metric: metrics::SPAWN_LATENCY_ASLR_OFF,
        latency_unit: "ns",
        throughput: None,
    },
];

/// The cpu.spawn workload of one thread.
pub struct SpawnWorkload {
    /// `program NOOP_ARG`, ready to exec.
    command: Prepared,
    next_aslr_off: bool,
    error: Option<String>,
}

// SAFETY: the raw pointers point into `command`'s argv, owned by the same struct and never mutated
// after construction; moving the struct to another thread moves the CStrings' heap buffers'
// owners with it, and the buffers themselves do not move.
unsafe impl Send for SpawnWorkload {}

impl std::fmt::Debug for SpawnWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnWorkload")
            .field("program", &self.command.program)
            .finish()
    }
}

impl SpawnWorkload {
    /// Spawns `program NOOP_ARG`. Fails when the path has a NUL byte.
    pub fn new(program: &std::path::Path) -> Result<Self, String> {
        let argv = [program.as_os_str(), std::ffi::OsStr::new(NOOP_ARG)];
        Ok(Self {
            command: Prepared::new(program, &argv)?,
            next_aslr_off: false,
            error: None,
        })
    }

    fn spawn_once(&mut self, aslr_off: bool) -> Result<(), String> {
        // SAFETY: fork in a multi-threaded process is sound when the child only makes
        // async-signal-safe calls before exec: personality(2), execv(2) and _exit(2) are system
        // calls, and every pointer they get was built before the fork.
        let pid = unsafe { nix::libc::fork() };
        if pid < 0 {
            return Err(format!("fork failed: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: child side of the fork, see above; _exit never returns.
            unsafe {
                // Refused (LockPersonality=, seccomp): exit 125 rather than measure an "ASLR
                // off" spawn with ASLR on.
                if aslr_off && nix::libc::personality(ADDR_NO_RANDOMIZE) == -1 {
                    nix::libc::_exit(125);
                }
                nix::libc::execv(
                    self.command.program.as_ptr(),
                    self.command.argv_ptrs.as_ptr(),
                );
                nix::libc::_exit(127);
            }
        }
        match waitpid(Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(WaitStatus::Exited(_, 125)) if aslr_off => Err(
                "ASLR cannot be turned off here: personality(ADDR_NO_RANDOMIZE) was refused \
                 (systemd's LockPersonality=, or a seccomp filter), so the aslr-off spawns \
                 cannot be measured"
                    .to_string(),
            ),
            Ok(WaitStatus::Exited(_, 127)) => Err(format!(
                "cannot execute {} (exit status 127)",
                self.command.program.to_string_lossy()
            )),
            Ok(other) => Err(format!(
                "the spawned child {} ended abnormally: {other:?}",
                self.command.program.to_string_lossy()
            )),
            Err(err) => Err(format!("waitpid failed: {err}")),
        }
    }
}

impl Workload for SpawnWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        METRIC_SETS
    }

    fn step(&mut self, _samples: &mut Samples<'_>) -> Step {
        let aslr_off = self.next_aslr_off;
        self.next_aslr_off = !aslr_off;
        match self.spawn_once(aslr_off) {
            Ok(()) => Step::Timed {
                metric_set: usize::from(aslr_off),
                bytes: 0,
            },
            Err(message) => {
                self.error = Some(message);
                Step::Failed
            }
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawns_a_real_program_alternating_aslr() {
        // /bin/true ignores its argument, like our no-op mode.
        let mut w = SpawnWorkload::new(std::path::Path::new("/bin/true")).unwrap();
        let mut rec = crate::worker::Recording::new(2);
        let mut samples = Samples { rec: &mut rec };
        assert_eq!(
            w.step(&mut samples),
            Step::Timed {
                metric_set: 0,
                bytes: 0
            }
        );
        assert_eq!(
            w.step(&mut samples),
            Step::Timed {
                metric_set: 1,
                bytes: 0
            }
        );
        assert_eq!(
            w.step(&mut samples),
            Step::Timed {
                metric_set: 0,
                bytes: 0
            }
        );
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_number() {
        let mut w = SpawnWorkload::new(std::path::Path::new("/nonexistent/quietbench")).unwrap();
        let mut rec = crate::worker::Recording::new(2);
        assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Failed);
        assert!(w.take_error().unwrap().contains("cannot execute"));
    }

    #[test]
    fn a_failing_program_is_an_error() {
        let mut w = SpawnWorkload::new(std::path::Path::new("/bin/false")).unwrap();
        let mut rec = crate::worker::Recording::new(2);
        assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Failed);
        let error = w.take_error().unwrap();
        assert!(error.contains("ended abnormally"), "{error}");
    }
}
