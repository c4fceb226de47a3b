//! `quietbench compare --runs X Y`: two stored runs, compared variant by variant without
//! pairing. The runs were measured at different times, so nothing cancels what changed between
//! them; the verdict says so, and its interval (Welch's, [`quietbench_stats::unpaired_ratio`])
//! covers only the scatter within each run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use quietbench_stats::{Direction, advantage, pct};
use serde::Serialize;

use super::compare::{EXIT_SLOWER, RatioJson};
use crate::record::RunRecord;
use crate::record::figures::{TrialFigure, direction_of_unit, trial_values};

/// What `compare --runs` was asked.
#[derive(Debug, Clone)]
pub struct RunsRequest {
    /// The baseline run's id (or a unique prefix).
    pub baseline: String,
    /// The candidate run's id (or a unique prefix).
    pub candidate: String,
    /// The metric to compare (default: each variant's headline metric).
    pub metric: Option<String>,
    /// The figure of exec trials.
    pub figure: TrialFigure,
    /// The result store.
    pub db: Option<PathBuf>,
    /// The verdicts' JSON file.
    pub json: Option<PathBuf>,
    /// `--fail-if-slower PCT`: exit 3 when the candidate run is significantly worse.
    pub fail_if_slower: Option<f64>,
}

/// One variant's values in one run, by host.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    metric: String,
    unit: String,
    /// host name (its address where it has none) → (CPU model, values of counted trials).
    hosts: BTreeMap<String, (String, Vec<f64>)>,
}

/// Every variant of a run as a series of one metric (see [`trial_values`]).
fn series(run: &RunRecord, metric: Option<&str>, figure: TrialFigure) -> BTreeMap<String, Series> {
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for v in trial_values(run, metric, figure) {
        let s = out.entry(v.variant).or_insert_with(|| Series {
            metric: v.metric,
            unit: v.unit,
            hosts: BTreeMap::new(),
        });
        s.hosts
            .entry(v.machine)
            .or_insert_with(|| (v.cpu_model, Vec::new()))
            .1
            .push(v.value);
    }
    out
}

/// The independent units of a series: its trials when both runs have one host, else one
/// geometric mean per host.
fn units(s: &Series, per_host: bool) -> Vec<f64> {
    if per_host {
        s.hosts
            .values()
            .filter(|(_, v)| !v.is_empty())
            .map(|(_, v)| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
            .collect()
    } else {
        s.hosts
            .values()
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }
}

/// One variant's comparison, as printed and written to JSON.
#[derive(Debug, Clone, Serialize)]
pub struct RunComparison {
    /// The variant (probe name in `run`, A or B in `compare`).
    pub variant: String,
    /// The metric compared.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// The outcome: second run / first run (ratio of geometric means), its interval and
    /// smallest detectable difference.
    #[serde(flatten)]
    pub estimate: RatioJson,
    /// "trials" (one host per run) or "hosts".
    pub units: &'static str,
    /// Units in the first run.
    pub units_a: usize,
    /// Units in the second run.
    pub units_b: usize,
    /// The sentence printed.
    pub sentence: String,
    /// What to know before trusting it.
    pub warnings: Vec<String>,
    /// The candidate is worse by this fraction of the baseline, when significantly worse.
    #[serde(skip)]
    worse_by: Option<f64>,
}

/// The `--json` file of `compare --runs`.
#[derive(Debug, Serialize)]
struct RunsJson<'a> {
    schema: &'static str,
    run_a: &'a str,
    run_b: &'a str,
    figure: &'static str,
    comparisons: &'a [RunComparison],
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// Compares the common variants of two runs. Pure: the store is read by the caller.
fn compare_records(
    a: &RunRecord,
    b: &RunRecord,
    metric: Option<&str>,
    figure: TrialFigure,
) -> anyhow::Result<Vec<RunComparison>> {
    let (sa, sb) = (series(a, metric, figure), series(b, metric, figure));
    let common: Vec<&String> = sa.keys().filter(|k| sb.contains_key(*k)).collect();
    if common.is_empty() {
        anyhow::bail!(
            "the runs share no variant with {}: run {} has [{}], run {} has [{}]",
            metric.map_or("a value".to_string(), |m| format!("the metric {m}")),
            short(&a.run_id),
            sa.keys().cloned().collect::<Vec<_>>().join(", "),
            short(&b.run_id),
            sb.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let level = quietbench_stats::ConfidenceLevel::NINETY_FIVE;
    let mut out = Vec::new();
    for variant in common {
        let (x, y) = (&sa[variant], &sb[variant]);
        if x.metric != y.metric || x.unit != y.unit {
            anyhow::bail!(
                "{variant}: run {} reports {} ({}) and run {} reports {} ({}); name one with --metric",
                short(&a.run_id),
                x.metric,
                x.unit,
                short(&b.run_id),
                y.metric,
                y.unit
            );
        }
        let Some(direction) = direction_of_unit(&x.unit) else {
            anyhow::bail!(
                "{variant}: cannot tell whether more or less {} ({}) is better; choose a rate or a \
                 time with --metric",
                x.metric,
                x.unit
            );
        };
        let per_host = x.hosts.len() > 1 || y.hosts.len() > 1;
        let unit = if per_host { "hosts" } else { "trials" };
        let r = quietbench_stats::unpaired_ratio(
            &units(x, per_host),
            &units(y, per_host),
            unit,
            level,
            quietbench_stats::DEFAULT_POWER,
        )
        .map_err(|e| anyhow::anyhow!("{variant} {}: {e}", x.metric))?;
        let significant = r.ci_low > 1.0 || r.ci_high < 1.0;
        // For the second run, "better" is a higher rate or a lower time.
        let second_better = match direction {
            Direction::HigherIsBetter => r.ci_low > 1.0,
            Direction::LowerIsBetter => r.ci_high < 1.0,
        };
        let (first, second) = (short(&a.run_id), short(&b.run_id));
        let what = format!("{variant} {}", x.metric);
        let counts = format!("{} vs {} {unit}", r.baseline_units, r.candidate_units);
        let (verdict, sentence, worse_by) = if !significant {
            (
                "no_difference",
                format!(
                    "{what}: no difference detected between run {first} and run {second} (could \
                     have detected ≥ {}); {second}/{first} = {:.4}, 95% CI [{:.4}, {:.4}], {counts}",
                    pct(r.mde),
                    r.ratio,
                    r.ci_low,
                    r.ci_high
                ),
                None,
            )
        } else {
            let (gain, lo, hi) = advantage(direction, !second_better, r.ratio, r.ci_low, r.ci_high);
            let (winner, loser) = if second_better {
                (second, first)
            } else {
                (first, second)
            };
            // How much worse the second run is, as a share of the first's figure.
            let worse = match direction {
                Direction::HigherIsBetter => 1.0 - r.ratio,
                Direction::LowerIsBetter => r.ratio - 1.0,
            };
            (
                if second_better {
                    "b_faster"
                } else {
                    "a_faster"
                },
                format!(
                    "{what}: run {winner} is {} faster than run {loser}, 95% CI [{}, {}], {counts}; \
                     smallest detectable difference at this scatter {}",
                    pct(gain),
                    pct(lo),
                    pct(hi),
                    pct(r.mde)
                ),
                (!second_better).then_some(worse),
            )
        };
        let mut warnings = vec![
            "the runs were not interleaved: the interval covers the scatter within each run, not \
             what changed between them (day, instance, neighbours); for a decision, run both \
             sides in one `compare`"
                .to_string(),
        ];
        let hosts_of = |s: &Series| s.hosts.keys().cloned().collect::<Vec<_>>();
        if hosts_of(x) != hosts_of(y) {
            warnings.push(format!(
                "the runs used different hosts ({} vs {}): host differences are part of the ratio",
                hosts_of(x).join(", "),
                hosts_of(y).join(", ")
            ));
        }
        let models_of = |s: &Series| {
            let mut m: Vec<String> = s.hosts.values().map(|(m, _)| m.clone()).collect();
            m.sort();
            m.dedup();
            m
        };
        if models_of(x) != models_of(y) {
            warnings.push(format!(
                "the runs ran on different CPU models ([{}] vs [{}]): the CPU lottery alone can \
                 move a figure by several percent",
                models_of(x).join(", "),
                models_of(y).join(", ")
            ));
        }
        out.push(RunComparison {
            variant: variant.clone(),
            metric: x.metric.clone(),
            unit: x.unit.clone(),
            estimate: RatioJson {
                verdict,
                ratio: r.ratio,
                ci_low: r.ci_low,
                ci_high: r.ci_high,
                level: level.get(),
                mde: r.mde,
            },
            units: unit,
            units_a: r.baseline_units,
            units_b: r.candidate_units,
            sentence,
            warnings,
            worse_by,
        });
    }
    Ok(out)
}

/// `quietbench compare --runs X Y`. Exit code: 0, 1 (error), 3 (`--fail-if-slower` tripped).
pub fn run_compare_runs(req: RunsRequest) -> anyhow::Result<ExitCode> {
    let store = super::stored::open(req.db.as_deref())?;
    let a = store.load_stored_run(&req.baseline)?.record;
    let b = store.load_stored_run(&req.candidate)?.record;
    let comparisons = compare_records(&a, &b, req.metric.as_deref(), req.figure)?;
    for c in &comparisons {
        println!("{}", c.sentence);
        for w in &c.warnings {
            println!("  warning: {w}");
        }
    }
    if let Some(path) = &req.json {
        let body = RunsJson {
            schema: "quietbench.compare-runs.v1",
            run_a: &a.run_id,
            run_b: &b.run_id,
            figure: req.figure.as_str(),
            comparisons: &comparisons,
        };
        std::fs::write(path, serde_json::to_string_pretty(&body)? + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        eprintln!("quietbench: verdicts written to {}", path.display());
    }
    if let Some(limit) = req.fail_if_slower {
        let failing: Vec<&RunComparison> = comparisons
            .iter()
            .filter(|c| c.worse_by.is_some_and(|w| w * 100.0 > limit))
            .collect();
        if !failing.is_empty() {
            for c in failing {
                eprintln!(
                    "quietbench: {} {}: run {} is worse than run {} by more than {limit}% \
                     (ratio {:.4}): failing",
                    c.variant,
                    c.metric,
                    short(&b.run_id),
                    short(&a.run_id),
                    c.estimate.ratio
                );
            }
            return Ok(ExitCode::from(EXIT_SLOWER));
        }
    }
    Ok(ExitCode::SUCCESS)
}
