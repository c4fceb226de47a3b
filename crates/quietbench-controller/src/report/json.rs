//! The JSON report: a stable, documented schema (docs/json-report.md). Field names and meanings
//! only ever gain members within `quietbench.run-report.v1`; anything else bumps the version.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use hdrhistogram::Histogram;
use quietbench_stats::summarize;
use serde::Serialize;

use crate::record::queries::{metric_keys, metric_values, placement_matches_plan};
use crate::record::{HistogramRecord, MetricRecord, RunRecord, TrialRecord, missing_trials};
use quietbench_proto::v1 as pb;

/// The schema's name and version, the report's first field.
pub const SCHEMA: &str = "quietbench.run-report.v1";

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Unique id of the run.
    pub run_id: String,
    /// Version of the controller that wrote it.
    pub quietbench_version: &'static str,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// RFC 3339, UTC; null while a run is in progress.
    pub finished_at: Option<String>,
    /// False when the run stopped early; `error` says why.
    pub complete: bool,
    /// Why the run stopped early.
    pub error: Option<String>,
    /// What was asked for.
    pub settings: SettingsJson,
    /// Every host measured.
    pub hosts: Vec<HostJson>,
    /// Every finished trial, in run order.
    pub trials: Vec<TrialJson>,
    /// Per probe and metric, across trials.
    pub summary: Vec<SummaryJson>,
    /// What weakens these numbers, and what to do about it.
    pub warnings: Vec<WarningJson>,
    /// The fleet: what it is and how its hosts were obtained (empty for a stored run).
    pub fleet: Vec<String>,
    /// Per host, the scheduled trials a failed or interrupted run did not finish, and why.
    pub missing_trials: Vec<MissingJson>,
}

/// A host's trials that did not run.
#[derive(Debug, Serialize)]
pub struct MissingJson {
    /// Index into `hosts`.
    pub host: usize,
    /// Its agent's address.
    pub address: String,
    /// How many trials are missing.
    pub trials: usize,
    /// The rounds they belong to, in order, each once.
    pub rounds: Vec<u32>,
    /// Why: the host's failure, or the run's error.
    pub reason: String,
}

/// A warning: its kind and fields, and the message a person reads.
#[derive(Debug, Serialize)]
pub struct WarningJson {
    /// The typed warning (`kind` plus its fields).
    #[serde(flatten)]
    pub warning: crate::warnings::Warning,
    /// The message, with what to do.
    pub message: String,
}

/// Noise over a trial: what disturbed the probe CPUs and threads. Null where not measured.
#[derive(Debug, Serialize)]
pub struct NoiseJson {
    /// Seconds covered.
    pub elapsed_s: f64,
    /// The probe CPUs.
    pub cpus: Vec<u32>,
    /// Steal share of the probe CPUs' time, 0..1.
    pub steal_fraction: Option<f64>,
    /// Hardware interrupts on the probe CPUs.
    pub interrupts: Option<u64>,
    /// Softirqs on the probe CPUs.
    pub softirqs: Option<u64>,
    /// Busy time of the probe CPUs not spent by probe threads, 0..1 (10 ms ticks).
    pub foreign_cpu_fraction: Option<f64>,
    /// Probe threads' time waiting for their CPU, seconds (summed over threads).
    pub runqueue_wait_s: Option<f64>,
    /// Involuntary context switches of the probe threads.
    pub involuntary_switches: Option<u64>,
    /// Migrations of the probe threads.
    pub migrations: Option<u64>,
    /// Mean probe CPU frequency, MHz, where exposed.
    pub cpu_mhz: Option<f64>,
    /// Monitors that could not read, and why.
    pub unavailable: Vec<String>,
}

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
        unavailable: n.unavailable.clone(),
    }
}

/// The run's settings.
#[derive(Debug, Serialize)]
pub struct SettingsJson {
    /// Probe names.
    pub probes: Vec<String>,
    /// --param KEY=VALUE, as given.
    pub params: BTreeMap<String, String>,
    /// Rounds asked for.
    pub rounds: u32,
    /// Measuring time per trial, seconds.
    pub duration_s: f64,
    /// Reporting interval, seconds.
    pub interval_s: f64,
    /// --cpus, empty when the agent placed threads.
    pub cpus: Vec<u32>,
    /// --tune: hosts tuned before the run, restored after.
    pub tune: bool,
    /// --unpinned: probe threads not pinned (a baseline for placement).
    pub unpinned: bool,
    /// What was measured: name, probe and parameters of each variant.
    pub variants: Vec<crate::schedule::VariantSpec>,
    /// Warm-up rounds (run first, left out of summaries).
    pub warmup_rounds: u32,
    /// Seed of the randomized interleaved trial order (RMIT).
    pub seed: u64,
    /// Hosts waited for each other at round boundaries (false with --no-round-sync).
    pub round_sync: bool,
}

/// A host and its fingerprint.
#[derive(Debug, Serialize)]
pub struct HostJson {
    /// HOST:PORT of its agent.
    pub address: String,
    /// "local" or "remote".
    pub kind: &'static str,
    /// The agent's version.
    pub agent_version: String,
    /// What the machine is.
    pub fingerprint: FingerprintJson,
    /// Host controls applied for the run (`--tune`), empty otherwise.
    pub tuning: Vec<ControlJson>,
}

/// One host control's outcome.
#[derive(Debug, Serialize)]
pub struct ControlJson {
    /// "irq_affinity", "irqbalance", "governor", "aslr", "thp", "drop_caches".
    pub control: String,
    /// The file, IRQ or process.
    pub target: String,
    /// "applied", "skipped" or "failed".
    pub outcome: &'static str,
    /// What holds now, why it was skipped, or the error.
    pub detail: String,
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

/// The fingerprint, as GetHost gave it. Unknown values are null, never zero.
#[derive(Debug, Serialize)]
pub struct FingerprintJson {
    /// vendor_id.
    pub cpu_vendor: Option<String>,
    /// model name.
    pub cpu_model_name: Option<String>,
    /// cpu family.
    pub cpu_family: Option<u32>,
    /// model.
    pub cpu_model: Option<u32>,
    /// stepping.
    pub cpu_stepping: Option<u32>,
    /// microcode revision.
    pub cpu_microcode: Option<String>,
    /// Online logical CPUs.
    pub logical_cpus: u32,
    /// Their ids.
    pub online_cpus: Vec<u32>,
    /// Kernel release.
    pub kernel_release: Option<String>,
    /// Current clocksource.
    pub clocksource: Option<String>,
    /// Host name.
    pub hostname: Option<String>,
    /// What could not be read, and why.
    pub unreadable: Vec<String>,
    /// CPU feature flags.
    pub cpu_flags: Vec<String>,
    /// Sockets, cores, SMT, NUMA nodes, caches.
    pub topology: Option<pb::Topology>,
    /// Kernel settings that change measurements.
    pub kernel: Option<pb::KernelSettings>,
    /// Network interfaces.
    pub nics: Vec<pb::Nic>,
    /// Block devices.
    pub block_devices: Vec<pb::BlockDevice>,
    /// NIC queue interrupts and the CPUs that serviced them.
    pub nic_queues: Vec<pb::NicQueue>,
    /// Each CPU's role for placement.
    pub cpu_roles: Vec<pb::CpuRole>,
    /// Host controls available to `prepare`.
    pub controls: Vec<pb::ControlAvailability>,
    /// EC2 identity; null off EC2.
    pub instance: Option<pb::InstanceIdentity>,
    /// Steal share of all CPU time since boot.
    pub steal_fraction_since_boot: Option<f64>,
}

/// One trial.
#[derive(Debug, Serialize)]
pub struct TrialJson {
    /// Probe name.
    pub probe: String,
    /// Variant name: the probe's in `run`, "A" or "B" in `compare`.
    pub variant: String,
    /// A warm-up trial, left out of summaries and verdicts.
    pub warmup: bool,
    /// HOST:PORT of the agent that ran it.
    pub host: String,
    /// HOST:PORT of the peer agent that served a network probe's other end.
    pub peer: Option<String>,
    /// Round, from 1.
    pub round: u32,
    /// The agent's trial id.
    pub trial_id: String,
    /// Measuring start, RFC 3339 UTC with nanoseconds.
    pub started_at: String,
    /// Measured time, seconds.
    pub duration_s: f64,
    /// True when stopped early.
    pub cancelled: bool,
    /// Parameters after the agent's defaults.
    pub params: BTreeMap<String, String>,
    /// Where the probe threads ran.
    pub placement: Option<PlacementJson>,
    /// Intervals reported.
    pub intervals: u32,
    /// Metrics.
    pub metrics: Vec<MetricJson>,
    /// What disturbed the trial.
    pub noise: Option<NoiseJson>,
}

/// Where each thread ran, planned and read back.
#[derive(Debug, Serialize)]
pub struct PlacementJson {
    /// "explicit" or "quiet-first".
    pub policy: String,
    /// CPUs of the agent's own threads.
    pub housekeeping_cpus: Vec<u32>,
    /// One per probe thread.
    pub threads: Vec<ThreadJson>,
    /// True when every thread's read-back affinity is exactly its planned CPU and it was seen
    /// running there.
    pub matches_plan: bool,
    /// The planner's compromises, e.g. "no quiet CPU: thread 0 on CPU 1, which services ...".
    pub notes: Vec<String>,
    /// True when two probe threads share a CPU.
    pub shares_cpus: bool,
    /// Network probes: where the peer's throughput connections ran, each moved to the CPU
    /// that handled its flow's packets.
    pub peer_flow_cpus: Vec<PeerFlowCpuJson>,
}

/// How many of a trial's flows the peer served on one CPU.
#[derive(Debug, Serialize)]
pub struct PeerFlowCpuJson {
    /// The CPU.
    pub cpu: u32,
    /// Flows served there.
    pub flows: u64,
}

/// One probe thread's placement.
#[derive(Debug, Serialize)]
pub struct ThreadJson {
    /// Thread index.
    pub thread: u32,
    /// Planned CPU.
    pub planned_cpu: u32,
    /// sched_getaffinity after pinning.
    pub affinity_cpus: Vec<u32>,
    /// sched_getcpu when measuring began.
    pub observed_cpu: u32,
}

/// One metric of a trial. For a distribution (a histogram) the statistics describe its
/// samples; for a rate, they describe the per-interval values. Absent statistics are null.
#[derive(Debug, Serialize)]
pub struct MetricJson {
    /// e.g. "events_per_sec", "event_latency".
    pub name: String,
    /// e.g. "events/s", "ns".
    pub unit: String,
    /// The trial's figure: the whole-trial rate, or a distribution's mean.
    pub value: Option<f64>,
    /// "histogram" or "intervals": what count..p999 describe.
    pub stats_of: &'static str,
    /// Number of samples (histogram) or intervals.
    pub count: u64,
    /// Mean.
    pub mean: Option<f64>,
    /// Standard deviation (population for histograms, sample for intervals).
    pub stdev: Option<f64>,
    /// Minimum.
    pub min: Option<f64>,
    /// Maximum.
    pub max: Option<f64>,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// 99.9th percentile.
    pub p999: Option<f64>,
    /// Samples clamped to the histogram's range.
    pub clamped: u64,
    /// Samples lost.
    pub dropped: u64,
    /// Base64 of HdrHistogram V2 + DEFLATE bytes; null for a rate.
    pub histogram: Option<String>,
}

/// Per probe and metric, the trials' values summarized.
#[derive(Debug, Serialize)]
pub struct SummaryJson {
    /// Variant name (the probe's name in `run`).
    pub variant: String,
    /// Probe name.
    pub probe: String,
    /// Metric name.
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// Trials with a value.
    pub n: usize,
    /// Mean of the trials' values.
    pub mean: f64,
    /// Median of the trials' values.
    pub median: f64,
    /// Sample standard deviation; null below 2 trials.
    pub stdev: Option<f64>,
    /// stdev / mean; null below 2 trials.
    pub cv: Option<f64>,
    /// Smallest trial value.
    pub min: f64,
    /// Largest trial value.
    pub max: f64,
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
            })
            .collect(),
        trials: run.trials.iter().map(|t| trial(run, t)).collect(),
        summary: summary(&run.trials),
        warnings: crate::warnings::run_warnings(run)
            .into_iter()
            .map(|w| WarningJson {
                message: w.to_string(),
                warning: w,
            })
            .collect(),
        fleet: run.fleet.clone(),
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
