//! Translation from the host and probe crates' types to the wire types. Nothing else.

use std::time::{SystemTime, UNIX_EPOCH};

use quietbench_probe::histogram::encode_v2_deflate;
use quietbench_probe::placement::PlacementPlan;
use quietbench_probe::{IntervalReport, ThreadPlacement};
use quietbench_proto::v1 as pb;

/// Nanoseconds since the Unix epoch (0 for times before it, which a live clock never gives).
pub fn unix_ns(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub fn fingerprint(fp: quietbench_host::Fingerprint) -> pb::Fingerprint {
    pb::Fingerprint {
        cpu_flags: Vec::new(),
        cpu: fp.cpu.map(|cpu| pb::CpuIdentity {
            vendor: cpu.vendor,
            model_name: cpu.model_name,
            family: cpu.family,
            model: cpu.model,
            stepping: cpu.stepping,
            microcode: cpu.microcode,
        }),
        logical_cpus: fp.online_cpus.len() as u32,
        online_cpus: fp.online_cpus,
        kernel_release: fp.kernel_release.unwrap_or_default(),
        clocksource: fp.clocksource.unwrap_or_default(),
        hostname: fp.hostname.unwrap_or_default(),
        unreadable: fp.unreadable,
        ..Default::default()
    }
}

pub fn placement(
    plan: &PlacementPlan,
    threads: &[ThreadPlacement],
    unpinned: bool,
) -> pb::Placement {
    pb::Placement {
        policy: if unpinned {
            "unpinned"
        } else {
            plan.policy.as_str()
        }
        .to_string(),
        threads: threads
            .iter()
            .map(|t| pb::ThreadPlacement {
                thread_index: t.thread_index,
                planned_cpu: t.planned_cpu,
                affinity_cpus: t.affinity_cpus.clone(),
                observed_cpu: t.observed_cpu,
            })
            .collect(),
        housekeeping_cpus: plan.housekeeping_cpus.clone(),
        notes: plan.notes.clone(),
        shares_cpus: plan.shares_cpus,
        // The peer's side is another agent's to tell; the controller adds it.
        peer_flow_cpus: Vec::new(),
    }
}

/// The metrics of an interval (or a whole trial): for each metric set of the probe's events, its
/// rate and its latency distribution.
pub fn event_metrics(report: &IntervalReport) -> Result<Vec<pb::Metric>, String> {
    let mut metrics = Vec::with_capacity(report.metric_sets.len() * 2);
    for v in &report.metric_sets {
        let latency = &v.latency_ns;
        let bytes = encode_v2_deflate(latency).map_err(|e| e.to_string())?;
        if !v.metric_set.rate_metric.is_empty() {
            metrics.push(pb::Metric {
                name: v.metric_set.rate_metric.into(),
                unit: v.metric_set.rate_unit.into(),
                value: Some(v.events_per_sec),
                histogram: None,
            });
        }
        if let (Some(t), Some(value)) = (v.metric_set.throughput, v.throughput) {
            metrics.push(pb::Metric {
                name: t.metric.into(),
                unit: t.unit.into(),
                value: Some(value),
                histogram: None,
            });
        }
        metrics.push(pb::Metric {
            name: v.metric_set.latency_metric.into(),
            unit: v.metric_set.latency_unit.into(),
            value: (!latency.is_empty()).then(|| latency.mean()),
            histogram: Some(pb::Histogram {
                hdr_v2_deflate: bytes,
                unit: v.metric_set.latency_unit.into(),
                start_unix_ns: unix_ns(report.start),
                end_unix_ns: unix_ns(report.end),
                clamped_count: v.clamped,
                dropped_count: report.dropped,
                total_count: latency.len(),
            }),
        });
    }
    Ok(metrics)
}

pub fn interval(report: &IntervalReport) -> Result<pb::Interval, String> {
    Ok(pb::Interval {
        index: report.index,
        start_unix_ns: unix_ns(report.start),
        end_unix_ns: unix_ns(report.end),
        metrics: event_metrics(report)?,
        noise: None,
    })
}

pub fn tune_request(req: pb::PrepareRequest) -> quietbench_host::tuning::TuneRequest {
    use quietbench_host::tuning::TuneRequest;
    if req.all {
        return TuneRequest::all(req.probe_cpus);
    }
    TuneRequest {
        probe_cpus: req.probe_cpus,
        aslr_off: req.aslr_off,
        steer_irqs: req.steer_irqs,
        pause_irqbalance: req.pause_irqbalance,
        performance_governor: req.performance_governor,
        thp_mode: (!req.thp_mode.is_empty()).then_some(req.thp_mode),
        drop_caches: req.drop_caches,
    }
}

pub fn control_report(r: quietbench_host::tuning::ControlReport) -> pb::ControlReport {
    use pb::control_report::Outcome as Wire;
    use quietbench_host::tuning::Outcome;
    let (outcome, detail) = match r.outcome {
        Outcome::Applied(d) => (Wire::Applied, d),
        Outcome::Skipped(d) => (Wire::Skipped, d),
        Outcome::Failed(d) => (Wire::Failed, d),
    };
    pb::ControlReport {
        control: r.control,
        target: r.target,
        outcome: outcome as i32,
        detail,
    }
}

/// The wire form of an interval's noise, with what the trial's devices said (EBS, ENA).
pub fn noise(
    n: &quietbench_host::noise::IntervalNoise,
    devices: Option<&quietbench_host::device_noise::DeviceNoise>,
    cpus: &[u32],
) -> pb::NoiseSample {
    let ebs = devices.and_then(|d| d.ebs_exceeded_us);
    let ena = devices.and_then(|d| d.ena_exceeded);
    let mut unavailable = n.unavailable.clone();
    if let Some(d) = devices {
        unavailable.extend(d.unavailable.iter().cloned());
    }
    pb::NoiseSample {
        ebs_volume_iops_exceeded_us: ebs.map(|e| e[0]),
        ebs_volume_throughput_exceeded_us: ebs.map(|e| e[1]),
        ebs_instance_iops_exceeded_us: ebs.map(|e| e[2]),
        ebs_instance_throughput_exceeded_us: ebs.map(|e| e[3]),
        ena_bw_in_allowance_exceeded: ena.map(|e| e[0]),
        ena_bw_out_allowance_exceeded: ena.map(|e| e[1]),
        ena_pps_allowance_exceeded: ena.map(|e| e[2]),
        ena_conntrack_allowance_exceeded: ena.map(|e| e[3]),
        ena_linklocal_allowance_exceeded: ena.map(|e| e[4]),
        elapsed_ns: n.elapsed_ns,
        cpus: cpus.to_vec(),
        steal_fraction: n.steal_fraction,
        interrupts: n.interrupts,
        softirqs: n.softirqs,
        foreign_cpu_fraction: n.foreign_cpu_fraction,
        runqueue_wait_ns: n.runqueue_wait_ns,
        involuntary_switches: n.involuntary_switches,
        migrations: n.migrations,
        cpu_mhz: n.cpu_mhz,
        unavailable,
    }
}
