//! `capacity --json`: the result's schema (quietbench.capacity.v1, docs/capacity.md "JSON"),
//! and the steps' table the terminal prints.

use serde::Serialize;

use super::StepRow;
use crate::verdicts::capacity::{StepFigures, duration_text, thousands};

/// The result in JSON (docs/json-report.md, "capacity").
#[derive(Debug, Serialize)]
pub struct CapacityJson {
    /// Always "quietbench.capacity.v1".
    pub schema: &'static str,
    /// The SLO, as given (e.g. "p99 < 20 ms").
    pub slo: String,
    /// The largest fraction of failed requests a step may have.
    pub max_errors: f64,
    /// The search's resolution (0.05: 5%).
    pub resolution: f64,
    /// Each build's capacity.
    pub builds: Vec<BuildJson>,
    /// B against A (null with one build).
    pub comparison: Option<ComparisonJson>,
    /// B against A at a fixed share of A's capacity (null with one build, or without
    /// --load-at, or when A held no rate).
    pub at_load: Option<AtLoadJson>,
    /// The run's id in the result store (empty with --no-store).
    pub run_id: String,
}

/// One build in `builds`.
#[derive(Debug, Serialize)]
pub struct BuildJson {
    /// "A" or "B".
    pub build: String,
    /// Its server command.
    pub command: String,
    /// The highest rate that held, searched and confirmed (null: none did).
    pub capacity: Option<u64>,
    /// The lowest rate that did not (null: every rate up to --max held).
    pub failed_at: Option<u64>,
    /// Why it did not.
    pub why_failed: Option<String>,
    /// The bracket closed (or a bound was reached) before the steps ran out.
    pub settled: bool,
    /// The sentence the terminal prints.
    pub sentence: String,
    /// The lowest rate whose p99 was at least twice its p50, or went unanswered (null: none).
    pub knee: Option<f64>,
    /// Its latency–throughput curve: every step, in rate order.
    pub steps: Vec<StepJson>,
}

/// One step in `steps`.
#[derive(Debug, Serialize)]
pub struct StepJson {
    /// Offered, requests/s.
    pub rate: u64,
    /// The confirming step.
    pub confirm: bool,
    /// Its figures over its trials.
    #[serde(flatten)]
    pub figures: StepFigures,
    /// Whether the step held.
    pub passed: bool,
    /// Why not.
    pub why: Option<String>,
}

/// `comparison`.
#[derive(Debug, Serialize)]
pub struct ComparisonJson {
    /// "b_lower", "b_higher" or "not_apart".
    pub call: &'static str,
    /// The sentence the terminal prints.
    pub sentence: String,
}

/// `at_load`: latency at one fixed rate, judged as `compare --probe http` judges it.
#[derive(Debug, Serialize)]
pub struct AtLoadJson {
    /// The rate both were offered, requests/s.
    pub rate: u64,
    /// Its share of A's capacity, percent.
    pub percent_of_capacity: f64,
    /// The verdict on the p50 latency (null: none could be made, `sentence` says why).
    pub p50: Option<crate::commands::compare::RatioJson>,
    /// The verdict on the p99 latency.
    pub p99: Option<crate::commands::compare::RatioJson>,
    /// The sentence the terminal prints.
    pub sentence: String,
}

pub(super) fn step_json(row: &StepRow) -> StepJson {
    StepJson {
        rate: row.rate,
        confirm: row.confirm,
        figures: row.figures.clone(),
        passed: row.outcome.is_ok(),
        why: row.outcome.clone().err(),
    }
}

/// A build's curve as a table, in rate order.
pub fn curve_lines(build: &str, rows: &[StepRow], slo_label: &str) -> Vec<String> {
    let mut mine: Vec<&StepRow> = rows.iter().filter(|r| r.build == build).collect();
    mine.sort_by_key(|r| (r.rate, r.confirm));
    let ns = |v: Option<f64>| v.map_or("-".to_string(), duration_text);
    let mut lines = vec![format!(
        "  {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}  held",
        "offered/s",
        "achieved/s",
        "p50",
        "p99",
        "p99.9",
        format!("worst {slo_label}"),
        "errors"
    )];
    for r in mine {
        let f = &r.figures;
        lines.push(format!(
            "  {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}  {}",
            format!("{}{}", thousands(r.rate), if r.confirm { "*" } else { "" }),
            f.achieved
                .map_or("-".into(), |a| thousands(a.round() as u64)),
            ns(f.p50_ns),
            ns(f.p99_ns),
            ns(f.p999_ns),
            ns(f.slo_ns),
            f.errors,
            match &r.outcome {
                Ok(()) => format!("yes ({}/{})", f.held, f.trials),
                Err(why) => format!("no: {why}"),
            }
        ));
    }
    lines
}
