//! `quietbench compare`: an A/B comparison of two commands that states its interval and what it
//! could not detect. By default every trial times A and B in pairs, back to back in a random
//! order for each pair, on a pinned CPU (`--interleave invocations`); with `--interleave
//! trials`, trials of A and B interleave in a fresh random order every round on every host
//! (RMIT). Either way the verdict comes from paired per-round ratios (see docs/statistics.md).
//!
//! With `--probe http`, A and B are two builds of a server: every trial starts one of them on
//! the measured host, sends it the same offered load from the load agent, and stops it; trials
//! of A and B interleave per round (RMIT), and the verdict is on a latency percentile or the
//! server's CPU time per request.

use std::collections::BTreeMap;
use std::path::PathBuf;

use quietbench_stats::{Verdict, VerdictKind};
use serde::Serialize;

use crate::record::RunRecord;
use crate::record::figures::{Interleave, PAIRED_VARIANT, TrialFigure};
use crate::verdicts::compare::{
    ByModel, OtherFigure, cpu_model_lines, judge_by_model, judge_run, observations,
    other_figure_lines, other_figures, verdict_config,
};

pub use workload::{ServerProbe, Workload, refusal, server_params};

/// Exit code when `--fail-if-slower` finds B slower beyond the given percentage.
pub const EXIT_SLOWER: u8 = 3;

/// The command-line options of `compare` that shape the probe.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Command A.
    pub a: String,
    /// Command B.
    pub b: String,
    /// Run through /bin/sh -c.
    pub shell: bool,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// ASLR on or off for the commands.
    pub aslr_off: bool,
}

/// The exec parameters of one side.
pub fn exec_params(opts: &CompareOptions, cmd: &str) -> BTreeMap<String, String> {
    let mut params = BTreeMap::new();
    params.insert("cmd".to_string(), cmd.to_string());
    params.insert("shell".to_string(), opts.shell.to_string());
    params.insert(
        "aslr".to_string(),
        if opts.aslr_off { "off" } else { "on" }.to_string(),
    );
    if let Some(dir) = &opts.cwd {
        params.insert("cwd".to_string(), dir.display().to_string());
    }
    params
}

/// The fields every verdict in JSON shares (`compare` and `compare --runs`).
#[derive(Debug, Clone, Serialize)]
pub struct RatioJson {
    /// "no_difference", "a_faster" (the first is better) or "b_faster".
    pub verdict: &'static str,
    /// Second / first.
    pub ratio: f64,
    /// Lower end of the confidence interval of the ratio.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
    /// Smallest relative difference detectable at 80% power (0.006 = 0.6%).
    pub mde: f64,
}

/// The verdict in the `--json` file: a stable schema (docs/json-report.md, "compare").
#[derive(Debug, Serialize)]
pub struct VerdictJson {
    /// Always "quietbench.compare.v1".
    pub schema: &'static str,
    /// The outcome: B / A of the time per invocation (geometric mean of paired per-round
    /// ratios), its interval and the smallest difference this run could detect.
    #[serde(flatten)]
    pub estimate: RatioJson,
    /// Paired rounds used.
    pub rounds: usize,
    /// Hosts used.
    pub hosts: usize,
    /// How the interval was computed.
    pub method: String,
    /// Each trial's figure: "median", "mean", "cpu" or "instructions" (exec); "p50", "p99" or
    /// "server-cpu" (http).
    pub figure: &'static str,
    /// How A and B took turns: "invocations" (pairs within every trial), "duet" or "trials".
    pub interleave: &'static str,
    /// What A and B are: "exec" (two commands), "http" or "tcp" (two servers under load).
    pub probe: &'static str,
    /// The sentence the terminal prints.
    pub sentence: String,
    /// What to know before trusting it.
    pub warnings: Vec<String>,
    /// The same run judged on the other figures (the CPU time beside a wall time, the wall
    /// time beside the CPU time, both beside instructions).
    pub other_figures: Vec<OtherFigureJson>,
    /// Commands compared.
    pub a: String,
    /// Commands compared.
    pub b: String,
    /// The run's id in the result store (null with --no-store).
    pub run_id: String,
    /// Why the run stopped (adaptive stopping), when it stopped early.
    pub stopped: Option<String>,
    /// With --slo: each server's share of requests over the SLO's bound (null otherwise).
    pub slo: Option<SloJson>,
    /// Where the hosts drew several CPU models: each model's own verdict (empty otherwise).
    pub cpu_models: Vec<ModelVerdictJson>,
    /// Whether the change differs between CPU models (null with fewer than two judged models).
    pub interaction: Option<InteractionJson>,
}

/// `slo`: the gate of `--slo` and what each server did against it.
#[derive(Debug, Serialize)]
pub struct SloJson {
    /// The SLO, "p99 < 20 ms".
    pub slo: String,
    /// The offered rate it holds at, requests/s.
    pub rate: u64,
    /// A's share over the bound (null without trials that recorded latencies).
    pub a: Option<crate::verdicts::capacity::SloShare>,
    /// B's.
    pub b: Option<crate::verdicts::capacity::SloShare>,
    /// B breaks the SLO with 95% confidence: the gate fails (exit 3).
    pub b_breaks: bool,
    /// The lines the terminal prints.
    pub sentences: Vec<String>,
}

/// One entry of `other_figures`.
#[derive(Debug, Serialize)]
pub struct OtherFigureJson {
    /// "median", "cpu" or "instructions"; "p50", "p99" or "server-cpu".
    pub figure: &'static str,
    /// Its verdict.
    #[serde(flatten)]
    pub estimate: RatioJson,
    /// Its B/A lies outside the used verdict's interval.
    pub disagrees: bool,
}

/// One CPU model's verdict in `cpu_models`.
#[derive(Debug, Serialize)]
pub struct ModelVerdictJson {
    /// The CPU model.
    pub cpu_model: String,
    /// Its hosts' agent addresses.
    pub hosts: Vec<String>,
    /// Its verdict, null when it has none.
    pub estimate: Option<RatioJson>,
    /// The sentence, or why there is no verdict.
    pub sentence: String,
}

/// `interaction`: the models with the lowest and highest B/A and how far apart they are.
#[derive(Debug, Serialize)]
pub struct InteractionJson {
    /// The model with the lowest B/A.
    pub low: String,
    /// The model with the highest B/A.
    pub high: String,
    /// high's B/A over low's.
    pub ratio: f64,
    /// Lower end of its interval.
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// Confidence level.
    pub level: f64,
    /// The interval excludes 1: the change differs between models.
    pub differs: bool,
    /// The sentence the terminal prints.
    pub sentence: String,
}

pub(crate) fn ratio_json(v: &Verdict) -> RatioJson {
    RatioJson {
        verdict: match v.kind {
            VerdictKind::NoDifference => "no_difference",
            VerdictKind::AFaster => "a_faster",
            VerdictKind::BFaster => "b_faster",
        },
        ratio: v.ratio,
        ci_low: v.ci_low,
        ci_high: v.ci_high,
        level: v.level.get(),
        mde: v.mde,
    }
}

/// The JSON of a compare run judged per CPU model.
fn by_model_json(by_model: Option<&ByModel>) -> (Vec<ModelVerdictJson>, Option<InteractionJson>) {
    let Some(b) = by_model else {
        return (Vec::new(), None);
    };
    let models = b
        .models
        .iter()
        .map(|m| ModelVerdictJson {
            cpu_model: m.cpu_model.clone(),
            hosts: m.hosts.clone(),
            estimate: m.verdict.as_ref().ok().map(ratio_json),
            sentence: match &m.verdict {
                Ok(v) => v.to_string().lines().next().unwrap_or_default().to_string(),
                Err(why) => format!("no verdict: {why}"),
            },
        })
        .collect();
    let interaction = b.interaction.as_ref().map(|i| InteractionJson {
        low: i.low.clone(),
        high: i.high.clone(),
        ratio: i.difference.ratio,
        ci_low: i.difference.ci_low,
        ci_high: i.difference.ci_high,
        level: i.difference.level.get(),
        differs: i.difference.differs,
        sentence: i.sentence.clone(),
    });
    (models, interaction)
}

/// The JSON form of a verdict. `others` are the same run judged on the other figures.
#[allow(clippy::too_many_arguments)]
pub fn verdict_json(
    v: &Verdict,
    a: &str,
    b: &str,
    run_id: &str,
    (figure, interleave, probe): (TrialFigure, Interleave, &'static str),
    stopped: Option<String>,
    by_model: Option<&ByModel>,
    others: &[OtherFigure],
    slo: Option<SloJson>,
) -> VerdictJson {
    let (cpu_models, interaction) = by_model_json(by_model);
    let mut warnings = v.warnings.clone();
    warnings.extend(other_figure_lines(figure, others).1);
    VerdictJson {
        schema: "quietbench.compare.v1",
        estimate: ratio_json(v),
        rounds: v.rounds,
        hosts: v.hosts,
        method: v.method.clone(),
        figure: figure.as_str(),
        interleave: interleave.as_str(),
        probe,
        sentence: v.to_string(),
        warnings,
        other_figures: others
            .iter()
            .map(|o| OtherFigureJson {
                figure: o.figure.as_str(),
                estimate: ratio_json(&o.verdict),
                disagrees: o.disagrees,
            })
            .collect(),
        a: a.to_string(),
        b: b.to_string(),
        run_id: run_id.to_string(),
        stopped,
        slo,
        cpu_models,
        interaction,
    }
}

/// Whether `--fail-if-slower PCT` fails: B significantly slower (the interval excludes 1) and
/// slower by more than PCT percent at the point estimate.
pub fn fails_slower(v: &Verdict, pct: f64) -> bool {
    v.kind == VerdictKind::AFaster && (v.ratio - 1.0) * 100.0 > pct
}

/// Everything `quietbench compare` was asked.
#[derive(Debug, Clone)]
pub struct CompareRequest {
    /// What the comparison reaches beyond its options: TLS, caps lookup, EC2 services.
    pub context: crate::context::CommandContext,
    /// The commands and how they run.
    pub options: CompareOptions,
    /// Whether A and B are commands or servers.
    pub workload: Workload,
    /// Measure on this machine.
    pub local: bool,
    /// Or on these agents.
    pub agents: Vec<String>,
    /// Or on EC2 instances launched for the run.
    pub ec2: Option<crate::fleet::ec2::Ec2Spec>,
    /// Measured rounds (the maximum, with a precision target).
    pub rounds: u32,
    /// Warm-up rounds.
    pub warmup: u32,
    /// Time each trial times its command, ms.
    pub duration_ms: u64,
    /// Seed of the interleaved order and the bootstrap.
    pub seed: u64,
    /// Which figure of each trial the verdict compares.
    pub figure: TrialFigure,
    /// How A and B take turns.
    pub interleave: Interleave,
    /// CPUs to pin to (empty: placement chooses; a duet takes the first two).
    pub cpus: Vec<u32>,
    /// Stop early once the interval's half-width is at most this fraction (0.005 = ±0.5%).
    pub precision: Option<f64>,
    /// Stop after this long, whatever the interval.
    pub budget: Option<std::time::Duration>,
    /// `--fail-if-slower PCT`.
    pub fail_if_slower: Option<f64>,
    /// `--slo`: servers' latency SLO at the offered rate (which the workload's `rate` is), a
    /// gate on B.
    pub slo: Option<crate::verdicts::capacity::SloGate>,
    /// The verdict's JSON file.
    pub json: Option<PathBuf>,
    /// The run's HTML report.
    pub html: Option<PathBuf>,
    /// The result store.
    pub db: Option<PathBuf>,
    /// Keep no record.
    pub no_store: bool,
}

/// Runs an RMIT A/B of two commands and prints the verdict. Exit code: 0, 1 (error),
/// 3 ([`EXIT_SLOWER`]: `--fail-if-slower` tripped), 130 (interrupted).
pub fn run_compare(req: CompareRequest) -> anyhow::Result<std::process::ExitCode> {
    use crate::execute::{FailurePolicy, Flow};
    use crate::schedule::VariantSpec;
    use crate::session::{Outputs, Session};

    if let Some(why) = refusal(&req.workload, req.figure, req.interleave) {
        anyhow::bail!(why);
    }
    let probe = req.workload.probe();
    let mut variants = match (&req.workload, req.interleave) {
        (Workload::Servers { params, .. }, Interleave::Duet) => {
            let mut params = server_params(&req.options, &req.options.a, params);
            params.insert("server_b".to_string(), req.options.b.clone());
            params.insert("duet".to_string(), "true".to_string());
            vec![VariantSpec {
                name: PAIRED_VARIANT.into(),
                probe: probe.into(),
                params,
            }]
        }
        (Workload::Servers { params, .. }, _) => ["A", "B"]
            .into_iter()
            .zip([&req.options.a, &req.options.b])
            .map(|(name, cmd)| VariantSpec {
                name: name.into(),
                probe: probe.into(),
                params: server_params(&req.options, cmd, params),
            })
            .collect(),
        (_, Interleave::Invocations | Interleave::Duet) => {
            let mut params = exec_params(&req.options, &req.options.a);
            params.insert("cmd_b".to_string(), req.options.b.clone());
            if req.interleave == Interleave::Duet {
                params.insert("duet".to_string(), "true".to_string());
            }
            vec![VariantSpec {
                name: PAIRED_VARIANT.into(),
                probe: "exec".into(),
                params,
            }]
        }
        (_, Interleave::Trials) => vec![
            VariantSpec {
                name: "A".into(),
                probe: "exec".into(),
                params: exec_params(&req.options, &req.options.a),
            },
            VariantSpec {
                name: "B".into(),
                probe: "exec".into(),
                params: exec_params(&req.options, &req.options.b),
            },
        ],
    };
    super::run::add_figure_params(&mut variants, Some(req.figure));
    let trials_per_round = variants.len();
    let settings = crate::record::RunSettings {
        probes: vec![probe.into()],
        params: BTreeMap::new(),
        rounds: req.rounds,
        duration_ms: req.duration_ms,
        interval_ms: req.duration_ms.min(1000),
        cpus: req.cpus.clone(),
        tune: false,
        unpinned: false,
        variants,
        warmup: req.warmup,
        seed: req.seed,
        round_sync: true,
        compare_figure: Some(req.figure),
        exec_figure: None,
        capacity_slo: None,
    };
    let first_look = quietbench_stats::stopping::MIN_ROUNDS_BEFORE_FIRST_LOOK;
    let rule = match req.precision {
        Some(_) if req.rounds < first_look => anyhow::bail!(
            "--precision looks at the interval from round {first_look} on: give --rounds {first_look} or more \
             (the most rounds to run)"
        ),
        Some(target) => Some(quietbench_stats::StoppingRule::new(
            target, first_look, 5, req.rounds, req.budget,
        )?),
        None => None,
    };
    let hosts = match &req.ec2 {
        Some(spec) => spec.count as usize,
        None if req.local => 1,
        None => req.agents.len(),
    };
    let started = std::time::Instant::now();
    let mut stopped: Option<String> = None;
    let mut stop = |run: &RunRecord, planned: &crate::schedule::PlannedTrial| -> Flow {
        // Look only once a round is in on every host (hosts finish it in any order).
        let round_done = run
            .trials
            .iter()
            .filter(|t| t.round == planned.round)
            .count()
            == trials_per_round * hosts;
        if !round_done || planned.warmup {
            return Flow::Continue;
        }
        if req.budget.is_some_and(|b| started.elapsed() >= b) {
            stopped = Some(format!(
                "time budget of {:?} spent",
                req.budget.unwrap_or_default()
            ));
            return Flow::Stop;
        }
        let Some(rule) = &rule else {
            return Flow::Continue;
        };
        let obs = observations(run, req.figure);
        match rule.decide_observations(&obs, started.elapsed(), &verdict_config(run)) {
            Ok(quietbench_stats::Decision::Stop(reason)) => {
                stopped = Some(format!("{reason:?}"));
                Flow::Stop
            }
            _ => Flow::Continue,
        }
    };
    let wants_peer = crate::run::needs_peer(probe);
    let load_from: &[String] = match &req.workload {
        Workload::Servers { load_from, .. } => load_from,
        Workload::Commands => &[],
    };
    let session = match req.ec2.clone().map(|mut spec| {
        spec.allow_exec = true; // compare runs the user's commands or servers
        spec
    }) {
        Some(spec) if spec.dry_run => {
            req.context.ec2()?.dry_run(&spec, wants_peer)?;
            return Ok(std::process::ExitCode::SUCCESS);
        }
        Some(spec) => Session::for_ec2(&req.context, spec, wants_peer, FailurePolicy::default())?,
        None => Session::for_hosts(
            &req.context,
            req.local,
            super::agent_entries(&req.agents)?,
            load_from,
            wants_peer,
            FailurePolicy::default(),
        )?,
    };
    let outputs = Outputs::new(
        None,
        req.html.clone(),
        None,
        req.db.as_deref(),
        req.no_store,
    )?;
    let (run, code) = session.drive(
        crate::run::new_record(settings, None),
        outputs,
        &[],
        &mut stop,
    )?;
    if code != std::process::ExitCode::SUCCESS {
        return Ok(code);
    }
    let verdict = judge_run(&run, req.figure).map_err(|e| anyhow::anyhow!("no verdict: {e}"))?;
    println!("{verdict}");
    println!(
        "  compared: {} ({} figure)",
        req.figure.describe(req.interleave),
        req.figure.as_str()
    );
    let others = other_figures(&run, req.figure, &verdict);
    let (other_lines, other_warnings) = other_figure_lines(req.figure, &others);
    for line in other_lines {
        println!("{line}");
    }
    for w in &other_warnings {
        println!("warning: {w}");
    }
    let by_model = judge_by_model(&run, req.figure);
    for line in cpu_model_lines(&run, by_model.as_ref()) {
        println!("{line}");
    }
    if let Some(reason) = &stopped {
        println!("stopped early: {reason}");
    }
    let slo = req.slo.as_ref().map(|gate| judge_slo(&run, gate));
    if let Some(slo) = &slo {
        for line in &slo.sentences {
            println!("{line}");
        }
    }
    let slo_broken = slo.as_ref().is_some_and(|s| s.b_breaks);
    if let Some(path) = &req.json {
        let body = verdict_json(
            &verdict,
            &req.options.a,
            &req.options.b,
            &run.run_id,
            (req.figure, req.interleave, probe),
            stopped.clone(),
            by_model.as_ref(),
            &others,
            slo,
        );
        std::fs::write(path, serde_json::to_string_pretty(&body)? + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        eprintln!("quietbench: verdict written to {}", path.display());
    }
    if let Some(pct) = req.fail_if_slower
        && fails_slower(&verdict, pct)
    {
        eprintln!(
            "quietbench: B is slower than A by more than {pct}% (ratio {:.4}, CI [{:.4}, {:.4}]): failing",
            verdict.ratio, verdict.ci_low, verdict.ci_high
        );
        return Ok(std::process::ExitCode::from(EXIT_SLOWER));
    }
    if slo_broken {
        eprintln!("quietbench: B breaks the SLO with 95% confidence: failing");
        return Ok(std::process::ExitCode::from(EXIT_SLOWER));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Both servers' shares over the SLO's bound, and whether B breaks it surely.
fn judge_slo(run: &RunRecord, gate: &crate::verdicts::capacity::SloGate) -> SloJson {
    use crate::verdicts::capacity::{SLO_GATE_CONFIDENCE, slo_sentence, slo_share};
    let share = |name: &str| {
        let trials: Vec<_> = run
            .trials
            .iter()
            .filter(|t| t.variant == name && !t.warmup && !t.cancelled)
            .collect();
        slo_share(&trials, &gate.slo, run.settings.seed)
    };
    let (a, b) = (share("A"), share("B"));
    let mut sentences = Vec::new();
    for (name, s) in [("A", &a), ("B", &b)] {
        sentences.push(match s {
            Some(s) => slo_sentence(name, gate, s),
            None => format!("SLO {}: {name} recorded no request latency", gate.slo),
        });
    }
    SloJson {
        slo: gate.slo.to_string(),
        rate: gate.rate,
        b_breaks: b
            .as_ref()
            .is_some_and(|s| s.confidence_broken >= SLO_GATE_CONFIDENCE),
        a,
        b,
        sentences,
    }
}

mod workload;

#[cfg(test)]
mod tests;
