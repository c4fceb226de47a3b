//! One measuring session, shared by `run`, `compare` and `resume`: start or name the agents,
//! drive the schedule, save every finished trial (result store, JSON), restore tuned hosts,
//! and report, mapping the outcome to an exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::local_agent::{LocalAgent, describe_status};
use crate::report::{HostKind, RunRecord, table};
use crate::run::{Flow, Progress, Target, execute, restore_all, write_json};
use crate::schedule::PlannedTrial;
use crate::store::{RunStatus, Store};

/// Exit code when the user interrupts (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The controller's runtime: one thread; it only waits on agents.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the controller's runtime")
}

/// A local agent as a target.
pub fn local_target(agent: &LocalAgent) -> Target {
    Target {
        address: agent.addr().to_string(),
        kind: HostKind::Local,
        label: format!("{} (local agent, pid {})", agent.addr(), agent.pid()),
        peer: None,
    }
}

/// Pins the controller (this thread, and so every thread it starts later: the runtime, the
/// progress bar's ticker) to the lowest CPU it may use, the one the local agent keeps for
/// housekeeping, so the controller never runs where a probe measures. Called after the agents
/// started, so they keep the full CPU set. (A few lines of nix rather than the probe crate's
/// helpers: the controller links no probe code.)
fn keep_off_probe_cpus() {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    let Ok(allowed) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if cpus.len() < 2 {
        return; // one CPU: nowhere else to go
    }
    let mut housekeeping = CpuSet::new();
    if housekeeping.set(cpus[0]).is_ok()
        && let Err(err) = sched_setaffinity(Pid::from_raw(0), &housekeeping)
    {
        eprintln!(
            "quietbench: warning: cannot pin the controller to CPU {}: {err}",
            cpus[0]
        );
    }
}

/// Where a session's results go besides the terminal.
pub struct Outputs {
    json: Option<PathBuf>,
    html: Option<PathBuf>,
    hdr_log: Option<PathBuf>,
    store: Option<Store>,
    hosts_stored: usize,
}

impl Outputs {
    /// Opens the store (`db`, or the default path) unless `no_store`.
    pub fn new(
        json: Option<PathBuf>,
        html: Option<PathBuf>,
        hdr_log: Option<PathBuf>,
        db: Option<&Path>,
        no_store: bool,
    ) -> anyhow::Result<Self> {
        let store = if no_store {
            None
        } else {
            let path = db
                .map(Path::to_path_buf)
                .unwrap_or_else(Store::default_path);
            Some(Store::open(&path).with_context(|| {
                format!(
                    "cannot open the result store {} (use --db FILE or --no-store)",
                    path.display()
                )
            })?)
        };
        Ok(Self {
            json,
            html,
            hdr_log,
            store,
            hosts_stored: 0,
        })
    }

    /// For a resumed run: the store already holds its first `hosts` hosts.
    pub fn resuming(mut self, hosts: usize) -> Self {
        self.hosts_stored = hosts;
        self
    }

    /// The store, if one is open.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// After each trial: hosts not stored yet, the trial, the JSON file.
    fn saved(&mut self, run: &RunRecord) -> anyhow::Result<()> {
        if let Some(store) = &self.store {
            while self.hosts_stored < run.hosts.len() {
                store.add_host(
                    &run.run_id,
                    self.hosts_stored,
                    &run.hosts[self.hosts_stored],
                )?;
                self.hosts_stored += 1;
            }
            if let Some(trial) = run.trials.last() {
                store.add_trial(&run.run_id, run.trials.len() - 1, trial)?;
            }
        }
        if let Some(path) = &self.json {
            write_json(path, run)?;
        }
        Ok(())
    }

    /// At the end: the final JSON, HTML and HDR interval logs; the run's status in the store.
    fn finish(&mut self, run: &RunRecord, status: RunStatus) -> anyhow::Result<()> {
        if let Some(store) = &self.store {
            while self.hosts_stored < run.hosts.len() {
                store.add_host(
                    &run.run_id,
                    self.hosts_stored,
                    &run.hosts[self.hosts_stored],
                )?;
                self.hosts_stored += 1;
            }
            store.finish_run(run, status)?;
            eprintln!(
                "quietbench: run {} stored in {}",
                run.run_id,
                store.path().display()
            );
        }
        if let Some(path) = &self.json {
            write_json(path, run)?;
            eprintln!("quietbench: JSON report written to {}", path.display());
        }
        if let Some(path) = &self.html {
            std::fs::write(path, crate::report::html::render_html(run))
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("quietbench: HTML report written to {}", path.display());
        }
        if let Some(dir) = &self.hdr_log {
            let written = write_hdr_logs(run, dir)?;
            eprintln!(
                "quietbench: {written} HDR interval log(s) written to {}",
                dir.display()
            );
        }
        Ok(())
    }
}

/// One HDR interval log per distribution metric, `DIR/<metric>.hlog`. Returns how many.
fn write_hdr_logs(run: &RunRecord, dir: &Path) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut metrics: Vec<&str> = Vec::new();
    for t in &run.trials {
        for i in &t.interval_records {
            for (name, _) in &i.histograms {
                if !metrics.contains(&name.as_str()) {
                    metrics.push(name);
                }
            }
        }
    }
    for metric in &metrics {
        let path = dir.join(format!("{metric}.hlog"));
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(&path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        );
        crate::report::hdrlog::write_interval_log(run, metric, &mut file)
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::io::Write::flush(&mut file)?;
    }
    Ok(metrics.len())
}

/// The agents of a session.
pub struct Session {
    targets: Vec<Target>,
    local: Option<LocalAgent>,
    _local_peer: Option<LocalAgent>,
}

impl Session {
    /// Starts local agents (`local`, plus a peer for network probes) or names remote ones.
    /// Local agents are started from the main thread: their parent-death signal follows it.
    pub fn start(
        local: bool,
        agents: &[String],
        peers: &[String],
        wants_peer: bool,
    ) -> anyhow::Result<Self> {
        if !peers.is_empty() && peers.len() != 1 && peers.len() != agents.len() {
            anyhow::bail!(
                "give one --peer for all agents or one per --agent ({} agents, {} peers)",
                agents.len(),
                peers.len()
            );
        }
        let agent = if local {
            Some(LocalAgent::start()?)
        } else {
            None
        };
        // Network probes on this machine: a second local agent serves the other end.
        let local_peer = if local && wants_peer {
            Some(LocalAgent::start()?)
        } else {
            None
        };
        if agent.is_some() {
            keep_off_probe_cpus();
        }
        let targets = match &agent {
            Some(a) => vec![Target {
                peer: local_peer.as_ref().map(|p| {
                    let mut t = local_target(p);
                    t.label = format!("{} (local peer agent, pid {})", p.addr(), p.pid());
                    Box::new(t)
                }),
                ..local_target(a)
            }],
            None => agents
                .iter()
                .enumerate()
                .map(|(i, a)| Target {
                    address: a.clone(),
                    kind: HostKind::Remote,
                    label: a.clone(),
                    peer: peers.get(i).or(peers.first()).map(|p| {
                        Box::new(Target {
                            address: p.clone(),
                            kind: HostKind::Remote,
                            label: format!("{p} (peer)"),
                            peer: None,
                        })
                    }),
                })
                .collect(),
        };
        Ok(Self {
            targets,
            local: agent,
            _local_peer: local_peer,
        })
    }

    /// Runs `run`'s schedule (skipping `done`), saving as it goes; `stop` may end it early
    /// after any trial. Returns the finished record and the exit code; prints the table.
    pub fn drive(
        mut self,
        mut run: RunRecord,
        mut outputs: Outputs,
        done: &[PlannedTrial],
        stop: &mut dyn FnMut(&RunRecord, &PlannedTrial) -> Flow,
    ) -> anyhow::Result<(RunRecord, ExitCode)> {
        let settings = &run.settings;
        let total = u64::from(settings.rounds + settings.warmup)
            * settings.variants.len() as u64
            * self.targets.len() as u64;
        let progress = Progress::new(total.saturating_sub(done.len() as u64));
        if let Some(store) = outputs.store()
            && done.is_empty()
        {
            store.begin_run(&run, None)?;
        }
        let rt = runtime()?;
        let targets = self.targets.clone();
        let mut on_trial = |run: &RunRecord, planned: &PlannedTrial| -> anyhow::Result<Flow> {
            outputs.saved(run)?;
            Ok(stop(run, planned))
        };
        let outcome = rt.block_on(async {
            tokio::select! {
                result = execute(&targets, &mut run, &progress, done, &mut on_trial) => Some(result),
                _ = tokio::signal::ctrl_c() => None,
            }
        });
        // Restore whatever happened above: success, failure or Ctrl-C.
        let restored = !run.settings.tune || rt.block_on(restore_all(&targets, &progress));
        progress.finish();
        run.finished_at = Some(SystemTime::now());
        let (code, status) = match outcome {
            Some(Ok(())) if !restored => {
                run.error = Some("a host could not be restored after the run; see above".into());
                (ExitCode::FAILURE, RunStatus::Failed)
            }
            Some(Ok(())) => (ExitCode::SUCCESS, RunStatus::Complete),
            Some(Err(err)) => {
                let mut message = format!("{err:#}");
                // A dead local agent explains the error better than the broken connection does.
                if let Some(agent) = self.local.as_mut()
                    && let Some(status) = agent.wait_exit(Duration::from_millis(500))
                {
                    message.push_str(&format!(
                        " (the local agent, pid {}, {})",
                        agent.pid(),
                        describe_status(status)
                    ));
                }
                run.error = Some(message.clone());
                eprintln!("quietbench: error: {message}");
                (ExitCode::FAILURE, RunStatus::Failed)
            }
            None => {
                run.error = Some("interrupted by the user".to_string());
                eprintln!(
                    "quietbench: interrupted; {} finished trials kept (quietbench resume {})",
                    run.trials.len(),
                    run.run_id
                );
                (ExitCode::from(EXIT_INTERRUPTED), RunStatus::Interrupted)
            }
        };
        drop(self.local.take());
        if !run.trials.is_empty() {
            println!("{}", table::render(&run));
        }
        for warning in crate::warnings::run_warnings(&run) {
            eprintln!("quietbench: warning: {warning}");
        }
        outputs.finish(&run, status)?;
        Ok((run, code))
    }
}
