//! `quietbench serve`: the controller as a long-running service, `quietbench.v1.Controller`
//! over gRPC (proto/quietbench/v1/controller.proto), for CI systems, dashboards and
//! `quietbench ... --controller ADDR` ([`client`]). Its own crate, above the controller whose
//! commands its runs' processes are, so that a change to a verdict or a report does not rebuild
//! it, and the controller links no gRPC server, policy or tenancy code of its own.
//!
//! - [`launch`]: a submitted run as `quietbench run`'s request, checked and bounded.
//! - [`state`]: the runs accepted, kept on disk so a restarted service goes on with them.
//! - [`runs`]: the queue, the limit, and one controller process per measuring run ([`child`]).
//! - [`watch`]: a run's events, read from its traces (state, store, output).
//! - [`api`]: the gRPC service; [`auth`]: the client role mutual TLS must show.
//! - [`policy`]: what each caller may run; [`access`]: whose runs a caller sees;
//!   [`secret_env`]: `env.*` values, never written; [`retention`]: how long finished runs'
//!   folders are kept; [`listing`]: what reads answer, written nowhere.

pub mod access;
pub mod api;
pub mod auth;
pub mod child;
pub mod client;
pub mod launch;
pub mod listing;
pub mod policy;
pub mod retention;
pub mod runs;
pub mod secret_env;
pub mod state;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use quietbench_proto::v1 as pb;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

/// The largest request the service decodes, bytes (a plan is at most 256 KiB).
const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// How long a stopping service waits for its runs to restore their hosts and save.
pub const STOP_GRACE: Duration = Duration::from_secs(120);
/// How long a stopping service waits for calls still being answered.
const SERVER_GRACE: Duration = Duration::from_secs(10);

/// The service's TLS: its certificate and key, and the CA its clients' certificates chain to.
#[derive(Debug, Clone)]
pub struct ServeTls {
    /// The service's certificate (`quietbench certs issue --service NAME`).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA clients' certificates must chain to (mutual TLS, client role).
    pub client_ca: PathBuf,
}

/// What `quietbench serve` was asked.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The result store.
    pub db: PathBuf,
    /// Runs measuring at once.
    pub max_runs: usize,
    /// Mutual TLS, or plain gRPC on loopback.
    pub tls: Option<ServeTls>,
    /// Serve plain gRPC on a non-loopback address anyway.
    pub insecure: bool,
    /// The service's identity toward agents, passed to every run (`--ca ...`).
    pub agent_tls_args: Vec<String>,
    /// What each caller may do, and how long finished runs are kept.
    pub tenancy: policy::Tenancy,
}

fn server_tls(settings: &ServeSettings) -> anyhow::Result<Option<ServerTlsConfig>> {
    let Some(tls) = &settings.tls else {
        if !settings.listen.ip().is_loopback() && !settings.insecure {
            anyhow::bail!(
                "refusing to serve plain gRPC on {}, a non-loopback address: anyone who reaches \
                 it could run commands on your agents. Give --tls-cert, --tls-key and \
                 --client-ca (quietbench certs makes them), or --insecure to serve it anyway",
                settings.listen
            );
        }
        return Ok(None);
    };
    let read = |what: &str, path: &PathBuf| {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the {what} {}", path.display()))
    };
    Ok(Some(
        ServerTlsConfig::new()
            .timeout(Duration::from_secs(10))
            .identity(Identity::from_pem(
                read("service certificate (--tls-cert)", &tls.cert)?,
                read("service key (--tls-key)", &tls.key)?,
            ))
            .client_ca_root(Certificate::from_pem(read(
                "client CA (--client-ca)",
                &tls.client_ca,
            )?))
            .client_auth_optional(false),
    ))
}

/// Serves until SIGINT or SIGTERM, then interrupts its runs (they restore their hosts and keep
/// their trials; the next start resumes them) and returns.
pub fn serve(settings: ServeSettings) -> anyhow::Result<ExitCode> {
    let tls = server_tls(&settings)?;
    let state = state::StateDir::open(&settings.state_dir)?;
    // Open once here: a store that cannot be opened or migrated is an error at start, not at
    // the first run.
    quietbench_controller::store::Store::open(&settings.db).with_context(|| {
        format!(
            "cannot open the result store {}",
            quietbench_controller::store::shown(&settings.db)
        )
    })?;
    let children = runs::ChildSettings {
        exe: std::env::current_exe().context("cannot find the quietbench binary")?,
        db: settings.db.clone(),
        agent_tls_args: settings.agent_tls_args.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the service's runtime")?;
    rt.block_on(async {
        let runs = runs::Runs::load(
            state,
            children,
            settings.max_runs,
            settings.tenancy.retention,
        )?;
        let pending = runs
            .all()
            .iter()
            .filter(|s| s.stage == state::Stage::Queued)
            .count();
        tokio::spawn(runs.clone().schedule());
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<pb::controller_server::ControllerServer<api::ControllerApi>>()
            .await;
        let reflection = reflection_builder()
            .build_v1()
            .context("building the reflection service (v1)")?;
        let reflection_v1alpha = reflection_builder()
            .build_v1alpha()
            .context("building the reflection service (v1alpha)")?;
        let api = pb::controller_server::ControllerServer::new(api::ControllerApi::new(
            runs.clone(),
            std::sync::Arc::new(settings.tenancy.policy.clone()),
        ))
        .max_decoding_message_size(MAX_REQUEST_BYTES);
        // As for agents: a client cannot hold the service with one connection's requests.
        let mut server = Server::builder()
            .concurrency_limit_per_connection(16)
            .max_concurrent_streams(32);
        if let Some(tls) = tls {
            server = server
                .tls_config(tls)
                .context("the service's TLS settings")?;
        }
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let bound = listener.local_addr()?;
        let gate = std::sync::Arc::new(quietbench_proto::gate::Gate::new(
            quietbench_proto::gate::SERVICE_LIMITS,
        ));
        let check = auth::ClientRole {
            gate: Some(std::sync::Arc::clone(&gate)),
            admission: if settings.tls.is_some() {
                auth::Admission::Tls
            } else if bound.ip().is_loopback() {
                auth::Admission::Loopback {
                    local: bound,
                    root: quietbench_host::HostRoot::live(),
                    uid: nix::unistd::geteuid().as_raw(),
                }
            } else {
                auth::Admission::Anyone
            },
        };
        eprintln!(
            "quietbench serve: listening on {bound} ({}), store {}, state {}, {} run(s) at \
             once{}",
            if settings.tls.is_some() {
                "mutual TLS, client certificates only"
            } else if bound.ip().is_loopback() {
                "plain gRPC, this user's processes only"
            } else {
                "plain gRPC, anyone who reaches it"
            },
            quietbench_controller::store::shown(&settings.db),
            settings.state_dir.display(),
            settings.max_runs,
            if pending > 0 {
                format!("; {pending} run(s) from before waiting")
            } else {
                String::new()
            }
        );
        // At the signal: the runs are interrupted first (they restore their hosts and keep
        // their trials, to be resumed at the next start), which ends every event stream; then
        // the server stops, waiting at most SERVER_GRACE for calls still answering.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopping = runs.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            let pids = stopping.interrupt_all();
            eprintln!(
                "quietbench serve: stopping: {} run(s) interrupted; they restore their hosts and \
                 resume when the service starts again",
                pids.len()
            );
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let server = server
            .add_service(InterceptedService::new(health_service, check.clone()))
            .add_service(InterceptedService::new(reflection, check.clone()))
            .add_service(InterceptedService::new(reflection_v1alpha, check.clone()))
            .add_service(InterceptedService::new(api, check))
            .serve_with_incoming_shutdown(
                quietbench_proto::gate::GatedIncoming::new(listener, gate),
                stopped(stop_rx.clone()),
            );
        tokio::select! {
            served = server => served.context("the service stopped")?,
            () = async {
                stopped(stop_rx).await;
                tokio::time::sleep(SERVER_GRACE).await;
            } => {}
        }
        wait_for_exit(&runs.running_pids(), STOP_GRACE).await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn reflection_builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::CONTROLLER_FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

/// Waits until none of `pids` is alive, or `grace` passed.
async fn wait_for_exit(pids: &[u32], grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline
        && pids.iter().any(|pid| {
            i32::try_from(*pid)
                .is_ok_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None).is_ok())
        })
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
