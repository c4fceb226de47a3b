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
    "duet",
    "server_b",
];
/// Prefix of the server's environment variables (`env.NAME=VALUE`, as exec's command's: the
/// service keeps their values out of its store for both).
const SERVER_ENV: &str = "env.";
/// Longest wait for a server to become ready that a user may ask for.
const MAX_READY_MS: u64 = 120_000;
/// Servers one agent keeps at once for restart=run (the agent's own bound, `MAX_KEPT` in
/// quietbench-agent's user_server.rs): a run with more restart=run variants is refused before
/// anything starts, rather than at its ninth variant's first trial.
pub const MAX_KEPT_SERVERS: usize = 8;

/// When the user's server is started (`restart=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// A fresh process for every trial (the default): process-level variance (memory layout,
    /// allocator state, JIT) is sampled by the trials.
    Trial,
    /// One process per variant and host for the whole run, started at the variant's first
    /// trial there: when the user knows the server's state between requests matters more.
    Run,
}

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
    /// When the server is started.
    pub restart: Restart,
    /// Server B of a duet (`duet=true` with `server_b=`): started with the same settings beside
    /// server A for every trial, on CPUs of its own; `compare --interleave duet` sets both.
    pub duet_b: Option<pb::StartServerRequest>,
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
    let restart = match server.get("restart").map(String::as_str) {
        None | Some("trial") => Restart::Trial,
        Some("run") => Restart::Run,
        Some(other) => {
            return Err(format!(
                "restart='{other}': give trial (a fresh server for every trial) or run (one \
                 for the whole run)"
            ));
        }
    };
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
        keep_as: String::new(),
    };
    let duet_b = duet_server(&server, &start, restart)?;
    Ok(Split {
        start,
        load,
        server,
        restart,
        duet_b,
    })
}

/// Server B of a duet: A's settings with B's command; refused for restart=run (two kept
/// servers per host for the run would hold each other's CPUs between trials).
fn duet_server(
    server: &BTreeMap<String, String>,
    start: &pb::StartServerRequest,
    restart: Restart,
) -> Result<Option<pb::StartServerRequest>, String> {
    let command = server
        .get("server_b")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    match (server.get("duet").map(String::as_str), command) {
        (None | Some("false"), None) => Ok(None),
        (None | Some("false"), Some(_)) => Err(
            "server_b= is server B of a duet: give duet=true too (compare --probe http \
             --interleave duet sets both)"
                .into(),
        ),
        (Some("true"), None) => {
            Err("duet=true runs two servers at once: give server B's command as server_b=".into())
        }
        (Some("true"), Some(_)) if restart == Restart::Run => Err(
            "duet=true starts both servers for every trial: restart=run is not for a duet".into(),
        ),
        (Some("true"), Some(command)) => Ok(Some(pb::StartServerRequest {
            command,
            ..start.clone()
        })),
        (Some(other), _) => Err(format!("duet='{other}': give true or false")),
    }
}

/// Refuses a run whose restart=run variants are more than an agent keeps servers at once
/// ([`MAX_KEPT_SERVERS`]): each keeps a server on every measured host. Takes each `http`
/// variant's name and `restart=` value.
pub fn check_kept_servers<'a>(
    variants: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), String> {
    let kept: Vec<&str> = variants
        .into_iter()
        .filter(|(_, restart)| *restart == Some("run"))
        .map(|(name, _)| name)
        .collect();
    if kept.len() > MAX_KEPT_SERVERS {
        return Err(format!(
            "restart=run keeps one server per variant on each measured host, and an agent keeps \
             at most {MAX_KEPT_SERVERS} at once: this run has {} such variants ({}); give some \
             restart=trial",
            kept.len(),
            kept.join(", ")
        ));
    }
    Ok(())
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

/// A restart=run server as a trial's placement note tells of it: kept for the run, started for
/// trial `first_trial` (its number in the run's schedule, as in trial ids) of `first_round`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    pub first_trial: usize,
    pub first_round: u32,
    /// This trial is the one it was started for.
    pub started_here: bool,
}

/// Says in a trial's placement (which is the load's: the probe's threads are the load
/// agent's) where the server ran, and for restart=run that it was reused.
pub fn with_server_note(
    mut placement: pb::Placement,
    started: &pb::StartServerResponse,
    reuse: Option<Reuse>,
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
    let kept = match reuse {
        None => String::new(),
        Some(Reuse {
            first_trial,
            started_here: true,
            ..
        }) => format!(
            "; kept for the run (restart=run), started for this trial (trial {first_trial}), \
             its CPU time here this trial's share"
        ),
        Some(Reuse {
            first_trial,
            first_round,
            ..
        }) => format!(
            "; kept for the run (restart=run), reused: started for trial {first_trial} (round \
             {first_round}), its CPU time here this trial's share and its peak RSS the most \
             since its start"
        ),
    };
    placement.notes.push(format!(
        "these are the load's threads; the server (pid {}) ran {cpus} of the measured host, \
         ready {:.1} ms after its start{kept}",
        started.pid,
        started.ready_ns as f64 / 1e6
    ));
    placement
}

/// One trial's share of a kept server's cost: the CPU time between the samples taken at the
/// trial's start and end (saturating: a process of its group that ended unseen between them
/// takes its time with it); peak RSS, run time and how it ended as of the end.
pub fn trial_share(
    before: &pb::StopServerResponse,
    after: pb::StopServerResponse,
) -> pb::StopServerResponse {
    pb::StopServerResponse {
        cpu_ns: after.cpu_ns.saturating_sub(before.cpu_ns),
        ..after
    }
}

/// Why a trial cannot run because its kept server ended since the variant's last trial (it
/// exited, or its agent stopped it at its max life), in words with its stderr's tail.
pub fn ended_between_trials(
    pid: u32,
    first_trial: usize,
    sample: &pb::StopServerResponse,
) -> String {
    let tail = if sample.stderr_tail.trim().is_empty() {
        "(nothing)".to_string()
    } else {
        sample.stderr_tail.trim().to_string()
    };
    format!(
        "the server kept for the run (restart=run, pid {pid}, started for trial {first_trial}) \
         {} between trials, before this one; its stderr ended with: {tail}",
        sample.ended
    )
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
        if split.duet_b.is_some() {
            anyhow::bail!("server A: {why}");
        }
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

/// Server B's figures in a duet, under B's names: as [`account`]'s for A, over the requests
/// sent to B.
pub(super) fn account_b(
    stopped: pb::StopServerResponse,
    completed: &crate::connection::CompletedTrial,
) -> anyhow::Result<Vec<Figure>> {
    use quietbench_vocab::metrics;
    if let Some(why) = ended_early(&stopped) {
        anyhow::bail!("server B: {why}");
    }
    let requests = completed
        .result
        .metrics
        .iter()
        .find(|m| m.name == metrics::B_REQUESTS_SENT)
        .and_then(|m| m.value);
    Ok(server_metrics(&stopped, requests)
        .into_iter()
        .filter_map(|f| metrics::duet_b(f.name).map(|name| Figure { name, ..f }))
        .collect())
}

#[cfg(test)]
mod tests;
