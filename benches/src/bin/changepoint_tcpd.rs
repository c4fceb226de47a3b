//! quietbench's change points on the Turing Change Point Dataset (TCPD) and on simulated series
//! with known truth (issue 31; benches/changepoints/tcpd.sh runs both and scores the first with
//! TCPDBench's own metrics.py).
//!
//! `detect FILE...` reads TCPD series files (JSON: `"name"`, `"n_obs"`, `"n_dim"`, and a
//! `"series"` list whose entries carry the values as `"raw"`) and runs
//! [`quietbench_stats::change_points`] on each with the defaults `history --change-points` uses
//! (`ChangePointConfig::default()`: p ≤ 0.01, 199 shuffles, segments of at least 2 runs, the
//! fixed seed). It writes one JSON object: for each series the 0-based indices of the first point
//! of every new segment, which is TCPDBench's convention (its R wrappers turn ecp's 1-based
//! segment starts into these by subtracting 1; its metric code adds index 0 to every set itself,
//! so it is not reported here). Multivariate series (n_dim > 1) and series with missing values
//! are skipped and listed under `"skipped"` with the reason. The values go in as they are, as
//! `history` feeds a run's medians: TCPDBench standardises each series first, which changes
//! nothing here (both statistics are unchanged by the data's shift and scale, and the
//! permutation test does not see the scale).
//!
//! `--method e-divisive` runs the detector that was the default before issue 31 instead.
//! `cost` times one call on long series (item 5 of the issue).
//!
//! `simulate` prints one table of false-alarm and detection rates on seeded synthetic series:
//! AR(1) noise with no change, steps of 1–5 SD followed by k runs after a 50-run history,
//! Student-t(3) noise with no change, and Gaussian noise with one 5-SD bad day and no change.
//! A series is a false alarm when the detector reports any change point; a step is detected when
//! a change point lies within ±1 of the step's index. Every series has its own SplitMix64 seed
//! (derived from the cell and the series number), so a row does not depend on the others or on
//! the number of threads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use quietbench_stats::rng::{SplitMix64, mix};
use quietbench_stats::{ChangePointConfig, ChangePointMethod, change_points};
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(about = "Change points on TCPD and simulated series (see the file's doc comment)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The detector (`ChangePointConfig::method`); every other setting is history's default.
#[derive(Clone, Copy, ValueEnum)]
enum Method {
    /// The default since issue 31: a studentized mean shift
    MeanShift,
    /// E-divisive means, the default before it
    EDivisive,
}

impl Method {
    fn config(self) -> ChangePointConfig {
        ChangePointConfig {
            method: match self {
                Method::MeanShift => ChangePointMethod::MeanShift,
                Method::EDivisive => ChangePointMethod::EDivisive,
            },
            ..ChangePointConfig::default()
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Detect change points in TCPD series files with history's defaults
    Detect {
        /// The detector
        #[arg(long, value_enum, default_value = "mean-shift")]
        method: Method,
        /// The shuffles' seed (default: history's)
        #[arg(long)]
        seed: Option<u64>,
        /// Where the JSON goes (default: stdout)
        #[arg(long)]
        out: Option<PathBuf>,
        /// TCPD series files (.json); annotations.json and other non-series files are rejected
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the false-alarm and detection table on simulated series
    Simulate {
        /// The detector
        #[arg(long, value_enum, default_value = "mean-shift")]
        method: Method,
        /// Series per cell in the rows the targets name (AR(1) φ = 0 and 0.6 at
        /// n = 200, a 3-SD step with 3 runs after it), for a tighter interval there
        #[arg(long)]
        key_series: Option<usize>,
        /// Series per cell of the table
        #[arg(long, default_value_t = 1000)]
        series: usize,
        /// Base seed
        #[arg(long, default_value_t = 31)]
        seed: u64,
        /// Worker threads (default: the machine's available parallelism)
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Time the detector on long series (issue 31 asks ≤ 1 s at 10,000 runs)
    Cost {
        /// The detector
        #[arg(long, value_enum, default_value = "mean-shift")]
        method: Method,
        /// Series lengths
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        lengths: Vec<usize>,
    },
}

/// One TCPD series file (only the fields used here).
#[derive(Deserialize)]
struct TcpdFile {
    name: String,
    n_obs: usize,
    n_dim: usize,
    series: Vec<TcpdSeries>,
}

#[derive(Deserialize)]
struct TcpdSeries {
    raw: Vec<Option<f64>>,
}

#[derive(Serialize)]
struct MethodOut {
    name: &'static str,
    significance: f64,
    permutations: u32,
    min_segment: usize,
    seed: u64,
}

#[derive(Serialize)]
struct DetectOut {
    method: MethodOut,
    /// Series name → change point indices (0-based first point of each new segment).
    detections: BTreeMap<String, Vec<usize>>,
    /// Series name → why it was not run.
    skipped: BTreeMap<String, String>,
    /// Series name → seconds in `change_points`.
    seconds: BTreeMap<String, f64>,
}

fn detect(files: &[PathBuf], method: Method, seed: Option<u64>) -> anyhow::Result<DetectOut> {
    let mut config = method.config();
    if let Some(seed) = seed {
        config.seed = quietbench_stats::Seed(seed);
    }
    let mut out = DetectOut {
        method: MethodOut {
            name: config.method.name(),
            significance: config.significance,
            permutations: config.permutations,
            min_segment: config.min_segment,
            seed: config.seed.0,
        },
        detections: BTreeMap::new(),
        skipped: BTreeMap::new(),
        seconds: BTreeMap::new(),
    };
    for path in files {
        let file: TcpdFile = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        )
        .with_context(|| format!("{} is not a TCPD series file", path.display()))?;
        if file.n_dim != 1 || file.series.len() != 1 {
            out.skipped.insert(
                file.name,
                format!(
                    "multivariate ({} dimensions): quietbench's detector takes one series",
                    file.n_dim
                ),
            );
            continue;
        }
        let raw = &file.series[0].raw;
        if raw.len() != file.n_obs {
            bail!(
                "{}: n_obs is {} but the series has {} values",
                path.display(),
                file.n_obs,
                raw.len()
            );
        }
        let Some(values) = raw.iter().copied().collect::<Option<Vec<f64>>>() else {
            let missing = raw.iter().filter(|v| v.is_none()).count();
            out.skipped.insert(
                file.name,
                format!(
                    "{missing} missing values: the detector needs every run (TCPDBench's own \
                     aggregate drops this series too)"
                ),
            );
            continue;
        };
        let started = Instant::now();
        let cps = change_points(&values, &config)
            .with_context(|| format!("change points of {}", path.display()))?;
        out.seconds
            .insert(file.name.clone(), started.elapsed().as_secs_f64());
        out.detections
            .insert(file.name, cps.iter().map(|c| c.index).collect());
    }
    Ok(out)
}

// ---- simulations -------------------------------------------------------------------------------

fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller, one of the pair).
fn gaussian(rng: &mut SplitMix64) -> f64 {
    let u1 = uniform(rng);
    let u2 = uniform(rng);
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Student t with 3 degrees of freedom: Z / √(χ²₃ / 3).
fn student_t3(rng: &mut SplitMix64) -> f64 {
    let z = gaussian(rng);
    let chi2: f64 = (0..3).map(|_| gaussian(rng).powi(2)).sum();
    z / (chi2 / 3.0).sqrt()
}

/// What one cell of the table simulates.
#[derive(Clone, Copy)]
enum Scenario {
    /// Stationary AR(1) with unit innovation SD, n points, no change.
    Ar1 { phi: f64, n: usize },
    /// 50 N(0, 1) points, then `after` points shifted by `step` SD.
    Step { step: f64, after: usize },
    /// t(3) noise, n points, no change.
    HeavyTail { n: usize },
    /// N(0, 1) noise, n points, one point +5 SD: at a uniform random position, or the last.
    BadDay { n: usize, last: bool },
}

const HISTORY: usize = 50;

impl Scenario {
    fn label(&self) -> String {
        match *self {
            Scenario::Ar1 { phi, n } => format!("AR(1) φ = {phi}, n = {n}, no change"),
            Scenario::Step { step, after } => {
                format!("step {step} SD after {HISTORY} runs, {after} runs after it")
            }
            Scenario::HeavyTail { n } => format!("Student t(3) noise, n = {n}, no change"),
            Scenario::BadDay { n, last } => format!(
                "one 5-SD bad day ({}), n = {n}, no change",
                if last { "the newest run" } else { "random run" }
            ),
        }
    }

    fn series(&self, rng: &mut SplitMix64) -> Vec<f64> {
        match *self {
            Scenario::Ar1 { phi, n } => {
                // Start in the stationary distribution: SD 1/√(1 − φ²).
                let mut x = gaussian(rng) / (1.0 - phi * phi).sqrt();
                (0..n)
                    .map(|i| {
                        if i > 0 {
                            x = phi * x + gaussian(rng);
                        }
                        100.0 + x
                    })
                    .collect()
            }
            Scenario::Step { step, after } => (0..HISTORY + after)
                .map(|i| 100.0 + gaussian(rng) + if i >= HISTORY { step } else { 0.0 })
                .collect(),
            Scenario::HeavyTail { n } => (0..n).map(|_| 100.0 + student_t3(rng)).collect(),
            Scenario::BadDay { n, last } => {
                let mut v: Vec<f64> = (0..n).map(|_| 100.0 + gaussian(rng)).collect();
                let at = if last {
                    n - 1
                } else {
                    rng.below(n as u64) as usize
                };
                v[at] += 5.0;
                v
            }
        }
    }

    /// The share that counts: series with a hit near the step, or with any change point.
    fn hit(&self, cps: &[usize]) -> bool {
        match *self {
            Scenario::Step { .. } => cps.iter().any(|&c| c.abs_diff(HISTORY) <= 1),
            _ => !cps.is_empty(),
        }
    }
}

struct CellResult {
    label: String,
    kind: &'static str,
    share: f64,
    /// Step cells: series with a change point anywhere else (a misplaced or extra one).
    elsewhere: Option<f64>,
    series: usize,
    seconds: f64,
}

fn run_cell(
    scenario: Scenario,
    cell: u64,
    count: usize,
    seed: u64,
    threads: usize,
    config: ChangePointConfig,
) -> anyhow::Result<CellResult> {
    let started = Instant::now();
    let chunk = count.div_ceil(threads.max(1));
    // Per series: (hit, change point other than the step's).
    let results: Vec<anyhow::Result<Vec<(bool, bool)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .step_by(chunk.max(1))
            .map(|from| {
                scope.spawn(move || {
                    (from..(from + chunk).min(count))
                        .map(|i| {
                            let mut rng = SplitMix64::new(mix(seed ^ mix(cell << 32 | i as u64)));
                            let values = scenario.series(&mut rng);
                            let cps: Vec<usize> = change_points(&values, &config)?
                                .iter()
                                .map(|c| c.index)
                                .collect();
                            let other = cps.iter().any(|&c| c.abs_diff(HISTORY) > 1);
                            Ok((scenario.hit(&cps), other))
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut hits = 0usize;
    let mut other = 0usize;
    for part in results {
        for (hit, o) in part? {
            hits += usize::from(hit);
            other += usize::from(o);
        }
    }
    let is_step = matches!(scenario, Scenario::Step { .. });
    Ok(CellResult {
        label: scenario.label(),
        kind: if is_step {
            "detected (±1)"
        } else {
            "false alarms"
        },
        share: hits as f64 / count as f64,
        elsewhere: is_step.then(|| other as f64 / count as f64),
        series: count,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The Wilson score interval (95%) of a share observed in `n` series.
fn wilson(share: f64, n: usize) -> (f64, f64) {
    let n = n as f64;
    let z = 1.959_964;
    let centre = (share + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (share * (1.0 - share) / n + z * z / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The rows issue 31's targets name.
fn is_key(scenario: Scenario) -> bool {
    match scenario {
        Scenario::Ar1 { phi, n } => n == 200 && (phi == 0.0 || phi == 0.6),
        Scenario::Step { step, after } => step == 3.0 && after == 3,
        _ => false,
    }
}

fn simulate(
    count: usize,
    key_count: Option<usize>,
    seed: u64,
    threads: usize,
    config: ChangePointConfig,
) -> anyhow::Result<()> {
    if count == 0 || key_count == Some(0) {
        bail!("--series and --key-series must be at least 1");
    }
    let mut scenarios = Vec::new();
    for phi in [0.0, 0.3, 0.6, 0.9] {
        for n in [50, 100, 200] {
            scenarios.push(Scenario::Ar1 { phi, n });
        }
    }
    for step in [1.0, 2.0, 3.0, 5.0] {
        for after in [2, 3, 5, 10] {
            scenarios.push(Scenario::Step { step, after });
        }
    }
    for n in [50, 100, 200] {
        scenarios.push(Scenario::HeavyTail { n });
    }
    for n in [50, 100, 200] {
        scenarios.push(Scenario::BadDay { n, last: false });
    }
    scenarios.push(Scenario::BadDay { n: 50, last: true });
    println!(
        "quietbench change_points, {}, with history's defaults (p ≤ {}, {} shuffles, min \
         segment {}), {count} seeded series per row ({} in the rows the issue's targets name; \
         SplitMix64, base seed {seed}); noise SD 1 around 100 \
         (AR(1): innovations SD 1, stationary start); false alarms = series with any change \
         point; detected = a change point within ±1 of the step's index (the first run after \
         it); elsewhere = series with a change point further from it; 95% interval: Wilson",
        config.method.name(),
        config.significance,
        config.permutations,
        config.min_segment,
        key_count.unwrap_or(count)
    );
    println!();
    println!("| scenario | measure | rate | 95% interval | elsewhere | series | seconds |");
    println!("|---|---|---|---|---|---|---|");
    let started = Instant::now();
    for (cell, scenario) in scenarios.into_iter().enumerate() {
        let n = if is_key(scenario) {
            key_count.unwrap_or(count)
        } else {
            count
        };
        let r = run_cell(scenario, cell as u64, n, seed, threads, config)?;
        let (low, high) = wilson(r.share, r.series);
        println!(
            "| {} | {} | {:.1}% | {:.1}–{:.1}% | {} | {} | {:.1} |",
            r.label,
            r.kind,
            r.share * 100.0,
            low * 100.0,
            high * 100.0,
            r.elsewhere
                .map_or("-".to_string(), |e| format!("{:.1}%", e * 100.0)),
            r.series,
            r.seconds
        );
    }
    println!();
    println!(
        "total {:.0} s on {threads} threads",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Seconds `change_points` takes on one series of each length, in three shapes: white noise
/// with no change (each segment's test stops early), one 5-SD step 3 runs from the end, and
/// five 5-SD steps evenly spaced (every found change runs its full shuffles and their
/// refinement).
fn cost(config: ChangePointConfig, lengths: &[usize]) -> anyhow::Result<()> {
    println!(
        "quietbench change_points, {}, history's defaults; one series per row, seconds of one \
         call on this machine (one thread)",
        config.method.name()
    );
    println!();
    println!("| runs | series | change points found | seconds |");
    println!("|---|---|---|---|");
    for &n in lengths {
        if n < 10 {
            bail!("--lengths: {n} is too short to time (at least 10)");
        }
        let mut rng = SplitMix64::new(mix(n as u64));
        let noise: Vec<f64> = (0..n).map(|_| 100.0 + gaussian(&mut rng)).collect();
        let mut late = noise.clone();
        for v in &mut late[n - 3..] {
            *v += 5.0;
        }
        let mut five = noise.clone();
        for (i, v) in five.iter_mut().enumerate() {
            *v += 5.0 * (i * 6 / n) as f64;
        }
        for (label, series) in [
            ("white noise, no change", &noise),
            ("one 5-SD step, 3 runs after it", &late),
            ("five 5-SD steps", &five),
        ] {
            let started = Instant::now();
            let found = change_points(series, &config)?;
            println!(
                "| {n} | {label} | {} | {:.3} |",
                found.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Detect {
            method,
            seed,
            out,
            files,
        } => {
            let result = detect(&files, method, seed)?;
            for (name, why) in &result.skipped {
                eprintln!("changepoint-tcpd: skipped {name}: {why}");
            }
            let json = serde_json::to_vec_pretty(&result)?;
            match out {
                Some(path) => std::fs::write(&path, json)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => println!("{}", String::from_utf8(json)?),
            }
        }
        Command::Simulate {
            method,
            key_series,
            series,
            seed,
            threads,
        } => {
            let threads = threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            });
            simulate(series, key_series, seed, threads, method.config())?;
        }
        Command::Cost { method, lengths } => cost(method.config(), &lengths)?,
    }
    Ok(())
}
