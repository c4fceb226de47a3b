//! The command line of TLS: `quietbench certs`, and the `--ca --cert --key` every command that
//! talks to agents takes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};

use super::ControllerCommand;
use quietbench_controller::tls::certs::{self, DEFAULT_DAYS, Role};

impl ControllerCommand {
    /// The TLS flags of a command that talks to agents.
    pub(super) fn tls_args(&self) -> Option<&TlsArgs> {
        match self {
            Self::Run(a) => Some(&a.tls),
            Self::RunRequest(a) => Some(&a.tls),
            Self::Host(a) => Some(&a.tls),
            Self::Tune(a) => Some(&a.tls),
            Self::Restore(a) => Some(&a.tls),
            Self::Compare(a) => Some(&a.tls),
            Self::Capacity(a) => Some(&a.tls),
            Self::Resume(a) => Some(&a.tls),
            Self::Release(a) => Some(&a.tls),
            Self::Serve(a) => Some(&a.tls),
            Self::Cancel(_) | Self::Changes(_) => None,
            Self::Runs(_) | Self::Show(_) | Self::History(_) | Self::Certs(_) | Self::Caps(_) => {
                None
            }
        }
    }
}

/// TLS to the agents: the CA, and a certificate (mutual TLS) or a token (token mode).
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// Talk to agents over TLS: the CA certificate (PEM, from `quietbench certs init`) their
    /// certificates must chain to. With --cert and --key (mutual TLS) or --token-file
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// This controller's certificate (PEM, from `quietbench certs issue --controller NAME`)
    #[arg(long, value_name = "FILE", requires_all = ["ca", "key"])]
    pub cert: Option<PathBuf>,
    /// This controller's private key (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["ca", "cert"])]
    pub key: Option<PathBuf>,
    /// Token mode: the file holding the agents' token (or set QUIETBENCH_TOKEN). Needs --ca
    #[arg(long, value_name = "FILE", requires = "ca")]
    pub token_file: Option<PathBuf>,
}

impl TlsArgs {
    /// The TLS identity the flags give, if they give one.
    pub fn client(&self) -> anyhow::Result<Option<quietbench_controller::tls::ClientTls>> {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let token = match &self.token_file {
            Some(path) => Some(quietbench_controller::tls::read_token_file(path)?),
            None => std::env::var("QUIETBENCH_TOKEN")
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
        };
        let identity = self.cert.as_deref().zip(self.key.as_deref());
        Ok(Some(quietbench_controller::tls::ClientTls::load(
            ca, identity, token,
        )?))
    }
}

/// `quietbench certs`.
#[derive(Debug, Args)]
pub struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

#[derive(Debug, Subcommand)]
enum CertsCommand {
    /// Make a certificate authority for a fleet: DIR/ca.pem (give it to every agent and
    /// controller) and DIR/ca.key (keep it where certificates are issued; written 0600)
    Init {
        /// Directory to hold the CA (created if needed; an existing CA is never overwritten)
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Issue an agent's (TLS server) or a controller's (TLS client) certificate from the CA in
    /// DIR: DIR/agent-NAME.pem and .key, or DIR/controller-NAME.pem and .key (keys 0600); or
    /// the controller service's (`quietbench serve`) and its clients' (service-NAME, client-NAME)
    #[command(group(ArgGroup::new("role").required(true).args(["agent", "controller", "service", "client"])))]
    #[command(group(ArgGroup::new("server").multiple(false).args(["agent", "service"])))]
    Issue {
        /// Directory holding the CA
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// An agent's certificate, valid for NAME and every --san
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// A controller's certificate, known by NAME
        #[arg(long, value_name = "NAME")]
        controller: Option<String>,
        /// The controller service's certificate (`quietbench serve`), valid for NAME and every
        /// --san
        #[arg(long, value_name = "NAME")]
        service: Option<String>,
        /// A certificate for a client of the controller service (`--controller`, CI, dashboards),
        /// known by NAME; the service accepts no other role
        #[arg(long, value_name = "NAME")]
        client: Option<String>,
        /// Another name the agent or service is dialled by: a DNS name or an IP address (repeat)
        #[arg(long, value_name = "DNS|IP", requires = "server")]
        san: Vec<String>,
        /// Days the certificate is valid
        #[arg(long, default_value_t = DEFAULT_DAYS, value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: u32,
    },
}

/// Runs `quietbench certs ...`.
pub fn certs_command(args: CertsArgs) -> anyhow::Result<ExitCode> {
    let now = time::OffsetDateTime::now_utc();
    match args.command {
        CertsCommand::Init { dir } => {
            let ca = certs::init(&dir, now)?;
            println!(
                "CA certificate {} (valid {} days); its key {} is private (0600): keep it where certificates are issued",
                ca.display(),
                certs::CA_DAYS,
                dir.join("ca.key").display()
            );
        }
        CertsCommand::Issue {
            dir,
            agent,
            controller,
            service,
            client,
            san,
            days,
        } => {
            let (role, name) = [
                (Role::Agent, agent),
                (Role::Controller, controller),
                (Role::Service, service),
                (Role::Client, client),
            ]
            .into_iter()
            .find_map(|(role, name)| Some((role, name?)))
            .ok_or_else(|| {
                anyhow::anyhow!("give --agent, --controller, --service or --client NAME")
            })?;
            let issued = certs::issue(&dir, role, &name, &san, days, now)?;
            println!(
                "certificate {} and key {} (0600), valid until {}{}",
                issued.cert.display(),
                issued.key.display(),
                issued.not_after,
                if issued.sans.is_empty() {
                    String::new()
                } else {
                    format!(", for {}", issued.sans.join(", "))
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
