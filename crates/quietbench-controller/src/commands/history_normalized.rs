//! `quietbench history --normalize-by CONTROL`: one metric across stored runs with each host's
//! figures divided by its control's of the same rounds ([`crate::verdicts::normalize`]), one
//! line per run and CPU model: what is left once the instance and the day are taken out.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use crate::record::RunRecord;
use crate::report::json;
use crate::verdicts::compare::exec_figure;
use crate::verdicts::normalize::{NormalizeError, normalized_values};

/// One run's normalized figure on one CPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedPoint {
    /// The CPU model.
    pub cpu_model: String,
    /// The metric's normalized name.
    pub metric: String,
    /// Hosts of that model.
    pub hosts: usize,
    /// The median over hosts of each host's geometric-mean normalized figure.
    pub median: f64,
    /// SD of the hosts' log figures (relative between-host scatter); `None` for one host.
    pub between_host_sd: Option<f64>,
}

/// A run's normalized figures of `probe`'s `metric`, per CPU model (those containing
/// `cpu_model`, ASCII case ignored, when given).
pub fn normalized_points(
    run: &RunRecord,
    probe: &str,
    metric: &str,
    cpu_model: Option<&str>,
    control: &str,
) -> Result<Vec<NormalizedPoint>, NormalizeError> {
    let of_probe = |variant: &str| {
        run.settings
            .variants
            .iter()
            .any(|v| v.name == variant && v.probe == probe)
    };
    let wanted = |model: &str| {
        cpu_model.is_none_or(|m| model.to_ascii_lowercase().contains(&m.to_ascii_lowercase()))
    };
    // model → (metric name, host → log values)
    let mut by_model: BTreeMap<String, (String, BTreeMap<String, Vec<f64>>)> = BTreeMap::new();
    for v in normalized_values(run, Some(metric), exec_figure(run), control)? {
        if !of_probe(&v.variant) || !wanted(&v.cpu_model) {
            continue;
        }
        by_model
            .entry(v.cpu_model.clone())
            .or_insert_with(|| (v.metric.clone(), BTreeMap::new()))
            .1
            .entry(v.machine.clone())
            .or_default()
            .push(v.value.ln());
    }
    Ok(by_model
        .into_iter()
        .filter_map(|(model, (metric, hosts))| {
            let logs: Vec<f64> = hosts
                .values()
                .map(|v| v.iter().sum::<f64>() / v.len() as f64)
                .collect();
            let values: Vec<f64> = logs.iter().map(|l| l.exp()).collect();
            let median = quietbench_stats::robust::median(&values).ok()?;
            let between_host_sd = quietbench_stats::stdev(&logs).ok().flatten();
            Some(NormalizedPoint {
                cpu_model: model,
                metric,
                hosts: logs.len(),
                median,
                between_host_sd,
            })
        })
        .collect())
}

/// The normalized history as points the change-point search takes: per run and CPU model, one
/// point whose value is the median normalized figure over that model's hosts, in the store's
/// order (oldest run first), the variant named as the normalized metric ("METRIC / CONTROL",
/// or "METRIC × CONTROL" for a rate against a time). Runs that cannot be
/// normalized (no control) are returned as reasons.
pub fn normalized_history(
    store: &crate::store::Store,
    probe: &str,
    metric: &str,
    cpu_model: Option<&str>,
    limit: usize,
    control: &str,
) -> anyhow::Result<(Vec<crate::store::HistoryPoint>, Vec<String>)> {
    let points = store.history(probe, metric, cpu_model, limit)?;
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for p in &points {
        if done.contains(&p.run_id.as_str()) {
            continue;
        }
        done.push(&p.run_id);
        let run = store.load_stored_run(&p.run_id)?.record;
        match normalized_points(&run, probe, metric, cpu_model, control) {
            Err(e) => skipped.push(e.to_string()),
            Ok(found) => out.extend(found.into_iter().map(|n| crate::store::HistoryPoint {
                run_id: p.run_id.clone(),
                started_at: p.started_at,
                host: format!("{} hosts", n.hosts),
                cpu_model: n.cpu_model,
                variant: n.metric,
                params: Default::default(),
                round: 0,
                seq: 0,
                // A figure over its control keeps the figure's better direction.
                unit: p.unit.clone(),
                value: n.median,
            })),
        }
    }
    Ok((out, skipped))
}

/// Prints the normalized history of `probe`'s `metric`: the runs that have it, oldest first.
pub fn history_normalized(
    db: Option<&Path>,
    probe: &str,
    metric: &str,
    cpu_model: Option<&str>,
    limit: usize,
    control: &str,
) -> anyhow::Result<ExitCode> {
    let store = super::stored::open(db)?;
    let points = store.history(probe, metric, cpu_model, limit)?;
    let mut runs: Vec<&str> = Vec::new();
    for p in &points {
        if !runs.contains(&p.run_id.as_str()) {
            runs.push(&p.run_id);
        }
    }
    if runs.is_empty() {
        println!("no stored trial of {probe} has the metric {metric}");
        return Ok(ExitCode::SUCCESS);
    }
    // model → lines
    let mut series: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut name = String::new();
    for id in runs {
        let stored = store.load_stored_run(id)?;
        let run = &stored.record;
        match normalized_points(run, probe, metric, cpu_model, control) {
            Err(e) => skipped.push(e.to_string()),
            Ok(found) => {
                for p in found {
                    name.clone_from(&p.metric);
                    series.entry(p.cpu_model.clone()).or_default().push(format!(
                        "  {:<24}  {:<8}  {:>5}  {:>14.6}  {:>10}",
                        json::rfc3339(run.started_at),
                        super::short_id(&run.run_id),
                        p.hosts,
                        p.median,
                        p.between_host_sd
                            .map_or("-".to_string(), |s| format!("{:.2}%", s * 100.0))
                    ));
                }
            }
        }
    }
    // One series per CPU model: a fleet that drew another model is not a code change.
    for (i, (model, lines)) in series.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{model}: {probe} {name}, each host normalized by \"{control}\"");
        println!(
            "  {:<24}  {:<8}  {:>5}  {:>14}  {:>10}",
            "started", "run", "hosts", "median", "host SD"
        );
        for line in lines {
            println!("{line}");
        }
    }
    for s in skipped {
        println!("left out: {s}");
    }
    Ok(ExitCode::SUCCESS)
}
