//! Compare runs judged per CPU model, on runs built in memory: B 3% faster on one model and
//! unchanged on the other is an interaction; B 3% faster on both is not.

use super::*;
use crate::record::test_records::{empty_run, host, value_trial};

const ROUNDS: u32 = 8;

fn trial(host: usize, round: u32, variant: &str, rate: f64) -> crate::record::TrialRecord {
    value_trial(
        ("exec", variant),
        host,
        round,
        ("invocations_per_sec", "invocations/s", rate),
    )
}

/// A compare run with separate A and B trials (`--interleave trials`, `--figure mean`) on
/// hosts of the given models; B's time is A's times `b_over_a(model)`, with a little noise.
fn compare_run(models: &[&str], b_over_a: impl Fn(&str) -> f64) -> RunRecord {
    let mut run = empty_run("exec", &["A", "B"], ROUNDS, Some(TrialFigure::Mean));
    for (h, model) in models.iter().enumerate() {
        run.hosts.push(host(h, model));
        for r in 1..=ROUNDS {
            // A round's drift hits A and B alike; B's own noise is ±0.1%.
            let a_rate = 100.0 * (1.0 + 0.01 * f64::from(r % 3)) * (1.0 + 0.002 * h as f64);
            let wiggle = 1.0
                + 0.001
                    * if (r + h as u32).is_multiple_of(2) {
                        1.0
                    } else {
                        -1.0
                    };
            run.trials.push(trial(h, r, "A", a_rate));
            run.trials
                .push(trial(h, r, "B", a_rate / (b_over_a(model) * wiggle)));
        }
    }
    run
}

#[test]
fn a_change_on_one_model_only_is_reported_as_such() {
    let models = ["x", "y", "x", "y", "x", "y"];
    let run = compare_run(&models, |m| if m == "x" { 0.97 } else { 1.0 });
    let b = judge_by_model(&run, TrialFigure::Mean).expect("two models");
    assert_eq!(b.models.len(), 2);
    assert_eq!(b.models[0].hosts.len(), 3);
    let ratio = |m: &str| {
        let v = b.models.iter().find(|v| v.cpu_model == m).unwrap();
        v.verdict.as_ref().unwrap().ratio
    };
    assert!((ratio("x") - 0.97).abs() < 0.002, "{}", ratio("x"));
    assert!((ratio("y") - 1.0).abs() < 0.002, "{}", ratio("y"));
    let i = b.interaction.expect("both judged");
    assert_eq!((i.low.as_str(), i.high.as_str()), ("x", "y"));
    assert!(i.difference.differs, "{i:?}");
    assert!(
        i.sentence
            .starts_with("the change differs between CPU models")
    );
}

#[test]
fn the_same_change_on_both_models_is_alike() {
    let models = ["x", "y", "x", "y"];
    let b = judge_by_model(&compare_run(&models, |_| 0.97), TrialFigure::Mean).unwrap();
    let i = b.interaction.expect("both judged");
    assert!(!i.difference.differs, "{i:?}");
    assert!(
        i.sentence
            .starts_with("the change is alike on every CPU model")
    );
    // One model: no split, the pooled verdict is that model's.
    assert!(judge_by_model(&compare_run(&["x", "x"], |_| 0.97), TrialFigure::Mean).is_none());
}

/// Two figures disagree only when neither's interval reaches the other's estimate: a noisy
/// figure (a server's p99) far from a tight one is noise, not a disagreement.
#[test]
fn figures_disagree_only_when_each_lies_outside_the_others_interval() {
    let run = compare_run(&["model"], |_| 1.0);
    let base = judge_run(&run, TrialFigure::Mean).unwrap();
    let with = |ratio: f64, ci_low: f64, ci_high: f64| {
        let mut v = base.clone();
        (v.ratio, v.ci_low, v.ci_high) = (ratio, ci_low, ci_high);
        v
    };
    let tight = with(1.0, 0.99, 1.01);
    let wide = with(1.3, 0.8, 2.1);
    let apart = with(1.1, 1.09, 1.11);
    assert!(!disagree(&tight, &wide));
    assert!(!disagree(&wide, &tight));
    assert!(disagree(&tight, &apart));
    assert!(disagree(&apart, &tight));
}
