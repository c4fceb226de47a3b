//! Verdicts of a run with two or more variants (a plan's `[[variant]]`s): every variant against
//! the first, the baseline, paired by round on each host as `compare` pairs A and B, on each
//! trial's figure ([`crate::record::figures`]). With `precision_pct` the run stops once every
//! comparison's interval is that narrow ([`quietbench_stats::StoppingRule`]).

use std::time::Duration;

use quietbench_stats::{Decision, StoppingRule, Verdict, VerdictConfig};

use crate::record::RunRecord;
use crate::record::figures::{direction_of_unit, stats_observations, trial_values};

/// One variant judged against the baseline.
#[derive(Debug, Clone)]
pub struct PlanVerdict {
    /// The baseline's name (the first variant).
    pub baseline: String,
    /// The variant judged.
    pub candidate: String,
    /// The metric both were compared on.
    pub metric: String,
    /// The verdict, or why there is none.
    pub verdict: Result<Verdict, String>,
    /// What it was judged on: the baseline's (A) and the candidate's (B) figures, by host and
    /// round (empty when there was nothing to judge). The HTML report draws their per-round
    /// ratios.
    pub observations: Vec<quietbench_stats::Observation>,
}

impl std::fmt::Display for PlanVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (B) against {} (A), {}: ",
            self.candidate, self.baseline, self.metric
        )?;
        match &self.verdict {
            Ok(v) => write!(f, "{v}"),
            Err(why) => write!(f, "no verdict: {why}"),
        }
    }
}

/// The observations and judging configuration of each variant after the first, or why it
/// cannot be judged.
#[allow(clippy::type_complexity)]
fn comparisons(
    run: &RunRecord,
    seed: u64,
) -> Vec<(
    String,
    String,
    Result<(Vec<quietbench_stats::Observation>, VerdictConfig), String>,
)> {
    let names: Vec<&str> = run
        .settings
        .variants
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    let Some((baseline, candidates)) = names.split_first() else {
        return Vec::new();
    };
    let values = trial_values(run, None, super::compare::exec_figure(run));
    let metric_of = |name: &str| {
        values
            .iter()
            .find(|v| v.variant == name)
            .map(|v| (v.metric.clone(), v.unit.clone()))
    };
    candidates
        .iter()
        .map(|candidate| {
            let judged = match (metric_of(baseline), metric_of(candidate)) {
                (Some((m, u)), Some((cm, cu))) if m == cm && u == cu => match direction_of_unit(&u)
                {
                    Some(direction) => Ok((
                        m,
                        (
                            stats_observations(&values, baseline, candidate),
                            VerdictConfig {
                                direction,
                                seed: quietbench_stats::Seed(seed),
                                ..VerdictConfig::default()
                            },
                        ),
                    )),
                    None => Err((m, format!("cannot tell whether more or less {u} is better"))),
                },
                (Some((m, _)), Some((cm, _))) => Err((
                    m.clone(),
                    format!(
                        "{baseline} reports {m} and {candidate} reports {cm}: nothing to compare"
                    ),
                )),
                _ => Err((String::new(), "no measured trial yet".to_string())),
            };
            match judged {
                Ok((metric, data)) => (candidate.to_string(), metric, Ok(data)),
                Err((metric, why)) => (candidate.to_string(), metric, Err(why)),
            }
        })
        .collect()
}

/// Every variant after the first judged against the first; empty with fewer than two variants.
pub fn judge_plan(run: &RunRecord, seed: u64) -> Vec<PlanVerdict> {
    // A capacity search's steps are rates of one or two servers, not variants to judge
    // against its first step: `capacity` judges them against its SLO.
    if run.settings.capacity_slo.is_some() {
        return Vec::new();
    }
    let baseline = run
        .settings
        .variants
        .first()
        .map(|v| v.name.clone())
        .unwrap_or_default();
    comparisons(run, seed)
        .into_iter()
        .map(|(candidate, metric, data)| {
            let (verdict, observations) = match data {
                Ok((obs, config)) => (
                    quietbench_stats::judge(&obs, &config).map_err(|e| e.to_string()),
                    obs,
                ),
                Err(why) => (Err(why), Vec::new()),
            };
            PlanVerdict {
                baseline: baseline.clone(),
                candidate,
                metric,
                verdict,
                observations,
            }
        })
        .collect()
}

/// Whether a run with `precision_pct` may stop: every comparison's rule says the precision is
/// reached (a comparison that cannot be judged keeps the run going until its budget).
pub fn precision_reached(
    run: &RunRecord,
    rule: &StoppingRule,
    seed: u64,
    elapsed: Duration,
) -> bool {
    let all = comparisons(run, seed);
    !all.is_empty()
        && all.iter().all(|(_, _, data)| match data {
            Ok((obs, config)) => matches!(
                rule.decide_observations(obs, elapsed, config),
                Ok(Decision::Stop(
                    quietbench_stats::StopReason::PrecisionReached { .. }
                ))
            ),
            Err(_) => false,
        })
}
