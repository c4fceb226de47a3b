//! The agent's settings: its command line, and a TOML file (`--config`) so that the AMI's
//! systemd unit needs no long command line. Flags on the command line win over the file; what
//! neither gives takes its default.
//!
//! The file's keys are the long flags with underscores (deploy/README.md has an example):
//! `listen`, `state_dir`, `allow_exec`, `tls_cert`, `tls_key`, `client_ca`, `token_file`,
//! `insecure`, `max_trial_secs`. An unknown key is an error with its line, never ignored: a misspelt
//! `client_ca` must not leave an agent open.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::limits::DEFAULT_MAX_TRIAL_SECS;

/// Where the agent listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "quietbench-agent",
    version,
    about = "quietbench agent: serves the host's fingerprint and runs probes over gRPC"
)]
pub struct AgentArgs {
    /// Address to serve gRPC on [default: 127.0.0.1:7700]. Port 0 picks a free port; the chosen
    /// address is printed on standard output as "quietbench-agent listening on ADDR".
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Read settings from this TOML file (keys: the long flags with underscores, e.g.
    /// tls_cert); flags given here win over it
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// For testing: read /proc and /sys under this directory instead of the machine's own, so
    /// that the agent describes a captured machine (e.g. a fixture tree holding another CPU's
    /// proc/cpuinfo). Probes still run on this machine; what the tree lacks is reported as
    /// unreadable.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// Directory for the restore journal of host changes [default: $QUIETBENCH_STATE_DIR, else
    /// /var/lib/quietbench-agent as root, else $XDG_STATE_HOME/quietbench-agent]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Let `exec` probes run a user's command as this agent's user. Off by default: whoever can
    /// reach the agent could run any command
    #[arg(long)]
    pub allow_exec: bool,
    /// Serve mutual TLS with this certificate (PEM, from `quietbench certs issue --agent NAME`).
    /// Needs --tls-key and --client-ca
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Accept only controllers whose certificate this CA (PEM, the fleet's ca.pem) signed
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Token mode, for quick setups: accept only calls carrying the token in this file (over
    /// TLS with --tls-cert and --tls-key; compared in constant time). Mutual TLS is stronger
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve plain gRPC on a non-loopback address, without TLS: anyone who reaches the port
    /// controls the agent. Refused without this flag
    #[arg(long)]
    pub insecure: bool,
    /// Longest trial this agent accepts, in seconds [default: 3600]
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub max_trial_secs: Option<u64>,
    /// A controller's own agent (`run --local`): read a secret from the first line of standard
    /// input and refuse every call that does not carry it, so no other user of this machine
    /// can reach it. The secret is never on a command line or in an environment. Loopback only
    #[arg(long, hide = true)]
    pub secret_stdin: bool,
}

/// The configuration file: every key optional, none unknown.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentConfig {
    listen: Option<SocketAddr>,
    state_dir: Option<PathBuf>,
    allow_exec: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    token_file: Option<PathBuf>,
    insecure: Option<bool>,
    max_trial_secs: Option<u64>,
}

/// The agent's TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTls {
    /// Its certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA controllers' certificates must chain to (mutual TLS); `None` in token mode.
    pub client_ca: Option<PathBuf>,
}

/// What the agent runs with, flags and file merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// Where it serves.
    pub listen: SocketAddr,
    /// Where /proc and /sys are read.
    pub host_root: PathBuf,
    /// The journal's directory, if set.
    pub state_dir: Option<PathBuf>,
    /// `exec` allowed.
    pub allow_exec: bool,
    /// TLS, if configured.
    pub tls: Option<AgentTls>,
    /// The token every call must carry (token mode), read from `--token-file`.
    pub token: Option<String>,
    /// Plain gRPC off loopback allowed.
    pub insecure: bool,
    /// Longest trial, seconds.
    pub max_trial_secs: u64,
    /// The calls' secret comes on standard input (a controller's own local agent).
    pub secret_stdin: bool,
}

impl AgentArgs {
    /// The flags merged over the `--config` file, with defaults for what neither gives.
    pub fn settings(&self) -> anyhow::Result<AgentSettings> {
        let file = match &self.config {
            Some(path) => {
                let text = quietbench_host::input::read_text(
                    path,
                    quietbench_host::input::MAX_INPUT_BYTES,
                )
                .with_context(|| format!("cannot read the config file {}", path.display()))?;
                parse_config(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
            None => AgentConfig::default(),
        };
        merge(self, file, self.config.as_deref())
    }
}

/// Fewest bytes a token may have: a guessable token is no lock.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A token file's token: its text without surrounding whitespace, at least
/// [`MIN_TOKEN_BYTES`] printable ASCII bytes.
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = quietbench_host::input::read_text(path, 64 << 10)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    if let Some(warning) = quietbench_host::input::readable_by_others(path) {
        tracing::warn!("{warning}");
    }
    let token = text.trim();
    if token.len() < MIN_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!(
            "the token in {} must be at least {MIN_TOKEN_BYTES} printable characters with no \
             spaces (e.g. `openssl rand -hex 32` or `head -c 32 /dev/urandom | base64`)",
            path.display()
        );
    }
    Ok(token.to_string())
}

fn parse_config(text: &str) -> Result<AgentConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

fn merge(
    args: &AgentArgs,
    file: AgentConfig,
    path: Option<&Path>,
) -> anyhow::Result<AgentSettings> {
    let from = |flag: &str| match path {
        Some(p) => format!("{flag} (here or in {})", p.display()),
        None => flag.to_string(),
    };
    let listen = match args.listen.or(file.listen) {
        Some(listen) => listen,
        None => DEFAULT_LISTEN
            .parse()
            .context("the default listen address")?,
    };
    let max_trial_secs = args
        .max_trial_secs
        .or(file.max_trial_secs)
        .unwrap_or(DEFAULT_MAX_TRIAL_SECS);
    if !(1..=86_400).contains(&max_trial_secs) {
        anyhow::bail!("max_trial_secs {max_trial_secs} is out of range: give 1 to 86400");
    }
    let cert = args.tls_cert.clone().or(file.tls_cert);
    let key = args.tls_key.clone().or(file.tls_key);
    let client_ca = args.client_ca.clone().or(file.client_ca);
    let token_file = args.token_file.clone().or(file.token_file);
    let tls = match (cert, key) {
        (None, None) => {
            if client_ca.is_some() || token_file.is_some() {
                anyhow::bail!(
                    "--client-ca and --token-file work over TLS: give {} too",
                    from("--tls-cert and --tls-key")
                );
            }
            None
        }
        (Some(cert), Some(key)) => {
            if client_ca.is_none() && token_file.is_none() {
                anyhow::bail!(
                    "a TLS agent must know its controller: give {} for mutual TLS, or \
                     --token-file for token mode",
                    from("--client-ca")
                );
            }
            Some(AgentTls {
                cert,
                key,
                client_ca,
            })
        }
        (cert, _) => anyhow::bail!(
            "TLS needs --tls-cert and --tls-key together: give {}",
            from(if cert.is_none() {
                "--tls-cert"
            } else {
                "--tls-key"
            })
        ),
    };
    let token = token_file.as_deref().map(read_token).transpose()?;
    if args.secret_stdin && (tls.is_some() || !listen.ip().is_loopback()) {
        anyhow::bail!(
            "--secret-stdin is for a controller's own agent: plain gRPC on a loopback address, \
             without TLS or a token file"
        );
    }
    Ok(AgentSettings {
        listen,
        host_root: args.host_root.clone(),
        state_dir: args.state_dir.clone().or(file.state_dir),
        allow_exec: args.allow_exec || file.allow_exec.unwrap_or(false),
        tls,
        token,
        insecure: args.insecure || file.insecure.unwrap_or(false),
        max_trial_secs,
        secret_stdin: args.secret_stdin,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(flags: &[&str]) -> AgentArgs {
        AgentArgs::parse_from(std::iter::once("quietbench-agent").chain(flags.iter().copied()))
    }

    #[test]
    fn the_file_fills_what_the_flags_leave_and_flags_win() {
        let file = parse_config(
            "listen = \"0.0.0.0:7700\"\nallow_exec = true\nmax_trial_secs = 600\n\
             tls_cert = \"/etc/quietbench/tls/agent.pem\"\ntls_key = \"/etc/quietbench/tls/agent.key\"\n\
             client_ca = \"/etc/quietbench/tls/ca.pem\"\n",
        )
        .unwrap();
        let s = merge(&args(&["--max-trial-secs", "60"]), file, None).unwrap();
        assert_eq!(s.listen, "0.0.0.0:7700".parse().unwrap());
        assert!(s.allow_exec);
        assert_eq!(s.max_trial_secs, 60);
        assert_eq!(
            s.tls.unwrap().client_ca,
            Some(PathBuf::from("/etc/quietbench/tls/ca.pem"))
        );
        let defaults = merge(&args(&[]), AgentConfig::default(), None).unwrap();
        assert_eq!(defaults.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(defaults.max_trial_secs, DEFAULT_MAX_TRIAL_SECS);
        assert!(!defaults.allow_exec && defaults.tls.is_none());
    }

    #[test]
    fn a_misspelt_key_or_half_a_tls_setup_is_an_error() {
        let e = parse_config("listen = \"0.0.0.0:7700\"\nclient-ca = \"x\"\n").unwrap_err();
        assert!(e.contains("client-ca") && e.contains("line 2"), "{e}");
        assert!(parse_config("max_trial_secs = \"ten\"").is_err());
        let half = parse_config("tls_cert = \"a.pem\"\n").unwrap();
        let e = merge(&args(&[]), half, Some(Path::new("agent.toml"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("give --tls-key (here or in agent.toml)"),
            "{e}"
        );
        let e = merge(
            &args(&["--tls-cert", "c", "--tls-key", "k"]),
            AgentConfig::default(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("must know its controller"), "{e}");
        let e = merge(&args(&["--client-ca", "ca"]), AgentConfig::default(), None).unwrap_err();
        assert!(e.to_string().contains("work over TLS"), "{e}");
        let zero = parse_config("max_trial_secs = 0").unwrap();
        assert!(merge(&args(&[]), zero, None).is_err());
    }
}
