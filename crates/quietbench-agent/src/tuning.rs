//! The agent's side of host tuning: who owns it, and restoring orphaned changes at start-up.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use quietbench_host::HostRoot;
use quietbench_host::journal::{Journal, TuningLock};
use quietbench_host::tuning::{self, ControlReport, TuneRequest};
use tonic::Status;

/// The default state directory: $QUIETBENCH_STATE_DIR when set, else /var/lib/quietbench-agent
/// for root, else under the user's XDG state directory.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUIETBENCH_STATE_DIR") {
        return PathBuf::from(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/quietbench-agent");
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("quietbench-agent")
}

/// Host tuning owned by this agent.
pub struct Tuner {
    root: HostRoot,
    journal: Journal,
    lock: Mutex<Option<TuningLock>>,
    default_probe_cpus: Vec<u32>,
}

impl Tuner {
    /// Opens the journal in `state_dir` and, when no live agent owns the host's tuning, restores
    /// whatever a crashed agent left journaled.
    pub fn start(root: HostRoot, state_dir: &Path, default_probe_cpus: Vec<u32>) -> Self {
        let tuner = Self {
            root,
            journal: Journal::in_dir(state_dir),
            lock: Mutex::new(None),
            default_probe_cpus,
        };
        match tuner.journal.try_lock() {
            Ok(Ok(lock)) => {
                match tuner.journal.is_pending() {
                    Ok(true) => match tuning::restore(&tuner.root, &tuner.journal) {
                        Ok(reports) => {
                            tracing::warn!(
                                journal = %tuner.journal.path().display(),
                                "found host changes left by an agent that did not stop cleanly; restored them"
                            );
                            for r in reports {
                                tracing::warn!(control = %r.control, target = %r.target, outcome = ?r.outcome, "restored at start-up");
                            }
                        }
                        Err(err) => {
                            tracing::error!("cannot restore the journal at start-up: {err}")
                        }
                    },
                    Ok(false) => {}
                    Err(err) => tracing::error!("cannot read the restore journal: {err}"),
                }
                drop(lock);
            }
            Ok(Err(holder)) => tracing::info!(
                holder = ?holder,
                "another live agent owns host tuning in {}; leaving its changes alone",
                state_dir.display()
            ),
            Err(err) => tracing::warn!("host tuning unavailable: {err}"),
        }
        tuner
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Option<TuningLock>> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes ownership if this agent does not hold it yet.
    fn own(&self, slot: &mut Option<TuningLock>) -> Result<(), Status> {
        if slot.is_some() {
            return Ok(());
        }
        // Another agent starting up holds the lock for a moment while it checks for an orphaned
        // journal: retry briefly before calling the tuning someone else's.
        let mut attempt = self.journal.try_lock();
        for _ in 0..10 {
            if !matches!(attempt, Ok(Err(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            attempt = self.journal.try_lock();
        }
        match attempt {
            Ok(Ok(lock)) => {
                *slot = Some(lock);
                Ok(())
            }
            Ok(Err(holder)) => Err(Status::failed_precondition(format!(
                "host tuning is owned by another agent{} using {}; restore it through that agent first",
                holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                self.journal.path().display()
            ))),
            Err(err) => Err(Status::internal(err.to_string())),
        }
    }

    /// Applies `req` (an empty CPU list means every CPU but the housekeeping one).
    pub fn prepare(&self, mut req: TuneRequest) -> Result<Vec<ControlReport>, Status> {
        if req.probe_cpus.is_empty() {
            req.probe_cpus.clone_from(&self.default_probe_cpus);
        }
        let mut slot = self.locked();
        self.own(&mut slot)?;
        let reports = tuning::prepare(
            &self.root,
            &self.journal,
            &req,
            nix::unistd::geteuid().is_root(),
        );
        if !self.journal.is_pending().unwrap_or(true) {
            *slot = None; // nothing changed: nothing to own
        }
        Ok(reports)
    }

    /// Undoes every journaled change.
    pub fn restore(&self) -> Result<Vec<ControlReport>, Status> {
        let mut slot = self.locked();
        self.own(&mut slot)?;
        let reports = tuning::restore(&self.root, &self.journal)
            .map_err(|e| Status::internal(e.to_string()))?;
        if !self.journal.is_pending().unwrap_or(true) {
            *slot = None;
        }
        Ok(reports)
    }

    /// The journal's path.
    pub fn journal_path(&self) -> PathBuf {
        self.journal.path()
    }

    /// On a clean stop: undo what this agent changed, leaving the host as it was found.
    pub fn shutdown(&self) {
        if self.locked().is_none() {
            return;
        }
        match self.restore() {
            Ok(reports) => {
                for r in reports {
                    tracing::info!(control = %r.control, target = %r.target, outcome = ?r.outcome, "restored at shutdown");
                }
            }
            Err(err) => tracing::error!("restore at shutdown failed: {}", err.message()),
        }
    }
}
