//! `quietbench run/compare/runs/show/history --controller ADDR`: the same commands, answered
//! by a `quietbench serve` instead of this machine. Standard output and the exit code are what
//! the command gives locally (the service runs the same command); a run's progress comes as
//! its events on standard error, and Ctrl-C cancels the run on the service.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use quietbench_proto::v1 as pb;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

type Client = pb::controller_client::ControllerClient<Channel>;

/// The largest answer decoded from a service, bytes.
const MAX_REPLY_BYTES: usize = 256 * 1024 * 1024;

/// Where the service is, and how this client proves it is one.
#[derive(Debug, Clone)]
pub struct Remote {
    /// HOST:PORT (or a URL).
    pub address: String,
    /// Mutual TLS: the CA, this client's certificate and key (`certs issue --client NAME`).
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

impl Remote {
    async fn connect(&self) -> anyhow::Result<Client> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let url = if self.address.contains("://") {
            self.address.clone()
        } else {
            format!("{scheme}://{}", self.address)
        };
        let mut endpoint = Endpoint::from_shared(url.clone())
            .with_context(|| format!("'{}' is not a service address (HOST:PORT)", self.address))?
            .connect_timeout(std::time::Duration::from_secs(10));
        if let Some((ca, cert, key)) = &self.tls {
            let read = |what: &str, p: &Path| {
                std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read the {what} {}", p.display()))
            };
            endpoint = endpoint.tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read("CA (--controller-ca)", ca)?))
                    .identity(Identity::from_pem(
                        read("client certificate (--controller-cert)", cert)?,
                        read("client key (--controller-key)", key)?,
                    )),
            )?;
        }
        let channel = endpoint.connect().await.map_err(|e| {
            let why =
                quietbench_controller::tls::explain(&e, None).unwrap_or_else(|| format!("{e:#}"));
            anyhow::anyhow!(
                "cannot reach the quietbench service at {}: {why}",
                self.address
            )
        })?;
        // Reports and history pages of long runs pass tonic's 4 MiB default.
        Ok(Client::new(channel).max_decoding_message_size(MAX_REPLY_BYTES))
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    quietbench_controller::session::runtime()
}

fn status_error(address: &str, status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("the service at {address} refused: {}", status.message())
}

fn code(exit: i32) -> ExitCode {
    ExitCode::from(u8::try_from(exit).unwrap_or(1))
}

/// What a command run on the service printed, printed here; its exit code.
fn relay(out: &pb::CommandOutput) -> ExitCode {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    code(out.exit_code)
}

/// [`relay`], after writing `content` (a page or document the command made) to `file`.
fn relay_with_file(
    out: &pb::CommandOutput,
    file: Option<&Path>,
    what: &str,
    content: &str,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = file
        && !content.is_empty()
    {
        write(path, what, content)?;
    }
    Ok(relay(out))
}

fn write(path: &Path, what: &str, content: &str) -> anyhow::Result<()> {
    std::fs::write(path, content).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("quietbench: {what} written to {}", path.display());
    Ok(())
}

/// `run --controller`: submits, follows the events, prints the table, writes the reports asked
/// for, and exits as the run did.
pub fn run(
    remote: &Remote,
    request: pb::SubmitRunRequest,
    json: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        // Before the run exists: from then on a Ctrl-C cancels it rather than killing us.
        let mut interrupts =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("cannot catch Ctrl-C")?;
        let mut client = remote.connect().await?;
        let accepted = client
            .submit_run(request)
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        let run_id = accepted.run_id;
        eprintln!(
            "quietbench: run {run_id} submitted to {} ({} ahead of it)",
            remote.address, accepted.queue_position
        );
        let mut events = client
            .watch_run(pb::WatchRunRequest {
                run_id: run_id.clone(),
            })
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        let mut cancelled = false;
        let finished = loop {
            let next = tokio::select! {
                next = events.message() => next,
                _ = interrupts.recv(), if !cancelled => {
                    cancelled = true;
                    eprintln!("quietbench: cancelling run {run_id} on the service (Ctrl-C)");
                    client
                        .cancel_run(pb::CancelRunRequest { run_id: run_id.clone() })
                        .await
                        .map_err(|s| status_error(&remote.address, s))?;
                    continue;
                }
            };
            let lost = |why: String| {
                anyhow::anyhow!(
                    "lost the service at {} while run {run_id} went on ({why}); the run goes on \
                     there, and resumes if the service restarts: `quietbench show {run_id} \
                     --controller {}` once it has finished",
                    remote.address,
                    remote.address
                )
            };
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => return Err(lost("its event stream ended".into())),
                Err(status) => return Err(lost(status.message().to_string())),
            };
            if let Some(finished) = show_event(event) {
                break finished;
            }
        };
        for (path, format, what) in [
            (json, pb::ReportFormat::Json, "JSON report"),
            (html, pb::ReportFormat::Html, "HTML report"),
        ] {
            if let Some(path) = path {
                let content = report(&mut client, remote, &run_id, format).await?;
                write(path, what, &content)?;
            }
        }
        Ok(code(finished.exit_code))
    })
}

/// Prints one event as `run` would; returns the end when it is one.
fn show_event(event: pb::RunEvent) -> Option<pb::RunFinished> {
    use pb::run_event::Event;
    match event.event? {
        Event::Queued(q) => eprintln!("quietbench: queued: {}", q.reason),
        Event::Started(s) => eprintln!(
            "quietbench: {}",
            if s.resumed { "resumed" } else { "started" }
        ),
        // The run's own lines (Log) say the same as `run` does here; tooling reads these.
        Event::Host(_) | Event::Trial(_) => {}
        Event::Warning(w) => eprintln!("quietbench: warning: {}", w.text),
        Event::Log(l) => eprintln!("{}", l.text),
        Event::Output(o) => print!("{}", o.text),
        Event::Finished(f) => return Some(f),
    }
    None
}

async fn report(
    client: &mut Client,
    remote: &Remote,
    run: &str,
    format: pb::ReportFormat,
) -> anyhow::Result<String> {
    client
        .get_run_report(pb::GetRunReportRequest {
            run_id: run.to_string(),
            format: format as i32,
        })
        .await
        .map(|r| r.into_inner().content)
        .map_err(|s| status_error(&remote.address, s))
}

/// `show RUN --controller`: the table, and the reports asked for.
pub fn show(
    remote: &Remote,
    run: &str,
    json: Option<&Path>,
    html: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let mut client = remote.connect().await?;
        print!(
            "{}",
            report(&mut client, remote, run, pb::ReportFormat::Text).await?
        );
        if let Some(path) = json {
            let content = report(&mut client, remote, run, pb::ReportFormat::Json).await?;
            write(path, "JSON report", &content)?;
        }
        if let Some(path) = html {
            let content = report(&mut client, remote, run, pb::ReportFormat::Html).await?;
            write(path, "HTML report", &content)?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `cancel RUN --controller`: says what the run was.
pub fn cancel(remote: &Remote, run: &str) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let answer = remote
            .connect()
            .await?
            .cancel_run(pb::CancelRunRequest {
                run_id: run.to_string(),
            })
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        match answer.was.as_str() {
            "queued" => println!("run {run} cancelled: it had not started"),
            "running" => println!(
                "run {run} interrupted: it restores its hosts and keeps its finished trials"
            ),
            _ => println!("run {run} had finished: nothing to cancel"),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `runs --controller`.
pub fn runs(remote: &Remote, limit: usize) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let reply = remote
            .connect()
            .await?
            .list_runs(pb::ListRunsRequest {
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
            })
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        print!("{}", reply.text);
        // The service's runs its store does not have (yet): queued, or ended before they began.
        for r in reply.runs.iter().filter(|r| r.started_at_unix_ns == 0) {
            println!(
                "{}  {} on the service, not in its store",
                r.run_id, r.status
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `history --controller`.
pub fn history(
    remote: &Remote,
    request: pb::QueryHistoryRequest,
    html: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let out = remote
            .connect()
            .await?
            .query_history(request)
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        relay_with_file(&out, html, "history page", &out.html)
    })
}

/// `compare --runs A B --controller`.
pub fn compare_runs(
    remote: &Remote,
    request: pb::CompareRunsRequest,
    json: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let out = remote
            .connect()
            .await?
            .compare_runs(request)
            .await
            .map_err(|s| status_error(&remote.address, s))?
            .into_inner();
        relay_with_file(&out, json, "JSON report", &out.json)
    })
}
