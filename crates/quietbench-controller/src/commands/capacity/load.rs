//! The comparison at a fixed load after two builds' searches: both offered `--load-at` percent
//! of A's capacity for `--load-rounds` rounds, judged on p50 and p99 as `compare --probe http`
//! judges them.

use super::json::AtLoadJson;
use super::{CapacityRequest, NAMES, probe_name};
use crate::commands::compare::{CompareOptions, server_params};
use crate::record::RunRecord;
use crate::schedule::VariantSpec;
use crate::verdicts::capacity::{Next, Search, thousands};

/// The comparison at a fixed load, once the searches are done.
pub(super) struct LoadStep {
    pub(super) rate: u64,
    percent: f64,
}

/// The load step, when two builds were searched, --load-at was given and A held a rate.
pub(super) fn load_step(req: &CapacityRequest, searches: &[Search]) -> Option<LoadStep> {
    let percent = req.load_at?;
    let [a, _] = searches else { return None };
    let Next::Done(capacity) = a.next() else {
        return None;
    };
    let rate = ((capacity.rate? as f64) * percent / 100.0).round().max(1.0) as u64;
    Some(LoadStep { rate, percent })
}

impl LoadStep {
    fn name(&self, build: &str) -> String {
        format!("{build}.load@{}", self.rate)
    }

    pub(super) fn variants(&self, req: &CapacityRequest) -> Vec<VariantSpec> {
        let options = CompareOptions {
            a: req.builds[0].clone(),
            b: req.builds[1].clone(),
            shell: req.shell,
            cwd: req.cwd.clone(),
            aslr_off: req.aslr_off,
        };
        NAMES
            .iter()
            .zip(&req.builds)
            .map(|(name, cmd)| {
                let mut params = server_params(&options, cmd, &req.params);
                params.insert("rate".into(), self.rate.to_string());
                params
                    .entry("warmup".to_string())
                    .or_insert_with(|| "1".to_string());
                VariantSpec {
                    name: self.name(name),
                    probe: probe_name(req.protocol).into(),
                    params,
                }
            })
            .collect()
    }

    pub(super) fn judge(&self, run: &RunRecord) -> AtLoadJson {
        use crate::record::figures::{TrialFigure, stats_observations, trial_values};
        let judge = |figure| {
            let obs = stats_observations(
                &trial_values(run, None, figure),
                &self.name("A"),
                &self.name("B"),
            );
            quietbench_stats::judge(&obs, &crate::verdicts::compare::verdict_config(run))
        };
        let p50 = judge(TrialFigure::LatencyP50);
        let p99 = judge(TrialFigure::LatencyP99);
        let head = format!(
            "latency at {} requests/s ({}% of A's capacity)",
            thousands(self.rate),
            self.percent
        );
        let sentence = match (&p50, &p99) {
            (Ok(v50), Ok(v99)) => format!(
                "{head}, p50: {}\n{head}, p99: {}",
                first_line(v50),
                first_line(v99)
            ),
            (Err(e), _) | (_, Err(e)) => format!("{head}: no verdict: {e}"),
        };
        AtLoadJson {
            rate: self.rate,
            percent_of_capacity: self.percent,
            p50: p50.ok().as_ref().map(crate::commands::compare::ratio_json),
            p99: p99.ok().as_ref().map(crate::commands::compare::ratio_json),
            sentence,
        }
    }
}

fn first_line(v: &quietbench_stats::Verdict) -> String {
    v.to_string().lines().next().unwrap_or_default().to_string()
}
