//! The runs a service accepted, kept in its state directory so that a restarted service goes on
//! with them: one folder per run, `DIR/runs/<run id>/`, holding `submission.json` (what was
//! asked and where it stands, rewritten atomically on every change), `plan.toml` for a plan, and
//! the run's controller output, `stdout` and `stderr`, appended to across restarts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Where a submitted run stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Stage {
    /// Waiting for room or for its hosts.
    Queued,
    /// Its controller process runs.
    Running,
    /// Its controller process ended.
    Finished {
        /// complete, failed, interrupted or cancelled.
        status: String,
        /// The process's exit code.
        exit_code: i32,
        /// Why it failed, when it did.
        error: Option<String>,
    },
}

/// One run accepted by the service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    /// The run's id (the store's).
    pub run_id: String,
    /// When it was accepted, Unix nanoseconds.
    pub submitted_at_unix_ns: i64,
    /// The arguments of `quietbench run` after the ones the service adds (store, run id, TLS).
    pub run_args: Vec<String>,
    /// The hosts it measures on (addresses, or "local"): no two running runs share one.
    pub hosts: Vec<String>,
    /// Where it stands.
    pub stage: Stage,
    /// How many times its controller process was started (more than once: resumed).
    pub starts: u32,
    /// A cancel was asked for while it ran.
    pub cancel_requested: bool,
}

impl Submission {
    /// Whether the run launches its own hosts (an EC2 plan: the only launch with no hosts
    /// named). Its processes then issue their agents' certificates themselves.
    pub fn launches_its_hosts(&self) -> bool {
        self.hosts.is_empty()
    }

    /// A new queued submission.
    pub fn new(run_id: String, run_args: Vec<String>, hosts: Vec<String>) -> Self {
        Self {
            run_id,
            submitted_at_unix_ns: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            run_args,
            hosts,
            stage: Stage::Queued,
            starts: 0,
            cancel_requested: false,
        }
    }

    /// The word a listing shows.
    pub fn status_word(&self) -> &str {
        match &self.stage {
            Stage::Queued => "queued",
            Stage::Running => "running",
            Stage::Finished { status, .. } => status,
        }
    }
}

/// The service's state directory, held by one service at a time.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    _lock: std::sync::Arc<nix::fcntl::Flock<std::fs::File>>,
}

impl StateDir {
    /// Opens (creating) the state directory `root` and locks it: a second service on the same
    /// directory (or a new one while the old one still stops) would run its runs twice.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        let runs = root.join("runs");
        std::fs::create_dir_all(&runs)
            .with_context(|| format!("cannot create the service's state in {}", runs.display()))?;
        let lock_path = root.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| {
                anyhow::anyhow!(
                    "another quietbench serve uses the state directory {} (or one is still \
                     stopping): {errno}",
                    root.display()
                )
            })?;
        Ok(Self {
            root: root.to_path_buf(),
            _lock: std::sync::Arc::new(lock),
        })
    }

    /// The folder of one run.
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("runs").join(run_id)
    }

    /// Saves a submission (temporary file, fsync, rename: never half a file).
    pub fn save(&self, submission: &Submission) -> anyhow::Result<()> {
        let dir = self.run_dir(&submission.run_id);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join("submission.json");
        let tmp = dir.join("submission.json.partial");
        let text = serde_json::to_string_pretty(submission)?;
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
    }

    /// Every submission saved, by run id. A folder whose submission cannot be read is skipped
    /// with a warning: one damaged file must not stop the service.
    pub fn load_all(&self) -> anyhow::Result<BTreeMap<String, Submission>> {
        let runs = self.root.join("runs");
        let mut all = BTreeMap::new();
        for entry in
            std::fs::read_dir(&runs).with_context(|| format!("cannot read {}", runs.display()))?
        {
            let path = entry?.path().join("submission.json");
            let read = std::fs::read_to_string(&path)
                .map_err(anyhow::Error::from)
                .and_then(|text| Ok(serde_json::from_str::<Submission>(&text)?));
            match read {
                Ok(submission) => {
                    all.insert(submission.run_id.clone(), submission);
                }
                Err(err) => eprintln!(
                    "quietbench serve: warning: skipping {}: {err:#}",
                    path.display()
                ),
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_come_back_as_saved_and_a_damaged_one_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let mut a = Submission::new("a".into(), vec!["--local".into()], vec!["local".into()]);
        state.save(&a).unwrap();
        a.stage = Stage::Finished {
            status: "complete".into(),
            exit_code: 0,
            error: None,
        };
        a.starts = 1;
        state.save(&a).unwrap();
        std::fs::create_dir_all(state.run_dir("b")).unwrap();
        std::fs::write(state.run_dir("b").join("submission.json"), "{ not json").unwrap();
        let all = state.load_all().unwrap();
        assert_eq!(all.len(), 1);
        let second = StateDir::open(dir.path()).unwrap_err().to_string();
        assert!(second.contains("another quietbench serve"), "{second}");
        assert_eq!(all["a"].stage, a.stage);
        assert_eq!(all["a"].starts, 1);
        assert_eq!(all["a"].run_args, vec!["--local".to_string()]);
    }
}
