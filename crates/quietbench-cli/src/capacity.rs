//! `quietbench capacity`'s arguments and their translation into a capacity request.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};

use super::{Ec2Args, TlsArgs, parse_duration};
use quietbench_controller::commands::capacity::{CapacityRequest, run_capacity};
use quietbench_controller::commands::compare::ServerProbe;
use quietbench_controller::schedule::fresh_seed;
use quietbench_controller::verdicts::capacity::{Guards, SearchConfig, Slo};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).multiple(false).args(["local", "agents", "ec2"])))]
pub struct CapacityArgs {
    /// The command that starts server A, with {port} where its port goes (run without a shell
    /// unless --shell)
    #[arg(long, value_name = "CMD")]
    a: String,
    /// Server B: its capacity is searched beside A's, the two builds' steps interleaved, and
    /// B's capacity judged against A's
    #[arg(long, value_name = "CMD")]
    b: Option<String>,
    /// The latency objective every step must keep, each request timed from when it was due:
    /// pQ<BOUND, e.g. p99<20ms, p99.9<5ms, p50<800us
    #[arg(long, value_name = "SLO", value_parser = Slo::parse)]
    slo: Slo,
    /// The largest share of sent requests that may fail (connect errors, timeouts, 4xx, 5xx,
    /// broken responses) in a step that holds, percent
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    max_errors: f64,
    /// How the load talks to the servers: HTTP/1.1 (or HTTP/2 and TLS by --param), or tcp for
    /// a raw request/response protocol
    #[arg(long, value_name = "http|tcp", default_value = "http", value_parser = ["http", "tcp"])]
    probe: String,
    /// A parameter of the load or the servers, both builds alike (path=/search?q=x,
    /// connections=64, threads=2, warmup=1, ready_path=/health, env.NAME=VALUE; never rate=,
    /// which the search sets); repeatable
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = super::parse_param)]
    params: Vec<(String, String)>,
    /// The first rate offered, requests/s: the search doubles from it until a rate does not
    /// hold, or halves until one does
    #[arg(long, value_name = "RATE", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    start: u64,
    /// The lowest rate offered: a build that does not hold it has no capacity to report
    #[arg(long, value_name = "RATE", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    min: u64,
    /// The highest rate offered
    #[arg(long, value_name = "RATE", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max: u64,
    /// The search ends when the lowest rate that did not hold is within PCT percent of the
    /// highest that did (then that one is measured again to confirm it)
    #[arg(long, value_name = "PCT", default_value_t = 5.0)]
    resolution: f64,
    /// The most steps per build, confirmations included: a host too noisy to settle ends the
    /// search here, said to be unsettled
    #[arg(long, value_name = "N", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(2..=1000))]
    max_steps: u64,
    /// Rounds of every step: each build's trial at its rate on every host, in a random order
    /// per round; a step holds when all of them do
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// With --b: after the searches, offer both builds PCT percent of A's capacity and judge
    /// their p50 and p99 latency there as `compare` does (0: skip it)
    #[arg(long, value_name = "PCT", default_value_t = 50.0)]
    load_at: f64,
    /// Rounds of that comparison (a verdict needs 5 at least)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(5..=1000))]
    load_rounds: u32,
    /// Seconds each trial sends its load, the warm-up (warmup=, 1 s unless given) included
    #[arg(long, value_name = "SECS", default_value = "4", value_parser = parse_duration)]
    duration: Duration,
    /// Measure on this machine (a second agent here sends the load)
    #[arg(long)]
    local: bool,
    /// Measure on running agents; repeat for several hosts
    #[arg(long = "agent", value_name = "HOST:PORT")]
    agents: Vec<String>,
    /// With --agent: the agent that sends the requests, one for all hosts or one per host (with
    /// --ec2, a load instance is launched beside each host)
    #[arg(long = "load-from", value_name = "HOST:PORT")]
    load_from: Vec<String>,
    /// Run the server commands through /bin/sh -c
    #[arg(long)]
    shell: bool,
    /// Working directory of the servers
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Address-space randomization for the servers
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    aslr: String,
    /// Seed of every step's order (random by default)
    #[arg(long)]
    seed: Option<u64>,
    /// Write the capacities, curves and comparison as JSON (schema quietbench.capacity.v1)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the run's HTML report (every step a variant)
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The result store (an SQLite file, or postgres://USER@HOST/DB) [default: $QUIETBENCH_DB,
    /// else $XDG_DATA_HOME/quietbench/results.sqlite3]
    #[arg(long, value_name = "FILE|URL")]
    db: Option<PathBuf>,
    /// Keep no record in the result store
    #[arg(long, conflicts_with = "db")]
    no_store: bool,
    #[command(flatten)]
    pub(super) tls: TlsArgs,
    #[command(flatten)]
    ec2: Ec2Args,
}

pub(super) fn capacity_command(
    args: CapacityArgs,
    mut context: quietbench_controller::context::CommandContext,
) -> anyhow::Result<ExitCode> {
    args.ec2.apply_to(&mut context);
    if args.local && !args.load_from.is_empty() {
        anyhow::bail!(
            "--load-from names remote load agents; with --local a second agent on this machine \
             sends the requests"
        );
    }
    if args.ec2.ec2 && !args.load_from.is_empty() {
        anyhow::bail!(
            "--load-from names running load agents; with --ec2 a load instance is launched \
             beside each host"
        );
    }
    if !(args.resolution >= 0.1 && args.resolution <= 100.0) {
        anyhow::bail!(
            "--resolution {} must be a percentage from 0.1 to 100",
            args.resolution
        );
    }
    if !(args.max_errors >= 0.0 && args.max_errors < 100.0) {
        anyhow::bail!(
            "--max-errors {} must be a percentage from 0 to under 100",
            args.max_errors
        );
    }
    if !(args.load_at >= 0.0 && args.load_at <= 100.0) {
        anyhow::bail!(
            "--load-at {} must be a percentage from 0 to 100",
            args.load_at
        );
    }
    let params = quietbench_controller::commands::param_map(args.params)?;
    let mut builds = vec![args.a];
    builds.extend(args.b);
    run_capacity(CapacityRequest {
        context,
        builds,
        shell: args.shell,
        cwd: args.cwd,
        aslr_off: args.aslr == "off",
        protocol: if args.probe == "tcp" {
            ServerProbe::Tcp
        } else {
            ServerProbe::Http
        },
        params,
        load_from: args.load_from,
        local: args.local,
        agents: args.agents,
        ec2: args.ec2.spec(),
        guards: Guards {
            slo: args.slo,
            max_errors: args.max_errors / 100.0,
        },
        search: SearchConfig {
            start: args.start,
            min: args.min,
            max: args.max,
            resolution: args.resolution / 100.0,
            max_steps: args.max_steps as usize,
        },
        rounds: args.rounds,
        load_at: (args.load_at > 0.0).then_some(args.load_at),
        load_rounds: args.load_rounds,
        duration_ms: args.duration.as_millis() as u64,
        seed: args.seed.unwrap_or_else(fresh_seed),
        json: args.json,
        html: args.html,
        db: args.db,
        no_store: args.no_store,
    })
}
