//! The `quietbench` command line: its arguments (clap), their translation into each command's
//! request ([`quietbench_controller::commands`] runs them, or [`quietbench_service`] for
//! `serve` and `--controller`), and the mapping of outcomes to exit codes. A crate of its own,
//! and not the `quietbench` binary's, because quietbench-ec2's commands (`fleet`, `gc`) share
//! its AWS arguments and the binary links quietbench-ec2 only with its `ec2` feature.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};

use quietbench_controller::commands::{host, release, stored};
use quietbench_controller::context::{CommandContext, Services};
use quietbench_controller::fleet::Ledger;

mod capacity;
mod changes;
mod compare;
mod ec2;
mod history;
mod run;
mod serve;
mod tls;
pub use capacity::CapacityArgs;
pub use changes::{ChangePointArgs, ChangesArgs};
pub use compare::CompareArgs;
use compare::compare_command;
pub use ec2::{AwsArgs, Ec2Args};
use history::HistoryArgs;
use quietbench_proto::v1 as pb;
pub use run::{RunArgs, RunRequestArgs};
pub use serve::{CancelArgs, RemoteArgs, ServeArgs};
pub use tls::{CertsArgs, TlsArgs};

/// Hosts named with `--agent`, in order (kept here for the binary; defined with the commands).
pub use quietbench_controller::commands::agent_entries;

/// The program's one-line description (`quietbench --help`).
pub const ABOUT: &str = "Low-noise performance measurement on cloud machines";

/// The program's long description (`quietbench --help`).
pub const LONG_ABOUT: &str = "Low-noise performance measurement on cloud machines.\n\n\
    quietbench runs native probes through an agent on each measured machine, pins their \
    threads away from housekeeping work, records full latency distributions, and reports \
    them against the machine's fingerprint (CPU model, kernel, clocksource).\n\n\
    Start here: quietbench run --local";

/// The controller's commands. The `quietbench` binary (crates/quietbench) adds `agent`.
#[derive(Debug, Subcommand)]
pub enum ControllerCommand {
    /// Run probes on this machine or on running agents, and print a summary table
    Run(RunArgs),
    /// Show what machine an agent runs on (its fingerprint)
    Host(HostArgs),
    /// Tune an agent's host for measuring: IRQs off the probe CPUs, governor, THP, ASLR. Every
    /// change is journaled and undone by `restore`, by the agent's clean stop, or by its next
    /// start after a crash
    // `tune` was its name until the glossary made one word of host tuning.
    #[command(alias = "prepare")]
    Tune(TuneArgs),
    /// Undo every host change an agent made
    Restore(RestoreArgs),
    /// A/B-compare two commands with randomized interleaved trials and print a verdict that
    /// states its interval and the smallest difference it could detect; or compare two stored
    /// runs (--runs)
    Compare(CompareArgs),
    /// The highest offered rate at which a server keeps a latency SLO (and its errors under a
    /// bound, and the load on schedule), found by a search of steady trials; with --b, two
    /// builds searched side by side and their capacities compared
    Capacity(CapacityArgs),
    /// List the runs in the result store
    Runs(RunsArgs),
    /// Show a stored run: its table, and its JSON or HTML report on request
    Show(ShowArgs),
    /// One metric across stored runs and days, per host and CPU model
    History(HistoryArgs),
    /// Find change points in any series: the columns of a CSV file or of standard input, by the
    /// detector and rule of `history --change-points`
    Changes(ChangesArgs),
    /// Finish an interrupted run without re-running its finished trials
    Resume(ResumeArgs),
    /// Give back what killed controllers left: restore hosts their runs tuned (from the fleet
    /// ledger beside the result store). Runs whose controller still runs are left alone
    Release(ReleaseArgs),
    /// An instance type's EBS and network caps beside a volume's, which one binds for
    /// throughput at 128 KiB and IOPS at 16 KiB, and candidates side by side (DescribeInstanceTypes,
    /// or its saved copy offline)
    // `limits` was its name until the glossary made "cap" the one word for these.
    #[command(alias = "limits")]
    Caps(CapsArgs),
    /// Make a fleet's certificate authority and the certificates agents and controllers
    /// present to each other (mutual TLS)
    Certs(CertsArgs),
    /// Serve the controller as a service (gRPC quietbench.v1.Controller): runs submitted by
    /// CI, dashboards or `--controller`, queued, kept across restarts, watched as they go
    Serve(ServeArgs),
    /// Cancel a run on a service (`--controller`): a queued run is dropped, a measuring one
    /// is interrupted as Ctrl-C interrupts `run`
    Cancel(CancelArgs),
    /// Run the run request in FILE (JSON), as `quietbench serve` starts each run it accepted
    #[command(hide = true)]
    RunRequest(RunRequestArgs),
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Only this run (its id or a unique prefix); by default every run whose controller is gone
    #[arg(long, value_name = "RUN")]
    run: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct CapsArgs {
    /// The instance type, e.g. r6i.8xlarge
    instance_type: String,
    /// The EBS volume, e.g. gp3:iops=16000,throughput=1000 or io2:iops=32000 (keys: iops,
    /// throughput in MiB/s for gp3, size in GiB)
    #[arg(long, value_name = "TYPE[:KEY=N,...]", value_parser = quietbench_controller::limits::volume_spec::parse_volume_spec)]
    volume: Option<quietbench_controller::limits::VolumeInfo>,
    /// Another instance type to put beside it (repeatable)
    #[arg(long = "vs", value_name = "TYPE")]
    vs: Vec<String>,
    /// On-demand prices: a CSV file of instance_type,usd_per_hour lines
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Answer from the copy saved by an earlier lookup; call no AWS API
    #[arg(long)]
    offline: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// The saved copy [default: $XDG_CACHE_HOME/quietbench/instance-types.json]
    #[arg(long, value_name = "FILE")]
    cache: Option<PathBuf>,
    #[command(flatten)]
    aws: AwsArgs,
}

impl CapsArgs {
    fn request(self) -> quietbench_controller::commands::limits::LimitsRequest {
        let mut types = vec![self.instance_type];
        types.extend(self.vs);
        quietbench_controller::commands::limits::LimitsRequest {
            types,
            volume: self.volume,
            prices: self.prices,
            offline: self.offline,
            json: self.json,
            aws: self.aws.target(),
            cache: self.cache,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The result store: an SQLite file, or a PostgreSQL database (postgres://USER@HOST/DB)
    /// [default: $QUIETBENCH_DB, else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// How many runs, newest first
    #[arg(long, default_value_t = 20)]
    limit: usize,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run's id, or a unique prefix of it
    run: String,
    /// The result store (an SQLite file, or postgres://USER@HOST/DB) [default: $QUIETBENCH_DB,
    /// else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// Write its JSON report to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write its HTML report to FILE
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The interrupted run's id, or a unique prefix of it
    run: String,
    /// The result store (an SQLite file, or postgres://USER@HOST/DB) [default: $QUIETBENCH_DB,
    /// else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// Agents to use instead of the stored addresses (remote runs), in the same order
    #[arg(long = "agent", value_name = "HOST:PORT")]
    agents: Vec<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The agent whose host to tune
    #[arg(long, value_name = "HOST:PORT", required = true)]
    agent: String,
    /// Every tuning step the host allows, system-wide ASLR off included (THP to madvise: huge
    /// pages only where asked, as the disk probes' buffers do)
    #[arg(long)]
    all: bool,
    /// Turn address-space randomization off system-wide (restored afterwards)
    #[arg(long)]
    aslr_off: bool,
    /// Move IRQ affinities off the probe CPUs
    #[arg(long)]
    steer_irqs: bool,
    /// Pause irqbalance while tuned
    #[arg(long)]
    pause_irqbalance: bool,
    /// Set the probe CPUs' cpufreq governor to performance (where exposed)
    #[arg(long)]
    governor: bool,
    /// Set transparent hugepages to this mode
    #[arg(long, value_name = "MODE", value_parser = ["always", "madvise", "never"])]
    thp: Option<String>,
    /// Drop the page cache (before disk probes)
    #[arg(long)]
    drop_caches: bool,
    /// The probe CPUs to keep quiet [default: every CPU but the agent's housekeeping CPU]
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    cpus: Option<CpuList>,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The agent whose host changes to undo
    #[arg(long, value_name = "HOST:PORT", required = true)]
    agent: String,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).multiple(false).args(["local", "agent"])))]
pub struct HostArgs {
    /// This machine (starts an agent here for the question)
    #[arg(long)]
    local: bool,
    /// A running agent
    #[arg(long, value_name = "HOST:PORT")]
    agent: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Clone)]
struct CpuList(Vec<u32>);

fn parse_param(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not KEY=VALUE (e.g. max_prime=20000)"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("'{text}' has no key before '='"));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

fn parse_seconds(text: &str, min: f64, max: f64) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !secs.is_finite() || secs < min || secs > max {
        return Err(format!(
            "{text} s is out of range: give {min} to {max} seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_run_id(text: &str) -> Result<String, String> {
    uuid::Uuid::parse_str(text)
        .map(|id| id.to_string())
        .map_err(|e| format!("'{text}' is not a run id (a UUID): {e}"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_seconds(text, 0.01, 3600.0)
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    parse_seconds(text, 0.01, 3600.0)
}

fn parse_cpus(text: &str) -> Result<CpuList, String> {
    let cpus = quietbench_host::parse_cpu_list(text).map_err(|e| e.to_string())?;
    if cpus.is_empty() {
        return Err("the CPU list is empty".into());
    }
    Ok(CpuList(cpus))
}

/// For the commands that only read the store and print: `quietbench runs | head` must end
/// quietly when `head` has read enough, as `ls | head` does, rather than panic in `println!`
/// (Rust ignores SIGPIPE, so the write fails with EPIPE and `println!` panics). Not for the
/// commands that talk to agents: a socket an agent closes must be an error the run handles,
/// never a signal that kills the controller mid-run with hosts still tuned.
fn stop_quietly_on_a_closed_pipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler of ours, so nothing runs in signal context; this runs
    // on the main thread before any other thread exists.
    if let Err(e) = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) } {
        tracing::debug!("cannot restore SIGPIPE's default: {e}");
    }
}

/// Runs a parsed command with the binary's `services` and maps the outcome to an exit code.
pub fn execute(command: ControllerCommand, services: Services) -> ExitCode {
    let mut context = CommandContext::with_services(services);
    match command.tls_args().map(TlsArgs::client) {
        Some(Err(err)) => {
            eprintln!("quietbench: error: {err:#}");
            return ExitCode::FAILURE;
        }
        Some(Ok(tls)) => context.tls = tls.map(std::sync::Arc::new),
        None => {}
    }
    // Store-only commands; with --controller they talk to a service over a socket.
    let reads_the_store = match &command {
        ControllerCommand::Runs(a) => !a.remote.is_given(),
        ControllerCommand::Show(a) => !a.remote.is_given(),
        ControllerCommand::History(a) => !a.remote_is_given(),
        ControllerCommand::Changes(_) => true,
        _ => false,
    };
    if reads_the_store {
        stop_quietly_on_a_closed_pipe();
    }
    let outcome = match command {
        ControllerCommand::Certs(args) => tls::certs_command(args),
        ControllerCommand::Run(args) => run::run_command(args, context),
        ControllerCommand::RunRequest(args) => run::run_request_file(&args, context),
        ControllerCommand::Serve(args) => serve::serve_command(args),
        ControllerCommand::Cancel(args) => serve::cancel_command(&args),
        ControllerCommand::Caps(args) => {
            quietbench_controller::commands::limits::limits(args.request(), &context)
        }
        ControllerCommand::Host(args) => host::host(&context, args.local, args.agent, args.json),
        ControllerCommand::Tune(args) => tune_command(args, &context),
        ControllerCommand::Restore(args) => host::restore(&context, &args.agent),
        ControllerCommand::Compare(args) => compare_command(args, context),
        ControllerCommand::Capacity(args) => capacity::capacity_command(args, context),
        ControllerCommand::Runs(args) => match args.remote.remote() {
            Some(remote) => quietbench_service::client::runs(&remote, args.limit),
            None => stored::list(args.db.as_deref(), args.limit),
        },
        ControllerCommand::Show(args) => match args.remote.remote() {
            Some(remote) => quietbench_service::client::show(
                &remote,
                &args.run,
                args.json.as_deref(),
                args.html.as_deref(),
            ),
            None => stored::show(args.db.as_deref(), &args.run, args.json, args.html),
        },
        ControllerCommand::History(args) => history::history_command(&args),
        ControllerCommand::Changes(args) => changes::changes_command(&args),
        ControllerCommand::Release(args) => {
            release::release(&context, &Ledger::default_location(), args.run.as_deref())
        }
        ControllerCommand::Resume(args) => {
            stored::resume(&context, args.db.as_deref(), &args.run, &args.agents)
        }
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("quietbench: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn tune_command(args: TuneArgs, context: &CommandContext) -> anyhow::Result<ExitCode> {
    let request = pb::PrepareRequest {
        all: args.all,
        aslr_off: args.aslr_off,
        steer_irqs: args.steer_irqs,
        pause_irqbalance: args.pause_irqbalance,
        performance_governor: args.governor,
        thp_mode: args.thp.unwrap_or_default(),
        drop_caches: args.drop_caches,
        probe_cpus: args.cpus.map(|c| c.0).unwrap_or_default(),
    };
    host::tune(context, &args.agent, request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// The controller's commands as the `quietbench` binary parses them (it adds `agent`).
    #[derive(Debug, Parser)]
    #[command(name = "quietbench")]
    struct Cli {
        #[command(subcommand)]
        command: ControllerCommand,
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_params_and_rejects_malformed_ones() {
        assert_eq!(
            parse_param("max_prime=20000"),
            Ok(("max_prime".into(), "20000".into()))
        );
        assert!(parse_param("max_prime").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_param("=5").is_err());
    }

    #[test]
    fn bounds_durations() {
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("inf").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("abc").unwrap_err().contains("not a number"));
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpus("1,3-4").unwrap().0, vec![1, 3, 4]);
        assert!(parse_cpus("").is_err());
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn a_run_request_file_takes_only_the_tls_to_agents() {
        assert!(Cli::try_parse_from(["quietbench", "run-request", "r.json"]).is_ok());
        assert!(
            Cli::try_parse_from(["quietbench", "run-request", "r.json", "--ca=ca.pem"]).is_ok()
        );
        assert!(Cli::try_parse_from(["quietbench", "run-request"]).is_err());
        assert!(Cli::try_parse_from(["quietbench", "run-request", "r.json", "--local"]).is_err());
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains("run-request"), "{help}");
    }

    #[test]
    fn run_needs_exactly_one_kind_of_target() {
        assert!(Cli::try_parse_from(["quietbench", "run"]).is_err());
        assert!(Cli::try_parse_from(["quietbench", "run", "--local", "--agent", "h:1"]).is_err());
        assert!(Cli::try_parse_from(["quietbench", "run", "--local"]).is_ok());
        assert!(
            Cli::try_parse_from(["quietbench", "run", "--agent", "a:1", "--agent", "b:2"]).is_ok()
        );
    }
}
