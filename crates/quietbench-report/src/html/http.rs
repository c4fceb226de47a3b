//! The `http` section (`<section id="http">`): what a load test's user reads first, for the
//! variants whose trials ran the `http` probe or `tcp`, the same load loop with raw framing
//! and the same metrics but the status counts (docs/probes.md, "A server under load"):
//!
//! - the latency percentile curve of each variant's counted trials' `request_latency`
//!   histograms, merged by adding counts (an average of percentiles is no percentile of
//!   anything), with `service_time` dashed beside it in the same colour: the gap is the time
//!   requests waited before they could be sent, which a closed-loop tool leaves out
//!   (coordinated omission). Chart `chart-http-latency`, all variants on one axis;
//! - a table with one column per variant, so A and B read side by side: the rates, the merged
//!   percentiles, errors by kind, what the trials' ends caught unsent or in flight, the
//!   generator's worst lateness, the server's CPU per request and peak memory;
//! - a note for each variant whose achieved rate fell more than 1% short of the rate offered
//!   (open loop only): its latencies are of a smaller load than asked.
//!
//! A figure no counted trial recorded is shown as "—" and said to be missing, never drawn or
//! summed as zero (rustc-perf's rule: what a machine cannot give is not 0).

use std::fmt::Write;

use hdrhistogram::Histogram;
use quietbench_proto::metrics;
use quietbench_record::record::TrialRecord;
use quietbench_record::record::queries::counted;

use super::charts::{PERCENTILE_MARKS, percentile_name, percentile_points, value_axis};
use super::svg::{Plot, Scale, value_label};
use super::{Page, VARIANT_COLOURS, WIDTH, esc, mean, truncate};
use crate::units::format_value;
use quietbench_record::record::figures::PAIRED_VARIANT;

/// The probes whose trials this section reads: `tcp` reports what `http` does, less the
/// status counts (shown as missing).
fn is_load_probe(probe: &str) -> bool {
    matches!(probe, "http" | "tcp")
}

/// The fill of the note that says a variant's load fell short: a pale red, read as a warning
/// and distinct from every chart colour (the screenshot test looks for it).
pub const SHORTFALL_COLOUR: &str = "#FBE3E4";

/// How far the achieved rate may fall below the offered one before the page says so. The
/// generator's own rate wobbles by well under this at any rate it can hold (its schedule is
/// exact; only the last due requests at a trial's end go unsent), so a bigger gap is a server
/// or a generator that did not keep up.
const SHORTFALL: f64 = 0.01;

/// The chart's id.
pub(super) const CHART_ID: &str = "chart-http-latency";

/// One variant's counted http trials and their merged histograms; in a duet (both servers
/// in every trial, `b_` metrics for B's), one for each server.
pub(super) struct HttpVariant<'a> {
    pub(super) name: String,
    /// Its colour: the variant's, and in a duet the next one for server B.
    pub(super) colour: &'static str,
    /// "" or, for server B of a duet, "b_": what its metrics' names start with.
    prefix: &'static str,
    /// Not warm-up, not cancelled.
    trials: Vec<&'a TrialRecord>,
    /// `request_latency`, merged by adding counts; `None` when no trial has samples of it.
    pub(super) latency: Option<Histogram<u64>>,
    /// `service_time`, the same way.
    pub(super) service: Option<Histogram<u64>>,
}

/// A variant whose achieved rate fell short of the one offered.
#[derive(Debug, PartialEq)]
pub(super) struct Shortfall {
    /// Mean offered rate over its open-loop trials, requests/s.
    pub(super) offered: f64,
    /// Mean achieved rate over the same trials.
    pub(super) achieved: f64,
    /// Trials more than [`SHORTFALL`] short, and how many open-loop trials had both rates.
    pub(super) short_trials: usize,
    pub(super) of: usize,
}

/// The trial's value of `name`, where it has a finite one.
fn value(t: &TrialRecord, name: &str) -> Option<f64> {
    t.metrics
        .iter()
        .find(|m| m.name == name)
        .and_then(|m| m.value)
        .filter(|v| v.is_finite())
}

/// The trial's offered rate (its `rate` parameter, requests/s; 0: closed loop).
fn offered(t: &TrialRecord) -> Option<f64> {
    t.params
        .get("rate")
        .and_then(|r| r.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r >= 0.0)
}

/// The trial's achieved rate: from the warm-up's end where the probe reported it (the whole
/// trial's rate counts the warm-up's time, with nothing recorded in it). `prefix`: "b_" for
/// server B of a duet.
fn achieved(t: &TrialRecord, prefix: &str) -> Option<f64> {
    value(
        t,
        &format!("{prefix}{}", metrics::REQUESTS_PER_SEC_AFTER_WARMUP),
    )
    .or_else(|| value(t, &format!("{prefix}{}", metrics::REQUESTS_PER_SEC)))
}

/// The counted trials' histograms of `metric`, merged by adding counts (auto-resizing, so
/// histograms of any range merge); `None` when none has a sample, or one cannot be added.
fn merge(trials: &[&TrialRecord], metric: &str) -> Option<Histogram<u64>> {
    let mut merged = Histogram::<u64>::new(3).ok()?;
    for t in trials {
        let found = t.metrics.iter().find(|m| m.name == metric);
        if let Some(h) = found.and_then(|m| m.histogram.as_ref()) {
            merged.add(&h.hist).ok()?;
        }
    }
    (!merged.is_empty()).then_some(merged)
}

impl<'a> HttpVariant<'a> {
    fn new(
        trials: &'a [TrialRecord],
        variant: &'a str,
        name: String,
        colour: &'static str,
        prefix: &'static str,
    ) -> Self {
        let trials: Vec<&TrialRecord> = counted(trials, variant)
            .filter(|t| is_load_probe(&t.probe))
            .collect();
        Self {
            name,
            colour,
            prefix,
            latency: merge(&trials, &format!("{prefix}{}", metrics::REQUEST_LATENCY)),
            service: merge(&trials, &format!("{prefix}{}", metrics::SERVICE_TIME)),
            trials,
        }
    }

    /// The trials' values of metric `name` (B's of a duet for server B).
    fn values(&self, name: &str) -> Vec<f64> {
        let name = format!("{}{name}", self.prefix);
        self.trials.iter().filter_map(|t| value(t, &name)).collect()
    }

    fn sum(&self, name: &str) -> Option<f64> {
        let v = self.values(name);
        (!v.is_empty()).then(|| v.iter().sum())
    }

    fn max(&self, name: &str) -> Option<f64> {
        self.values(name).into_iter().reduce(f64::max)
    }

    fn mean(&self, name: &str) -> Option<f64> {
        let v = self.values(name);
        (!v.is_empty()).then(|| mean(&v))
    }

    /// The distinct offered rates, ascending.
    fn rates(&self) -> Vec<f64> {
        let mut r: Vec<f64> = self.trials.iter().filter_map(|t| offered(t)).collect();
        r.sort_by(f64::total_cmp);
        r.dedup();
        r
    }

    /// Mean achieved rate over the trials that report one.
    fn achieved(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .trials
            .iter()
            .filter_map(|t| achieved(t, self.prefix))
            .collect();
        (!v.is_empty()).then(|| mean(&v))
    }

    /// Whether the load fell short: over the open-loop trials (rate > 0) with an achieved
    /// rate, the mean achieved more than [`SHORTFALL`] below the mean offered, or any one trial
    /// so (each trial is a load test of its own, and its latencies are of the load it got).
    pub(super) fn shortfall(&self) -> Option<Shortfall> {
        let open: Vec<(f64, f64)> = self
            .trials
            .iter()
            .filter_map(|t| Some((offered(t).filter(|r| *r > 0.0)?, achieved(t, self.prefix)?)))
            .collect();
        if open.is_empty() {
            return None;
        }
        let short = |(o, a): (f64, f64)| a < o * (1.0 - SHORTFALL);
        let offered = mean(&open.iter().map(|p| p.0).collect::<Vec<_>>());
        let achieved = mean(&open.iter().map(|p| p.1).collect::<Vec<_>>());
        let short_trials = open.iter().filter(|p| short(**p)).count();
        (short((offered, achieved)) || short_trials > 0).then_some(Shortfall {
            offered,
            achieved,
            short_trials,
            of: open.len(),
        })
    }

    /// The distinct protocols the load spoke (`http2=`, `tls=`; `tcp`'s raw framing).
    fn protocols(&self) -> Vec<&'static str> {
        let mut p: Vec<&'static str> = Vec::new();
        for t in &self.trials {
            let on = |key: &str| t.params.get(key).is_some_and(|v| v == "true");
            let protocol = match (t.probe.as_str(), on("http2"), on("tls")) {
                ("tcp", ..) => "raw TCP",
                (_, false, false) => "HTTP/1.1",
                (_, true, false) => "HTTP/2 (cleartext)",
                (_, false, true) => "HTTP/1.1 over TLS",
                (_, true, true) => "HTTP/2 over TLS",
            };
            if !p.contains(&protocol) {
                p.push(protocol);
            }
        }
        p
    }

    /// The distinct server commands, as given.
    fn servers(&self) -> Vec<&'a str> {
        let mut s: Vec<&str> = Vec::new();
        let key = if self.prefix.is_empty() {
            "server"
        } else {
            "server_b"
        };
        for t in &self.trials {
            if let Some(cmd) = t.params.get(key)
                && !s.contains(&cmd.as_str())
            {
                s.push(cmd);
            }
        }
        s
    }
}

/// The http variants of the page, in its order, each from its counted trials.
pub(super) fn http_variants<'a>(page: &Page<'a>) -> Vec<HttpVariant<'a>> {
    let run = page.run;
    run.settings
        .variants
        .iter()
        .map(|v| v.name.as_str())
        .chain(run.trials.iter().map(|t| t.variant.as_str()))
        .fold(Vec::<&str>::new(), |mut names, n| {
            let is_http = run
                .trials
                .iter()
                .any(|t| t.variant == n && is_load_probe(&t.probe));
            if is_http && !names.contains(&n) {
                names.push(n);
            }
            names
        })
        .into_iter()
        .flat_map(|n| {
            let colour = page.variant_colour(n);
            let duet = run.trials.iter().any(|t| {
                t.variant == n
                    && t.metrics
                        .iter()
                        .any(|m| m.name == metrics::B_REQUEST_LATENCY)
            });
            if !duet {
                return vec![HttpVariant::new(&run.trials, n, n.to_string(), colour, "")];
            }
            // Both servers of a duet ran in every trial: a column and a curve for each.
            let next = VARIANT_COLOURS
                .iter()
                .position(|c| *c == colour)
                .map_or(VARIANT_COLOURS[1], |i| {
                    VARIANT_COLOURS[(i + 1) % VARIANT_COLOURS.len()]
                });
            let (a, b) = if n == PAIRED_VARIANT {
                ("A".to_string(), "B".to_string())
            } else {
                (format!("{n}: server A"), format!("{n}: server B"))
            };
            vec![
                HttpVariant::new(&run.trials, n, a, colour, ""),
                HttpVariant::new(&run.trials, n, b, next, "b_"),
            ]
        })
        .collect()
}

/// The section, or nothing for a run without http trials.
pub(super) fn http(page: &Page<'_>, out: &mut String) {
    let variants = http_variants(page);
    if variants.is_empty() {
        return;
    }
    out.push_str(
        r#"<section id="http"><h2>Server under load (http)</h2><p class="note">Each variant's measured trials (warm-up and cancelled left out), their histograms merged by adding counts. Solid: request latency, timed from each request's intended send, what a client at the offered rate sees, queueing included (corrected for coordinated omission). Dashed: service time, from its actual send. The gap between them is the time requests waited before they could be sent.</p>"#,
    );
    for v in &variants {
        if let Some(s) = v.shortfall() {
            let _ = write!(
                out,
                r#"<p class="shortfall"><b>{}: the load fell short.</b> It achieved {} requests/s of {} offered ({:.1}% short; {} of {} trials more than 1% short): the generator or the server did not keep up, so these latencies are of a smaller load than asked. Requests unsent (due with no idle connection: the server, or too few connections) and the worst send lag (the generator&#39;s own lateness) below tell which.</p>"#,
                esc(&v.name),
                format_value(s.achieved, "requests/s"),
                rates_cell(&[s.offered]),
                (1.0 - s.achieved / s.offered) * 100.0,
                s.short_trials,
                s.of
            );
        }
    }
    if variants
        .iter()
        .any(|v| v.trials.iter().any(|t| offered(t) == Some(0.0)))
    {
        out.push_str(r#"<p class="note">At rate=0 (closed loop) each connection sends its next request when the last answer is in: nothing is due before it is sent, so request latency and service time nearly coincide, and there is no offered rate to fall short of.</p>"#);
    }
    let mut missing = Vec::new();
    for v in &variants {
        if v.trials.is_empty() {
            missing.push(format!(
                "{}: no measured trials (all warm-up or cancelled)",
                v.name
            ));
            continue;
        }
        if v.latency.is_none() {
            missing.push(format!(
                "{}: no request_latency samples, no solid line",
                v.name
            ));
        }
        if v.service.is_none() {
            missing.push(format!(
                "{}: no service_time samples, no dashed line",
                v.name
            ));
        }
    }
    match chart(&variants) {
        Some(svg) => {
            let _ = write!(
                out,
                "<figure><figcaption>Request latency and service time percentiles</figcaption>{svg}</figure>"
            );
        }
        None => out.push_str(r#"<p class="note">No latency samples to draw.</p>"#),
    }
    for m in &missing {
        let _ = write!(out, r#"<p class="note">{}</p>"#, esc(m));
    }
    table(&variants, out);
    out.push_str("</section>");
}

/// (x, value) of a histogram at each of [`percentile_points`].
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    percentile_points()
        .map(|(x, q)| (x, h.value_at_quantile(q) as f64))
        .collect()
}

/// The percentile chart: per variant, request latency solid (dots at the marked
/// percentiles) and service time dashed, in the variant's colour, on a log axis; `None` when
/// no variant has samples of either.
fn chart(variants: &[HttpVariant<'_>]) -> Option<String> {
    let all: Vec<f64> = variants
        .iter()
        .flat_map(|v| v.latency.iter().chain(v.service.iter()))
        .flat_map(curve)
        .map(|p| p.1)
        .collect();
    if all.is_empty() {
        return None;
    }
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = all
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
        .max(lo);
    // The legend sits above the plot area, one row per variant, clear of every curve.
    let legend_rows = variants.len() as f64;
    let mut plot = Plot::new(
        WIDTH,
        320.0 + 16.0 * legend_rows,
        [78.0, 18.0 + 16.0 * legend_rows, 28.0, 44.0],
    );
    let (y, ylabels) = value_axis(&plot, (lo, hi), true, "ns");
    plot.y_axis(&y, &ylabels, "latency (log scale)");
    let x = Scale::new(0.0, 4.0, plot.left, plot.right, false);
    let xticks: Vec<(f64, String)> = PERCENTILE_MARKS
        .iter()
        .map(|&q| (-(1.0 - q).log10(), percentile_name(q)))
        .collect();
    plot.x_axis(&x, &xticks, "percentile (each extra nine the same width)");
    let at = |(px, py): (f64, f64)| (x.at(px), y.at(py.max(lo)));
    for v in variants {
        let colour = v.colour;
        if let Some(h) = &v.service {
            let pts: Vec<(f64, f64)> = curve(h).into_iter().map(at).collect();
            let tip = format!(
                "{} service time (from actual send): {} requests, p50 {}, p99 {}",
                v.name,
                h.len(),
                value_label(h.value_at_quantile(0.5) as f64, "ns"),
                value_label(h.value_at_quantile(0.99) as f64, "ns")
            );
            plot.line(&pts, colour, 1.6, true, &tip);
        }
        if let Some(h) = &v.latency {
            let pts: Vec<(f64, f64)> = curve(h).into_iter().map(at).collect();
            let tip = format!(
                "{} request latency (from intended send): {} requests, p50 {}, p99 {}",
                v.name,
                h.len(),
                value_label(h.value_at_quantile(0.5) as f64, "ns"),
                value_label(h.value_at_quantile(0.99) as f64, "ns")
            );
            plot.line(&pts, colour, 2.4, false, &tip);
            for &q in &PERCENTILE_MARKS[1..] {
                let value = h.value_at_quantile(q) as f64;
                let (px, py) = at((-(1.0 - q).log10(), value));
                let tip = format!(
                    "{} request latency {}: {}",
                    v.name,
                    percentile_name(q),
                    value_label(value, "ns")
                );
                plot.dot(px, py, 3.5, colour, false, &tip);
            }
        }
    }
    legend(&mut plot, variants);
    plot.frame();
    let desc = format!(
        "p0 to p99.99 of request latency (solid) and service time (dashed) for {} variants",
        variants.len()
    );
    Some(plot.finish(CHART_ID, "http latency percentiles", &desc))
}

/// The key above the plot area: per variant, a solid and a dashed sample line with what each
/// is. Lines, not polylines, so the curves can be counted apart from it.
fn legend(plot: &mut Plot, variants: &[HttpVariant<'_>]) {
    let mut key = String::new();
    for (i, v) in variants.iter().enumerate() {
        let colour = v.colour;
        let y = 14.0 + 16.0 * i as f64;
        let name = esc(&truncate(&v.name, 16));
        for (dx, dash, what) in [
            (0.0, "", "request latency (from intended send)"),
            (
                400.0,
                r#" stroke-dasharray="6 4""#,
                "service time (from actual send)",
            ),
        ] {
            let x = plot.left + dx;
            let _ = write!(
                key,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2.4"{dash}/><text class="label" x="{:.1}" y="{y:.1}">{name} {what}</text>"##,
                y - 4.0,
                x + 28.0,
                y - 4.0,
                x + 34.0,
            );
        }
    }
    plot.raw(&key);
}

/// "—" for a figure no counted trial recorded.
const MISSING: &str = "—";

/// A count, whole.
fn count(v: Option<f64>) -> String {
    v.map_or(MISSING.into(), |v| format!("{v:.0}"))
}

/// Nanoseconds in the page's way (µs, ms, s).
fn ns(v: Option<f64>) -> String {
    v.map_or(MISSING.into(), |v| format_value(v, "ns"))
}

/// Bytes as MiB or GiB.
fn bytes(v: Option<f64>) -> String {
    v.map_or(MISSING.into(), |b| {
        if b >= 1024.0 * 1024.0 * 1024.0 {
            format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
        } else {
            format!("{:.1} MiB", b / (1024.0 * 1024.0))
        }
    })
}

/// The offered rates: one, or each distinct one; rate 0 as closed loop.
fn rates_cell(rates: &[f64]) -> String {
    if rates.is_empty() {
        return MISSING.into();
    }
    let named: Vec<String> = rates
        .iter()
        .map(|&r| {
            if r == 0.0 {
                "closed loop (rate=0)".to_string()
            } else if r.fract() == 0.0 {
                format!("{r:.0}")
            } else {
                format_value(r, "requests/s")
            }
        })
        .collect();
    named.join(", ")
}

/// The counters summed over a variant's trials: the table's label and the metric.
const SUMMED: [(&str, &str); 8] = [
    ("errors: connect", metrics::ERRORS_CONNECT),
    ("errors: timeout", metrics::ERRORS_TIMEOUT),
    ("errors: 4xx", metrics::ERRORS_4XX),
    ("errors: 5xx", metrics::ERRORS_5XX),
    ("errors: I/O", metrics::ERRORS_IO),
    ("reconnects", metrics::RECONNECTS),
    ("requests unsent", metrics::REQUESTS_UNSENT),
    ("requests abandoned", metrics::REQUESTS_ABANDONED),
];

/// The table: one row per figure, one column per variant. Cells are escaped here.
fn table(variants: &[HttpVariant<'_>], out: &mut String) {
    let pct =
        |h: &Option<Histogram<u64>>, q: f64| ns(h.as_ref().map(|h| h.value_at_quantile(q) as f64));
    let mut rows: Vec<(String, Vec<String>)> = vec![
        (
            "measured trials".into(),
            each(variants, |v| v.trials.len().to_string()),
        ),
        (
            "offered rate (requests/s)".into(),
            each(variants, |v| rates_cell(&v.rates())),
        ),
        (
            "achieved rate (requests/s, mean)".into(),
            each(variants, |v| {
                let a = v.achieved();
                a.map_or(MISSING.into(), |a| format_value(a, "requests/s"))
            }),
        ),
        (
            "requests recorded".into(),
            each(variants, |v| {
                count(v.latency.as_ref().map(|h| h.len() as f64))
            }),
        ),
    ];
    for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
        rows.push((
            format!("request latency {label}"),
            each(variants, |v| pct(&v.latency, q)),
        ));
    }
    rows.push((
        "request latency max".into(),
        each(variants, |v| ns(v.latency.as_ref().map(|h| h.max() as f64))),
    ));
    rows.push((
        "service time p50".into(),
        each(variants, |v| pct(&v.service, 0.5)),
    ));
    rows.push((
        "service time p99".into(),
        each(variants, |v| pct(&v.service, 0.99)),
    ));
    for (label, metric) in SUMMED {
        rows.push((label.into(), each(variants, |v| count(v.sum(metric)))));
    }
    // gRPC calls: one row per status code that any variant got.
    for (code, metric) in (1..).zip(metrics::GRPC_ERRORS) {
        if variants
            .iter()
            .any(|v| v.sum(metric).is_some_and(|n| n > 0.0))
        {
            rows.push((
                format!("errors: gRPC {code} ({})", &metric["errors_grpc_".len()..]),
                each(variants, |v| count(v.sum(metric))),
            ));
        }
    }
    rows.push((
        "worst send lag".into(),
        each(variants, |v| {
            ns(v.max(metrics::SEND_LAG_MAX_US).map(|us| us * 1e3))
        }),
    ));
    rows.push((
        "server CPU per request (mean)".into(),
        each(variants, |v| ns(v.mean(metrics::SERVER_CPU_PER_REQUEST))),
    ));
    rows.push((
        "server peak RSS (max)".into(),
        each(variants, |v| bytes(v.max(metrics::SERVER_PEAK_RSS))),
    ));
    out.push_str(r#"<div class="scroll"><table class="http"><thead><tr><th></th>"#);
    for v in variants {
        let _ = write!(
            out,
            r#"<th class="num">{}{}</th>"#,
            Page::swatch(v.colour),
            esc(&v.name)
        );
    }
    out.push_str("</tr></thead><tbody><tr><th scope=\"row\">server</th>");
    for v in variants {
        let servers: Vec<String> = v
            .servers()
            .iter()
            .map(|s| format!("<code>{}</code>", esc(s)))
            .collect();
        let cell = if servers.is_empty() {
            MISSING.to_string()
        } else {
            servers.join("<br>")
        };
        let _ = write!(out, r#"<td class="wrap">{cell}</td>"#);
    }
    out.push_str("</tr><tr><th scope=\"row\">protocol</th>");
    for v in variants {
        let _ = write!(out, r#"<td>{}</td>"#, v.protocols().join(", "));
    }
    out.push_str("</tr>");
    let mut any_missing = false;
    for (label, cells) in &rows {
        let _ = write!(out, r#"<tr><th scope="row">{}</th>"#, esc(label));
        for c in cells {
            any_missing |= c == MISSING;
            let _ = write!(out, r#"<td class="num">{}</td>"#, esc(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    let _ = write!(
        out,
        r#"<p class="note">Percentiles and max from the merged histograms; errors, reconnects, unsent and abandoned summed over the measured trials; the worst send lag and peak RSS the largest of any trial.{}</p>"#,
        if any_missing {
            " —: no measured trial of that variant recorded it (an older agent, a trial that ended before it could report, or tcp&#39;s raw responses, which have no status)."
        } else {
            ""
        }
    );
}

/// One cell per variant.
fn each(variants: &[HttpVariant<'_>], f: impl Fn(&HttpVariant<'_>) -> String) -> Vec<String> {
    variants.iter().map(f).collect()
}

#[cfg(test)]
mod tests;
