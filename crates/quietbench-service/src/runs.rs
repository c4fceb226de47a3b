//! The service's runs: the queue, the limit, and one `quietbench run` (or `resume`) process per
//! measuring run. A process per run keeps a run's failure, its Ctrl-C handling and its host
//! restore exactly those of the CLI, and lets a cancel be a SIGINT. Each child gets SIGINT when
//! the service dies (PR_SET_PDEATHSIG), so a killed service leaves interrupted runs, which a
//! restarted one resumes. A run's `env.*` values live here, in memory only, and reach its
//! process by its environment ([`super::secret_env`]). Finished runs' folders go by the
//! retention rule ([`super::retention`]) at start and whenever a run ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

pub use super::child::ChildSettings;
use super::child::{self, exit_code, interrupt, last_error_line};
use super::retention::{self, Kept, Retention};
use super::secret_env::EnvValues;
use super::state::{Stage, StateDir, Submission};
use quietbench_controller::store::{RunStatus, Store};

/// The service's runs, shared by the API and the scheduler.
pub struct Runs {
    state: StateDir,
    children: ChildSettings,
    max_running: usize,
    submissions: Mutex<BTreeMap<String, Submission>>,
    pids: Mutex<BTreeMap<String, u32>>,
    /// Each waiting or measuring run's `env.*` values: never written anywhere.
    secrets: Mutex<BTreeMap<String, EnvValues>>,
    /// How long finished runs' folders are kept.
    retention: Retention,
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
/// Why a run with `env.*` values cannot go on after a restart.
const ENV_LOST: &str = "its env.* values were kept in the service's memory only (they are never \
                        written) and the service restarted: submit the run again";

impl Runs {
    /// The runs saved in `state`; those that were running when the service stopped are queued
    /// again, to be resumed, but for those whose `env.*` values went with the old service.
    /// Then the finished runs `retention` no longer keeps are removed.
    pub fn load(
        state: StateDir,
        children: ChildSettings,
        max_running: usize,
        retention: Retention,
    ) -> anyhow::Result<Arc<Self>> {
        let mut submissions = state.load_all()?;
        for submission in submissions.values_mut() {
            let unfinished = matches!(submission.stage, Stage::Running | Stage::Queued);
            if unfinished && !submission.env.is_empty() {
                submission.finish(Stage::Finished {
                    status: "failed".into(),
                    exit_code: 1,
                    error: Some(ENV_LOST.into()),
                });
            } else if submission.stage == Stage::Running {
                // A run cancelled before the service stopped is not started again to be
                // cancelled once more.
                if submission.cancel_requested {
                    submission.finish(Stage::Finished {
                        status: "cancelled".into(),
                        exit_code: 130,
                        error: Some("cancelled".into()),
                    });
                } else {
                    submission.stage = Stage::Queued;
                }
            } else {
                continue;
            }
            // A full disk must not keep the service from starting: the record is written
            // again at the run's next change.
            if let Err(err) = state.save(submission) {
                eprintln!("quietbench serve: warning: {err:#}");
            }
        }
        let runs = Arc::new(Self {
            state,
            children,
            max_running: max_running.max(1),
            submissions: Mutex::new(submissions),
            pids: Mutex::new(BTreeMap::new()),
            secrets: Mutex::new(BTreeMap::new()),
            retention,
            stopping: std::sync::atomic::AtomicBool::new(false),
            wake: Notify::new(),
        });
        runs.prune();
        Ok(runs)
    }

    /// Removes the folders of the finished runs the retention rule no longer keeps; returns
    /// their ids. Their results stay in the store.
    pub fn prune(&self) -> Vec<String> {
        let now = std::time::SystemTime::now();
        let listed: Vec<(String, Option<i64>, bool)> = self
            .lock()
            .values()
            .map(|s| {
                let finished = matches!(s.stage, Stage::Finished { .. });
                (s.run_id.clone(), s.finished_at_unix_ns, finished)
            })
            .collect();
        // Measured without the lock: reading folders takes a while.
        let kept: Vec<Kept> = listed
            .into_iter()
            .map(|(run_id, finished_at, finished)| {
                let (bytes, written) = self.state.measure_run(&run_id);
                let finished_at = finished_at
                    .and_then(|ns| u64::try_from(ns).ok())
                    .map(|ns| std::time::UNIX_EPOCH + Duration::from_nanos(ns))
                    .or(written);
                let finished_ago = finished.then(|| {
                    finished_at.map_or(Duration::MAX, |at| {
                        now.duration_since(at).unwrap_or(Duration::ZERO)
                    })
                });
                Kept {
                    run_id,
                    finished_ago,
                    bytes,
                }
            })
            .collect();
        let chosen = retention::select(&kept, self.retention);
        let mut removed = Vec::new();
        for run_id in chosen {
            let mut subs = self.lock();
            // Finished when measured, so finished still: a finished run never starts again.
            if !subs
                .get(&run_id)
                .is_some_and(|s| matches!(s.stage, Stage::Finished { .. }))
            {
                continue;
            }
            match self.state.remove_run(&run_id) {
                Ok(()) => {
                    subs.remove(&run_id);
                    removed.push(run_id);
                }
                Err(err) => eprintln!(
                    "quietbench serve: warning: cannot remove {}: {err}",
                    self.state.run_dir(&run_id).display()
                ),
            }
        }
        removed
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

    /// Queues a run (its plan already in its folder) with its `env.*` values; returns how many
    /// wait before it.
    pub fn submit(&self, submission: Submission, env: EnvValues) -> anyhow::Result<usize> {
        self.state.save(&submission)?;
        if !env.is_empty() {
            self.secrets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(submission.run_id.clone(), env);
        }
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
                submission.finish(Stage::Finished {
                    status: "cancelled".into(),
                    exit_code: 130,
                    error: Some("cancelled before it started".into()),
                });
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
        if was == "queued" {
            self.forget_env(run_id);
            self.prune();
        }
        self.wake.notify_one();
        Ok(Some(was))
    }

    fn forget_env(&self, run_id: &str) {
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run_id);
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
        let env = self
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&run_id)
            .cloned();
        if !submission.env.is_empty() && env.is_none() {
            self.unstart(&run_id);
            self.end(
                &run_id,
                Stage::Finished {
                    status: "failed".into(),
                    exit_code: 1,
                    error: Some(ENV_LOST.into()),
                },
            );
            return;
        }
        let dir = self.state.run_dir(&run_id);
        let spawned = self
            .state
            .open_logs(&run_id, submission.starts)
            .and_then(|(out, err)| {
                child::spawn(
                    &self.children,
                    &submission,
                    env.as_ref(),
                    stored.is_some(),
                    &dir,
                    (out, err),
                )
            });
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => {
                self.state.append_line(
                    &run_id,
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
        self.end(
            run_id,
            Stage::Finished {
                status,
                exit_code,
                error,
            },
        );
    }

    /// Records a run's end (`stage`, finished), forgets its env.* values, applies the
    /// retention rule and wakes the scheduler.
    fn end(&self, run_id: &str, stage: Stage) {
        let mut subs = self.lock();
        if let Some(s) = subs.get_mut(run_id) {
            s.finish(stage);
            if let Err(err) = self.state.save(s) {
                eprintln!("quietbench serve: warning: {err:#}");
            }
        }
        drop(subs);
        self.forget_env(run_id);
        self.prune();
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

#[cfg(test)]
mod tests;
