//! `quietbench.v1.Controller`: the gRPC face of the service. Runs go to [`Runs`], once the
//! policy allows them ([`Policy`]); each call sees the caller's own runs only, an admin's every
//! run ([`Access`]). Reports, comparisons, history and gc run the CLI's own command on the
//! service's store in a child process, so their output, JSON and exit codes are exactly the
//! CLI's; a JSON or HTML report is built here, with the CLI's own functions, so that no read
//! writes a file (on a full disk reads go on).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use quietbench_proto::v1 as pb;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::access::{Access, whole_run_id};
use super::launch::{self, MAX_FIELD_BYTES};
use super::policy::Policy;
use super::runs::Runs;
use super::state::{Stage, Submission};
use quietbench_controller::store::Store;

/// Runs waiting in the queue at most; one more is refused (RESOURCE_EXHAUSTED).
pub const MAX_QUEUED: usize = 1000;
/// Event streams open at once at most (each is a polling thread).
pub const MAX_WATCHERS: usize = 256;
/// Commands (show, runs, compare, history, gc) running at once at most; more wait.
const MAX_COMMANDS: usize = 4;
/// The longest a command may take (a history of thousands of runs with change points takes
/// seconds).
const COMMAND_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The service.
pub struct ControllerApi {
    runs: Arc<Runs>,
    /// Who may do what.
    policy: Arc<Policy>,
    watchers: Arc<AtomicUsize>,
    commands: tokio::sync::Semaphore,
}

impl ControllerApi {
    /// The API over `runs`, under `policy`.
    pub fn new(runs: Arc<Runs>, policy: Arc<Policy>) -> Self {
        Self {
            runs,
            policy,
            watchers: Arc::new(AtomicUsize::new(0)),
            commands: tokio::sync::Semaphore::new(MAX_COMMANDS),
        }
    }

    fn access<T>(&self, request: &Request<T>) -> Result<Access, Status> {
        Access::of(request, &self.policy)
    }

    /// A submitted run the caller sees, by its whole id.
    fn submitted(&self, access: &Access, given: &str) -> Result<Submission, Status> {
        whole_run_id(given)?;
        self.runs
            .get(given)
            .filter(|s| access.sees(s))
            .ok_or_else(|| access.not_found(given))
    }

    /// A run the caller may read, by its whole id: a submitted run it sees, or, for an admin,
    /// any run of the store.
    async fn readable(&self, access: &Access, given: &str) -> Result<String, Status> {
        whole_run_id(given)?;
        if let Some(s) = self.runs.get(given) {
            return if access.sees(&s) {
                Ok(s.run_id)
            } else {
                Err(access.not_found(given))
            };
        }
        if !access.admin {
            return Err(access.not_found(given));
        }
        let (db, id) = (self.runs.db().to_path_buf(), given.to_string());
        let stored = tokio::task::spawn_blocking(move || {
            let store = Store::open(&db).map_err(|e| Status::unavailable(e.to_string()))?;
            store
                .run_summary(&id)
                .map_err(|e| Status::unavailable(e.to_string()))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        stored.map(|r| r.id).ok_or_else(|| access.not_found(given))
    }

    /// Runs `quietbench ARGS` on the service's store; `files` are read back from the folder it
    /// runs in, a scratch folder in the state directory when there are any (else `/`: a command
    /// that makes no file writes nothing, which a full disk allows).
    async fn command(
        &self,
        args: Vec<String>,
        with_db: bool,
        files: &[&str],
    ) -> Result<(pb::CommandOutput, Vec<String>), Status> {
        let _turn = self
            .commands
            .acquire()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let scratch = if files.is_empty() {
            None
        } else {
            Some(self.runs.state().scratch().map_err(|e| {
                Status::unavailable(format!(
                    "cannot make a scratch folder in the service's state directory: {e}"
                ))
            })?)
        };
        let folder = scratch
            .as_ref()
            .map_or(std::path::Path::new("/"), |d| d.path());
        let mut command = tokio::process::Command::new(&self.runs.children().exe);
        command.args(&args).current_dir(folder);
        if with_db {
            // By the environment, as for runs: no password on a command line.
            command.env(quietbench_controller::store::DB_VARIABLE, self.runs.db());
        }
        // A call given up by its client takes its process with it.
        command
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(COMMAND_TIME_LIMIT, command.output())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "quietbench {} took more than {} s",
                    args.first().map_or("", String::as_str),
                    COMMAND_TIME_LIMIT.as_secs()
                ))
            })?
            .map_err(|e| Status::internal(format!("cannot run quietbench: {e}")))?;
        let read: Vec<String> = files
            .iter()
            .map(|f| std::fs::read_to_string(folder.join(f)).unwrap_or_default())
            .collect();
        Ok((
            pb::CommandOutput {
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                exit_code: out.status.code().unwrap_or(1),
                html: String::new(),
                json: String::new(),
            },
            read,
        ))
    }
}

fn text_field(what: &str, text: &str) -> Result<(), Status> {
    if text.len() > MAX_FIELD_BYTES || text.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{what} must be at most {MAX_FIELD_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::controller_server::Controller for ControllerApi {
    async fn submit_run(
        &self,
        request: Request<pb::SubmitRunRequest>,
    ) -> Result<Response<pb::SubmitRunResponse>, Status> {
        let access = self.access(&request)?;
        let launch = launch::from_request(request.get_ref())?;
        // Before anything is queued or written: a run the policy refuses never starts, so no
        // command of it runs and no output of one comes back.
        self.policy
            .check(&access.caller.id, &launch.uses)
            .map_err(|denied| Status::permission_denied(denied.to_string()))?;
        launch.check_env_reaches()?;
        let queued = self
            .runs
            .all()
            .iter()
            .filter(|s| s.stage == Stage::Queued)
            .count();
        if queued >= MAX_QUEUED {
            return Err(Status::resource_exhausted(format!(
                "{queued} runs wait already: at most {MAX_QUEUED} are queued; try again later"
            )));
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut submission = Submission::new(run_id.clone(), launch.hosts);
        submission.owner = Some(access.caller.id.clone());
        submission.env = launch.env.redacted();
        if let Some(toml) = &launch.plan_toml {
            self.runs
                .state()
                .write_plan(&run_id, toml)
                .map_err(|e| Status::unavailable(format!("cannot keep the plan: {e}")))?;
        }
        let request = quietbench_controller::request::RunRequest {
            run_id: Some(run_id.clone()),
            ..launch.request
        };
        self.runs
            .state()
            .write_request(&run_id, &request)
            .map_err(|e| Status::unavailable(format!("cannot keep the run's request: {e}")))?;
        let ahead = self
            .runs
            .submit(submission, launch.env)
            .map_err(|e| Status::unavailable(format!("{e:#}")))?;
        Ok(Response::new(pb::SubmitRunResponse {
            run_id,
            queue_position: u32::try_from(ahead).unwrap_or(u32::MAX),
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let access = self.access(&request)?;
        let run_id = self.submitted(&access, &request.get_ref().run_id)?.run_id;
        if self.watchers.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHERS {
            self.watchers.fetch_sub(1, Ordering::SeqCst);
            return Err(Status::resource_exhausted(format!(
                "{MAX_WATCHERS} event streams are open: close one, or try again later"
            )));
        }
        let slot = super::watch::WatchSlot::new(self.watchers.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        super::watch::spawn(self.runs.clone(), run_id, tx, slot);
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_run_report(
        &self,
        request: Request<pb::GetRunReportRequest>,
    ) -> Result<Response<pb::GetRunReportResponse>, Status> {
        let access = self.access(&request)?;
        let run_id = self.readable(&access, &request.get_ref().run_id).await?;
        let format = pb::ReportFormat::try_from(request.get_ref().format)
            .map_err(|_| Status::invalid_argument("unknown report format"))?;
        if format == pb::ReportFormat::Text {
            let (out, _) = self
                .command(vec!["show".to_string(), run_id.clone()], true, &[])
                .await?;
            if out.exit_code != 0 {
                return Err(Status::failed_precondition(out.stderr.trim().to_string()));
            }
            return Ok(Response::new(pb::GetRunReportResponse {
                run_id,
                content: out.stdout,
            }));
        }
        // Built here rather than by `show --json FILE`, which would need a file to write.
        let _turn = self
            .commands
            .acquire()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let (db, id) = (self.runs.db().to_path_buf(), run_id.clone());
        let content = tokio::task::spawn_blocking(move || {
            let store = Store::open(&db).map_err(|e| Status::unavailable(e.to_string()))?;
            let stored = store
                .load_stored_run(&id)
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            match format {
                pb::ReportFormat::Html => Ok(super::listing::html_report(&stored.record)),
                _ => super::listing::json_report(&stored.record)
                    .map_err(|e| Status::internal(e.to_string())),
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(pb::GetRunReportResponse { run_id, content }))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let access = self.access(&request)?;
        let limit = match request.get_ref().limit {
            0 => 20,
            n => n.min(10_000) as usize,
        };
        let db = self.runs.db().to_path_buf();
        let mut submitted: Vec<Submission> = self
            .runs
            .all()
            .into_iter()
            .filter(|s| access.sees(s))
            .collect();
        submitted.sort_by_key(|s| std::cmp::Reverse(s.submitted_at_unix_ns));
        if !access.admin {
            // A caller's own runs only, newest first: the store's listing would show others'.
            submitted.truncate(limit);
        }
        let ids: Vec<String> = submitted.iter().map(|s| s.run_id.clone()).collect();
        let admin = access.admin;
        // The newest stored runs (an admin's listing), and what the store has of each
        // submitted run.
        let (newest, of_submitted) = tokio::task::spawn_blocking(move || {
            let store = Store::open(&db)?;
            let newest = if admin {
                store.list_runs(limit)?
            } else {
                Vec::new()
            };
            let mut of_submitted = std::collections::BTreeMap::new();
            for id in ids {
                if let Some(summary) = store.run_summary(&id)? {
                    of_submitted.insert(id, summary);
                }
            }
            Ok::<_, quietbench_controller::store::StoreError>((newest, of_submitted))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::unavailable(e.to_string()))?;
        // Not in the store: queued, or cancelled or failed before they began; newest first.
        let mut runs: Vec<pb::RunSummary> = submitted
            .iter()
            .filter(|s| !of_submitted.contains_key(&s.run_id))
            .take(limit)
            .map(|s| super::listing::row(Some(s), None))
            .collect();
        let text = if admin {
            runs.extend(newest.iter().map(|r| {
                let submission = submitted.iter().find(|s| s.run_id == r.id);
                super::listing::row(submission, Some(r))
            }));
            let (out, _) = self
                .command(vec!["runs".into(), format!("--limit={limit}")], true, &[])
                .await?;
            out.stdout
        } else {
            let mut stored: Vec<quietbench_controller::store::RunSummary> =
                of_submitted.into_values().collect();
            stored.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
            runs.extend(stored.iter().map(|r| {
                let submission = submitted.iter().find(|s| s.run_id == r.id);
                super::listing::row(submission, Some(r))
            }));
            super::listing::own_runs_text(&access.caller.id, &stored)
        };
        Ok(Response::new(pb::ListRunsResponse { runs, text }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::CancelRunResponse>, Status> {
        let access = self.access(&request)?;
        let run_id = self.submitted(&access, &request.get_ref().run_id)?.run_id;
        let was = self
            .runs
            .cancel(&run_id)
            .map_err(|e| Status::unavailable(format!("{e:#}")))?
            .ok_or_else(|| access.not_found(&run_id))?;
        Ok(Response::new(pb::CancelRunResponse { was: was.into() }))
    }

    async fn compare_runs(
        &self,
        request: Request<pb::CompareRunsRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        let access = self.access(&request)?;
        let r = request.get_ref();
        let (a, b) = (
            self.readable(&access, &r.baseline).await?,
            self.readable(&access, &r.candidate).await?,
        );
        let mut args = vec!["compare".into(), "--runs".into(), a, b];
        for (flag, value) in [("metric", &r.metric), ("normalize-by", &r.normalize_by)] {
            if !value.is_empty() {
                text_field(flag, value)?;
                args.push(format!("--{flag}={value}"));
            }
        }
        if !r.figure.is_empty() {
            text_field("figure", &r.figure)?;
            args.push(format!("--figure={}", r.figure));
        }
        if let Some(pct) = r.target_mde_pct {
            args.push(format!("--target-mde={pct}"));
        }
        if let Some(pct) = r.fail_if_slower_pct {
            args.push(format!("--fail-if-slower={pct}"));
        }
        let files: &[&str] = if r.json {
            args.push("--json=compare.json".into());
            &["compare.json"]
        } else {
            &[]
        };
        let (mut out, read) = self.command(args, true, files).await?;
        out.json = read.into_iter().next().unwrap_or_default();
        Ok(Response::new(out))
    }

    async fn query_history(
        &self,
        request: Request<pb::QueryHistoryRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        // Any admitted caller: history is the shared store's figures over time (docs/service.md).
        self.access(&request)?;
        let r = request.get_ref();
        let mut args = vec!["history".to_string()];
        for (flag, value) in [
            ("probe", &r.probe),
            ("metric", &r.metric),
            ("cpu-model", &r.cpu_model),
            ("normalize-by", &r.normalize_by),
        ] {
            if !value.is_empty() {
                text_field(flag, value)?;
                args.push(format!("--{flag}={value}"));
            }
        }
        if r.limit > 0 {
            args.push(format!("--limit={}", r.limit));
        }
        if r.significance > 0.0 {
            args.push(format!("--significance={}", r.significance));
        }
        if r.permutations > 0 {
            args.push(format!("--permutations={}", r.permutations));
        }
        for (set, flag) in [
            (r.change_points, "--change-points"),
            (r.fail_on_change, "--fail-on-change"),
            (r.json, "--json"),
        ] {
            if set {
                args.push(flag.into());
            }
        }
        let files: &[&str] = if r.html {
            args.push("--html=history.html".into());
            &["history.html"]
        } else {
            &[]
        };
        let (mut out, read) = self.command(args, true, files).await?;
        out.html = read.into_iter().next().unwrap_or_default();
        Ok(Response::new(out))
    }

    async fn collect_garbage(
        &self,
        request: Request<pb::CollectGarbageRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        let access = self.access(&request)?;
        // Deleting cloud resources, any run's: the admins' alone.
        if !access.admin {
            return Err(Status::permission_denied(format!(
                "CollectGarbage is for the service's admins, and {} is not one (admins = {:?} \
                 in the service's policy)",
                access.caller.id,
                self.policy.admins()
            )));
        }
        let mut args = vec!["gc".to_string()];
        let run = &request.get_ref().run_id;
        if !run.is_empty() {
            whole_run_id(run)?;
            args.push(format!("--run={run}"));
        }
        let (out, _) = self.command(args, false, &[]).await?;
        if out.stderr.contains("unrecognized subcommand") {
            return Err(Status::unimplemented(
                "this quietbench was built without the ec2 feature: it has no EC2 fleets to collect",
            ));
        }
        Ok(Response::new(out))
    }
}
