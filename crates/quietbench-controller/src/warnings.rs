//! Typed warnings: what in a run makes its numbers less trustworthy, and what to do about it.
//! Thresholds are the field's rules of thumb (CONTEXT.md §1: a 2–3% effect drowns in a few
//! percent of noise), stated here once.

use std::fmt;

use quietbench_proto::v1 as pb;
use serde::Serialize;

use crate::report::RunRecord;
use crate::report::json::placement_matches_plan;

/// Steal above this share of the probe CPUs' time earns a warning.
pub const STEAL_LIMIT: f64 = 0.02;
/// Foreign CPU time (others running on a probe CPU) above this share earns a warning.
pub const FOREIGN_LIMIT: f64 = 0.01;

/// Something that weakens a run's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Warning {
    /// The hypervisor gave the probe CPUs' time to someone else.
    Steal {
        /// Host address.
        host: String,
        /// Trial id.
        trial_id: String,
        /// Round.
        round: u32,
        /// Steal share of the probe CPUs' time.
        fraction: f64,
    },
    /// Other processes or interrupts ran on the probe CPUs.
    ForeignCpuTime {
        /// Host address.
        host: String,
        /// Trial id.
        trial_id: String,
        /// Round.
        round: u32,
        /// Share of the probe threads' time lost to others.
        fraction: f64,
        /// How it was measured: "run-queue wait" (ns, precise) or "CPU ticks".
        measured_by: &'static str,
    },
    /// A thread did not run where it was planned.
    PlacementDiffers {
        /// Host address.
        host: String,
        /// Trial id.
        trial_id: String,
        /// Round.
        round: u32,
    },
    /// The host reads time through a slow clocksource.
    SlowClocksource {
        /// Host address.
        host: String,
        /// The clocksource.
        clocksource: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Steal {
                host,
                round,
                fraction,
                ..
            } => write!(
                f,
                "{host} round {round}: steal took {:.1}% of the probe CPUs' time (over {:.0}%): \
                 the hypervisor ran someone else. Compare runs by CPU time, repeat at another \
                 time, or use a dedicated host",
                fraction * 100.0,
                STEAL_LIMIT * 100.0
            ),
            Self::ForeignCpuTime {
                host,
                round,
                fraction,
                measured_by,
                ..
            } => write!(
                f,
                "{host} round {round}: other work took {:.1}% of the probe threads' time on their \
                 CPUs (over {:.0}%, by {measured_by}). Use --tune to steer interrupts away, stop \
                 other jobs, or pick quieter CPUs with --cpus",
                fraction * 100.0,
                FOREIGN_LIMIT * 100.0
            ),
            Self::PlacementDiffers { host, round, .. } => write!(
                f,
                "{host} round {round}: a probe thread did not run where it was planned (see the \
                 trial's placement); its numbers may include migration or sharing effects"
            ),
            Self::SlowClocksource { host, clocksource } => write!(
                f,
                "{host}: the clocksource is {clocksource}, which makes every timestamp a slow \
                 system call; per-event latencies carry that cost. Prefer tsc where the platform \
                 allows it"
            ),
        }
    }
}

/// The share of the probe threads' time that others took: precise run-queue wait where the
/// kernel accounts it, else the tick-based foreign CPU share.
pub fn foreign_share(noise: &pb::NoiseSample) -> Option<(f64, &'static str)> {
    let threads = noise.cpus.len().max(1) as f64;
    match noise.runqueue_wait_ns {
        Some(wait) if noise.elapsed_ns > 0 => Some((
            wait as f64 / (noise.elapsed_ns as f64 * threads),
            "run-queue wait",
        )),
        _ => noise.foreign_cpu_fraction.map(|f| (f, "CPU ticks")),
    }
}

/// Every warning a run earns.
pub fn run_warnings(run: &RunRecord) -> Vec<Warning> {
    let mut warnings = Vec::new();
    for host in &run.hosts {
        let clocksource = &host.fingerprint.clocksource;
        if quietbench_host::kernel::is_slow_clocksource(clocksource) {
            warnings.push(Warning::SlowClocksource {
                host: host.address.clone(),
                clocksource: clocksource.clone(),
            });
        }
    }
    for t in &run.trials {
        let host = run
            .hosts
            .get(t.host)
            .map(|h| h.address.clone())
            .unwrap_or_default();
        if let Some(noise) = &t.noise {
            if let Some(fraction) = noise.steal_fraction.filter(|s| *s > STEAL_LIMIT) {
                warnings.push(Warning::Steal {
                    host: host.clone(),
                    trial_id: t.trial_id.clone(),
                    round: t.round,
                    fraction,
                });
            }
            if let Some((fraction, measured_by)) =
                foreign_share(noise).filter(|(f, _)| *f > FOREIGN_LIMIT)
            {
                warnings.push(Warning::ForeignCpuTime {
                    host: host.clone(),
                    trial_id: t.trial_id.clone(),
                    round: t.round,
                    fraction,
                    measured_by,
                });
            }
        }
        // An unpinned baseline runs wherever the scheduler puts it: that is its point.
        if t.placement
            .as_ref()
            .is_some_and(|p| p.policy != "unpinned" && !placement_matches_plan(p))
        {
            warnings.push(Warning::PlacementDiffers {
                host,
                trial_id: t.trial_id.clone(),
                round: t.round,
            });
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_queue_wait_is_preferred_and_scaled_per_thread() {
        let noise = pb::NoiseSample {
            elapsed_ns: 1_000_000_000,
            cpus: vec![1, 2],
            runqueue_wait_ns: Some(40_000_000),
            foreign_cpu_fraction: Some(0.5),
            ..Default::default()
        };
        let (share, by) = foreign_share(&noise).unwrap();
        assert!((share - 0.02).abs() < 1e-12);
        assert_eq!(by, "run-queue wait");
        let ticks_only = pb::NoiseSample {
            runqueue_wait_ns: None,
            ..noise
        };
        assert_eq!(foreign_share(&ticks_only), Some((0.5, "CPU ticks")));
        assert_eq!(foreign_share(&pb::NoiseSample::default()), None);
    }

    #[test]
    fn messages_say_what_to_do() {
        let w = Warning::Steal {
            host: "h:1".into(),
            trial_id: "t".into(),
            round: 2,
            fraction: 0.031,
        };
        let text = w.to_string();
        assert!(
            text.contains("3.1%") && text.contains("dedicated host"),
            "{text}"
        );
    }
}
