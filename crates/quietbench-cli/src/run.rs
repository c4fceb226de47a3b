//! `quietbench run`'s arguments, and the typed request they become
//! ([`quietbench_controller::request::RunRequest`], where its other conversions are).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};

use super::{
    CpuList, Ec2Args, RemoteArgs, TlsArgs, parse_cpus, parse_duration, parse_interval, parse_param,
    parse_run_id,
};
use quietbench_controller::context::CommandContext;
use quietbench_controller::request::RunRequest;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).multiple(false).args(["local", "agents", "hosts_file", "plan", "ec2"])))]
pub struct RunArgs {
    /// Run a TOML plan file (docs/plans.md): hosts, variants, rounds and timing come from it;
    /// the output options (--json, --html, --hdr-log, --db) still apply
    #[arg(long, value_name = "FILE", conflicts_with_all = ["probes", "params", "peers", "cpus", "unpinned", "tune"])]
    plan: Option<PathBuf>,
    /// Measure on this machine: start an agent here (loopback, free port) for the run
    #[arg(long)]
    local: bool,
    /// Measure on a running agent; repeat for several hosts
    #[arg(long = "agent", value_name = "HOST:PORT")]
    agents: Vec<String>,
    /// Measure on the running agents listed in FILE: one `HOST:PORT [label]` a line, `#`
    /// starts a comment
    #[arg(long = "hosts", value_name = "FILE")]
    hosts_file: Option<PathBuf>,
    /// The peer agent that serves the other end of network probes (net.*), or that sends the
    /// requests of `http` (`--load-from`, the same flag): one for all hosts, or one per host in
    /// the same order. `--local` starts its own
    #[arg(
        long = "peer",
        visible_alias = "load-from",
        value_name = "HOST:PORT",
        conflicts_with = "local"
    )]
    peers: Vec<String>,
    /// Let each host start its next round as soon as it finished the last, rather than
    /// waiting for the others at round boundaries (the default keeps round r on every host at
    /// about the same time, so a fleet-wide time effect hits every host alike)
    #[arg(long)]
    no_round_sync: bool,
    /// Stop the whole run when one host fails; by default the others finish and the report
    /// names the missing trials
    #[arg(long)]
    fail_fast: bool,
    /// Wait this long for a lost or silent agent to come back (then run its trial once more)
    /// before the host fails; 0: fail at once
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    reconnect_within: u64,
    /// Probe to run; repeat for several [default: cpu.primes]
    #[arg(long = "probe", value_name = "PROBE")]
    probes: Vec<String>,
    /// A probe parameter, e.g. max_prime=20000 or threads=2; repeatable. Every probe of the run
    /// gets every parameter; the agent refuses one a probe does not have
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,
    /// A control: a fixed reference workload measured on every host beside the probes,
    /// interleaved with them (its variant is called "control"), e.g. --control cpu.primes or
    /// --control 'exec cmd=./baseline-build'. `history` and `compare --runs` can then
    /// normalize each host's figures by it (--normalize-by control), which takes out most of
    /// what differs between instances and days
    #[arg(long, value_name = "PROBE [KEY=VALUE ...]", value_parser = quietbench_controller::request::parse_control,
          conflicts_with = "plan")]
    control: Option<(String, std::collections::BTreeMap<String, String>)>,
    /// The figure exec and http trials are judged and spread on (as compare's --figure):
    /// exec's median or mean wall time, cpu time, or instructions (counted where the CPU's
    /// counters are exposed); http's p50 or p99 latency or server-cpu. Trials of the other
    /// probe keep their own default (median, p50). Overrides a plan's `figure`
    #[arg(long, value_name = "FIGURE",
          value_parser = ["median", "wall", "mean", "cpu", "instructions", "p50", "p99", "server-cpu"])]
    figure: Option<String>,
    /// Rounds: each round runs every probe once on every host, in a fresh random order
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rounds: u32,
    /// Warm-up rounds run first: stored and reported, left out of the summary
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    warmup: u32,
    /// Seed of the randomized trial order (recorded in the report; random by default)
    #[arg(long)]
    seed: Option<u64>,
    /// Measuring time of each trial, in seconds (e.g. 2.5)
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_duration)]
    duration: Duration,
    /// Reporting interval, in seconds
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    interval: Duration,
    /// CPUs to pin probe threads to, in the kernel's list format (e.g. 1, or 2-3,6); by default
    /// the agent places them off its housekeeping CPU
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    cpus: Option<CpuList>,
    /// Do not pin probe threads: let the scheduler place them (the baseline that placement is
    /// measured against)
    #[arg(long, conflicts_with = "cpus")]
    unpinned: bool,
    /// Tune each host before the run (IRQs off the probe CPUs, irqbalance paused, performance
    /// governor) and restore it after, also on failure or Ctrl-C. System-wide ASLR is left
    /// alone: use `quietbench tune --aslr-off` for that
    #[arg(long)]
    tune: bool,
    /// Write the JSON report (schema quietbench.run-report.v1, docs/json-report.md) to FILE,
    /// rewritten as trials finish (at most once a second) and at the end, however the run ends
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a single-file HTML report with charts to FILE
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write HdrHistogram interval logs (one per distribution metric) into DIR
    #[arg(long, value_name = "DIR")]
    hdr_log: Option<PathBuf>,
    /// The result store: an SQLite file, or a PostgreSQL database (postgres://USER@HOST/DB)
    /// [default: $QUIETBENCH_DB, else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// Keep no record in the result store
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
    /// The run's id, chosen by the caller: `quietbench serve` knows its runs' ids before they
    /// start
    #[arg(long, value_name = "UUID", hide = true, value_parser = parse_run_id)]
    run_id: Option<String>,
    #[command(flatten)]
    remote: RemoteArgs,
    #[command(flatten)]
    pub(super) tls: TlsArgs,
    #[command(flatten)]
    ec2: Ec2Args,
}

impl From<RunArgs> for RunRequest {
    fn from(args: RunArgs) -> Self {
        RunRequest {
            plan: args.plan,
            local: args.local,
            agents: args.agents,
            hosts_file: args.hosts_file,
            ec2: args.ec2.spec(),
            peers: args.peers,
            no_round_sync: args.no_round_sync,
            fail_fast: args.fail_fast,
            reconnect_within_s: args.reconnect_within,
            probes: args.probes,
            params: args.params,
            control: args.control,
            figure: args
                .figure
                .as_deref()
                .and_then(quietbench_controller::record::figures::TrialFigure::parse),
            rounds: args.rounds,
            warmup: args.warmup,
            seed: args.seed,
            duration_ms: millis(args.duration),
            interval_ms: millis(args.interval),
            cpus: args.cpus.map(|c| c.0).unwrap_or_default(),
            unpinned: args.unpinned,
            tune: args.tune,
            json: args.json,
            html: args.html,
            hdr_log: args.hdr_log,
            db: args.db,
            no_store: args.no_store,
            run_id: args.run_id,
            prewarm: args.ec2.prewarm,
            no_aws: args.ec2.no_aws,
            aws: quietbench_controller::request::Aws {
                region: args.ec2.aws.region,
                profile: args.ec2.aws.profile,
                endpoint_url: args.ec2.aws.endpoint_url,
            },
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `quietbench run`: here, or on a service with `--controller`.
pub(super) fn run_command(args: RunArgs, mut context: CommandContext) -> anyhow::Result<ExitCode> {
    if let Some(remote) = args.remote.remote() {
        return super::serve::run_remote(&remote, RunRequest::from(args));
    }
    let request = RunRequest::from(args);
    request.apply_to(&mut context);
    quietbench_controller::commands::run::run(context, request)
}

/// `quietbench run-request FILE` (hidden): a run whose whole request is in a file, as
/// `quietbench serve` starts each run it accepted. A command of its own rather than a flag of
/// `run`, which would have to exclude every other option of `run` and show in its usage.
#[derive(Debug, Args)]
pub struct RunRequestArgs {
    /// The request (JSON, as the service writes it)
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// How the run reaches agents (the service's identity toward them)
    #[command(flatten)]
    pub(super) tls: TlsArgs,
}

/// Runs the request in `args.file`.
pub(super) fn run_request_file(
    args: &RunRequestArgs,
    mut context: CommandContext,
) -> anyhow::Result<ExitCode> {
    let request = RunRequest::read(&args.file)?;
    request.apply_to(&mut context);
    quietbench_controller::commands::run::run(context, request)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use quietbench_proto::v1 as pb;

    use super::*;

    #[derive(Debug, Parser)]
    struct Run {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunRequest, String> {
        Run::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .map(|r| RunRequest::from(r.run))
            .map_err(|e| e.to_string())
    }

    /// What the command line accepts, the request's own check accepts, and the wire carries it
    /// unchanged; what the command line refuses, the check refuses too.
    #[test]
    fn the_command_line_and_the_request_check_agree() {
        let accepted: &[&[&str]] = &[
            &["--local"],
            &[
                "--local",
                "--probe",
                "exec",
                "--param",
                "cmd= ./x ",
                "--figure",
                "cpu",
            ],
            &[
                "--agent", "a:1", "--agent", "b:2", "--peer", "p:3", "--rounds", "100000",
            ],
            &[
                "--local",
                "--warmup",
                "1000",
                "--duration",
                "0.01",
                "--interval",
                "3600",
            ],
            &[
                "--local",
                "--reconnect-within",
                "0",
                "--cpus",
                "1,3-4",
                "--tune",
            ],
            &[
                "--local",
                "--control",
                "exec cmd='./base line'",
                "--seed",
                "7",
            ],
            &["--local", "--unpinned", "--fail-fast", "--no-round-sync"],
        ];
        for args in accepted {
            let request = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(request.check(), Ok(()), "{args:?}");
            let options = pb::RunOptions::from(&request);
            assert_eq!(
                RunRequest::try_from(&options).as_ref(),
                Ok(&request),
                "{args:?}"
            );
        }
        let local = RunRequest {
            local: true,
            ..RunRequest::default()
        };
        let refused: Vec<(&[&str], RunRequest)> = vec![
            (&["--rounds", "1"], RunRequest::default()),
            (
                &["--local", "--agent", "a:1"],
                RunRequest {
                    agents: vec!["a:1".into()],
                    ..local.clone()
                },
            ),
            (
                &["--local", "--rounds", "0"],
                RunRequest {
                    rounds: 0,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--rounds", "100001"],
                RunRequest {
                    rounds: 100_001,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--warmup", "1001"],
                RunRequest {
                    warmup: 1001,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--duration", "0.009"],
                RunRequest {
                    duration_ms: 9,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--interval", "3601"],
                RunRequest {
                    interval_ms: 3_601_000,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--reconnect-within", "3601"],
                RunRequest {
                    reconnect_within_s: 3601,
                    ..local.clone()
                },
            ),
            (
                &["--local", "--peer", "p:1"],
                RunRequest {
                    peers: vec!["p:1".into()],
                    ..local.clone()
                },
            ),
            (
                &["--local", "--unpinned", "--cpus", "1"],
                RunRequest {
                    unpinned: true,
                    cpus: vec![1],
                    ..local.clone()
                },
            ),
            (
                &["--local", "--no-store", "--db", "x"],
                RunRequest {
                    no_store: true,
                    db: Some("x".into()),
                    ..local.clone()
                },
            ),
            (
                &["--plan", "p.toml", "--probe", "exec"],
                RunRequest {
                    plan: Some("p.toml".into()),
                    probes: vec!["exec".into()],
                    ..RunRequest::default()
                },
            ),
            (
                &["--local", "--run-id", "nope"],
                RunRequest {
                    run_id: Some("nope".into()),
                    ..local.clone()
                },
            ),
        ];
        for (args, request) in refused {
            assert!(parse(args).is_err(), "the command line took {args:?}");
            assert!(
                request.check().is_err(),
                "the check took {args:?}: {request:?}"
            );
        }
    }
}
