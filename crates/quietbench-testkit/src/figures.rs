//! What a fake trial reports: the figures a test chose, as the metrics a real probe would send.
//! A test gives each host a function from the trial it is asked for ([`Ask`]) to its figures
//! ([`Figure`]); the same question always gets the same answer, so the truth a test asserts
//! against is the numbers it put in.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use quietbench_proto::metrics;

/// The real agent's histogram bounds (quietbench-probe's histogram.rs: 1 ns to one hour,
/// 3 significant digits), so the bytes decode and merge exactly as a real agent's do.
pub const LOWEST: u64 = 1;
pub const HIGHEST: u64 = 3_600_000_000_000;
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The trial a fake host is asked to run.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The host's index in its fleet.
    pub host: usize,
    /// This host's trials before this one (warm-ups count): with one variant and no warm-up,
    /// the round, from 0.
    pub trial: u64,
    pub probe: &'a str,
    pub params: &'a HashMap<String, String>,
}

/// What one trial's figures are.
pub type FigureFn = dyn Fn(&Ask<'_>) -> Vec<Figure> + Send + Sync;

/// One metric of a fake trial.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub kind: Kind,
}

/// A metric's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// One value per interval and per trial (a rate).
    Value(f64),
    /// A histogram: `per_sec` values a second of trial (at least one an interval, and always
    /// an odd number, so the middle one is `median` exactly), spread evenly over
    /// `median × (1 ± spread)`.
    Distribution {
        median: f64,
        spread: f64,
        per_sec: f64,
    },
}

impl Figure {
    /// A rate or other single value.
    pub fn value(name: &str, unit: &str, value: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            kind: Kind::Value(value),
        }
    }

    /// A histogram whose median is `median` (see [`Kind::Distribution`]).
    pub fn distribution(name: &str, unit: &str, median: f64, spread: f64, per_sec: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            kind: Kind::Distribution {
                median,
                spread,
                per_sec,
            },
        }
    }

    /// Records this distribution's values for `secs` of trial into `hist`; nothing for values.
    pub(crate) fn fill(&self, hist: &mut Histogram<u64>, secs: f64) {
        let Kind::Distribution {
            median,
            spread,
            per_sec,
        } = self.kind
        else {
            return;
        };
        let count = ((per_sec * secs).round() as u64).max(1) | 1;
        for j in 0..count {
            let q = (j as f64 + 0.5) / count as f64;
            let value = median * (1.0 + spread * (2.0 * q - 1.0));
            // Cannot fail: the value is clamped into the histogram's bounds.
            let _ = hist.record((value.round() as u64).clamp(LOWEST, HIGHEST));
        }
    }
}

/// The `exec` probe's metrics for a command whose invocations take `wall_ns` of wall time
/// (the median; ±1% around it) and `cpu_ns` of CPU time.
pub fn exec(wall_ns: f64, cpu_ns: f64) -> Vec<Figure> {
    let per_sec = 1e9 / wall_ns;
    vec![
        Figure::value(metrics::INVOCATIONS_PER_SEC, "invocations/s", per_sec),
        Figure::distribution(metrics::WALL_TIME, "ns", wall_ns, 0.01, per_sec),
        Figure::value("invocations_per_cpu_sec", "invocations/CPU-s", 1e9 / cpu_ns),
        Figure::distribution(metrics::CPU_TIME, "ns", cpu_ns, 0.01, per_sec),
    ]
}

/// One invocation's times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Invocation {
    pub wall_ns: f64,
    /// User + system CPU time.
    pub cpu_ns: f64,
}

/// The `exec` probe's metrics in pairs (`cmd_b` given), in the order the probe sends them:
/// A's and B's times (each ±1% around the median given) and each pair's B/A wall and CPU
/// ratios (±0.5% around B's over A's).
pub fn exec_pairs(a: Invocation, b: Invocation) -> Vec<Figure> {
    let pairs_per_sec = 1e9 / (a.wall_ns + b.wall_ns);
    let mut figures = Vec::new();
    let sides = [
        (
            a,
            [
                metrics::INVOCATIONS_PER_SEC,
                metrics::WALL_TIME,
                metrics::INVOCATIONS_PER_CPU_SEC,
                metrics::CPU_TIME,
            ],
        ),
        (
            b,
            [
                metrics::B_INVOCATIONS_PER_SEC,
                metrics::B_WALL_TIME,
                metrics::B_INVOCATIONS_PER_CPU_SEC,
                metrics::B_CPU_TIME,
            ],
        ),
    ];
    for (times, [rate, wall, cpu_rate, cpu]) in sides {
        figures.extend([
            Figure::value(rate, "invocations/s", 1e9 / times.wall_ns),
            Figure::distribution(wall, "ns", times.wall_ns, 0.01, pairs_per_sec),
            Figure::value(cpu_rate, "invocations/CPU-s", 1e9 / times.cpu_ns),
            Figure::distribution(cpu, "ns", times.cpu_ns, 0.01, pairs_per_sec),
        ]);
    }
    for (name, ratio) in [
        (metrics::B_OVER_A_WALL_PPM, b.wall_ns / a.wall_ns),
        (metrics::B_OVER_A_CPU_PPM, b.cpu_ns / a.cpu_ns),
    ] {
        figures.push(Figure::distribution(
            name,
            "ppm",
            ratio * 1e6,
            0.005,
            pairs_per_sec,
        ));
    }
    figures
}

/// A probe that counts events (e.g. `cpu.primes`): `per_sec` events a second, each taking
/// 1/`per_sec` (±1.5%).
pub fn events(per_sec: f64) -> Vec<Figure> {
    vec![
        Figure::value(metrics::EVENTS_PER_SEC, "events/s", per_sec),
        Figure::distribution(metrics::EVENT_LATENCY, "ns", 1e9 / per_sec, 0.015, per_sec),
    ]
}

/// SplitMix64's mixer (the workspace's one, in quietbench-stats): nearby numbers (a host's
/// index, a trial's number) to unrelated bits, for deterministic per-host and per-trial scatter.
pub fn splitmix64(x: u64) -> u64 {
    quietbench_stats::rng::mix(x)
}

/// A value in [0, 1) from 53 of `bits`.
pub fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw that `seed` fixes (Box-Muller over two SplitMix64 outputs): the
/// noise a test injects is the same on every run.
pub fn normal(seed: u64) -> f64 {
    let a = splitmix64(seed);
    let b = splitmix64(a);
    // 1 - u keeps the logarithm's argument in (0, 1].
    let u1 = 1.0 - unit_interval(a);
    let u2 = unit_interval(b);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_histogram() -> Histogram<u64> {
        Histogram::new_with_bounds(LOWEST, HIGHEST, SIGNIFICANT_DIGITS).unwrap()
    }

    #[test]
    fn a_distributions_median_is_the_one_given() {
        for (median, per_sec, secs) in [(5e8, 2.0, 1.0), (725_163.0, 1379.0, 0.5), (1e6, 0.1, 1.0)]
        {
            let f = Figure::distribution("x", "ns", median, 0.01, per_sec);
            let mut hist = new_histogram();
            for _ in 0..7 {
                f.fill(&mut hist, secs);
            }
            let got = hist.value_at_quantile(0.5) as f64;
            // 3 significant digits: within a bucket of the value.
            assert!((got - median).abs() <= median * 1e-3, "{median}: {got}");
            assert!(hist.max() as f64 <= median * 1.01 * 1.001);
        }
        let mut hist = new_histogram();
        Figure::value("x", "ns", 3.0).fill(&mut hist, 1.0);
        assert!(hist.is_empty());
    }

    #[test]
    fn paired_figures_carry_the_names_the_controller_reads() {
        let a = Invocation {
            wall_ns: 1e6,
            cpu_ns: 5e5,
        };
        let names: Vec<String> = exec_pairs(a, a).into_iter().map(|f| f.name).collect();
        for name in [
            metrics::INVOCATIONS_PER_SEC,
            metrics::WALL_TIME,
            metrics::CPU_TIME,
            metrics::B_INVOCATIONS_PER_SEC,
            metrics::B_WALL_TIME,
            metrics::B_CPU_TIME,
            metrics::B_OVER_A_WALL_PPM,
            metrics::B_OVER_A_CPU_PPM,
        ] {
            assert!(names.iter().any(|n| n == name), "{name}: {names:?}");
        }
    }

    #[test]
    fn every_figure_is_a_registered_metric_in_its_unit() {
        let a = Invocation {
            wall_ns: 1e6,
            cpu_ns: 5e5,
        };
        for figure in exec(1e6, 5e5)
            .into_iter()
            .chain(exec_pairs(a, a))
            .chain(events(1000.0))
        {
            let registered = metrics::lookup(&figure.name)
                .unwrap_or_else(|| panic!("{} is not registered", figure.name));
            assert_eq!(registered.unit, figure.unit, "{}", figure.name);
        }
    }

    #[test]
    fn normal_draws_are_fixed_by_their_seed_and_look_normal() {
        assert_eq!(normal(7), normal(7));
        let draws: Vec<f64> = (0..20_000).map(normal).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }
}
