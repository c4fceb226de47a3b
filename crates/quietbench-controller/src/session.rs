//! One measuring session, shared by `run`, `compare` and `resume`: start or name the agents,
//! drive the schedule, save every finished trial (result store, JSON), restore tuned hosts,
//! and report, mapping the outcome to an exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use crate::context::CommandContext;
use crate::execute::{FailurePolicy, Flow, KeptServers, execute};
use crate::fleet::{Fleet, HostEntry, Ledger, LedgerEntry, LocalFleet, StaticFleet, Target};
use crate::progress::Progress;
use crate::record::RunRecord;
use crate::report::table;
use crate::restore::restore_all;
use crate::run::write_json;
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

/// Where a session's results go besides the terminal.
pub struct Outputs {
    json: Option<PathBuf>,
    html: Option<PathBuf>,
    hdr_log: Option<PathBuf>,
    store: Option<Store>,
    hosts_stored: usize,
    /// Finished trials the store refused (disk full, ...): they are in the record and the
    /// reports, not in the store.
    trials_unstored: usize,
    /// When the JSON file was last rewritten.
    json_written: Option<Instant>,
    /// Print the run's table at the end (not for a capacity search, whose steps' table it
    /// prints itself).
    table: bool,
}

/// How often the JSON file is rewritten while a run goes on. Every trial is committed to the
/// store as it finishes; the JSON file is a whole report, so rewriting it after each of a
/// fleet's trials would cost the square of the trial count (at 200 hosts the file is ~1 MB).
const JSON_EVERY: Duration = Duration::from_secs(1);

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
            let path = Store::location(db);
            Some(Store::open(&path).with_context(|| {
                format!(
                    "cannot open the result store {} (use --db FILE or --no-store)",
                    crate::store::shown(&path)
                )
            })?)
        };
        Ok(Self {
            json,
            html,
            hdr_log,
            store,
            hosts_stored: 0,
            trials_unstored: 0,
            json_written: None,
            table: true,
        })
    }

    /// Prints no table of every variant at the end: the command prints its own.
    pub fn without_table(mut self) -> Self {
        self.table = false;
        self
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

    /// After each trial: hosts not stored yet, the trial, and (at most once a second, and
    /// always at the end) the JSON file.
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
            if let Some(trial) = run.trials.last()
                && let Err(e) = store.add_trial(&run.run_id, run.trials.len() - 1, trial)
            {
                self.trials_unstored += 1;
                return Err(e.into());
            }
        }
        if let Some(path) = &self.json
            && self.json_written.is_none_or(|t| t.elapsed() >= JSON_EVERY)
        {
            write_json(path, run)?;
            self.json_written = Some(Instant::now());
        }
        Ok(())
    }

    /// A run that measured nothing is not kept in the store: it has no result to show and no
    /// trial to resume from. Said, so the run id printed earlier does not vanish silently.
    fn discard(&mut self, run: &RunRecord) -> anyhow::Result<()> {
        if let Some(store) = &self.store {
            store.discard_run(&run.run_id)?;
            eprintln!(
                "quietbench: run {} measured nothing and is not kept in the store",
                run.run_id
            );
        }
        if let Some(path) = &self.json {
            write_json(path, run)?;
            eprintln!("quietbench: JSON report written to {}", path.display());
        }
        Ok(())
    }

    /// At the end: the final JSON, HTML and HDR interval logs; the run's status in the store.
    fn finish(&mut self, run: &RunRecord, status: RunStatus) -> anyhow::Result<()> {
        // The JSON first: whether the store's message may point at it depends on it (on a
        // full disk it may fail too, and an older JSON left there does not have the trials).
        let json_written = self.json.as_ref().map(|path| write_json(path, run));
        if let (Some(path), Some(Ok(()))) = (&self.json, &json_written) {
            eprintln!("quietbench: JSON report written to {}", path.display());
        }
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
            if self.trials_unstored == 0 {
                eprintln!(
                    "quietbench: run {} stored in {}",
                    run.run_id,
                    store.path().display()
                );
            } else {
                eprintln!(
                    "quietbench: run {} stored in {} without {} finished trial(s) the store \
                     refused (see above){}",
                    run.run_id,
                    store.path().display(),
                    self.trials_unstored,
                    match (&self.json, &json_written) {
                        (Some(path), Some(Ok(()))) =>
                            format!("; the JSON report {} has them", path.display()),
                        (Some(_), Some(Err(_))) =>
                            "; the JSON report could not be written either (below): they are \
                             lost"
                                .to_string(),
                        _ => String::new(),
                    }
                );
            }
        }
        if let Some(Err(err)) = json_written {
            return Err(err);
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

/// The hosts of a session, and what to do when one fails.
pub struct Session {
    fleet: Box<dyn Fleet>,
    policy: FailurePolicy,
    /// The command's context: what connecting and setting up hosts reads.
    context: CommandContext,
}

/// What the session leaves the store with when a run measured nothing.
fn nothing_measured(run: &RunRecord) -> bool {
    run.trials.is_empty()
}

impl Session {
    /// A session on `fleet`'s hosts, for a command whose context is `context`.
    pub fn new(fleet: Box<dyn Fleet>, policy: FailurePolicy, context: CommandContext) -> Self {
        Self {
            fleet,
            policy,
            context,
        }
    }

    /// The session for a command's target options: `local` starts agents here (and a peer
    /// agent when `wants_peer`), otherwise `hosts` are running agents, each with one of
    /// `peers` (one for all, or one each).
    pub fn for_hosts(
        context: &CommandContext,
        local: bool,
        hosts: Vec<HostEntry>,
        peers: &[String],
        wants_peer: bool,
        policy: FailurePolicy,
    ) -> anyhow::Result<Self> {
        let fleet: Box<dyn Fleet> = if local {
            Box::new(LocalFleet::new(wants_peer))
        } else {
            Box::new(StaticFleet::new(
                hosts,
                peers.to_vec(),
                context.fleet_access(),
            )?)
        };
        Ok(Self::new(fleet, policy, context.clone()))
    }

    /// The session on an EC2 fleet launched for the run (the binary's `ec2` feature).
    pub fn for_ec2(
        context: &CommandContext,
        spec: crate::fleet::ec2::Ec2Spec,
        wants_peer: bool,
        policy: FailurePolicy,
    ) -> anyhow::Result<Self> {
        spec.check().map_err(anyhow::Error::msg)?;
        let fleet = context
            .ec2()?
            .fleet(spec, wants_peer, context.tls.is_some())?;
        Ok(Self::new(fleet, policy, context.clone()))
    }

    /// Acquires the fleet's hosts, runs `run`'s schedule on them (skipping `done`), saving as
    /// it goes; `stop` may end it early after any trial. Restores tuned hosts and releases the
    /// fleet on every exit path. Returns the finished record and the exit code; prints the
    /// table.
    pub fn drive(
        self,
        run: RunRecord,
        outputs: Outputs,
        done: &[PlannedTrial],
        stop: &mut dyn FnMut(&RunRecord, &PlannedTrial) -> Flow,
    ) -> anyhow::Result<(RunRecord, ExitCode)> {
        self.drive_steps(run, outputs, done, stop, &mut |_| Ok(false))
    }

    /// [`Session::drive`] for a run whose schedule grows as it goes (a capacity search): when
    /// the schedule's trials are done, `more` may add variants to the run's settings and
    /// return true; the hosts, still held (and still tuned), then run the new variants' rounds
    /// as a further step, and so on until it returns false. A step's host failures are left in
    /// `run.host_failures` for `more` to read: what it leaves there ends the session as in
    /// `drive`. The store keeps the settings of every step.
    pub fn drive_steps(
        mut self,
        mut run: RunRecord,
        mut outputs: Outputs,
        done: &[PlannedTrial],
        stop: &mut dyn FnMut(&RunRecord, &PlannedTrial) -> Flow,
        more: &mut dyn FnMut(&mut RunRecord) -> anyhow::Result<bool>,
    ) -> anyhow::Result<(RunRecord, ExitCode)> {
        let progress = Progress::new(0);
        let ledger = Ledger::default_location();
        if let Some(store) = outputs.store()
            && done.is_empty()
        {
            store.begin_run(&run, None)?;
        }
        let rt = runtime()?;
        let policy = self.policy;
        let context = self.context.clone();
        self.fleet.bind_run(&run.run_id);
        let mut targets: Vec<Target> = Vec::new();
        // The `http` servers kept for the whole run (restart=run) that are still running when
        // the run ends, however it ends, are stopped below.
        let kept = KeptServers::default();
        if self.fleet.kind() == "ec2" {
            // Before the first launch: a controller killed while launching leaves its run in
            // the ledger, and `quietbench gc` on this machine collects it at once.
            let entry = LedgerEntry::new(&run.run_id, "ec2", run.settings.tune, &[]);
            if let Err(err) = ledger.record(&entry) {
                progress.line(&format!(
                    "quietbench: warning: cannot record the run in {} ({err:#}); if this \
                     controller is killed, `quietbench gc` removes its instances only when \
                     their lease expires",
                    ledger.dir().display()
                ));
            }
        }
        let outcome = rt.block_on(async {
            let acquired = tokio::select! {
                acquired = self.fleet.acquire(&progress) => Some(acquired),
                _ = tokio::signal::ctrl_c() => None,
            };
            match acquired {
                None => return None,
                Some(Err(err)) => return Some(Err(err)),
                Some(Ok(acquired)) => targets = acquired,
            }
            // Before tuning: a controller killed from here on leaves a record of what it held.
            let entry = LedgerEntry::new(
                &run.run_id,
                self.fleet.kind(),
                run.settings.tune,
                &targets,
            );
            if let Err(err) = ledger.record(&entry) {
                progress.line(&format!(
                    "quietbench: warning: cannot record the fleet in {} ({err:#}); if this \
                     controller is killed, `quietbench release` will not know its hosts",
                    ledger.dir().display()
                ));
            }
            run.fleet = self.fleet.report_lines();
            for line in &run.fleet {
                progress.line(line);
            }
            let mut done = done.to_vec();
            loop {
                let settings = &run.settings;
                let total = u64::from(settings.rounds + settings.warmup)
                    * settings.variants.len() as u64
                    * targets.len() as u64;
                progress.set_length(total.saturating_sub(done.len() as u64));
                let mut on_trial =
                    |run: &RunRecord, planned: &PlannedTrial| -> anyhow::Result<Flow> {
                        outputs.saved(run)?;
                        Ok(stop(run, planned))
                    };
                let result = tokio::select! {
                    result = execute(&targets, &mut run, &progress, &done, policy, &context, &kept, &mut on_trial) => result,
                    _ = tokio::signal::ctrl_c() => return None,
                };
                if result.is_err() {
                    return Some(result);
                }
                let before = run.settings.variants.len();
                match more(&mut run) {
                    Err(err) => return Some(Err(err)),
                    Ok(false) => return Some(Ok(())),
                    Ok(true) if !run.host_failures.is_empty() => return Some(Ok(())),
                    Ok(true) => {}
                }
                // The next step: every trial of the variants so far is done; the hosts are
                // connected and recorded again by `execute`.
                let s = &run.settings;
                done = crate::schedule::rmit(
                    s.variants.len(),
                    targets.len(),
                    s.rounds,
                    s.warmup,
                    s.seed,
                )
                .into_iter()
                .filter(|planned| planned.variant < before)
                .collect();
                run.hosts.clear();
                if let Some(store) = outputs.store()
                    && let Err(err) = store.update_settings(&run)
                {
                    return Some(Err(err.into()));
                }
            }
        });
        // Stop the kept servers, restore and release whatever happened above: success,
        // failure or Ctrl-C (the hosts' tasks, dropped with `execute`, stop nothing then).
        rt.block_on(kept.stop_all(&progress));
        let restored = !run.settings.tune || rt.block_on(restore_all(&targets, &progress));
        // A dead local agent explains a failure better than the broken connection does.
        let explanation = match &outcome {
            Some(Err(_)) => self.fleet.explain_failure(),
            Some(Ok(())) if !run.host_failures.is_empty() => self.fleet.explain_failure(),
            _ => None,
        };
        match rt.block_on(self.fleet.release(&progress)) {
            // Everything given back: nothing is left for `quietbench release`.
            Ok(()) if restored => {
                if let Err(err) = ledger.forget(&run.run_id) {
                    progress.line(&format!("quietbench: warning: {err:#}"));
                }
            }
            Ok(()) => progress.line(&format!(
                "quietbench: a host is still tuned: `quietbench release --run {}` retries",
                run.run_id
            )),
            Err(err) => progress.line(&format!(
                "quietbench: error: releasing the hosts failed: {err:#}"
            )),
        }
        progress.finish();
        run.finished_at = Some(SystemTime::now());
        let (code, status) = match outcome {
            Some(Ok(())) if !restored => {
                run.error = Some("a host could not be restored after the run; see above".into());
                (ExitCode::FAILURE, RunStatus::Failed)
            }
            Some(Ok(())) if !run.host_failures.is_empty() => {
                if let Some(why) = explanation {
                    for failure in &mut run.host_failures {
                        failure.error.push_str(&format!(" ({why})"));
                    }
                }
                let message = describe_host_failures(&run, done.is_empty());
                eprintln!("quietbench: error: {message}");
                run.error = Some(message);
                (ExitCode::FAILURE, RunStatus::Failed)
            }
            Some(Ok(())) => (ExitCode::SUCCESS, RunStatus::Complete),
            Some(Err(err)) => {
                let mut message = format!("{err:#}");
                // A dead local agent explains the error better than the broken connection does.
                if let Some(why) = explanation {
                    message.push_str(&format!(" ({why})"));
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
        if !run.trials.is_empty() && outputs.table {
            println!("{}", table::render(&run));
        }
        for warning in crate::warnings::run_warnings(&run) {
            eprintln!("quietbench: warning: {warning}");
        }
        if nothing_measured(&run) && done.is_empty() && status == RunStatus::Failed {
            outputs.discard(&run)?;
        } else {
            outputs.finish(&run, status)?;
        }
        Ok((run, code))
    }
}

/// Host failures, those for one reason together: 20 hosts refused for the same cause read as
/// one line naming the 20, not 20 lines. A reason is the error with the host's own address
/// taken out (messages name the agent they are about).
fn group_failures<'a>(failures: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (address, error) in failures {
        let reason = error
            .replace(&format!("agent {address}: "), "")
            .replace(address, "HOST");
        match groups.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, hosts)) => hosts.push(address),
            None => groups.push((reason, vec![address])),
        }
    }
    groups
        .into_iter()
        .map(|(reason, hosts)| match hosts.as_slice() {
            [one] => format!("{one}: {}", reason.replace("HOST", one)),
            many => format!("{} hosts ({}): {reason}", many.len(), many.join(", ")),
        })
        .collect()
}

/// One sentence for a run some of whose hosts failed: which, why, and what is missing (and,
/// when the run is kept, how to run it).
fn describe_host_failures(run: &RunRecord, fresh: bool) -> String {
    let missing = crate::record::missing_trials(run);
    let hosts = group_failures(run.host_failures.iter().map(|f| {
        let address = run.hosts.get(f.host).map_or("?", |h| h.address.as_str());
        (address, f.error.as_str())
    }));
    // A fresh run that measured nothing is not kept: there is nothing to resume; nor is a
    // capacity search resumed (its steps depend on each other).
    let resume = if fresh && nothing_measured(run) {
        String::new()
    } else if run.settings.capacity_slo.is_some() {
        " (a capacity search is not resumed: run it again)".to_string()
    } else {
        format!(" (quietbench resume {} runs them)", run.run_id)
    };
    format!(
        "{} of {} host(s) failed, {} trial(s) missing{resume}: {}",
        run.host_failures.len(),
        run.hosts.len(),
        missing.iter().map(|m| m.trials.len()).sum::<usize>(),
        hosts.join("; ")
    )
}

#[cfg(test)]
mod failure_tests {
    use super::group_failures;

    #[test]
    fn hosts_failing_for_one_reason_are_one_line() {
        let failures = [
            (
                "10.0.0.1:7700",
                "agent 10.0.0.1:7700: the agent refused our token: wrong token",
            ),
            (
                "10.0.0.2:7700",
                "agent 10.0.0.2:7700: the agent refused our token: wrong token",
            ),
            (
                "10.0.0.3:7700",
                "cannot reach 10.0.0.3:7700: connection refused",
            ),
        ];
        let lines = group_failures(failures.iter().copied());
        assert_eq!(
            lines,
            [
                "2 hosts (10.0.0.1:7700, 10.0.0.2:7700): the agent refused our token: wrong token",
                "10.0.0.3:7700: cannot reach 10.0.0.3:7700: connection refused",
            ]
        );
    }
}
