//! The JSON report's types: its schema, field by field (docs/json-report.md). [`super::build`]
//! fills them from a run's record.

use std::collections::BTreeMap;

use quietbench_proto::v1 as pb;
use serde::Serialize;

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
    /// Per variant measured on two or more hosts: its headline metric per CPU model, the
    /// difference between models, the variance split and outlier hosts (empty otherwise).
    pub fleet_spread: Vec<quietbench_record::verdicts::spread::FleetSpread>,
    /// Each disk and network result against the cap that binds it (docs/caps.md).
    pub bottlenecks: Vec<quietbench_record::verdicts::binding::BindingCap>,
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
    pub warning: quietbench_record::warnings::Warning,
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
    /// EBS's NVMe statistics of a disk probe's volume: seconds demand spent over each limit
    /// (null where the device has none).
    pub ebs_exceeded_s: Option<EbsExceededJson>,
    /// ENA allowance counters' growth (packets EC2 shaped), null where no interface is ENA.
    pub ena_allowance_exceeded: Option<EnaExceededJson>,
    /// Monitors that could not read, and why.
    pub unavailable: Vec<String>,
}

/// Seconds during which EBS saw demand over a limit.
#[derive(Debug, Serialize)]
pub struct EbsExceededJson {
    /// The volume's IOPS.
    pub volume_iops: f64,
    /// The volume's throughput.
    pub volume_throughput: f64,
    /// The instance's EBS IOPS.
    pub instance_iops: f64,
    /// The instance's EBS throughput.
    pub instance_throughput: f64,
}

/// Packets EC2 shaped, per ENA allowance.
#[derive(Debug, Serialize)]
pub struct EnaExceededJson {
    /// Inbound bandwidth.
    pub bw_in: u64,
    /// Outbound bandwidth.
    pub bw_out: u64,
    /// Packets per second.
    pub pps: u64,
    /// Connection tracking.
    pub conntrack: u64,
    /// Link-local services.
    pub linklocal: u64,
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
    pub variants: Vec<quietbench_record::schedule::VariantSpec>,
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
    /// Tuning steps applied for the run (`--tune`), empty otherwise.
    pub tuning: Vec<ControlJson>,
    /// The instance's and its volumes' caps from the EC2 API (docs/caps.md); null when not
    /// looked up.
    pub caps: Option<quietbench_record::limits::HostCaps>,
}

/// One tuning step's outcome.
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
    /// Tuning steps available to `tune`.
    pub controls: Vec<pb::ControlAvailability>,
    /// Which of EC2's device counters the noise monitors can read (EBS NVMe statistics, ENA
    /// allowances).
    pub monitors: Vec<pb::MonitorAvailability>,
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
    /// The disk (kernel name) that held a disk probe's target.
    pub block_device: Option<String>,
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
    /// "explicit", "quiet-first", "rss" or "same-machine" (the proto's Placement.policy).
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
