//! The controller's one data model: the record of a run, built from agents' events as they
//! arrive or read back from the store, and the queries every reader of it shares
//! ([`queries`]: which trials count; [`figures`]: the one figure of each trial that verdicts
//! compare). Reports, warnings and verdicts read these; nothing here prints.

pub mod figures;
mod history;
pub mod queries;
#[cfg(any(test, feature = "test-records"))]
pub mod test_records;

pub use history::HistoryPoint;

use std::collections::BTreeMap;
use std::time::SystemTime;

use hdrhistogram::Histogram;
use quietbench_proto::histogram::decode_bounded;
use quietbench_proto::v1 as pb;

/// Where an agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// Started by this controller on this machine.
    Local,
    /// Given with --agent.
    Remote,
}

impl HostKind {
    /// The report's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
        }
    }
}

/// One agent's host.
#[derive(Debug, Clone)]
pub struct HostRecord {
    /// HOST:PORT of its agent.
    pub address: String,
    /// Local or remote.
    pub kind: HostKind,
    /// The agent's version.
    pub agent_version: String,
    /// What the machine is.
    pub fingerprint: pb::Fingerprint,
    /// Tuning steps applied before the run (`--tune`), empty otherwise.
    pub tuning: Vec<pb::ControlReport>,
    /// The instance's and its volumes' caps (EC2, with AWS credentials); `None` when not
    /// looked up (not on EC2, `--no-aws`, no credentials: see the fleet lines).
    pub caps: Option<crate::limits::HostCaps>,
}

/// How the run was asked for.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Probes, in the order given.
    pub probes: Vec<String>,
    /// --param values.
    pub params: BTreeMap<String, String>,
    /// Rounds.
    pub rounds: u32,
    /// Measuring time per trial, ms.
    pub duration_ms: u64,
    /// Reporting interval, ms.
    pub interval_ms: u64,
    /// --cpus, if given.
    pub cpus: Vec<u32>,
    /// --tune: hosts are tuned before and restored after.
    pub tune: bool,
    /// --unpinned: the scheduler places probe threads (a baseline for placement).
    pub unpinned: bool,
    /// What is measured, in the order given.
    pub variants: Vec<crate::schedule::VariantSpec>,
    /// Warm-up rounds before the measured ones.
    pub warmup: u32,
    /// The seed of the randomized interleaved order.
    pub seed: u64,
    /// Hosts wait for each other at round boundaries (the default), so a fleet-wide time
    /// effect hits every host alike; false with `--no-round-sync`.
    pub round_sync: bool,
    /// Set by `quietbench compare`: the figure of each trial its verdict compares
    /// (`--figure`), so a stored compare run is judged again exactly as it was. `None` for
    /// other runs.
    pub compare_figure: Option<figures::TrialFigure>,
    /// `run --figure` or a plan's `figure`: the figure exec trials (and, where it is one of
    /// theirs, http trials: [`figures::TrialFigure::for_probe`]) are judged and spread on
    /// (`None`: each probe's default, the median wall time or the p50 latency). The name is
    /// the store's column's, from before http had figures.
    pub exec_figure: Option<figures::TrialFigure>,
    /// Set by `quietbench capacity`: the SLO its search held every step to (`p99 < 20 ms`), so
    /// a stored search reads as one (its steps are no variants to judge against each other,
    /// and its curve draws the bound). `None` for other runs.
    pub capacity_slo: Option<String>,
}

/// One decoded histogram with its bookkeeping.
#[derive(Debug, Clone)]
pub struct HistogramRecord {
    /// Decoded.
    pub hist: Histogram<u64>,
    /// As received (HdrHistogram V2 + DEFLATE).
    pub encoded: Vec<u8>,
    /// Samples clamped into range.
    pub clamped: u64,
    /// Samples lost.
    pub dropped: u64,
}

/// One metric of one trial.
#[derive(Debug, Clone)]
pub struct MetricRecord {
    /// e.g. events_per_sec.
    pub name: String,
    /// e.g. events/s.
    pub unit: String,
    /// The trial's figure.
    pub value: Option<f64>,
    /// The same metric's value in each interval, in order.
    pub interval_values: Vec<f64>,
    /// The trial's distribution, where the metric has one.
    pub histogram: Option<HistogramRecord>,
}

/// One interval of a trial, as the agent streamed it.
#[derive(Debug, Clone)]
pub struct IntervalRecord {
    /// Index within the trial.
    pub index: u32,
    /// Start, ns since the epoch.
    pub start_unix_ns: u64,
    /// End, ns since the epoch.
    pub end_unix_ns: u64,
    /// Value metrics of the interval (rates), by name.
    pub values: Vec<(String, f64)>,
    /// Distribution metrics of the interval: name and HdrHistogram V2+DEFLATE bytes.
    pub histograms: Vec<(String, Vec<u8>)>,
    /// Noise during the interval.
    pub noise: Option<pb::NoiseSample>,
}

impl IntervalRecord {
    /// From the wire form.
    pub fn from_wire(i: &pb::Interval) -> Self {
        Self {
            index: i.index,
            start_unix_ns: i.start_unix_ns,
            end_unix_ns: i.end_unix_ns,
            values: i
                .metrics
                .iter()
                .filter(|m| m.histogram.is_none())
                .filter_map(|m| m.value.map(|v| (m.name.clone(), v)))
                .collect(),
            histograms: i
                .metrics
                .iter()
                .filter_map(|m| {
                    m.histogram
                        .as_ref()
                        .map(|h| (m.name.clone(), h.hdr_v2_deflate.clone()))
                })
                .collect(),
            noise: i.noise.clone(),
        }
    }
}

/// One finished trial.
#[derive(Debug, Clone)]
pub struct TrialRecord {
    /// Probe name.
    pub probe: String,
    /// The variant's name: the probe's name in `run`, "A" or "B" in `compare`.
    pub variant: String,
    /// A warm-up trial: stored, left out of summaries and verdicts.
    pub warmup: bool,
    /// Index into [`RunRecord::hosts`].
    pub host: usize,
    /// Round, from 1.
    pub round: u32,
    /// The agent's trial id.
    pub trial_id: String,
    /// Measuring start, ns since the epoch.
    pub start_unix_ns: u64,
    /// Measuring end, ns since the epoch.
    pub end_unix_ns: u64,
    /// Stopped early.
    pub cancelled: bool,
    /// Parameters after the agent's defaults.
    pub params: BTreeMap<String, String>,
    /// Where it ran.
    pub placement: Option<pb::Placement>,
    /// Intervals streamed.
    pub intervals: u32,
    /// Its metrics.
    pub metrics: Vec<MetricRecord>,
    /// Noise over the trial, where the agent sampled it.
    pub noise: Option<pb::NoiseSample>,
    /// The peer agent (HOST:PORT) of a network probe.
    pub peer: Option<String>,
    /// The disk (kernel name) that holds a disk probe's target, matched to its EBS volume.
    pub block_device: Option<String>,
    /// Every interval as streamed (for interval logs and charts over time).
    pub interval_records: Vec<IntervalRecord>,
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Unique id.
    pub run_id: String,
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended (set at the end, also on failure).
    pub finished_at: Option<SystemTime>,
    /// How it was asked for.
    pub settings: RunSettings,
    /// Every agent's host.
    pub hosts: Vec<HostRecord>,
    /// Finished trials, in the order they ran.
    pub trials: Vec<TrialRecord>,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
    /// Hosts that failed while the others went on, in the order they failed.
    pub host_failures: Vec<HostFailure>,
    /// The fleet's lines: what it is and how its hosts were obtained (empty for stored runs).
    pub fleet: Vec<String>,
}

impl RunRecord {
    /// A new, empty record of run `run_id`, started at `started_at`.
    pub fn new(run_id: String, started_at: SystemTime, settings: RunSettings) -> Self {
        Self {
            run_id,
            started_at,
            finished_at: None,
            settings,
            hosts: Vec::new(),
            trials: Vec::new(),
            error: None,
            host_failures: Vec::new(),
            fleet: Vec::new(),
        }
    }
}

/// A host that stopped measuring before its schedule was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFailure {
    /// Index into [`RunRecord::hosts`].
    pub host: usize,
    /// What went wrong, naming the agent.
    pub error: String,
}

/// The agent sent a histogram this controller cannot read.
#[derive(Debug, thiserror::Error)]
#[error("metric {metric}: the histogram cannot be decoded as HdrHistogram V2: {detail}")]
pub struct DecodeError {
    metric: String,
    detail: String,
}

fn decode(metric: &str, h: &pb::Histogram) -> Result<HistogramRecord, DecodeError> {
    let hist = decode_bounded(&h.hdr_v2_deflate).map_err(|e| DecodeError {
        metric: metric.to_string(),
        detail: e.to_string(),
    })?;
    Ok(HistogramRecord {
        hist,
        encoded: h.hdr_v2_deflate.clone(),
        clamped: h.clamped_count,
        dropped: h.dropped_count,
    })
}

/// Builds the metrics of a trial from its result and its intervals.
pub fn trial_metrics(
    result: &pb::ProbeResult,
    intervals: &[pb::Interval],
) -> Result<Vec<MetricRecord>, DecodeError> {
    result
        .metrics
        .iter()
        .map(|m| {
            let interval_values = intervals
                .iter()
                .filter_map(|i| i.metrics.iter().find(|im| im.name == m.name))
                .filter_map(|im| im.value)
                .collect();
            Ok(MetricRecord {
                name: m.name.clone(),
                unit: m.unit.clone(),
                value: m.value,
                interval_values,
                histogram: m
                    .histogram
                    .as_ref()
                    .map(|h| decode(&m.name, h))
                    .transpose()?,
            })
        })
        .collect()
}

/// A host's trials that a failed or interrupted run did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTrials {
    /// Index into [`RunRecord::hosts`].
    pub host: usize,
    /// The trials, in schedule order.
    pub trials: Vec<crate::schedule::PlannedTrial>,
    /// Why they are missing: the host's failure, or the run's error.
    pub reason: String,
}

/// Per host, the scheduled trials a run did not finish, with why; empty for a run that ended
/// without an error (an adaptive rule may stop a complete run early: nothing is missing then).
pub fn missing_trials(run: &RunRecord) -> Vec<MissingTrials> {
    if run.error.is_none() && run.host_failures.is_empty() {
        return Vec::new();
    }
    let s = &run.settings;
    let schedule = crate::schedule::rmit(
        s.variants.len(),
        run.hosts.len(),
        s.rounds,
        s.warmup,
        s.seed,
    );
    let finished = |p: &crate::schedule::PlannedTrial| {
        let name = &s.variants[p.variant].name;
        run.trials
            .iter()
            .any(|t| t.host == p.host && t.round == p.round && &t.variant == name)
    };
    (0..run.hosts.len())
        .filter_map(|host| {
            let trials: Vec<_> = schedule
                .iter()
                .filter(|p| p.host == host && !finished(p))
                .copied()
                .collect();
            if trials.is_empty() {
                return None;
            }
            let reason = run
                .host_failures
                .iter()
                .find(|f| f.host == host)
                .map(|f| f.error.clone())
                .or_else(|| run.error.clone())
                .unwrap_or_default();
            Some(MissingTrials {
                host,
                trials,
                reason,
            })
        })
        .collect()
}
