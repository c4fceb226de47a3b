//! `quietbench.v1.Controller`: the gRPC face of the service. Runs go to [`Runs`]; reports,
//! comparisons, history and gc run the CLI's own command on the service's store in a child
//! process, so their output, JSON and exit codes are exactly the CLI's.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use quietbench_proto::v1 as pb;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::launch::{self, MAX_FIELD_BYTES};
use super::runs::Runs;
use super::state::Submission;
use crate::store::Store;

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
    /// Checks a run's arguments as `quietbench run` parses them (the CLI's parser).
    check_run_args: fn(&[String]) -> Result<(), String>,
    watchers: Arc<AtomicUsize>,
    commands: tokio::sync::Semaphore,
}

/// One open event stream, counted while it lives.
pub struct WatchSlot(Arc<AtomicUsize>);

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ControllerApi {
    /// The API over `runs`.
    pub fn new(runs: Arc<Runs>, check_run_args: fn(&[String]) -> Result<(), String>) -> Self {
        Self {
            runs,
            check_run_args,
            watchers: Arc::new(AtomicUsize::new(0)),
            commands: tokio::sync::Semaphore::new(MAX_COMMANDS),
        }
    }

    /// A run id from a request: a submitted run's, else a stored run's, by id or prefix.
    async fn run_id(&self, given: &str) -> Result<String, Status> {
        run_id_text(given)?;
        if let Some(id) = self.runs.resolve(given) {
            return Ok(id);
        }
        let (db, given) = (self.runs.db().to_path_buf(), given.to_string());
        tokio::task::spawn_blocking(move || {
            let store = Store::open(&db).map_err(|e| Status::unavailable(e.to_string()))?;
            store
                .resolve_run_id(&given)
                .map_err(|e| Status::not_found(e.to_string()))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
    }

    /// Runs `quietbench ARGS` on the service's store in a scratch folder; `files` are read back from it.
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
        let scratch = tempfile::tempdir().map_err(|e| Status::internal(e.to_string()))?;
        let mut command = tokio::process::Command::new(&self.runs.children().exe);
        command.args(&args).current_dir(scratch.path());
        if with_db {
            // By the environment, as for runs: no password on a command line.
            command.env(crate::store::DB_VARIABLE, self.runs.db());
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
            .map(|f| std::fs::read_to_string(scratch.path().join(f)).unwrap_or_default())
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

/// A run id or prefix: bounded, and only the characters ids have.
fn run_id_text(given: &str) -> Result<(), Status> {
    if given.is_empty()
        || given.len() > 64
        || !given.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    {
        return Err(Status::invalid_argument(format!(
            "'{}' is not a run id (hex digits and '-', as `quietbench runs` lists them)",
            given.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
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
        let launch = launch::from_request(request.get_ref())?;
        if launch.plan_toml.is_none() {
            (self.check_run_args)(&launch.run_args).map_err(Status::invalid_argument)?;
        }
        let queued = self
            .runs
            .all()
            .iter()
            .filter(|s| s.stage == super::state::Stage::Queued)
            .count();
        if queued >= MAX_QUEUED {
            return Err(Status::resource_exhausted(format!(
                "{queued} runs wait already: at most {MAX_QUEUED} are queued; try again later"
            )));
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        let submission = Submission::new(run_id.clone(), launch.run_args, launch.hosts);
        if let Some(toml) = &launch.plan_toml {
            let dir = self.runs.state().run_dir(&run_id);
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(dir.join("plan.toml"), toml))
                .map_err(|e| Status::internal(format!("cannot keep the plan: {e}")))?;
        }
        let ahead = self
            .runs
            .submit(submission)
            .map_err(|e| Status::internal(format!("{e:#}")))?;
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
        let given = &request.get_ref().run_id;
        run_id_text(given)?;
        let run_id = self.runs.resolve(given).ok_or_else(|| {
            Status::not_found(format!(
                "no run {given} was submitted to this service (runs stored by a CLI have no \
                 events: see GetRunReport)"
            ))
        })?;
        if self.watchers.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHERS {
            self.watchers.fetch_sub(1, Ordering::SeqCst);
            return Err(Status::resource_exhausted(format!(
                "{MAX_WATCHERS} event streams are open: close one, or try again later"
            )));
        }
        let slot = WatchSlot(self.watchers.clone());
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
        let run_id = self.run_id(&request.get_ref().run_id).await?;
        let format = pb::ReportFormat::try_from(request.get_ref().format)
            .map_err(|_| Status::invalid_argument("unknown report format"))?;
        let mut args = vec!["show".to_string(), run_id.clone()];
        let file = match format {
            pb::ReportFormat::Json | pb::ReportFormat::Unspecified => Some("report.json"),
            pb::ReportFormat::Html => Some("report.html"),
            pb::ReportFormat::Text => None,
        };
        if let Some(file) = file {
            let flag = if file.ends_with("json") {
                "--json"
            } else {
                "--html"
            };
            args.extend([flag.to_string(), file.to_string()]);
        }
        let (out, files) = self.command(args, true, file.as_slice()).await?;
        if out.exit_code != 0 {
            return Err(Status::failed_precondition(out.stderr.trim().to_string()));
        }
        let content = match file {
            Some(_) => files.into_iter().next().unwrap_or_default(),
            None => out.stdout,
        };
        Ok(Response::new(pb::GetRunReportResponse { run_id, content }))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let limit = match request.get_ref().limit {
            0 => 20,
            n => n.min(10_000) as usize,
        };
        let db = self.runs.db().to_path_buf();
        let mut submitted = self.runs.all();
        submitted.sort_by_key(|s| std::cmp::Reverse(s.submitted_at_unix_ns));
        let ids: Vec<String> = submitted.iter().map(|s| s.run_id.clone()).collect();
        // The newest stored runs, and which submitted runs the store has at all.
        let (stored, in_store) = tokio::task::spawn_blocking(move || {
            let store = Store::open(&db)?;
            let stored = store.list_runs(limit)?;
            let mut in_store = std::collections::BTreeSet::new();
            for id in ids {
                if store.run_summary(&id)?.is_some() {
                    in_store.insert(id);
                }
            }
            Ok::<_, crate::store::StoreError>((stored, in_store))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut runs: Vec<pb::RunSummary> = submitted
            .iter()
            // Not in the store: queued, or cancelled or failed before they began; newest first.
            .filter(|s| !in_store.contains(&s.run_id))
            .take(limit)
            .map(|s| pb::RunSummary {
                run_id: s.run_id.clone(),
                status: s.status_word().to_string(),
                submitted: true,
                ..Default::default()
            })
            .collect();
        runs.extend(stored.iter().map(|r| {
            let submission = submitted.iter().find(|s| s.run_id == r.id);
            pb::RunSummary {
                run_id: r.id.clone(),
                status: submission.map_or_else(
                    || r.status.as_str().to_string(),
                    |s| s.status_word().to_string(),
                ),
                started_at_unix_ns: r
                    .started_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
                probes: r.probes.clone(),
                hosts: u32::try_from(r.hosts).unwrap_or(u32::MAX),
                trials: u32::try_from(r.trials).unwrap_or(u32::MAX),
                submitted: submission.is_some(),
            }
        }));
        let (out, _) = self
            .command(vec!["runs".into(), format!("--limit={limit}")], true, &[])
            .await?;
        Ok(Response::new(pb::ListRunsResponse {
            runs,
            text: out.stdout,
        }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::CancelRunResponse>, Status> {
        let given = &request.get_ref().run_id;
        run_id_text(given)?;
        let run_id = self.runs.resolve(given).ok_or_else(|| {
            Status::not_found(format!("no run {given} was submitted to this service"))
        })?;
        let was = self
            .runs
            .cancel(&run_id)
            .map_err(|e| Status::internal(format!("{e:#}")))?
            .ok_or_else(|| Status::not_found(format!("no run {given}")))?;
        Ok(Response::new(pb::CancelRunResponse { was: was.into() }))
    }

    async fn compare_runs(
        &self,
        request: Request<pb::CompareRunsRequest>,
    ) -> Result<Response<pb::CommandOutput>, Status> {
        let r = request.get_ref();
        let (a, b) = (
            self.run_id(&r.baseline).await?,
            self.run_id(&r.candidate).await?,
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
        let mut args = vec!["gc".to_string()];
        let run = &request.get_ref().run_id;
        if !run.is_empty() {
            run_id_text(run)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_bounded_and_plain() {
        assert!(run_id_text("4f2a-9c").is_ok());
        for bad in ["", "../etc", "--json=x", &"a".repeat(65), "id\n"] {
            assert_eq!(
                run_id_text(bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad:?}"
            );
        }
    }
}
