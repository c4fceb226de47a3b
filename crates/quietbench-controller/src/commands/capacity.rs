//! `quietbench capacity`: the highest offered rate at which a server keeps its latency SLO, its
//! errors under their bound and the load generator on its schedule, for one build or for A and
//! B, found by a search (doubling, then log-scale bisection, then a confirming step;
//! `verdicts::capacity::search`) on the hosts of one session.
//!
//! Every step is a short schedule of its own: each build still searching gets a variant at its
//! next rate (`A@1900`; a confirming step `A@1900.confirm`), the variants run `rounds` rounds
//! in a fresh random order per round and host (so A's and B's steps interleave), and the
//! step holds for a build when every trial of its variant held (every host, every round). The
//! rate is never ramped within a trial: each point of the latency–throughput curve is its own
//! steady trial, its warm-up (`warmup=` seconds, 1 by default) left out.
//!
//! A host that fails in a step (the load generator fell behind three times running, so the
//! trial is void) fails that step for every build in it: the rate is beyond what this load
//! agent can offer, which the report says, as it is no property of the server.
//!
//! `json` holds the result's schema and the steps' table; `load` the comparison at a fixed
//! load that follows two builds' searches.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

pub use json::{AtLoadJson, BuildJson, CapacityJson, ComparisonJson, StepJson, curve_lines};
use load::{LoadStep, load_step};

use super::compare::{CompareOptions, ServerProbe, server_params};
use crate::record::RunRecord;
use crate::schedule::VariantSpec;
use crate::verdicts::capacity::{
    Capacity, CapacityCall, Guards, Next, Search, SearchConfig, StepFigures, compare,
    duration_text, judge_step, thousands,
};

/// Parameters the search sets, or that cannot vary per step.
const SEARCH_OWNS: &[(&str, &str)] = &[
    (
        "rate",
        "the search chooses each step's rate (--start, --min, --max)",
    ),
    (
        "server",
        "the servers are --a and --b, started on the measured host for each trial",
    ),
    ("target", "the load goes to the server each trial starts"),
];

/// Everything `quietbench capacity` was asked.
#[derive(Debug, Clone)]
pub struct CapacityRequest {
    /// What the command reaches beyond its options.
    pub context: crate::context::CommandContext,
    /// The server commands: A, and B when two builds are compared.
    pub builds: Vec<String>,
    /// Run the commands through /bin/sh -c.
    pub shell: bool,
    /// Their working directory.
    pub cwd: Option<PathBuf>,
    /// ASLR off for the servers.
    pub aslr_off: bool,
    /// How the load talks to the servers.
    pub protocol: ServerProbe,
    /// The load's and the servers' shared parameters (never `rate`, `server`, `target`).
    pub params: BTreeMap<String, String>,
    /// The load agents (with `agents`).
    pub load_from: Vec<String>,
    /// Measure on this machine.
    pub local: bool,
    /// Or on these agents.
    pub agents: Vec<String>,
    /// Or on EC2 instances launched for the search (each host with a load instance).
    pub ec2: Option<crate::fleet::ec2::Ec2Spec>,
    /// What every step must keep.
    pub guards: Guards,
    /// How the search runs.
    pub search: SearchConfig,
    /// Rounds of every step.
    pub rounds: u32,
    /// With two builds: after the searches, both are offered this percentage of A's
    /// capacity for `load_rounds` rounds, and their latency at that load is judged as
    /// `compare` judges it (`None`: not measured).
    pub load_at: Option<f64>,
    /// Rounds of that comparison.
    pub load_rounds: u32,
    /// Seconds each trial sends its load, warm-up included, ms.
    pub duration_ms: u64,
    /// The seed of every step's order.
    pub seed: u64,
    /// The result's JSON file (schema quietbench.capacity.v1).
    pub json: Option<PathBuf>,
    /// The run's HTML report.
    pub html: Option<PathBuf>,
    /// The result store.
    pub db: Option<PathBuf>,
    /// Keep no record.
    pub no_store: bool,
}

/// One measured step of one build: a point of its latency–throughput curve.
#[derive(Debug, Clone)]
pub struct StepRow {
    /// "A" or "B".
    pub build: String,
    /// The rate offered, requests/s.
    pub rate: u64,
    /// The confirming step.
    pub confirm: bool,
    /// Its figures over its trials.
    pub figures: StepFigures,
    /// Held, or why not.
    pub outcome: Result<(), String>,
}

/// The builds' names, in order.
const NAMES: [&str; 2] = ["A", "B"];

fn variant_name(build: &str, rate: u64, confirm: bool) -> String {
    if confirm {
        format!("{build}@{rate}.confirm")
    } else {
        format!("{build}@{rate}")
    }
}

/// Why the request cannot run, or `None`.
pub fn refusal(req: &CapacityRequest) -> Option<String> {
    if req.builds.is_empty() || req.builds.len() > 2 {
        return Some("give one server (--a) or two (--a and --b)".into());
    }
    for (key, why) in SEARCH_OWNS {
        if req.params.contains_key(*key) {
            return Some(format!("--param {key}= is not for capacity: {why}"));
        }
    }
    if req.params.get("restart").is_some_and(|r| r == "run") {
        return Some(
            "restart=run keeps one server per variant, and every step of the search is a \
             variant: capacity starts a fresh server for every trial (restart=trial)"
                .into(),
        );
    }
    if !(req.guards.max_errors >= 0.0 && req.guards.max_errors < 1.0) {
        return Some("--max-errors must be a percentage from 0 to under 100".into());
    }
    req.search.refusal()
}

/// The variants of one step, for the builds whose searches go on; empty when all are done.
fn step_variants(
    req: &CapacityRequest,
    searches: &[Search],
    pending: &mut Vec<(usize, u64, bool)>,
) -> Vec<VariantSpec> {
    let options = CompareOptions {
        a: req.builds[0].clone(),
        b: req.builds.get(1).cloned().unwrap_or_default(),
        shell: req.shell,
        cwd: req.cwd.clone(),
        aslr_off: req.aslr_off,
    };
    pending.clear();
    let mut variants = Vec::new();
    for (i, search) in searches.iter().enumerate() {
        if let Next::Measure { rate, confirm } = search.next() {
            let mut params = server_params(&options, &req.builds[i], &req.params);
            params.insert("rate".into(), rate.to_string());
            params
                .entry("warmup".to_string())
                .or_insert_with(|| "1".to_string());
            variants.push(VariantSpec {
                name: variant_name(NAMES[i], rate, confirm),
                probe: probe_name(req.protocol).into(),
                params,
            });
            pending.push((i, rate, confirm));
        }
    }
    variants
}

fn probe_name(protocol: ServerProbe) -> &'static str {
    match protocol {
        ServerProbe::Http => "http",
        ServerProbe::Tcp => "tcp",
    }
}

/// Whether a host failed on void trials: the agent's words for a probe's failure, then the
/// probe's for a void trial (the http and tcp probes' load generator fell behind).
fn void_failure(error: &str) -> bool {
    error.contains(&format!(
        "{}{}",
        quietbench_vocab::PROBE_FAILED,
        quietbench_vocab::VOID
    ))
}

/// How a step's reason starts when the load generator, not the server, failed it.
const GENERATOR_BOUND: &str = "the load generator could not keep this rate";

/// A host's void failure as a step's reason.
fn failure_reason(error: &str) -> String {
    format!(
        "{GENERATOR_BOUND} (its trials were void): a bound of the load agent, not of the server \
         ({error})"
    )
}

/// Judges the step just measured, records it in the searches, and says it.
fn judge_pending(
    run: &mut RunRecord,
    req: &CapacityRequest,
    searches: &mut [Search],
    pending: &[(usize, u64, bool)],
    rows: &mut Vec<StepRow>,
) {
    // A host whose load generator could not keep this step's rate (its trial void three
    // times) fails the step for every build in it: that failure is the step's, and leaves the
    // run. Any other failure (an agent lost, a server that would not start) stays, and ends
    // the search with it: it says nothing of a rate.
    let (behind, others): (Vec<_>, Vec<_>) = run
        .host_failures
        .drain(..)
        .partition(|f| void_failure(&f.error));
    run.host_failures = others;
    let failed: Vec<String> = behind.iter().map(|f| failure_reason(&f.error)).collect();
    for &(i, rate, confirm) in pending {
        let name = variant_name(NAMES[i], rate, confirm);
        let trials: Vec<_> = run
            .trials
            .iter()
            .filter(|t| t.variant == name && !t.warmup)
            .collect();
        let (figures, mut outcome) = judge_step(&trials, &req.guards);
        if let Some(why) = failed.first() {
            outcome = Err(why.clone());
        }
        eprintln!(
            "quietbench: {} at {} requests/s{}: {}",
            NAMES[i],
            thousands(rate),
            if confirm { " (confirming)" } else { "" },
            match &outcome {
                Ok(()) => format!(
                    "held ({} {})",
                    req.guards.slo.label,
                    figures.slo_ns.map_or("-".into(), duration_text)
                ),
                Err(why) => format!("did not hold: {why}"),
            }
        );
        searches[i].record(rate, confirm, outcome.clone());
        rows.push(StepRow {
            build: NAMES[i].to_string(),
            rate,
            confirm,
            figures,
            outcome,
        });
    }
}

/// Runs the search and prints each build's curve and capacity, and B against A.
pub fn run_capacity(req: CapacityRequest) -> anyhow::Result<ExitCode> {
    use crate::execute::FailurePolicy;
    use crate::session::{Outputs, Session};

    if let Some(why) = refusal(&req) {
        anyhow::bail!(why);
    }
    let mut searches: Vec<Search> = req.builds.iter().map(|_| Search::new(req.search)).collect();
    let mut pending = Vec::new();
    let variants = step_variants(&req, &searches, &mut pending);
    let probe = probe_name(req.protocol);
    let settings = crate::record::RunSettings {
        probes: vec![probe.into()],
        params: BTreeMap::new(),
        rounds: req.rounds,
        duration_ms: req.duration_ms,
        interval_ms: req.duration_ms.min(1000),
        cpus: Vec::new(),
        tune: false,
        unpinned: false,
        variants,
        warmup: 0,
        seed: req.seed,
        round_sync: true,
        compare_figure: None,
        exec_figure: None,
        capacity_slo: Some(req.guards.slo.to_string()),
    };
    let session = match req.ec2.clone().map(|mut spec| {
        spec.allow_exec = true; // the hosts start the user's servers
        spec
    }) {
        Some(spec) if spec.dry_run => {
            req.context.ec2()?.dry_run(&spec, true)?;
            return Ok(ExitCode::SUCCESS);
        }
        // The fleet is launched once; every step runs on the same instances.
        Some(spec) => Session::for_ec2(&req.context, spec, true, FailurePolicy::default())?,
        None => Session::for_hosts(
            &req.context,
            req.local,
            super::agent_entries(&req.agents)?,
            &req.load_from,
            true,
            FailurePolicy::default(),
        )?,
    };
    let outputs = Outputs::new(
        None,
        req.html.clone(),
        None,
        req.db.as_deref(),
        req.no_store,
    )?
    .without_table();
    let mut rows: Vec<StepRow> = Vec::new();
    let mut load: Option<LoadStep> = None;
    let mut more = |run: &mut RunRecord| -> anyhow::Result<bool> {
        if load.is_some() {
            return Ok(false);
        }
        judge_pending(run, &req, &mut searches, &pending, &mut rows);
        if !run.host_failures.is_empty() {
            // A host failed for a reason other than the rate: the search ends here, with it.
            return Ok(false);
        }
        let next = step_variants(&req, &searches, &mut pending);
        if !next.is_empty() {
            run.settings.variants.extend(next);
            return Ok(true);
        }
        let Some(step) = load_step(&req, &searches) else {
            return Ok(false);
        };
        eprintln!(
            "quietbench: A and B at {} requests/s ({}% of A's capacity), {} rounds",
            thousands(step.rate),
            req.load_at.unwrap_or_default(),
            req.load_rounds
        );
        // Old steps' trials of the rounds added here are counted done by the session; they
        // were never planned.
        run.settings.rounds = req.load_rounds;
        run.settings.variants.extend(step.variants(&req));
        load = Some(step);
        Ok(true)
    };
    let (run, code) = session.drive_steps(
        crate::run::new_record(settings, None),
        outputs,
        &[],
        &mut |_, _| crate::execute::Flow::Continue,
        &mut more,
    )?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    let at_load = load.map(|step| step.judge(&run));
    let capacities: Vec<Capacity> = searches
        .iter()
        .map(|s| match s.next() {
            Next::Done(c) => c,
            // The session ended before the search did (it cannot without an error above).
            Next::Measure { .. } => Capacity {
                rate: None,
                unconfirmed: None,
                failed_at: None,
                why_failed: Some("the search did not finish".into()),
                settled: false,
                steps: 0,
            },
        })
        .collect();
    let slo = req.guards.slo.to_string();
    println!(
        "capacity under {slo}, errors at most {}%, the generator on schedule (resolution {}%; * \
         marks a confirming step):",
        req.guards.max_errors * 100.0,
        req.search.resolution * 100.0
    );
    let curves = crate::verdicts::capacity::load_curves(&run);
    let mut builds = Vec::new();
    for (i, capacity) in capacities.iter().enumerate() {
        let name = NAMES[i];
        let sentence = format!("{name}: {}", capacity.describe());
        println!("{name} ({}):", req.builds[i]);
        for line in curve_lines(name, &rows, &req.guards.slo.label) {
            println!("{line}");
        }
        println!("{sentence}");
        if let (Some(why), Some(at)) = (&capacity.why_failed, capacity.failed_at) {
            println!("  at {} requests/s: {why}", thousands(at));
            if why.starts_with(GENERATOR_BOUND) {
                println!(
                    "  the bound there was the load agent's, not the server's: its capacity may \
                     be higher (give the load more threads= or CPUs, or another load agent)"
                );
            }
        }
        let knee = curves
            .iter()
            .find(|c| c.server == req.builds[i])
            .and_then(|c| c.knee);
        if let Some(knee) = knee {
            println!(
                "  knee: from {} requests/s its p99 is {}x its p50 or more (or unanswered)",
                thousands(knee.round() as u64),
                crate::verdicts::capacity::KNEE_FACTOR
            );
        }
        let mut steps: Vec<&StepRow> = rows.iter().filter(|r| r.build == name).collect();
        steps.sort_by_key(|r| (r.rate, r.confirm));
        builds.push(BuildJson {
            build: name.into(),
            command: req.builds[i].clone(),
            capacity: capacity.rate,
            failed_at: capacity.failed_at,
            why_failed: capacity.why_failed.clone(),
            settled: capacity.settled,
            sentence,
            knee,
            steps: steps.into_iter().map(json::step_json).collect(),
        });
    }
    let comparison = match capacities.as_slice() {
        [a, b] => {
            let (call, sentence) = compare(a, b);
            println!("{sentence}");
            Some(ComparisonJson {
                call: match call {
                    CapacityCall::BLower => "b_lower",
                    CapacityCall::BHigher => "b_higher",
                    CapacityCall::NotApart => "not_apart",
                },
                sentence,
            })
        }
        _ => None,
    };
    if let Some(l) = &at_load {
        println!("{}", l.sentence);
    }
    if let Some(path) = &req.json {
        let body = CapacityJson {
            schema: "quietbench.capacity.v1",
            slo,
            max_errors: req.guards.max_errors,
            resolution: req.search.resolution,
            builds,
            comparison,
            at_load,
            run_id: if req.no_store {
                String::new()
            } else {
                run.run_id.clone()
            },
        };
        std::fs::write(path, serde_json::to_string_pretty(&body)? + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        eprintln!("quietbench: capacity written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

mod json;
mod load;

#[cfg(test)]
mod tests;
