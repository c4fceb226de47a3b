//! The JSON report: a stable, documented schema (docs/json-report.md). Field names and meanings
//! only ever gain members within `quietbench.run-report.v1`; anything else bumps the version.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hdrhistogram::Histogram;
use quietbench_proto::v1 as pb;
use quietbench_record::record::queries::{metric_keys, metric_values, placement_matches_plan};
use quietbench_record::record::{
    HistogramRecord, MetricRecord, RunRecord, TrialRecord, missing_trials,
};
use quietbench_stats::summarize;

mod schema;

pub use schema::{
    ControlJson, FingerprintJson, HostJson, MetricJson, MissingJson, NoiseJson, PeerFlowCpuJson,
    PlacementJson, Report, SCHEMA, SettingsJson, SummaryJson, ThreadJson, TrialJson, WarningJson,
};

fn noise(n: &pb::NoiseSample) -> NoiseJson {
    NoiseJson {
        elapsed_s: n.elapsed_ns as f64 / 1e9,
        cpus: n.cpus.clone(),
        steal_fraction: n.steal_fraction,
        interrupts: n.interrupts,
        softirqs: n.softirqs,
        foreign_cpu_fraction: n.foreign_cpu_fraction,
        runqueue_wait_s: n.runqueue_wait_ns.map(|ns| ns as f64 / 1e9),
        involuntary_switches: n.involuntary_switches,
        migrations: n.migrations,
        cpu_mhz: n.cpu_mhz,
        ebs_exceeded_s: match (
            n.ebs_volume_iops_exceeded_us,
            n.ebs_volume_throughput_exceeded_us,
            n.ebs_instance_iops_exceeded_us,
            n.ebs_instance_throughput_exceeded_us,
        ) {
            (Some(a), Some(b), Some(c), Some(d)) => Some(schema::EbsExceededJson {
                volume_iops: a as f64 / 1e6,
                volume_throughput: b as f64 / 1e6,
                instance_iops: c as f64 / 1e6,
                instance_throughput: d as f64 / 1e6,
            }),
            _ => None,
        },
        ena_allowance_exceeded: match (
            n.ena_bw_in_allowance_exceeded,
            n.ena_bw_out_allowance_exceeded,
            n.ena_pps_allowance_exceeded,
            n.ena_conntrack_allowance_exceeded,
            n.ena_linklocal_allowance_exceeded,
        ) {
            (Some(bw_in), Some(bw_out), Some(pps), Some(conntrack), Some(linklocal)) => {
                Some(schema::EnaExceededJson {
                    bw_in,
                    bw_out,
                    pps,
                    conntrack,
                    linklocal,
                })
            }
            _ => None,
        },
        unavailable: n.unavailable.clone(),
    }
}

/// The JSON form of a control report.
pub fn control(r: &pb::ControlReport) -> ControlJson {
    use pb::control_report::Outcome;
    ControlJson {
        control: r.control.clone(),
        target: r.target.clone(),
        outcome: match Outcome::try_from(r.outcome) {
            Ok(Outcome::Applied) => "applied",
            Ok(Outcome::Skipped) => "skipped",
            Ok(Outcome::Failed) => "failed",
            _ => "unknown",
        },
        detail: r.detail.clone(),
    }
}

/// RFC 3339 in UTC, with the precision given.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn rfc3339_unix_ns(ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

/// Builds the report of `run`.
pub fn build(run: &RunRecord) -> Report {
    Report {
        schema: SCHEMA,
        run_id: run.run_id.clone(),
        quietbench_version: env!("CARGO_PKG_VERSION"),
        started_at: rfc3339(run.started_at),
        finished_at: run.finished_at.map(rfc3339),
        complete: run.finished_at.is_some() && run.error.is_none(),
        error: run.error.clone(),
        settings: SettingsJson {
            probes: run.settings.probes.clone(),
            params: run.settings.params.clone(),
            rounds: run.settings.rounds,
            duration_s: run.settings.duration_ms as f64 / 1000.0,
            interval_s: run.settings.interval_ms as f64 / 1000.0,
            cpus: run.settings.cpus.clone(),
            tune: run.settings.tune,
            unpinned: run.settings.unpinned,
            variants: run.settings.variants.clone(),
            warmup_rounds: run.settings.warmup,
            seed: run.settings.seed,
            round_sync: run.settings.round_sync,
        },
        hosts: run
            .hosts
            .iter()
            .map(|h| HostJson {
                address: h.address.clone(),
                kind: h.kind.as_str(),
                agent_version: h.agent_version.clone(),
                fingerprint: fingerprint(&h.fingerprint),
                tuning: h.tuning.iter().map(control).collect(),
                caps: h.caps.clone(),
            })
            .collect(),
        trials: run.trials.iter().map(|t| trial(run, t)).collect(),
        summary: summary(&run.trials),
        warnings: quietbench_record::warnings::run_warnings(run)
            .into_iter()
            .map(|w| WarningJson {
                message: w.to_string(),
                warning: w,
            })
            .collect(),
        fleet: run.fleet.clone(),
        fleet_spread: quietbench_record::verdicts::spread::fleet_spread(run),
        bottlenecks: quietbench_record::verdicts::binding::binding_caps(run),
        missing_trials: missing_trials(run)
            .into_iter()
            .map(|m| {
                let mut rounds: Vec<u32> = m.trials.iter().map(|t| t.round).collect();
                rounds.dedup();
                MissingJson {
                    host: m.host,
                    address: run
                        .hosts
                        .get(m.host)
                        .map_or_else(String::new, |h| h.address.clone()),
                    trials: m.trials.len(),
                    rounds,
                    reason: m.reason,
                }
            })
            .collect(),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The JSON form of a fingerprint (also `quietbench host --json`).
pub fn fingerprint(fp: &pb::Fingerprint) -> FingerprintJson {
    let cpu = fp.cpu.as_ref();
    FingerprintJson {
        cpu_vendor: cpu.and_then(|c| non_empty(&c.vendor)),
        cpu_model_name: cpu.and_then(|c| non_empty(&c.model_name)),
        cpu_family: cpu.and_then(|c| c.family),
        cpu_model: cpu.and_then(|c| c.model),
        cpu_stepping: cpu.and_then(|c| c.stepping),
        cpu_microcode: cpu.and_then(|c| c.microcode.clone()),
        logical_cpus: fp.logical_cpus,
        online_cpus: fp.online_cpus.clone(),
        kernel_release: non_empty(&fp.kernel_release),
        clocksource: non_empty(&fp.clocksource),
        hostname: non_empty(&fp.hostname),
        unreadable: fp.unreadable.clone(),
        cpu_flags: fp.cpu_flags.clone(),
        topology: fp.topology.clone(),
        kernel: fp.kernel.clone(),
        nics: fp.nics.clone(),
        block_devices: fp.block_devices.clone(),
        nic_queues: fp.nic_queues.clone(),
        cpu_roles: fp.cpu_roles.clone(),
        controls: fp.controls.clone(),
        monitors: fp.monitors.clone(),
        instance: fp.instance.clone(),
        steal_fraction_since_boot: fp.steal_fraction_since_boot,
    }
}

fn trial(run: &RunRecord, t: &TrialRecord) -> TrialJson {
    TrialJson {
        probe: t.probe.clone(),
        variant: t.variant.clone(),
        warmup: t.warmup,
        host: run
            .hosts
            .get(t.host)
            .map(|h| h.address.clone())
            .unwrap_or_default(),
        peer: t.peer.clone(),
        block_device: t.block_device.clone(),
        round: t.round,
        trial_id: t.trial_id.clone(),
        started_at: rfc3339_unix_ns(t.start_unix_ns),
        duration_s: t.end_unix_ns.saturating_sub(t.start_unix_ns) as f64 / 1e9,
        cancelled: t.cancelled,
        params: t.params.clone(),
        placement: t.placement.as_ref().map(placement),
        intervals: t.intervals,
        metrics: t.metrics.iter().map(metric).collect(),
        noise: t.noise.as_ref().map(noise),
    }
}

fn placement(p: &pb::Placement) -> PlacementJson {
    PlacementJson {
        policy: p.policy.clone(),
        housekeeping_cpus: p.housekeeping_cpus.clone(),
        threads: p
            .threads
            .iter()
            .map(|t| ThreadJson {
                thread: t.thread_index,
                planned_cpu: t.planned_cpu,
                affinity_cpus: t.affinity_cpus.clone(),
                observed_cpu: t.observed_cpu,
            })
            .collect(),
        matches_plan: placement_matches_plan(p),
        notes: p.notes.clone(),
        shares_cpus: p.shares_cpus,
        peer_flow_cpus: p
            .peer_flow_cpus
            .iter()
            .map(|f| PeerFlowCpuJson {
                cpu: f.cpu,
                flows: f.flows,
            })
            .collect(),
    }
}

fn metric(m: &MetricRecord) -> MetricJson {
    match &m.histogram {
        Some(h) => histogram_metric(m, h),
        None => interval_metric(m),
    }
}

fn histogram_metric(m: &MetricRecord, h: &HistogramRecord) -> MetricJson {
    let hist: &Histogram<u64> = &h.hist;
    let has = !hist.is_empty();
    let q = |quantile: f64| has.then(|| hist.value_at_quantile(quantile) as f64);
    MetricJson {
        name: m.name.clone(),
        unit: m.unit.clone(),
        value: m.value,
        stats_of: "histogram",
        count: hist.len(),
        mean: has.then(|| hist.mean()),
        stdev: has.then(|| hist.stdev()),
        min: has.then(|| hist.min() as f64),
        max: has.then(|| hist.max() as f64),
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        p999: q(0.999),
        clamped: h.clamped,
        dropped: h.dropped,
        histogram: Some(base64::engine::general_purpose::STANDARD.encode(&h.encoded)),
    }
}

/// Nearest-rank percentile of sorted values.
fn nearest_rank(sorted: &[f64], quantile: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn interval_metric(m: &MetricRecord) -> MetricJson {
    let mut sorted = m.interval_values.clone();
    sorted.sort_by(f64::total_cmp);
    let s = summarize(&sorted);
    MetricJson {
        name: m.name.clone(),
        unit: m.unit.clone(),
        value: m.value,
        stats_of: "intervals",
        count: sorted.len() as u64,
        mean: s.map(|s| s.mean),
        stdev: s.and_then(|s| s.stdev),
        min: s.map(|s| s.min),
        max: s.map(|s| s.max),
        p50: nearest_rank(&sorted, 0.5),
        p90: nearest_rank(&sorted, 0.9),
        p99: nearest_rank(&sorted, 0.99),
        p999: nearest_rank(&sorted, 0.999),
        clamped: 0,
        dropped: 0,
        histogram: None,
    }
}

fn summary(trials: &[TrialRecord]) -> Vec<SummaryJson> {
    metric_keys(trials)
        .into_iter()
        .filter_map(|(variant, probe, metric, unit)| {
            let s = summarize(&metric_values(trials, &variant, &metric))?;
            Some(SummaryJson {
                variant,
                probe,
                metric,
                unit,
                n: s.n,
                mean: s.mean,
                median: s.median,
                stdev: s.stdev,
                cv: s.cv,
                min: s.min,
                max: s.max,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(nearest_rank(&v, 0.5), Some(3.0));
        assert_eq!(nearest_rank(&v, 0.9), Some(5.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }
}
