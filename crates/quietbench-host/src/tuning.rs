//! Host tuning: the tuning steps that make a machine quieter for measuring, each reported as
//! applied, skipped (and why) or failed (and the error), and each undone by [`restore`].
//!
//! Every change goes through the [`Journal`] first: the original value is durable on disk
//! before the new one is written, so a crash at any point leaves the host restorable.

use std::collections::BTreeSet;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::HostRoot;
use crate::journal::{Journal, JournalEntry, JournalError};

/// Which tuning steps to apply. Each is off unless asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuneRequest {
    /// CPUs probes will measure on: interrupts are steered off them and their governor set.
    pub probe_cpus: Vec<u32>,
    /// Turn address-space randomization off system-wide (kernel.randomize_va_space=0). A
    /// security feature: restore puts it back. Per-process ASLR control needs no host change.
    pub aslr_off: bool,
    /// Move IRQ affinities off the probe CPUs.
    pub steer_irqs: bool,
    /// Pause irqbalance (SIGSTOP) so it does not move interrupts back.
    pub pause_irqbalance: bool,
    /// Set the probe CPUs' cpufreq governor to "performance".
    pub performance_governor: bool,
    /// Set transparent hugepages to this mode ("always", "madvise" or "never").
    pub thp_mode: Option<String>,
    /// Drop the page cache (sync, then vm.drop_caches=3); nothing to undo.
    pub drop_caches: bool,
}

impl TuneRequest {
    /// Every tuning step, for `tune --all`, system-wide ASLR off included. THP goes to
    /// "madvise": huge pages only where a program asks, so khugepaged does not collapse the
    /// measured program's memory mid-run, while the disk probes' I/O buffers, which ask, keep
    /// theirs ("never" would put each request back to one DMA segment per 4 KiB page).
    pub fn all(probe_cpus: Vec<u32>) -> Self {
        Self {
            probe_cpus,
            aslr_off: true,
            steer_irqs: true,
            pause_irqbalance: true,
            performance_governor: true,
            thp_mode: Some("madvise".into()),
            drop_caches: true,
        }
    }
}

/// What happened to one tuning step on one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    /// Done; the detail says what now holds.
    Applied(String),
    /// Not done, on purpose or because the host does not expose it; the detail says why.
    Skipped(String),
    /// Tried and failed; the detail is the error.
    Failed(String),
}

/// One control's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlReport {
    /// "aslr", "irq_affinity", "irqbalance", "governor", "thp", "drop_caches".
    pub control: String,
    /// The file, IRQ or process it concerns.
    pub target: String,
    /// What happened.
    pub outcome: Outcome,
}

impl ControlReport {
    fn new(control: &str, target: impl Into<String>, outcome: Outcome) -> Self {
        Self {
            control: control.to_string(),
            target: target.into(),
            outcome,
        }
    }
}

const ASLR: &str = "/proc/sys/kernel/randomize_va_space";
const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// The value a sysfs choice file holds: the bracketed word of "always \[madvise\] never", or the
/// trimmed text of a plain file.
pub fn current_choice(text: &str) -> String {
    match (text.find('['), text.find(']')) {
        (Some(open), Some(close)) if open < close => text[open + 1..close].to_string(),
        _ => text.trim().to_string(),
    }
}

/// Applies the requested tuning steps below `root`, journaling each change first. `is_root` says
/// whether the agent may change the host at all; without it every tuning step is skipped, with the
/// reason, and the agent runs on.
pub fn prepare(
    root: &HostRoot,
    journal: &Journal,
    req: &TuneRequest,
    is_root: bool,
) -> Vec<ControlReport> {
    let mut reports = Vec::new();
    let wanted = [
        ("aslr", req.aslr_off),
        ("irqbalance", req.pause_irqbalance),
        ("irq_affinity", req.steer_irqs),
        ("governor", req.performance_governor),
        ("thp", req.thp_mode.is_some()),
        ("drop_caches", req.drop_caches),
    ];
    if !is_root {
        for (control, asked) in wanted {
            if asked {
                reports.push(ControlReport::new(
                    control,
                    "-",
                    Outcome::Skipped("needs root: run the agent as root to tune its host".into()),
                ));
            }
        }
        return reports;
    }
    if req.aslr_off {
        reports.push(change_file(root, journal, "aslr", ASLR, "0"));
    }
    if req.pause_irqbalance {
        reports.extend(pause_irqbalance(root, journal));
    }
    if req.steer_irqs {
        reports.extend(steer_irqs(root, journal, &req.probe_cpus));
    }
    if req.performance_governor {
        reports.extend(set_governor(root, journal, &req.probe_cpus));
    }
    if let Some(mode) = &req.thp_mode {
        reports.push(if ["always", "madvise", "never"].contains(&mode.as_str()) {
            change_file(root, journal, "thp", THP, mode)
        } else {
            ControlReport::new(
                "thp",
                THP,
                Outcome::Failed(format!(
                    "'{mode}' is not a THP mode: use always, madvise or never"
                )),
            )
        });
    }
    if req.drop_caches {
        reports.push(drop_caches(root));
    }
    reports
}

/// Rewrites one file, journaling its original value first.
fn change_file(
    root: &HostRoot,
    journal: &Journal,
    control: &str,
    path: &str,
    value: &str,
) -> ControlReport {
    let report = |outcome| ControlReport::new(control, path, outcome);
    let original = match root.read(path) {
        Ok(text) => current_choice(&text),
        Err(err) if err.source.kind() == std::io::ErrorKind::NotFound => {
            return report(Outcome::Skipped(format!(
                "{path} is not exposed on this host"
            )));
        }
        Err(err) => return report(Outcome::Failed(err.to_string())),
    };
    if original == value {
        return report(Outcome::Applied(format!("already {value}")));
    }
    let entry = JournalEntry::File {
        control: control.to_string(),
        path: path.to_string(),
        original: original.clone(),
    };
    if let Err(err) = journal.record(&entry) {
        return report(Outcome::Failed(format!(
            "not changed, since it cannot be journaled: {err}"
        )));
    }
    match std::fs::write(root.resolve(path), format!("{value}\n")) {
        Ok(()) => report(Outcome::Applied(format!("{original} -> {value}"))),
        Err(err) => report(Outcome::Failed(format!(
            "cannot write {value} to {path}: {err}"
        ))),
    }
}

fn steer_irqs(root: &HostRoot, journal: &Journal, probe_cpus: &[u32]) -> Vec<ControlReport> {
    if probe_cpus.is_empty() {
        return vec![ControlReport::new(
            "irq_affinity",
            "-",
            Outcome::Skipped("no probe CPUs given".into()),
        )];
    }
    let probe: BTreeSet<u32> = probe_cpus.iter().copied().collect();
    let mut reports = Vec::new();
    for irq in list_irqs(root) {
        let path = format!("/proc/irq/{irq}/smp_affinity_list");
        let Ok(text) = root.read(&path) else { continue };
        let Ok(cpus) = crate::parse_cpu_list(&text) else {
            continue;
        };
        if !cpus.iter().any(|c| probe.contains(c)) {
            continue;
        }
        let kept: Vec<u32> = cpus
            .iter()
            .copied()
            .filter(|c| !probe.contains(c))
            .collect();
        if kept.is_empty() {
            reports.push(ControlReport::new(
                "irq_affinity",
                format!("IRQ {irq}"),
                Outcome::Skipped(format!("may only run on probe CPUs {}", text.trim())),
            ));
            continue;
        }
        let mut report = change_file(
            root,
            journal,
            "irq_affinity",
            &path,
            &crate::format_cpu_list(&kept),
        );
        report.target = format!("IRQ {irq}");
        reports.push(report);
    }
    reports
}

fn list_irqs(root: &HostRoot) -> Vec<u32> {
    let mut irqs: Vec<u32> = std::fs::read_dir(root.resolve("/proc/irq"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    irqs.sort_unstable();
    irqs
}

fn set_governor(root: &HostRoot, journal: &Journal, cpus: &[u32]) -> Vec<ControlReport> {
    cpus.iter()
        .map(|cpu| {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor");
            let mut report = change_file(root, journal, "governor", &path, "performance");
            if matches!(report.outcome, Outcome::Skipped(_)) {
                report.outcome =
                    Outcome::Skipped(format!("CPU {cpu} exposes no cpufreq (normal on VMs)"));
            }
            report
        })
        .collect()
}

fn drop_caches(root: &HostRoot) -> ControlReport {
    nix::unistd::sync();
    match std::fs::write(root.resolve(DROP_CACHES), "3\n") {
        Ok(()) => ControlReport::new(
            "drop_caches",
            DROP_CACHES,
            Outcome::Applied("page cache dropped".into()),
        ),
        Err(err) => {
            ControlReport::new("drop_caches", DROP_CACHES, Outcome::Failed(err.to_string()))
        }
    }
}

/// Pids whose /proc/PID/comm is `name`.
fn find_processes(root: &HostRoot, name: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir(root.resolve("/proc")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            root.read(&format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

fn pause_irqbalance(root: &HostRoot, journal: &Journal) -> Vec<ControlReport> {
    let pids = find_processes(root, "irqbalance");
    if pids.is_empty() {
        return vec![ControlReport::new(
            "irqbalance",
            "irqbalance",
            Outcome::Skipped("irqbalance is not running".into()),
        )];
    }
    pids.into_iter()
        .map(|pid| {
            let entry = JournalEntry::StoppedProcess {
                control: "irqbalance".into(),
                pid,
                comm: "irqbalance".into(),
            };
            let target = entry.target();
            if let Err(err) = journal.record(&entry) {
                return ControlReport::new("irqbalance", target, Outcome::Failed(err.to_string()));
            }
            match kill(Pid::from_raw(pid), Signal::SIGSTOP) {
                Ok(()) => ControlReport::new(
                    "irqbalance",
                    target,
                    Outcome::Applied("paused (SIGSTOP)".into()),
                ),
                Err(err) => ControlReport::new(
                    "irqbalance",
                    target,
                    Outcome::Failed(format!("SIGSTOP: {err}")),
                ),
            }
        })
        .collect()
}

/// Undoes every journaled change, newest first. Entries that could not be undone stay in the
/// journal for the next try; entries whose target is gone are dropped. Idempotent: with nothing
/// journaled it does nothing.
pub fn restore(root: &HostRoot, journal: &Journal) -> Result<Vec<ControlReport>, JournalError> {
    let (entries, unreadable) = journal.entries()?;
    let mut reports: Vec<ControlReport> = unreadable
        .into_iter()
        .map(|line| {
            ControlReport::new(
                "journal",
                journal.path().display().to_string(),
                Outcome::Skipped(format!(
                    "unreadable entry ignored ({line}): its change was never made"
                )),
            )
        })
        .collect();
    let mut remaining = Vec::new();
    for entry in entries.iter().rev() {
        let (outcome, keep) = undo(root, entry);
        if keep {
            remaining.push(entry.clone());
        }
        reports.push(ControlReport::new(entry.control(), entry.target(), outcome));
    }
    remaining.reverse();
    journal.replace(&remaining)?;
    Ok(reports)
}

/// Undoes one entry. Returns the outcome and whether to keep the entry for another try.
fn undo(root: &HostRoot, entry: &JournalEntry) -> (Outcome, bool) {
    match entry {
        JournalEntry::File { path, original, .. } => {
            match root.read(path) {
                Err(err) if err.source.kind() == std::io::ErrorKind::NotFound => {
                    return (Outcome::Skipped(format!("{path} no longer exists")), false);
                }
                Ok(text) if current_choice(&text) == *original => {
                    return (Outcome::Applied(format!("already {original}")), false);
                }
                _ => {}
            }
            match std::fs::write(root.resolve(path), format!("{original}\n")) {
                Ok(()) => (Outcome::Applied(format!("restored to {original}")), false),
                Err(err) => (
                    Outcome::Failed(format!("cannot write {original} back: {err}")),
                    true,
                ),
            }
        }
        JournalEntry::StoppedProcess { pid, comm, .. } => {
            let same = root
                .read(&format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == comm);
            if !same {
                return (
                    Outcome::Skipped(format!("{comm} (pid {pid}) is no longer running")),
                    false,
                );
            }
            match kill(Pid::from_raw(*pid), Signal::SIGCONT) {
                Ok(()) => (Outcome::Applied("continued (SIGCONT)".into()), false),
                Err(err) => (Outcome::Failed(format!("SIGCONT: {err}")), true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A fake root with the files the tuning steps touch, as they read on the development VM.
    fn fake_host(dir: &Path) -> HostRoot {
        let files = [
            (ASLR, "2\n"),
            (THP, "always [madvise] never\n"),
            (DROP_CACHES, ""),
            ("/proc/irq/38/smp_affinity_list", "0-1\n"),
            ("/proc/irq/39/smp_affinity_list", "0-1\n"),
            ("/proc/irq/40/smp_affinity_list", "1\n"),
            ("/proc/irq/41/smp_affinity_list", "0\n"),
        ];
        for (path, content) in files {
            let real = dir.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(real.parent().unwrap()).unwrap();
            std::fs::write(real, content).unwrap();
        }
        HostRoot::at(dir)
    }

    fn read(root: &HostRoot, path: &str) -> String {
        root.read(path).unwrap()
    }

    #[test]
    fn prepare_then_restore_puts_every_value_back() {
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = fake_host(host.path());
        let journal = Journal::in_dir(state.path());
        assert_eq!(
            TuneRequest::all(vec![1]).thp_mode.as_deref(),
            Some("madvise")
        );
        // THP to a mode other than the VM's, so its change and restore show.
        let request = TuneRequest {
            thp_mode: Some("never".into()),
            ..TuneRequest::all(vec![1])
        };
        let reports = prepare(&root, &journal, &request, true);

        assert_eq!(read(&root, ASLR), "0\n");
        assert_eq!(read(&root, THP), "never\n");
        assert_eq!(read(&root, "/proc/irq/38/smp_affinity_list"), "0\n");
        assert_eq!(read(&root, "/proc/irq/41/smp_affinity_list"), "0\n");
        let irq40 = reports.iter().find(|r| r.target == "IRQ 40").unwrap();
        assert!(matches!(irq40.outcome, Outcome::Skipped(_)), "{irq40:?}");
        let governor = reports.iter().find(|r| r.control == "governor").unwrap();
        assert!(matches!(&governor.outcome, Outcome::Skipped(why) if why.contains("no cpufreq")));
        assert!(journal.is_pending().unwrap());

        let restored = restore(&root, &journal).unwrap();
        assert!(
            restored
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Applied(_))),
            "{restored:?}"
        );
        assert_eq!(read(&root, ASLR), "2\n");
        assert_eq!(read(&root, THP), "madvise\n");
        assert_eq!(read(&root, "/proc/irq/38/smp_affinity_list"), "0-1\n");
        assert_eq!(read(&root, "/proc/irq/39/smp_affinity_list"), "0-1\n");
        assert!(!journal.is_pending().unwrap());
        assert!(
            restore(&root, &journal).unwrap().is_empty(),
            "restore is idempotent"
        );
    }

    #[test]
    fn a_second_prepare_keeps_the_first_original() {
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = fake_host(host.path());
        let journal = Journal::in_dir(state.path());
        let req = TuneRequest {
            aslr_off: true,
            ..Default::default()
        };
        prepare(&root, &journal, &req, true);
        let again = prepare(&root, &journal, &req, true);
        assert_eq!(again[0].outcome, Outcome::Applied("already 0".into()));
        restore(&root, &journal).unwrap();
        assert_eq!(read(&root, ASLR), "2\n");
    }

    #[test]
    fn without_root_every_control_is_skipped_with_the_reason() {
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = fake_host(host.path());
        let reports = prepare(
            &root,
            &Journal::in_dir(state.path()),
            &TuneRequest::all(vec![1]),
            false,
        );
        assert_eq!(reports.len(), 6);
        assert!(
            reports
                .iter()
                .all(|r| matches!(&r.outcome, Outcome::Skipped(w) if w.contains("root")))
        );
        assert_eq!(read(&root, ASLR), "2\n");
    }

    #[test]
    fn a_host_without_the_files_skips_instead_of_failing() {
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = HostRoot::at(host.path());
        let req = TuneRequest {
            aslr_off: true,
            thp_mode: Some("never".into()),
            ..Default::default()
        };
        let reports = prepare(&root, &Journal::in_dir(state.path()), &req, true);
        assert!(
            reports
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Skipped(_))),
            "{reports:?}"
        );
    }

    #[test]
    fn a_bad_thp_mode_is_refused_without_touching_the_host() {
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = fake_host(host.path());
        let req = TuneRequest {
            thp_mode: Some("sometimes".into()),
            ..Default::default()
        };
        let reports = prepare(&root, &Journal::in_dir(state.path()), &req, true);
        assert!(matches!(&reports[0].outcome, Outcome::Failed(w) if w.contains("not a THP mode")));
        assert_eq!(read(&root, THP), "always [madvise] never\n");
    }

    #[test]
    fn restore_after_a_crash_between_journal_and_change_is_harmless() {
        // The journal says ASLR was 2, but the crash came before the write: the file still
        // holds 2. Restore must leave it so and clear the entry.
        let host = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = fake_host(host.path());
        let journal = Journal::in_dir(state.path());
        journal
            .record(&JournalEntry::File {
                control: "aslr".into(),
                path: ASLR.into(),
                original: "2".into(),
            })
            .unwrap();
        let reports = restore(&root, &journal).unwrap();
        assert_eq!(reports[0].outcome, Outcome::Applied("already 2".into()));
        assert!(!journal.is_pending().unwrap());
    }

    #[test]
    fn reads_choice_files() {
        assert_eq!(current_choice("always [madvise] never\n"), "madvise");
        assert_eq!(current_choice("2\n"), "2");
        assert_eq!(current_choice("] odd [\n"), "] odd [");
    }
}
