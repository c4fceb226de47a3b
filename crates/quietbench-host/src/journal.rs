//! The restore journal: every host change the agent makes is written here, and fsynced, before
//! it is made, so an agent that crashes (or is killed) mid-trial can undo it when it starts
//! again.
//!
//! One JSON object per line, appended. A crash while appending leaves at worst a truncated last
//! line; since the change is only made after the line is durable, a truncated line means its
//! change never happened, and it is skipped. The first entry for a path holds its original
//! value: later changes of the same path are not journaled again, so a second `tune` cannot
//! overwrite the value to restore.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The journal file's name inside the agent's state directory.
pub const JOURNAL_FILE: &str = "restore-journal.jsonl";
/// The lock file whose holder owns the host's tuning (and writes its pid in it).
pub const LOCK_FILE: &str = "tuning.lock";

/// Ownership of the host's tuning, held by the agent whose changes are in effect. It is an
/// flock, so the kernel releases it when that agent dies however it dies: an agent that can take
/// it at start-up knows any journal it finds is orphaned, and restores it; one that cannot knows
/// another live agent's changes are in effect, and leaves them alone.
#[derive(Debug)]
pub struct TuningLock {
    _lock: nix::fcntl::Flock<File>,
}

/// One change the agent made, with what is needed to undo it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JournalEntry {
    /// A file under /proc or /sys was rewritten; `original` is its content before.
    File {
        /// Which tuning step made the change (e.g. "aslr", "irq_affinity").
        control: String,
        /// The machine path, e.g. `/proc/sys/kernel/randomize_va_space`.
        path: String,
        /// The value to write back.
        original: String,
    },
    /// A process was stopped with SIGSTOP (irqbalance); restoring sends SIGCONT if the pid still
    /// names the same program.
    StoppedProcess {
        /// Which tuning step made the change.
        control: String,
        /// Its pid.
        pid: i32,
        /// Its /proc/PID/comm, to make sure a reused pid is not continued by mistake.
        comm: String,
    },
}

impl JournalEntry {
    /// The control that made the change.
    pub fn control(&self) -> &str {
        match self {
            Self::File { control, .. } | Self::StoppedProcess { control, .. } => control,
        }
    }

    /// What was changed, for reports.
    pub fn target(&self) -> String {
        match self {
            Self::File { path, .. } => path.clone(),
            Self::StoppedProcess { pid, comm, .. } => format!("{comm} (pid {pid})"),
        }
    }

    fn same_target(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::File { path: a, .. }, Self::File { path: b, .. }) => a == b,
            (Self::StoppedProcess { pid: a, .. }, Self::StoppedProcess { pid: b, .. }) => a == b,
            _ => false,
        }
    }
}

/// The journal could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An I/O step failed.
    #[error("restore journal {path}: cannot {action}: {source}")]
    Io {
        /// The journal or state directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Parses journal text: one entry per line; a line that does not parse (a write cut short by a
/// crash, or damage) is reported in the second list rather than failing the whole restore.
pub fn parse_journal(text: &str) -> (Vec<JournalEntry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<JournalEntry>(line) {
            Ok(entry) => entries.push(entry),
            Err(err) => skipped.push(format!("line {}: {err}", number + 1)),
        }
    }
    (entries, skipped)
}

/// The journal in a state directory.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// The journal of `state_dir`, created on first use.
    pub fn in_dir(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: state_dir.into(),
        }
    }

    /// The journal file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(JOURNAL_FILE)
    }

    fn io(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
        move |source| JournalError::Io {
            path: self.path(),
            action,
            source,
        }
    }

    /// Takes ownership of the host's tuning: `Ok(Err(pid))` when another live process holds it
    /// (its pid, if it wrote one).
    pub fn try_lock(&self) -> Result<Result<TuningLock, Option<u32>>, JournalError> {
        use nix::fcntl::{Flock, FlockArg};
        std::fs::create_dir_all(&self.dir).map_err(self.io("create its directory"))?;
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(self.io("open its lock file"))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                // The pid is for messages only; a failure to write it changes nothing.
                let _ = lock.set_len(0);
                let _ = (&*lock).write_all(std::process::id().to_string().as_bytes());
                Ok(Ok(TuningLock { _lock: lock }))
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok());
                Ok(Err(holder))
            }
            Err((_, errno)) => Err(self.io("lock it")(std::io::Error::from(errno))),
        }
    }

    /// Every entry, oldest first, and the lines that could not be read.
    pub fn entries(&self) -> Result<(Vec<JournalEntry>, Vec<String>), JournalError> {
        match std::fs::read_to_string(self.path()) {
            Ok(text) => Ok(parse_journal(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), Vec::new())),
            Err(err) => Err(self.io("read it")(err)),
        }
    }

    /// True when there is anything to restore.
    pub fn is_pending(&self) -> Result<bool, JournalError> {
        Ok(!self.entries()?.0.is_empty())
    }

    /// Makes `entry` durable before the caller changes the host. Returns false, writing nothing,
    /// when the same target is already journaled: its original value is the one to keep.
    pub fn record(&self, entry: &JournalEntry) -> Result<bool, JournalError> {
        let (existing, _) = self.entries()?;
        if existing.iter().any(|e| e.same_target(entry)) {
            return Ok(false);
        }
        std::fs::create_dir_all(&self.dir).map_err(self.io("create its directory"))?;
        let created = !self.path().exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path())
            .map_err(self.io("open it"))?;
        let mut line = serde_json::to_string(entry).expect("journal entries always serialize");
        line.push('\n');
        file.write_all(line.as_bytes())
            .map_err(self.io("append to it"))?;
        file.sync_all().map_err(self.io("fsync it"))?;
        if created {
            sync_dir(&self.dir).map_err(self.io("fsync its directory"))?;
        }
        Ok(true)
    }

    /// Replaces the journal with `remaining` (the entries a restore could not undo), or removes
    /// it when none remain. Atomic: written beside, fsynced, renamed.
    pub fn replace(&self, remaining: &[JournalEntry]) -> Result<(), JournalError> {
        if remaining.is_empty() {
            match std::fs::remove_file(self.path()) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(err) => return Err(self.io("remove it")(err)),
            }
            return sync_dir(&self.dir).map_err(self.io("fsync its directory"));
        }
        let tmp = self.dir.join(format!("{JOURNAL_FILE}.tmp"));
        let mut file = File::create(&tmp).map_err(self.io("write its replacement"))?;
        for entry in remaining {
            let line = serde_json::to_string(entry).expect("journal entries always serialize");
            writeln!(file, "{line}").map_err(self.io("write its replacement"))?;
        }
        file.sync_all().map_err(self.io("fsync its replacement"))?;
        std::fs::rename(&tmp, self.path()).map_err(self.io("replace it"))?;
        sync_dir(&self.dir).map_err(self.io("fsync its directory"))
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aslr(original: &str) -> JournalEntry {
        JournalEntry::File {
            control: "aslr".into(),
            path: "/proc/sys/kernel/randomize_va_space".into(),
            original: original.into(),
        }
    }

    #[test]
    fn records_durably_and_keeps_the_first_original() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::in_dir(dir.path().join("state"));
        assert!(!journal.is_pending().unwrap());
        assert!(journal.record(&aslr("2")).unwrap());
        // A second tuning sees the changed value; it must not replace the original.
        assert!(!journal.record(&aslr("0")).unwrap());
        let stopped = JournalEntry::StoppedProcess {
            control: "irqbalance".into(),
            pid: 42,
            comm: "irqbalance".into(),
        };
        assert!(journal.record(&stopped).unwrap());
        let (entries, skipped) = journal.entries().unwrap();
        assert_eq!(entries, vec![aslr("2"), stopped]);
        assert!(skipped.is_empty());
    }

    #[test]
    fn a_line_cut_short_by_a_crash_is_skipped_not_fatal() {
        let full = serde_json::to_string(&aslr("2")).unwrap();
        let text = format!("{full}\n{}", &full[..full.len() / 2]);
        let (entries, skipped) = parse_journal(&text);
        assert_eq!(entries, vec![aslr("2")]);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].starts_with("line 2"), "{skipped:?}");
    }

    #[test]
    fn replace_keeps_what_remains_and_removes_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::in_dir(dir.path());
        journal.record(&aslr("2")).unwrap();
        journal.replace(&[aslr("2")]).unwrap();
        assert_eq!(journal.entries().unwrap().0, vec![aslr("2")]);
        journal.replace(&[]).unwrap();
        assert!(!journal.path().exists());
        journal.replace(&[]).unwrap(); // idempotent
    }

    #[test]
    fn only_one_owner_at_a_time_and_death_releases_it() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::in_dir(dir.path());
        let first = journal.try_lock().unwrap().expect("free at first");
        // flock locks belong to the open file description: a second open, even in this
        // process, is refused while the first is held.
        assert_eq!(
            journal.try_lock().unwrap().unwrap_err(),
            Some(std::process::id())
        );
        drop(first);
        assert!(journal.try_lock().unwrap().is_ok());
    }

    #[test]
    fn an_unwritable_state_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let err = Journal::in_dir(&file).record(&aslr("2")).unwrap_err();
        assert!(err.to_string().contains("restore journal"), "{err}");
    }
}
