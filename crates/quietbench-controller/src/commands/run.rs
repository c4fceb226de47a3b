//! `quietbench run`: probes on this machine or on running agents, or a plan file's variants
//! (`--plan`), with a plan's verdicts and its adaptive stopping.

use std::path::Path;
use std::process::ExitCode;

use super::agent_entries;
use crate::context::CommandContext;
use crate::execute::{FailurePolicy, Flow};
use crate::fleet::HostEntry;
use crate::record::RunSettings;
use crate::record::figures::TrialFigure;
use crate::request::RunRequest;
use crate::run::{needs_peer, new_record};
use crate::schedule::{VariantSpec, fresh_seed};
use crate::session::{Outputs, Session};

/// `quietbench run`: measures the probes (or the plan's variants, with `--plan`) on the hosts
/// asked for, prints the table (and a plan's verdicts), and writes the reports asked for.
pub fn run(context: CommandContext, req: RunRequest) -> anyhow::Result<ExitCode> {
    if let Some(path) = req.plan.clone() {
        return run_plan(&context, req, &path);
    }
    let outputs = outputs(&req)?;
    let policy = FailurePolicy {
        fail_fast: req.fail_fast,
        reconnect_within: req.reconnect_within(),
    };
    let mut settings = RunSettings {
        probes: if req.probes.is_empty() {
            vec!["cpu.primes".to_string()]
        } else {
            req.probes
        },
        params: super::param_map(req.params)?,
        rounds: req.rounds,
        duration_ms: req.duration_ms,
        interval_ms: req.interval_ms.min(req.duration_ms),
        cpus: req.cpus,
        tune: req.tune,
        unpinned: req.unpinned,
        variants: Vec::new(),
        warmup: req.warmup,
        seed: req.seed.unwrap_or_else(fresh_seed),
        round_sync: !req.no_round_sync,
        compare_figure: None,
        exec_figure: req.figure,
        capacity_slo: None,
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
    let session = if let Some(mut spec) = req.ec2 {
        spec.allow_exec = settings.probes.iter().any(|p| runs_command(p));
        if spec.dry_run {
            context.ec2()?.dry_run(&spec, wants_peer)?;
            return Ok(ExitCode::SUCCESS);
        }
        Session::for_ec2(&context, spec, wants_peer, policy)?
    } else {
        let hosts = match &req.hosts_file {
            Some(path) => crate::fleet::read_hosts_file(path)?,
            None => agent_entries(&req.agents)?,
        };
        Session::for_hosts(&context, req.local, hosts, &req.peers, wants_peer, policy)?
    };
    let (_run, code) = session.drive(
        new_record(settings, req.run_id),
        outputs,
        &[],
        &mut |_, _| Flow::Continue,
    )?;
    Ok(code)
}

/// Where the run's results go: the output options apply to flag and plan runs alike.
fn outputs(req: &RunRequest) -> anyhow::Result<Outputs> {
    Outputs::new(
        req.json.clone(),
        req.html.clone(),
        req.hdr_log.clone(),
        req.db.as_deref(),
        req.no_store,
    )
}

/// The variant name of `run --control`: what `history` and `compare --runs` normalize by
/// (`--normalize-by control`).
pub const CONTROL_VARIANT: &str = "control";

/// Whether a probe runs the user's program on the measured host (exec's command, a server's
/// command), so an EC2 fleet's agents must allow it (`--allow-exec`).
fn runs_command(probe: &str) -> bool {
    probe == "exec" || crate::run::runs_server(probe)
}

/// Exec variants get what their figure needs measured (instructions counted).
pub fn add_figure_params(variants: &mut [VariantSpec], figure: Option<TrialFigure>) {
    let Some(figure) = figure else { return };
    for v in variants.iter_mut().filter(|v| v.probe == "exec") {
        for (key, value) in figure.exec_params() {
            v.params.insert(key.to_string(), value.to_string());
        }
    }
}

fn run_plan(context: &CommandContext, req: RunRequest, path: &Path) -> anyhow::Result<ExitCode> {
    let mut plan = crate::plan::read_plan(path, req.seed.unwrap_or_else(fresh_seed))?;
    if req.figure.is_some() {
        plan.settings.exec_figure = req.figure;
    }
    add_figure_params(&mut plan.settings.variants, plan.settings.exec_figure);
    let mut context = context.clone();
    if let Some(policy) = plan.prewarm.filter(|_| req.prewarm.is_none()) {
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
        reconnect_within: req.reconnect_within(),
    };
    if let Some(spec) = &mut plan.ec2 {
        spec.allow_exec = plan
            .settings
            .variants
            .iter()
            .any(|v| runs_command(&v.probe));
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
    let outputs = outputs(&req)?;
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
