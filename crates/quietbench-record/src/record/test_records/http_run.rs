//! `http` trials built in memory: [`http_trial`], one trial whose histograms hold exactly the
//! samples a test gives, and [`sample_http_run`], a whole `compare --probe http` run shaped
//! like the route-search team's (docs/probes.md, "A server under load"), for the reports'
//! tests and the controller's screenshot of the page.
//!
//! Values come from the fixed generator `sample_run` uses: the reports are pure functions of
//! the record, and the tests check exact figures.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::Histogram;
use quietbench_proto::metrics;

use super::sample_run::{Lcg, START_NS, encode};
use super::{empty_run, host};
use crate::record::figures::TrialFigure;
use crate::record::{HistogramRecord, MetricRecord, RunRecord, TrialRecord};

/// A server command that tries to inject a script into the page (variant B's in
/// [`sample_http_run`]).
pub const EVIL_SERVER: &str = "./route-search --port {port} --banner '<script>alert(1)</script>'";

/// The rate both variants of [`sample_http_run`] are offered, requests/s.
pub const SAMPLE_RATE: u64 = 2000;

/// Samples as (value in ns, how many times).
pub type Samples<'a> = &'a [(u64, u64)];

/// A histogram (ns) of `samples`, each (value, how many times). No samples: an empty
/// histogram, as a trial that recorded nothing would carry.
pub fn histogram(samples: Samples<'_>) -> HistogramRecord {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
    for &(value, count) in samples {
        h.record_n(value, count).expect("in range");
    }
    HistogramRecord {
        encoded: encode(&h),
        hist: h,
        clamped: 0,
        dropped: 0,
    }
}

fn metric(name: &str, value: Option<f64>, histogram: Option<HistogramRecord>) -> MetricRecord {
    MetricRecord {
        name: name.into(),
        unit: metrics::lookup(name).map_or("", |m| m.unit).into(),
        value,
        interval_values: Vec::new(),
        histogram,
    }
}

/// Sets the trial's value of `name` (its unit from the registry), adding the metric if the
/// trial lacks it; `None` removes the metric, as a trial that never reported it.
pub fn set_value(t: &mut TrialRecord, name: &str, value: Option<f64>) {
    match value {
        None => t.metrics.retain(|m| m.name != name),
        Some(v) => match t.metrics.iter_mut().find(|m| m.name == name) {
            Some(m) => m.value = Some(v),
            None => t.metrics.push(metric(name, Some(v), None)),
        },
    }
}

/// A measured trial of `variant` (probe `http`) on host 0 in `round`, offered `rate`
/// requests/s (0: closed loop) against `server`, whose `request_latency` and `service_time`
/// histograms hold exactly `latency` and `service` ((ns, count) pairs). Every other figure says
/// nothing went wrong: the rate achieved is the rate offered (closed loop: the requests over
/// 10 s), no errors, 50 µs of send lag, 100 µs of server CPU per request, 50 MiB peak RSS.
/// Change any with [`set_value`].
pub fn http_trial(
    variant: &str,
    round: u32,
    (rate, server): (u64, &str),
    (latency, service): (Samples<'_>, Samples<'_>),
) -> TrialRecord {
    let sent: u64 = latency.iter().map(|s| s.1).sum();
    let achieved = if rate > 0 {
        rate as f64
    } else {
        sent as f64 / 10.0
    };
    let params = BTreeMap::from([
        ("rate".to_string(), rate.to_string()),
        ("connections".to_string(), "16".to_string()),
        ("warmup".to_string(), "1".to_string()),
        ("server".to_string(), server.to_string()),
        ("target".to_string(), "127.0.0.1:40001".to_string()),
    ]);
    let value = |name: &str, v: f64| metric(name, Some(v), None);
    TrialRecord {
        probe: "http".into(),
        variant: variant.into(),
        warmup: false,
        host: 0,
        round,
        trial_id: format!("http-{round}-{variant}"),
        start_unix_ns: START_NS + u64::from(round) * 20_000_000_000,
        end_unix_ns: START_NS + u64::from(round) * 20_000_000_000 + 10_000_000_000,
        cancelled: false,
        params,
        placement: None,
        intervals: 1,
        metrics: vec![
            value(metrics::REQUESTS_PER_SEC, achieved * 0.98),
            metric(metrics::REQUEST_LATENCY, None, Some(histogram(latency))),
            metric(metrics::SERVICE_TIME, None, Some(histogram(service))),
            value(metrics::REQUESTS_PER_SEC_AFTER_WARMUP, achieved),
            value(metrics::REQUESTS_SENT, sent as f64),
            value(metrics::REQUESTS_UNSENT, 0.0),
            value(metrics::REQUESTS_ABANDONED, 0.0),
            value(metrics::ERRORS_CONNECT, 0.0),
            value(metrics::ERRORS_TIMEOUT, 0.0),
            value(metrics::ERRORS_4XX, 0.0),
            value(metrics::ERRORS_5XX, 0.0),
            value(metrics::ERRORS_IO, 0.0),
            value(metrics::RECONNECTS, 0.0),
            value(metrics::SEND_LAG_MAX_US, 50.0),
            value(metrics::SERVER_CPU_TIME, 100_000.0 * sent as f64),
            value(metrics::SERVER_CPU_PER_REQUEST, 100_000.0),
            value(metrics::SERVER_PEAK_RSS, 50.0 * 1024.0 * 1024.0),
        ],
        noise: None,
        peer: None,
        block_device: None,
        interval_records: Vec::new(),
    }
}

/// A `compare --probe http` run on one measured host: A (`./route-search --port {port}`) and
/// B ([`EVIL_SERVER`]), both offered [`SAMPLE_RATE`] requests/s, 1 warm-up + 6 measured rounds.
/// A keeps up; B serves a little slower, stalls now and then (requests queue behind the
/// stalls, so its request latency parts from its service time in the tail), and achieves
/// about 6% less than offered, with some 5xx and timeouts. Built once per test binary.
pub fn sample_http_run() -> RunRecord {
    static RUN: OnceLock<RunRecord> = OnceLock::new();
    RUN.get_or_init(build).clone()
}

fn build() -> RunRecord {
    let servers = [("A", "./route-search --port {port}"), ("B", EVIL_SERVER)];
    let mut run = empty_run("http", &["A", "B"], 6, Some(TrialFigure::LatencyP50));
    run.run_id = "5d2b7e10-8c3f-4a9e-b1d6-2f7a9c4e8b03".into();
    run.started_at = UNIX_EPOCH + Duration::from_nanos(START_NS);
    run.settings.warmup = 1;
    run.settings.duration_ms = 10_000;
    for (v, (name, server)) in run.settings.variants.iter_mut().zip(servers) {
        v.params = BTreeMap::from([
            ("rate".to_string(), SAMPLE_RATE.to_string()),
            ("server".to_string(), server.to_string()),
            ("path".to_string(), "/search?from=A&to=B".to_string()),
        ]);
        assert_eq!(v.name, name);
    }
    run.hosts.push(host(0, "AMD EPYC 7R13 Processor"));
    let mut rng = Lcg(29);
    for round in 1..=7 {
        for (v, (name, server)) in servers.iter().enumerate() {
            let slow = v == 1;
            let mut latency = Vec::new();
            let mut service = Vec::new();
            let mut lag = Vec::new();
            for _ in 0..4000 {
                let base = if slow { 700_000.0 } else { 600_000.0 };
                let mut s = base * (0.7 + rng.next() * 0.6);
                let u = rng.next();
                if u > 0.995 {
                    s *= 8.0 + rng.next() * 20.0;
                }
                // Requests due while a connection was busy waited for it: queueing, in the
                // latency only. B's stalls hold more of them back, for longer.
                let w = rng.next();
                let queued = if slow && w > 0.97 {
                    2e6 + rng.next() * 40e6
                } else if w > 0.99 {
                    rng.next() * 1.5e6
                } else {
                    0.0
                };
                service.push((s as u64, 1));
                latency.push(((s + queued) as u64, 1));
                lag.push(((2_000.0 + rng.next() * 30_000.0) as u64, 1));
            }
            let mut t = http_trial(name, round, (SAMPLE_RATE, server), (&latency, &service));
            t.warmup = round == 1;
            t.trial_id = format!("h-{round}-{name}");
            t.start_unix_ns = START_NS + u64::from(round * 2 + v as u32) * 11_000_000_000;
            t.end_unix_ns = t.start_unix_ns + 10_000_000_000;
            t.params.insert("path".into(), "/search?from=A&to=B".into());
            t.metrics
                .push(metric(metrics::SEND_LAG, None, Some(histogram(&lag))));
            let jitter = 1.0 + (rng.next() - 0.5) * 0.004;
            if slow {
                let achieved = SAMPLE_RATE as f64 * 0.94 * jitter;
                set_value(
                    &mut t,
                    metrics::REQUESTS_PER_SEC_AFTER_WARMUP,
                    Some(achieved),
                );
                set_value(&mut t, metrics::REQUESTS_PER_SEC, Some(achieved * 0.98));
                set_value(
                    &mut t,
                    metrics::REQUESTS_UNSENT,
                    Some(31.0 + f64::from(round)),
                );
                set_value(&mut t, metrics::REQUESTS_ABANDONED, Some(4.0));
                set_value(&mut t, metrics::ERRORS_5XX, Some(f64::from(round % 3)));
                set_value(&mut t, metrics::ERRORS_TIMEOUT, Some(1.0));
                set_value(&mut t, metrics::RECONNECTS, Some(1.0));
                set_value(
                    &mut t,
                    metrics::SEND_LAG_MAX_US,
                    Some(850.0 + rng.next() * 900.0),
                );
                set_value(
                    &mut t,
                    metrics::SERVER_CPU_PER_REQUEST,
                    Some(131_000.0 * jitter),
                );
                set_value(&mut t, metrics::SERVER_PEAK_RSS, Some(212.0 * 1048576.0));
            } else {
                let achieved = SAMPLE_RATE as f64 * jitter.min(1.0);
                set_value(
                    &mut t,
                    metrics::REQUESTS_PER_SEC_AFTER_WARMUP,
                    Some(achieved),
                );
                set_value(&mut t, metrics::REQUESTS_PER_SEC, Some(achieved * 0.98));
                set_value(
                    &mut t,
                    metrics::SEND_LAG_MAX_US,
                    Some(40.0 + rng.next() * 60.0),
                );
                set_value(
                    &mut t,
                    metrics::SERVER_CPU_PER_REQUEST,
                    Some(118_000.0 * jitter),
                );
                set_value(&mut t, metrics::SERVER_PEAK_RSS, Some(187.0 * 1048576.0));
            }
            run.trials.push(t);
        }
    }
    run.finished_at = run
        .trials
        .last()
        .map(|t| UNIX_EPOCH + Duration::from_nanos(t.end_unix_ns));
    run
}

/// A `quietbench capacity` run as its steps leave it: A (10 slots of 5 ms, capacity 2,000
/// requests/s) and B (9 slots, 1,800) searched from 1,000 requests/s with a p99 < 50 ms SLO,
/// each step one trial (variants `A@1000`, ..., a confirming `A@1914.confirm`), then both at
/// 957 requests/s (`A.load@957`). Below its capacity a build's latency is the 5 ms service
/// with a tail that grows near it; past it, requests queue and some are never sent.
pub fn capacity_run() -> RunRecord {
    const A: &str = "./server --port {port} --slots 10";
    const B: &str = "./server --port {port} --slots 9";
    // (variant, server, rate, p99 in ms (0: saturated), unsent)
    let steps: [(&str, &str, u64, f64, u64); 15] = [
        ("A@1000", A, 1000, 5.2, 0),
        ("B@1000", B, 1000, 5.4, 0),
        ("A@2000", A, 2000, 0.0, 120),
        ("B@2000", B, 2000, 0.0, 700),
        ("A@1414", A, 1414, 5.5, 0),
        ("B@1414", B, 1414, 5.6, 0),
        ("A@1682", A, 1682, 5.2, 0),
        ("B@1682", B, 1682, 15.0, 0),
        ("A@1834", A, 1834, 7.1, 0),
        ("B@1834", B, 1834, 0.0, 220),
        ("A@1914", A, 1914, 5.6, 0),
        ("B@1756", B, 1756, 25.0, 0),
        ("A@1914.confirm", A, 1914, 5.5, 0),
        ("B@1756.confirm", B, 1756, 8.2, 0),
        ("A.load@957", A, 957, 5.2, 0),
    ];
    let names: Vec<&str> = steps.iter().map(|s| s.0).chain(["B.load@957"]).collect();
    let mut run = empty_run("http", &names, 1, None);
    run.run_id = "c1a9e3f0-4b7d-4e21-9a5c-6d8e2f1b7a30".into();
    run.settings.capacity_slo = Some("p99 < 50 ms".into());
    run.started_at = UNIX_EPOCH + Duration::from_nanos(START_NS);
    run.hosts.push(host(0, "AMD EPYC 7R13 Processor"));
    let load_b = ("B.load@957", B, 957, 5.3, 0);
    for (i, &(name, server, rate, p99_ms, unsent)) in
        steps.iter().chain(std::iter::once(&load_b)).enumerate()
    {
        // 1,000 requests: 980 at the 5 ms median, 20 in the tail at the step's p99 (a
        // saturated step's answered tail at 60 ms, its p50 pushed up by the queue).
        let (median, tail) = if p99_ms == 0.0 {
            (40_000_000, 60_000_000)
        } else {
            (5_100_000, (p99_ms * 1e6) as u64)
        };
        let samples = [(median, 980), (tail, 20)];
        let mut t = http_trial(name, 1, (rate, server), (&samples, &samples));
        t.trial_id = format!("cap-{i}");
        t.start_unix_ns = START_NS + i as u64 * 5_000_000_000;
        t.end_unix_ns = t.start_unix_ns + 4_000_000_000;
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(unsent as f64));
        if unsent > 0 {
            let achieved = rate as f64 * 0.95;
            set_value(
                &mut t,
                metrics::REQUESTS_PER_SEC_AFTER_WARMUP,
                Some(achieved),
            );
        }
        run.settings.variants[i].params = t.params.clone();
        run.trials.push(t);
    }
    run
}
