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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

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

/// The result in JSON (docs/json-report.md, "capacity").
#[derive(Debug, Serialize)]
pub struct CapacityJson {
    /// Always "quietbench.capacity.v1".
    pub schema: &'static str,
    /// The SLO, as given (e.g. "p99 < 20 ms").
    pub slo: String,
    /// The largest fraction of failed requests a step may have.
    pub max_errors: f64,
    /// The search's resolution (0.05: 5%).
    pub resolution: f64,
    /// Each build's capacity.
    pub builds: Vec<BuildJson>,
    /// B against A (null with one build).
    pub comparison: Option<ComparisonJson>,
    /// B against A at a fixed share of A's capacity (null with one build, or without
    /// --load-at, or when A held no rate).
    pub at_load: Option<AtLoadJson>,
    /// The run's id in the result store (empty with --no-store).
    pub run_id: String,
}

/// One build in `builds`.
#[derive(Debug, Serialize)]
pub struct BuildJson {
    /// "A" or "B".
    pub build: String,
    /// Its server command.
    pub command: String,
    /// The highest rate that held, searched and confirmed (null: none did).
    pub capacity: Option<u64>,
    /// The lowest rate that did not (null: every rate up to --max held).
    pub failed_at: Option<u64>,
    /// Why it did not.
    pub why_failed: Option<String>,
    /// The bracket closed (or a bound was reached) before the steps ran out.
    pub settled: bool,
    /// The sentence the terminal prints.
    pub sentence: String,
    /// The lowest rate whose p99 was at least twice its p50, or went unanswered (null: none).
    pub knee: Option<f64>,
    /// Its latency–throughput curve: every step, in rate order.
    pub steps: Vec<StepJson>,
}

/// One step in `steps`.
#[derive(Debug, Serialize)]
pub struct StepJson {
    /// Offered, requests/s.
    pub rate: u64,
    /// The confirming step.
    pub confirm: bool,
    /// Its figures over its trials.
    #[serde(flatten)]
    pub figures: StepFigures,
    /// Whether the step held.
    pub passed: bool,
    /// Why not.
    pub why: Option<String>,
}

/// `comparison`.
#[derive(Debug, Serialize)]
pub struct ComparisonJson {
    /// "b_lower", "b_higher" or "not_apart".
    pub call: &'static str,
    /// The sentence the terminal prints.
    pub sentence: String,
}

/// `at_load`: latency at one fixed rate, judged as `compare --probe http` judges it.
#[derive(Debug, Serialize)]
pub struct AtLoadJson {
    /// The rate both were offered, requests/s.
    pub rate: u64,
    /// Its share of A's capacity, percent.
    pub percent_of_capacity: f64,
    /// The verdict on the p50 latency (null: none could be made, `sentence` says why).
    pub p50: Option<super::compare::RatioJson>,
    /// The verdict on the p99 latency.
    pub p99: Option<super::compare::RatioJson>,
    /// The sentence the terminal prints.
    pub sentence: String,
}

/// The comparison at a fixed load, once the searches are done.
struct LoadStep {
    rate: u64,
    percent: f64,
}

/// The load step, when two builds were searched, --load-at was given and A held a rate.
fn load_step(req: &CapacityRequest, searches: &[Search]) -> Option<LoadStep> {
    let percent = req.load_at?;
    let [a, _] = searches else { return None };
    let Next::Done(capacity) = a.next() else {
        return None;
    };
    let rate = ((capacity.rate? as f64) * percent / 100.0).round().max(1.0) as u64;
    Some(LoadStep { rate, percent })
}

impl LoadStep {
    fn name(&self, build: &str) -> String {
        format!("{build}.load@{}", self.rate)
    }

    fn variants(&self, req: &CapacityRequest) -> Vec<VariantSpec> {
        let options = CompareOptions {
            a: req.builds[0].clone(),
            b: req.builds[1].clone(),
            shell: req.shell,
            cwd: req.cwd.clone(),
            aslr_off: req.aslr_off,
        };
        NAMES
            .iter()
            .zip(&req.builds)
            .map(|(name, cmd)| {
                let mut params = server_params(&options, cmd, &req.params);
                params.insert("rate".into(), self.rate.to_string());
                params
                    .entry("warmup".to_string())
                    .or_insert_with(|| "1".to_string());
                VariantSpec {
                    name: self.name(name),
                    probe: probe_name(req.protocol).into(),
                    params,
                }
            })
            .collect()
    }

    fn judge(&self, run: &RunRecord) -> AtLoadJson {
        use crate::record::figures::{TrialFigure, stats_observations, trial_values};
        let judge = |figure| {
            let obs = stats_observations(
                &trial_values(run, None, figure),
                &self.name("A"),
                &self.name("B"),
            );
            quietbench_stats::judge(&obs, &crate::verdicts::compare::verdict_config(run))
        };
        let p50 = judge(TrialFigure::LatencyP50);
        let p99 = judge(TrialFigure::LatencyP99);
        let head = format!(
            "latency at {} requests/s ({}% of A's capacity)",
            thousands(self.rate),
            self.percent
        );
        let sentence = match (&p50, &p99) {
            (Ok(v50), Ok(v99)) => format!(
                "{head}, p50: {}\n{head}, p99: {}",
                first_line(v50),
                first_line(v99)
            ),
            (Err(e), _) | (_, Err(e)) => format!("{head}: no verdict: {e}"),
        };
        AtLoadJson {
            rate: self.rate,
            percent_of_capacity: self.percent,
            p50: p50.ok().as_ref().map(super::compare::ratio_json),
            p99: p99.ok().as_ref().map(super::compare::ratio_json),
            sentence,
        }
    }
}

fn first_line(v: &quietbench_stats::Verdict) -> String {
    v.to_string().lines().next().unwrap_or_default().to_string()
}

fn step_json(row: &StepRow) -> StepJson {
    StepJson {
        rate: row.rate,
        confirm: row.confirm,
        figures: row.figures.clone(),
        passed: row.outcome.is_ok(),
        why: row.outcome.clone().err(),
    }
}

/// A build's curve as a table, in rate order.
pub fn curve_lines(build: &str, rows: &[StepRow], slo_label: &str) -> Vec<String> {
    let mut mine: Vec<&StepRow> = rows.iter().filter(|r| r.build == build).collect();
    mine.sort_by_key(|r| (r.rate, r.confirm));
    let ns = |v: Option<f64>| v.map_or("-".to_string(), duration_text);
    let mut lines = vec![format!(
        "  {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}  held",
        "offered/s",
        "achieved/s",
        "p50",
        "p99",
        "p99.9",
        format!("worst {slo_label}"),
        "errors"
    )];
    for r in mine {
        let f = &r.figures;
        lines.push(format!(
            "  {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>7}  {}",
            format!("{}{}", thousands(r.rate), if r.confirm { "*" } else { "" }),
            f.achieved
                .map_or("-".into(), |a| thousands(a.round() as u64)),
            ns(f.p50_ns),
            ns(f.p99_ns),
            ns(f.p999_ns),
            ns(f.slo_ns),
            f.errors,
            match &r.outcome {
                Ok(()) => format!("yes ({}/{})", f.held, f.trials),
                Err(why) => format!("no: {why}"),
            }
        ));
    }
    lines
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
    let session = Session::for_hosts(
        &req.context,
        req.local,
        super::agent_entries(&req.agents)?,
        &req.load_from,
        true,
        FailurePolicy::default(),
    )?;
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
            steps: steps.into_iter().map(step_json).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdicts::capacity::Slo;

    fn request() -> CapacityRequest {
        CapacityRequest {
            context: crate::context::CommandContext::default(),
            builds: vec!["./server --port {port}".into()],
            shell: false,
            cwd: None,
            aslr_off: false,
            protocol: ServerProbe::Http,
            params: BTreeMap::new(),
            load_from: Vec::new(),
            local: true,
            agents: Vec::new(),
            guards: Guards {
                slo: Slo::parse("p99<20ms").unwrap(),
                max_errors: 0.01,
            },
            search: SearchConfig {
                start: 100,
                min: 10,
                max: 100_000,
                resolution: 0.05,
                max_steps: 30,
            },
            rounds: 1,
            load_at: Some(50.0),
            load_rounds: 10,
            duration_ms: 3000,
            seed: 7,
            json: None,
            html: None,
            db: None,
            no_store: true,
        }
    }

    #[test]
    fn parameters_the_search_owns_are_refused_with_the_reason() {
        assert_eq!(refusal(&request()), None);
        for (key, value, words) in [
            ("rate", "500", "the search chooses each step's rate"),
            ("server", "./x", "the servers are --a and --b"),
            ("target", "1.2.3.4:80", "the load goes to the server"),
            ("restart", "run", "restart=trial"),
        ] {
            let mut req = request();
            req.params.insert(key.into(), value.into());
            let why = refusal(&req).unwrap();
            assert!(why.contains(words), "{key}: {why}");
        }
        let mut req = request();
        req.guards.max_errors = 1.0;
        assert!(refusal(&req).unwrap().contains("--max-errors"));
        req = request();
        req.builds.clear();
        assert!(refusal(&req).unwrap().contains("give one server"));
    }

    #[test]
    fn each_step_offers_every_searching_build_its_own_rate() {
        let req = CapacityRequest {
            builds: vec!["./a {port}".into(), "./b {port}".into()],
            ..request()
        };
        let mut searches = vec![Search::new(req.search), Search::new(req.search)];
        let mut pending = Vec::new();
        let first = step_variants(&req, &searches, &mut pending);
        let names: Vec<&str> = first.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["A@100", "B@100"]);
        assert_eq!(first[1].params["server"], "./b {port}");
        assert_eq!(first[1].params["rate"], "100");
        assert_eq!(first[1].params["warmup"], "1");
        // A holds, B does not: A doubles, B halves.
        searches[0].record(100, false, Ok(()));
        searches[1].record(100, false, Err("p99 over".into()));
        let next = step_variants(&req, &searches, &mut pending);
        let names: Vec<&str> = next.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["A@200", "B@50"]);
        assert_eq!(pending, [(0, 200, false), (1, 50, false)]);
        assert!(
            failure_reason("x: the load generator fell behind its schedule by 12 ms")
                .starts_with("the load generator could not keep this rate")
        );
    }
}
