//! (b), (c) and (d) of the HTML report: results per round, latency percentiles, noise over
//! time.

use std::fmt::Write;

use hdrhistogram::Histogram;
use quietbench_record::record::queries::metric_keys;
use quietbench_record::record::{RunRecord, TrialRecord};

use super::svg::{
    Plot, Scale, linear_labels, linear_ticks, log_labels, log_ticks, round_ticks, value_label,
};
use super::{Page, WIDTH, axis_title, esc, mean, merged_histogram};

/// (b) Per-round series: for each headline metric, the mean over hosts per round, one line per
/// variant, every trial as a small dot; warm-up rounds shaded, their points hollow.
pub(super) fn per_round(page: &Page<'_>, out: &mut String) {
    out.push_str(
        r#"<section id="per-round"><h2>Results per round</h2><p class="note">Lines join each variant's mean over hosts per round; small dots are single trials. Shaded rounds are warm-up (hollow points), left out of the summary.</p>"#,
    );
    let mut drawn = 0;
    for ((metric, unit), variants) in &headline_groups(page) {
        if let Some(figure) = round_panel(page, (metric, unit), variants, drawn) {
            out.push_str(&figure);
            drawn += 1;
        }
    }
    if drawn == 0 {
        out.push_str(r#"<p class="note">No measured values.</p>"#);
    }
    out.push_str("</section>");
}

/// Variants grouped by headline metric (name and unit), in the page's order: one chart per
/// group.
fn headline_groups<'p>(page: &'p Page<'_>) -> Vec<((String, String), Vec<&'p str>)> {
    let mut groups: Vec<((String, String), Vec<&str>)> = Vec::new();
    for (v, _) in &page.variants {
        if let Some(key) = page.headline(v) {
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(v),
                None => groups.push((key, vec![v])),
            }
        }
    }
    groups
}

/// The per-round chart of one headline metric, the `n`th drawn, as a `<figure>`; `None` when
/// no finished trial of these variants has a value of it.
fn round_panel(
    page: &Page<'_>,
    (metric, unit): (&str, &str),
    variants: &[&str],
    n: usize,
) -> Option<String> {
    // Every finished trial of these variants with its value, warm-ups included.
    let value_of = |t: &TrialRecord| -> Option<f64> {
        t.metrics
            .iter()
            .find(|m| m.name == *metric)
            .and_then(|m| m.value)
            .filter(|v| v.is_finite())
    };
    let trials: Vec<(&TrialRecord, f64)> = page
        .run
        .trials
        .iter()
        .filter(|t| variants.contains(&t.variant.as_str()) && !t.cancelled)
        .filter_map(|t| value_of(t).map(|v| (t, v)))
        .collect();
    if trials.is_empty() {
        return None;
    }
    let max_round = trials.iter().map(|(t, _)| t.round).max().unwrap_or(1);
    let lo = trials.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = trials.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let pad = (hi - lo) * 0.05;
    let (y0, y1, step, ticks) = linear_ticks(lo - pad, hi + pad, 6);
    let mut plot = Plot::new(WIDTH, 300.0, [78.0, 14.0, 24.0, 44.0]);
    let y = Scale::new(y0, y1, plot.bottom, plot.top, false);
    let x = Scale::new(
        0.5,
        f64::from(max_round) + 0.5,
        plot.left,
        plot.right,
        false,
    );
    let warmup_rounds: u32 = trials
        .iter()
        .filter(|(t, _)| t.warmup)
        .map(|(t, _)| t.round)
        .max()
        .unwrap_or(0);
    if warmup_rounds > 0 {
        warmup_band(&mut plot, &x, warmup_rounds);
    }
    plot.y_axis(
        &y,
        &linear_labels(&ticks, step, unit),
        &axis_title(metric, unit, false),
    );
    plot.x_axis(&x, &round_ticks(1, max_round), "round");
    for (vi, v) in variants.iter().enumerate() {
        // A small sideways offset per variant so their dots do not hide each other.
        let offset = (vi as f64 - (variants.len() as f64 - 1.0) / 2.0) * 0.12;
        let series = Series {
            variant: v,
            offset,
            rounds: max_round,
            unit,
        };
        draw_series(page, &mut plot, (&x, &y), &trials, &series);
    }
    plot.frame();
    let title = format!("{metric} per round");
    let desc = format!(
        "{} variants over {max_round} rounds, {warmup_rounds} of them warm-up",
        variants.len()
    );
    let legend = page.variant_legend(variants, |_| String::new());
    Some(format!(
        "<figure><figcaption>{}</figcaption>{}{legend}</figure>",
        esc(&title),
        plot.finish(&format!("chart-per-round-{n}"), &title, &desc)
    ))
}

/// Shades rounds 1 to `warmup_rounds` and labels them warm-up.
fn warmup_band(plot: &mut Plot, x: &Scale, warmup_rounds: u32) {
    let (bx0, bx1) = (x.at(0.5), x.at(f64::from(warmup_rounds) + 0.5));
    plot.raw(&format!(
        r#"<rect class="band" x="{bx0:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>warm-up rounds</title></rect><text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">warm-up</text>"#,
        plot.top,
        bx1 - bx0,
        plot.bottom - plot.top,
        (bx0 + bx1) / 2.0,
        plot.top + 14.0
    ));
}

/// One variant's line on a per-round chart.
struct Series<'s> {
    variant: &'s str,
    /// Sideways offset of its points, in rounds.
    offset: f64,
    /// The last round on the chart.
    rounds: u32,
    unit: &'s str,
}

/// A variant's trials as small dots, and its mean per round as a line with a larger dot at
/// each round (hollow in warm-up).
fn draw_series(
    page: &Page<'_>,
    plot: &mut Plot,
    (x, y): (&Scale, &Scale),
    trials: &[(&TrialRecord, f64)],
    series: &Series<'_>,
) {
    let Series {
        variant: v,
        offset,
        rounds,
        unit,
    } = *series;
    let colour = page.variant_colour(v);
    let mut line = Vec::new();
    let mut means = Vec::new();
    for r in 1..=rounds {
        let in_round: Vec<(&TrialRecord, f64)> = trials
            .iter()
            .filter(|(t, _)| t.variant == v && t.round == r)
            .copied()
            .collect();
        if in_round.is_empty() {
            continue;
        }
        let px = x.at(f64::from(r) + offset);
        for (t, value) in &in_round {
            plot.dot(
                px,
                y.at(*value),
                2.2,
                colour,
                t.warmup,
                &format!(
                    "{v} round {r} on {}: {}",
                    page.host_name(t.host),
                    value_label(*value, unit)
                ),
            );
        }
        let m = mean(&in_round.iter().map(|p| p.1).collect::<Vec<_>>());
        line.push((px, y.at(m)));
        means.push((px, y.at(m), in_round[0].0.warmup, r, m, in_round.len()));
    }
    plot.line(&line, colour, 2.0, false, &format!("{v}: mean per round"));
    for (px, py, warm, r, m, n) in means {
        plot.dot(
            px,
            py,
            4.5,
            colour,
            warm,
            &format!(
                "{v} round {r}{}: mean {} over {n} hosts",
                if warm { " (warm-up)" } else { "" },
                value_label(m, unit)
            ),
        );
    }
}

/// The percentiles plotted: x = -log10(1 - q) from 0 (p0) to 4 (p99.99) in steps of 0.05.
pub(super) fn percentile_points() -> impl Iterator<Item = (f64, f64)> {
    (0..=80).map(|i| {
        let x = f64::from(i) * 0.05;
        (x, 1.0 - 10f64.powf(-x))
    })
}

/// Names a quantile as a percentile: 0.999 → "p99.9".
pub(super) fn percentile_name(q: f64) -> String {
    let p = format!("{:.4}", q * 100.0);
    format!("p{}", p.trim_end_matches('0').trim_end_matches('.'))
}

/// (c) Latency percentile curves: one chart per distribution metric, one curve per variant
/// from its counted trials' merged histogram.
pub(super) fn latency(page: &Page<'_>, out: &mut String) {
    out.push_str(
        r#"<section id="latency"><h2>Latency percentiles</h2><p class="note">Value at each percentile of each variant's merged histogram (measured trials), on an axis that gives each extra nine the same width.</p>"#,
    );
    let mut drawn = 0;
    for (metric, unit) in &histogram_metrics(page.run) {
        if let Some(figure) = latency_panel(page, (metric, unit), drawn) {
            out.push_str(&figure);
            drawn += 1;
        }
    }
    if drawn == 0 {
        out.push_str(r#"<p class="note">No distribution metrics in this run.</p>"#);
    }
    out.push_str("</section>");
}

/// The (metric, unit) keys that some trial recorded a histogram for, each once, in the order
/// [`metric_keys`] gives them.
fn histogram_metrics(run: &RunRecord) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for (variant, _, metric, unit) in metric_keys(&run.trials) {
        let has_hist = run.trials.iter().any(|t| {
            t.variant == variant
                && t.metrics
                    .iter()
                    .any(|m| m.name == metric && m.histogram.is_some())
        });
        if has_hist && !keys.iter().any(|k| k.0 == metric && k.1 == unit) {
            keys.push((metric, unit));
        }
    }
    keys
}

/// The percentiles marked with a dot on each curve and labelled on x (p0 is labelled only).
pub(super) const PERCENTILE_MARKS: [f64; 6] = [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999];

/// (x, value) of a histogram at each of [`percentile_points`].
fn percentile_values(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    percentile_points()
        .map(|(x, q)| (x, h.value_at_quantile(q) as f64))
        .collect()
}

/// The percentile chart of one metric, the `n`th drawn, as a `<figure>`; `None` when no
/// variant has a merged histogram of it.
fn latency_panel(page: &Page<'_>, (metric, unit): (&str, &str), n: usize) -> Option<String> {
    let curves: Vec<(&str, Histogram<u64>)> = page
        .variants
        .iter()
        .filter_map(|(v, _)| merged_histogram(page.run, v, metric).map(|h| (v.as_str(), h)))
        .collect();
    if curves.is_empty() {
        return None;
    }
    let all: Vec<f64> = curves
        .iter()
        .flat_map(|(_, h)| percentile_values(h))
        .map(|p| p.1)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = all
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
        .max(lo);
    let mut plot = Plot::new(WIDTH, 320.0, [78.0, 14.0, 28.0, 44.0]);
    let log = hi / lo > 10.0;
    let (y, ylabels) = value_axis(&plot, (lo, hi), log, unit);
    let x = Scale::new(0.0, 4.0, plot.left, plot.right, false);
    plot.y_axis(&y, &ylabels, &axis_title(metric, unit, log));
    let xticks: Vec<(f64, String)> = PERCENTILE_MARKS
        .iter()
        .map(|&q: &f64| (-(1.0 - q).log10(), percentile_name(q)))
        .collect();
    plot.x_axis(&x, &xticks, "percentile");
    for (v, h) in &curves {
        draw_curve(page, &mut plot, (&x, &y), (v, h), (lo, unit));
    }
    plot.frame();
    let title = format!("{metric} percentiles");
    let desc = format!("p0 to p99.99 for {} variants", curves.len());
    let names: Vec<&str> = curves.iter().map(|c| c.0).collect();
    let legend = page.variant_legend(&names, |v| {
        curves
            .iter()
            .find(|c| c.0 == v)
            .map(|(_, h)| {
                format!(
                    " — {} samples, p50 {}, p99 {}, max {}",
                    h.len(),
                    value_label(h.value_at_quantile(0.5) as f64, unit),
                    value_label(h.value_at_quantile(0.99) as f64, unit),
                    value_label(h.max() as f64, unit)
                )
            })
            .unwrap_or_default()
    });
    Some(format!(
        "<figure><figcaption>{}</figcaption>{}{legend}</figure>",
        esc(&title),
        plot.finish(&format!("chart-latency-{n}"), &title, &desc)
    ))
}

/// The y scale and its labels for values in `lo..=hi`: logarithmic, with room above and
/// below, when `log`; else linear.
pub(super) fn value_axis(
    plot: &Plot,
    (lo, hi): (f64, f64),
    log: bool,
    unit: &str,
) -> (Scale, Labels) {
    if log {
        let (a, b) = (lo / 1.15, hi * 1.15);
        let ticks = log_ticks(a, b);
        (
            Scale::new(a, b, plot.bottom, plot.top, true),
            log_labels(&ticks, unit),
        )
    } else {
        let (a, b, step, ticks) = linear_ticks(lo * 0.95, hi * 1.05, 6);
        (
            Scale::new(a, b, plot.bottom, plot.top, false),
            linear_labels(&ticks, step, unit),
        )
    }
}

/// Axis labels: (value, text).
pub(super) type Labels = Vec<(f64, String)>;

/// A variant's percentile curve, with a dot at each marked percentile past p0. Values below
/// `lo` (the axis' floor) are drawn at it.
fn draw_curve(
    page: &Page<'_>,
    plot: &mut Plot,
    (x, y): (&Scale, &Scale),
    (v, h): (&str, &Histogram<u64>),
    (lo, unit): (f64, &str),
) {
    let colour = page.variant_colour(v);
    let pts: Vec<(f64, f64)> = percentile_values(h)
        .into_iter()
        .map(|(px, py)| (x.at(px), y.at(py.max(lo))))
        .collect();
    plot.line(
        &pts,
        colour,
        2.2,
        false,
        &format!("{v}: {} samples", h.len()),
    );
    for &q in &PERCENTILE_MARKS[1..] {
        let value = h.value_at_quantile(q) as f64;
        plot.dot(
            x.at(-(1.0 - q).log10()),
            y.at(value.max(lo)),
            3.5,
            colour,
            false,
            &format!("{v} {}: {}", percentile_name(q), value_label(value, unit)),
        );
    }
}

/// One noise reading placed in time.
struct NoisePoint {
    host: usize,
    /// Index of the trial in the run.
    trial: usize,
    /// Seconds since the run's start (mid-interval).
    t: f64,
    steal_pct: Option<f64>,
    foreign_pct: Option<f64>,
    irq_per_s: Option<f64>,
}

fn noise_points(page: &Page<'_>) -> Vec<NoisePoint> {
    let mut points = Vec::new();
    let mut push = |host, trial, start: u64, end: u64, n: &quietbench_proto::v1::NoiseSample| {
        let mid = start / 2 + end / 2;
        points.push(NoisePoint {
            host,
            trial,
            t: mid.saturating_sub(page.origin_ns) as f64 / 1e9,
            steal_pct: n.steal_fraction.map(|f| f * 100.0),
            foreign_pct: quietbench_record::warnings::foreign_share(n).map(|(f, _)| f * 100.0),
            irq_per_s: n
                .interrupts
                .filter(|_| n.elapsed_ns > 0)
                .map(|c| c as f64 / (n.elapsed_ns as f64 / 1e9)),
        });
    };
    for (i, t) in page.run.trials.iter().enumerate() {
        let mut any = false;
        for r in &t.interval_records {
            if let Some(n) = &r.noise {
                push(t.host, i, r.start_unix_ns, r.end_unix_ns, n);
                any = true;
            }
        }
        // An agent that samples noise per trial only: one point mid-trial.
        if !any && let Some(n) = &t.noise {
            push(t.host, i, t.start_unix_ns, t.end_unix_ns, n);
        }
    }
    points
}

/// (d) Noise over time: steal, others' share of the probe CPUs and interrupts per second, per
/// interval across the run; one line per host and trial, coloured by the host's CPU model.
pub(super) fn noise(page: &Page<'_>, out: &mut String) {
    out.push_str(
        r#"<section id="noise"><h2>Noise over time</h2><p class="note">Per interval on the probe CPUs, over the whole run (warm-up included); one line per trial, coloured by its host's CPU model. A reading a host does not expose is left out, never drawn as zero.</p>"#,
    );
    let points = noise_points(page);
    type Get = fn(&NoisePoint) -> Option<f64>;
    // Key, caption, y-axis title, unit, reading.
    let panels: [(&str, &str, &str, &str, Get); 3] = [
        (
            "steal",
            "Steal time on the probe CPUs",
            "steal (%)",
            "%",
            |p| p.steal_pct,
        ),
        (
            "foreign",
            "Others' share of the probe CPUs",
            "others' share (%)",
            "%",
            |p| p.foreign_pct,
        ),
        (
            "interrupts",
            "Interrupts on the probe CPUs",
            "interrupts/s",
            "",
            |p| p.irq_per_s,
        ),
    ];
    // The CPU-model legend first, for all three panels.
    let mut models: Vec<usize> = points.iter().map(|p| page.model_of_host(p.host)).collect();
    models.sort_unstable();
    models.dedup();
    if !models.is_empty() {
        out.push_str(&page.model_legend(&models, |_| String::new()));
    }
    // Time in seconds, minutes or hours, as the run's length asks (drift runs last a day).
    let t_max = points.iter().map(|p| p.t).fold(0.0, f64::max);
    let (per, time_unit, short) = if t_max >= 7200.0 {
        (3600.0, "hours", "h")
    } else if t_max >= 600.0 {
        (60.0, "minutes", "min")
    } else {
        (1.0, "seconds", "s")
    };
    let (x0, x1, xstep, xt) = linear_ticks(0.0, (t_max / per).max(1.0), 10);
    let xlabels: Vec<(f64, String)> = linear_labels(&xt, xstep, "")
        .into_iter()
        .map(|(t, label)| (t * per, label))
        .collect();
    for (key, title, axis_title, unit, get) in panels {
        let vals: Vec<(&NoisePoint, f64)> = points
            .iter()
            .filter_map(|p| get(p).filter(|v| v.is_finite()).map(|v| (p, v)))
            .collect();
        let id = format!("chart-noise-{key}");
        if vals.is_empty() {
            let _ = write!(
                out,
                r#"<figure><figcaption>{}</figcaption><p class="note" id="{id}">Not measured on these hosts.</p></figure>"#,
                esc(title)
            );
            continue;
        }
        let hi = vals.iter().map(|v| v.1).fold(0.0, f64::max);
        let (y0, y1, step, ticks) = linear_ticks(0.0, if hi > 0.0 { hi } else { 1.0 }, 4);
        let mut plot = Plot::new(WIDTH, 210.0, [78.0, 10.0, 24.0, 40.0]);
        let y = Scale::new(y0, y1, plot.bottom, plot.top, false);
        let x = Scale::new(x0 * per, x1 * per, plot.left, plot.right, false);
        plot.y_axis(&y, &linear_labels(&ticks, step, unit), axis_title);
        plot.x_axis(&x, &xlabels, &format!("{time_unit} since the run's start"));
        let mut i = 0;
        while i < vals.len() {
            let trial = vals[i].0.trial;
            let mut j = i;
            while j < vals.len() && vals[j].0.trial == trial {
                j += 1;
            }
            let host = vals[i].0.host;
            let colour = page.host_colour(host);
            let t = &page.run.trials[trial];
            let pts: Vec<(f64, f64)> = vals[i..j]
                .iter()
                .map(|(p, v)| (x.at(p.t), y.at(*v)))
                .collect();
            let tip = format!("{} — {} round {}", page.host_name(host), t.variant, t.round);
            plot.line(&pts, colour, 1.4, false, &tip);
            for (p, v) in &vals[i..j] {
                plot.dot(
                    x.at(p.t),
                    y.at(*v),
                    2.2,
                    colour,
                    false,
                    &format!("{tip}, {:.1} {short}: {}", p.t / per, value_label(*v, unit)),
                );
            }
            i = j;
        }
        plot.frame();
        let full = format!("{title} over the run");
        let desc = format!("{} readings from {} trials", vals.len(), {
            let mut t: Vec<usize> = vals.iter().map(|v| v.0.trial).collect();
            t.dedup();
            t.len()
        });
        let _ = write!(
            out,
            "<figure><figcaption>{}</figcaption>{}</figure>",
            esc(&full),
            plot.finish(&id, &full, &desc)
        );
    }
    out.push_str("</section>");
}
