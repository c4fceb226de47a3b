//! `quietbench history --change-points`: where a metric's level moved across stored runs, per
//! CPU model and variant ([`crate::verdicts::changes`]), as text, JSON or an HTML chart, and
//! `--fail-on-change` for CI.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use quietbench_stats::ChangePointConfig;

use crate::report::html::value_label;
use crate::report::json;
use crate::verdicts::changes::{
    HistoryChanges, RunChange, SeriesChanges, p_label, runs_to_detect_text,
};

/// Exit code when `--fail-on-change` finds a regression the newest run brought to light: the
/// same as `compare --fail-if-slower`'s, so CI scripts treat both alike.
pub const EXIT_REGRESSION: u8 = super::compare::EXIT_SLOWER;

/// What `history --change-points` was asked for.
pub struct ChangePointRequest<'a> {
    /// The result store.
    pub db: Option<&'a Path>,
    /// The probe.
    pub probe: &'a str,
    /// The metric.
    pub metric: &'a str,
    /// Only CPU models containing this.
    pub cpu_model: Option<&'a str>,
    /// How many of the most recent runs.
    pub limit: usize,
    /// Search each run's figure normalized by this control variant's, per CPU model.
    pub normalize_by: Option<&'a str>,
    /// The detector's settings.
    pub config: ChangePointConfig,
    /// Print JSON instead of text.
    pub json: bool,
    /// Also write an HTML page with the chart here.
    pub html: Option<&'a Path>,
    /// Exit with [`EXIT_REGRESSION`] when the newest run brings a regression to light.
    pub fail_on_change: bool,
}

/// Runs `history --change-points`.
pub fn history_change_points(req: &ChangePointRequest<'_>) -> anyhow::Result<ExitCode> {
    let store = super::stored::open(req.db)?;
    let (points, skipped) = match req.normalize_by {
        None => (
            store.history(req.probe, req.metric, req.cpu_model, req.limit)?,
            Vec::new(),
        ),
        Some(control) => super::history_normalized::normalized_history(
            &store,
            req.probe,
            req.metric,
            req.cpu_model,
            req.limit,
            control,
        )?,
    };
    for s in &skipped {
        eprintln!("quietbench: left out: {s}");
    }
    let found = HistoryChanges::detect(req.probe, req.metric, req.cpu_model, &points, &req.config)
        .context("cannot search the history for change points")?;
    if req.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else if points.is_empty() && !skipped.is_empty() {
        println!(
            "no stored run of {} could be normalized by \"{}\"",
            req.probe,
            req.normalize_by.unwrap_or_default()
        );
    } else if points.is_empty() {
        println!(
            "no stored trial of {} has the metric {}{}",
            req.probe,
            req.metric,
            req.cpu_model
                .map(|m| format!(" on a CPU matching '{m}'"))
                .unwrap_or_default()
        );
    } else {
        print_text(&found);
    }
    if let Some(path) = req.html {
        std::fs::write(path, crate::report::html::render_history_html(&found))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("quietbench: HTML history written to {}", path.display());
    }
    if req.fail_on_change && found.new_regressions().next().is_some() {
        for (s, r) in found.new_regressions() {
            eprintln!(
                "quietbench: the newest run brings a regression to light on {} ({}): {}",
                s.cpu_model,
                s.variant,
                change_text(r, &s.unit)
            );
        }
        return Ok(ExitCode::from(EXIT_REGRESSION));
    }
    Ok(ExitCode::SUCCESS)
}

/// "regression −3.0% (1000 events/s → 970 events/s), p = 0.005".
fn change_text(c: &RunChange, unit: &str) -> String {
    format!(
        "{} {} ({} → {}) at run {}, p = {}",
        c.kind.name(),
        c.percent(),
        value_label(c.point.before_median, unit),
        value_label(c.point.after_median, unit),
        super::short_id(&c.run_id),
        p_label(c.point.p_value)
    )
}

fn print_text(found: &HistoryChanges) {
    let m = &found.method;
    for (i, s) in found.series.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_series(found, s);
    }
    let total: usize = found.series.iter().map(|s| s.change_points.len()).sum();
    println!();
    println!(
        "{total} change point{} ({}, permutation test: p ≤ {} over {} shuffles, segments of at \
         least {} runs)",
        if total == 1 { "" } else { "s" },
        m.name,
        m.significance,
        m.permutations,
        m.min_segment
    );
    let mut news = found.new_regressions().peekable();
    if news.peek().is_none() {
        println!("the newest run brings no regression to light");
    }
    for (s, r) in news {
        println!(
            "the newest run brings a regression to light on {} ({}): {}",
            s.cpu_model,
            s.variant,
            change_text(r, &s.unit)
        );
    }
}

fn print_series(found: &HistoryChanges, s: &SeriesChanges) {
    println!(
        "{} ({}): {} {}, {} runs, {} change point{}",
        s.cpu_model,
        s.variant,
        found.probe,
        found.metric,
        s.points.len(),
        s.change_points.len(),
        if s.change_points.len() == 1 { "" } else { "s" }
    );
    println!(
        "  {:<24}  {:<8}  {:>6}  {:>16}  change",
        "started", "run", "trials", s.unit
    );
    for p in &s.points {
        let change = s
            .change_points
            .iter()
            .find(|c| c.run_id == p.run_id)
            .map(|c| format!("◆ {}", change_text(c, &s.unit)))
            .unwrap_or_default();
        println!(
            "  {:<24}  {:<8}  {:>6}  {:>16.3}  {change}",
            json::rfc3339(p.started_at),
            super::short_id(&p.run_id),
            p.trials,
            p.value,
        );
    }
    let reach = runs_to_detect_text(&s.runs_to_detect, "run");
    if !reach.is_empty() {
        println!("  {reach}");
    }
}
