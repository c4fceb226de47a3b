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

/// How a compare run's A and B took turns: in pairs within every trial when its one variant is
/// [`PAIRED_VARIANT`], else in separate trials.
pub fn interleave_of(run: &RunRecord) -> Interleave {
    if run
        .settings
        .variants
        .iter()
        .any(|v| v.name == PAIRED_VARIANT)
    {
        Interleave::Invocations
    } else {
        Interleave::Trials
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
