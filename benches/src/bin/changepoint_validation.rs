//! Validation of `history --change-points` on synthetic series with known change points, and the
//! scoring of the same series through MongoDB's and Apache Otava's detectors
//! (benches/changepoints/side_by_side.sh runs all three).
//!
//! `generate` writes the series: `--series` pure-noise series of `--length` runs (false alarms),
//! and for each step size as many series with the step at `--step-at`, plus every prefix of those
//! that ends 2..=(length − step-at) runs after the step (detection delay: how many runs after a
//! change the detector first reports it, as a nightly `history --fail-on-change` would). Noise is
//! Gaussian, relative SD `--noise`; seeds are fixed, so the file is the same on every machine.
//!
//! `score` runs quietbench's E-divisive detector (`--method e-divisive`, the default before
//! issue 31) on the file at each `--significance` and prints, per
//! detector and setting: false alarms per 1000 runs of noise, and per step the share detected
//! (within ±2 runs of the truth, on the full series) and the median and 90th-percentile delay.
//! With `--peers OUT.json` (peers.py's output) the peers' rows are printed beside ours.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use quietbench_stats::{ChangePointConfig, ChangePointMethod, Seed, change_points};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(about = "Change-point validation on synthetic series (see the file's doc comment)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the synthetic series (and the peers' thresholds) to a JSON file
    Generate {
        /// Output file (peers.py's input format, with each series' truth added)
        #[arg(long)]
        out: PathBuf,
        /// Relative SD of each run's value (0.01 = 1%)
        #[arg(long, default_value_t = 0.01)]
        noise: f64,
        /// Pure-noise series (false alarms)
        #[arg(long, default_value_t = 500)]
        noise_series: usize,
        /// Series per step size
        #[arg(long, default_value_t = 100)]
        series: usize,
        /// Runs per series
        #[arg(long, default_value_t = 60)]
        length: usize,
        /// The index of the first run after the step
        #[arg(long, default_value_t = 30)]
        step_at: usize,
        /// Step sizes, relative (comma-separated)
        #[arg(long, value_delimiter = ',', default_value = "0.01,0.02,0.05")]
        steps: Vec<f64>,
        /// Share of runs that are bad days: their value 5-15% worse (higher), the noise of a
        /// neighbour or a throttled instance, which a change-point detector must not call a change
        #[arg(long, default_value_t = 0.0)]
        outliers: f64,
        /// Base seed
        #[arg(long, default_value_t = 2026)]
        seed: u64,
    },
    /// Score quietbench's detector (and the peers' output) on a generated file
    Score {
        /// The generated series
        #[arg(long)]
        input: PathBuf,
        /// peers.py's output for the same file
        #[arg(long)]
        peers: Option<PathBuf>,
        /// quietbench's significance levels to try (comma-separated)
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0.001,0.005,0.01,0.02,0.05"
        )]
        significance: Vec<f64>,
        /// Shuffles per candidate
        #[arg(long, default_value_t = 999)]
        permutations: u32,
    },
}

#[derive(Serialize, Deserialize)]
struct SeriesFile {
    noise: f64,
    #[serde(default)]
    outliers: f64,
    length: usize,
    step_at: usize,
    steps: Vec<f64>,
    series: Vec<Series>,
    thresholds: BTreeMap<String, Vec<f64>>,
}

#[derive(Serialize, Deserialize)]
struct Series {
    id: String,
    values: Vec<f64>,
    /// 0 for noise.
    step: f64,
    /// Runs after the step in this (prefix) series; 0 for noise.
    after: usize,
}

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One run's value around `level`: Gaussian noise, and now and then a bad day.
fn run_value(rng: &mut ChaCha8Rng, level: f64, noise: f64, outliers: f64) -> f64 {
    let value = level * (1.0 + noise * gaussian(rng));
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    if u < outliers {
        let size = 0.05 + 0.10 * ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64);
        value * (1.0 + size)
    } else {
        value
    }
}

#[allow(clippy::too_many_arguments)] // the generator's knobs, each a CLI flag
fn generate(
    noise: f64,
    outliers: f64,
    noise_count: usize,
    count: usize,
    length: usize,
    step_at: usize,
    steps: &[f64],
    seed: u64,
) -> anyhow::Result<SeriesFile> {
    if !(0.0..1.0).contains(&outliers) {
        bail!("--outliers {outliers} is not a share in [0, 1)");
    }
    if step_at < 2 || step_at + 2 > length {
        bail!("--step-at {step_at} leaves fewer than 2 runs on a side of a {length}-run series");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut series = Vec::new();
    for i in 0..noise_count {
        let values = (0..length)
            .map(|_| run_value(&mut rng, 100.0, noise, outliers))
            .collect();
        series.push(Series {
            id: format!("noise-{i}"),
            values,
            step: 0.0,
            after: 0,
        });
    }
    for &step in steps {
        for i in 0..count {
            let values: Vec<f64> = (0..length)
                .map(|k| {
                    let level = if k >= step_at {
                        100.0 * (1.0 + step)
                    } else {
                        100.0
                    };
                    run_value(&mut rng, level, noise, outliers)
                })
                .collect();
            for after in 2..=length - step_at {
                series.push(Series {
                    id: format!("step{step}-{i}-after{after}"),
                    values: values[..step_at + after].to_vec(),
                    step,
                    after,
                });
            }
        }
    }
    let thresholds = BTreeMap::from([
        ("mongodb".to_string(), vec![0.05, 0.01]),
        ("otava".to_string(), vec![0.001, 0.01]),
    ]);
    Ok(SeriesFile {
        noise,
        outliers,
        length,
        step_at,
        steps: steps.to_vec(),
        series,
        thresholds,
    })
}

/// One detector setting's findings: series id → change point indices.
type Detections = BTreeMap<String, Vec<usize>>;

struct Row {
    detector: String,
    false_alarms_per_1000: f64,
    /// Per step: detected share on the full series, median and p90 delay (None: not reached).
    steps: Vec<(f64, Option<usize>, Option<usize>)>,
    seconds: Option<f64>,
}

fn score(file: &SeriesFile, name: String, found: &Detections, seconds: Option<f64>) -> Row {
    let noise: Vec<&Series> = file.series.iter().filter(|s| s.step == 0.0).collect();
    let alarms: usize = noise
        .iter()
        .map(|s| found.get(&s.id).map_or(0, Vec::len))
        .sum();
    let points: usize = noise.iter().map(|s| s.values.len()).sum();
    let near = |s: &Series| {
        found
            .get(&s.id)
            .is_some_and(|cps| cps.iter().any(|&c| c.abs_diff(file.step_at) <= 2))
    };
    let full_after = file.length - file.step_at;
    let steps = file
        .steps
        .iter()
        .map(|&step| {
            // series index → the first `after` at which it is detected.
            let mut first: BTreeMap<&str, Option<usize>> = BTreeMap::new();
            let mut full = (0, 0);
            for s in file.series.iter().filter(|s| s.step == step) {
                let base = s.id.rsplit_once("-after").map_or(s.id.as_str(), |(b, _)| b);
                let entry = first.entry(base).or_insert(None);
                if near(s) && entry.is_none_or(|a| s.after < a) {
                    *entry = Some(s.after);
                }
                if s.after == full_after {
                    full.1 += 1;
                    if near(s) {
                        full.0 += 1;
                    }
                }
            }
            let mut delays: Vec<usize> = first.values().map(|d| d.unwrap_or(usize::MAX)).collect();
            delays.sort_unstable();
            let at = |q: f64| {
                let i = ((delays.len() as f64 * q).ceil() as usize).clamp(1, delays.len()) - 1;
                (delays[i] != usize::MAX).then_some(delays[i])
            };
            (
                f64::from(full.0) / f64::from(full.1.max(1)),
                at(0.5),
                at(0.9),
            )
        })
        .collect();
    Row {
        detector: name,
        false_alarms_per_1000: alarms as f64 * 1000.0 / points.max(1) as f64,
        steps,
        seconds,
    }
}

fn print_table(file: &SeriesFile, rows: &[Row]) {
    let noise_series = file.series.iter().filter(|s| s.step == 0.0).count();
    let step_series = file
        .series
        .iter()
        .filter(|s| s.after == file.length - file.step_at && s.step == file.steps[0])
        .count();
    println!(
        "{noise_series} noise series and {step_series} per step of {} runs, step at run {}, \
         Gaussian noise SD {:.2}%, {:.0}% of runs bad days 5-15% high; detected = within ±2 runs on the full series; delay = runs \
         after the step until first reported (median / 90th percentile; '>{}' = not within the \
         series)",
        file.length,
        file.step_at + 1,
        file.noise * 100.0,
        file.outliers * 100.0,
        file.length - file.step_at
    );
    let mut header = format!("{:<28} {:>9}", "detector", "FA/1000");
    for s in &file.steps {
        header.push_str(&format!(
            " | {:>5} det  delay p50/p90",
            format!("{:.0}%", s * 100.0)
        ));
    }
    header.push_str(" | seconds (all settings)");
    println!("{header}");
    let never = format!(">{}", file.length - file.step_at);
    for r in rows {
        let mut line = format!("{:<28} {:>9.2}", r.detector, r.false_alarms_per_1000);
        for (det, p50, p90) in &r.steps {
            let d = |x: &Option<usize>| x.map_or(never.clone(), |v| v.to_string());
            line.push_str(&format!(
                " | {:>9.0}%  {:>6}/{:<6}",
                det * 100.0,
                d(p50),
                d(p90)
            ));
        }
        line.push_str(&format!(
            " | {:>8}",
            r.seconds.map_or("-".to_string(), |s| format!("{s:.1}"))
        ));
        println!("{line}");
    }
}

#[derive(Deserialize)]
struct PeersOut {
    #[serde(flatten)]
    tools: BTreeMap<String, serde_json::Value>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate {
            out,
            noise,
            noise_series,
            series,
            length,
            step_at,
            steps,
            outliers,
            seed,
        } => {
            let file = generate(
                noise,
                outliers,
                noise_series,
                series,
                length,
                step_at,
                &steps,
                seed,
            )?;
            std::fs::write(&out, serde_json::to_vec(&file)?)
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("{} series written to {}", file.series.len(), out.display());
        }
        Command::Score {
            input,
            peers,
            significance,
            permutations,
        } => {
            let file: SeriesFile = serde_json::from_slice(
                &std::fs::read(&input)
                    .with_context(|| format!("cannot read {}", input.display()))?,
            )
            .with_context(|| format!("{} is not a generated series file", input.display()))?;
            let mut rows = Vec::new();
            for &sig in &significance {
                // E-divisive, the method docs/statistics.md §9c's side-by-side tables compare
                // with MongoDB's and Otava's (the same method); benches/changepoints/tcpd.sh
                // measures the default detector.
                let config = ChangePointConfig {
                    method: ChangePointMethod::EDivisive,
                    significance: sig,
                    permutations,
                    min_segment: 2,
                    seed: Seed(0x0e_d1_71_5e),
                };
                let started = Instant::now();
                let mut found = Detections::new();
                for s in &file.series {
                    let cps = change_points(&s.values, &config)?;
                    found.insert(s.id.clone(), cps.iter().map(|c| c.index).collect());
                }
                let secs = started.elapsed().as_secs_f64();
                rows.push(score(
                    &file,
                    format!("quietbench p≤{sig} ({permutations})"),
                    &found,
                    Some(secs),
                ));
            }
            if let Some(path) = peers {
                let out: PeersOut = serde_json::from_slice(
                    &std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                )
                .with_context(|| format!("{} is not peers.py's output", path.display()))?;
                for tool in ["mongodb", "otava"] {
                    let Some(by_threshold) = out.tools.get(tool).and_then(|v| v.as_object()) else {
                        continue;
                    };
                    let seconds = out.tools["seconds"][tool].as_f64();
                    for (threshold, series) in by_threshold {
                        let found: Detections = serde_json::from_value(series.clone())
                            .with_context(|| format!("{tool} {threshold}: bad detections"))?;
                        rows.push(score(
                            &file,
                            format!("{tool} p≤{threshold}"),
                            &found,
                            seconds,
                        ));
                    }
                }
            }
            print_table(&file, &rows);
        }
    }
    Ok(())
}
