//! `quietbench compare`: an A/B comparison of two commands that states its interval and what it
//! could not detect. Trials of A and B interleave in a fresh random order every round on every
//! host (RMIT), each trial times the command for a fixed time on a pinned CPU, and the verdict
//! comes from the paired per-round ratios (see docs/statistics.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::report::{RunRecord, TrialRecord};

/// Exit code when `--fail-if-slower` finds B slower beyond the given percentage.
pub const EXIT_SLOWER: u8 = 3;

/// The command-line options of `compare` that shape the probe.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Command A.
    pub a: String,
    /// Command B.
    pub b: String,
    /// Run through /bin/sh -c.
    pub shell: bool,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// ASLR on or off for the commands.
    pub aslr_off: bool,
}

/// The exec parameters of one side.
pub fn exec_params(opts: &CompareOptions, cmd: &str) -> BTreeMap<String, String> {
    let mut params = BTreeMap::new();
    params.insert("cmd".to_string(), cmd.to_string());
    params.insert("shell".to_string(), opts.shell.to_string());
    params.insert(
        "aslr".to_string(),
        if opts.aslr_off { "off" } else { "on" }.to_string(),
    );
    if let Some(dir) = &opts.cwd {
        params.insert("cwd".to_string(), dir.display().to_string());
    }
    params
}

/// One trial's figure for the verdict: the exact mean wall time per invocation, in ns
/// (1e9 / invocations per second of the trial's own invocation time; the histogram's mean is
/// rounded to 3 significant digits, too coarse for sub-percent verdicts).
pub fn trial_time_ns(t: &TrialRecord) -> Option<f64> {
    let rate = t
        .metrics
        .iter()
        .find(|m| m.name == "invocations_per_sec")?
        .value?;
    (rate > 0.0).then(|| 1e9 / rate)
}

/// A counted trial's observation: which host (and its CPU model), round, variant and value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    /// Host address.
    pub host: String,
    /// The host's CPU model name.
    pub cpu_model: String,
    /// Round.
    pub round: u32,
    /// "A" or "B".
    pub variant: String,
    /// Mean wall time per invocation, ns.
    pub value_ns: f64,
}

/// Every counted (non-warm-up, not cancelled) trial as an observation.
pub fn observations(run: &RunRecord) -> Vec<Observation> {
    run.trials
        .iter()
        .filter(|t| !t.warmup && !t.cancelled)
        .filter_map(|t| {
            let host = run.hosts.get(t.host)?;
            Some(Observation {
                host: host.address.clone(),
                cpu_model: host
                    .fingerprint
                    .cpu
                    .as_ref()
                    .map(|c| c.model_name.clone())
                    .unwrap_or_default(),
                round: t.round,
                variant: t.variant.clone(),
                value_ns: trial_time_ns(t)?,
            })
        })
        .collect()
}

/// Rounds in which every host has both A and B: the pairs a verdict can use.
pub fn complete_rounds(obs: &[Observation]) -> usize {
    let mut rounds: BTreeMap<(String, u32), (bool, bool)> = BTreeMap::new();
    for o in obs {
        let entry = rounds.entry((o.host.clone(), o.round)).or_default();
        match o.variant.as_str() {
            "A" => entry.0 = true,
            "B" => entry.1 = true,
            _ => {}
        }
    }
    rounds.values().filter(|(a, b)| *a && *b).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(host: &str, round: u32, variant: &str, value: f64) -> Observation {
        Observation {
            host: host.into(),
            cpu_model: "m".into(),
            round,
            variant: variant.into(),
            value_ns: value,
        }
    }

    #[test]
    fn counts_only_rounds_with_both_sides() {
        let o = vec![
            obs("h1", 1, "A", 1.0),
            obs("h1", 1, "B", 1.0),
            obs("h1", 2, "A", 1.0),
            obs("h2", 1, "B", 1.0),
            obs("h2", 1, "A", 1.0),
        ];
        assert_eq!(complete_rounds(&o), 2);
    }

    #[test]
    fn exec_params_carry_the_options() {
        let opts = CompareOptions {
            a: "a".into(),
            b: "b".into(),
            shell: true,
            cwd: Some("/tmp".into()),
            aslr_off: true,
        };
        let p = exec_params(&opts, "gzip -k x");
        assert_eq!(p["cmd"], "gzip -k x");
        assert_eq!(p["shell"], "true");
        assert_eq!(p["aslr"], "off");
        assert_eq!(p["cwd"], "/tmp");
    }
}
