//! `quietbench run`: probes on this machine or on running agents, or a plan file's variants
//! (`--plan`), with a plan's verdicts and its adaptive stopping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::agent_entries;
use crate::context::CommandContext;
use crate::execute::{FailurePolicy, Flow};
use crate::fleet::HostEntry;
use crate::fleet::ec2::Ec2Spec;
use crate::record::RunSettings;
use crate::record::figures::TrialFigure;
use crate::run::{needs_peer, new_record};
use crate::schedule::{VariantSpec, fresh_seed};
use crate::session::{Outputs, Session};

/// Everything `quietbench run` was asked (its command-line options, parsed).
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// What the run reaches beyond its options: TLS, pre-warm, caps lookup, EC2 services.
    pub context: CommandContext,
    /// A plan file: hosts, variants, rounds and timing come from it.
    pub plan: Option<PathBuf>,
    /// `--prewarm` was given: it wins over the plan's `prewarm`.
    pub prewarm_given: bool,
    /// Measure on this machine.
    pub local: bool,
    /// Or on these running agents.
    pub agents: Vec<String>,
    /// Or on the agents a hosts file lists.
    pub hosts_file: Option<PathBuf>,
    /// Or on EC2 instances launched for the run.
    pub ec2: Option<Ec2Spec>,
    /// Peer agents of network probes: one for all hosts, or one per host.
    pub peers: Vec<String>,
    /// Hosts do not wait for each other at round boundaries.
    pub no_round_sync: bool,
    /// Stop the whole run when one host fails.
    pub fail_fast: bool,
    /// How long a lost agent is waited for (`--reconnect-within`); `None`: not at all.
    pub reconnect_within: Option<std::time::Duration>,
    /// Probes, in the order given (empty: the default probe).
    pub probes: Vec<String>,
    /// Probe parameters, KEY and VALUE.
    pub params: Vec<(String, String)>,
    /// `--control`: a reference workload measured beside the probes on every host, as the
    /// variant [`CONTROL_VARIANT`]: its probe and parameters.
    pub control: Option<(String, BTreeMap<String, String>)>,
    /// `--figure`: the figure exec trials are judged and spread on.
    pub figure: Option<TrialFigure>,
    /// Measured rounds.
    pub rounds: u32,
    /// Warm-up rounds.
    pub warmup: u32,
    /// Seed of the trial order (random when `None`).
    pub seed: Option<u64>,
    /// Measuring time of each trial.
    pub duration: Duration,
    /// Reporting interval.
    pub interval: Duration,
    /// CPUs to pin probe threads to (empty: the agent places them).
    pub cpus: Vec<u32>,
    /// Do not pin probe threads.
    pub unpinned: bool,
    /// Tune each host before the run and restore it after.
    pub tune: bool,
    /// The JSON report's file.
    pub json: Option<PathBuf>,
    /// The HTML report's file.
    pub html: Option<PathBuf>,
    /// The folder of HdrHistogram interval logs.
    pub hdr_log: Option<PathBuf>,
    /// The result store.
    pub db: Option<PathBuf>,
    /// Keep no record in the result store.
    pub no_store: bool,
    /// The run's id, when the caller chose it (`quietbench serve`); a new one otherwise.
    pub run_id: Option<String>,
}

/// `quietbench run`: measures the probes (or the plan's variants, with `--plan`) on the hosts
/// asked for, prints the table (and a plan's verdicts), and writes the reports asked for.
pub fn run(req: RunRequest) -> anyhow::Result<ExitCode> {
    if let Some(path) = req.plan.clone() {
        return run_plan(req, &path);
    }
    let outputs = req.outputs()?;
    let mut settings = RunSettings {
        probes: if req.probes.is_empty() {
            vec!["cpu.primes".to_string()]
        } else {
            req.probes
        },
        params: super::param_map(req.params)?,
        rounds: req.rounds,
        duration_ms: req.duration.as_millis() as u64,
        interval_ms: req.interval.min(req.duration).as_millis() as u64,
        cpus: req.cpus,
        tune: req.tune,
        unpinned: req.unpinned,
        variants: Vec::new(),
        warmup: req.warmup,
        seed: req.seed.unwrap_or_else(fresh_seed),
        round_sync: !req.no_round_sync,
        compare_figure: None,
        exec_figure: req.figure,
    };
    settings.variants = settings
        .probes
        .iter()
        .map(|probe| VariantSpec {
            name: probe.clone(),
            probe: probe.clone(),
            params: settings.params.clone(),
        })
        .collect();
    if let Some((probe, params)) = req.control {
        if settings.variants.iter().any(|v| v.name == CONTROL_VARIANT) {
            anyhow::bail!(
                "--control names its variant \"{CONTROL_VARIANT}\": no probe may be called that"
            );
        }
        if !settings.probes.contains(&probe) {
            settings.probes.push(probe.clone());
        }
        settings.variants.push(VariantSpec {
            name: CONTROL_VARIANT.to_string(),
            probe,
            params,
        });
    }
    add_figure_params(&mut settings.variants, settings.exec_figure);
    let wants_peer = settings.probes.iter().any(|p| needs_peer(p));
    let policy = FailurePolicy {
        fail_fast: req.fail_fast,
        reconnect_within: req.reconnect_within,
    };
    let session = if let Some(mut spec) = req.ec2 {
        spec.allow_exec = settings.probes.iter().any(|p| p == "exec");
        if spec.dry_run {
            req.context.ec2()?.dry_run(&spec, wants_peer)?;
            return Ok(ExitCode::SUCCESS);
        }
        Session::for_ec2(&req.context, spec, wants_peer, policy)?
    } else {
        let hosts = match &req.hosts_file {
            Some(path) => crate::fleet::read_hosts_file(path)?,
            None => agent_entries(&req.agents)?,
        };
        Session::for_hosts(
            &req.context,
            req.local,
            hosts,
            &req.peers,
            wants_peer,
            policy,
        )?
    };
    let (_run, code) = session.drive(
        new_record(settings, req.run_id),
        outputs,
        &[],
        &mut |_, _| Flow::Continue,
    )?;
    Ok(code)
}

impl RunRequest {
    /// Where the run's results go: the output options apply to flag and plan runs alike.
    fn outputs(&self) -> anyhow::Result<Outputs> {
        Outputs::new(
            self.json.clone(),
            self.html.clone(),
            self.hdr_log.clone(),
            self.db.as_deref(),
            self.no_store,
        )
    }
}

/// The variant name of `run --control`: what `history` and `compare --runs` normalise by
/// (`--normalize-by control`).
pub const CONTROL_VARIANT: &str = "control";

/// Exec variants get what their figure needs measured (instructions counted).
pub fn add_figure_params(variants: &mut [VariantSpec], figure: Option<TrialFigure>) {
    let Some(figure) = figure else { return };
    for v in variants.iter_mut().filter(|v| v.probe == "exec") {
        for (key, value) in figure.exec_params() {
            v.params.insert(key.to_string(), value.to_string());
        }
    }
}

/// Parses `--control "PROBE KEY=VALUE ..."`. Values with spaces are quoted as in a shell:
/// `--control "exec cmd='./baseline --fast'"`.
pub fn parse_control(text: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let words = quoted_words(text)?;
    let Some((probe, rest)) = words.split_first() else {
        return Err("give the control's probe, e.g. --control cpu.primes or \
                    --control 'cpu.primes max_prime=20000'"
            .into());
    };
    let mut params = BTreeMap::new();
    for word in rest {
        let (key, value) = word
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("'{word}' in --control is not KEY=VALUE"))?;
        params.insert(key.to_string(), value.to_string());
    }
    Ok((probe.clone(), params))
}

/// Words split at unquoted white space; single and double quotes group (and are removed).
fn quoted_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("--control has an unterminated {q} quote"));
    }
    words.extend(word);
    Ok(words)
}

fn run_plan(req: RunRequest, path: &Path) -> anyhow::Result<ExitCode> {
    let mut plan = crate::plan::read_plan(path, req.seed.unwrap_or_else(fresh_seed))?;
    if req.figure.is_some() {
        plan.settings.exec_figure = req.figure;
    }
    add_figure_params(&mut plan.settings.variants, plan.settings.exec_figure);
    let mut context = req.context.clone();
    if let Some(policy) = plan.prewarm.filter(|_| !req.prewarm_given) {
        context.prewarm = policy;
    }
    // The plan's [tls], unless the flags gave TLS already (they win).
    if let (Some(tls), None) = (&plan.tls, &context.tls) {
        context.tls = Some(std::sync::Arc::new(plan_tls(tls)?));
    }
    if req.no_round_sync {
        plan.settings.round_sync = false;
    }
    let variants = plan.settings.variants.len();
    let seed = plan.settings.seed;
    let rule = match plan.precision {
        None => None,
        Some(_) if variants < 2 => anyhow::bail!(
            "{}: precision_pct stops the run once every variant's ratio to the first is known \
             that closely: give two or more [[variant]]s",
            path.display()
        ),
        Some(target) => {
            let first_look = quietbench_stats::stopping::MIN_ROUNDS_BEFORE_FIRST_LOOK;
            if plan.settings.rounds < first_look {
                anyhow::bail!(
                    "{}: precision_pct looks at the intervals from round {first_look} on: set \
                     rounds = {first_look} or more (the most rounds to run)",
                    path.display()
                );
            }
            Some(quietbench_stats::StoppingRule::new(
                target,
                first_look,
                5,
                plan.settings.rounds,
                plan.budget,
            )?)
        }
    };
    let wants_peer = plan.settings.variants.iter().any(|v| needs_peer(&v.probe));
    let policy = FailurePolicy {
        fail_fast: req.fail_fast || plan.fail_fast,
        reconnect_within: req.reconnect_within,
    };
    if let Some(spec) = &mut plan.ec2 {
        spec.allow_exec = plan.settings.variants.iter().any(|v| v.probe == "exec");
    }
    let (session, host_count) = match plan.ec2.take() {
        Some(spec) if spec.dry_run => {
            context.ec2()?.dry_run(&spec, wants_peer)?;
            return Ok(ExitCode::SUCCESS);
        }
        Some(spec) => {
            let count = spec.count as usize;
            (Session::for_ec2(&context, spec, wants_peer, policy)?, count)
        }
        None => {
            let hosts = match &plan.hosts_file {
                Some(file) => crate::fleet::read_hosts_file(file)?,
                None => plan_entries(&plan.agents, path),
            };
            // Hosts in the schedule, for the stopping rule's end-of-round test (a hosts
            // file's too).
            let count = if plan.local { 1 } else { hosts.len() };
            (
                Session::for_hosts(&context, plan.local, hosts, &plan.peers, wants_peer, policy)?,
                count,
            )
        }
    };
    let outputs = req.outputs()?;
    let started = std::time::Instant::now();
    let budget = plan.budget;
    let (run, code) = session.drive(
        new_record(plan.settings, req.run_id.clone()),
        outputs,
        &[],
        &mut |run, planned| {
            if budget.is_some_and(|b| started.elapsed() >= b) {
                eprintln!("quietbench: the plan's time budget is spent: stopping");
                return Flow::Stop;
            }
            let round_done = !planned.warmup
                && run
                    .trials
                    .iter()
                    .filter(|t| t.round == planned.round)
                    .count()
                    == variants * host_count;
            match &rule {
                Some(rule)
                    if round_done
                        && crate::verdicts::plan::precision_reached(
                            run,
                            rule,
                            seed,
                            started.elapsed(),
                        ) =>
                {
                    eprintln!(
                        "quietbench: every comparison is within ±{}%: stopping after round {}",
                        rule.target_half_width * 100.0,
                        planned.round
                    );
                    Flow::Stop
                }
                _ => Flow::Continue,
            }
        },
    )?;
    for verdict in crate::verdicts::plan::judge_plan(&run, seed) {
        println!("{verdict}");
    }
    Ok(code)
}

/// The identity a plan's `[tls]` table gives.
fn plan_tls(plan: &crate::plan::PlanTls) -> anyhow::Result<crate::tls::ClientTls> {
    use crate::plan::TokenSource;
    let token = match &plan.token {
        None => None,
        Some(TokenSource::File(path)) => Some(
            crate::tls::read_token_file(path)
                .map_err(|e| anyhow::anyhow!("[tls] token_file: {e}"))?,
        ),
        Some(TokenSource::Env(var)) => Some(
            std::env::var(var)
                .map_err(|_| anyhow::anyhow!("[tls] token_env: ${var} is not set"))?
                .trim()
                .to_string(),
        ),
    };
    let identity = plan
        .identity
        .as_ref()
        .map(|(c, k)| (c.as_path(), k.as_path()));
    crate::tls::ClientTls::load(&plan.ca, identity, token)
}

/// Hosts a plan lists, in order.
fn plan_entries(addresses: &[String], plan: &Path) -> Vec<HostEntry> {
    addresses
        .iter()
        .map(|a| HostEntry {
            address: a.clone(),
            label: None,
            source: plan.display().to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_is_a_probe_and_its_parameters_with_quoted_values() {
        let (probe, params) =
            parse_control(r#"exec shell=true cmd='exec sleep "$QB_CONTROL"'"#).unwrap();
        assert_eq!(probe, "exec");
        assert_eq!(params["shell"], "true");
        assert_eq!(params["cmd"], r#"exec sleep "$QB_CONTROL""#);
        let (probe, params) = parse_control("cpu.primes").unwrap();
        assert_eq!((probe.as_str(), params.len()), ("cpu.primes", 0));
        assert!(
            parse_control("  ")
                .unwrap_err()
                .contains("give the control's probe")
        );
        assert!(
            parse_control("exec cmd")
                .unwrap_err()
                .contains("not KEY=VALUE")
        );
        assert!(
            parse_control("exec cmd='x")
                .unwrap_err()
                .contains("unterminated")
        );
    }
}
