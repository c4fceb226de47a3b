//! The command line of `quietbench changes`, and the detector's settings it shares with
//! `history --change-points` ([`ChangePointArgs`]): one definition, so both commands run the
//! same detector with the same defaults ([`ChangePointConfig::default`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use quietbench_controller::commands::changes::{ChangesRequest, changes};
use quietbench_controller::series_csv::IndexColumn;
use quietbench_stats::{ChangePointConfig, ChangePointMethod, Direction, Seed};

/// The change-point detector's settings, as `history` and `changes` take them.
#[derive(Debug, Args)]
#[command(next_help_heading = "Change-point detector")]
pub struct ChangePointArgs {
    /// The detector: mean-shift (a studentized mean shift that drifting noise does not fool;
    /// docs/statistics.md §9c) or e-divisive (the default before it)
    #[arg(long, value_enum, default_value = "mean-shift")]
    pub(crate) method: DetectorMethod,
    /// The p-value a change point must reach
    #[arg(long, value_name = "P", default_value_t = ChangePointConfig::default().significance, value_parser = parse_significance)]
    pub(crate) significance: f64,
    /// Shuffles of the permutation test (p-values down to 1/(N+1); mean-shift shuffles on past
    /// them while a p-value is too near the significance to decide, or too small to rank)
    #[arg(long, value_name = "N", default_value_t = ChangePointConfig::default().permutations, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) permutations: u32,
    /// The fewest points a segment between change points may have: one odd point is an outlier,
    /// not a new level
    #[arg(long, value_name = "N", default_value_t = ChangePointConfig::default().min_segment, value_parser = parse_min_segment)]
    pub(crate) min_segment: usize,
    /// The shuffles' seed: the same series and seed give the same answer
    #[arg(long, value_name = "N", default_value_t = ChangePointConfig::default().seed.0)]
    pub(crate) seed: u64,
}

/// `--method`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DetectorMethod {
    /// Binary segmentation with a studentized mean-shift statistic
    MeanShift,
    /// E-divisive means with its energy statistic
    EDivisive,
}

impl ChangePointArgs {
    /// The detector's configuration.
    pub(crate) fn config(&self) -> ChangePointConfig {
        ChangePointConfig {
            method: match self.method {
                DetectorMethod::MeanShift => ChangePointMethod::MeanShift,
                DetectorMethod::EDivisive => ChangePointMethod::EDivisive,
            },
            significance: self.significance,
            permutations: self.permutations,
            min_segment: self.min_segment,
            seed: Seed(self.seed),
        }
    }
}

fn parse_significance(s: &str) -> Result<f64, String> {
    let p: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number; write a p-value such as 0.01"))?;
    if p > 0.0 && p < 1.0 {
        Ok(p)
    } else {
        Err(format!(
            "{p} is not a p-value in (0, 1); 0.01 is the default"
        ))
    }
}

fn parse_min_segment(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a segment length from 1 to 100000; 2 is the default"
        )),
    }
}

/// Which way a series is better, for `--better`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Better {
    /// Smaller values are better (times, latencies): a rise is a regression
    Lower,
    /// Larger values are better (rates, throughput): a fall is a regression
    Higher,
}

#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The CSV file: a header of column names, then one row per point, one column per series
    /// ('-' reads standard input)
    #[arg(long, value_name = "FILE|-")]
    csv: PathBuf,
    /// The column whose values label the points (any text) [default: the first column, when it
    /// is named time, run, date, timestamp, commit or revision, in any case]
    #[arg(long, value_name = "COLUMN", conflicts_with = "no_index")]
    index: Option<String>,
    /// No column labels the points: every column is a series
    #[arg(long)]
    no_index: bool,
    /// Which way is better for every series; without it every change counts, and
    /// --fail-on-change trips on any
    #[arg(long, value_enum, value_name = "WAY")]
    better: Option<Better>,
    /// Print the change points as JSON (schema quietbench.changes.v1)
    #[arg(long)]
    json: bool,
    /// Exit with code 3 when the newest row brings a change to light in any series (a
    /// regression, with --better), by the rule of `history --fail-on-change`
    #[arg(long)]
    fail_on_change: bool,
    #[command(flatten)]
    detector: ChangePointArgs,
}

pub(super) fn changes_command(args: &ChangesArgs) -> anyhow::Result<ExitCode> {
    let index = match (&args.index, args.no_index) {
        (Some(name), _) => IndexColumn::Named(name.clone()),
        (None, true) => IndexColumn::None,
        (None, false) => IndexColumn::Auto,
    };
    changes(&ChangesRequest {
        csv: &args.csv,
        index,
        config: args.detector.config(),
        better: args.better.map(|b| match b {
            Better::Lower => Direction::LowerIsBetter,
            Better::Higher => Direction::HigherIsBetter,
        }),
        json: args.json,
        fail_on_change: args.fail_on_change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        detector: ChangePointArgs,
    }

    #[test]
    fn the_defaults_are_the_detectors() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.detector.config(), ChangePointConfig::default());
        let cli = Cli::try_parse_from(["x", "--min-segment", "3", "--seed", "7"]).unwrap();
        assert_eq!(cli.detector.config().min_segment, 3);
        assert_eq!(cli.detector.config().seed, Seed(7));
        for bad in [
            &["x", "--min-segment", "0"][..],
            &["x", "--significance", "1"],
            &["x", "--permutations", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
