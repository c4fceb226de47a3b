//! The report's tables: the run's title, its settings, hosts and warnings, and the summary.

use std::fmt::Write;

use quietbench_record::record::queries::{metric_keys, metric_values};
use quietbench_stats::summarize;

use super::super::json::rfc3339;
use super::super::units::format_value;
use super::{Page, esc, merged_histogram, model_of};

/// The run's title line, and why it stopped early if it did.
pub(super) fn title(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    let _ = write!(
        out,
        r#"<header id="run-header"><h1>quietbench run <code>{}</code></h1><p class="meta">started {}"#,
        esc(&run.run_id),
        esc(&rfc3339(run.started_at))
    );
    match run.finished_at {
        Some(f) => {
            let secs = f
                .duration_since(run.started_at)
                .map_or(0.0, |d| d.as_secs_f64());
            let _ = write!(out, ", finished {} ({secs:.0} s)", esc(&rfc3339(f)));
        }
        None => out.push_str(", not finished"),
    }
    let _ = write!(
        out,
        " · {} trials on {} hosts</p>",
        run.trials.len(),
        run.hosts.len()
    );
    if let Some(e) = &run.error {
        let _ = write!(
            out,
            r#"<p class="error">The run stopped early: {}</p>"#,
            esc(e)
        );
    }
    out.push_str("</header>");
}

/// The run's settings, its hosts (CPU models in their colours) and the run's warnings.
pub(super) fn settings_and_hosts(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    let s = &run.settings;
    out.push_str(r#"<section id="settings"><h2>Settings</h2><dl class="settings">"#);
    let mut row = |k: &str, v: String| {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    };
    row("probes", s.probes.join(", "));
    for v in &s.variants {
        let params: Vec<String> = v.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let what = if params.is_empty() {
            v.probe.clone()
        } else {
            format!("{} {}", v.probe, params.join(" "))
        };
        row(&format!("variant {}", v.name), what);
    }
    if !s.params.is_empty() {
        let params: Vec<String> = s.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        row("params", params.join(" "));
    }
    row(
        "rounds",
        format!("{} measured after {} warm-up", s.rounds, s.warmup),
    );
    row(
        "trial",
        format!(
            "{} s measured, {} s intervals",
            s.duration_ms as f64 / 1000.0,
            s.interval_ms as f64 / 1000.0
        ),
    );
    let cpus: Vec<String> = s.cpus.iter().map(u32::to_string).collect();
    row(
        "placement",
        format!(
            "{}{}{}",
            if s.unpinned { "unpinned" } else { "pinned" },
            if cpus.is_empty() {
                String::new()
            } else {
                format!(", CPUs {}", cpus.join(","))
            },
            if s.tune { ", hosts tuned" } else { "" }
        ),
    );
    row("order seed", s.seed.to_string());
    out.push_str("</dl></section>");

    out.push_str(
        r#"<section id="hosts"><h2>Hosts</h2><div class="scroll"><table class="hosts"><thead><tr><th>#</th><th>agent</th><th>hostname</th><th>CPU model</th><th>stepping</th><th>microcode</th><th class="num">CPUs</th><th>kernel</th><th>clocksource</th>"#,
    );
    // The EC2 column only where some host is on EC2.
    let on_ec2 = run.hosts.iter().any(|h| h.fingerprint.instance.is_some());
    if on_ec2 {
        out.push_str("<th>instance</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (i, h) in run.hosts.iter().enumerate() {
        let fp = &h.fingerprint;
        let cpu = fp.cpu.as_ref();
        let instance = fp
            .instance
            .as_ref()
            .map(|id| {
                [&id.instance_type, &id.availability_zone, &id.instance_id]
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<tr><td class="num">{}</td><td>{} ({})</td><td class="wrap">{}</td><td>{}{}</td><td class="num">{}</td><td>{}</td><td class="num">{}</td><td>{}</td><td>{}</td>"#,
            i,
            esc(&h.address),
            h.kind.as_str(),
            esc(&fp.hostname),
            Page::swatch(page.host_colour(i)),
            esc(&model_of(h)),
            cpu.and_then(|c| c.stepping)
                .map_or("-".into(), |s| s.to_string()),
            esc(cpu.and_then(|c| c.microcode.as_deref()).unwrap_or("-")),
            fp.logical_cpus,
            esc(&fp.kernel_release),
            esc(&fp.clocksource),
        );
        if on_ec2 {
            let _ = write!(out, r#"<td class="wrap">{}</td>"#, esc(&instance));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>");

    let warnings = quietbench_record::warnings::run_warnings(run);
    if !warnings.is_empty() {
        out.push_str(r#"<section id="warnings"><h2>Warnings</h2><ul class="warnings">"#);
        for w in warnings {
            let _ = write!(out, "<li>{}</li>", esc(&w.to_string()));
        }
        out.push_str("</ul></section>");
    }
}

/// The summary table: every variant's metrics over its counted trials.
pub(super) fn summary(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    out.push_str(
        r#"<section id="summary"><h2>Summary</h2><p class="note">Warm-up and cancelled trials left out; percentiles from the merged histograms of the counted trials.</p><table><thead><tr><th>variant</th><th>metric</th><th>unit</th><th class="num">trials</th><th class="num">mean</th><th class="num">median</th><th class="num">CV</th><th class="num">min</th><th class="num">max</th><th class="num">p50</th><th class="num">p99</th><th class="num">p99.9</th></tr></thead><tbody>"#,
    );
    for (variant, probe, metric, unit) in metric_keys(&run.trials) {
        let values = metric_values(&run.trials, &variant, &metric);
        let Some(s) = summarize(&values) else {
            continue;
        };
        let merged = merged_histogram(run, &variant, &metric);
        let pct = |q: f64| {
            merged.as_ref().map_or("-".to_string(), |h| {
                format_value(h.value_at_quantile(q) as f64, &unit)
            })
        };
        let _ = write!(
            out,
            r#"<tr><td>{}{}</td><td>{}</td><td>{}</td>"#,
            Page::swatch(page.variant_colour(&variant)),
            esc(&page.variant_label(&variant, &probe)),
            esc(&metric),
            esc(&unit)
        );
        let cells = [
            s.n.to_string(),
            format_value(s.mean, &unit),
            format_value(s.median, &unit),
            s.cv.map_or("-".into(), |cv| format!("{:.2}%", cv * 100.0)),
            format_value(s.min, &unit),
            format_value(s.max, &unit),
            pct(0.5),
            pct(0.99),
            pct(0.999),
        ];
        for c in cells {
            let _ = write!(out, r#"<td class="num">{}</td>"#, esc(&c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>");
}
