//! The latency–throughput section (`<section id="load-curve">`), for a run that offered one
//! server several rates (a capacity search's steps, or a plan's): per server, p50, p99 and
//! p99.9 of request latency (from the intended send, merged by adding counts) against the
//! offered rate, one steady trial per point, and its knee marked: the lowest rate whose p99 is
//! [`KNEE_FACTOR`] times its p50 or more (quietbench-record's `verdicts::capacity::curve`
//! finds it). A point whose requests went unanswered past a percentile has no value there: it
//! is drawn as a hollow mark on the chart's top edge, never as a number.

use std::fmt::Write;

use quietbench_record::verdicts::capacity::curve::CurvePoint;
use quietbench_record::verdicts::capacity::{
    KNEE_FACTOR, ServerCurve, Slo, load_curves, thousands,
};

use super::charts::value_axis;
use super::svg::{Plot, Scale, linear_labels, linear_ticks, value_label};
use super::{Page, WIDTH, esc, truncate};

/// The chart's id.
pub(super) const CHART_ID: &str = "chart-load-curve";

/// The band that marks a knee: a pale orange behind the curves, distinct from every chart
/// colour (the screenshot test looks for it).
pub const KNEE_COLOUR: &str = "#FCE3C4";

/// The section, or nothing for a run without a curve.
pub(super) fn load_curve(page: &Page<'_>, out: &mut String) {
    let curves = load_curves(page.run);
    if curves.is_empty() {
        return;
    }
    let _ = write!(
        out,
        r#"<section id="load-curve"><h2>Latency against offered rate</h2><p class="note">Each point is its own steady trial (or several at one rate, merged by adding counts), the rate never ramped while latency was measured. Thick: p99, thin: p50, dashed: p99.9, each request timed from its intended send; requests due and never sent rank above all the answered ones, and a percentile they reach is drawn as a hollow mark on the top edge. The shaded band is each server's knee: the lowest rate whose p99 is {KNEE_FACTOR} times its p50 or more.</p>"#
    );
    match chart(page, &curves) {
        Some(svg) => {
            let _ = write!(
                out,
                "<figure><figcaption>Request latency against offered rate</figcaption>{svg}</figure>"
            );
        }
        None => out.push_str(r#"<p class="note">No latency samples to draw.</p>"#),
    }
    table(&curves, out);
    out.push_str("</section>");
}

fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "unanswered".to_string(), |v| value_label(v, "ns"))
}

fn table(curves: &[ServerCurve], out: &mut String) {
    out.push_str(
        r#"<div class="scroll"><table class="http"><thead><tr><th>server</th><th>offered, requests/s</th><th>achieved</th><th>p50</th><th>p99</th><th>p99.9</th><th>trials</th><th></th></tr></thead><tbody>"#,
    );
    for c in curves {
        for p in &c.points {
            let _ = write!(
                out,
                "<tr><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.server),
                esc(&c.label),
                thousands(p.rate.round() as u64),
                p.achieved
                    .map_or("—".to_string(), |a| thousands(a.round() as u64)),
                ns(p.p50),
                ns(p.p99),
                ns(p.p999),
                p.trials,
                if c.knee == Some(p.rate) { "knee" } else { "" }
            );
        }
    }
    out.push_str("</tbody></table></div>");
}

/// The chart: offered rate across, latency up (log), per server its three percentiles in its
/// first variant's colour; `None` when no point has a latency.
fn chart(page: &Page<'_>, curves: &[ServerCurve]) -> Option<String> {
    let values: Vec<f64> = curves
        .iter()
        .flat_map(|c| &c.points)
        .flat_map(|p| [p.p50, p.p99, p.p999])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    if values.is_empty() {
        return None;
    }
    let lo = values
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = values.iter().copied().fold(0.0, f64::max).max(lo);
    let rates = curves.iter().flat_map(|c| &c.points).map(|p| p.rate);
    let max_rate = rates.clone().fold(0.0, f64::max);
    let min_rate = rates.fold(f64::INFINITY, f64::min);
    // The SLO of a capacity search, drawn as its bound where it names one of the three
    // percentiles drawn.
    let slo = page
        .run
        .settings
        .capacity_slo
        .as_deref()
        .and_then(|text| Slo::parse(text).ok())
        .filter(|s| ["p50", "p99", "p99.9"].contains(&s.label.as_str()));
    let hi = slo.as_ref().map_or(hi, |s| hi.max(s.bound_ns as f64));
    let legend_rows = curves.len() as f64;
    let mut plot = Plot::new(
        WIDTH,
        320.0 + 16.0 * legend_rows,
        [78.0, 18.0 + 16.0 * legend_rows, 28.0, 44.0],
    );
    let (y, ylabels) = value_axis(&plot, (lo, hi), true, "ns");
    let (x_lo, x_hi, step, xt) = linear_ticks(min_rate * 0.9, max_rate * 1.05, 8);
    let x = Scale::new(x_lo, x_hi, plot.left, plot.right, false);
    // The knees' bands first, behind every line.
    let mut bands = String::new();
    for c in curves {
        if let Some(knee) = c.knee {
            let px = x.at(knee);
            let _ = write!(
                bands,
                r#"<rect x="{:.1}" y="{:.1}" width="8" height="{:.1}" fill="{KNEE_COLOUR}"><title>{} knee: {}</title></rect>"#,
                px - 4.0,
                plot.top,
                plot.bottom - plot.top,
                esc(&c.label),
                esc(&format!("{} requests/s", thousands(knee.round() as u64)))
            );
        }
    }
    plot.raw(&bands);
    bands.clear();
    plot.y_axis(&y, &ylabels, "latency (log scale)");
    if let Some(slo) = &slo {
        let py = y.at(slo.bound_ns as f64);
        let _ = write!(
            bands,
            r##"<line x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#555555" stroke-width="1.2" stroke-dasharray="3 3"><title>SLO {}</title></line><text class="label" x="{:.1}" y="{:.1}" text-anchor="end">SLO {}</text>"##,
            plot.left,
            plot.right,
            esc(&slo.to_string()),
            plot.right - 4.0,
            py - 4.0,
            esc(&slo.to_string())
        );
        plot.raw(&bands);
    }
    plot.x_axis(
        &x,
        &linear_labels(&xt, step, ""),
        "offered rate, requests/s",
    );
    for c in curves {
        let colour = page.variant_colour(&c.variant);
        for (pick, width, dash, what) in [
            (0usize, 1.4, false, "p50"),
            (1, 2.6, false, "p99"),
            (2, 1.4, true, "p99.9"),
        ] {
            let at = |p: &CurvePoint| match pick {
                0 => p.p50,
                1 => p.p99,
                _ => p.p999,
            };
            let pts: Vec<(f64, f64)> = c
                .points
                .iter()
                .filter_map(|p| Some((x.at(p.rate), y.at(at(p)?.max(lo)))))
                .collect();
            let tip = format!("{} {what}", c.label);
            if pts.len() > 1 {
                plot.line(&pts, colour, width, dash, &tip);
            }
            if pick == 1 {
                for p in &c.points {
                    let (px, hollow, py) = match at(p) {
                        Some(v) => (x.at(p.rate), false, y.at(v.max(lo))),
                        None => (x.at(p.rate), true, plot.top),
                    };
                    let tip = format!(
                        "{} at {} requests/s: p50 {}, p99 {}, p99.9 {}",
                        c.label,
                        thousands(p.rate.round() as u64),
                        ns(p.p50),
                        ns(p.p99),
                        ns(p.p999)
                    );
                    plot.dot(px, py, 4.0, colour, hollow, &tip);
                }
            }
        }
    }
    let mut key = String::new();
    for (i, c) in curves.iter().enumerate() {
        let colour = page.variant_colour(&c.variant);
        let ky = 14.0 + 16.0 * i as f64;
        let knee = c.knee.map_or("no knee".to_string(), |k| {
            format!("knee at {} requests/s", thousands(k.round() as u64))
        });
        let _ = write!(
            key,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2.6"/><text class="label" x="{:.1}" y="{ky:.1}">{} ({}): {}</text>"##,
            plot.left,
            ky - 4.0,
            plot.left + 28.0,
            ky - 4.0,
            plot.left + 34.0,
            esc(&c.label),
            esc(&truncate(&c.server, 48)),
            esc(&knee)
        );
    }
    plot.raw(&key);
    plot.frame();
    let desc = format!(
        "p50, p99 and p99.9 request latency against offered rate for {} servers, knees marked",
        curves.len()
    );
    Some(plot.finish(CHART_ID, "latency against offered rate", &desc))
}
