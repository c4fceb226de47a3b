//! Whether a run marked `running` still has a controller, or had it killed.
//!
//! A controller that is SIGKILLed (or loses its machine) never records how its run ended, so
//! the run stays `running` in the store for good. When a run begins or resumes, the store
//! records its holder: the controller's machine (host name and boot id) and its process (pid,
//! and the process's start time, field 22 of /proc/PID/stat). A reader then shows a `running`
//! run as `interrupted`, resumable, once that process is gone.
//!
//! Why pid and start time: a pid alone is reused as soon as the process exits, and a
//! reused pid would keep a dead run `running`; pid and start time within one boot name one
//! process for good. Why not an flock held for the run's lifetime: the lock dies with the file
//! descriptor, and `resume` opens, closes and reopens the store between marking the run and
//! running it, so the lock would have to live outside the store's handle; and a lock says
//! nothing about a run begun before this build. Why the host name as well as the boot id:
//! containers on one kernel share the boot id but not their pid namespaces, so a run held in
//! another container (or on another machine sharing the store) cannot be checked from here and
//! is left `running` rather than guessed dead.

use std::io::ErrorKind;

use quietbench_host::HostRoot;
use quietbench_host::procstat::{ProcStatError, read_process_start_ticks};

use super::RunStatus;

/// The controller process that holds a running run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    /// Its machine's host name (/proc/sys/kernel/hostname).
    pub host: String,
    /// Its machine's boot id (/proc/sys/kernel/random/boot_id): changes at every boot.
    pub boot_id: String,
    /// Its pid.
    pub pid: u32,
    /// Its start time, in clock ticks since boot (field 22 of /proc/PID/stat).
    pub start_ticks: u64,
}

/// The machine a reader runs on: what a holder is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Host name.
    pub host: String,
    /// Boot id.
    pub boot_id: String,
}

impl Machine {
    /// The machine below `root`; `None` where /proc does not say (then no holder is checked).
    pub fn read(root: &HostRoot) -> Option<Machine> {
        let read = |path: &str| {
            root.read(path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        Some(Machine {
            host: read("/proc/sys/kernel/hostname")?,
            boot_id: read("/proc/sys/kernel/random/boot_id")?,
        })
    }
}

impl Holder {
    /// True when this holder's process is known to be gone, checked on this machine with the
    /// same rule as a stored run's ([`shown_status`]): what cannot be checked counts as alive.
    pub fn is_gone(&self) -> bool {
        let root = HostRoot::live();
        let here = Machine::read(&root);
        shown_status(RunStatus::Running, Some(self), here.as_ref(), |pid| {
            Process::read(&root, pid)
        }) == RunStatus::Interrupted
    }

    /// This process, as a holder; `None` where /proc does not say (a run begun then reads as
    /// `running` until it finishes, as every run did before holders were recorded).
    pub fn this_process() -> Option<Holder> {
        let root = HostRoot::live();
        let machine = Machine::read(&root)?;
        let pid = std::process::id();
        let start_ticks = read_process_start_ticks(&root, pid).ok()?;
        Some(Holder {
            host: machine.host,
            boot_id: machine.boot_id,
            pid,
            start_ticks,
        })
    }
}

/// What the reader's machine says of a holder's pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// A process with this pid exists and started at this time (ticks since boot).
    StartedAt(u64),
    /// No process has this pid.
    Gone,
    /// It cannot tell (the /proc entry is there but unreadable or malformed).
    Unknown,
}

impl Process {
    /// Process `pid` below `root`.
    pub fn read(root: &HostRoot, pid: u32) -> Process {
        match read_process_start_ticks(root, pid) {
            Ok(ticks) => Process::StartedAt(ticks),
            Err(ProcStatError::Read(e)) if e.source.kind() == ErrorKind::NotFound => Process::Gone,
            Err(_) => Process::Unknown,
        }
    }
}

/// The status a reader shows for a run stored as `stored`, held by `holder` (`None`: begun by
/// a build that did not record holders), as seen from `here` (`None`: this machine's /proc does
/// not say), where `process` looks a pid up on this machine.
///
/// Only a `running` run changes, and only to `interrupted`, and only on evidence that its
/// controller is gone: the holder is this machine's, and either the machine has booted since
/// (every process of that boot is gone) or no process with the holder's pid and start time
/// exists. Whatever cannot be checked stays `running`: calling a live run interrupted invites a
/// `resume` that would run its trials twice, while the opposite mistake only delays a resume.
pub fn shown_status(
    stored: RunStatus,
    holder: Option<&Holder>,
    here: Option<&Machine>,
    process: impl FnOnce(u32) -> Process,
) -> RunStatus {
    if stored != RunStatus::Running {
        return stored;
    }
    let (Some(holder), Some(here)) = (holder, here) else {
        return RunStatus::Running;
    };
    if holder.host != here.host {
        return RunStatus::Running;
    }
    if holder.boot_id != here.boot_id {
        return RunStatus::Interrupted;
    }
    match process(holder.pid) {
        Process::StartedAt(ticks) if ticks == holder.start_ticks => RunStatus::Running,
        Process::StartedAt(_) | Process::Gone => RunStatus::Interrupted,
        Process::Unknown => RunStatus::Running,
    }
}

/// The holder columns of `runs` (all four, or none; `rows.rs` names them) as a [`Holder`]. A
/// partial or out-of-range holder is no holder: the run then reads as stored, as runs from
/// before holders did.
pub(super) fn holder_of(
    host: Option<String>,
    boot_id: Option<String>,
    pid: Option<i64>,
    ticks: Option<i64>,
) -> Option<Holder> {
    Some(Holder {
        host: host?,
        boot_id: boot_id?,
        pid: u32::try_from(pid?).ok()?,
        start_ticks: u64::try_from(ticks?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> Holder {
        Holder {
            host: "ip-10-0-1-12".into(),
            boot_id: "5d4f3c2b-aaaa-4bbb-8ccc-0123456789ab".into(),
            pid: 4242,
            start_ticks: 164_197,
        }
    }

    fn here() -> Machine {
        Machine {
            host: "ip-10-0-1-12".into(),
            boot_id: "5d4f3c2b-aaaa-4bbb-8ccc-0123456789ab".into(),
        }
    }

    fn never(_: u32) -> Process {
        panic!("no process should be looked up")
    }

    #[test]
    fn a_run_whose_controller_is_alive_is_running() {
        let h = holder();
        let shown = shown_status(RunStatus::Running, Some(&h), Some(&here()), |pid| {
            assert_eq!(pid, 4242);
            Process::StartedAt(164_197)
        });
        assert_eq!(shown, RunStatus::Running);
    }

    #[test]
    fn a_run_whose_controller_is_gone_is_interrupted() {
        let h = holder();
        let shown = shown_status(RunStatus::Running, Some(&h), Some(&here()), |_| {
            Process::Gone
        });
        assert_eq!(shown, RunStatus::Interrupted);
    }

    #[test]
    fn a_reused_pid_is_not_mistaken_for_the_controller() {
        let h = holder();
        let shown = shown_status(RunStatus::Running, Some(&h), Some(&here()), |_| {
            Process::StartedAt(900_000)
        });
        assert_eq!(shown, RunStatus::Interrupted);
    }

    #[test]
    fn a_reboot_ends_every_run_of_the_boot_before() {
        let h = holder();
        let rebooted = Machine {
            boot_id: "0e9d8c7b-1111-4222-8333-444455556666".into(),
            ..here()
        };
        // The pid and start time may well exist again after a reboot: not even looked up.
        let shown = shown_status(RunStatus::Running, Some(&h), Some(&rebooted), never);
        assert_eq!(shown, RunStatus::Interrupted);
    }

    #[test]
    fn what_cannot_be_checked_stays_running() {
        let h = holder();
        // Held on another machine (or in another container: its own pids).
        let elsewhere = Machine {
            host: "ip-10-0-1-13".into(),
            ..here()
        };
        assert_eq!(
            shown_status(RunStatus::Running, Some(&h), Some(&elsewhere), never),
            RunStatus::Running
        );
        // Begun by a build that did not record holders, or read where /proc says nothing.
        assert_eq!(
            shown_status(RunStatus::Running, None, Some(&here()), never),
            RunStatus::Running
        );
        assert_eq!(
            shown_status(RunStatus::Running, Some(&h), None, never),
            RunStatus::Running
        );
        // A /proc entry that cannot be read.
        assert_eq!(
            shown_status(RunStatus::Running, Some(&h), Some(&here()), |_| {
                Process::Unknown
            }),
            RunStatus::Running
        );
    }

    #[test]
    fn finished_runs_keep_their_status() {
        let h = holder();
        for s in [
            RunStatus::Complete,
            RunStatus::Failed,
            RunStatus::Interrupted,
        ] {
            assert_eq!(shown_status(s, Some(&h), Some(&here()), never), s);
        }
    }

    #[test]
    fn this_process_holds_a_run_it_begins() {
        let me = Holder::this_process().expect("a Linux /proc");
        assert_eq!(me.pid, std::process::id());
        let here = Machine::read(&HostRoot::live()).expect("a Linux /proc");
        let root = HostRoot::live();
        assert_eq!(
            shown_status(RunStatus::Running, Some(&me), Some(&here), |pid| {
                Process::read(&root, pid)
            }),
            RunStatus::Running
        );
    }

    #[test]
    fn reads_processes_below_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::at(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/77")).unwrap();
        // Captured from /proc/self/stat on the 2-vCPU KVM development VM (quietbench-host's
        // fixture kvm-2vcpu-xeon/proc/self-sample/stat).
        std::fs::write(
            dir.path().join("proc/77/stat"),
            include_str!(
                "../../quietbench-host/tests/fixtures/kvm-2vcpu-xeon/proc/self-sample/stat"
            ),
        )
        .unwrap();
        assert_eq!(Process::read(&root, 77), Process::StartedAt(164_197));
        assert_eq!(Process::read(&root, 78), Process::Gone);
        std::fs::create_dir_all(dir.path().join("proc/79")).unwrap();
        std::fs::write(dir.path().join("proc/79/stat"), "79 (x").unwrap();
        assert_eq!(Process::read(&root, 79), Process::Unknown);
        assert_eq!(Machine::read(&root), None);
    }
}
