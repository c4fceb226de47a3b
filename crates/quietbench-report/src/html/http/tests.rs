//! The http section on records built in memory with known histograms.

use quietbench_record::record::RunRecord;
use quietbench_record::record::test_records::http_run::{
    EVIL_SERVER, http_trial, sample_http_run, set_value,
};
use quietbench_record::record::test_records::{empty_run, host, sample_run};

use super::*;
use crate::html::render_html;

const MS: u64 = 1_000_000;

/// A run of http variants `names`, on one host, with no trials yet.
fn run_of(names: &[&str]) -> RunRecord {
    let mut run = empty_run("http", names, 2, None);
    run.hosts.push(host(0, "AMD EPYC 7R13 Processor"));
    run
}

/// A trial offered 1000 requests/s whose every latency and service time is `ms`, `n` times.
fn flat(variant: &str, round: u32, ms: u64, n: u64) -> TrialRecord {
    let samples = [(ms * MS, n)];
    http_trial(
        variant,
        round,
        (1000, "./srv --port {port}"),
        (&samples, &samples),
    )
}

/// The section, whole.
fn section(html: &str) -> &str {
    let at = html
        .find(r#"<section id="http">"#)
        .expect("an http section");
    &html[at..at + html[at..].find("</section>").expect("closed")]
}

/// The table row labelled `label`: its cells' text.
fn row(html: &str, label: &str) -> Vec<String> {
    let head = format!(r#"<tr><th scope="row">{label}</th>"#);
    let at = html.find(&head).unwrap_or_else(|| panic!("no row {label}")) + head.len();
    let end = at + html[at..].find("</tr>").expect("row closed");
    html[at..end]
        .split("</td>")
        .filter_map(|c| c.split_once('>').map(|(_, text)| text.to_string()))
        .collect()
}

/// The chart's polylines: (solid, dashed).
fn curves(html: &str) -> (usize, usize) {
    let at = html
        .find(&format!(r#"<svg id="{CHART_ID}""#))
        .expect("the chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    let tags: Vec<&str> = svg
        .split("<polyline")
        .skip(1)
        .map(|t| &t[..t.find('>').expect("tag closed")])
        .collect();
    let dashed = tags
        .iter()
        .filter(|t| t.contains("stroke-dasharray"))
        .count();
    (tags.len() - dashed, dashed)
}

#[test]
fn percentiles_come_from_histograms_merged_by_adding_counts() {
    let mut run = run_of(&["A"]);
    // 300 requests of 1 ms in one trial, 100 of 3 ms in the other: the merge's p50 is 1 ms
    // (an average of the two trials' p50s would say 2 ms), its p90 and max 3 ms.
    run.trials.push(flat("A", 1, 1, 300));
    run.trials.push(flat("A", 2, 3, 100));
    // Neither a warm-up nor a cancelled trial counts: their 10 s would be the max.
    for (round, warm) in [(3, true), (4, false)] {
        let mut t = flat("A", round, 10_000, 50);
        t.warmup = warm;
        t.cancelled = !warm;
        run.trials.push(t);
    }
    let page = Page::new(&run);
    let v = &http_variants(&page)[0];
    let h = v.latency.as_ref().expect("merged latency");
    assert_eq!(h.len(), 400);
    assert_eq!(h.value_at_quantile(0.5), h.highest_equivalent(MS));
    assert_eq!(h.value_at_quantile(0.9), h.highest_equivalent(3 * MS));
    assert_eq!(h.max(), h.highest_equivalent(3 * MS));

    let html = render_html(&run);
    let s = section(&html);
    let cell = |v: u64| format_value(v as f64, "ns");
    assert_eq!(
        row(s, "request latency p50"),
        [cell(h.highest_equivalent(MS))]
    );
    assert!(row(s, "request latency p50")[0].starts_with("1.00"), "{s}");
    assert_eq!(
        row(s, "request latency p90"),
        [cell(h.highest_equivalent(3 * MS))]
    );
    assert_eq!(row(s, "request latency max"), [cell(h.max())]);
    assert!(row(s, "request latency max")[0].starts_with("3.00"));
    assert_eq!(row(s, "requests recorded"), ["400"]);
    assert_eq!(row(s, "measured trials"), ["2"]);
    assert_eq!(row(s, "offered rate (requests/s)"), ["1000"]);
    assert_eq!(row(s, "achieved rate (requests/s, mean)"), ["1000.0"]);
}

#[test]
fn the_table_sums_errors_and_takes_the_worst_lag_and_the_largest_rss() {
    let mut run = run_of(&["A"]);
    for (round, errors, lag_us, rss_mib, cpu_ns) in [
        (1, 2.0, 300.0, 100.0, 100_000.0),
        (2, 5.0, 1200.0, 80.0, 140_000.0),
    ] {
        let mut t = flat("A", round, 1, 10);
        set_value(&mut t, metrics::ERRORS_5XX, Some(errors));
        set_value(&mut t, metrics::ERRORS_TIMEOUT, Some(1.0));
        set_value(&mut t, metrics::REQUESTS_UNSENT, Some(errors * 10.0));
        set_value(&mut t, metrics::SEND_LAG_MAX_US, Some(lag_us));
        set_value(
            &mut t,
            metrics::SERVER_PEAK_RSS,
            Some(rss_mib * 1_048_576.0),
        );
        set_value(&mut t, metrics::SERVER_CPU_PER_REQUEST, Some(cpu_ns));
        run.trials.push(t);
    }
    let html = render_html(&run);
    let s = section(&html);
    assert_eq!(row(s, "errors: 5xx"), ["7"]);
    assert_eq!(row(s, "errors: timeout"), ["2"]);
    assert_eq!(row(s, "errors: connect"), ["0"]);
    assert_eq!(row(s, "requests unsent"), ["70"]);
    assert_eq!(row(s, "worst send lag"), ["1.200 ms"]);
    assert_eq!(row(s, "server peak RSS (max)"), ["100.0 MiB"]);
    assert_eq!(row(s, "server CPU per request (mean)"), ["120.00 µs"]);
    assert!(!s.contains("—: no measured trial"), "nothing is missing");
}

#[test]
fn the_chart_draws_a_latency_line_and_a_dashed_service_time_line_per_variant() {
    let mut run = run_of(&["A", "B"]);
    for round in 1..=2 {
        run.trials.push(flat("A", round, 1, 100));
        let lat = [(2 * MS, 90), (30 * MS, 10)];
        let svc = [(2 * MS, 100)];
        run.trials
            .push(http_trial("B", round, (1000, "./b"), (&lat, &svc)));
    }
    let html = render_html(&run);
    let s = section(&html);
    assert_eq!(curves(s), (2, 2));
    for label in [
        "A request latency (from intended send)",
        "A service time (from actual send)",
        "B request latency (from intended send)",
        "B service time (from actual send)",
    ] {
        assert!(s.contains(&format!("{label}</text>")), "{label}");
    }
    // The curves are in their variants' colours.
    assert!(s.contains(&format!(
        r#"stroke="{}" stroke-width="2.4" stroke-linejoin"#,
        page_colour(&run, "B")
    )));
    // B's tail is queueing: its request latency p99 is 30 ms, its service time's 2 ms.
    assert!(row(s, "request latency p99")[1].starts_with("30."));
    assert!(row(s, "service time p99")[1].starts_with("2.00"));

    // A variant without service times: its dashed line is left out, and said to be.
    for t in run.trials.iter_mut().filter(|t| t.variant == "B") {
        t.metrics.retain(|m| m.name != metrics::SERVICE_TIME);
    }
    let html = render_html(&run);
    let s = section(&html);
    assert_eq!(curves(s), (2, 1));
    assert!(s.contains("B: no service_time samples, no dashed line"));
    assert_eq!(row(s, "service time p50")[1], MISSING);
}

fn page_colour(run: &RunRecord, variant: &str) -> &'static str {
    Page::new(run).variant_colour(variant)
}

/// The shortfall note of `variant`, if the page has one.
fn noted(html: &str, variant: &str) -> bool {
    html.contains(&format!(
        r#"<p class="shortfall"><b>{variant}: the load fell short.</b>"#
    ))
}

#[test]
fn a_load_that_fell_short_of_the_offered_rate_is_noted() {
    let mut run = run_of(&["A", "B"]);
    for round in 1..=2 {
        let mut a = flat("A", round, 1, 100);
        // Half a percent short: the generator's wobble, not a shortfall.
        set_value(&mut a, metrics::REQUESTS_PER_SEC_AFTER_WARMUP, Some(995.0));
        run.trials.push(a);
        let mut b = flat("B", round, 1, 100);
        set_value(&mut b, metrics::REQUESTS_PER_SEC_AFTER_WARMUP, Some(940.0));
        run.trials.push(b);
    }
    let html = render_html(&run);
    assert!(!noted(&html, "A"));
    assert!(noted(&html, "B"));
    assert!(html.contains("It achieved 940.0 requests/s of 1000 offered (6.0% short; 2 of 2 trials more than 1% short)"));
    let page = Page::new(&run);
    let b = &http_variants(&page)[1];
    assert_eq!(
        b.shortfall(),
        Some(Shortfall {
            offered: 1000.0,
            achieved: 940.0,
            short_trials: 2,
            of: 2
        })
    );

    // Without the rate after the warm-up, the whole trial's: here 2% short.
    for t in &mut run.trials {
        set_value(t, metrics::REQUESTS_PER_SEC_AFTER_WARMUP, None);
    }
    let html = render_html(&run);
    assert!(noted(&html, "A") && noted(&html, "B"));

    // A closed loop offers no rate to fall short of, whatever it achieved.
    for t in &mut run.trials {
        t.params.insert("rate".into(), "0".into());
    }
    let html = render_html(&run);
    assert!(!noted(&html, "A") && !noted(&html, "B"));
    assert!(html.contains("At rate=0 (closed loop)"));
    assert_eq!(
        row(section(&html), "offered rate (requests/s)"),
        ["closed loop (rate=0)"; 2]
    );
}

#[test]
fn the_protocol_of_each_variant_is_named() {
    let mut run = run_of(&["A", "B"]);
    let mut a1 = flat("A", 1, 2, 100);
    a1.params.insert("http2".into(), "true".into());
    let mut a2 = flat("A", 2, 2, 100);
    a2.params.insert("http2".into(), "true".into());
    a2.params.insert("tls".into(), "true".into());
    let mut b = flat("B", 1, 2, 100);
    b.params.insert("tls".into(), "true".into());
    run.trials.extend([a1, a2, b, flat("B", 2, 2, 100)]);
    let html = render_html(&run);
    assert_eq!(
        row(section(&html), "protocol"),
        [
            "HTTP/2 (cleartext), HTTP/2 over TLS",
            "HTTP/1.1 over TLS, HTTP/1.1"
        ]
    );
}

#[test]
fn server_commands_are_escaped() {
    let html = render_html(&sample_http_run());
    let s = section(&html);
    assert!(!html.contains("<script>"), "a raw script tag");
    assert!(s.contains(&format!("<code>{}</code>", esc(EVIL_SERVER))));
    assert!(s.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn the_sample_run_shows_b_short_and_queueing_in_its_tail() {
    let run = sample_http_run();
    let html = render_html(&run);
    let s = section(&html);
    assert!(!noted(s, "A") && noted(s, "B"));
    assert_eq!(curves(s), (2, 2));
    assert_eq!(row(s, "measured trials"), ["6", "6"]);
    // The section comes right after the verdicts, before the settings.
    let at = html.find(r#"<section id="http">"#).expect("http");
    assert!(at < html.find(r#"<section id="settings">"#).expect("settings"));
    let page = Page::new(&run);
    let vs = http_variants(&page);
    let (lat, svc) = (
        vs[1].latency.as_ref().unwrap(),
        vs[1].service.as_ref().unwrap(),
    );
    assert_eq!(lat.len(), 6 * 4000, "warm-up left out");
    assert!(lat.value_at_quantile(0.99) > 2 * svc.value_at_quantile(0.99));
}

#[test]
fn a_run_without_http_trials_has_no_http_section() {
    let html = render_html(&sample_run::sample_run());
    assert!(html.contains(r#"<section id="per-round">"#));
    assert!(!html.contains(r#"<section id="http">"#));
    assert!(!html.contains(CHART_ID));
}

#[test]
fn odd_trials_are_skipped_and_named_not_drawn_as_zero() {
    let mut run = run_of(&["A", "B", "C"]);
    // A: empty histograms, nothing but the rate; a trial whose rate is not a number.
    let mut a = http_trial("A", 1, (500, "./a"), (&[], &[]));
    a.metrics.retain(|m| m.histogram.is_some());
    a.params.insert("rate".into(), "soon".into());
    run.trials.push(a);
    // B: only warm-up trials.
    let mut b = flat("B", 1, 1, 10);
    b.warmup = true;
    run.trials.push(b);
    // C: zero requests, a zero rate offered and achieved, no server parameter.
    let mut c = http_trial("C", 1, (0, "./c"), (&[(MS, 0)], &[]));
    c.params.remove("server");
    set_value(&mut c, metrics::REQUESTS_PER_SEC_AFTER_WARMUP, Some(0.0));
    run.trials.push(c);
    let html = render_html(&run);
    let s = section(&html);
    assert!(s.contains("No latency samples to draw."));
    assert!(!s.contains(CHART_ID));
    assert!(s.contains("A: no request_latency samples, no solid line"));
    assert!(s.contains("B: no measured trials (all warm-up or cancelled)"));
    assert!(s.contains("—: no measured trial of that variant recorded it"));
    assert_eq!(row(s, "measured trials"), ["1", "0", "1"]);
    assert_eq!(
        row(s, "offered rate (requests/s)"),
        [MISSING, MISSING, "closed loop (rate=0)"]
    );
    assert_eq!(
        row(s, "achieved rate (requests/s, mean)"),
        [MISSING, MISSING, "0.0"]
    );
    assert_eq!(row(s, "request latency p50"), [MISSING; 3]);
    assert_eq!(row(s, "errors: 5xx"), [MISSING, MISSING, "0"]);
    assert!(!s.contains(r#"class="shortfall""#));
    // C's server cell is missing too.
    assert!(s.contains(r#"<td class="wrap">—</td></tr>"#));
}

#[test]
fn tcp_trials_are_in_the_section_with_no_status_counts_drawn_as_zero() {
    let mut run = run_of(&["A"]);
    for round in 1..=2 {
        let mut t = flat("A", round, 2, 100);
        t.probe = "tcp".into();
        t.metrics
            .retain(|m| m.name != metrics::ERRORS_4XX && m.name != metrics::ERRORS_5XX);
        run.trials.push(t);
    }
    let html = render_html(&run);
    let s = section(&html);
    assert_eq!(row(s, "measured trials"), ["2"]);
    assert_eq!(row(s, "protocol"), ["raw TCP"]);
    assert!(row(s, "request latency p50")[0].starts_with("2.00"), "{s}");
    assert_eq!(row(s, "errors: 4xx"), [MISSING]);
    assert!(
        s.contains("tcp&#39;s raw responses, which have no status"),
        "{s}"
    );
}

#[test]
fn a_duets_two_servers_each_get_a_column_and_a_curve() {
    // compare --interleave duet: one variant, both servers' figures in each trial, B's under
    // b_ names; A answers in 2 ms, B in 3 ms.
    let mut run = run_of(&[PAIRED_VARIANT]);
    for round in 1..=2 {
        let mut t = flat(PAIRED_VARIANT, round, 2, 100);
        let b = flat(PAIRED_VARIANT, round, 3, 100);
        for m in &b.metrics {
            if [
                metrics::REQUEST_LATENCY,
                metrics::SERVICE_TIME,
                metrics::REQUESTS_SENT,
            ]
            .contains(&m.name.as_str())
            {
                let mut m = m.clone();
                m.name = format!("b_{}", m.name);
                t.metrics.push(m);
            }
        }
        t.params
            .insert("server_b".into(), "./srv-b --port {port}".into());
        run.trials.push(t);
    }
    let page = Page::new(&run);
    let vs = http_variants(&page);
    let names: Vec<&str> = vs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["A", "B"]);
    assert_ne!(vs[0].colour, vs[1].colour);
    let p50 = |v: &HttpVariant<'_>| v.latency.as_ref().unwrap().value_at_quantile(0.5);
    assert_eq!(
        p50(&vs[0]),
        vs[0].latency.as_ref().unwrap().highest_equivalent(2 * MS)
    );
    assert_eq!(
        p50(&vs[1]),
        vs[1].latency.as_ref().unwrap().highest_equivalent(3 * MS)
    );
    let html = render_html(&run);
    let s = section(&html);
    assert_eq!(curves(s), (2, 2), "{s}");
    let p50s = row(s, "request latency p50");
    assert!(
        p50s[0].starts_with("2.00") && p50s[1].starts_with("3.00"),
        "{p50s:?}"
    );
    assert!(s.contains("./srv-b --port {port}"), "{s}");
}
