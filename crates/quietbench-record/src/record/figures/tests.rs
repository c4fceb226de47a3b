//! Each probe's figures read from trials built in memory with known values.

use super::*;

fn trial_with_invocations(ms: &[u64]) -> TrialRecord {
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .expect("histogram bounds");
    for v in ms {
        hist.record(v * 1_000_000).expect("in range");
    }
    let total_s: f64 = ms.iter().map(|v| *v as f64 / 1000.0).sum();
    let rate = ms.len() as f64 / total_s;
    let mut trial = crate::record::test_records::value_trial(
        ("exec", "A"),
        0,
        1,
        ("invocations_per_sec", "", rate),
    );
    trial.metrics.push(crate::record::MetricRecord {
        name: "wall_time".into(),
        unit: String::new(),
        value: None,
        interval_values: Vec::new(),
        histogram: Some(crate::record::HistogramRecord {
            hist,
            encoded: Vec::new(),
            clamped: 0,
            dropped: 0,
        }),
    });
    trial
}

#[test]
fn the_median_figure_ignores_the_odd_slow_invocation_and_the_mean_does_not() {
    // Nine invocations of 47 ms and one a neighbour slowed to 85 ms.
    let t = trial_with_invocations(&[47, 47, 47, 47, 47, 85, 47, 47, 47, 47]);
    let median = trial_time_ns(&t, TrialFigure::Median).unwrap();
    let mean = trial_time_ns(&t, TrialFigure::Mean).unwrap();
    assert!((median / 47e6 - 1.0).abs() < 0.001, "median {median}");
    assert!((mean / 50.8e6 - 1.0).abs() < 1e-9, "mean {mean}");
    assert_eq!(
        trial_time_ns(&trial_with_invocations(&[]), TrialFigure::Median),
        None
    );
    for f in [
        TrialFigure::Median,
        TrialFigure::Mean,
        TrialFigure::Cpu,
        TrialFigure::Instructions,
        TrialFigure::LatencyP50,
        TrialFigure::LatencyP99,
        TrialFigure::ServerCpu,
    ] {
        assert_eq!(TrialFigure::parse(f.as_str()), Some(f));
    }
    assert_eq!(TrialFigure::parse("p95"), None);
}

/// An http trial of `variant` in `round`: 197 requests of `fast_ns` and 3 of `slow_ns`
/// from when they were due, and the server's CPU time per request.
fn http_trial(variant: &str, round: u32, (fast_ns, slow_ns): (u64, u64), cpu: f64) -> TrialRecord {
    let mut t = crate::record::test_records::value_trial(
        ("http", variant),
        0,
        round,
        (metrics::REQUESTS_PER_SEC, "requests/s", 200.0),
    );
    let mut latencies = vec![fast_ns; 197];
    latencies.extend([slow_ns; 3]);
    push_histogram(&mut t, metrics::REQUEST_LATENCY, &latencies);
    t.metrics.push(crate::record::MetricRecord {
        name: metrics::SERVER_CPU_PER_REQUEST.into(),
        unit: "ns".into(),
        value: Some(cpu),
        interval_values: Vec::new(),
        histogram: None,
    });
    t
}

#[test]
fn an_http_trial_is_judged_on_its_latency_percentiles_or_its_server_cpu() {
    // 1.5% of the requests waited out a 50 ms stall: p50 stays at 1 ms, p99 is the stall's.
    let t = http_trial("A", 1, (1_000_000, 50_000_000), 120_000.0);
    let near = |got: Option<f64>, want: f64| {
        let got = got.unwrap();
        assert!((got / want - 1.0).abs() < 0.001, "{got} against {want}");
    };
    near(trial_time_ns(&t, TrialFigure::LatencyP50), 1e6);
    near(trial_time_ns(&t, TrialFigure::LatencyP99), 50e6);
    near(trial_time_ns(&t, TrialFigure::ServerCpu), 120_000.0);
    // An exec figure finds nothing of its own in an http trial.
    assert_eq!(trial_time_ns(&t, TrialFigure::Median), None);

    // Each probe's trials take the asked figure when it is theirs, else their default; a
    // metric named outright wins; other probes keep their headline.
    let mut run = crate::record::test_records::empty_run("http", &["A", "B"], 1, None);
    run.hosts.push(crate::record::test_records::host(0, "cpu"));
    run.trials
        .push(http_trial("A", 1, (1_000_000, 50_000_000), 120_000.0));
    run.trials
        .push(http_trial("B", 1, (1_100_000, 40_000_000), 126_000.0));
    let values = |metric: Option<&str>, figure| -> Vec<(String, String, f64)> {
        trial_values(&run, metric, figure)
            .into_iter()
            .map(|v| (v.variant, v.metric, v.value))
            .collect()
    };
    let p99 = values(None, TrialFigure::LatencyP99);
    assert_eq!(p99[0].1, "request_latency_p99");
    assert!((p99[1].2 / p99[0].2 - 0.8).abs() < 0.002, "{p99:?}");
    for exec_figure in [TrialFigure::Median, TrialFigure::Cpu] {
        let p50 = values(None, exec_figure);
        assert_eq!(p50[0].1, "request_latency_p50", "{exec_figure:?}");
        assert!((p50[1].2 / p50[0].2 - 1.1).abs() < 0.002, "{p50:?}");
    }
    let cpu = values(None, TrialFigure::ServerCpu);
    assert_eq!(cpu[0].1, "server_cpu_per_request");
    assert!((cpu[1].2 / cpu[0].2 - 1.05).abs() < 1e-9, "{cpu:?}");
    let named = values(Some(metrics::REQUESTS_PER_SEC), TrialFigure::LatencyP50);
    assert_eq!(
        named[0],
        ("A".to_string(), "requests_per_sec".to_string(), 200.0)
    );
    assert_eq!(
        TrialFigure::LatencyP99.for_probe("exec"),
        Some(TrialFigure::Median)
    );
    assert_eq!(TrialFigure::Cpu.for_probe("net.tcp"), None);
    // tcp trials are judged on http's figures: the one asked for, else the p50.
    assert_eq!(
        TrialFigure::LatencyP99.for_probe("tcp"),
        Some(TrialFigure::LatencyP99)
    );
    assert_eq!(
        TrialFigure::Median.for_probe("tcp"),
        Some(TrialFigure::LatencyP50)
    );
    // A trial whose server never reported its CPU time has no server-cpu figure.
    let mut bare = http_trial("A", 1, (1, 1), 0.0);
    bare.metrics
        .retain(|m| m.name != metrics::SERVER_CPU_PER_REQUEST);
    assert_eq!(trial_time_ns(&bare, TrialFigure::ServerCpu), None);
}

#[test]
fn a_duet_trial_gives_each_server_its_own_figures_from_its_own_metrics() {
    // Server A: p50 1 ms, p99 the 50-ms stall, 120 µs of CPU per request; server B (the `b_`
    // metrics of the same trial): 1.2 ms, 30 ms, 90 µs.
    let mut t = http_trial("A+B", 1, (1_000_000, 50_000_000), 120_000.0);
    let mut latencies = vec![1_200_000; 197];
    latencies.extend([30_000_000; 3]);
    push_histogram(&mut t, metrics::B_REQUEST_LATENCY, &latencies);
    t.metrics.push(crate::record::MetricRecord {
        name: metrics::B_SERVER_CPU_PER_REQUEST.into(),
        unit: "ns".into(),
        value: Some(90_000.0),
        interval_values: Vec::new(),
        histogram: None,
    });
    let near = |got: f64, want: f64| assert!((got / want - 1.0).abs() < 0.001, "{got} vs {want}");
    for (figure, a, b) in [
        (TrialFigure::LatencyP50, 1e6, 1.2e6),
        (TrialFigure::LatencyP99, 50e6, 30e6),
        (TrialFigure::ServerCpu, 120e3, 90e3),
    ] {
        let (got_a, got_b) = paired_times_ns(&t, figure).unwrap();
        near(got_a, a);
        near(got_b, b);
        // A's figure is what a trial of A alone would give.
        near(trial_time_ns(&t, figure).unwrap(), a);
    }
    // Without B's metrics there is no pair.
    t.metrics
        .retain(|m| m.name != metrics::B_SERVER_CPU_PER_REQUEST);
    assert_eq!(paired_times_ns(&t, TrialFigure::ServerCpu), None);
    assert!(paired_times_ns(&t, TrialFigure::LatencyP50).is_some());
}

#[test]
fn the_median_of_an_even_count_is_the_mean_of_the_two_middle_values() {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 3).unwrap();
    for v in [1_000_000, 2_000_000, 3_000_000, 40_000_000] {
        h.record(v).unwrap();
    }
    let m = histogram_median_of(&h).unwrap();
    assert!((m / 2.5e6 - 1.0).abs() < 0.001, "{m}");
    h.record(2_000_000).unwrap();
    let m = histogram_median_of(&h).unwrap();
    assert!((m / 2e6 - 1.0).abs() < 0.001, "{m}");
    let empty = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    assert_eq!(histogram_median_of(&empty), None);
}

#[test]
fn directions_come_from_units() {
    let higher = Some(Direction::HigherIsBetter);
    assert_eq!(direction_of_unit("events/s"), higher);
    assert_eq!(direction_of_unit("invocations/CPU-s"), higher);
    assert_eq!(direction_of_unit("Gbit/s"), higher);
    assert_eq!(direction_of_unit("IOPS"), higher);
    assert_eq!(direction_of_unit("ns"), Some(Direction::LowerIsBetter));
    assert_eq!(direction_of_unit("ppm"), None);
    assert_eq!(direction_of_unit("%"), None);
}

fn push_histogram(trial: &mut TrialRecord, name: &str, values: &[u64]) {
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .expect("histogram bounds");
    for v in values {
        hist.record(*v).expect("in range");
    }
    trial.metrics.push(crate::record::MetricRecord {
        name: name.into(),
        unit: String::new(),
        value: None,
        interval_values: Vec::new(),
        histogram: Some(crate::record::HistogramRecord {
            hist,
            encoded: Vec::new(),
            clamped: 0,
            dropped: 0,
        }),
    });
}

/// A duet A/A on two CPUs one of which is 5% slower: every pair's B/A is 1.05 when B ran on
/// the slow CPU and 1/1.05 when A did. With 5 pairs of one turn and 4 of the other (a
/// trial that ended after an odd pair), the median of all pairs is 1.05: a 5% difference
/// between identical commands. Each turn's median, weighed alike, gives 1.
#[test]
fn a_turns_advantage_cancels_in_the_pair_ratio_however_many_pairs_each_turn_has() {
    let mut t = trial_with_invocations(&[100; 9]);
    let slow_b = 1_050_000;
    let slow_a = (1e12 / 1_050_000.0) as u64;
    let mut all = vec![slow_b; 5];
    all.extend([slow_a; 4]);
    push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM, &all);
    let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
    assert!(
        (b / a / 1.05 - 1.0).abs() < 0.001,
        "without turns: {}",
        b / a
    );

    push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM_A_FIRST, &[slow_b; 5]);
    push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM_B_FIRST, &[slow_a; 4]);
    let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
    assert!((b / a - 1.0).abs() < 0.001, "with turns: {}", b / a);

    // A real 2% difference under the same asymmetry is kept whole.
    let mut t = trial_with_invocations(&[100; 9]);
    push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM, &[1]);
    push_histogram(
        &mut t,
        metrics::B_OVER_A_WALL_PPM_A_FIRST,
        &[(1.02 * 1.05e6) as u64; 5],
    );
    push_histogram(
        &mut t,
        metrics::B_OVER_A_WALL_PPM_B_FIRST,
        &[(1.02e6 / 1.05) as u64; 4],
    );
    let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
    assert!((b / a / 1.02 - 1.0).abs() < 0.001, "{}", b / a);

    // The CPU figure has turns too; instructions do not, and read all pairs.
    push_histogram(&mut t, metrics::CPU_TIME, &[100_000_000]);
    push_histogram(&mut t, metrics::B_OVER_A_CPU_PPM, &[1_010_000]);
    let (a, b) = paired_times_ns(&t, TrialFigure::Cpu).unwrap();
    assert!((b / a / 1.01 - 1.0).abs() < 0.001, "{}", b / a);
}

/// Throttled pairs: in each turn one pair ran clear (B/A 1) and one met a quota stall that
/// tripled the second command (A first: B/A 3; B first: 1/3). Swapping A and B gives the same
/// pairs, so the ratio must be 1; the arithmetic middle of each turn's two ratios read
/// √(2 × 2/3) = 1.15.
#[test]
fn a_ratio_median_of_an_even_count_is_the_same_read_from_either_side() {
    let mut t = trial_with_invocations(&[100; 4]);
    push_histogram(&mut t, metrics::B_OVER_A_WALL_PPM, &[1]);
    push_histogram(
        &mut t,
        metrics::B_OVER_A_WALL_PPM_A_FIRST,
        &[1_000_000, 3_000_000],
    );
    push_histogram(
        &mut t,
        metrics::B_OVER_A_WALL_PPM_B_FIRST,
        &[1_000_000, 333_333],
    );
    let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
    assert!((b / a - 1.0).abs() < 0.001, "{}", b / a);

    // Without turns, all four pairs: the middle two are 1 and 1.
    let mut t = trial_with_invocations(&[100; 4]);
    push_histogram(
        &mut t,
        metrics::B_OVER_A_WALL_PPM,
        &[333_333, 1_000_000, 1_100_000, 3_000_000],
    );
    let (a, b) = paired_times_ns(&t, TrialFigure::Median).unwrap();
    assert!((b / a / 1.1f64.sqrt() - 1.0).abs() < 0.001, "{}", b / a);
}
