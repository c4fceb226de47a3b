//! `quietbench compare`'s arguments and their translation into a compare request (or, with
//! `--runs`, a comparison of two stored runs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};

use super::{Ec2Args, TlsArgs, parse_duration, parse_seconds};
use quietbench_controller::commands::compare::{
    CompareOptions, CompareRequest, ServerProbe, Workload, refusal, run_compare,
};
use quietbench_controller::commands::compare_runs::{RunsRequest, run_compare_runs};
use quietbench_controller::record::figures::{Interleave, TrialFigure};
use quietbench_controller::schedule::fresh_seed;
use quietbench_controller::verdicts::capacity::SloGate;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").multiple(false).args(["local", "agents", "ec2"])))]
pub struct CompareArgs {
    /// Command A, the baseline (run without a shell unless --shell); with --probe http, the
    /// command that starts server A, with {port} where its port goes
    #[arg(long, value_name = "CMD", required_unless_present = "runs")]
    a: Option<String>,
    /// Command B, the candidate (with --probe http: server B)
    #[arg(long, value_name = "CMD", required_unless_present = "runs")]
    b: Option<String>,
    /// What A and B are: commands timed per invocation (exec), or servers that each trial
    /// starts on the measured host and times under the same offered load from a load agent
    /// (http, or tcp for a raw request/response protocol; docs/probes.md)
    #[arg(long, value_name = "exec|http|tcp", default_value = "exec",
          value_parser = ["exec", "http", "tcp"], conflicts_with = "runs")]
    probe: String,
    /// With --probe http: a parameter of the load or the servers, both sides alike (rate=500,
    /// path=/search?q=x, connections=16, warmup=2, ready_path=/health, env.NAME=VALUE;
    /// `quietbench probes` lists them); repeatable
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = super::parse_param)]
    params: Vec<(String, String)>,
    /// With --probe http on --agent hosts: the agent that sends the requests, one for all
    /// hosts or one per host in order (with --local, a second agent on this machine does)
    #[arg(long = "load-from", visible_alias = "peer", value_name = "HOST:PORT")]
    load_from: Vec<String>,
    /// Compare two stored runs instead, variant by variant (ids or unique prefixes, from
    /// `quietbench runs`); the first is the baseline. They were not interleaved, so the verdict
    /// covers only the scatter within each run
    #[arg(long, num_args = 2, value_names = ["RUN_A", "RUN_B"],
          conflicts_with_all = ["a", "b", "local", "agents", "precision", "budget", "no_store", "html"])]
    runs: Vec<String>,
    /// With --runs: the metric to compare (default: each variant's headline metric; exec
    /// trials compare their time per invocation)
    #[arg(long, requires = "runs")]
    metric: Option<String>,
    /// With --runs: divide each host's figures by its control's of the same rounds (the
    /// variant named here, e.g. "control" from `run --control`) before comparing, which takes
    /// out most of what differs between instances and days
    #[arg(long, value_name = "CONTROL", requires = "runs")]
    normalize_by: Option<String>,
    /// With --runs: the difference the verdict plans the fleet size for ("each run needs N
    /// hosts for a PCT% difference")
    #[arg(long, value_name = "PCT", default_value_t = 2.0, requires = "runs")]
    target_mde: f64,
    /// Measure on this machine
    #[arg(long)]
    local: bool,
    /// Measure on running agents; repeat for several hosts
    #[arg(long = "agent", value_name = "HOST:PORT")]
    agents: Vec<String>,
    /// Measured rounds (each runs A and B once per host, in random order); with --precision,
    /// the most rounds to run
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(5..=100_000))]
    rounds: u32,
    /// Warm-up rounds, run first and left out of the verdict
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Seconds each trial times its command (repeating it)
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_duration)]
    duration: Duration,
    /// Stop once the 95% interval is within ±PCT percent (checked every 5 rounds from round 20)
    #[arg(long, value_name = "PCT")]
    precision: Option<f64>,
    /// Stop after SECS whatever the interval
    #[arg(long, value_name = "SECS", value_parser = parse_budget)]
    budget: Option<Duration>,
    /// Exit with status 3 when B is significantly slower than A by more than PCT percent
    #[arg(long, value_name = "PCT")]
    fail_if_slower: Option<f64>,
    /// With --probe http or tcp: a latency SLO at an offered rate as a CI gate,
    /// pQ<BOUND@RATErps (e.g. p99<20ms@2000rps): both servers are offered RATE, and the
    /// command exits with status 3 when B breaks the SLO with 95% confidence (its requests over
    /// the bound, resampled by trial), saying how sure it is
    #[arg(long, value_name = "SLO@RATE", value_parser = SloGate::parse)]
    slo: Option<SloGate>,
    /// Run the commands through /bin/sh -c
    #[arg(long)]
    shell: bool,
    /// Working directory of the commands
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Address-space randomization for the commands
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    aslr: String,
    /// Seed of the trial order and the bootstrap (random by default)
    #[arg(long)]
    seed: Option<u64>,
    /// Each trial's figure. Commands: the median wall time of its invocations (the default;
    /// robust to the odd invocation a neighbour slowed), the mean (every invocation counts),
    /// the median CPU time (user + system: time a neighbour steals is not charged to the
    /// command, so steal does not move it), or retired user-mode instructions (almost no
    /// machine noise; only where the CPU's counters are exposed). Servers: the median request
    /// latency (p50, the default), the 99th percentile (p99), each request timed from when it
    /// was due, or the server's CPU time per request (server-cpu). The verdict states which it
    /// used and prints the others
    #[arg(long, value_name = "FIGURE",
          value_parser = ["median", "wall", "mean", "cpu", "instructions", "p50", "p99", "server-cpu"])]
    figure: Option<String>,
    /// How A and B take turns: back to back in every trial, in a random order per pair
    /// (cancels a host's fast and slow spells; the default for commands); at the same time on
    /// two CPUs, A on each CPU once in every two pairs (duet: an interference burst hits both);
    /// or in separate trials in a random order per round (the only way for servers)
    #[arg(long, value_name = "invocations|duet|trials",
          value_parser = ["invocations", "duet", "trials"])]
    interleave: Option<String>,
    /// CPUs to pin the commands to, in the kernel's list format (a duet uses two). By default
    /// the agent's placement chooses, and a duet's two sides go on separate physical cores
    /// when the host has two; name SMT siblings here to put them on one core
    #[arg(long, value_name = "LIST", value_parser = super::parse_cpus)]
    cpus: Option<super::CpuList>,
    /// Write the verdict as JSON (schema quietbench.compare.v1)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the run's HTML report
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
    remote: super::RemoteArgs,
    #[command(flatten)]
    pub(super) tls: TlsArgs,
    #[command(flatten)]
    ec2: Ec2Args,
}

pub(super) fn compare_command(
    args: CompareArgs,
    mut context: quietbench_controller::context::CommandContext,
) -> anyhow::Result<ExitCode> {
    args.ec2.apply_to(&mut context);
    let servers = match args.probe.as_str() {
        "http" => Some(ServerProbe::Http),
        "tcp" => Some(ServerProbe::Tcp),
        _ => None,
    };
    let figure = match args.figure.as_deref() {
        Some(word) => TrialFigure::parse(word).unwrap_or_default(),
        None if servers.is_some() => TrialFigure::LatencyP50,
        None => TrialFigure::Median,
    };
    if !(args.target_mde > 0.0 && args.target_mde < 100.0) {
        anyhow::bail!(
            "--target-mde {} must be a percentage between 0 and 100",
            args.target_mde
        );
    }
    if let Some(remote) = args.remote.remote() {
        let [baseline, candidate] = args.runs.as_slice() else {
            anyhow::bail!(
                "--controller compares stored runs (--runs RUN_A RUN_B); to measure two \
                 commands on the service, submit a plan with two [[variant]]s (run --plan)"
            );
        };
        if args.db.is_some() {
            anyhow::bail!("--controller asks the service's store: --db is not for it");
        }
        let request = quietbench_proto::v1::CompareRunsRequest {
            baseline: baseline.clone(),
            candidate: candidate.clone(),
            metric: args.metric.unwrap_or_default(),
            normalize_by: args.normalize_by.unwrap_or_default(),
            target_mde_pct: Some(args.target_mde),
            figure: args.figure.clone().unwrap_or_default(),
            fail_if_slower_pct: args.fail_if_slower,
            json: args.json.is_some(),
        };
        return quietbench_service::client::compare_runs(&remote, request, args.json.as_deref());
    }
    if let [baseline, candidate] = args.runs.as_slice() {
        return run_compare_runs(RunsRequest {
            baseline: baseline.clone(),
            candidate: candidate.clone(),
            metric: args.metric,
            figure,
            db: args.db,
            json: args.json,
            fail_if_slower: args.fail_if_slower,
            normalize_by: args.normalize_by,
            target_mde: args.target_mde / 100.0,
        });
    }
    let (Some(a), Some(b)) = (args.a, args.b) else {
        anyhow::bail!(
            "give two commands (--a CMD --b CMD) or two stored runs (--runs RUN_A RUN_B)"
        );
    };
    let ec2 = args.ec2.spec();
    if !args.local && args.agents.is_empty() && ec2.is_none() {
        anyhow::bail!(
            "say where to measure: --local, --agent HOST:PORT for each host, or --ec2 with its \
             options"
        );
    }
    let interleave = match args.interleave.as_deref() {
        Some(word) => Interleave::parse(word).unwrap_or_default(),
        None if servers.is_some() => Interleave::Trials,
        None => Interleave::Invocations,
    };
    let workload = if let Some(protocol) = servers {
        if args.local && !args.load_from.is_empty() {
            anyhow::bail!(
                "--load-from names remote load agents; with --local a second agent on this \
                 machine sends the requests"
            );
        }
        let mut params: std::collections::BTreeMap<String, String> =
            args.params.into_iter().collect();
        if let Some(gate) = &args.slo {
            match params.get("rate") {
                Some(rate) if *rate != gate.rate.to_string() => anyhow::bail!(
                    "--slo names the rate {} and --param rate={rate} another: give the rate once, \
                     in --slo",
                    gate.rate
                ),
                _ => {
                    params.insert("rate".into(), gate.rate.to_string());
                }
            }
        }
        Workload::Servers {
            protocol,
            params,
            load_from: args.load_from,
        }
    } else {
        if let Some((key, _)) = args.params.first() {
            anyhow::bail!(
                "--param {key}= is for --probe http or tcp; a command's options are compare's \
                 own flags"
            );
        }
        if !args.load_from.is_empty() {
            anyhow::bail!("--load-from sends a server's requests: it needs --probe http or tcp");
        }
        if args.slo.is_some() {
            anyhow::bail!(
                "--slo gates a server's latency: it needs --probe http or tcp (commands are \
                 gated by --fail-if-slower)"
            );
        }
        Workload::Commands
    };
    if let Some(why) = refusal(&workload, figure, interleave) {
        anyhow::bail!(why);
    }
    if interleave == Interleave::Duet {
        if args.slo.is_some() {
            anyhow::bail!(
                "--slo judges each server's own trials: it is not built for --interleave duet \
                 (use --interleave trials)"
            );
        }
        if figure == TrialFigure::Mean {
            anyhow::bail!(
                "--figure mean needs A's and B's invocation rates, which a duet's two threads \
                 share: use --figure median or cpu with --interleave duet"
            );
        }
        if let Some(cpus) = args.cpus.as_ref().filter(|c| c.0.len() < 2) {
            anyhow::bail!(
                "--interleave duet runs A and B on two CPUs at once: --cpus names {} (give two)",
                cpus.0.len()
            );
        }
    }
    if let Some(p) = args.precision.filter(|p| !(*p > 0.0 && *p < 100.0)) {
        anyhow::bail!("--precision {p} must be a percentage between 0 and 100");
    }
    run_compare(CompareRequest {
        context,
        options: CompareOptions {
            a,
            b,
            shell: args.shell,
            cwd: args.cwd,
            aslr_off: args.aslr == "off",
        },
        workload,
        local: args.local,
        agents: args.agents,
        ec2,
        rounds: args.rounds,
        warmup: args.warmup,
        duration_ms: args.duration.as_millis() as u64,
        seed: args.seed.unwrap_or_else(fresh_seed),
        figure,
        interleave,
        cpus: args.cpus.map(|c| c.0).unwrap_or_default(),
        precision: args.precision.map(|p| p / 100.0),
        budget: args.budget,
        fail_if_slower: args.fail_if_slower,
        slo: args.slo,
        json: args.json,
        html: args.html,
        db: args.db,
        no_store: args.no_store,
    })
}

fn parse_budget(text: &str) -> Result<Duration, String> {
    parse_seconds(text, 1.0, 7.0 * 86400.0)
}
