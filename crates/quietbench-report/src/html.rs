//! The HTML report: one self-contained page (inline CSS and SVG, no script, nothing fetched) with
//! the run's header, its verdicts, where a multi-host run's spread comes from (CPU models, hosts,
//! rounds, outlier hosts, with its share bar `chart-spread-N`), its summary table and four
//! charts:
//!
//! - per-host results coloured by CPU model, hosts grouped by model: the chart the route-search
//!   team drew by hand to see c5.large split in two by its CPU lottery (CONTEXT.md §1);
//! - each variant's headline value per round, warm-up rounds marked;
//! - latency percentile curves from each variant's merged histogram, p0 to p99.99;
//! - noise over the run: steal, others' share of the probe CPUs, interrupts per second;
//!
//! and, for a run of the `http` probe, its own section after the verdicts (`http.rs`):
//! request latency and service time percentiles per variant from the merged histograms, the
//! rates offered and achieved, errors, and a note where the load fell short; where one server
//! was offered several rates (a capacity search), latency against offered rate with each
//! server's knee (`load_curve.rs`).
//!
//! Every text that comes from a host or a user (host names, CPU models, parameters, errors) is
//! escaped, and a Content-Security-Policy forbids scripts and fetches as a second line of
//! defence: a report is a file people open from a shared drive.
//!
//! Each chart is an `<svg>` with an `id` (`chart-per-host-N`, `chart-per-round-N`,
//! `chart-latency-N`, `chart-http-latency`, `chart-load-curve`, `chart-noise-steal`, `chart-noise-foreign`,
//! `chart-noise-interrupts`), `role="img"`, an `aria-label` and a `<title>`, so tests and
//! screen readers can find it.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use quietbench_record::record::queries::counted;
use quietbench_record::record::{HostRecord, RunRecord};

mod by_host;
mod charts;
mod history;
mod http;
mod load_curve;
mod spread;
mod svg;
mod tables;
mod verdict;

pub use history::render_history_html;
pub use http::SHORTFALL_COLOUR;
pub use load_curve::KNEE_COLOUR;
pub use svg::value_label;

/// Colours of CPU models, in the order of their sorted names: Okabe–Ito, told apart with the
/// common colour-vision deficiencies; its yellow comes last, being faint on white.
pub const CPU_MODEL_COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// The colour of hosts whose CPU model could not be read.
pub const UNKNOWN_MODEL_COLOUR: &str = "#999999";

/// Colours of variants (A, B, ...): Tableau 10, a different family from the CPU models' so the
/// two meanings of colour are not confused between charts.
pub const VARIANT_COLOURS: [&str; 6] = [
    "#4E79A7", "#E15759", "#59A14F", "#B07AA1", "#F28E2B", "#76B7B2",
];

/// Colours of verdicts' outcomes (the bar beside the sentence): no difference, A better, B
/// better; Tableau's blue, red and green, as the variants A and B are drawn.
pub const VERDICT_COLOURS: [&str; 3] = ["#4E79A7", "#E15759", "#59A14F"];

/// The fill of a verdict's interval in the ratio charts.
pub const INTERVAL_COLOUR: &str = "#DBE6F1";

const UNKNOWN_MODEL: &str = quietbench_record::record::queries::UNKNOWN_CPU_MODEL;
const WIDTH: f64 = 1120.0;

/// Escapes text for HTML and SVG, in content and in quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// What every section needs: CPU models and their colours, variants, the run's time origin.
struct Page<'a> {
    run: &'a RunRecord,
    /// Distinct CPU models, sorted.
    models: Vec<String>,
    /// Each host's index into `models`.
    host_model: Vec<usize>,
    /// Variants in the order asked for (then any others the trials name): name and probe.
    variants: Vec<(String, String)>,
    /// Time zero of the charts over time, ns since the epoch.
    origin_ns: u64,
}

fn model_of(h: &HostRecord) -> String {
    quietbench_record::record::queries::cpu_model_of(h)
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl<'a> Page<'a> {
    fn new(run: &'a RunRecord) -> Self {
        let mut models: Vec<String> = run.hosts.iter().map(model_of).collect();
        // A trial naming a host the record lacks (a damaged stored run) is drawn as unknown.
        if run.trials.iter().any(|t| t.host >= run.hosts.len()) {
            models.push(UNKNOWN_MODEL.to_string());
        }
        models.sort();
        models.dedup();
        let host_model = run
            .hosts
            .iter()
            .map(|h| {
                let m = model_of(h);
                models.iter().position(|x| *x == m).unwrap_or(0)
            })
            .collect();
        let mut variants: Vec<(String, String)> = run
            .settings
            .variants
            .iter()
            .map(|v| (v.name.clone(), v.probe.clone()))
            .collect();
        for t in &run.trials {
            if !variants.iter().any(|(n, _)| *n == t.variant) {
                variants.push((t.variant.clone(), t.probe.clone()));
            }
        }
        let first_trial = run.trials.iter().map(|t| t.start_unix_ns).min();
        let started = unix_ns(run.started_at);
        Self {
            run,
            models,
            host_model,
            variants,
            origin_ns: first_trial.map_or(started, |f| f.min(started)),
        }
    }

    fn model_colour(&self, model: usize) -> &'static str {
        if self.models[model] == UNKNOWN_MODEL {
            UNKNOWN_MODEL_COLOUR
        } else {
            CPU_MODEL_COLOURS[model % CPU_MODEL_COLOURS.len()]
        }
    }

    /// The host's index into `models`.
    fn model_of_host(&self, host: usize) -> usize {
        self.host_model.get(host).copied().unwrap_or_else(|| {
            self.models
                .iter()
                .position(|m| m == UNKNOWN_MODEL)
                .unwrap_or(0)
        })
    }

    fn host_colour(&self, host: usize) -> &'static str {
        match self.host_model.get(host) {
            Some(&m) => self.model_colour(m),
            None => UNKNOWN_MODEL_COLOUR,
        }
    }

    fn host_name(&self, host: usize) -> String {
        self.run
            .hosts
            .get(host)
            .map_or_else(|| format!("host {host}"), |h| h.address.clone())
    }

    fn variant_colour(&self, variant: &str) -> &'static str {
        let i = self
            .variants
            .iter()
            .position(|(n, _)| n == variant)
            .unwrap_or(0);
        VARIANT_COLOURS[i % VARIANT_COLOURS.len()]
    }

    fn variant_label(&self, variant: &str, probe: &str) -> String {
        if variant == probe {
            probe.to_string()
        } else {
            format!("{variant}: {probe}")
        }
    }

    /// The variant's headline metric (the rule is `queries::headline`'s): name and unit.
    fn headline(&self, variant: &str) -> Option<(String, String)> {
        quietbench_record::record::queries::headline_metric(&self.run.trials, variant)
    }

    fn swatch(colour: &str) -> String {
        format!(r#"<span class="swatch" style="background:{colour}"></span>"#)
    }

    /// The legend of CPU models, each with `extra` text after its name.
    fn model_legend(&self, used: &[usize], extra: impl Fn(usize) -> String) -> String {
        let mut out = String::from(r#"<ul class="legend">"#);
        for &m in used {
            let _ = write!(
                out,
                "<li>{}{}{}</li>",
                Self::swatch(self.model_colour(m)),
                esc(&self.models[m]),
                esc(&extra(m))
            );
        }
        out.push_str("</ul>");
        out
    }

    fn variant_legend(&self, variants: &[&str], extra: impl Fn(&str) -> String) -> String {
        let mut out = String::from(r#"<ul class="legend">"#);
        for &v in variants {
            let probe = self
                .variants
                .iter()
                .find(|(n, _)| n == v)
                .map_or("", |(_, p)| p.as_str());
            let _ = write!(
                out,
                "<li>{}{}{}</li>",
                Self::swatch(self.variant_colour(v)),
                esc(&self.variant_label(v, probe)),
                esc(&extra(v))
            );
        }
        out.push_str("</ul>");
        out
    }
}

/// A page's head, up to the opened `<main>`: the Content-Security-Policy that forbids scripts
/// and fetches, the title (escaped here), and the shared style plus `extra_style`.
fn page_head(title: &str, extra_style: &str, out: &mut String) {
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="quietbench {version}">
<title>{title}</title>
<style>{STYLE}{extra_style}</style>
</head>
<body>
<main>
"#,
        version = env!("CARGO_PKG_VERSION"),
        title = esc(title),
    );
}

/// Renders the run as one self-contained HTML page.
pub fn render_html(run: &RunRecord) -> String {
    let page = Page::new(run);
    let mut out = String::with_capacity(256 * 1024);
    let verdict_style = format!(
        "p.sentence.no_difference{{border-color:{}}}p.sentence.a_faster{{border-color:{}}}\
         p.sentence.b_faster{{border-color:{}}}svg .ci{{fill:{INTERVAL_COLOUR}}}\
         p.shortfall{{background:{SHORTFALL_COLOUR};border-left:5px solid #b00020;padding:6px 12px;margin:8px 0}}",
        VERDICT_COLOURS[0], VERDICT_COLOURS[1], VERDICT_COLOURS[2],
    );
    page_head(
        &format!("quietbench run {}", run.run_id),
        &verdict_style,
        &mut out,
    );
    tables::title(&page, &mut out);
    verdict::verdicts(&page, &mut out);
    spread::spread(
        &page,
        &quietbench_record::verdicts::spread::fleet_spread(run),
        &mut out,
    );
    // A load test's latencies, rates and errors come right after the verdicts: they are what
    // its user ran it for, and the settings below say how.
    // A capacity search's curve first: it is the search's result, and the http section below
    // has a column per step.
    load_curve::load_curve(&page, &mut out);
    http::http(&page, &mut out);
    tables::settings_and_hosts(&page, &mut out);
    tables::summary(&page, &mut out);
    bottlenecks(run, &mut out);
    by_host::per_host(&page, &mut out);
    charts::per_round(&page, &mut out);
    charts::latency(&page, &mut out);
    charts::noise(&page, &mut out);
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

/// "What binds": each disk and network result against its cap, with each host's caps.
fn bottlenecks(run: &RunRecord, out: &mut String) {
    let found = quietbench_record::verdicts::binding::binding_caps(run);
    let caps: Vec<String> = run
        .hosts
        .iter()
        .filter_map(|h| {
            let lines = crate::table::caps_lines(&h.address, h.caps.as_ref()?);
            (!lines.is_empty()).then_some(lines)
        })
        .collect();
    if found.is_empty() && caps.is_empty() {
        return;
    }
    out.push_str("<h2>What binds</h2>\n<ul class=\"bottlenecks\">\n");
    for b in &found {
        let _ = write!(
            out,
            "<li><b>{} on {}</b>: {}",
            esc(&b.variant),
            esc(&b.address),
            esc(&b.attribution.line)
        );
        if let Some(next) = &b.attribution.next {
            let _ = write!(out, "<br>next: {}", esc(next));
        }
        for c in &b.attribution.caveats {
            let _ = write!(out, "<br>note: {}", esc(c));
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ul>\n");
    for line in caps.iter().flat_map(|c| c.lines()) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(line));
    }
}

const STYLE: &str = r#"
body{font:14px/1.45 "Liberation Sans",Arial,Helvetica,sans-serif;color:#1b1b1b;background:#fff;margin:0}
main{max-width:1160px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:18px;margin:26px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
.meta,.note{color:#555;margin:2px 0 8px;font-size:13px}
.error{color:#b00020;font-weight:600}
.warnings li{color:#8a4b00}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
thead th{background:#f4f5f7;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto}
table.hosts td{white-space:nowrap}
table.hosts td.wrap{white-space:normal;min-width:9em}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
ul.legend{list-style:none;padding:0;margin:2px 0 0;display:flex;flex-wrap:wrap;gap:2px 22px;font-size:13px}
dl.settings{display:grid;grid-template-columns:max-content 1fr;gap:1px 14px;margin:6px 0;font-size:13px}
dl.settings dt{color:#555}
dl.settings dd{margin:0}
figure{margin:10px 0 20px}
figcaption{font-weight:600;margin-bottom:2px}
svg.chart{display:block;max-width:100%;height:auto}
svg text{font-family:"Liberation Sans",Arial,Helvetica,sans-serif}
svg .grid{stroke:#e8e8e8;stroke-width:1}
svg .frame{fill:none;stroke:#bbb}
svg .tick{font-size:11px;fill:#555}
svg .axis-title{font-size:12px;fill:#333}
svg .label{font-size:11px;fill:#333}
svg .band{fill:#f1f1f1}
code{font-family:"Liberation Mono",Menlo,monospace;font-size:12.5px}
h3{font-size:15px;margin:16px 0 4px}
p.commands{margin:4px 0 8px}
p.sentence{font-size:18px;font-weight:600;margin:8px 0;padding:8px 12px;border-left:5px solid #999;background:#f7f7f7}
dl.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
dl.tiles .tile{border:1px solid #ddd;border-radius:4px;padding:6px 14px;min-width:150px}
dl.tiles dt{color:#555;font-size:12px}
dl.tiles dd{margin:0;font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}
"#;

/// A variant's counted trials' histograms of `metric`, merged.
fn merged_histogram(run: &RunRecord, variant: &str, metric: &str) -> Option<Histogram<u64>> {
    // Auto-resizing, so histograms of any range merge.
    let mut merged = Histogram::<u64>::new(3).ok()?;
    for t in counted(&run.trials, variant) {
        let found = t.metrics.iter().find(|m| m.name == metric);
        if let Some(h) = found.and_then(|m| m.histogram.as_ref()) {
            merged.add(&h.hist).ok()?;
        }
    }
    (!merged.is_empty()).then_some(merged)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A value axis' title: the metric, and its unit where the ticks do not carry it (nanosecond
/// ticks are written 850 µs, 1.2 ms).
fn axis_title(metric: &str, unit: &str, log: bool) -> String {
    let log = if log { "log scale" } else { "" };
    let parts: Vec<&str> = [if unit == "ns" { "" } else { unit }, log]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        metric.to_string()
    } else {
        format!("{metric} ({})", parts.join(", "))
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

#[cfg(test)]
mod tests;
