//! The service's runs: the queue, the limit, and one `quietbench run` (or `resume`) process per
//! measuring run. A process per run keeps a run's failure, its Ctrl-C handling and its host
//! restore exactly those of the CLI, and lets a cancel be a SIGINT. Each child gets SIGINT when
//! the service dies (PR_SET_PDEATHSIG), so a killed service leaves interrupted runs, which a
//! restarted one resumes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::state::{Stage, StateDir, Submission};
use crate::store::{RunStatus, Store};

/// What every child of the service is started with.
#[derive(Debug, Clone)]
pub struct ChildSettings {
    /// The quietbench binary.
    pub exe: PathBuf,
    /// The result store.
    pub db: PathBuf,
    /// The service's identity toward agents (`--ca ...`), passed to every run.
    pub agent_tls_args: Vec<String>,
}

/// The service's runs, shared by the API and the scheduler.
pub struct Runs {
    state: StateDir,
    children: ChildSettings,
    max_running: usize,
    submissions: Mutex<BTreeMap<String, Submission>>,
    pids: Mutex<BTreeMap<String, u32>>,
    /// The service is stopping: runs it interrupts stay `running` in its state, to be resumed.
    stopping: std::sync::atomic::AtomicBool,
    /// Woken when a run is queued, ends or is cancelled.
    wake: Notify,
}

/// How long a restarted service waits for a run's old process to leave the store: longer than a
/// stopping service waits for it (`super::STOP_GRACE`).
const OLD_PROCESS_GRACE: Duration = Duration::from_secs(180);
/// How soon a run whose old process still holds it is looked at again.
const RETRY_HELD: Duration = Duration::from_secs(5);

impl Runs {
    /// The runs saved in `state`; those that were running when the service stopped are queued
    /// again, to be resumed.
    pub fn load(
        state: StateDir,
        children: ChildSettings,
        max_running: usize,
    ) -> anyhow::Result<Arc<Self>> {
        let mut submissions = state.load_all()?;
        for submission in submissions.values_mut() {
            if submission.stage == Stage::Running {
                // A run cancelled before the service stopped is not started again to be
                // cancelled once more.
                submission.stage = if submission.cancel_requested {
                    Stage::Finished {
                        status: "cancelled".into(),
                        exit_code: 130,
                        error: Some("cancelled".into()),
                    }
                } else {
                    Stage::Queued
                };
                state.save(submission)?;
            }
        }
        Ok(Arc::new(Self {
            state,
            children,
            max_running: max_running.max(1),
            submissions: Mutex::new(submissions),
            pids: Mutex::new(BTreeMap::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
            wake: Notify::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Submission>> {
        // A panic while holding the lock leaves the map as it was last written: keep serving.
        self.submissions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state directory.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// The store's file.
    pub fn db(&self) -> &std::path::Path {
        &self.children.db
    }

    /// What every child is started with.
    pub fn children(&self) -> &ChildSettings {
        &self.children
    }

    /// A copy of one submission.
    pub fn get(&self, run_id: &str) -> Option<Submission> {
        self.lock().get(run_id).cloned()
    }

    /// Copies of every submission.
    pub fn all(&self) -> Vec<Submission> {
        self.lock().values().cloned().collect()
    }

    /// The full id of a submitted run from its id or a unique prefix.
    pub fn resolve(&self, id_or_prefix: &str) -> Option<String> {
        let subs = self.lock();
        let mut found = subs
            .keys()
            .filter(|id| id.starts_with(id_or_prefix) && !id_or_prefix.is_empty());
        let first = found.next()?;
        found.next().is_none().then(|| first.clone())
    }

    /// Queues a run (its plan already in its folder); returns how many wait before it.
    pub fn submit(&self, submission: Submission) -> anyhow::Result<usize> {
        self.state.save(&submission)?;
        let mut subs = self.lock();
        let ahead = subs.values().filter(|s| s.stage == Stage::Queued).count();
        subs.insert(submission.run_id.clone(), submission);
        drop(subs);
        self.wake.notify_one();
        Ok(ahead)
    }

    /// Cancels a run: a queued one ends now, a running one gets SIGINT. Returns what it was.
    pub fn cancel(&self, run_id: &str) -> anyhow::Result<Option<&'static str>> {
        let mut subs = self.lock();
        let Some(submission) = subs.get_mut(run_id) else {
            return Ok(None);
        };
        let was = match submission.stage {
            Stage::Queued => {
                submission.stage = Stage::Finished {
                    status: "cancelled".into(),
                    exit_code: 130,
                    error: Some("cancelled before it started".into()),
                };
                "queued"
            }
            Stage::Running => {
                submission.cancel_requested = true;
                if let Some(pid) = self
                    .pids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(run_id)
                {
                    interrupt(*pid);
                }
                "running"
            }
            Stage::Finished { .. } => return Ok(Some("finished")),
        };
        self.state.save(submission)?;
        drop(subs);
        self.wake.notify_one();
        Ok(Some(was))
    }

    /// Why a queued run waits, `None` when it does not.
    pub fn waiting_for(&self, run_id: &str) -> Option<String> {
        let subs = self.lock();
        let me = subs.get(run_id)?;
        if me.stage != Stage::Queued {
            return None;
        }
        let running: Vec<&Submission> = subs
            .values()
            .filter(|s| s.stage == Stage::Running)
            .collect();
        if let Some(other) = running
            .iter()
            .find(|s| s.hosts.iter().any(|h| me.hosts.contains(h)))
        {
            return Some(format!("a host is measuring run {}", other.run_id));
        }
        Some(format!(
            "{} of {} run(s) measuring",
            running.len(),
            self.max_running
        ))
    }

    /// Starts every queued run that has room and free hosts, oldest first, then waits to be
    /// woken. Never returns.
    pub async fn schedule(self: Arc<Self>) {
        self.settle_old_processes().await;
        loop {
            for run_id in self.ready() {
                self.clone().start(run_id).await;
            }
            self.wake.notified().await;
        }
    }

    /// The queued runs that may start now (marked running), oldest first.
    fn ready(&self) -> Vec<String> {
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Vec::new();
        }
        let mut subs = self.lock();
        let mut busy: BTreeSet<String> = BTreeSet::new();
        let mut running = 0;
        for s in subs.values().filter(|s| s.stage == Stage::Running) {
            running += 1;
            busy.extend(s.hosts.iter().cloned());
        }
        let mut queued: Vec<&Submission> =
            subs.values().filter(|s| s.stage == Stage::Queued).collect();
        queued.sort_by_key(|s| (s.submitted_at_unix_ns, s.run_id.clone()));
        let mut ready = Vec::new();
        for s in queued {
            if running >= self.max_running {
                break;
            }
            if s.hosts.iter().any(|h| busy.contains(h)) {
                continue;
            }
            busy.extend(s.hosts.iter().cloned());
            running += 1;
            ready.push(s.run_id.clone());
        }
        for run_id in &ready {
            if let Some(s) = subs.get_mut(run_id) {
                s.stage = Stage::Running;
                s.starts += 1;
                if let Err(err) = self.state.save(s) {
                    eprintln!("quietbench serve: warning: {err:#}");
                }
            }
        }
        ready
    }

    /// A restarted service: the processes of runs it had started got SIGINT when it died and
    /// may still be restoring hosts. Wait until the store no longer shows them running, so that
    /// `resume` does not refuse them.
    async fn settle_old_processes(&self) {
        let resumed: Vec<String> = self
            .all()
            .into_iter()
            .filter(|s| s.stage == Stage::Queued && s.starts > 0)
            .map(|s| s.run_id)
            .collect();
        let deadline = tokio::time::Instant::now() + OLD_PROCESS_GRACE;
        for run_id in resumed {
            while tokio::time::Instant::now() < deadline
                && matches!(
                    self.stored_status(&run_id).await,
                    Some((RunStatus::Running, _))
                )
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// The run's status and error as the store shows them, `None` when it has no such run.
    pub async fn stored_status(&self, run_id: &str) -> Option<(RunStatus, Option<String>)> {
        let db = self.children.db.clone();
        let run_id = run_id.to_string();
        tokio::task::spawn_blocking(move || {
            let summary = Store::open(&db).ok()?.run_summary(&run_id).ok()??;
            Some((summary.status, summary.error))
        })
        .await
        .ok()
        .flatten()
    }

    /// Starts a run's process, or resumes it when it was started before and the store has it.
    async fn start(self: Arc<Self>, run_id: String) {
        let Some(submission) = self.get(&run_id) else {
            return;
        };
        if submission.cancel_requested {
            self.unstart(&run_id);
            self.finish(&run_id, 130).await;
            return;
        }
        let stored = if submission.starts > 1 {
            self.stored_status(&run_id).await
        } else {
            None
        };
        match stored {
            Some((status @ (RunStatus::Complete | RunStatus::Failed), _)) => {
                // It ended before the service stopped, whose last act was not saved.
                self.unstart(&run_id);
                let code = if status == RunStatus::Complete { 0 } else { 1 };
                self.finish(&run_id, code).await;
                return;
            }
            Some((RunStatus::Running, _)) => {
                // Its process from before the restart still holds it (restoring hosts, say):
                // back to the queue, and look again soon. Resuming now would be refused.
                self.requeue(&run_id);
                let runs = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY_HELD).await;
                    runs.wake.notify_one();
                });
                return;
            }
            _ => {}
        }
        let dir = self.state.run_dir(&run_id);
        let mut command = tokio::process::Command::new(&self.children.exe);
        // The store by the environment, not the command line: a PostgreSQL URL's password
        // would be in every run's `ps` line.
        command.env(crate::store::DB_VARIABLE, &self.children.db);
        if stored.is_some() {
            command.args(["resume", &run_id]);
        } else {
            command.arg("run");
            command.arg(format!("--run-id={run_id}"));
            if dir.join("plan.toml").exists() {
                command.arg("--plan").arg(dir.join("plan.toml"));
            }
            command.args(&submission.run_args);
        }
        // The service's identity towards agents is for the agents it is told of; an EC2 run
        // makes its own for the instances it launches, and refuses another.
        if !submission.launches_its_hosts() {
            command.args(&self.children.agent_tls_args);
        }
        let starts = submission.starts;
        let spawned = open_logs(&dir, starts).and_then(|(out, err)| {
            // Its own process group: a Ctrl-C at the service's terminal is the service's to
            // handle (it interrupts its runs and keeps them to resume), not each run's.
            command
                .process_group(0)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .kill_on_drop(false);
            // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of
            // the parent; it is all the child runs between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGINT)
                        .map_err(std::io::Error::from)
                });
            }
            Ok(command.spawn()?)
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => {
                append_line(
                    &dir,
                    &format!("quietbench: error: cannot start the run: {err:#}"),
                );
                self.finish(&run_id, 1).await;
                return;
            }
        };
        if let Some(pid) = child.id() {
            self.pids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(run_id.clone(), pid);
            // A cancel that came between marking it running and now.
            if self.get(&run_id).is_some_and(|s| s.cancel_requested) {
                interrupt(pid);
            }
        }
        tokio::spawn(async move {
            let code = match child.wait().await {
                Ok(status) => exit_code(status),
                Err(_) => 1,
            };
            self.pids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&run_id);
            self.finish(&run_id, code).await;
        });
    }

    /// Records how a run's process ended, and wakes the scheduler.
    async fn finish(&self, run_id: &str, exit_code: i32) {
        let stored = self.stored_status(run_id).await;
        let cancelled = self.get(run_id).is_some_and(|s| s.cancel_requested);
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) && !cancelled {
            // Interrupted by the service's own stop: resumed at its next start.
            return;
        }
        let last_error = last_error_line(&self.state.run_dir(run_id));
        let completed = matches!(stored, Some((RunStatus::Complete, _)));
        let (status, error) = match stored {
            // A cancel that came as the run completed does not undo it.
            _ if cancelled && !completed => {
                ("cancelled".to_string(), Some("cancelled".to_string()))
            }
            // A process that ended leaves no run running: it was killed before its last write.
            Some((RunStatus::Running, error)) => ("interrupted".to_string(), error),
            Some((status, error)) => (status.as_str().to_string(), error.or(last_error)),
            None if exit_code == 0 => ("complete".to_string(), None),
            None => (
                "failed".to_string(),
                Some(last_error.unwrap_or_else(|| format!("exit code {exit_code}"))),
            ),
        };
        let mut subs = self.lock();
        if let Some(s) = subs.get_mut(run_id) {
            s.stage = Stage::Finished {
                status,
                exit_code,
                error,
            };
            if let Err(err) = self.state.save(s) {
                eprintln!("quietbench serve: warning: {err:#}");
            }
        }
        drop(subs);
        self.wake.notify_one();
    }

    /// A run marked running that was not started after all: its start is not counted.
    fn unstart(&self, run_id: &str) {
        if let Some(s) = self.lock().get_mut(run_id) {
            s.starts = s.starts.saturating_sub(1);
        }
    }

    /// A run marked running goes back to the queue.
    fn requeue(&self, run_id: &str) {
        if let Some(s) = self.lock().get_mut(run_id) {
            s.starts = s.starts.saturating_sub(1);
            s.stage = Stage::Queued;
            if let Err(err) = self.state.save(s) {
                eprintln!("quietbench serve: warning: {err:#}");
            }
        }
    }

    /// The service is stopping: watchers end, nothing new starts.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The processes of the runs measuring now.
    pub fn running_pids(&self) -> Vec<u32> {
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect()
    }

    /// SIGINT to every running run's process (the service is stopping); returns their pids.
    pub fn interrupt_all(&self) -> Vec<u32> {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let pids = self.running_pids();
        for pid in &pids {
            interrupt(*pid);
        }
        pids
    }
}

fn interrupt(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        );
    }
}

/// A process's exit code as a shell reports it (128 + signal when killed).
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// A run's output files for its start number `start`: stdout afresh (a resumed run prints its
/// whole table again), stderr appended to, after a line that says which start follows.
fn open_logs(dir: &std::path::Path, start: u32) -> anyhow::Result<(std::fs::File, std::fs::File)> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let out = std::fs::File::create(dir.join("stdout"))?;
    let mut err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stderr"))?;
    writeln!(err, "{START_LINE}{start}")?;
    Ok((out, err))
}

/// The line before each start's output in a run's stderr.
pub const START_LINE: &str = "quietbench serve: run process, start ";

fn append_line(dir: &std::path::Path, line: &str) {
    use std::io::Write;
    if let Ok(mut err) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stderr"))
    {
        let _ = writeln!(err, "{line}");
    }
}

/// The last `quietbench: error:` line a run's process wrote, without the prefix.
fn last_error_line(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("stderr")).ok()?;
    // The last start's lines only: an error of an earlier start was dealt with by this one.
    let last_start = text.rfind(START_LINE).unwrap_or(0);
    text[last_start..]
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("quietbench: error: "))
        .map(str::to_string)
}
