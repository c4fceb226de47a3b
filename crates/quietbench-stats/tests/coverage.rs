//! Coverage of the verdict's interval on a bursty host, with a known truth (issue 28).
//!
//! A/A runs on one host: every round's log-ratio has true mean 0 (B/A = 1) and noise
//! e_t + s_t·b, where
//! - e is a stationary first-order autoregression with lag-1 correlation φ and SD 1%, and
//! - s_t ∈ {−1, 0, +1} is a burst: a two-state Markov chain that switches on with probability
//!   0.05 per round and off with 0.3 (spells of 3.3 rounds on average, on 14% of rounds), each
//!   spell favouring one arm or the other at random by b = 1%, like a neighbour that runs for a
//!   few rounds and hurts one arm's trial more than the other's.
//!
//! Every run goes through the full verdict (`judge_paired`), and its interval is compared with
//! the truth. "Before" is the interval the same resamples give for independent rounds
//! (`RatioInterval::if_independent`, which is what the verdict printed before the serial
//! correction), "after" the interval printed now.
//!
//! Monte-Carlo margin: with n runs a true rate p is observed with SE √(p(1 − p)/n), 1.09
//! percentage points at p = 5% and n = 400, 0.77 at n = 800. The cells allow 7%: 1.8 SE above
//! 5% at 400 runs, 2.6 SE at 800, so a procedure whose true rate is 5% passes a cell with
//! probability ≈ 96% at 400 runs and > 99% at 800; one at 10% fails with probability ≈ 99%.
//! The seeds are fixed, so each test is deterministic.

use quietbench_stats::rng::SplitMix64;
use quietbench_stats::{
    Arm, HostRounds, PairedRounds, Resamples, Seed, Verdict, VerdictConfig, VerdictKind,
    judge_paired,
};

/// SD of the autoregressive noise of one round's log-ratio.
const SD: f64 = 0.01;
/// Shift of a round's log-ratio during a burst.
const BURST: f64 = 0.01;
/// Per-round probability that a burst starts, and that a running one stops.
const BURST_ON: f64 = 0.05;
const BURST_OFF: f64 = 0.3;

fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = 1.0 - uniform(rng);
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The noise of one simulated host.
#[derive(Debug, Clone, Copy)]
struct Host {
    /// Lag-1 correlation of the autoregressive part.
    phi: f64,
    /// Whether bursts are added.
    bursts: bool,
}

impl Host {
    /// `n` rounds' log-ratios, stationary from the first round.
    fn rounds(self, rng: &mut SplitMix64, n: usize) -> Vec<f64> {
        let innovation = (1.0 - self.phi * self.phi).sqrt();
        let mut e = normal(rng);
        let stationary_on = BURST_ON / (BURST_ON + BURST_OFF);
        let sign = |rng: &mut SplitMix64| if rng.next_u64() & 1 == 1 { 1.0 } else { -1.0 };
        let mut burst = if self.bursts && uniform(rng) < stationary_on {
            sign(rng)
        } else {
            0.0
        };
        let mut out = Vec::with_capacity(n);
        for t in 0..n {
            if t > 0 {
                e = self.phi * e + innovation * normal(rng);
                if self.bursts {
                    if burst == 0.0 {
                        if uniform(rng) < BURST_ON {
                            burst = sign(rng);
                        }
                    } else if uniform(rng) < BURST_OFF {
                        burst = 0.0;
                    }
                }
            }
            out.push(SD * e + BURST * burst);
        }
        out
    }
}

fn paired(hosts: Vec<Vec<f64>>) -> PairedRounds {
    PairedRounds {
        baseline: Arm::A,
        candidate: Arm::B,
        hosts: hosts
            .into_iter()
            .enumerate()
            .map(|(i, log_ratios)| HostRounds {
                host: format!("host-{i}"),
                cpu_model: "m".into(),
                rounds: (0..log_ratios.len() as u32).collect(),
                log_ratios,
            })
            .collect(),
        unpaired_rounds: 0,
    }
}

/// What a cell of A/A runs gave.
#[derive(Debug, Default)]
struct Tally {
    runs: usize,
    /// Intervals for independent rounds that excluded 1.
    before: usize,
    /// Printed intervals that excluded 1.
    after: usize,
    /// Verdicts that called the host bursty.
    warned: usize,
    /// Per run, the half-widths (log scale) of the interval for independent rounds and of the
    /// printed one.
    half_widths: Vec<(f64, f64)>,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        let (lo, hi) = v.interval.if_independent;
        self.runs += 1;
        self.before += usize::from(lo > 1.0 || hi < 1.0);
        self.after += usize::from(v.kind != VerdictKind::NoDifference);
        self.warned += usize::from(v.warnings.iter().any(|w| w.contains("bursty")));
        self.half_widths
            .push(((hi / lo).ln() / 2.0, (v.ci_high / v.ci_low).ln() / 2.0));
    }

    fn rate(&self, count: usize) -> f64 {
        count as f64 / self.runs as f64
    }

    /// Median over runs of printed / independent half-width, minus 1.
    fn median_widening(&self) -> f64 {
        median(self.half_widths.iter().map(|(b, a)| a / b).collect()) - 1.0
    }

    /// Median printed half-width / median independent half-width, minus 1.
    fn widening_of_medians(&self) -> f64 {
        let before = median(self.half_widths.iter().map(|h| h.0).collect());
        let after = median(self.half_widths.iter().map(|h| h.1).collect());
        after / before - 1.0
    }

    /// Share of runs whose interval was widened at all.
    fn widened(&self) -> f64 {
        let n = self.half_widths.iter().filter(|(b, a)| a > b).count();
        self.rate(n)
    }

    fn print(&self, label: &str) {
        eprintln!(
            "{label:<40} excludes 1: before {:5.1}%, after {:5.1}% | bursty warning {:5.1}% | \
             widened {:5.1}% of runs, median widening {:+6.1}%, medians {:+6.1}%",
            self.rate(self.before) * 100.0,
            self.rate(self.after) * 100.0,
            self.rate(self.warned) * 100.0,
            self.widened() * 100.0,
            self.median_widening() * 100.0,
            self.widening_of_medians() * 100.0
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]) / 2.0
}

/// `runs` A/A verdicts of `hosts` hosts × `n` rounds of `noise`.
fn cell(seed: u64, hosts: usize, n: usize, noise: Host, runs: usize) -> Tally {
    let mut rng = SplitMix64::new(seed);
    let mut tally = Tally::default();
    for _ in 0..runs {
        let p = paired((0..hosts).map(|_| noise.rounds(&mut rng, n)).collect());
        let config = VerdictConfig {
            // Fewer resamples than the default keep the test within seconds in debug builds;
            // the method is the verdict's own.
            resamples: Resamples::new(400).unwrap(),
            seed: Seed(rng.next_u64()),
            ..VerdictConfig::default()
        };
        tally.add(&judge_paired(&p, &config).unwrap());
    }
    tally
}

/// Runs per cell.
const RUNS: usize = 600;

/// Largest false-positive rate a cell may show: 5% plus 2.25 Monte-Carlo SE at 600 runs.
const ALLOWED: f64 = 0.07;

/// With 8 rounds the serial correlation is known too roughly to correct fully (its standard
/// error is 0.35): at φ = 0.6 the corrected interval still excludes 1 in about 10% of runs
/// (13% without the uncertainty term in the degrees of freedom, 32% without any correction).
/// The bound documents that shortfall; it fails if the correction gets worse.
const ALLOWED_8_ROUNDS_STRONG: f64 = 0.12;

/// The three bursty cells of `n` rounds: φ = 0, 0.3, 0.6, each with bursts.
fn bursty_cells(n: usize, seed: u64) {
    let mut failures = Vec::new();
    let mut worst_before: f64 = 0.0;
    for (j, phi) in [0.0, 0.3, 0.6].into_iter().enumerate() {
        let noise = Host { phi, bursts: true };
        let tally = cell(seed + j as u64, 1, n, noise, RUNS);
        let label = format!("1 host × {n} rounds, φ = {phi}, bursts");
        tally.print(&label);
        worst_before = worst_before.max(tally.rate(tally.before));
        let allowed = if n < 15 && phi > 0.5 {
            ALLOWED_8_ROUNDS_STRONG
        } else {
            ALLOWED
        };
        if tally.rate(tally.after) > allowed {
            failures.push(format!("{label}: {:.1}%", tally.rate(tally.after) * 100.0));
        }
    }
    // The problem is real: without the correction the strongest correlation fails badly.
    assert!(worst_before > 0.2, "{worst_before}");
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn a_bursty_hosts_interval_keeps_its_coverage_with_8_rounds() {
    bursty_cells(8, 1000);
}

#[test]
fn a_bursty_hosts_interval_keeps_its_coverage_with_15_rounds() {
    bursty_cells(15, 1010);
}

#[test]
fn a_bursty_hosts_interval_keeps_its_coverage_with_30_rounds() {
    bursty_cells(30, 1020);
}

#[test]
fn independent_rounds_are_barely_widened_and_rarely_called_bursty() {
    let (mut positives, mut runs) = (0, 0);
    for (i, n) in [8, 15, 30].into_iter().enumerate() {
        let noise = Host {
            phi: 0.0,
            bursts: false,
        };
        let tally = cell(2000 + i as u64, 1, n, noise, RUNS);
        tally.print(&format!("1 host × {n} rounds, independent"));
        positives += tally.after;
        runs += tally.runs;
        assert!(tally.rate(tally.after) <= ALLOWED, "{n} rounds");
        // The correction widens only when ρ̂ > 0, about half the runs, but then by at least
        // the drop in degrees of freedom for ρ̂'s own noise (n − 1 → about n/3: +9% at 30
        // rounds, +21% at 15, +48% at 8). Measured: the median run +0% at 8 and 15 rounds,
        // +9% at 30; the median interval +22%, +17%, +11%.
        assert!(tally.median_widening() < 0.15, "{n} rounds");
        assert!(tally.widening_of_medians() < 0.3, "{n} rounds");
        // The warning's threshold: two standard errors of r₁, crossed by about 2–3% of
        // independent runs (SE 0.7 points at 600 runs).
        assert!(tally.rate(tally.warned) <= 0.05, "{n} rounds");
    }
    // Not much wider either: a 95% interval that covered 99% of the time would be too wide.
    // Pooled over 1800 runs the SE is 0.4 points at a true 3%.
    let rate = positives as f64 / runs as f64;
    eprintln!("independent rounds, pooled: {:.2}% exclude 1", rate * 100.0);
    assert!(rate >= 0.015, "{rate}");
}

#[test]
fn several_hosts_need_no_correction() {
    // The hosts are the units; each host's mean carries its rounds' correlation already.
    let noise = Host {
        phi: 0.6,
        bursts: true,
    };
    let tally = cell(3000, 6, 8, noise, RUNS / 2);
    tally.print("6 hosts × 8 rounds, φ = 0.6, bursts");
    assert!(tally.rate(tally.after) <= ALLOWED);
    assert_eq!(tally.widened(), 0.0);
    assert!(tally.rate(tally.warned) > 0.5);
}
