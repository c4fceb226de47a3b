//! What `compare` compares: two commands, or two builds of a server loaded by `http` or
//! `tcp`; the parameters of a server's side, and what cannot be measured.

use std::collections::BTreeMap;

use super::CompareOptions;
use crate::record::figures::{Interleave, TrialFigure};

/// What A and B are.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Workload {
    /// Two commands, timed per invocation (the exec probe).
    #[default]
    Commands,
    /// Two builds of a server, each started for its trials on the measured host and sent
    /// requests from a load agent (the http probe, or tcp for a raw request/response protocol).
    Servers {
        /// How the load talks to them: `http` or `tcp`.
        protocol: ServerProbe,
        /// The http probe's parameters both sides share (the load's, and the server's
        /// environment and readiness), never `server` or `target`.
        params: BTreeMap<String, String>,
        /// The load agents (HOST:PORT): one for all hosts or one per host; none with --local.
        load_from: Vec<String>,
    },
}

/// The probes that load a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerProbe {
    /// HTTP/1.1.
    Http,
    /// A raw TCP request/response protocol.
    Tcp,
}

impl Workload {
    /// The probe that measures it.
    pub fn probe(&self) -> &'static str {
        match self {
            Self::Commands => "exec",
            Self::Servers {
                protocol: ServerProbe::Http,
                ..
            } => "http",
            Self::Servers {
                protocol: ServerProbe::Tcp,
                ..
            } => "tcp",
        }
    }
}

/// The http parameters of one side: its server command, how it runs, and the shared ones.
pub fn server_params(
    opts: &CompareOptions,
    cmd: &str,
    shared: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut params = shared.clone();
    params.insert("server".to_string(), cmd.to_string());
    params.insert("server_shell".to_string(), opts.shell.to_string());
    params.insert(
        "server_aslr".to_string(),
        if opts.aslr_off { "off" } else { "on" }.to_string(),
    );
    if let Some(dir) = &opts.cwd {
        params.insert("server_cwd".to_string(), dir.display().to_string());
    }
    params
}

/// Why this combination of workload, figure and interleave cannot be measured, or `None`.
pub fn refusal(workload: &Workload, figure: TrialFigure, interleave: Interleave) -> Option<String> {
    let probe = workload.probe();
    if figure.for_probe(probe) != Some(figure) {
        return Some(match workload {
            Workload::Commands => format!(
                "--figure {} judges a server (--probe http or tcp); commands are judged on median, \
                 mean, cpu or instructions",
                figure.as_str()
            ),
            Workload::Servers { .. } => format!(
                "--figure {} judges commands; servers (--probe {probe}) are judged on p50, p99 \
                 or server-cpu",
                figure.as_str()
            ),
        });
    }
    let Workload::Servers { params, .. } = workload else {
        return None;
    };
    if interleave == Interleave::Invocations {
        return Some(
            "--interleave invocations times two commands within one trial; two servers take \
             turns in separate trials (--interleave trials, the default for servers) or run at \
             once (--interleave duet)"
                .into(),
        );
    }
    if interleave == Interleave::Duet && probe != "http" {
        return Some(format!(
            "--interleave duet is built for --probe http; {probe} servers take turns in \
             separate trials (--interleave trials)"
        ));
    }
    if interleave == Interleave::Duet && params.contains_key("grpc") {
        return Some(
            "--interleave duet is not built for grpc= yet: gRPC servers take turns in separate \
             trials (--interleave trials)"
                .into(),
        );
    }
    for key in ["server", "target", "server_b", "duet", "duet_target"] {
        if params.contains_key(key) {
            return Some(format!(
                "--param {key}= is not for compare: the servers are --a and --b, and the load \
                 goes to the one each trial starts on the measured host"
            ));
        }
    }
    None
}
