use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use pb::probe_event::Event;

use super::*;

const T0: u64 = 1_700_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;

fn limits() -> TrialLimits {
    TrialLimits::new(
        Duration::from_secs(1),
        Duration::from_secs(1),
        Duration::from_secs(4),
    )
}

fn encoded(h: &Histogram<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut out).unwrap();
    out
}

fn latency_metric(values: &[u64]) -> pb::Metric {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for v in values {
        h.record(*v).unwrap();
    }
    pb::Metric {
        name: "event_latency".into(),
        unit: "ns".into(),
        value: Some(1.0),
        histogram: Some(pb::Histogram {
            hdr_v2_deflate: encoded(&h),
            unit: "ns".into(),
            start_unix_ns: T0,
            end_unix_ns: T0 + SEC,
            total_count: h.len(),
            ..Default::default()
        }),
    }
}

fn accepted(id: &str) -> Event {
    Event::Accepted(pb::Accepted {
        trial_id: id.into(),
        accepted_unix_ns: T0,
        ..Default::default()
    })
}

fn interval(index: u32, metrics: Vec<pb::Metric>) -> Event {
    Event::Interval(pb::Interval {
        index,
        start_unix_ns: T0 + u64::from(index) * SEC,
        end_unix_ns: T0 + u64::from(index + 1) * SEC,
        metrics,
        noise: None,
    })
}

fn result(id: &str, metrics: Vec<pb::Metric>) -> Event {
    Event::Result(pb::ProbeResult {
        trial_id: id.into(),
        start_unix_ns: T0,
        end_unix_ns: T0 + SEC,
        metrics,
        ..Default::default()
    })
}

/// Feeds `events` to a fresh intake of trial "t-1"; the first refusal, or the trial.
fn feed(events: Vec<Event>, budget: &RunBudget) -> Result<CompletedTrial, AgentError> {
    let mut intake = TrialIntake::new("agent-a:1", "t-1", limits(), budget.clone());
    for event in events {
        intake.check(&event)?;
        if let Some(done) = intake.keep(event)? {
            return Ok(done);
        }
    }
    panic!("no result")
}

fn refusal(events: Vec<Event>) -> String {
    let err = feed(events, &RunBudget::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("agent-a:1"), "names the agent: {text}");
    text
}

#[test]
fn the_grace_is_ten_seconds_or_a_quarter_of_the_trial() {
    assert_eq!(grace(Duration::from_secs(1)), Duration::from_secs(10));
    assert_eq!(grace(Duration::from_secs(40)), Duration::from_secs(10));
    assert_eq!(grace(Duration::from_secs(600)), Duration::from_secs(150));
    let l = limits();
    assert_eq!(l.deadline(), Duration::from_secs(15));
    // 15 intervals of 1 s fit before the deadline, and the partial ones at either end.
    assert_eq!(l.max_intervals, 17);
    assert!(
        l.describe().starts_with("15 s (the 1 s trial"),
        "{}",
        l.describe()
    );
    // 10 ms intervals over an hour: every one that fits, and no more.
    let long = TrialLimits::new(
        Duration::from_secs(3600),
        Duration::from_millis(10),
        Duration::from_millis(3010),
    );
    assert_eq!(long.max_intervals, (3600 + 3 + 900) * 100 + 1 + 2);
    // An interval longer than the trial reports once per trial.
    let coarse = TrialLimits::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Duration::from_secs(63),
    );
    assert_eq!(coarse.max_intervals, (2 + 63 + 10) / 2 + 1 + 2);
}

#[test]
fn a_well_behaved_trial_is_taken_and_its_bytes_held_until_kept() {
    let budget = RunBudget::new(1 << 30);
    let done = feed(
        vec![
            accepted("t-1"),
            interval(0, vec![latency_metric(&[5, 7])]),
            result("t-1", vec![latency_metric(&[5, 7])]),
        ],
        &budget,
    )
    .unwrap();
    assert_eq!(done.intervals.len(), 1);
    let held = budget.held();
    // The interval's bytes and the result's, with its decoded histogram (33 792 counts).
    assert!(held > 33_792 * 8, "{held}");
    assert_eq!(done.retained.bytes(), held);
    done.retained.keep();
    assert_eq!(budget.held(), held, "kept: still held");

    // A failed trial gives its bytes back.
    let err = feed(
        vec![
            accepted("t-1"),
            interval(0, vec![latency_metric(&[5])]),
            Event::Error(pb::ProbeError {
                trial_id: "t-1".into(),
                message: "boom".into(),
            }),
        ],
        &budget,
    )
    .unwrap_err();
    assert!(matches!(err, AgentError::TrialFailed { .. }), "{err}");
    assert_eq!(budget.held(), held);
}

#[test]
fn a_foreign_trial_id_is_refused() {
    let text = refusal(vec![accepted("someone-else")]);
    assert!(
        text.contains("accepted trial 'someone-else' when trial 't-1' was asked for"),
        "{text}"
    );
    let text = refusal(vec![accepted("t-1"), result("t-2", Vec::new())]);
    assert!(text.contains("a result for trial 't-2'"), "{text}");
    let text = refusal(vec![interval(0, Vec::new())]);
    assert!(text.contains("an interval before the acceptance"), "{text}");
}

#[test]
fn intervals_that_end_before_they_start_or_outside_the_trial_are_refused() {
    let mut backwards = pb::Interval {
        start_unix_ns: T0 + 2 * SEC,
        end_unix_ns: T0 + SEC,
        ..Default::default()
    };
    let text = refusal(vec![accepted("t-1"), Event::Interval(backwards.clone())]);
    assert!(
        text.contains("ends") && text.contains("before it starts"),
        "{text}"
    );
    // An hour after the acceptance, in a 1 s trial.
    backwards.start_unix_ns = T0 + 3600 * SEC;
    backwards.end_unix_ns = T0 + 3601 * SEC;
    let text = refusal(vec![accepted("t-1"), Event::Interval(backwards)]);
    assert!(text.contains("outside the trial"), "{text}");
    // An index no trial of this length reaches (and `index + 1` would overflow).
    let mut last = interval(0, Vec::new());
    if let Event::Interval(i) = &mut last {
        i.index = u32::MAX;
    }
    let text = refusal(vec![accepted("t-1"), last]);
    assert!(
        text.contains("interval index 4294967295 in a trial of at most 17"),
        "{text}"
    );
}

#[test]
fn non_finite_values_are_refused_not_dropped() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut m = latency_metric(&[5]);
        m.value = Some(bad);
        let text = refusal(vec![accepted("t-1"), interval(0, vec![m])]);
        assert!(
            text.contains("metric event_latency's value is") && text.contains("finite"),
            "{text}"
        );
    }
    let noisy = Event::Interval(pb::Interval {
        start_unix_ns: T0,
        end_unix_ns: T0 + SEC,
        noise: Some(pb::NoiseSample {
            steal_fraction: Some(f64::NAN),
            ..Default::default()
        }),
        ..Default::default()
    });
    let text = refusal(vec![accepted("t-1"), noisy]);
    assert!(text.contains("steal_fraction is NaN"), "{text}");
}

#[test]
fn a_stated_count_the_histogram_does_not_hold_is_refused() {
    let mut m = latency_metric(&[5, 6, 7]);
    m.histogram.as_mut().unwrap().total_count = 2;
    let text = refusal(vec![accepted("t-1"), interval(0, vec![m])]);
    assert!(
        text.contains("counts 3 samples but states total_count 2"),
        "{text}"
    );
}

#[test]
fn too_many_intervals_or_bytes_are_refused() {
    let mut events = vec![accepted("t-1")];
    events.extend((0..18).map(|i| interval(i % 10, Vec::new())));
    let err = feed(events, &RunBudget::default()).unwrap_err();
    assert!(matches!(err, AgentError::TooMuch { .. }), "{err}");
    assert!(err.to_string().contains("more than 17 intervals"), "{err}");

    // The trial's own cap, whatever the run's budget: 4 KB intervals into 10 KB.
    let mut small = limits();
    small.max_bytes = 10_000;
    let mut intake = TrialIntake::new("agent-a:1", "t-1", small, RunBudget::default());
    intake.check(&accepted("t-1")).unwrap();
    intake.keep(accepted("t-1")).unwrap();
    let mut big = pb::Interval {
        start_unix_ns: T0,
        end_unix_ns: T0 + SEC,
        ..Default::default()
    };
    big.noise = Some(pb::NoiseSample {
        unavailable: vec!["x".repeat(4000)],
        ..Default::default()
    });
    for _ in 0..2 {
        intake.check(&Event::Interval(big.clone())).unwrap();
        intake.keep(Event::Interval(big.clone())).unwrap();
    }
    let err = intake.check(&Event::Interval(big)).unwrap_err();
    assert!(
        err.to_string()
            .contains("bytes, more than the 10000 a trial may (after 2 intervals)"),
        "{err}"
    );

    // The run's budget is shared: a second trial finds it spent, and the refused trial gives
    // back what it took.
    let budget = RunBudget::new(200_000);
    let first = feed(
        vec![accepted("t-1"), result("t-1", vec![latency_metric(&[5])])],
        &budget,
    );
    let err = first.unwrap_err();
    assert!(
        err.to_string()
            .contains("the run's records would hold more than"),
        "{err}"
    );
    assert_eq!(budget.held(), 0);
}
