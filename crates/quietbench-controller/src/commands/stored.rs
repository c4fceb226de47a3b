//! Commands over the result store: `runs`, `show`, `history` and `resume`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::execute::{FailurePolicy, Flow};
use crate::record::HostKind;
use crate::report::{json, table};
use crate::schedule::PlannedTrial;
use crate::session::{Outputs, Session};
use crate::store::{RunStatus, Store};

pub(crate) fn open(db: Option<&Path>) -> anyhow::Result<Store> {
    let path = Store::location(db);
    Store::open(&path).with_context(|| {
        format!(
            "cannot open the result store {}",
            crate::store::shown(&path)
        )
    })
}

/// `quietbench runs`: the newest runs, one line each.
pub fn list(db: Option<&Path>, limit: usize) -> anyhow::Result<ExitCode> {
    let store = open(db)?;
    let runs = store.list_runs(limit)?;
    if runs.is_empty() {
        println!("no runs stored in {}", store.path().display());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<36}  {:<24}  {:<11}  {:>5}  {:>6}  probes",
        "run", "started", "status", "hosts", "trials"
    );
    let interrupted = runs
        .iter()
        .filter(|r| r.status == RunStatus::Interrupted)
        .count();
    for r in runs {
        println!(
            "{:<36}  {:<24}  {:<11}  {:>5}  {:>6}  {}",
            r.id,
            json::rfc3339(r.started_at),
            r.status.as_str(),
            r.hosts,
            r.trials,
            r.probes.join(",")
        );
    }
    if interrupted > 0 {
        println!(
            "{interrupted} interrupted run(s): their finished trials are kept; continue one with \
             `quietbench resume RUN`"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `quietbench show RUN`: a stored run's table, and its reports on request.
pub fn show(
    db: Option<&Path>,
    run: &str,
    json_out: Option<PathBuf>,
    html: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let store = open(db)?;
    let stored = store.load_stored_run(run)?;
    let record = stored.record;
    println!(
        "run {} ({}), started {}",
        record.run_id,
        stored.status.as_str(),
        json::rfc3339(record.started_at)
    );
    if let Some(error) = &record.error {
        println!("stopped early: {error}");
    }
    if stored.status == RunStatus::Interrupted {
        if record.error.is_none() {
            println!("stopped early: its controller is gone (killed, or its machine restarted)");
        }
        println!("continue it with `quietbench resume {}`", record.run_id);
    }
    for host in &record.hosts {
        println!("{}", table::host_line(host));
    }
    println!("{}", table::render(&record));
    if let Some(path) = json_out {
        crate::run::write_json(&path, &record)?;
        eprintln!("quietbench: JSON report written to {}", path.display());
    }
    if let Some(path) = html {
        std::fs::write(&path, crate::report::html::render_html(&record))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("quietbench: HTML report written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `quietbench history`: one metric across stored runs, oldest first, one series per CPU model
/// (filterable to one with `cpu_model`).
pub fn history(
    db: Option<&Path>,
    probe: &str,
    metric: &str,
    cpu_model: Option<&str>,
    limit: usize,
) -> anyhow::Result<ExitCode> {
    let store = open(db)?;
    let points = store.history(probe, metric, cpu_model, limit)?;
    if points.is_empty() {
        println!(
            "no stored trial of {probe} has the metric {metric}{}",
            cpu_model
                .map(|m| format!(" on a CPU matching '{m}'"))
                .unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // One series per CPU model: a fleet that drew another model is not a code change, so
    // their points are never read as one line.
    let mut models: Vec<&str> = Vec::new();
    for p in &points {
        if !models.contains(&p.cpu_model.as_str()) {
            models.push(&p.cpu_model);
        }
    }
    for (i, model) in models.iter().enumerate() {
        let series: Vec<&crate::store::HistoryPoint> =
            points.iter().filter(|p| p.cpu_model == *model).collect();
        let values: Vec<f64> = series.iter().map(|p| p.value).collect();
        if i > 0 {
            println!();
        }
        match quietbench_stats::summarize(&values) {
            Some(s) => println!(
                "{model}: {} points, median {:.3}, CV {}",
                s.n,
                s.median,
                s.cv.map_or("-".into(), |c| format!("{:.2}%", c * 100.0))
            ),
            None => println!("{model}"),
        }
        println!(
            "  {:<24}  {:<8}  {:<22}  {:<8}  {:>5}  {:>14}",
            "started", "run", "host", "variant", "round", metric
        );
        for p in series {
            println!(
                "  {:<24}  {:<8}  {:<22}  {:<8}  {:>5}  {:>14.3}",
                json::rfc3339(p.started_at),
                super::short_id(&p.run_id),
                p.host,
                p.variant,
                p.round,
                p.value
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `quietbench resume RUN`: runs the trials an interrupted run had not finished, on the same
/// hosts (a fresh local agent for a local run, or `agents` instead of the stored addresses).
pub fn resume(
    context: &crate::context::CommandContext,
    db: Option<&Path>,
    run: &str,
    agents: &[String],
) -> anyhow::Result<ExitCode> {
    let store = open(db)?;
    let stored = store.load_stored_run(run)?;
    if stored.status == RunStatus::Complete {
        anyhow::bail!(
            "run {} is already complete: nothing to resume",
            stored.record.run_id
        );
    }
    // Running as readers see it: its controller is alive, or cannot be checked from here.
    if stored.status == RunStatus::Running {
        let by = stored.holder.as_ref().map_or_else(
            || {
                "a controller this machine cannot check (one begun by an older quietbench, \
                or on another machine)"
                    .to_string()
            },
            |h| format!("quietbench process {} on {}", h.pid, h.host),
        );
        anyhow::bail!(
            "run {} is still running in {by}: resuming it now would run its trials twice; \
             wait for it to finish, or stop that controller first",
            stored.record.run_id
        );
    }
    if let Some(slo) = &stored.record.settings.capacity_slo {
        anyhow::bail!(
            "run {} is a capacity search (SLO {slo}): its next step depends on the steps before \
             it, which resume cannot replay; run `quietbench capacity` again (this run's \
             finished steps stay in the store: `quietbench show {}`)",
            stored.record.run_id,
            super::short_id(&stored.record.run_id)
        );
    }
    let mut record = stored.record;
    let run_id = record.run_id.clone();
    let done: Vec<PlannedTrial> = store
        .trials_done(&run_id)?
        .into_iter()
        .filter_map(|d| {
            let variant = record
                .settings
                .variants
                .iter()
                .position(|v| v.name == d.variant)?;
            Some(PlannedTrial {
                round: d.round,
                warmup: d.warmup,
                variant,
                host: d.host,
            })
        })
        .collect();
    let local = record
        .hosts
        .first()
        .is_some_and(|h| h.kind == HostKind::Local);
    let addresses: Vec<String> = if agents.is_empty() {
        record.hosts.iter().map(|h| h.address.clone()).collect()
    } else {
        agents.to_vec()
    };
    if !local && addresses.is_empty() {
        anyhow::bail!("run {run_id} recorded no host: give --agent HOST:PORT");
    }
    let wants_peer = record
        .settings
        .variants
        .iter()
        .any(|v| crate::run::needs_peer(&v.probe));
    if wants_peer && !local {
        anyhow::bail!(
            "resuming a remote network run needs its peers, which the store does not keep; start it again"
        );
    }
    eprintln!(
        "quietbench: resuming run {run_id}: {} trials done, {} to go",
        done.len(),
        (record.settings.rounds + record.settings.warmup) as usize
            * record.settings.variants.len()
            * addresses.len().max(1)
            - done.len()
    );
    store.resume_run(&run_id)?;
    let stored_hosts = record.hosts.len();
    // The session connects to the hosts again and records them in the same order.
    record.hosts.clear();
    record.finished_at = None;
    record.error = None;
    let hosts = if local {
        Vec::new()
    } else {
        super::agent_entries(&addresses)?
    };
    let session = Session::for_hosts(
        context,
        local,
        hosts,
        &[],
        wants_peer,
        FailurePolicy::default(),
    )?;
    let outputs = Outputs::new(None, None, None, Some(store.path()), false)?.resuming(stored_hosts);
    drop(store);
    let (_, code) = session.drive(record, outputs, &done, &mut |_, _| Flow::Continue)?;
    Ok(code)
}
