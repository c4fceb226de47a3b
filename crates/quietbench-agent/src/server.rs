//! Starting the agent: arguments, the pinned runtime, and the gRPC server with health and
//! reflection.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use quietbench_host::HostRoot;
use quietbench_probe::affinity::{current_thread_affinity, pin_current_thread};
use quietbench_proto::v1::AGENT_FILE_DESCRIPTOR_SET;
use quietbench_proto::v1::agent_service_server::AgentServiceServer;

use crate::config::{AgentArgs, AgentSettings, AgentTls};
use crate::service::Agent;
use crate::tuning::{Tuner, default_state_dir};
use std::sync::Arc;

/// Command-line arguments of the agent (`quietbench-agent`, or `quietbench agent`).
/// The TLS configuration the flags give, or `None` for plain gRPC; refuses plain gRPC on a
/// non-loopback address unless `--insecure`.
fn server_tls(args: &AgentSettings) -> anyhow::Result<Option<tonic::transport::ServerTlsConfig>> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let Some(AgentTls {
        cert,
        key,
        client_ca,
    }) = &args.tls
    else {
        if !args.listen.ip().is_loopback() {
            if !args.insecure {
                anyhow::bail!(
                    "refusing to serve plain gRPC on {}, a non-loopback address: anyone who reaches \
                     it could run commands and change this host. Give --tls-cert, --tls-key and \
                     --client-ca (quietbench certs makes them), or --insecure to serve it anyway",
                    args.listen
                );
            }
            tracing::warn!(
                "serving plain gRPC on {} (--insecure): anyone who reaches this port controls the agent",
                args.listen
            );
            eprintln!(
                "quietbench-agent: WARNING: serving plain gRPC on {} (--insecure): anyone who reaches this port controls the agent",
                args.listen
            );
        }
        return Ok(None);
    };
    let read = |what: &str, path: &PathBuf| {
        quietbench_host::input::read_text(path, quietbench_host::input::MAX_INPUT_BYTES)
            .with_context(|| format!("cannot read the {what} {}", path.display()))
    };
    let mut config = ServerTlsConfig::new()
        .timeout(crate::limits::TLS_HANDSHAKE_TIMEOUT)
        .identity(Identity::from_pem(
            read("agent certificate (--tls-cert)", cert)?,
            read("agent key (--tls-key)", key)?,
        ));
    // Mutual TLS when a client CA is given; otherwise token mode (server certificate only).
    if let Some(ca) = client_ca {
        config = config
            .client_ca_root(Certificate::from_pem(read("client CA (--client-ca)", ca)?))
            .client_auth_optional(false);
    }
    Ok(Some(config))
}

/// Serves until SIGINT or SIGTERM. Blocks the calling thread.
pub fn serve(args: &AgentArgs) -> anyhow::Result<()> {
    init_tracing();
    let args = &args.settings()?;
    // Read before anything is pinned: this is the set probes may be placed on.
    let allowed_cpus = current_thread_affinity().context("reading the agent's CPU affinity")?;
    let housekeeping = allowed_cpus
        .first()
        .copied()
        .context("the agent's CPU affinity is empty")?;
    // The main thread drives the server future (block_on): keep it off probe CPUs too.
    if let Err(err) = pin_current_thread(&[housekeeping]) {
        tracing::warn!("cannot pin the agent's main thread to CPU {housekeeping}: {err}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("qb-grpc")
        .on_thread_start(move || {
            // Keep the runtime off the CPUs probes use; failure only costs some noise.
            if let Err(err) = pin_current_thread(&[housekeeping]) {
                tracing::warn!("cannot pin gRPC thread to CPU {housekeeping}: {err}");
            }
        })
        .enable_all()
        .build()
        .context("starting the agent's runtime")?;
    let tls = server_tls(args)?;
    let root = HostRoot::at(&args.host_root);
    let state_dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    // A user's server a killed agent left running would disturb this start's look at the
    // machine and answer the next trial's requests: stopped first, before anything is served.
    crate::user_server::stop_orphans(&state_dir);
    let probe_cpus: Vec<u32> = if allowed_cpus.len() > 1 {
        allowed_cpus[1..].to_vec()
    } else {
        allowed_cpus.clone()
    };
    let tuner = Arc::new(Tuner::start(root.clone(), &state_dir, probe_cpus));
    // Where NIC interrupts land decides placement: look before the first trial.
    let layout =
        crate::machine::describe(&root, &allowed_cpus, crate::machine::OBSERVATION_WINDOW).layout;
    let agent = Agent::new(root, allowed_cpus, layout, Arc::clone(&tuner))
        .allowing_exec(args.allow_exec)
        .with_max_trial(args.max_trial_secs)
        .with_state_dir(state_dir);
    let servers = agent.server_slot();
    let secret = if args.secret_stdin {
        Some(crate::auth::read_secret(std::io::stdin().lock())?)
    } else {
        None
    };
    let gate = Arc::new(quietbench_proto::gate::Gate::new(
        quietbench_proto::gate::AGENT_LIMITS,
    ));
    let check = crate::auth::TokenCheck::new(secret.as_deref().or(args.token.as_deref()))
        .with_gate(Arc::clone(&gate));
    let served = runtime.block_on(run_server(args.listen, agent, tls, check, gate));
    // A clean stop leaves the host as this agent found it, and no server of its running.
    servers.shutdown();
    tuner.shutdown();
    served
}

async fn run_server(
    listen: SocketAddr,
    agent: Agent,
    tls: Option<tonic::transport::ServerTlsConfig>,
    check: crate::auth::TokenCheck,
    gate: Arc<quietbench_proto::gate::Gate>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}: is another agent running there?"))?;
    let local = listener.local_addr()?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<AgentServiceServer<Agent>>().await;
    // Both reflection versions: v1 is the standard, but many clients still speak only v1alpha
    // (Python's grpcio-reflection, older grpcurl and Postman builds) and get UNIMPLEMENTED
    // without it. The two share one descriptor set; serving both costs nothing per request.
    let reflection = reflection_builder()
        .build_v1()
        .context("building the reflection service (v1)")?;
    let reflection_v1alpha = reflection_builder()
        .build_v1alpha()
        .context("building the reflection service (v1alpha)")?;

    let slot = agent.slot();
    let shutdown = async move {
        wait_for_signal().await;
        tracing::info!("shutting down: cancelling any running trial");
        slot.cancel_any();
    };

    // The controller reads this line to learn the port; flush so it is not stuck in a buffer.
    let mut stdout = std::io::stdout();
    writeln!(stdout, "quietbench-agent listening on {local}")?;
    stdout.flush()?;
    tracing::info!(%local, "serving");

    use crate::limits::{
        MAX_REQUEST_BYTES, MAX_REQUESTS_PER_CONNECTION, MAX_STREAMS_PER_CONNECTION,
    };
    let mut builder = tonic::transport::Server::builder()
        .concurrency_limit_per_connection(MAX_REQUESTS_PER_CONNECTION)
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .context("configuring TLS from --tls-cert and --tls-key")?;
    }
    // Every service answers only whom the agent service answers: mutual TLS covers them all at
    // the handshake, and in token mode health and reflection check the token too, so that a
    // stranger cannot even learn what this port serves.
    use tonic::service::interceptor::InterceptedService;
    builder
        .add_service(InterceptedService::new(health_service, check.clone()))
        .add_service(InterceptedService::new(reflection, check.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, check.clone()))
        .add_service(InterceptedService::new(
            AgentServiceServer::new(agent).max_decoding_message_size(MAX_REQUEST_BYTES),
            check,
        ))
        .serve_with_incoming_shutdown(
            quietbench_proto::gate::GatedIncoming::new(listener, gate),
            shutdown,
        )
        .await
        .context("gRPC server failed")
}

/// What reflection describes: the agent's own service and the standard health service.
fn reflection_builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(AGENT_FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the agent still serves; it just dies the default way.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUIETBENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second init (tests, the controller's re-exec) is harmless: keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
