//! The `http` probe's two hosts: the user's server runs on the measured host (its agent's
//! StartServer), the requests come from the load agent (the `http` probe there). A variant's
//! parameters hold both; this splits them, so the load agent sees only the load's and the
//! server's agent only the server's, and the trial's record keeps them all.
//!
//! The load's target is never the user's to choose: it is the server this trial started on the
//! measured host, so the load cannot be pointed at a machine that is not the one measured.

use std::collections::{BTreeMap, HashMap};

use quietbench_proto::v1 as pb;

/// The parameters of the server side, consumed here; every other parameter is the load's.
const SERVER_KEYS: &[&str] = &[
    "server",
    "server_shell",
    "server_cwd",
    "server_aslr",
    "server_threads",
    "ready_path",
    "ready_timeout_ms",
    "restart",
];
/// Prefix of the server's environment variables (`env.NAME=VALUE`, as exec's command's: the
/// service keeps their values out of its store for both).
const SERVER_ENV: &str = "env.";
/// Longest wait for a server to become ready that a user may ask for.
const MAX_READY_MS: u64 = 120_000;

/// A variant's parameters, split between the server's agent and the load agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// StartServer's request, less what the trial knows only when it runs (address, CPUs,
    /// its life).
    pub start: pb::StartServerRequest,
    /// The load's parameters (the `http` probe's, without `target`, which the trial fills in),
    /// a request file's `requests_text` among them when the run read one in.
    pub load: HashMap<String, String>,
    /// The server's parameters as given, for the trial's record.
    pub server: BTreeMap<String, String>,
}

/// Splits an `http` variant's parameters; an error says which one is wrong and why.
pub fn split(params: &HashMap<String, String>) -> Result<Split, String> {
    if params.contains_key("target") {
        return Err(
            "target= is not yours to set for http: the load goes to the server this trial \
             starts on the measured host (give its command as server=)"
                .into(),
        );
    }
    let mut server = BTreeMap::new();
    let mut load = HashMap::new();
    for (key, value) in params {
        if SERVER_KEYS.contains(&key.as_str()) || key.starts_with(SERVER_ENV) {
            server.insert(key.clone(), value.clone());
        } else {
            load.insert(key.clone(), value.clone());
        }
    }
    let command = server
        .get("server")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            "http needs the server to start: server='./my-server --port {port}' (the agent fills \
             in {port})"
                .to_string()
        })?;
    let flag = |key: &str| -> Result<bool, String> {
        match server.get(key).map(String::as_str) {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(format!("{key}='{other}': give true or false")),
        }
    };
    let aslr_off = match server.get("server_aslr").map(String::as_str) {
        None | Some("on") => false,
        Some("off") => true,
        Some(other) => return Err(format!("server_aslr='{other}': give on or off")),
    };
    let number = |key: &str, default: u64, max: u64| -> Result<u64, String> {
        match server.get(key) {
            None => Ok(default),
            Some(text) => match text.parse::<u64>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{key}='{text}': give a whole number from 1 to {max}"
                )),
            },
        }
    };
    match server.get("restart").map(String::as_str) {
        None | Some("trial") => {}
        Some("run") => {
            return Err(
                "restart=run (one server process for the whole run) is not built yet: every \
                 trial starts a fresh server (restart=trial)"
                    .into(),
            );
        }
        Some(other) => return Err(format!("restart='{other}': give trial")),
    }
    let ready_path = server.get("ready_path").cloned().unwrap_or_default();
    if !ready_path.is_empty() && !ready_path.starts_with('/') {
        return Err(format!(
            "ready_path='{ready_path}': give a path that starts with /"
        ));
    }
    let env = server
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(SERVER_ENV).map(|name| (name, v)))
        .map(|(name, value)| {
            if name.is_empty() || name.contains('=') {
                Err(format!(
                    "{SERVER_ENV}{name}: give env.NAME=VALUE with a name"
                ))
            } else {
                Ok((name.to_string(), value.clone()))
            }
        })
        .collect::<Result<HashMap<_, _>, _>>()?;
    let start = pb::StartServerRequest {
        command,
        shell: flag("server_shell")?,
        env,
        cwd: server.get("server_cwd").cloned().unwrap_or_default(),
        cpus: Vec::new(),
        threads: number("server_threads", 1, 64)? as u32,
        aslr_off,
        bind_address: String::new(),
        ready_timeout_ms: number("ready_timeout_ms", 10_000, MAX_READY_MS)? as u32,
        ready_path,
        port: 0,
        max_life_ms: 0,
    };
    Ok(Split {
        start,
        load,
        server,
    })
}

/// How long the server may live unstopped: the trial's length plus room for its set-up and
/// the controller's slowest answer; past it, the server's agent stops it by itself (the
/// controller died).
pub fn max_life_ms(duration_ms: u64, ready_timeout_ms: u32) -> u64 {
    duration_ms
        .saturating_add(u64::from(ready_timeout_ms))
        .saturating_add(120_000)
}

/// The load's CPUs when the load agent shares the measured host: every CPU `online` has that
/// the server does not use, so the load never takes the server's CPUs. Empty (the load agent's
/// own placement) when the server was left unpinned or nothing is left over.
pub fn load_cpus_beside(server_cpus: &[u32], online: &[u32]) -> Vec<u32> {
    if server_cpus.is_empty() {
        return Vec::new();
    }
    online
        .iter()
        .copied()
        .filter(|c| !server_cpus.contains(c))
        .collect()
}

/// The server's figures for the trial's record: its CPU time, that time per request the load
/// sent (the companion figure that network and client noise do not reach), and its peak RSS.
pub fn server_metrics(stopped: &pb::StopServerResponse, requests: Option<f64>) -> Vec<Figure> {
    let mut figures = vec![
        Figure {
            name: quietbench_vocab::metrics::SERVER_CPU_TIME,
            unit: "ns",
            value: stopped.cpu_ns as f64,
        },
        Figure {
            name: quietbench_vocab::metrics::SERVER_PEAK_RSS,
            unit: "bytes",
            value: stopped.peak_rss_bytes as f64,
        },
    ];
    if let Some(n) = requests.filter(|n| *n > 0.0) {
        figures.push(Figure {
            name: quietbench_vocab::metrics::SERVER_CPU_PER_REQUEST,
            unit: "ns",
            value: stopped.cpu_ns as f64 / n,
        });
    }
    figures
}

/// Says in a trial's placement (which is the load's: the probe's threads are the load
/// agent's) where the server ran.
pub fn with_server_note(
    mut placement: pb::Placement,
    started: &pb::StartServerResponse,
) -> pb::Placement {
    let cpus = if started.cpus.is_empty() {
        "unpinned (the measured host's placement found no CPU for it)".to_string()
    } else {
        format!(
            "on CPU {}",
            started
                .cpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    placement.notes.push(format!(
        "these are the load's threads; the server (pid {}) ran {cpus} of the measured host, \
         ready {:.1} ms after its start",
        started.pid,
        started.ready_ns as f64 / 1e6
    ));
    placement
}

/// An `http` trial's p99 request latency for its progress line ("p99 3.21 ms"); `None` for
/// other probes, or a trial with no request recorded.
pub fn p99_of(metrics: &[crate::record::MetricRecord]) -> Option<String> {
    let latency = metrics
        .iter()
        .find(|m| m.name == quietbench_vocab::metrics::REQUEST_LATENCY)?;
    let hist = &latency.histogram.as_ref()?.hist;
    (!hist.is_empty()).then(|| format!("p99 {:.2} ms", hist.value_at_quantile(0.99) as f64 / 1e6))
}

/// One whole-trial figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: &'static str,
    pub unit: &'static str,
    pub value: f64,
}

/// Why a trial whose server ended on its own cannot count, in words.
pub fn ended_early(stopped: &pb::StopServerResponse) -> Option<String> {
    stopped.exited_early.then(|| {
        let tail = if stopped.stderr_tail.trim().is_empty() {
            "(nothing)".to_string()
        } else {
            stopped.stderr_tail.trim().to_string()
        };
        format!(
            "the server {} during the trial, so the trial measured a server that was not \
             there; its stderr ended with: {tail}",
            stopped.ended
        )
    })
}

/// What a stopped server adds to its trial: its figures, and its parameters to the record's
/// (beside the load's); an error when it had ended on its own.
pub(super) fn account(
    stopped: pb::StopServerResponse,
    split: &Split,
    completed: &mut crate::connection::CompletedTrial,
) -> anyhow::Result<Vec<Figure>> {
    if let Some(why) = ended_early(&stopped) {
        anyhow::bail!("{why}");
    }
    let requests = completed
        .result
        .metrics
        .iter()
        .find(|m| m.name == quietbench_vocab::metrics::REQUESTS_SENT)
        .and_then(|m| m.value);
    completed
        .accepted
        .resolved_params
        .extend(split.server.clone());
    Ok(server_metrics(&stopped, requests))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_server_keys_go_to_the_server_and_the_rest_to_the_load() {
        let s = split(&params(&[
            ("server", "./srv --port {port}"),
            ("env.RUST_LOG", "warn"),
            ("server_aslr", "off"),
            ("ready_path", "/health"),
            ("rate", "500"),
            ("path", "/search?q=1"),
        ]))
        .unwrap();
        assert_eq!(s.start.command, "./srv --port {port}");
        assert_eq!(
            s.start.env.get("RUST_LOG").map(String::as_str),
            Some("warn")
        );
        assert!(s.start.aslr_off && !s.start.shell);
        assert_eq!(s.start.ready_path, "/health");
        assert_eq!((s.start.threads, s.start.ready_timeout_ms), (1, 10_000));
        assert_eq!(s.load, params(&[("rate", "500"), ("path", "/search?q=1")]));
        assert_eq!(s.server.len(), 4);
    }

    #[test]
    fn bad_server_parameters_say_which_and_why() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("rate", "5")], "http needs the server to start"),
            (&[("server", "  ")], "http needs the server to start"),
            (
                &[("server", "s"), ("target", "10.0.0.9:80")],
                "not yours to set",
            ),
            (
                &[("server", "s"), ("server_aslr", "maybe")],
                "server_aslr='maybe'",
            ),
            (
                &[("server", "s"), ("server_shell", "yes")],
                "server_shell='yes'",
            ),
            (&[("server", "s"), ("server_threads", "0")], "from 1 to 64"),
            (
                &[("server", "s"), ("ready_timeout_ms", "999999")],
                "from 1 to 120000",
            ),
            (
                &[("server", "s"), ("ready_path", "health")],
                "starts with /",
            ),
            (&[("server", "s"), ("restart", "run")], "not built yet"),
            (&[("server", "s"), ("restart", "often")], "restart='often'"),
            (&[("server", "s"), ("env.", "x")], "with a name"),
        ];
        for (given, expected) in cases {
            let err = split(&params(given)).unwrap_err();
            assert!(err.contains(expected), "{given:?}: {err}");
        }
    }

    #[test]
    fn the_load_takes_every_cpu_the_server_does_not() {
        assert_eq!(load_cpus_beside(&[1], &[0, 1]), vec![0]);
        assert_eq!(load_cpus_beside(&[2, 3], &[0, 1, 2, 3]), vec![0, 1]);
        assert!(load_cpus_beside(&[], &[0, 1]).is_empty());
    }

    #[test]
    fn cpu_per_request_needs_requests_and_an_early_exit_is_explained() {
        let stopped = pb::StopServerResponse {
            stopped: true,
            cpu_ns: 2_000_000,
            peak_rss_bytes: 4096,
            exited_early: false,
            ended: "stopped by SIGTERM".into(),
            stderr_tail: String::new(),
            ran_ns: 1,
        };
        let figures = server_metrics(&stopped, Some(1000.0));
        let per = figures
            .iter()
            .find(|f| f.name == quietbench_vocab::metrics::SERVER_CPU_PER_REQUEST)
            .unwrap();
        assert_eq!(per.value, 2000.0);
        assert_eq!(server_metrics(&stopped, Some(0.0)).len(), 2);
        assert!(ended_early(&stopped).is_none());
        let early = pb::StopServerResponse {
            exited_early: true,
            ended: "exited with status 3".into(),
            stderr_tail: "out of memory\n".into(),
            ..stopped
        };
        let why = ended_early(&early).unwrap();
        assert!(
            why.contains("exited with status 3") && why.contains("out of memory"),
            "{why}"
        );
    }
}
