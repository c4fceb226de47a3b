//! The runs a service accepted, kept in its state directory so that a restarted service goes on
//! with them: one folder per run, `DIR/runs/<run id>/`, holding `submission.json` (what was
//! asked, by whom, and where it stands, rewritten atomically on every change), `request.json`
//! (the run's request, which its process is started with), `plan.toml` for a plan, and the run's
//! controller output, `stdout` and `stderr`, appended to across restarts.
//! `DIR/scratch/` holds what a command makes for a call (a page, a JSON document) while the
//! call lasts.
//!
//! Every write of the service goes through [`StateDir`], and none is made to answer a read:
//! on a full disk the service still lists, reports and replays its runs.
//! [`StateDir::refuse_writes`] makes every write fail as a full disk would, for the tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use quietbench_controller::request::RunRequest;

/// The run request of a run's process (`quietbench run-request FILE`), in its folder.
pub const REQUEST_FILE: &str = "request.json";

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
    /// The arguments of `quietbench run`, for runs submitted to services from before the
    /// request file ([`REQUEST_FILE`]): a restarted service still runs them as they were
    /// asked. Empty for new runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_args: Vec<String>,
    /// The hosts it measures on (addresses, or "local"): no two running runs share one.
    pub hosts: Vec<String>,
    /// Where it stands.
    pub stage: Stage,
    /// How many times its controller process was started (more than once: resumed).
    pub starts: u32,
    /// A cancel was asked for while it ran.
    pub cancel_requested: bool,
    /// Who submitted it (a caller id: `client NAME`, `uid N`, `anonymous`). `None` for runs
    /// submitted before owners were kept: only admins see those.
    #[serde(default)]
    pub owner: Option<String>,
    /// The names of the `env.*` values its process gets, each with the value `<redacted>`:
    /// the values are never written ([`super::secret_env`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// When it finished, Unix nanoseconds (retention counts from it); `None` before, and in
    /// runs that finished before it was kept (their record's modification time stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_unix_ns: Option<i64>,
}

impl Submission {
    /// Whether the run launches its own hosts (an EC2 plan: the only launch with no hosts
    /// named). Its processes then issue their agents' certificates themselves.
    pub fn launches_its_hosts(&self) -> bool {
        self.hosts.is_empty()
    }

    /// A new queued submission, with no owner yet.
    pub fn new(run_id: String, hosts: Vec<String>) -> Self {
        Self {
            run_id,
            submitted_at_unix_ns: now_unix_ns(),
            run_args: Vec::new(),
            hosts,
            stage: Stage::Queued,
            starts: 0,
            cancel_requested: false,
            owner: None,
            env: BTreeMap::new(),
            finished_at_unix_ns: None,
        }
    }

    /// Ends it: `stage` (a [`Stage::Finished`]) from now.
    pub fn finish(&mut self, stage: Stage) {
        self.stage = stage;
        self.finished_at_unix_ns = Some(now_unix_ns());
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

/// Now, Unix nanoseconds.
pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The service's state directory, held by one service at a time.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    _lock: std::sync::Arc<nix::fcntl::Flock<std::fs::File>>,
    refuse: std::sync::Arc<AtomicBool>,
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
        // What a call's command left behind when the service died mid-call.
        let _ = std::fs::remove_dir_all(root.join("scratch"));
        Ok(Self {
            root: root.to_path_buf(),
            _lock: std::sync::Arc::new(lock),
            refuse: std::sync::Arc::new(AtomicBool::new(false)),
        })
    }

    /// From now on (`true`) every write fails as on a full disk (ENOSPC), until `false`: the
    /// tests' full disk.
    pub fn refuse_writes(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Err (ENOSPC) when writes are refused.
    fn writable(&self) -> std::io::Result<()> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
        }
        Ok(())
    }

    /// The folder of one run.
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("runs").join(run_id)
    }

    /// Writes a run's plan (`plan.toml` in its folder).
    pub fn write_plan(&self, run_id: &str, toml: &str) -> std::io::Result<()> {
        self.writable()?;
        let dir = self.run_dir(run_id);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(super::launch::PLAN_FILE), toml)
    }

    /// Writes the request a run's process is started with ([`REQUEST_FILE`] in its folder).
    pub fn write_request(&self, run_id: &str, request: &RunRequest) -> std::io::Result<()> {
        self.writable()?;
        let dir = self.run_dir(run_id);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(REQUEST_FILE), request.to_json())
    }

    /// A run's output files for its start number `start`: stdout afresh (a resumed run prints
    /// its whole table again), stderr appended to, after a line that says which start follows.
    pub fn open_logs(
        &self,
        run_id: &str,
        start: u32,
    ) -> anyhow::Result<(std::fs::File, std::fs::File)> {
        use std::io::Write;
        self.writable()?;
        let dir = self.run_dir(run_id);
        std::fs::create_dir_all(&dir)?;
        let out = std::fs::File::create(dir.join("stdout"))?;
        let mut err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("stderr"))?;
        writeln!(err, "{START_LINE}{start}")?;
        Ok((out, err))
    }

    /// Adds a line to a run's stderr, as its process would have; nothing when it cannot.
    pub fn append_line(&self, run_id: &str, line: &str) {
        use std::io::Write;
        if self.writable().is_err() {
            return;
        }
        if let Ok(mut err) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir(run_id).join("stderr"))
        {
            let _ = writeln!(err, "{line}");
        }
    }

    /// A fresh folder for one call's command, removed when dropped.
    pub fn scratch(&self) -> std::io::Result<tempfile::TempDir> {
        self.writable()?;
        let dir = self.root.join("scratch");
        std::fs::create_dir_all(&dir)?;
        tempfile::Builder::new().prefix("call-").tempdir_in(dir)
    }

    /// Removes a run's folder (retention): a removal, which a full disk allows.
    pub fn remove_run(&self, run_id: &str) -> std::io::Result<()> {
        std::fs::remove_dir_all(self.run_dir(run_id))
    }

    /// The bytes a run's folder holds, and when its record was last written.
    pub fn measure_run(&self, run_id: &str) -> (u64, Option<SystemTime>) {
        let dir = self.run_dir(run_id);
        let bytes = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        let written = std::fs::metadata(dir.join("submission.json"))
            .and_then(|m| m.modified())
            .ok();
        (bytes, written)
    }

    /// Saves a submission (temporary file, fsync, rename: never half a file).
    pub fn save(&self, submission: &Submission) -> anyhow::Result<()> {
        self.writable()
            .with_context(|| format!("cannot save run {}", submission.run_id))?;
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

/// The line before each start's output in a run's stderr.
pub const START_LINE: &str = "quietbench serve: run process, start ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_come_back_as_saved_and_a_damaged_one_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let mut a = Submission::new("a".into(), vec!["local".into()]);
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
        assert!(all["a"].run_args.is_empty());
        assert_eq!(all["a"].owner, None);
    }

    #[test]
    fn records_from_before_owners_load_without_one_and_refused_writes_fail() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        std::fs::create_dir_all(state.run_dir("old")).unwrap();
        std::fs::write(
            state.run_dir("old").join("submission.json"),
            r#"{"run_id":"old","submitted_at_unix_ns":1,"run_args":[],"hosts":["local"],
               "stage":{"state":"queued"},"starts":0,"cancel_requested":false}"#,
        )
        .unwrap();
        let all = state.load_all().unwrap();
        assert_eq!(all["old"].owner, None);
        assert!(all["old"].env.is_empty() && all["old"].finished_at_unix_ns.is_none());

        state.refuse_writes(true);
        let mut new = Submission::new("new".into(), Vec::new());
        new.owner = Some("client a".into());
        let err = format!("{:#}", state.save(&new).unwrap_err());
        assert!(err.contains("No space left on device"), "{err}");
        assert!(state.write_plan("new", "x").is_err());
        assert!(state.scratch().is_err());
        assert!(!state.run_dir("new").exists());
        state.refuse_writes(false);
        state.save(&new).unwrap();
        assert_eq!(
            state.load_all().unwrap()["new"].owner.as_deref(),
            Some("client a")
        );
        let (bytes, written) = state.measure_run("new");
        assert!(bytes > 0 && written.is_some());
        state.remove_run("new").unwrap();
        assert!(!state.run_dir("new").exists());
    }
}
