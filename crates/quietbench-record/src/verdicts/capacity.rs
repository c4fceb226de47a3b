//! Capacity under an SLO (`quietbench capacity`): whether a step of the search held its guards,
//! judged from its `http` or `tcp` trials alone, and the search itself ([`search`]).
//!
//! A step holds when every one of its trials (every host, every round) kept all three guards:
//! - the latency percentile of the SLO, each request timed from when it was due, stayed under
//!   the bound. Requests that were due but never sent (no connection came free) have no
//!   latency; they count as slower than any bound, so a
//!   server that falls so far behind that its queue never drains cannot pass on the requests
//!   it did answer;
//! - errors stayed at or under their bound;
//! - the generator kept its schedule: a trial whose generator fell behind is void and run
//!   again by the host, and one void three times fails the host, which the command records as
//!   this step's failure (it is no property of the server, and the report says so).

pub mod curve;
pub mod search;
pub mod slo;

pub use curve::{KNEE_FACTOR, ServerCurve, load_curves};
pub use search::{Capacity, CapacityCall, Next, Search, SearchConfig, compare, thousands};
pub use slo::{Slo, SloGate, duration_text};

use quietbench_proto::metrics;
use serde::Serialize;

use crate::record::TrialRecord;

/// The error counters of `http` and `tcp` trials, gRPC's codes last.
fn error_counters() -> impl Iterator<Item = &'static str> {
    [
        metrics::ERRORS_CONNECT,
        metrics::ERRORS_TIMEOUT,
        metrics::ERRORS_4XX,
        metrics::ERRORS_5XX,
        metrics::ERRORS_IO,
    ]
    .into_iter()
    .chain(metrics::GRPC_ERRORS)
}

/// What every step must keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Guards {
    /// The latency objective.
    pub slo: Slo,
    /// The largest fraction of sent requests that may fail (0.01: 1%).
    pub max_errors: f64,
}

/// A step's figures over all its trials: one point of the latency–throughput curve (as
/// `capacity --json` writes it, in each of `builds[].steps[]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepFigures {
    /// Trials measured.
    pub trials: usize,
    /// Trials that held every guard.
    pub held: usize,
    /// Answered requests per second after the warm-up, the mean over trials.
    pub achieved: Option<f64>,
    /// p50, p99 and p99.9 of the latency from the intended send, over the trials' merged
    /// histograms, ns (`None`: more requests unanswered than the percentile leaves above it).
    pub p50_ns: Option<f64>,
    /// p99.
    pub p99_ns: Option<f64>,
    /// p99.9.
    pub p999_ns: Option<f64>,
    /// The SLO's percentile, the worst trial's (`None`: beyond any bound, too many requests
    /// unanswered).
    pub slo_ns: Option<f64>,
    /// Failed requests, all trials.
    pub errors: u64,
    /// Requests sent after the warm-up, all trials.
    pub sent: u64,
    /// Requests due and never sent, all trials.
    pub unanswered: u64,
}

fn value(t: &TrialRecord, name: &str) -> Option<f64> {
    t.metrics
        .iter()
        .find(|m| m.name == name)
        .and_then(|m| m.value)
}

fn count(t: &TrialRecord, name: &str) -> u64 {
    value(t, name)
        .filter(|v| v.is_finite() && *v > 0.0)
        .unwrap_or(0.0) as u64
}

fn latency(t: &TrialRecord) -> Option<&hdrhistogram::Histogram<u64>> {
    t.metrics
        .iter()
        .find(|m| m.name == metrics::REQUEST_LATENCY)?
        .histogram
        .as_ref()
        .map(|h| &h.hist)
}

/// Requests due that never got a connection: the server's queue, grown past the connections.
/// Requests in flight at the trial's end (abandoned) are not among them: up to one per
/// connection is in flight at any time, at any load.
fn unanswered(t: &TrialRecord) -> u64 {
    count(t, metrics::REQUESTS_UNSENT)
}

/// The `quantile` of a latency histogram whose `missing` requests never got an answer (they
/// rank above all the answered ones), ns; `None` when more are missing than the quantile
/// leaves above it.
fn quantile_with_missing(
    hist: &hdrhistogram::Histogram<u64>,
    missing: u64,
    quantile: f64,
) -> Option<f64> {
    let answered = hist.len();
    let total = answered + missing;
    if answered == 0 || missing as f64 > (1.0 - quantile) * total as f64 {
        return None;
    }
    let within = (quantile * total as f64 / answered as f64).min(1.0);
    Some(hist.median_equivalent(hist.value_at_quantile(within)) as f64)
}

/// Whether one trial held every guard; the error says which it broke, with its figure.
pub fn judge_trial(t: &TrialRecord, guards: &Guards) -> Result<(), String> {
    let sent = count(t, metrics::REQUESTS_SENT);
    let errors: u64 = error_counters().map(|name| count(t, name)).sum();
    let Some(hist) = latency(t) else {
        return Err("the trial recorded no request latency".into());
    };
    let missing = unanswered(t);
    let slo = &guards.slo;
    if hist.is_empty() && missing > 0 {
        // Nothing recorded was sent at all: the generator may never have caught up with its
        // warm-up's schedule (a rate beyond this load agent, which no lag check sees before
        // the first recorded send), or every connection stayed busy. Either way the rate did
        // not hold, and the message does not blame the server alone.
        return Err(format!(
            "none of the {missing} requests due after the warm-up was sent: every connection \
             stayed busy, or the load generator never caught up with the warm-up's schedule \
             (a rate beyond this load agent: give it threads=)"
        ));
    }
    match quantile_with_missing(hist, missing, slo.quantile) {
        None => {
            return Err(format!(
                "{} over {}: {missing} of {} requests due were never answered",
                slo.label,
                duration_text(slo.bound_ns as f64),
                hist.len() + missing
            ));
        }
        Some(ns) if ns > slo.bound_ns as f64 => {
            return Err(format!(
                "{} {} over {}",
                slo.label,
                duration_text(ns),
                duration_text(slo.bound_ns as f64)
            ));
        }
        Some(_) => {}
    }
    if errors as f64 > guards.max_errors * sent.max(1) as f64 {
        return Err(format!(
            "{errors} of {sent} requests failed ({:.2}%, over {}%)",
            errors as f64 * 100.0 / sent.max(1) as f64,
            guards.max_errors * 100.0
        ));
    }
    Ok(())
}

/// The percentiles and rate of trials taken together: their latency histograms merged by
/// adding counts (auto-resizing, so histograms of any range add), their unanswered requests
/// ranked above all the answered ones, and their mean achieved rate. A capacity step's figures
/// and a curve's point are both this.
pub(crate) struct Merged {
    /// p50, p99 and p99.9, ns (`None`: more unanswered than the percentile leaves above it).
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) p999: Option<f64>,
    /// Answered requests per second after the warm-up, the trials' mean.
    pub(crate) achieved: Option<f64>,
    /// Requests due and never sent, all trials.
    pub(crate) unanswered: u64,
}

pub(crate) fn merge<'a>(trials: impl IntoIterator<Item = &'a TrialRecord>) -> Merged {
    let mut merged = hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let (mut missing, mut achieved) = (0, Vec::new());
    for t in trials {
        missing += unanswered(t);
        if let Some(h) = latency(t) {
            // Auto-resizing: an add cannot fail on range.
            let _ = merged.add(h);
        }
        if let Some(rate) = value(t, metrics::REQUESTS_PER_SEC_AFTER_WARMUP)
            .or_else(|| value(t, metrics::REQUESTS_PER_SEC))
            .filter(|r| r.is_finite())
        {
            achieved.push(rate);
        }
    }
    let at = |q: f64| quantile_with_missing(&merged, missing, q);
    Merged {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        achieved: (!achieved.is_empty())
            .then(|| achieved.iter().sum::<f64>() / achieved.len() as f64),
        unanswered: missing,
    }
}

/// A step's figures and whether it held: every trial must; the error names the first that
/// did not and how many did not.
pub fn judge_step(trials: &[&TrialRecord], guards: &Guards) -> (StepFigures, Result<(), String>) {
    let mut failures = Vec::new();
    let mut slo_ns: Option<f64> = Some(0.0);
    let (mut errors, mut sent) = (0, 0);
    for t in trials {
        if let Err(why) = judge_trial(t, guards) {
            failures.push(why);
        }
        let worst =
            latency(t).and_then(|h| quantile_with_missing(h, unanswered(t), guards.slo.quantile));
        slo_ns = match (slo_ns, worst) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        errors += error_counters().map(|name| count(t, name)).sum::<u64>();
        sent += count(t, metrics::REQUESTS_SENT);
    }
    let merged = merge(trials.iter().copied());
    let figures = StepFigures {
        trials: trials.len(),
        held: trials.len() - failures.len(),
        achieved: merged.achieved,
        p50_ns: merged.p50,
        p99_ns: merged.p99,
        p999_ns: merged.p999,
        slo_ns: if trials.is_empty() { None } else { slo_ns },
        errors,
        sent,
        unanswered: merged.unanswered,
    };
    let outcome = match failures.first() {
        None if trials.is_empty() => Err("no trial was measured".to_string()),
        None => Ok(()),
        Some(first) if failures.len() == 1 && trials.len() == 1 => Err(first.clone()),
        Some(first) => Err(format!(
            "{} of {} trials did not hold: {first}",
            failures.len(),
            trials.len()
        )),
    };
    (figures, outcome)
}

/// How many of a build's requests broke an SLO's bound, over its trials: the SLO holds while
/// that share stays at or under 1 − the quantile (p99: 1%). `compare --slo --json` writes it
/// as `slo.a` and `slo.b`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloShare {
    /// Requests over the bound (or due and never sent) over all requests due, all trials.
    pub share: f64,
    /// The 95% interval of `share`, resampling the trials (percentile bootstrap).
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The share the SLO allows (0.01 for p99).
    pub allowed: f64,
    /// The share of resamples whose share is over `allowed`: how sure it is that the SLO is
    /// broken (0.95 or more: broken with 95% confidence, one-sided).
    pub confidence_broken: f64,
    /// Trials behind it.
    pub trials: usize,
}

/// Resamples of [`slo_share`]'s bootstrap.
const SLO_RESAMPLES: usize = 4000;

/// The share of requests over `slo`'s bound in `trials`, with its interval and how sure it is
/// that the SLO is broken; `None` without trials that recorded latencies. Each trial is a unit
/// of the bootstrap: requests within a trial share its server process and its spells of noise,
/// so they are not independent, and resampling them would claim a certainty the run has not
/// got.
pub fn slo_share(trials: &[&TrialRecord], slo: &Slo, seed: u64) -> Option<SloShare> {
    let units: Vec<(f64, f64)> = trials
        .iter()
        .filter_map(|t| {
            let hist = latency(t)?;
            let missing = unanswered(t);
            let within = hist.count_between(0, slo.bound_ns);
            let over = hist.len().saturating_sub(within) + missing;
            let due = hist.len() + missing;
            (due > 0).then_some((over as f64, due as f64))
        })
        .collect();
    if units.is_empty() {
        return None;
    }
    let share_of = |pick: &mut dyn FnMut() -> usize| {
        let (mut over, mut due) = (0.0, 0.0);
        for _ in 0..units.len() {
            let (o, d) = units[pick()];
            over += o;
            due += d;
        }
        over / due
    };
    let share = {
        let mut i = 0;
        share_of(&mut || {
            i += 1;
            i - 1
        })
    };
    let allowed = 1.0 - slo.quantile;
    let mut rng = quietbench_stats::rng::SplitMix64::new(seed);
    let n = units.len() as u64;
    let mut resampled: Vec<f64> = (0..SLO_RESAMPLES)
        .map(|_| share_of(&mut || rng.below(n) as usize))
        .collect();
    resampled.sort_by(f64::total_cmp);
    let at = |p: f64| resampled[((p * (SLO_RESAMPLES - 1) as f64).round()) as usize];
    let broken = resampled.iter().filter(|s| **s > allowed).count();
    Some(SloShare {
        share,
        ci_low: at(0.025),
        ci_high: at(0.975),
        allowed,
        confidence_broken: broken as f64 / SLO_RESAMPLES as f64,
        trials: units.len(),
    })
}

/// The confidence at which a gate calls an SLO broken (one-sided).
pub const SLO_GATE_CONFIDENCE: f64 = 0.95;

/// What a gate says of one build's share: "breaks it", "keeps it" or "cannot tell", with the
/// figures.
pub fn slo_sentence(build: &str, gate: &SloGate, s: &SloShare) -> String {
    let pct = |v: f64| format!("{:.2}%", v * 100.0);
    let call = if s.confidence_broken >= SLO_GATE_CONFIDENCE {
        "breaks it"
    } else if s.confidence_broken <= 1.0 - SLO_GATE_CONFIDENCE {
        "keeps it"
    } else {
        "may break it (not sure either way)"
    };
    format!(
        "SLO {} at {} requests/s: {build} {call}: {} of its requests took longer than {} (the \
         SLO allows {}), 95% interval {} to {} over {} trials; broken in {:.1}% of resamples",
        gate.slo,
        thousands(gate.rate),
        pct(s.share),
        duration_text(gate.slo.bound_ns as f64),
        pct(s.allowed),
        pct(s.ci_low),
        pct(s.ci_high),
        s.trials,
        s.confidence_broken * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_records::http_run::{http_trial, set_value};

    fn guards() -> Guards {
        Guards {
            slo: Slo::parse("p99<20ms").unwrap(),
            max_errors: 0.01,
        }
    }

    /// A trial offered 1,000 requests/s whose latencies are `fast` at 2 ms and `slow` at
    /// 50 ms.
    fn trial(fast: u64, slow: u64) -> TrialRecord {
        let samples = [(2_000_000, fast), (50_000_000, slow)];
        http_trial("A@1000", 1, (1000, "./s"), (&samples, &samples))
    }

    #[test]
    fn a_trial_holds_while_its_percentile_is_under_the_bound() {
        assert_eq!(judge_trial(&trial(995, 5), &guards()), Ok(()));
        let err = judge_trial(&trial(980, 20), &guards()).unwrap_err();
        assert!(err.starts_with("p99 49.9"), "{err}");
        assert!(err.contains("over 20 ms"), "{err}");
    }

    #[test]
    fn requests_never_answered_count_as_slower_than_any_bound() {
        // 995 answered fast: alone they hold p99. 20 more due and never sent push the 99th
        // percentile past every answered request.
        let mut t = trial(995, 5);
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(20.0));
        // In flight at the end is no sign of a queue: one per connection always is.
        set_value(&mut t, metrics::REQUESTS_ABANDONED, Some(16.0));
        let err = judge_trial(&t, &guards()).unwrap_err();
        assert!(
            err.contains("20 of 1020 requests due were never answered"),
            "{err}"
        );
        // Six missing beside 5 slow of 1,001 push the 99th percentile from the fast answers
        // to the slow ones' 50 ms; five missing would leave it on the fast ones.
        let mut t = trial(990, 5);
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(5.0));
        assert_eq!(judge_trial(&t, &guards()), Ok(()));
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(6.0));
        let err = judge_trial(&t, &guards()).unwrap_err();
        assert!(err.contains("over 20 ms"), "{err}");
        let mut t = trial(1000, 0);
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(5.0));
        assert_eq!(judge_trial(&t, &guards()), Ok(()));
    }

    #[test]
    fn errors_over_their_bound_break_a_step() {
        let mut t = trial(1000, 0);
        set_value(&mut t, metrics::ERRORS_5XX, Some(11.0));
        set_value(&mut t, metrics::REQUESTS_SENT, Some(1000.0));
        let err = judge_trial(&t, &guards()).unwrap_err();
        assert!(
            err.contains("11 of 1000 requests failed (1.10%, over 1%)"),
            "{err}"
        );
        set_value(&mut t, metrics::ERRORS_5XX, Some(10.0));
        assert_eq!(judge_trial(&t, &guards()), Ok(()));
        // gRPC calls that failed count as errors whatever their code.
        set_value(&mut t, metrics::ERRORS_GRPC_UNAVAILABLE, Some(1.0));
        let err = judge_trial(&t, &guards()).unwrap_err();
        assert!(err.contains("11 of 1000 requests failed"), "{err}");
    }

    #[test]
    fn a_step_holds_only_when_every_trial_does_and_merges_its_curve_point() {
        let good = trial(1000, 0);
        let bad = trial(900, 100);
        let (figures, outcome) = judge_step(&[&good, &good], &guards());
        assert_eq!(outcome, Ok(()));
        assert_eq!((figures.trials, figures.held), (2, 2));
        let p50 = figures.p50_ns.unwrap();
        assert!((p50 / 2e6 - 1.0).abs() < 0.002, "{p50}");
        assert_eq!(figures.achieved, Some(1000.0));
        let (figures, outcome) = judge_step(&[&good, &bad, &good], &guards());
        let err = outcome.unwrap_err();
        assert!(err.starts_with("1 of 3 trials did not hold: p99"), "{err}");
        assert_eq!(figures.held, 2);
        // The curve's p99 is the merged one (100 of 3,000 slow: over 1%); the SLO's figure
        // is the worst trial's.
        assert!(figures.p99_ns.unwrap() > 40e6);
        assert!(figures.slo_ns.unwrap() > 40e6);
        let (_, outcome) = judge_step(&[], &guards());
        assert_eq!(outcome, Err("no trial was measured".to_string()));
    }

    #[test]
    fn a_gate_is_sure_only_when_the_trials_agree() {
        let slo = Slo::parse("p99<20ms").unwrap();
        let gate = SloGate {
            slo: slo.clone(),
            rate: 1000,
        };
        // 3% over the bound in every trial: broken, surely.
        let over: Vec<TrialRecord> = (0..10).map(|_| trial(970, 30)).collect();
        let refs: Vec<&TrialRecord> = over.iter().collect();
        let s = slo_share(&refs, &slo, 1).unwrap();
        assert!((s.share - 0.03).abs() < 1e-9, "{s:?}");
        assert!(s.confidence_broken >= 0.99 && s.ci_low > 0.01, "{s:?}");
        assert!(slo_sentence("B", &gate, &s).contains("B breaks it: 3.00% of its requests"));
        // 0.2% over: kept, surely.
        let under: Vec<TrialRecord> = (0..10).map(|_| trial(998, 2)).collect();
        let refs: Vec<&TrialRecord> = under.iter().collect();
        let s = slo_share(&refs, &slo, 1).unwrap();
        assert!(s.confidence_broken <= 0.01, "{s:?}");
        assert!(slo_sentence("B", &gate, &s).contains("B keeps it"));
        // One bad trial among ten puts 1.5% over overall, but the other nine keep it: the
        // gate cannot be sure, and says so rather than fail a build on one trial.
        let mut mixed: Vec<TrialRecord> = (0..9).map(|_| trial(1000, 0)).collect();
        mixed.push(trial(850, 150));
        let refs: Vec<&TrialRecord> = mixed.iter().collect();
        let s = slo_share(&refs, &slo, 1).unwrap();
        assert!(s.share > 0.01, "{s:?}");
        assert!(s.confidence_broken < SLO_GATE_CONFIDENCE, "{s:?}");
        assert!(slo_sentence("B", &gate, &s).contains("not sure either way"));
        // Requests never sent count as over the bound.
        let mut t = trial(1000, 0);
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(50.0));
        let s = slo_share(&[&t], &slo, 1).unwrap();
        assert!((s.share - 50.0 / 1050.0).abs() < 1e-9, "{s:?}");
        assert_eq!(slo_share(&[], &slo, 1), None);
    }

    #[test]
    fn a_trial_that_sent_nothing_recorded_says_both_possible_reasons() {
        let mut t = http_trial("A@400000", 1, (400_000, "./s"), (&[], &[]));
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(400_000.0));
        let err = judge_trial(&t, &guards()).unwrap_err();
        assert!(err.contains("none of the 400000 requests due"), "{err}");
        assert!(err.contains("load generator never caught up"), "{err}");
    }

    #[test]
    fn a_trial_without_latencies_does_not_hold() {
        let mut t = trial(1000, 0);
        t.metrics.retain(|m| m.name != metrics::REQUEST_LATENCY);
        assert!(
            judge_trial(&t, &guards())
                .unwrap_err()
                .contains("no request latency")
        );
        let (figures, _) = judge_step(&[&t], &guards());
        assert_eq!(figures.slo_ns, None);
    }
}
