//! Typed warnings: what in a run makes its numbers less trustworthy, and what to do about it.
//! Thresholds are the field's rules of thumb (CONTEXT.md §1: a 2–3% effect drowns in a few
//! percent of noise), stated here once.

use std::fmt;

use quietbench_proto::v1 as pb;
use serde::Serialize;

use crate::record::queries::placement_matches_plan;
use crate::record::{MetricRecord, RunRecord};

/// Steal above this share of the probe CPUs' time earns a warning.
pub const STEAL_LIMIT: f64 = 0.02;
/// Foreign CPU time (others running on a probe CPU) above this share earns a warning.
pub const FOREIGN_LIMIT: f64 = 0.01;
/// Disk probes' I/O buffers less than this share (%) in huge pages earn a warning.
pub const HUGE_PAGE_LIMIT: f64 = 99.0;
/// The disk probes' counter of the share of their I/O buffers in huge pages.
const HUGE_PAGE_METRIC: &str = quietbench_proto::metrics::IO_BUFFERS_HUGE_PAGES;

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
    /// A disk probe's I/O buffers were not (all) in huge pages.
    SmallPageIoBuffers {
        /// Host address.
        host: String,
        /// Trial id (the host's first such trial).
        trial_id: String,
        /// Round.
        round: u32,
        /// Share of the buffers in huge pages, %.
        huge_pct: f64,
    },
    /// ENA's allowance counters grew during a trial: EC2 shaped the traffic, so the result is
    /// capped by EC2, not by the code.
    NetworkAllowanceExceeded {
        /// Host address.
        host: String,
        /// Trial id.
        trial_id: String,
        /// Round.
        round: u32,
        /// The counters that grew, with the packets shaped.
        counters: Vec<(String, u64)>,
    },
    /// EBS's NVMe statistics saw demand over the volume's or the instance's limit.
    EbsLimitExceeded {
        /// Host address.
        host: String,
        /// Trial id.
        trial_id: String,
        /// Round.
        round: u32,
        /// Each limit exceeded and for how long, µs.
        limits: Vec<(String, u64)>,
        /// The trial's length, µs.
        elapsed_us: u64,
    },
    /// A disk probe measured a volume restored from a snapshot and not pre-warmed: its first
    /// touch of each block reads from S3 (CONTEXT.md §5: ~10× slower).
    ColdRestoredVolume {
        /// Host address.
        host: String,
        /// The volume and its device.
        volume: String,
        /// The snapshot it came from.
        snapshot: String,
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
            Self::SmallPageIoBuffers {
                host,
                round,
                huge_pct,
                ..
            } => write!(
                f,
                "{host} round {round}: only {huge_pct:.0}% of the disk probe's I/O buffers were \
                 in huge pages (transparent huge pages off, or memory too fragmented). A request \
                 is then one DMA segment per 4 KiB page, which on a virtual disk without \
                 indirect descriptors halved the throughput in our tests: set \
                 /sys/kernel/mm/transparent_hugepage/enabled to madvise to measure the disk, not \
                 the buffers"
            ),
            Self::NetworkAllowanceExceeded {
                host,
                round,
                counters,
                ..
            } => write!(
                f,
                "{host} round {round}: EC2 shaped the traffic ({}): the result is capped by \
                 the instance's network allowance, not by the code. Use a larger instance, \
                 fewer flows per instance, or more instances",
                counters
                    .iter()
                    .map(|(c, n)| format!("{c} +{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::EbsLimitExceeded {
                host,
                round,
                limits,
                elapsed_us,
                ..
            } => write!(
                f,
                "{host} round {round}: EBS saw demand over {} of the trial's {:.1} s: the \
                 result is capped by EBS, not by the code (see the attribution line)",
                limits
                    .iter()
                    .map(|(l, us)| format!("{l} for {:.1} s", *us as f64 / 1e6))
                    .collect::<Vec<_>>()
                    .join(", "),
                *elapsed_us as f64 / 1e6
            ),
            Self::ColdRestoredVolume {
                host,
                volume,
                snapshot,
            } => write!(
                f,
                "{host}: {volume} was restored from {snapshot} and not pre-warmed: the first \
                 read of each block comes from S3, up to 10x slower. Set prewarm = \"auto\" in \
                 the plan (the default) or run disk.scan with prewarm=true first"
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

/// The share (%) of a disk trial's I/O buffers in huge pages, when it is under
/// [`HUGE_PAGE_LIMIT`]; `None` for other probes and for buffers all in huge pages.
pub fn small_page_share(metrics: &[MetricRecord]) -> Option<f64> {
    metrics
        .iter()
        .find(|m| m.name == HUGE_PAGE_METRIC)
        .and_then(|m| m.value)
        .filter(|pct| *pct < HUGE_PAGE_LIMIT)
}

/// ENA allowance counters that grew in `noise`, with the packets shaped.
pub fn ena_growth(noise: &pb::NoiseSample) -> Vec<(String, u64)> {
    [
        (
            "bw_in_allowance_exceeded",
            noise.ena_bw_in_allowance_exceeded,
        ),
        (
            "bw_out_allowance_exceeded",
            noise.ena_bw_out_allowance_exceeded,
        ),
        ("pps_allowance_exceeded", noise.ena_pps_allowance_exceeded),
        (
            "conntrack_allowance_exceeded",
            noise.ena_conntrack_allowance_exceeded,
        ),
        (
            "linklocal_allowance_exceeded",
            noise.ena_linklocal_allowance_exceeded,
        ),
    ]
    .into_iter()
    .filter_map(|(name, n)| n.filter(|n| *n > 0).map(|n| (name.to_string(), n)))
    .collect()
}

/// EBS limits demand exceeded in `noise`, with the time over each, µs.
pub fn ebs_over_limits(noise: &pb::NoiseSample) -> Vec<(String, u64)> {
    [
        ("the volume's IOPS", noise.ebs_volume_iops_exceeded_us),
        (
            "the volume's throughput",
            noise.ebs_volume_throughput_exceeded_us,
        ),
        (
            "the instance's EBS IOPS",
            noise.ebs_instance_iops_exceeded_us,
        ),
        (
            "the instance's EBS throughput",
            noise.ebs_instance_throughput_exceeded_us,
        ),
    ]
    .into_iter()
    .filter_map(|(name, us)| us.filter(|us| *us > 0).map(|us| (name.to_string(), us)))
    .collect()
}

/// Every warning a run earns.
pub fn run_warnings(run: &RunRecord) -> Vec<Warning> {
    let mut warnings = Vec::new();
    // Buffers in small pages are the host's state, not the trial's: said once per host.
    let mut small_pages_told = vec![false; run.hosts.len()];
    for host in &run.hosts {
        let clocksource = &host.fingerprint.clocksource;
        if quietbench_host::kernel::is_slow_clocksource(clocksource) {
            warnings.push(Warning::SlowClocksource {
                host: host.address.clone(),
                clocksource: clocksource.clone(),
            });
        }
    }
    warnings.extend(cold_volumes(run));
    for t in &run.trials {
        let host = run
            .hosts
            .get(t.host)
            .map(|h| h.address.clone())
            .unwrap_or_default();
        if let Some(noise) = &t.noise {
            let shaped = ena_growth(noise);
            if !shaped.is_empty() && !t.warmup {
                warnings.push(Warning::NetworkAllowanceExceeded {
                    host: host.clone(),
                    trial_id: t.trial_id.clone(),
                    round: t.round,
                    counters: shaped,
                });
            }
            let over = ebs_over_limits(noise);
            if !over.is_empty() && !t.warmup {
                warnings.push(Warning::EbsLimitExceeded {
                    host: host.clone(),
                    trial_id: t.trial_id.clone(),
                    round: t.round,
                    limits: over,
                    elapsed_us: noise.elapsed_ns / 1000,
                });
            }
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
        if let Some(huge_pct) = small_page_share(&t.metrics)
            && small_pages_told.get(t.host) == Some(&false)
        {
            small_pages_told[t.host] = true;
            warnings.push(Warning::SmallPageIoBuffers {
                host: host.clone(),
                trial_id: t.trial_id.clone(),
                round: t.round,
                huge_pct,
            });
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

/// Restored, un-warmed volumes that a disk trial measured, once per volume.
fn cold_volumes(run: &RunRecord) -> Vec<Warning> {
    let mut out: Vec<Warning> = Vec::new();
    for t in run
        .trials
        .iter()
        .filter(|t| t.probe.starts_with("disk.") && t.probe != "disk.scan")
    {
        let Some(host) = run.hosts.get(t.host) else {
            continue;
        };
        let volume = t
            .block_device
            .as_deref()
            .and_then(|d| host.caps.as_ref()?.volume_on(d));
        if let Some(v) = volume.filter(|v| v.needs_prewarm()) {
            let w = Warning::ColdRestoredVolume {
                host: host.address.clone(),
                volume: format!("{} ({})", v.volume_id, v.device.as_deref().unwrap_or("?")),
                snapshot: v.snapshot_id.clone().unwrap_or_default(),
            };
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    out
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

    fn metric(name: &str, value: Option<f64>) -> MetricRecord {
        MetricRecord {
            name: name.into(),
            unit: "%".into(),
            value,
            interval_values: Vec::new(),
            histogram: None,
        }
    }

    #[test]
    fn disk_buffers_outside_huge_pages_are_flagged() {
        assert_eq!(
            small_page_share(&[
                metric("read_iops", Some(1.0)),
                metric(HUGE_PAGE_METRIC, Some(0.0))
            ]),
            Some(0.0)
        );
        assert_eq!(
            small_page_share(&[metric(HUGE_PAGE_METRIC, Some(50.0))]),
            Some(50.0)
        );
        assert_eq!(
            small_page_share(&[metric(HUGE_PAGE_METRIC, Some(100.0))]),
            None
        );
        // Not measured (smaps unreadable) or not a disk probe: nothing to say.
        assert_eq!(small_page_share(&[metric(HUGE_PAGE_METRIC, None)]), None);
        assert_eq!(small_page_share(&[metric("read_iops", Some(0.0))]), None);
        let text = Warning::SmallPageIoBuffers {
            host: "h:1".into(),
            trial_id: "t".into(),
            round: 1,
            huge_pct: 0.0,
        }
        .to_string();
        assert!(
            text.contains("0%") && text.contains("transparent_hugepage"),
            "{text}"
        );
    }

    #[test]
    fn ec2_counters_that_grew_are_warnings_and_absent_ones_are_not() {
        use crate::record::test_records;
        let mut run = test_records::empty_run("net.throughput", &["net.throughput"], 1, None);
        run.hosts
            .push(test_records::host(0, "Intel(R) Xeon(R) Platinum 8375C"));
        let mut t = test_records::value_trial(
            ("net.throughput", "net.throughput"),
            0,
            1,
            ("gbit_per_sec", "Gbit/s", 4.9),
        );
        t.noise = Some(pb::NoiseSample {
            elapsed_ns: 10_000_000_000,
            ena_bw_out_allowance_exceeded: Some(1234),
            ena_pps_allowance_exceeded: Some(0),
            ebs_volume_throughput_exceeded_us: Some(8_000_000),
            ebs_volume_iops_exceeded_us: Some(0),
            ..Default::default()
        });
        run.trials.push(t.clone());
        let warnings = run_warnings(&run);
        let shaped = warnings
            .iter()
            .find(|w| matches!(w, Warning::NetworkAllowanceExceeded { .. }))
            .expect("a shaping warning");
        assert!(
            shaped
                .to_string()
                .contains("bw_out_allowance_exceeded +1234"),
            "{shaped}"
        );
        let ebs = warnings
            .iter()
            .find(|w| matches!(w, Warning::EbsLimitExceeded { .. }))
            .expect("an EBS warning");
        assert!(
            ebs.to_string()
                .contains("the volume's throughput for 8.0 s"),
            "{ebs}"
        );
        // Counters the host does not have (null) say nothing.
        t.noise = Some(pb::NoiseSample {
            elapsed_ns: 10_000_000_000,
            ..Default::default()
        });
        run.trials = vec![t];
        assert!(run_warnings(&run).is_empty(), "{:?}", run_warnings(&run));
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
