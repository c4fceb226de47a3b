//! Running a run's schedule on every host at once. Each host runs its own randomized
//! interleaved schedule (every round, every variant once, in a fresh seeded order per host and
//! round), trials strictly one after another on that host, while the other hosts do the same;
//! by default hosts wait for each other at round boundaries ([`rounds::RoundGate`]).
//!
//! One writer, this module's [`execute`], owns the run record: hosts send finished trials to it
//! over a bounded channel, and it saves each at once (store, JSON) through the caller's
//! callback, so a crash loses no finished trial. A host that fails is reported by name and the
//! others go on, unless `fail_fast`.

mod grpc_call;
mod host;
mod peer;
pub mod requests_file;
pub mod rounds;
pub mod server;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use host::headline;
pub use host::servers::KeptServers;
pub use peer::with_peer_flows;

use crate::connection::AgentConnection;
use crate::connection::intake::RunBudget;
use crate::context::CommandContext;
use crate::fleet::Target;
use crate::progress::Progress;
use crate::record::{HostFailure, HostRecord, RunRecord, RunSettings};
use crate::schedule::PlannedTrial;
use host::{AgentLocks, HostEvent, HostTask, PeerLink};
use rounds::RoundGate;

/// Finished trials waiting for the writer, at most: a host that gets this far ahead of the
/// store waits, so memory stays bounded however many hosts report at once.
const WRITER_QUEUE: usize = 64;

/// Whether a run goes on after a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Run the next trial.
    Continue,
    /// Stop here (an adaptive rule is satisfied); the run is complete.
    Stop,
}

/// How the run treats a failing host.
#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    /// Stop the whole run at the first host that fails (`--fail-fast`).
    pub fail_fast: bool,
    /// A host whose agent is lost or goes silent mid-trial is reconnected for up to this long
    /// and the trial run once more (an agent restarted on its address, a network blip); `None`
    /// fails the host at once (`--reconnect-within 0`).
    pub reconnect_within: Option<std::time::Duration>,
}

/// How long a lost agent is waited for by default: a restarted agent is back in a second or
/// two; a host that is gone costs the run this much once.
pub const DEFAULT_RECONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for FailurePolicy {
    fn default() -> Self {
        Self {
            fail_fast: false,
            reconnect_within: Some(DEFAULT_RECONNECT_WITHIN),
        }
    }
}

/// A host, connected and described, ready to measure.
struct Connected {
    conn: AgentConnection,
    peer: Option<PeerLink>,
    record: HostRecord,
}

/// Connects to a host (and its peer), reads its fingerprint, and tunes it when asked.
async fn connect(
    target: Target,
    settings: Arc<RunSettings>,
    context: CommandContext,
    progress: Progress,
) -> anyhow::Result<Connected> {
    let peer = match &target.peer {
        Some(peer) => {
            let mut conn =
                AgentConnection::connect_with(&peer.address, peer.label.clone(), &peer.access)
                    .await?;
            let host = conn.get_host().await?;
            Some(PeerLink {
                conn,
                target: (**peer).clone(),
                hostname: host.fingerprint.map(|f| f.hostname),
            })
        }
        None => None,
    };
    let mut conn =
        AgentConnection::connect_with(&target.address, target.label.clone(), &target.access)
            .await?;
    let host = conn.get_host().await?;
    let mut record = HostRecord {
        address: target.address.clone(),
        kind: target.kind,
        agent_version: host.agent_version,
        fingerprint: host.fingerprint.clone().unwrap_or_default(),
        tuning: Vec::new(),
        caps: crate::limits::lookup::caps_for_run(
            &host.fingerprint.unwrap_or_default(),
            context.aws.as_ref(),
            context.caps_source(),
        )
        .await,
    };
    progress.line(&crate::report::table::host_line(&record));
    if let Some(caps) = &record.caps {
        progress.line(&crate::report::table::caps_lines(&record.address, caps));
    }
    let measures_disks = settings
        .variants
        .iter()
        .any(|v| v.probe.starts_with("disk.") && v.probe != "disk.scan");
    if let Some(caps) = record.caps.as_mut().filter(|_| measures_disks) {
        // A pre-warm that fails (an agent without read access to the device) leaves the volume
        // cold: the run goes on, and the report's warning says the volume was measured cold.
        if let Err(err) = crate::prewarm::prewarm_host(
            &mut conn,
            &record.fingerprint,
            caps,
            context.prewarm,
            &progress,
        )
        .await
        {
            progress.line(&format!(
                "pre-warm on {} failed, measuring cold: {err}",
                target.address
            ));
        }
    }
    if settings.tune {
        let tuned = conn
            .prepare(crate::run::tune_request(&settings.cpus))
            .await?;
        progress.line(&format!(
            "tuned {} (undone after the run):\n{}",
            target.address,
            crate::report::table::controls(&tuned.controls).trim_end()
        ));
        record.tuning = tuned.controls;
    }
    Ok(Connected { conn, peer, record })
}

/// A host that could not be reached, kept in its place so every index stays the schedule's.
fn unreachable_host(target: &Target) -> HostRecord {
    HostRecord {
        address: target.address.clone(),
        kind: target.kind,
        agent_version: String::new(),
        fingerprint: Default::default(),
        tuning: Vec::new(),
        caps: None,
    }
}

/// Runs the run's schedule on every target at once, appending to `run` as trials finish and
/// calling `on_trial` after each one (which saves it: JSON, store), so an interrupted run keeps
/// what it measured. Trials in `done` (finished before an interruption) are skipped. `on_trial`
/// may stop the run early (adaptive stopping): hosts then finish the trial they are in.
///
/// Returns an error when the run cannot go on: saving failed, no host could be reached, or a
/// host failed under `--fail-fast`. A host that fails otherwise is recorded in
/// `run.host_failures` and the others finish their schedules.
///
/// The servers `http` trials keep for the whole run (restart=run) are in `kept` until they are
/// stopped: the caller stops what is left ([`KeptServers::stop_all`]) however this ends, as a
/// host task aborted here (`--fail-fast`), or this future dropped (Ctrl-C), stops nothing.
#[allow(clippy::too_many_arguments)]
pub async fn execute(
    targets: &[Target],
    run: &mut RunRecord,
    progress: &Progress,
    done: &[PlannedTrial],
    policy: FailurePolicy,
    context: &CommandContext,
    kept: &KeptServers,
    on_trial: &mut dyn FnMut(&RunRecord, &PlannedTrial) -> anyhow::Result<Flow>,
) -> anyhow::Result<()> {
    // The trials' copy of the settings: `http` and `tcp` request files are read into it here,
    // once for the run and before any host is reached (a bad file or server parameter stops
    // the run before anything starts); the run's record keeps the variants as given.
    let mut for_trials = run.settings.clone();
    requests_file::read_for_run(&mut for_trials.variants, for_trials.seed)?;
    grpc_call::read_for_run(&mut for_trials.variants)?;
    server::check_kept_servers(
        for_trials
            .variants
            .iter()
            .filter(|v| crate::run::runs_server(&v.probe))
            .map(|v| (v.name.as_str(), v.params.get("restart").map(String::as_str))),
    )
    .map_err(anyhow::Error::msg)?;
    let settings = Arc::new(for_trials);
    progress.status(format!("connecting to {} host(s)", targets.len()));
    let mut connecting = JoinSet::new();
    for (index, target) in targets.iter().enumerate() {
        let job = connect(
            target.clone(),
            settings.clone(),
            context.clone(),
            progress.clone(),
        );
        connecting.spawn(async move { (index, job.await) });
    }
    let mut connected: Vec<Option<Connected>> = targets.iter().map(|_| None).collect();
    let mut failures: Vec<HostFailure> = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        let (index, outcome) = joined.map_err(|e| anyhow::anyhow!("connecting failed: {e}"))?;
        match outcome {
            Ok(host) => connected[index] = Some(host),
            Err(err) if policy.fail_fast => return Err(err),
            Err(err) => failures.push(HostFailure {
                host: index,
                error: format!("{err:#}"),
            }),
        }
    }
    if connected.iter().all(Option::is_none) {
        let reasons: Vec<String> = failures.iter().map(|f| f.error.clone()).collect();
        anyhow::bail!("no host could be reached: {}", reasons.join("; "));
    }
    let hosts_before = run.hosts.len();
    debug_assert_eq!(hosts_before, 0, "hosts are recorded by execute alone");
    run.hosts = targets
        .iter()
        .zip(&connected)
        .map(|(t, c)| {
            c.as_ref()
                .map_or_else(|| unreachable_host(t), |c| c.record.clone())
        })
        .collect();
    failures.sort_by_key(|f| f.host);
    run.host_failures = failures;

    let schedule = crate::schedule::rmit(
        settings.variants.len(),
        targets.len(),
        settings.rounds,
        settings.warmup,
        settings.seed,
    );
    let mut per_host: Vec<Vec<(usize, PlannedTrial)>> = vec![Vec::new(); targets.len()];
    for (number, planned) in schedule.iter().enumerate() {
        // Finished before an interruption: `resume` does not run it again.
        if !done.contains(planned) {
            per_host[planned.host].push((number, *planned));
        }
    }
    let labels: Vec<(String, u64)> = targets
        .iter()
        .zip(&per_host)
        .map(|(t, trials)| (t.label.clone(), trials.len() as u64))
        .collect();
    let host_progress = progress.hosts(&labels);

    let mut gate = RoundGate::new(targets.len(), settings.round_sync);
    for failure in &run.host_failures {
        host_progress[failure.host].failed(&failure.error);
        gate.host_left(failure.host);
    }
    let (events_tx, mut events) = mpsc::channel(WRITER_QUEUE);
    let (released_tx, released) = watch::channel(gate.released());
    let (stop_tx, stop) = watch::channel(false);
    let locks = AgentLocks::default();
    // One budget for all the hosts' trial records: a run's memory is bounded whatever its
    // agents send, not only each trial's.
    let budget = RunBudget::default();
    let mut tasks = JoinSet::new();
    let mut task_hosts = HashMap::new();
    for (index, (host, trials)) in connected.into_iter().zip(per_host).enumerate() {
        let Some(host) = host else { continue };
        let task = HostTask {
            index,
            target: targets[index].clone(),
            conn: host.conn,
            hostname: host.record.fingerprint.hostname.clone(),
            peer: host.peer,
            settings: settings.clone(),
            run_id: run.run_id.clone(),
            trials,
            events: events_tx.clone(),
            released: released.clone(),
            stop: stop.clone(),
            progress: host_progress[index].clone(),
            locks: locks.clone(),
            reconnect_within: policy.reconnect_within,
            budget: budget.clone(),
            kept_servers: kept.clone(),
            kept: Default::default(),
            load_checked: Default::default(),
        };
        let handle = tasks.spawn(task.run());
        task_hosts.insert(handle.id(), index);
    }
    drop(events_tx);
    progress.status(String::new());

    // The writer: the one place that changes the run record.
    let mut measuring = task_hosts.len();
    while measuring > 0 {
        let event = tokio::select! {
            event = events.recv() => event,
            // A host task that panicked sends nothing more: count it out here.
            Some(Err(joined)) = tasks.join_next_with_id() => {
                let host = task_hosts.get(&joined.id()).copied().unwrap_or_default();
                Some(HostEvent::Left { host, error: Some(format!("its task failed: {joined}")) })
            }
        };
        let Some(event) = event else { break };
        match event {
            HostEvent::Trial { planned, record } => {
                run.trials.push(*record);
                match on_trial(run, &planned) {
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Stop) => {
                        let _ = stop_tx.send(true);
                    }
                    Err(err) => {
                        tasks.abort_all();
                        return Err(err);
                    }
                }
            }
            HostEvent::RoundFinished { host, round } => {
                gate.round_finished(host, round);
                let _ = released_tx.send(gate.released());
            }
            HostEvent::Left { host, error } => {
                measuring -= 1;
                gate.host_left(host);
                let _ = released_tx.send(gate.released());
                if let Some(error) = error {
                    run.host_failures.push(HostFailure {
                        host,
                        error: error.clone(),
                    });
                    if policy.fail_fast {
                        tasks.abort_all();
                        anyhow::bail!(
                            "host {} failed, and --fail-fast stops the run: {error}",
                            targets[host].label
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
