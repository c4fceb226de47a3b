//! The HTML report's unit tests, on the sample runs of quietbench-record's
//! `record::test_records::sample_run`.

use quietbench_record::record::test_records::sample_run;

use super::charts::percentile_name;
use super::*;

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// The `<svg>` with `id`, whole.
fn chart<'h>(html: &'h str, id: &str) -> &'h str {
    let at = html
        .find(&format!(r#"<svg id="{id}""#))
        .unwrap_or_else(|| panic!("no chart {id}"));
    &html[at..at + html[at..].find("</svg>").expect("closed")]
}

#[test]
fn a_compare_page_leads_with_its_verdict() {
    use quietbench_record::record::figures::TrialFigure;
    use quietbench_record::verdicts::compare::judge_run;
    let run = sample_run::sample_compare_run();
    let v = judge_run(&run, TrialFigure::Median).expect("8 rounds on 2 hosts are judged");
    // B took 3% longer in every pair: a difference, A the faster.
    assert_eq!(v.kind, quietbench_stats::VerdictKind::AFaster);
    let html = render_html(&run);
    // The verdict comes first: before the settings, the hosts and every other chart.
    let verdict_at = html.find(r#"<section id="verdict">"#).expect("verdict");
    assert!(verdict_at < html.find(r#"<section id="settings">"#).expect("settings"));
    assert!(verdict_at < html.find(r#"<svg id="chart-per-host-"#).expect("per host"));
    // The terminal's sentence, without its warnings (listed below it).
    let text = v.to_string();
    let sentence = text.lines().next().expect("a sentence");
    assert!(sentence.starts_with("A is "), "{sentence}");
    assert!(html.contains(&format!(
        r#"<p id="verdict-sentence" class="sentence a_faster">{}</p>"#,
        esc(sentence)
    )));
    assert!(!v.warnings.is_empty());
    for w in &v.warnings {
        assert!(html.contains(&format!("<li>{}</li>", esc(w))), "{w}");
    }
    // The ratio, its interval and the smallest detectable difference.
    assert!(html.contains(&format!("<dt>B/A ratio</dt><dd>{:.4}</dd>", v.ratio)));
    assert!(html.contains(&format!(
        "<dt>95% interval</dt><dd>[{:.4}, {:.4}]</dd>",
        v.ci_low, v.ci_high
    )));
    assert!(html.contains(&format!(
        "<dt>smallest detectable difference</dt><dd>{}</dd>",
        quietbench_stats::pct(v.mde)
    )));
    assert!(html.contains("<code>gzip -kf corpus.bin</code>"));
    assert!(html.contains("the median B/A wall-time ratio of each trial&#39;s pairs"));
    // The ratio chart: a dot per host and measured round, the interval as a band, the ratio
    // and 1 as lines.
    let svg = chart(&html, "chart-ratio-0");
    assert!(svg.contains(r#"role="img""#));
    assert!(svg.contains(r#"<title id="chart-ratio-0-title">"#));
    assert_eq!(
        count(svg, "<circle"),
        sample_run::COMPARE_HOSTS * sample_run::COMPARE_ROUNDS as usize
    );
    assert!(
        !svg.contains(", round 1: "),
        "warm-up rounds are not judged"
    );
    assert!(svg.contains(&format!(
        "<title>95% interval of B/A: [{:.4}, {:.4}]</title></rect>",
        v.ci_low, v.ci_high
    )));
    assert!(svg.contains(&format!("<title>B/A = {:.4}</title></polyline>", v.ratio)));
    assert!(svg.contains("<title>1: no difference</title></polyline>"));
    // Each dot is a round's ratio, near the 3% the sample put in every pair.
    let dot = svg.find("round 2: B/A = ").expect("a round's dot");
    let r: f64 = svg[dot + 15..dot + 21].parse().expect("a ratio");
    assert!((r / 1.03 - 1.0).abs() < 0.01, "{r}");
    // Its two hosts drew two CPU models: each model's own verdict, and whether they differ
    // (B is 3% slower on both).
    assert!(html.contains(r#"<p id="verdict-models">CPU models: Intel(R) Xeon(R) Platinum"#));
    let by_model = &html[html.find(r#"<ul class="by-model">"#).expect("per model")..];
    let by_model = &by_model[..by_model.find("</ul>").unwrap()];
    assert_eq!(
        count(by_model, "<li>on Intel(R) Xeon(R) Platinum"),
        2,
        "{by_model}"
    );
    assert!(
        by_model.contains("<li>the change is alike on every CPU model"),
        "{by_model}"
    );
    // A compare run's page has no plan verdicts beside its own.
    assert!(!html.contains(r#"<section id="verdicts">"#));
}

#[test]
fn a_stored_compare_run_renders_the_same_page() {
    let run = sample_run::sample_compare_run();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = quietbench_store::Store::open(&dir.path().join("s.sqlite3")).expect("store");
    store.begin_run(&run, None).expect("begin");
    for (i, h) in run.hosts.iter().enumerate() {
        store.add_host(&run.run_id, i, h).expect("host");
    }
    for (seq, t) in run.trials.iter().enumerate() {
        store.add_trial(&run.run_id, seq, t).expect("trial");
    }
    store
        .finish_run(&run, quietbench_store::RunStatus::Complete)
        .expect("finish");
    let stored = store.load_run(&run.run_id).expect("load");
    assert_eq!(render_html(&stored), render_html(&run));
}

#[test]
fn a_compare_run_too_short_to_judge_says_why() {
    let mut run = sample_run::sample_compare_run();
    run.trials.retain(|t| t.round <= 2);
    let html = render_html(&run);
    assert!(html.contains(r#"<p id="verdict-sentence" class="sentence none">No verdict: "#));
    assert!(!html.contains("chart-ratio-"));
}

#[test]
fn a_run_of_two_variants_shows_each_verdict() {
    let run = sample_run::sample_run();
    let html = render_html(&run);
    let verdicts = quietbench_record::verdicts::plan::judge_plan(&run, run.settings.seed);
    assert_eq!(verdicts.len(), 1);
    let v = verdicts[0]
        .verdict
        .as_ref()
        .expect("28 paired rounds are judged");
    // B's cpu.primes ran 2.5% faster in the sample.
    assert_eq!(v.kind, quietbench_stats::VerdictKind::BFaster);
    let at = html.find(r#"<section id="verdicts">"#).expect("verdicts");
    assert!(at < html.find(r#"<section id="settings">"#).expect("settings"));
    let text = verdicts[0].to_string();
    assert!(html.contains(&format!(
        r#"<p class="sentence b_faster">{}</p>"#,
        esc(text.lines().next().expect("a sentence"))
    )));
    assert!(html.contains(&format!("<dt>B/A ratio</dt><dd>{:.4}</dd>", v.ratio)));
    // 7 hosts × 4 measured rounds.
    assert_eq!(count(chart(&html, "chart-ratio-0"), "<circle"), 28);
}

#[test]
fn escapes_markup_and_quotes() {
    assert_eq!(
        esc(r#"<a href="x">'&'</a>"#),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
}

#[test]
fn names_percentiles() {
    assert_eq!(percentile_name(0.5), "p50");
    assert_eq!(percentile_name(0.999), "p99.9");
    assert_eq!(percentile_name(0.9999), "p99.99");
    assert_eq!(percentile_name(0.0), "p0");
}

#[test]
fn every_chart_is_there_with_an_id_and_a_title() {
    let html = render_html(&sample_run::sample_run());
    for id in [
        "chart-per-host-0",
        "chart-per-host-1",
        "chart-per-round-0",
        "chart-latency-0",
        "chart-noise-steal",
        "chart-noise-foreign",
        "chart-noise-interrupts",
        "chart-ratio-0",
    ] {
        let at = html
            .find(&format!(r#"<svg id="{id}""#))
            .unwrap_or_else(|| panic!("no chart {id}"));
        let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
        assert!(svg.contains(r#"role="img""#), "{id}");
        assert!(svg.contains("aria-label=\""), "{id}");
        assert!(svg.contains(&format!(r#"<title id="{id}-title">"#)), "{id}");
    }
    // One chart per variant for (a), one per metric for (b) and (c).
    assert_eq!(count(&html, r#"<svg id="chart-per-host-"#), 2);
    assert_eq!(count(&html, r#"<svg id="chart-per-round-"#), 1);
    assert_eq!(count(&html, r#"<svg id="chart-latency-"#), 1);
    assert!(html.contains("events_per_sec per host, coloured by CPU model"));
    assert!(html.contains("event_latency percentiles"));
}

#[test]
fn per_host_chart_groups_hosts_by_cpu_model() {
    let run = sample_run::sample_run();
    let html = render_html(&run);
    let at = html.find(r#"<svg id="chart-per-host-0""#).expect("chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    // A dot per measured trial of A: 7 hosts × 4 rounds, none from the warm-up round.
    let dots = count(svg, "<circle");
    assert_eq!(dots, sample_run::HOST_MODELS.len() * 4);
    assert!(
        !svg.contains(" round 1: "),
        "warm-up trials are not plotted"
    );
    // Sorted model names: 8124M, 8223CL, 8275CL get the first three colours.
    let colour_of = |i: usize| CPU_MODEL_COLOURS[i];
    assert_eq!(
        count(svg, &format!(r#"fill="{}" stroke"#, colour_of(0))),
        3 * 4
    );
    assert_eq!(count(svg, &format!(r#"fill="{}" stroke"#, colour_of(1))), 4);
    assert_eq!(
        count(svg, &format!(r#"fill="{}" stroke"#, colour_of(2))),
        3 * 4
    );
    // Hosts appear grouped: every 8124M host's label before every 8275CL host's.
    let label_at = |addr: &str| svg.find(&format!(">{addr}<title>")).expect(addr);
    let m8124 = ["10.0.1.11:7171", "10.0.1.12:7171", "10.0.1.15:7171"];
    let m8275 = ["10.0.1.10:7171", "10.0.1.13:7171", "10.0.1.16:7171"];
    let last_8124 = m8124.iter().map(|a| label_at(a)).max();
    let first_8275 = m8275.iter().map(|a| label_at(a)).min();
    assert!(last_8124 < first_8275);
    // The legend tells the groups apart by their means of host means.
    let fig_end = html[at..].find("</figure>").expect("figure") + at;
    let legend = &html[at..fig_end];
    assert!(legend.contains("8124M CPU @ 3.00GHz — 3 hosts, mean 1004 events/s, the lowest</li>"));
    assert!(
        legend.contains(
            "8275CL CPU @ 3.00GHz — 3 hosts, mean 1052 events/s, +4.8% vs the lowest</li>"
        )
    );
}

#[test]
fn per_round_marks_warm_up() {
    let html = render_html(&sample_run::sample_run());
    let at = html.find(r#"<svg id="chart-per-round-0""#).expect("chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    assert!(svg.contains(">warm-up</text>"));
    assert!(svg.contains("round 1 (warm-up): mean"));
    // One line per variant through the round means.
    assert_eq!(count(svg, ": mean per round</title>"), 2);
}

#[test]
fn latency_curves_span_p0_to_p99_99() {
    let html = render_html(&sample_run::sample_run());
    let at = html.find(r#"<svg id="chart-latency-0""#).expect("chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    for tick in [">p0<", ">p50<", ">p90<", ">p99<", ">p99.9<", ">p99.99<"] {
        assert!(svg.contains(tick), "{tick}");
    }
    // A 1% tail at 4-14x: a log axis, and 81 points per curve.
    assert!(svg.contains(">event_latency (log scale)</text>"));
    let line = svg.find("<polyline points=\"").expect("curve");
    let pts = svg[line..].split('"').nth(1).expect("points");
    assert_eq!(pts.split(' ').count(), 81);
}

#[test]
fn noise_shows_the_steal_spike() {
    let html = render_html(&sample_run::sample_run());
    let at = html.find(r#"<svg id="chart-noise-steal""#).expect("chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    // Every interval of every trial is a reading.
    let run = sample_run::sample_run();
    let readings = run.trials.len() * sample_run::INTERVALS as usize;
    assert!(svg.contains(&format!(
        "{readings} readings from {} trials",
        run.trials.len()
    )));
    // Host 3 (10.0.1.13) stole 4-6% in round 3.
    assert!(svg.contains("10.0.1.13:7171 — A round 3, "));
}

#[test]
fn host_and_user_text_is_escaped() {
    let html = render_html(&sample_run::sample_run());
    assert!(!html.contains("<script"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"));
    assert!(html.contains("limit=&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("Content-Security-Policy"));
}

#[test]
fn noise_falls_back_to_trial_samples_and_long_runs_count_hours() {
    let mut run = sample_run::sample_run();
    for t in &mut run.trials {
        for i in &mut t.interval_records {
            i.noise = None;
        }
    }
    // One trial three hours in: a drift run's length.
    let last = run.trials.last_mut().expect("trials");
    last.start_unix_ns += 3 * 3_600_000_000_000;
    last.end_unix_ns += 3 * 3_600_000_000_000;
    let html = render_html(&run);
    let at = html.find(r#"<svg id="chart-noise-steal""#).expect("chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("closed")];
    let trials = run.trials.len();
    assert!(svg.contains(&format!("{trials} readings from {trials} trials")));
    assert!(svg.contains(">hours since the run&#39;s start</text>"));
}

#[test]
fn a_damaged_record_renders_without_panicking() {
    let mut run = sample_run::sample_run();
    run.hosts.clear();
    let html = render_html(&run);
    assert!(html.contains(r#"<svg id="chart-per-host-0""#));
    assert!(html.contains("unknown CPU model"));
    assert!(html.contains(&format!(r#"fill="{UNKNOWN_MODEL_COLOUR}""#)));
}

#[test]
fn an_empty_run_still_renders() {
    let mut run = sample_run::sample_run();
    run.trials.clear();
    run.error = Some("agent <10.0.1.10> refused".into());
    let html = render_html(&run);
    assert!(html.contains("The run stopped early: agent &lt;10.0.1.10&gt; refused"));
    assert!(!html.contains("<svg"));
    assert!(html.contains(r#"id="chart-noise-steal""#));
    assert!(html.ends_with("</html>\n"));
}
