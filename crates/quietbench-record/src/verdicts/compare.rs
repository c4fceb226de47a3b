//! The verdict of a `compare` run, judged from its record alone: what `compare` prints at the end
//! of a run, and what the HTML report of the same run, live or stored, leads with.

use quietbench_stats::Verdict;

use crate::record::RunRecord;
use crate::record::figures::{self, Interleave, PAIRED_VARIANT, TrialFigure};

/// How a run's trials were figured for `compare`'s verdict, or `None` for a run that is not a
/// `compare` run. Runs stored before the settings carried the figure are recognized by their
/// one paired variant ([`PAIRED_VARIANT`], which only `compare` makes) and were judged on the
/// default figure, the median.
pub fn compare_figure(run: &RunRecord) -> Option<TrialFigure> {
    let s = &run.settings;
    s.compare_figure.or_else(|| {
        let paired =
            matches!(s.variants.as_slice(), [v] if v.name == PAIRED_VARIANT && v.probe == "exec");
        paired.then_some(TrialFigure::Median)
    })
}

/// The figure a run's exec trials are judged and spread on: a compare run's own, else the
/// run's `--figure` (a plan's `figure`), else the median wall time.
pub fn exec_figure(run: &RunRecord) -> TrialFigure {
    compare_figure(run)
        .or(run.settings.exec_figure)
        .unwrap_or_default()
}

/// How a compare run's A and B took turns: in pairs within every trial when its one variant is
/// [`PAIRED_VARIANT`] (at the same time when its parameters say `duet=true`), else in separate
/// trials.
pub fn interleave_of(run: &RunRecord) -> Interleave {
    match run
        .settings
        .variants
        .iter()
        .find(|v| v.name == PAIRED_VARIANT)
    {
        Some(v) if v.params.get("duet").is_some_and(|d| d == "true") => Interleave::Duet,
        Some(_) => Interleave::Invocations,
        None => Interleave::Trials,
    }
}

/// The same run judged on another figure, beside the one the verdict used.
#[derive(Debug, Clone)]
pub struct OtherFigure {
    /// The figure.
    pub figure: TrialFigure,
    /// Its verdict.
    pub verdict: Verdict,
    /// Each figure's B/A lies outside the other's interval (see [`disagree`]).
    pub disagrees: bool,
}

/// The figures a verdict is checked against: the CPU time beside a wall time (and the wall
/// time beside the CPU time) and both beside instructions; for a server, the other latency
/// percentile and the server's CPU time per request. A figure the run did not record
/// (instructions, where no counter was asked for) is left out.
pub fn other_figures(run: &RunRecord, used: TrialFigure, verdict: &Verdict) -> Vec<OtherFigure> {
    use TrialFigure::{LatencyP50, LatencyP99, ServerCpu};
    let others: &[TrialFigure] = match used {
        TrialFigure::Median | TrialFigure::Mean => &[TrialFigure::Cpu],
        TrialFigure::Cpu => &[TrialFigure::Median],
        TrialFigure::Instructions => &[TrialFigure::Median, TrialFigure::Cpu],
        LatencyP50 => &[LatencyP99, ServerCpu],
        LatencyP99 => &[LatencyP50, ServerCpu],
        ServerCpu => &[LatencyP50, LatencyP99],
    };
    others
        .iter()
        .filter_map(|&figure| {
            let other = judge_run(run, figure).ok()?;
            Some(OtherFigure {
                figure,
                disagrees: disagree(verdict, &other),
                verdict: other,
            })
        })
        .collect()
}

/// Whether two figures of one run disagree: each one's B/A lies outside the other's interval,
/// so neither's noise explains the other's estimate. (One-sided, a noisy figure beside a tight
/// one would "disagree" by its noise alone: a server's p99 beside its p50 swings by tens of
/// percent between trials.)
pub fn disagree(used: &Verdict, other: &Verdict) -> bool {
    let outside = |v: &Verdict, ratio: f64| ratio < v.ci_low || ratio > v.ci_high;
    outside(used, other.ratio) && outside(other, used.ratio)
}

/// The line `compare` prints for another figure, and its warning when they disagree.
pub fn other_figure_lines(used: TrialFigure, others: &[OtherFigure]) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut warnings = Vec::new();
    for o in others {
        let v = &o.verdict;
        lines.push(format!(
            "  {} figure: B/A {:.4}, 95% CI [{:.4}, {:.4}]",
            o.figure.as_str(),
            v.ratio,
            v.ci_low,
            v.ci_high
        ));
        if o.disagrees {
            warnings.push(format!(
                "the {} figure (B/A {:.4}) and the {} figure the verdict used disagree by more \
                 than its interval: {}",
                o.figure.as_str(),
                v.ratio,
                used.as_str(),
                why_figures_differ(used, o.figure)
            ));
        }
    }
    (lines, warnings)
}

fn why_figures_differ(used: TrialFigure, other: TrialFigure) -> &'static str {
    use TrialFigure::{LatencyP50, LatencyP99, ServerCpu};
    let wall = |f: TrialFigure| matches!(f, TrialFigure::Median | TrialFigure::Mean);
    if used == ServerCpu || other == ServerCpu {
        return "the latency moved by another share than the server's CPU time per request: \
                waits (locks, I/O, the network, queueing behind other requests) or the load \
                host changed, not only the server's work. Trust the CPU figure for a change \
                to the server's code on a noisy host; the latency for what users feel";
    }
    if matches!(
        (used, other),
        (LatencyP50, LatencyP99) | (LatencyP99, LatencyP50)
    ) {
        return "the change moved the tail by another share than the middle: queueing, pauses \
                (a collector, a lock, a stall of the host) or a slow path that few requests \
                take. Judge on the percentile your users' objective names";
    }
    if (wall(used) && other == TrialFigure::Cpu) || (used == TrialFigure::Cpu && wall(other)) {
        "A and B lost different shares of their wall time outside their own CPU time (time a \
         neighbour stole, waits for I/O, sleeps, or children not waited for). Trust the CPU \
         figure for a CPU-bound change on a shared host; the wall figure when waiting is part \
         of what changed"
    } else {
        "A and B retire different instruction counts than their times suggest: the change \
         moves cache misses or stalls, not only work. The time figures are what users feel"
    }
}

/// The statistics crate's observations of a compare run's counted trials: A and B's figures,
/// paired by host and round.
pub fn observations(run: &RunRecord, figure: TrialFigure) -> Vec<quietbench_stats::Observation> {
    figures::stats_observations(&figures::trial_values(run, None, figure), "A", "B")
}

/// How `compare` judges: B against A, lower times better, bootstrapped with the run's seed.
pub fn verdict_config(run: &RunRecord) -> quietbench_stats::VerdictConfig {
    quietbench_stats::VerdictConfig {
        seed: quietbench_stats::Seed(run.settings.seed),
        ..Default::default()
    }
}

/// The verdict of a compare run, from its record alone: what `compare` prints at the end of a
/// run, and what the HTML report of the same run, live or stored, leads with.
pub fn judge_run(
    run: &RunRecord,
    figure: TrialFigure,
) -> Result<Verdict, quietbench_stats::StatsError> {
    quietbench_stats::judge(&observations(run, figure), &verdict_config(run))
}

/// One CPU model's own verdict in a compare run whose hosts drew several.
#[derive(Debug, Clone)]
pub struct ModelVerdict {
    /// The CPU model.
    pub cpu_model: String,
    /// Its hosts (agent addresses), sorted.
    pub hosts: Vec<String>,
    /// B against A on those hosts alone, or why there is none.
    pub verdict: Result<Verdict, String>,
}

/// Whether the change differs between CPU models: the models with the lowest and the highest
/// B/A, and how their ratios differ.
#[derive(Debug, Clone)]
pub struct ModelInteraction {
    /// The model with the lowest B/A.
    pub low: String,
    /// The model with the highest B/A.
    pub high: String,
    /// high's B/A over low's, with its interval.
    pub difference: quietbench_stats::RatioDifference,
    /// What the terminal prints.
    pub sentence: String,
}

/// A compare run judged per CPU model.
#[derive(Debug, Clone)]
pub struct ByModel {
    /// Every model its hosts drew, the one most hosts drew first.
    pub models: Vec<ModelVerdict>,
    /// Whether the change differs between models; `None` with fewer than two judged models.
    pub interaction: Option<ModelInteraction>,
}

/// The verdict of each CPU model's hosts, and whether they differ. `None` when the run's
/// hosts drew one CPU model (the pooled verdict is that model's).
pub fn judge_by_model(run: &RunRecord, figure: TrialFigure) -> Option<ByModel> {
    let all = observations(run, figure);
    let mut names: Vec<&str> = all.iter().map(|o| o.cpu_model.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 2 {
        return None;
    }
    let config = verdict_config(run);
    let mut models: Vec<ModelVerdict> = names
        .into_iter()
        .map(|model| {
            let own: Vec<quietbench_stats::Observation> = all
                .iter()
                .filter(|o| o.cpu_model == model)
                .cloned()
                .collect();
            let mut hosts: Vec<String> = own.iter().map(|o| o.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            ModelVerdict {
                cpu_model: model.to_string(),
                hosts,
                verdict: quietbench_stats::judge(&own, &config).map_err(|e| e.to_string()),
            }
        })
        .collect();
    models.sort_by_key(|m| std::cmp::Reverse(m.hosts.len()));
    let interaction = interaction(&models);
    Some(ByModel {
        models,
        interaction,
    })
}

fn interaction(models: &[ModelVerdict]) -> Option<ModelInteraction> {
    let judged: Vec<(&str, &Verdict)> = models
        .iter()
        .filter_map(|m| m.verdict.as_ref().ok().map(|v| (m.cpu_model.as_str(), v)))
        .collect();
    if judged.len() < 2 {
        return None;
    }
    let low = judged
        .iter()
        .min_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))?;
    let high = judged
        .iter()
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))?;
    let group = |v: &Verdict| quietbench_stats::GroupRatio {
        ratio: v.ratio,
        ci_low: v.ci_low,
        ci_high: v.ci_high,
        level: v.level,
    };
    let difference =
        quietbench_stats::ratio_difference(group(low.1), group(high.1), low.1.level).ok()?;
    let each = format!(
        "B/A {:.4} on {}, {:.4} on {}",
        low.1.ratio, low.0, high.1.ratio, high.0
    );
    let by = format!(
        "{} apart, {:.0}% interval {} to {}",
        quietbench_stats::pct(difference.ratio - 1.0),
        difference.level.get() * 100.0,
        quietbench_stats::pct(difference.ci_low - 1.0),
        quietbench_stats::pct(difference.ci_high - 1.0)
    );
    let sentence = if difference.differs {
        format!(
            "the change differs between CPU models ({each}; {by}): judge each model on its own \
             rather than the pooled verdict, which averages them"
        )
    } else {
        format!("the change is alike on every CPU model within the intervals ({each}; {by})")
    };
    Some(ModelInteraction {
        low: low.0.to_string(),
        high: high.0.to_string(),
        difference,
        sentence,
    })
}

/// What `compare` prints about its hosts' CPU models: nothing for one host; the model for
/// several hosts of one model; else each model's own verdict and whether they differ.
pub fn cpu_model_lines(run: &RunRecord, by_model: Option<&ByModel>) -> Vec<String> {
    let Some(b) = by_model else {
        let mut hosts: Vec<usize> = run.trials.iter().map(|t| t.host).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let model = run
            .hosts
            .first()
            .map(crate::record::queries::cpu_model_of)
            .unwrap_or_default();
        return if hosts.len() > 1 {
            vec![format!("CPU model: {model}, on all {} hosts", hosts.len())]
        } else {
            Vec::new()
        };
    };
    let mut lines = vec![format!(
        "CPU models: {}",
        b.models
            .iter()
            .map(|m| format!("{} ({} hosts)", m.cpu_model, m.hosts.len()))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    for m in &b.models {
        let said = match &m.verdict {
            Ok(v) => v.to_string().lines().next().unwrap_or_default().to_string(),
            Err(why) => format!("no verdict: {why}"),
        };
        lines.push(format!("  on {}: {said}", m.cpu_model));
    }
    if let Some(i) = &b.interaction {
        lines.push(format!("  {}", i.sentence));
    }
    lines
}

#[cfg(test)]
mod tests;
