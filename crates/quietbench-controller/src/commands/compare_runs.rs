//! `quietbench compare --runs X Y`: two stored runs, compared variant by variant without
//! pairing. The runs were measured at different times, so nothing cancels what changed between
//! them; the verdict says so, and its interval (Welch's, [`quietbench_stats::unpaired_ratio`])
//! covers only the scatter within each run. With `--normalize-by CONTROL`, each host's figures
//! are first divided by its control's (see [`crate::verdicts::normalize`]), which takes most of
//! what differs between instances and days out of that scatter.
//!
//! CPU models are stratified, never pooled: each model both runs drew is compared on its own,
//! and a model only one run drew is named as not comparable. A fleet that drew another model is
//! not a code change.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use quietbench_stats::{Direction, advantage, pct};
use serde::Serialize;

use super::compare::{EXIT_SLOWER, RatioJson};
use crate::record::RunRecord;
use crate::record::figures::{TrialFigure, direction_of_unit, trial_values};
use crate::verdicts::normalize::normalized_values;

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
    /// `--normalize-by CONTROL`: the control variant each host's figures are divided by.
    pub normalize_by: Option<String>,
    /// `--target-mde PCT` as a fraction: the difference the host count is planned for.
    pub target_mde: f64,
}

/// One variant's values in one run, by host.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    metric: String,
    unit: String,
    /// host name (its address where it has none) → (CPU model, values of counted trials).
    hosts: BTreeMap<String, (String, Vec<f64>)>,
}

/// Every variant of a run as a series of one metric (see [`trial_values`]), normalized by a
/// control variant when one is named (the control itself is then not a series).
fn series(
    run: &RunRecord,
    metric: Option<&str>,
    figure: TrialFigure,
    normalize_by: Option<&str>,
) -> anyhow::Result<BTreeMap<String, Series>> {
    let values = match normalize_by {
        Some(control) => normalized_values(run, metric, figure, control)?,
        None => trial_values(run, metric, figure),
    };
    let mut out: BTreeMap<String, Series> = BTreeMap::new();
    for v in values {
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
    Ok(out)
}

/// The series' hosts of one CPU model.
fn of_model(s: &Series, model: &str) -> Series {
    Series {
        metric: s.metric.clone(),
        unit: s.unit.clone(),
        hosts: s
            .hosts
            .iter()
            .filter(|(_, (m, _))| m == model)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// The CPU models of a series, sorted.
fn models_of(s: &Series) -> Vec<String> {
    let mut m: Vec<String> = s.hosts.values().map(|(m, _)| m.clone()).collect();
    m.sort();
    m.dedup();
    m
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
    /// The CPU model compared (each model both runs drew is compared on its own).
    pub cpu_model: String,
    /// The control variant the figures were normalized by, if any.
    pub normalized_by: Option<String>,
    /// "trials" (one host per run) or "hosts".
    pub units: &'static str,
    /// With host units: the standard deviation of a host's log figure around its run's mean
    /// (≈ the relative between-host scatter) the interval used.
    pub between_host_sd: Option<f64>,
    /// With host units: hosts each run needs for `target_mde` at that scatter (null when a
    /// million do not suffice).
    pub hosts_needed: Option<u32>,
    /// The difference `hosts_needed` is planned for (0.02 = 2%).
    pub target_mde: f64,
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
    normalized_by: Option<&'a str>,
    comparisons: &'a [RunComparison],
    /// CPU models only one run drew, which nothing could be compared with.
    not_compared: &'a [String],
}

/// How two runs are compared: what `compare --runs` was asked, less the store.
#[derive(Debug, Clone, Copy)]
struct Basis<'a> {
    metric: Option<&'a str>,
    figure: TrialFigure,
    normalize_by: Option<&'a str>,
    target_mde: f64,
}

/// The comparisons of two runs, and the CPU models only one of them drew.
#[derive(Debug)]
struct Compared {
    comparisons: Vec<RunComparison>,
    not_compared: Vec<String>,
}

/// Compares the common variants of two runs, each CPU model both drew on its own. Pure: the
/// store is read by the caller.
fn compare_records(a: &RunRecord, b: &RunRecord, basis: Basis<'_>) -> anyhow::Result<Compared> {
    let sa = series(a, basis.metric, basis.figure, basis.normalize_by)?;
    let sb = series(b, basis.metric, basis.figure, basis.normalize_by)?;
    let common: Vec<&String> = sa.keys().filter(|k| sb.contains_key(*k)).collect();
    if common.is_empty() {
        anyhow::bail!(
            "the runs share no variant with {}: run {} has [{}], run {} has [{}]",
            basis
                .metric
                .map_or("a value".to_string(), |m| format!("the metric {m}")),
            super::short_id(&a.run_id),
            sa.keys().cloned().collect::<Vec<_>>().join(", "),
            super::short_id(&b.run_id),
            sb.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut out = Compared {
        comparisons: Vec::new(),
        not_compared: Vec::new(),
    };
    for variant in common {
        let (x, y) = (&sa[variant], &sb[variant]);
        let (mx, my) = (models_of(x), models_of(y));
        let shared: Vec<&String> = mx.iter().filter(|m| my.contains(m)).collect();
        for m in mx.iter().filter(|m| !my.contains(m)) {
            out.not_compared.push(format!(
                "{variant}: only run {} drew {m}",
                super::short_id(&a.run_id)
            ));
        }
        for m in my.iter().filter(|m| !mx.contains(m)) {
            out.not_compared.push(format!(
                "{variant}: only run {} drew {m}",
                super::short_id(&b.run_id)
            ));
        }
        if shared.is_empty() {
            continue;
        }
        let several = mx.len() > 1 || my.len() > 1 || mx != my;
        for model in shared {
            let label = several.then_some(model.as_str());
            out.comparisons.push(compare_one(
                (a, b),
                variant,
                (&of_model(x, model), &of_model(y, model)),
                (model, label),
                basis,
            )?);
        }
    }
    out.not_compared.sort();
    out.not_compared.dedup();
    if out.comparisons.is_empty() {
        anyhow::bail!(
            "no comparison is possible: the runs drew no CPU model in common ({}). CPU models \
             are never pooled: a fleet that drew another model is not a code change; run again \
             on the model of the baseline (`--cpu-model`, or re-roll the instances)",
            out.not_compared.join("; ")
        );
    }
    Ok(out)
}

/// One variant on one CPU model. `label` is the model when the sentence must name it.
fn compare_one(
    (a, b): (&RunRecord, &RunRecord),
    variant: &str,
    (x, y): (&Series, &Series),
    (model, label): (&str, Option<&str>),
    basis: Basis<'_>,
) -> anyhow::Result<RunComparison> {
    let level = quietbench_stats::ConfidenceLevel::NINETY_FIVE;
    if x.metric != y.metric || x.unit != y.unit {
        anyhow::bail!(
            "{variant}: run {} reports {} ({}) and run {} reports {} ({}); name one with --metric",
            super::short_id(&a.run_id),
            x.metric,
            x.unit,
            super::short_id(&b.run_id),
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
    .map_err(|e| anyhow::anyhow!("{variant} {} on {model}: {e}", x.metric))?;
    let (between_host_sd, hosts_needed) = if per_host {
        let needed = quietbench_stats::units_needed(
            r.unit_sd_log,
            basis.target_mde,
            level,
            quietbench_stats::DEFAULT_POWER,
        )?;
        (Some(r.unit_sd_log), needed)
    } else {
        (None, None)
    };
    let significant = r.ci_low > 1.0 || r.ci_high < 1.0;
    // For the second run, "better" is a higher rate or a lower time.
    let second_better = match direction {
        Direction::HigherIsBetter => r.ci_low > 1.0,
        Direction::LowerIsBetter => r.ci_high < 1.0,
    };
    let (first, second) = (super::short_id(&a.run_id), super::short_id(&b.run_id));
    let what = match label {
        Some(model) => format!("{variant} {} on {model}", x.metric),
        None => format!("{variant} {}", x.metric),
    };
    let counts = format!("{} vs {} {unit}", r.baseline_units, r.candidate_units);
    let planning = match (between_host_sd, hosts_needed) {
        (Some(sd), Some(n)) => format!(
            "; between-host SD {} (log scale), so each run needs {n} hosts for a {} difference",
            pct(sd),
            pct(basis.target_mde)
        ),
        (Some(sd), None) => format!(
            "; between-host SD {} (log scale): no fleet size reaches a {} difference",
            pct(sd),
            pct(basis.target_mde)
        ),
        _ => String::new(),
    };
    let (verdict, sentence, worse_by) = if !significant {
        (
            "no_difference",
            format!(
                "{what}: no difference detected between run {first} and run {second} (could \
                 have detected ≥ {}); {second}/{first} = {:.4}, 95% CI [{:.4}, {:.4}], \
                 {counts}{planning}",
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
                 smallest detectable difference at this scatter {}{planning}",
                pct(gain),
                pct(lo),
                pct(hi),
                pct(r.mde)
            ),
            (!second_better).then_some(worse),
        )
    };
    let mut warnings = vec![match basis.normalize_by {
        None => "the runs were not interleaved: the interval covers the scatter within each \
                 run, not what changed between them (day, instance, neighbours); for a \
                 decision, run both sides in one `compare`, or measure a control beside the \
                 workload (`run --control`) and compare with --normalize-by"
            .to_string(),
        Some(control) => format!(
            "each host's figures are divided by its \"{control}\" figures of the same rounds: \
             what a host or a day does to both alike cancels; what it does to one only (a \
             neighbour thrashing a cache only the workload uses) does not"
        ),
    }];
    let hosts_of = |s: &Series| s.hosts.keys().cloned().collect::<Vec<_>>();
    if hosts_of(x) != hosts_of(y) && basis.normalize_by.is_none() {
        warnings.push(format!(
            "the runs used different hosts ({} vs {}): host differences are part of the ratio",
            hosts_of(x).join(", "),
            hosts_of(y).join(", ")
        ));
    }
    Ok(RunComparison {
        variant: variant.to_string(),
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
        cpu_model: model.to_string(),
        normalized_by: basis.normalize_by.map(str::to_string),
        units: unit,
        between_host_sd,
        hosts_needed,
        target_mde: basis.target_mde,
        units_a: r.baseline_units,
        units_b: r.candidate_units,
        sentence,
        warnings,
        worse_by,
    })
}

/// `quietbench compare --runs X Y`. Exit code: 0, 1 (error), 3 (`--fail-if-slower` tripped).
pub fn run_compare_runs(req: RunsRequest) -> anyhow::Result<ExitCode> {
    let store = super::stored::open(req.db.as_deref())?;
    let a = store.load_stored_run(&req.baseline)?.record;
    let b = store.load_stored_run(&req.candidate)?.record;
    let compared = compare_records(
        &a,
        &b,
        Basis {
            metric: req.metric.as_deref(),
            figure: req.figure,
            normalize_by: req.normalize_by.as_deref(),
            target_mde: req.target_mde,
        },
    )?;
    let comparisons = &compared.comparisons;
    for c in comparisons {
        println!("{}", c.sentence);
        for w in &c.warnings {
            println!("  warning: {w}");
        }
    }
    for n in &compared.not_compared {
        println!("not compared: {n} (CPU models are never pooled)");
    }
    if let Some(path) = &req.json {
        let body = RunsJson {
            schema: "quietbench.compare-runs.v1",
            run_a: &a.run_id,
            run_b: &b.run_id,
            figure: req.figure.as_str(),
            normalized_by: req.normalize_by.as_deref(),
            comparisons,
            not_compared: &compared.not_compared,
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
                    super::short_id(&b.run_id),
                    super::short_id(&a.run_id),
                    c.estimate.ratio
                );
            }
            return Ok(ExitCode::from(EXIT_SLOWER));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_records::{empty_run, host, value_trial};

    /// A run of `work` and `control` on hosts of these models, `rounds` rounds; host h's speed
    /// is `speed(h)`, the workload's rate `work` times its control's.
    fn run(models: &[&str], speed: impl Fn(usize) -> f64, work: f64) -> RunRecord {
        let mut run = empty_run("cpu.primes", &["work", "control"], 3, None);
        run.run_id = format!("run-{work}");
        for (h, model) in models.iter().enumerate() {
            run.hosts.push(host(h, model));
            for round in 0..3 {
                for (variant, rate) in [("work", 100.0 * work), ("control", 100.0)] {
                    run.trials.push(value_trial(
                        ("cpu.primes", variant),
                        h,
                        round,
                        ("events_per_sec", "events/s", rate * speed(h)),
                    ));
                }
            }
        }
        run
    }

    fn basis(normalize_by: Option<&str>) -> Basis<'_> {
        Basis {
            metric: None,
            figure: TrialFigure::Median,
            normalize_by,
            target_mde: 0.02,
        }
    }

    #[test]
    fn models_are_compared_each_on_its_own_and_one_only_one_run_drew_is_named() {
        let a = run(
            &["x", "y", "x", "y", "x", "y"],
            |h| 1.0 + 0.01 * h as f64,
            1.0,
        );
        let b = run(
            &["x", "z", "x", "z", "x", "z"],
            |h| 1.0 + 0.01 * h as f64,
            1.02,
        );
        let c = compare_records(&a, &b, basis(Some("control"))).unwrap();
        // Only "x" is in both; the workload on it, 2% faster once normalized.
        assert_eq!(c.comparisons.len(), 1, "{:#?}", c.comparisons);
        let x = &c.comparisons[0];
        assert_eq!((x.variant.as_str(), x.cpu_model.as_str()), ("work", "x"));
        assert!((x.estimate.ratio - 1.02).abs() < 1e-9, "{x:#?}");
        assert!(x.sentence.contains(" on x:"), "{}", x.sentence);
        assert_eq!(
            c.not_compared,
            [
                "work: only run run-1 drew y",
                "work: only run run-1.02 drew z"
            ]
        );

        let none = run(&["z", "z", "z"], |_| 1.0, 1.0);
        let err = compare_records(&a, &none, basis(None)).unwrap_err();
        assert!(
            err.to_string().contains("no comparison is possible"),
            "{err}"
        );
    }

    #[test]
    fn the_verdict_states_the_between_host_scatter_and_the_fleet_it_would_need() {
        // Hosts ±5% apart, the same on both days: unnormalized, the scatter hides 2%.
        let speed = |h: usize| 0.95 + 0.02 * h as f64;
        let models = ["x"; 6];
        let (a, b) = (run(&models, speed, 1.0), run(&models, speed, 1.02));
        let raw = compare_records(&a, &b, basis(None)).unwrap();
        let work = raw
            .comparisons
            .iter()
            .find(|c| c.variant == "work")
            .unwrap();
        assert_eq!(work.estimate.verdict, "no_difference", "{work:#?}");
        let sd = work.between_host_sd.unwrap();
        assert!(sd > 0.03 && sd < 0.05, "{sd}");
        let needed = work.hosts_needed.unwrap();
        assert!(needed > 6, "{needed}");
        assert!(
            work.sentence
                .contains(&format!("each run needs {needed} hosts"))
        );
        // Normalized, the hosts' speeds cancel exactly.
        let norm = compare_records(&a, &b, basis(Some("control"))).unwrap();
        let work = &norm.comparisons[0];
        assert_eq!(work.estimate.verdict, "b_faster", "{work:#?}");
        assert!(work.between_host_sd.unwrap() < 1e-9);
        assert_eq!(work.normalized_by.as_deref(), Some("control"));
    }
}
