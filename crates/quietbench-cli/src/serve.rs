//! The command line of `quietbench serve`, and `--controller ADDR`: the options that send
//! run, compare, runs, show and history to a service instead of doing them here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use quietbench_proto::v1 as pb;

use super::TlsArgs;
use quietbench_controller::request::RunRequest;
use quietbench_controller::store::Store;
use quietbench_service::client::{self, Remote};
use quietbench_service::{ServeSettings, ServeTls};

/// The port `quietbench serve` listens on by default (the agent's is 7700).
pub const DEFAULT_SERVE_PORT: u16 = 7710;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; a non-loopback address needs mutual TLS (or --insecure)
    #[arg(long, value_name = "ADDR:PORT", default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_SERVE_PORT)))]
    listen: SocketAddr,
    /// Where the service keeps the runs it accepted (queued ones, and each run's output)
    /// [default: beside the result store, service/]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The result store every run is kept in: an SQLite file, or a PostgreSQL database
    /// (postgres://USER@HOST/DB) that many controllers share [default: $QUIETBENCH_DB, else
    /// $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// Runs measuring at once; more wait in the queue (a run also waits while another
    /// measures on one of its hosts)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    max_runs: u16,
    /// The service's certificate (PEM, `quietbench certs issue --service NAME`): serve mutual
    /// TLS; only client certificates (`certs issue --client NAME`) are let in
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "client_ca"])]
    tls_cert: Option<PathBuf>,
    /// The service's private key (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "client_ca"])]
    tls_key: Option<PathBuf>,
    /// The CA clients' certificates must chain to (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    client_ca: Option<PathBuf>,
    /// Serve plain gRPC on a non-loopback address: anyone who reaches the port can run
    /// commands on your agents
    #[arg(long)]
    insecure: bool,
    /// What each client may run (probes, exec, fleets, agents) and who the admins are (TOML,
    /// docs/service.md) [default: every probe but exec, on local and static hosts; this user
    /// and root on plain loopback: admins, and everything]
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Finished runs' own files (record, plan, output) are removed after this many days; their
    /// results stay in the store
    #[arg(long, value_name = "DAYS", default_value_t = quietbench_service::retention::DEFAULT_KEEP_DAYS, value_parser = clap::value_parser!(u32).range(1..=36500))]
    keep_days: u32,
    /// While the runs' own files take more than this many MiB, the oldest finished runs'
    /// files go first
    #[arg(long, value_name = "MIB", default_value_t = quietbench_service::retention::DEFAULT_KEEP_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    keep_mib: u64,
    /// How the service's runs reach agents (--ca, --cert, --key, --token-file)
    #[command(flatten)]
    pub(super) tls: TlsArgs,
}

/// `--controller ADDR` and the client certificate it is reached with.
#[derive(Debug, Args, Default)]
pub struct RemoteArgs {
    /// Ask a quietbench service (`quietbench serve`) at HOST:PORT instead of doing it here:
    /// the same output and exit code, from the service's machine and store
    #[arg(long, value_name = "HOST:PORT")]
    controller: Option<String>,
    /// The CA the service's certificate chains to: reach it over mutual TLS
    #[arg(long, value_name = "FILE", requires_all = ["controller", "controller_cert", "controller_key"])]
    controller_ca: Option<PathBuf>,
    /// This client's certificate (PEM, `quietbench certs issue --client NAME`)
    #[arg(long, value_name = "FILE", requires = "controller_ca")]
    controller_cert: Option<PathBuf>,
    /// This client's private key (PEM)
    #[arg(long, value_name = "FILE", requires = "controller_ca")]
    controller_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run's whole id, as `run --controller` printed it
    run: String,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// `quietbench cancel RUN --controller ADDR`.
pub fn cancel_command(args: &CancelArgs) -> anyhow::Result<ExitCode> {
    let Some(remote) = args.remote.remote() else {
        anyhow::bail!(
            "cancel asks a service: give --controller HOST:PORT (a run of this terminal stops \
             with Ctrl-C)"
        );
    };
    client::cancel(&remote, &args.run)
}

impl RemoteArgs {
    /// `--controller` was given.
    pub fn is_given(&self) -> bool {
        self.controller.is_some()
    }

    /// The service to ask, when `--controller` was given.
    pub fn remote(&self) -> Option<Remote> {
        let address = self.controller.clone()?;
        let tls = match (
            &self.controller_ca,
            &self.controller_cert,
            &self.controller_key,
        ) {
            (Some(ca), Some(cert), Some(key)) => Some((ca.clone(), cert.clone(), key.clone())),
            _ => None,
        };
        Some(Remote { address, tls })
    }
}

/// An absolute path: a run's process works in its own folder.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).map_err(|e| anyhow::anyhow!("cannot resolve {}: {e}", path.display()))
}

/// `quietbench serve`.
pub fn serve_command(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let db = Store::location(args.db.as_deref());
    let postgres = quietbench_controller::store::postgres_url(&db).is_some();
    // A run's process works in its own folder: a store file must be named absolutely.
    let db = if postgres { db } else { absolute(&db)? };
    let state_dir = match args.state_dir {
        Some(dir) => absolute(&dir)?,
        None if postgres => Store::default_path()
            .parent()
            .unwrap_or(Path::new("."))
            .join("service"),
        None => db.parent().unwrap_or(Path::new(".")).join("service"),
    };
    let mut agent_tls_args = Vec::new();
    for (flag, path) in [
        ("ca", &args.tls.ca),
        ("cert", &args.tls.cert),
        ("key", &args.tls.key),
        ("token-file", &args.tls.token_file),
    ] {
        if let Some(path) = path {
            agent_tls_args.push(format!("--{flag}={}", absolute(path)?.display()));
        }
    }
    let service_uid = nix::unistd::geteuid().as_raw();
    let policy = match &args.policy {
        Some(path) => quietbench_service::policy::Policy::read(path, service_uid)?,
        None => quietbench_service::policy::Policy::built_in(service_uid),
    };
    let tenancy = quietbench_service::policy::Tenancy {
        policy,
        retention: quietbench_service::retention::Retention::new(args.keep_days, args.keep_mib),
    };
    let tls = match (args.tls_cert, args.tls_key, args.client_ca) {
        (Some(cert), Some(key), Some(client_ca)) => Some(ServeTls {
            cert,
            key,
            client_ca,
        }),
        _ => None,
    };
    quietbench_service::serve(ServeSettings {
        listen: args.listen,
        state_dir,
        db,
        max_runs: usize::from(args.max_runs),
        tls,
        insecure: args.insecure,
        agent_tls_args,
        tenancy,
    })
}

/// `run --controller`: the run's options, or its plan, submitted to the service.
pub(super) fn run_remote(remote: &Remote, request: RunRequest) -> anyhow::Result<ExitCode> {
    let r = &request;
    let refused = [
        (
            r.hosts_file.is_some(),
            "--hosts (list the agents with --agent)",
        ),
        (r.ec2.is_some(), "--ec2"),
        (r.hdr_log.is_some(), "--hdr-log"),
        (
            r.db.is_some() || r.no_store,
            "--db and --no-store (the service keeps its own store)",
        ),
    ];
    if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
        anyhow::bail!("--controller runs cannot take {what}");
    }
    let what = if let Some(plan) = &r.plan {
        // A plan is sent as it is: what the flags would add to it is not sent with it.
        let with_plan = [
            (r.seed.is_some(), "--seed (set seed in the plan)"),
            (r.figure.is_some(), "--figure (set figure in the plan)"),
            (r.no_round_sync, "--no-round-sync"),
            (
                r.fail_fast,
                "--fail-fast (set [fleet] fail_fast in the plan)",
            ),
            (
                r.reconnect_within_s != quietbench_controller::request::DEFAULT_RECONNECT_S,
                "--reconnect-within",
            ),
            (r.prewarm.is_some(), "--prewarm (set prewarm in the plan)"),
        ];
        if let Some((_, what)) = with_plan.iter().find(|(given, _)| *given) {
            anyhow::bail!("--controller sends a plan as it is: it cannot take {what}");
        }
        let text = quietbench_host::input::read_text(plan, quietbench_host::input::MAX_INPUT_BYTES)
            .map_err(|e| anyhow::anyhow!("cannot read the plan {}: {e}", plan.display()))?;
        pb::submit_run_request::What::PlanToml(text)
    } else {
        pb::submit_run_request::What::Options(pb::RunOptions::from(r))
    };
    client::run(
        remote,
        pb::SubmitRunRequest { what: Some(what) },
        r.json.as_deref(),
        r.html.as_deref(),
    )
}
