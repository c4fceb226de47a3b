//! The one figure of each trial that verdicts compare: for exec trials the time per invocation
//! (`--figure`), for http trials a percentile of the request latency or the server's CPU time
//! per request (`--figure p50|p99|server-cpu`), for other probes a chosen metric or the
//! variant's headline (its first metric with a trial value, e.g. events_per_sec). Shared by
//! `compare`, `compare --runs`, run plans' verdicts and the reports that draw them.

use quietbench_proto::metrics;
use quietbench_stats::Direction;

use super::{RunRecord, TrialRecord};

/// The variant name of a trial that times A and B in pairs.
pub const PAIRED_VARIANT: &str = "A+B";

/// How A and B take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interleave {
    /// Every trial runs A and B back to back, in a random order per pair (the default): a
    /// host's fast and slow spells, which last hundreds of milliseconds, hit both alike.
    #[default]
    Invocations,
    /// Separate trials of A and B, in a random order every round (RMIT).
    Trials,
    /// Every trial runs A and B at the same time on two CPUs, sides swapped every pair (Bulej
    /// et al.'s duet): an interference burst hits both at once.
    Duet,
}

impl Interleave {
    /// Parses `invocations`, `trials` or `duet`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "invocations" => Some(Self::Invocations),
            "trials" => Some(Self::Trials),
            "duet" => Some(Self::Duet),
            _ => None,
        }
    }

    /// The word used in `--interleave` and the JSON verdict.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invocations => "invocations",
            Self::Trials => "trials",
            Self::Duet => "duet",
        }
    }
}

/// Which figure of a trial the verdict compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrialFigure {
    /// The median wall time of the trial's invocations (the default). A trial of a CPU-bound
    /// command on a cloud VM holds a few invocations that a neighbour or the hypervisor slowed
    /// by half again; the mean carries them into the verdict, the median does not. On this
    /// project's 2-vCPU VM the per-round log-ratio of two identical commands had a standard
    /// deviation of 4.4% with trial means and 0.56% with trial medians (docs/statistics.md).
    #[default]
    Median,
    /// The exact mean wall time per invocation (every slow invocation counts).
    Mean,
    /// The median CPU time (user + system, from wait4's rusage) of the trial's invocations.
    /// Where the hypervisor accounts steal (KVM, Xen, Nitro), time a neighbour stole is not
    /// charged to the process, so this figure ignores it; what it still sees is the command's
    /// own work at the CPU's speed of the moment (frequency, caches, an SMT sibling).
    Cpu,
    /// The median count of retired user-mode instructions (perf_event_open): almost no machine
    /// noise, but blind to what makes the same instructions slower (cache misses, frequency).
    /// Only where the CPU's performance counters are exposed.
    Instructions,
    /// `http`: the median latency of the trial's requests, each timed from when it was due
    /// (open loop), so that a server's stall counts for every request it delayed.
    LatencyP50,
    /// `http`: the 99th percentile of the same latencies: what the slowest 1% of users see.
    LatencyP99,
    /// `http`: the server's CPU time (user + system of its process tree) per request: the
    /// low-noise companion that neither the network nor the load generator moves.
    ServerCpu,
}

impl TrialFigure {
    /// The word used in `--figure`, the JSON verdict and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Median => "median",
            Self::Mean => "mean",
            Self::Cpu => "cpu",
            Self::Instructions => "instructions",
            Self::LatencyP50 => "p50",
            Self::LatencyP99 => "p99",
            Self::ServerCpu => "server-cpu",
        }
    }

    /// Parses `median` (or `wall`), `mean`, `cpu` or `instructions` (exec's), or `p50`, `p99`
    /// or `server-cpu` (http's).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "median" | "wall" => Some(Self::Median),
            "mean" => Some(Self::Mean),
            "cpu" => Some(Self::Cpu),
            "instructions" => Some(Self::Instructions),
            "p50" => Some(Self::LatencyP50),
            "p99" => Some(Self::LatencyP99),
            "server-cpu" => Some(Self::ServerCpu),
            _ => None,
        }
    }

    /// The probe whose trials this figure reads: "exec" or "http" (whose figures `tcp` trials
    /// give too: the same load loop, the same metrics).
    pub fn probe(self) -> &'static str {
        match self {
            Self::LatencyP50 | Self::LatencyP99 | Self::ServerCpu => "http",
            _ => "exec",
        }
    }

    /// The figure a trial of `probe` is judged on when this one is asked for: this one where it
    /// is that probe's, else that probe's default (exec: the median wall time; http and tcp:
    /// the p50 latency), and `None` for a probe without figures of its own (its headline metric
    /// counts). A plan that mixes exec and http variants thus judges each on its own kind; tcp
    /// trials are judged as http's, on the same latency and server-CPU figures.
    pub fn for_probe(self, probe: &str) -> Option<Self> {
        let probe = if probe == "tcp" { "http" } else { probe };
        match probe {
            _ if probe == self.probe() => Some(self),
            "exec" => Some(Self::Median),
            "http" => Some(Self::LatencyP50),
            _ => None,
        }
    }

    /// The exec parameters this figure needs (instructions must be counted).
    pub fn exec_params(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Instructions => &[("counters", "instructions")],
            _ => &[],
        }
    }

    /// The name and unit of the figure in reports and `compare --runs`.
    pub fn name_and_unit(self) -> (&'static str, &'static str) {
        match self {
            Self::Median => ("median_wall_time_per_invocation", "ns"),
            Self::Mean => ("mean_wall_time_per_invocation", "ns"),
            Self::Cpu => ("median_cpu_time_per_invocation", "ns"),
            Self::Instructions => ("median_instructions_per_invocation", "instructions"),
            Self::LatencyP50 => ("request_latency_p50", "ns"),
            Self::LatencyP99 => ("request_latency_p99", "ns"),
            Self::ServerCpu => (metrics::SERVER_CPU_PER_REQUEST, "ns"),
        }
    }

    /// The per-pair B/A ratio histograms of each turn (A first, B first), where the probe
    /// splits them (wall and CPU time, from this release on).
    fn turn_histograms(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Median | Self::Mean => Some((
                metrics::B_OVER_A_WALL_PPM_A_FIRST,
                metrics::B_OVER_A_WALL_PPM_B_FIRST,
            )),
            Self::Cpu => Some((
                metrics::B_OVER_A_CPU_PPM_A_FIRST,
                metrics::B_OVER_A_CPU_PPM_B_FIRST,
            )),
            _ => None,
        }
    }

    /// The per-invocation histogram of A and the per-pair B/A ratio histogram it reads (exec's
    /// figures; http's are never paired).
    fn histograms(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Median | Self::Mean => Some((metrics::WALL_TIME, metrics::B_OVER_A_WALL_PPM)),
            Self::Cpu => Some((metrics::CPU_TIME, metrics::B_OVER_A_CPU_PPM)),
            Self::Instructions => Some((metrics::INSTRUCTIONS, metrics::B_OVER_A_INSTRUCTIONS_PPM)),
            Self::LatencyP50 | Self::LatencyP99 | Self::ServerCpu => None,
        }
    }

    /// What the verdict compares, in words.
    pub fn describe(self, interleave: Interleave) -> String {
        // (the figure, and the figure as a ratio's adjective)
        let (what, ratio) = match self {
            Self::Median | Self::Mean => ("wall time", "wall-time"),
            Self::Cpu => ("CPU time (user + system)", "CPU-time (user + system)"),
            Self::Instructions => ("retired user-mode instructions", "retired-instructions"),
            Self::LatencyP50 | Self::LatencyP99 | Self::ServerCpu
                if interleave == Interleave::Duet =>
            {
                return format!(
                    "{} of A's and of B's requests in each trial, both servers running at once on \
                     their own CPUs and loaded alternately (the CPUs swapped every round)",
                    match self {
                        Self::LatencyP50 =>
                            "the median latency, each request from when it was due,",
                        Self::LatencyP99 =>
                            "the 99th-percentile latency, each request from when it \
                                             was due,",
                        _ => "the server's CPU time per request",
                    }
                );
            }
            Self::LatencyP50 => {
                return "the median latency of each trial's requests, each from when it was due"
                    .to_string();
            }
            Self::LatencyP99 => {
                return "the 99th-percentile latency of each trial's requests, each from when it \
                        was due"
                    .to_string();
            }
            Self::ServerCpu => {
                return "the server's CPU time (user + system of its process tree) per request \
                        of each trial"
                    .to_string();
            }
        };
        match (self, interleave) {
            (Self::Mean, Interleave::Trials) => {
                "the mean wall time per invocation of each trial".to_string()
            }
            (Self::Mean, _) => {
                "the mean wall times per invocation of A and of B over each trial's pairs"
                    .to_string()
            }
            (_, Interleave::Trials) => format!("the median {what} of each trial's invocations"),
            (_, Interleave::Invocations) => format!(
                "the median B/A {ratio} ratio of each trial's pairs (A and B back to back, in a \
                 random order per pair)"
            ),
            (_, Interleave::Duet) => format!(
                "the median B/A {ratio} ratio of each trial's pairs (A and B at the same time on \
                 two CPUs, sides swapped every pair)"
            ),
        }
    }
}

/// One trial's figure for the verdict, in ns (instructions: a count).
///
/// - Mean: the exact mean wall time per invocation, 1e9 / invocations per second of the
///   trial's own invocation time (the histogram's mean is rounded to 3 significant digits,
///   too coarse for sub-percent verdicts).
/// - Median, Cpu, Instructions, LatencyP50: the median of the trial's histogram of that
///   figure, at the middle of its bucket. The histogram keeps 3 significant digits: a bucket
///   spans at most 0.1% of its value, and A and B are read the same way, so the ratio's error
///   is well under that.
/// - LatencyP99: the 99th percentile of the trial's request latencies (its merged histogram,
///   at the middle of the bucket).
/// - ServerCpu: the trial's server CPU time per request, as the controller recorded it.
pub fn trial_time_ns(t: &TrialRecord, figure: TrialFigure) -> Option<f64> {
    match figure {
        TrialFigure::Mean => mean_time_ns(t, metrics::INVOCATIONS_PER_SEC),
        TrialFigure::LatencyP50 | TrialFigure::LatencyP99 | TrialFigure::ServerCpu => {
            server_time_ns(t, figure, Some)
        }
        _ => histogram_median(t, figure.histograms()?.0),
    }
}

/// A server figure of a trial, read from the metrics `named` gives for the unprefixed names:
/// server A's (the names themselves) or a duet's server B's (`metrics::duet_b`).
fn server_time_ns(
    t: &TrialRecord,
    figure: TrialFigure,
    named: fn(&'static str) -> Option<&'static str>,
) -> Option<f64> {
    match figure {
        TrialFigure::LatencyP50 => histogram_median(t, named(metrics::REQUEST_LATENCY)?),
        TrialFigure::LatencyP99 => {
            let hist = histogram(t, named(metrics::REQUEST_LATENCY)?)?;
            (!hist.is_empty()).then(|| hist.median_equivalent(hist.value_at_quantile(0.99)) as f64)
        }
        TrialFigure::ServerCpu => {
            let name = named(metrics::SERVER_CPU_PER_REQUEST)?;
            t.metrics
                .iter()
                .find(|m| m.name == name)?
                .value
                .filter(|v| *v > 0.0)
        }
        _ => None,
    }
}

/// A and B's figures of a trial that timed them in pairs, in ns (instructions: a count).
///
/// - Median, Cpu, Instructions: A's median, and B's as A's times the median per-pair B/A
///   ratio. The ratio of the two is then the median pair ratio, which a spell that slows one
///   pair in twenty does not move; B's figure is an estimate of B's at A's conditions.
/// - Mean: the exact mean wall time per invocation of each.
pub fn paired_times_ns(t: &TrialRecord, figure: TrialFigure) -> Option<(f64, f64)> {
    match figure {
        // Servers A and B of an `http` duet trial (both loaded at once): each one's own figure.
        TrialFigure::LatencyP50 | TrialFigure::LatencyP99 | TrialFigure::ServerCpu => Some((
            server_time_ns(t, figure, Some)?,
            server_time_ns(t, figure, metrics::duet_b)?,
        )),
        TrialFigure::Mean => Some((
            mean_time_ns(t, metrics::INVOCATIONS_PER_SEC)?,
            mean_time_ns(t, metrics::B_INVOCATIONS_PER_SEC)?,
        )),
        _ => {
            let (own, ratio) = figure.histograms()?;
            let a = histogram_median(t, own)?;
            let ratio = turn_balanced_ratio(t, figure)
                .or_else(|| ratio_median_of(histogram(t, ratio)?))?
                / 1e6;
            Some((a, a * ratio))
        }
    }
}

/// The pair ratio weighing both turns alike: the geometric mean of the median B/A of the pairs
/// where A went first and of those where B did. A turn that favours whoever has it (a CPU of a
/// duet that is slower, the second command of a pair finding caches warm) moves the two
/// medians apart by the same factor in opposite directions, which cancels here; the median of
/// all pairs instead lands in one turn's cluster whenever their counts differ by one (an odd
/// number of pairs in a trial), and reads that turn's advantage as a difference. `None` for a
/// trial without both turns (recorded before the split, or too short to hold one of each).
fn turn_balanced_ratio(t: &TrialRecord, figure: TrialFigure) -> Option<f64> {
    let (a_first, b_first) = figure.turn_histograms()?;
    let a_first = ratio_median_of(histogram(t, a_first)?)?;
    let b_first = ratio_median_of(histogram(t, b_first)?)?;
    Some((a_first * b_first).sqrt())
}

/// 1e9 / a rate of invocations per second: the exact mean time per invocation.
fn mean_time_ns(t: &TrialRecord, rate_metric: &str) -> Option<f64> {
    let rate = t.metrics.iter().find(|m| m.name == rate_metric)?.value?;
    (rate > 0.0).then(|| 1e9 / rate)
}

/// A metric's trial histogram.
fn histogram<'t>(t: &'t TrialRecord, metric: &str) -> Option<&'t hdrhistogram::Histogram<u64>> {
    Some(
        &t.metrics
            .iter()
            .find(|m| m.name == metric)?
            .histogram
            .as_ref()?
            .hist,
    )
}

/// The median of a metric's trial histogram (see [`histogram_median_of`]).
fn histogram_median(t: &TrialRecord, metric: &str) -> Option<f64> {
    histogram_median_of(histogram(t, metric)?)
}

/// The sample median of a histogram's values, each read at the middle of its bucket: with an
/// even count, the mean of the two middle values. (HdrHistogram's `value_at_quantile(0.5)`
/// returns the lower of the two; a trial holds 5 to 20 pairs, and always taking the lower
/// middle value biased B/A ratios low by about 0.2%, enough to fail A/A runs.)
pub fn histogram_median_of(hist: &hdrhistogram::Histogram<u64>) -> Option<f64> {
    middle_values(hist).map(|(low, high)| (low + high) / 2.0)
}

/// The median of a histogram of B/A ratios: with an even count, the geometric mean of the two
/// middle values, so that the median of the A/B ratios is exactly its reciprocal. The
/// arithmetic mean is not: it leans towards the larger ratio, and a turn's few pairs (often 2
/// or 4 in a short trial) with widely spread ratios read B slower in both turns. Under cgroup
/// CPU-quota spells, where a throttled pair's ratio can be 3 or 1/3, that read an A/A's pairs
/// +3.0% (standard error 0.9%, 30 of 40 runs above 1; docs/statistics.md §1c).
fn ratio_median_of(hist: &hdrhistogram::Histogram<u64>) -> Option<f64> {
    middle_values(hist).map(|(low, high)| (low * high).sqrt())
}

/// A histogram's two middle values (the same one twice for an odd count), each read at the
/// middle of its bucket.
fn middle_values(hist: &hdrhistogram::Histogram<u64>) -> Option<(f64, f64)> {
    let n = hist.len();
    if n == 0 {
        return None;
    }
    // 1-based ranks of the middle values (equal for odd n).
    let (low_rank, high_rank) = (n.div_ceil(2), n / 2 + 1);
    let mut seen = 0;
    let mut low = None;
    for v in hist.iter_recorded() {
        seen += v.count_at_value();
        let mid = hist.median_equivalent(v.value_iterated_to()) as f64;
        if low.is_none() && seen >= low_rank {
            low = Some(mid);
        }
        if seen >= high_rank {
            return low.map(|l| (l, mid));
        }
    }
    low.map(|l| (l, l))
}

/// One counted trial's figure.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialValue {
    /// The variant; trials that timed A and B in pairs give one value for "A" and one for "B".
    pub variant: String,
    /// The agent's address: the host within one run.
    pub address: String,
    /// The machine across runs: its host name, or the agent's address where it has none (a
    /// local agent listens on a fresh port every run, so its address does not name the machine).
    pub machine: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// The round.
    pub round: u32,
    /// The metric's name.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// The value.
    pub value: f64,
}

/// Whether larger or smaller values of a metric are better, from its unit: rates ("events/s",
/// "MB/s", "invocations/CPU-s", "IOPS") are higher-is-better, times ("ns") lower-is-better;
/// and instruction counts lower-is-better; anything else (ppm ratios, other counts) has no
/// direction to judge.
pub fn direction_of_unit(unit: &str) -> Option<Direction> {
    if unit == "ns" || unit == "instructions" {
        Some(Direction::LowerIsBetter)
    } else if unit.contains("/s") || unit.ends_with("-s") || unit.eq_ignore_ascii_case("iops") {
        Some(Direction::HigherIsBetter)
    } else {
        None
    }
}

/// Every counted (not warm-up, not cancelled) trial's figure, in the order they ran: exec and
/// http trials give `figure` (or their probe's default, see [`TrialFigure::for_probe`]) unless
/// a metric is named.
pub fn trial_values(run: &RunRecord, metric: Option<&str>, figure: TrialFigure) -> Vec<TrialValue> {
    let mut out = Vec::new();
    for t in run.trials.iter().filter(|t| !t.warmup && !t.cancelled) {
        let Some(host) = run.hosts.get(t.host) else {
            continue;
        };
        let cpu_model = host
            .fingerprint
            .cpu
            .as_ref()
            .map(|c| c.model_name.clone())
            .unwrap_or_default();
        let name = if host.fingerprint.hostname.is_empty() {
            host.address.clone()
        } else {
            host.fingerprint.hostname.clone()
        };
        let value = |variant: &str, metric: &str, unit: &str, value: f64| TrialValue {
            variant: variant.to_string(),
            address: host.address.clone(),
            machine: name.clone(),
            cpu_model: cpu_model.clone(),
            round: t.round,
            metric: metric.to_string(),
            unit: unit.to_string(),
            value,
        };
        if let Some(figure) = figure.for_probe(&t.probe).filter(|_| metric.is_none()) {
            let (name, unit) = figure.name_and_unit();
            if t.variant == PAIRED_VARIANT {
                if let Some((a, b)) = paired_times_ns(t, figure) {
                    out.push(value("A", name, unit, a));
                    out.push(value("B", name, unit, b));
                }
            } else if let Some(v) = trial_time_ns(t, figure) {
                out.push(value(&t.variant, name, unit, v));
            }
            continue;
        }
        let chosen = match metric {
            Some(name) => t
                .metrics
                .iter()
                .find(|m| m.name == name && m.value.is_some()),
            None => t
                .metrics
                .iter()
                .find(|m| m.value.is_some() && m.histogram.is_none())
                .or_else(|| t.metrics.iter().find(|m| m.value.is_some())),
        };
        if let Some(m) = chosen
            && let Some(v) = m.value
        {
            out.push(value(&t.variant, &m.name, &m.unit, v));
        }
    }
    out
}

/// The statistics crate's observations of `baseline` (A) and `candidate` (B), paired by agent
/// and round; other variants are left out.
pub fn stats_observations(
    values: &[TrialValue],
    baseline: &str,
    candidate: &str,
) -> Vec<quietbench_stats::Observation> {
    values
        .iter()
        .filter_map(|v| {
            let variant = if v.variant == baseline {
                quietbench_stats::Arm::A
            } else if v.variant == candidate {
                quietbench_stats::Arm::B
            } else {
                return None;
            };
            Some(quietbench_stats::Observation {
                host: v.address.clone(),
                cpu_model: v.cpu_model.clone(),
                round: v.round,
                arm: variant,
                value: v.value,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
