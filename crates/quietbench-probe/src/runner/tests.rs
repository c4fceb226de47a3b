use super::*;
use crate::affinity::current_thread_affinity;
use crate::{plan_placement, resolve_probe};

fn settings(threads: usize, duration_ms: u64, interval_ms: u64) -> (ProbeSpec, TrialSettings) {
    let params = [("threads".to_string(), threads.to_string())].into();
    let spec = resolve_probe("cpu.primes", &params).unwrap();
    let allowed = current_thread_affinity().unwrap();
    let plan = plan_placement(threads, &allowed, &[]).unwrap();
    (
        spec,
        TrialSettings {
            duration: Duration::from_millis(duration_ms),
            interval: Duration::from_millis(interval_ms),
            plan,
            unpinned: None,
        },
    )
}

#[test]
fn intervals_add_up_to_the_total_and_threads_are_pinned() {
    let (spec, settings) = settings(2, 600, 100);
    let cancel = Arc::new(AtomicBool::new(false));
    let mut placements = Vec::new();
    let mut intervals = Vec::new();
    let outcome = run_trial(&spec, &settings, &cancel, &mut |event| {
        match event {
            TrialEvent::Placement(p) => placements = p.to_vec(),
            TrialEvent::Interval(r) => intervals.push(r.clone()),
        }
        true
    })
    .unwrap();
    assert_eq!(placements.len(), 2);
    for p in &placements {
        assert_eq!(p.affinity_cpus, vec![p.planned_cpu]);
        assert_eq!(p.observed_cpu, p.planned_cpu);
    }
    assert!(!outcome.cancelled);
    assert_eq!(outcome.intervals as usize, intervals.len());
    // 600 ms at 100 ms: at most 6 per thread's boundaries; fewer when a thread is held up
    // across a boundary (a loaded machine), so no lower bound but one.
    assert!(
        (1..=6).contains(&intervals.len()),
        "{} intervals",
        intervals.len()
    );
    let indices: Vec<u32> = intervals.iter().map(|r| r.index).collect();
    assert_eq!(indices, (0..intervals.len() as u32).collect::<Vec<_>>());
    let sum: u64 = intervals.iter().map(IntervalReport::events).sum();
    assert_eq!(sum, outcome.total.events());
    assert!(outcome.total.events() > 0);
    assert_eq!(
        outcome.total.metric_sets[0].latency_ns.len(),
        outcome.total.events()
    );
    assert_eq!(outcome.total.dropped, 0);
    let seconds = outcome
        .total
        .end
        .duration_since(outcome.total.start)
        .unwrap()
        .as_secs_f64();
    // Threads stop at the first event past 600 ms; how far past depends on the load.
    assert!(seconds >= 0.6, "trial lasted {seconds} s");
}

#[test]
fn cancel_stops_a_long_trial_promptly() {
    let (spec, settings) = settings(1, 60_000, 100);
    let cancel = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut seen = 0;
    let outcome = run_trial(&spec, &settings, &cancel, &mut |event| {
        if let TrialEvent::Interval(_) = event {
            seen += 1;
            if seen == 2 {
                cancel.store(true, Ordering::Relaxed);
            }
        }
        true
    })
    .unwrap();
    assert!(outcome.cancelled);
    // Stopped by the cancel, not by the trial's 60 s (how soon depends on the load).
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_listener_that_goes_away_cancels_the_trial() {
    let (spec, settings) = settings(1, 60_000, 50);
    let cancel = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let outcome = run_trial(&spec, &settings, &cancel, &mut |event| {
        !matches!(event, TrialEvent::Interval(_))
    })
    .unwrap();
    assert!(outcome.cancelled);
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn an_unpinnable_cpu_is_a_setup_error_naming_it() {
    let (spec, mut settings) = settings(1, 100, 50);
    settings.plan.thread_cpus = vec![4000];
    let cancel = Arc::new(AtomicBool::new(false));
    let err = run_trial(&spec, &settings, &cancel, &mut |_| true).unwrap_err();
    assert!(err.to_string().contains("CPU 4000"), "{err}");
}
