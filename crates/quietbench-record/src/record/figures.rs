//! The one figure of each trial that verdicts compare: for exec trials the time per invocation
//! (`--figure`), for other probes a chosen metric or the variant's headline (its first metric
//! with a trial value, e.g. events_per_sec). Shared by `compare`, `compare --runs`, run plans'
//! verdicts and the reports that draw them.

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
}

impl TrialFigure {
    /// The word used in `--figure`, the JSON verdict and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Median => "median",
            Self::Mean => "mean",
            Self::Cpu => "cpu",
            Self::Instructions => "instructions",
        }
    }

    /// Parses `median` (or `wall`), `mean`, `cpu` or `instructions`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "median" | "wall" => Some(Self::Median),
            "mean" => Some(Self::Mean),
            "cpu" => Some(Self::Cpu),
            "instructions" => Some(Self::Instructions),
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
            Self::Instructions => None,
        }
    }

    /// The per-invocation histogram of A and the per-pair B/A ratio histogram it reads.
    fn histograms(self) -> (&'static str, &'static str) {
        match self {
            Self::Median | Self::Mean => (metrics::WALL_TIME, metrics::B_OVER_A_WALL_PPM),
            Self::Cpu => (metrics::CPU_TIME, metrics::B_OVER_A_CPU_PPM),
            Self::Instructions => (metrics::INSTRUCTIONS, metrics::B_OVER_A_INSTRUCTIONS_PPM),
        }
    }

    /// What the verdict compares, in words.
    pub fn describe(self, interleave: Interleave) -> String {
        // (the figure, and the figure as a ratio's adjective)
        let (what, ratio) = match self {
            Self::Median | Self::Mean => ("wall time", "wall-time"),
            Self::Cpu => ("CPU time (user + system)", "CPU-time (user + system)"),
            Self::Instructions => ("retired user-mode instructions", "retired-instructions"),
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
/// - Median, Cpu, Instructions: the median of the trial's histogram of that figure, at the
///   middle of its bucket. The histogram keeps 3 significant digits: a bucket spans at most
///   0.1% of its value, and A and B are read the same way, so the ratio's error is well under
///   that.
pub fn trial_time_ns(t: &TrialRecord, figure: TrialFigure) -> Option<f64> {
    match figure {
        TrialFigure::Mean => mean_time_ns(t, metrics::INVOCATIONS_PER_SEC),
        _ => histogram_median(t, figure.histograms().0),
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
        TrialFigure::Mean => Some((
            mean_time_ns(t, metrics::INVOCATIONS_PER_SEC)?,
            mean_time_ns(t, metrics::B_INVOCATIONS_PER_SEC)?,
        )),
        _ => {
            let (own, ratio) = figure.histograms();
            let a = histogram_median(t, own)?;
            let ratio =
                turn_balanced_ratio(t, figure).or_else(|| histogram_median(t, ratio))? / 1e6;
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
    let a_first = histogram_median(t, a_first)?;
    let b_first = histogram_median(t, b_first)?;
    Some((a_first * b_first).sqrt())
}

/// 1e9 / a rate of invocations per second: the exact mean time per invocation.
fn mean_time_ns(t: &TrialRecord, rate_metric: &str) -> Option<f64> {
    let rate = t.metrics.iter().find(|m| m.name == rate_metric)?.value?;
    (rate > 0.0).then(|| 1e9 / rate)
}

/// The median of a metric's trial histogram (see [`histogram_median_of`]).
fn histogram_median(t: &TrialRecord, metric: &str) -> Option<f64> {
    let hist = &t
        .metrics
        .iter()
        .find(|m| m.name == metric)?
        .histogram
        .as_ref()?
        .hist;
    histogram_median_of(hist)
}

/// The sample median of a histogram's values, each read at the middle of its bucket: with an
/// even count, the mean of the two middle values. (HdrHistogram's `value_at_quantile(0.5)`
/// returns the lower of the two; a trial holds 5 to 20 pairs, and always taking the lower
/// middle value biased B/A ratios low by about 0.2%, enough to fail A/A runs.)
pub fn histogram_median_of(hist: &hdrhistogram::Histogram<u64>) -> Option<f64> {
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
            return low.map(|l| (l + mid) / 2.0);
        }
    }
    low
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

/// Every counted (not warm-up, not cancelled) trial's figure, in the order they ran.
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
        let (exec_figure, exec_unit) = figure.name_and_unit();
        if t.probe == "exec" && metric.is_none() {
            if t.variant == PAIRED_VARIANT {
                if let Some((a, b)) = paired_times_ns(t, figure) {
                    out.push(value("A", exec_figure, exec_unit, a));
                    out.push(value("B", exec_figure, exec_unit, b));
                }
            } else if let Some(v) = trial_time_ns(t, figure) {
                out.push(value(&t.variant, exec_figure, exec_unit, v));
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
mod tests {

    use super::*;

    fn trial_with_invocations(ms: &[u64]) -> TrialRecord {
        let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("histogram bounds");
        for v in ms {
            hist.record(v * 1_000_000).expect("in range");
        }
        let total_s: f64 = ms.iter().map(|v| *v as f64 / 1000.0).sum();
        let rate = ms.len() as f64 / total_s;
        let mut trial = crate::record::test_records::value_trial(
            ("exec", "A"),
            0,
            1,
            ("invocations_per_sec", "", rate),
        );
        trial.metrics.push(crate::record::MetricRecord {
            name: "wall_time".into(),
            unit: String::new(),
            value: None,
            interval_values: Vec::new(),
            histogram: Some(crate::record::HistogramRecord {
                hist,
                encoded: Vec::new(),
                clamped: 0,
                dropped: 0,
            }),
        });
        trial
    }

    #[test]
    fn the_median_figure_ignores_the_odd_slow_invocation_and_the_mean_does_not() {
        // Nine invocations of 47 ms and one a neighbour slowed to 85 ms.
        let t = trial_with_invocations(&[47, 47, 47, 47, 47, 85, 47, 47, 47, 47]);
        let median = trial_time_ns(&t, TrialFigure::Median).unwrap();
        let mean = trial_time_ns(&t, TrialFigure::Mean).unwrap();
        assert!((median / 47e6 - 1.0).abs() < 0.001, "median {median}");
        assert!((mean / 50.8e6 - 1.0).abs() < 1e-9, "mean {mean}");
        assert_eq!(
            trial_time_ns(&trial_with_invocations(&[]), TrialFigure::Median),
            None
        );
        for f in [
            TrialFigure::Median,
            TrialFigure::Mean,
            TrialFigure::Cpu,
            TrialFigure::Instructions,
        ] {
            assert_eq!(TrialFigure::parse(f.as_str()), Some(f));
        }
        assert_eq!(TrialFigure::parse("p99"), None);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_two_middle_values() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 3).unwrap();
        for v in [1_000_000, 2_000_000, 3_000_000, 40_000_000] {
            h.record(v).unwrap();
        }
        let m = histogram_median_of(&h).unwrap();
        assert!((m / 2.5e6 - 1.0).abs() < 0.001, "{m}");
        h.record(2_000_000).unwrap();
        let m = histogram_median_of(&h).unwrap();
        assert!((m / 2e6 - 1.0).abs() < 0.001, "{m}");
        let empty = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        assert_eq!(histogram_median_of(&empty), None);
    }

    #[test]
    fn directions_come_from_units() {
        let higher = Some(Direction::HigherIsBetter);
        assert_eq!(direction_of_unit("events/s"), higher);
        assert_eq!(direction_of_unit("invocations/CPU-s"), higher);
        assert_eq!(direction_of_unit("Gbit/s"), higher);
        assert_eq!(direction_of_unit("IOPS"), higher);
        assert_eq!(direction_of_unit("ns"), Some(Direction::LowerIsBetter));
        assert_eq!(direction_of_unit("ppm"), None);
        assert_eq!(direction_of_unit("%"), None);
    }

    fn push_histogram(trial: &mut TrialRecord, name: &str, values: &[u64]) {
        let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("histogram bounds");
        for v in values {
            hist.record(*v).expect("in range");
        }
        trial.metrics.push(crate::record::MetricRecord {
            name: name.into(),
            unit: String::new(),
            value: None,
            interval_values: Vec::new(),
            histogram: Some(crate::record::HistogramRecord {
                hist,
                encoded: Vec::new(),
                clamped: 0,
                dropped: 0,
            }),
        });
    }

    /// A duet A/A on two CPUs one of which is 5% slower: every pair's B/A is 1.05 when B ran on
    /// the slow CPU and 1/1.05 when A did. With 5 pairs of one turn and 4 of the other (a
    /// trial that ended after an odd pair), the median of all pairs is 1.05: a 5% difference
    /// between identical commands. Each turn's median, weighed alike, gives 1.
    #[test]
    fn a_turns_advantage_cancels_in_the_pair_ratio_however_many_pairs_each_turn_has() {
        let mut t = trial_with_invocations(&[100; 9]);
        let slow_b = 1_050_000;
        let slow_a = (1e12 / 1_050_000.0) as u64;
        let mut all = vec![slow_b; 5];
        all.extend([slow_a; 4]);
        push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM, &all);
        let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
        assert!(
            (b / a / 1.05 - 1.0).abs() < 0.001,
            "without turns: {}",
            b / a
        );

        push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM_A_FIRST, &[slow_b; 5]);
        push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM_B_FIRST, &[slow_a; 4]);
        let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
        assert!((b / a - 1.0).abs() < 0.001, "with turns: {}", b / a);

        // A real 2% difference under the same asymmetry is kept whole.
        let mut t = trial_with_invocations(&[100; 9]);
        push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM, &[1]);
        push_histogram(
            &mut t,
            metrics::B_OVER_A_WALL_PPM_A_FIRST,
            &[(1.02 * 1.05e6) as u64; 5],
        );
        push_histogram(
            &mut t,
            metrics::B_OVER_A_WALL_PPM_B_FIRST,
            &[(1.02e6 / 1.05) as u64; 4],
        );
        let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
        assert!((b / a / 1.02 - 1.0).abs() < 0.001, "{}", b / a);

        // The CPU figure has turns too; instructions do not, and read all pairs.
        push_histogram(&mut t, metrics::CPU_TIME, &[100_000_000]);
        push_histogram(&mut t, metrics::B_OVER_A_CPU_PPM, &[1_010_000]);
        let (a, b) = paired_times_ns(&t, TrialFigure::Cpu).unwrap();
        assert!((b / a / 1.01 - 1.0).abs() < 0.001, "{}", b / a);
    }
}
