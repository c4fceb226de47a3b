//! The command line of `quietbench history`: one metric across stored runs, normalized by a
//! control, and its change points.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use quietbench_controller::commands::history_changes::{ChangePointRequest, history_change_points};
use quietbench_controller::commands::{history_normalized, stored};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The probe, e.g. cpu.primes
    #[arg(long)]
    probe: String,
    /// The metric, e.g. events_per_sec
    #[arg(long)]
    metric: String,
    /// Only hosts whose CPU model contains this text (case-insensitive), e.g. 8275CL
    #[arg(long, value_name = "TEXT")]
    cpu_model: Option<String>,
    /// The result store (an SQLite file, or postgres://USER@HOST/DB) [default: $QUIETBENCH_DB,
    /// else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// How many of the most recent runs
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Divide each host's figures by its control's of the same rounds (the variant named here,
    /// e.g. "control" from `run --control`) and print one normalized figure per run and CPU
    /// model: what is left once the instance and the day are taken out; with --change-points,
    /// the change points of that normalized series
    #[arg(long, value_name = "CONTROL")]
    normalize_by: Option<String>,
    /// Find where the metric's level moved: one point per run (the median of its trials), one
    /// series per CPU model and variant, change points by the detector --method names (a
    /// studentized mean shift by default) with a permutation test
    #[arg(long)]
    change_points: bool,
    /// Exit with code 3 when the newest run brings a regression to light (implies
    /// --change-points): for CI after each nightly run
    #[arg(long)]
    fail_on_change: bool,
    /// Print the change points as JSON (implies --change-points)
    #[arg(long)]
    json: bool,
    /// Also write an HTML page with each series' chart and its change points (implies
    /// --change-points)
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    remote: super::RemoteArgs,
    // Last: its help heading holds for the flags after it.
    #[command(flatten)]
    detector: super::changes::ChangePointArgs,
}

/// Runs `history`: its change points (with any of the flags that imply them), the normalized
/// series, or the plain one.
impl HistoryArgs {
    /// `--controller` was given: history comes from a service, over a socket.
    pub(super) fn remote_is_given(&self) -> bool {
        self.remote.is_given()
    }
}

pub(super) fn history_command(args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    if let Some(remote) = args.remote.remote() {
        if args.db.is_some() {
            anyhow::bail!("--controller asks the service's store: --db is not for it");
        }
        let defaults = quietbench_stats::ChangePointConfig::default();
        if args.detector.min_segment != defaults.min_segment
            || args.detector.seed != defaults.seed.0
            || args.detector.config().method != defaults.method
        {
            anyhow::bail!(
                "--controller sends --significance and --permutations to the service, not \
                 --method, --min-segment or --seed: leave those at their defaults"
            );
        }
        let request = quietbench_proto::v1::QueryHistoryRequest {
            probe: args.probe.clone(),
            metric: args.metric.clone(),
            cpu_model: args.cpu_model.clone().unwrap_or_default(),
            limit: u32::try_from(args.limit).unwrap_or(u32::MAX),
            change_points: args.change_points,
            significance: args.detector.significance,
            permutations: args.detector.permutations,
            fail_on_change: args.fail_on_change,
            normalize_by: args.normalize_by.clone().unwrap_or_default(),
            json: args.json,
            html: args.html.is_some(),
        };
        return quietbench_service::client::history(&remote, request, args.html.as_deref());
    }
    if args.change_points || args.fail_on_change || args.json || args.html.is_some() {
        return history_change_points(&ChangePointRequest {
            db: args.db.as_deref(),
            probe: &args.probe,
            metric: &args.metric,
            cpu_model: args.cpu_model.as_deref(),
            limit: args.limit,
            normalize_by: args.normalize_by.as_deref(),
            config: args.detector.config(),
            json: args.json,
            html: args.html.as_deref(),
            fail_on_change: args.fail_on_change,
        });
    }
    match &args.normalize_by {
        Some(control) => history_normalized::history_normalized(
            args.db.as_deref(),
            &args.probe,
            &args.metric,
            args.cpu_model.as_deref(),
            args.limit,
            control,
        ),
        None => stored::history(
            args.db.as_deref(),
            &args.probe,
            &args.metric,
            args.cpu_model.as_deref(),
            args.limit,
        ),
    }
}
