//! The verdicts that lead the page, right under its title: what a reader opens a comparison's
//! report for. A `compare` run gets its verdict (the sentence the terminal prints, the B/A ratio
//! with its interval, the smallest difference the run could detect) and a chart of the
//! per-round ratios behind it; a run of two or more variants gets each variant's verdict
//! against the first the same way.
//!
//! Nothing here judges: the verdicts are
//! [`quietbench_record::verdicts::compare::judge_run`]'s and
//! [`quietbench_record::verdicts::plan::judge_plan`]'s, computed from the record alone, so a
//! stored run's page (`quietbench show RUN --html`) is the live run's. The chart's per-round
//! ratios are the statistics crate's own pairing ([`quietbench_stats::pair_rounds`]) of the same
//! observations.
//!
//! Charts: `chart-ratio-N`, one per verdict in the order shown.

use std::fmt::Write;

use quietbench_record::record::figures::{PAIRED_VARIANT, TrialFigure};
use quietbench_record::verdicts::compare;
use quietbench_record::verdicts::plan::judge_plan;
use quietbench_stats::{Arm, Observation, PairedRounds, Verdict, VerdictKind, pair_rounds, pct};

use super::svg::{Plot, Scale, linear_labels, linear_ticks, round_ticks};
use super::{Page, WIDTH, esc};

/// The verdict section: a compare run's verdict, else a many-variant run's verdicts, else
/// nothing (a run of one variant has nothing to compare).
pub(super) fn verdicts(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    if let Some(figure) = compare::compare_figure(run) {
        compare_verdict(page, figure, out);
    } else if run.settings.variants.len() >= 2 && run.settings.capacity_slo.is_none() {
        plan_verdicts(page, out);
    }
}

/// The sentence of a verdict without its warnings (`Display` puts each on a line of its own
/// after the sentence; the page lists them instead).
fn sentence(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// The CSS class, and the JSON report's word, for a verdict's outcome.
fn kind_class(kind: VerdictKind) -> &'static str {
    match kind {
        VerdictKind::NoDifference => "no_difference",
        VerdictKind::AFaster => "a_faster",
        VerdictKind::BFaster => "b_faster",
    }
}

/// 0.95 → "95%".
fn level_label(level: f64) -> String {
    format!("{}%", (level * 1000.0).round() / 10.0)
}

/// The verdict's figures as tiles: the ratio, its interval, the smallest detectable difference
/// and what they rest on. `ratio_name` names the ratio ("B/A").
fn figure_tiles(v: &Verdict, ratio_name: &str, out: &mut String) {
    let hosts = match v.hosts {
        1 => "1 host".to_string(),
        h => format!("{h} hosts"),
    };
    let tiles = [
        (
            format!("{ratio_name} ratio"),
            format!("{:.4}", v.ratio),
            "ratio",
        ),
        (
            format!("{} interval", level_label(v.level.get())),
            format!("[{:.4}, {:.4}]", v.ci_low, v.ci_high),
            "interval",
        ),
        (
            "smallest detectable difference".to_string(),
            pct(v.mde),
            "mde",
        ),
        (
            "paired rounds".to_string(),
            format!("{} on {hosts}", v.rounds),
            "rounds",
        ),
    ];
    out.push_str(r#"<dl class="tiles">"#);
    for (label, value, class) in tiles {
        let _ = write!(
            out,
            r#"<div class="tile {class}"><dt>{}</dt><dd>{}</dd></div>"#,
            esc(&label),
            esc(&value)
        );
    }
    out.push_str("</dl>");
}

fn warning_list(v: &Verdict, out: &mut String) {
    if v.warnings.is_empty() {
        return;
    }
    out.push_str(r#"<ul class="warnings">"#);
    for w in &v.warnings {
        let _ = write!(out, "<li>{}</li>", esc(w));
    }
    out.push_str("</ul>");
}

/// `compare`'s verdict: the commands, the sentence, the figures, how it was judged, its
/// warnings and the per-round ratio chart.
fn compare_verdict(page: &Page<'_>, figure: TrialFigure, out: &mut String) {
    let run = page.run;
    out.push_str(r#"<section id="verdict"><h2>Verdict</h2>"#);
    // The commands: a paired variant carries both, separate variants one each.
    let param = |variant: &str, key: &str| {
        run.settings
            .variants
            .iter()
            .find(|v| v.name == variant)
            .and_then(|v| v.params.get(key))
            .cloned()
    };
    // (two servers' variants carry each one's command as `server`)
    let side = |variant: &str| param(variant, "cmd").or_else(|| param(variant, "server"));
    let (a, b) = match param(PAIRED_VARIANT, "cmd") {
        Some(a) => (Some(a), param(PAIRED_VARIANT, "cmd_b")),
        None => (side("A"), side("B")),
    };
    if let (Some(a), Some(b)) = (a, b) {
        let _ = write!(
            out,
            r#"<p class="commands">A: <code>{}</code><br>B: <code>{}</code></p>"#,
            esc(&a),
            esc(&b)
        );
    }
    match compare::judge_run(run, figure) {
        Ok(v) => {
            let _ = write!(
                out,
                r#"<p id="verdict-sentence" class="sentence {}">{}</p>"#,
                kind_class(v.kind),
                esc(sentence(&v.to_string()))
            );
            figure_tiles(&v, "B/A", out);
            let _ = write!(
                out,
                r#"<p class="note">Compared: {}. Interval: {}.</p>"#,
                esc(&figure.describe(compare::interleave_of(run))),
                esc(&v.method)
            );
            warning_list(&v, out);
            let by_model = compare::judge_by_model(run, figure);
            let lines = compare::cpu_model_lines(run, by_model.as_ref());
            if let Some((head, rest)) = lines.split_first() {
                let _ = write!(
                    out,
                    r#"<p id="verdict-models">{}</p><ul class="by-model">"#,
                    esc(head)
                );
                for line in rest {
                    let _ = write!(out, "<li>{}</li>", esc(line.trim()));
                }
                out.push_str("</ul>");
            }
            let obs = compare::observations(run, figure);
            if let Some(chart) = ratio_chart(page, 0, &obs, &v, ("A", "B")) {
                out.push_str(&chart);
            }
        }
        Err(e) => {
            let _ = write!(
                out,
                r#"<p id="verdict-sentence" class="sentence none">No verdict: {}</p>"#,
                esc(&e.to_string())
            );
        }
    }
    out.push_str("</section>");
}

/// Each variant after the first judged against it, as the terminal prints at the end of a plan.
fn plan_verdicts(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    out.push_str(
        r#"<section id="verdicts"><h2>Verdicts</h2><p class="note">Each variant (B) against the first (A), paired by round on each host, on each trial's headline figure.</p>"#,
    );
    let mut drawn = 0;
    for pv in judge_plan(run, run.settings.seed) {
        let _ = write!(
            out,
            r#"<h3>{} against {}</h3>"#,
            esc(&pv.candidate),
            esc(&pv.baseline)
        );
        let text = pv.to_string();
        match &pv.verdict {
            Ok(v) => {
                let _ = write!(
                    out,
                    r#"<p class="sentence {}">{}</p>"#,
                    kind_class(v.kind),
                    esc(sentence(&text))
                );
                figure_tiles(v, &format!("{}/{}", pv.candidate, pv.baseline), out);
                warning_list(v, out);
                let names = (pv.baseline.as_str(), pv.candidate.as_str());
                if let Some(chart) = ratio_chart(page, drawn, &pv.observations, v, names) {
                    out.push_str(&chart);
                    drawn += 1;
                }
            }
            Err(_) => {
                let _ = write!(out, r#"<p class="sentence none">{}</p>"#, esc(&text));
            }
        }
    }
    out.push_str("</section>");
}

/// The per-round candidate / baseline ratios behind a verdict, one dot per host and round in
/// the host's CPU-model colour, over the verdict's interval (a band), its ratio (a line) and 1
/// (dashed: no difference). `None` when the observations do not pair.
fn ratio_chart(
    page: &Page<'_>,
    n: usize,
    obs: &[Observation],
    v: &Verdict,
    (baseline, candidate): (&str, &str),
) -> Option<String> {
    let paired = pair_rounds(obs, Arm::A, Arm::B).ok()?;
    let points = ratio_points(&paired);
    if points.is_empty() {
        return None;
    }
    let values = points
        .iter()
        .map(|p| p.ratio)
        .chain([v.ci_low, v.ci_high, v.ratio, 1.0])
        .filter(|x| x.is_finite());
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    let pad = (hi - lo) * 0.05;
    let (y0, y1, step, ticks) = linear_ticks(lo - pad, hi + pad, 6);
    let mut plot = Plot::new(WIDTH, 300.0, [78.0, 14.0, 150.0, 44.0]);
    let y = Scale::new(y0, y1, plot.bottom, plot.top, false);
    let (first, last) = points
        .iter()
        .fold((u32::MAX, 0), |(f, l), p| (f.min(p.round), l.max(p.round)));
    let x = Scale::new(
        f64::from(first) - 0.5,
        f64::from(last) + 0.5,
        plot.left,
        plot.right,
        false,
    );
    let names = RatioNames {
        ratio: format!("{candidate}/{baseline}"),
        level: level_label(v.level.get()),
    };
    let RatioNames {
        ratio: ratio_name,
        level,
    } = &names;
    // The interval first, so the grid and the dots lie on it.
    interval_band(&mut plot, &y, v, &names);
    plot.y_axis(
        &y,
        &linear_labels(&ticks, step, ""),
        &format!("{ratio_name} per round"),
    );
    plot.x_axis(&x, &round_ticks(first, last), "round");
    reference_lines(&mut plot, &y, v, &names);
    let hosts = paired.hosts.len();
    ratio_dots(page, &mut plot, (&x, &y), &points, hosts, ratio_name);
    plot.frame();
    let title = format!("{ratio_name} per round, with the {level} interval");
    let desc = format!(
        "{} paired rounds on {hosts} host(s); {ratio_name} = {:.4}, {level} interval [{:.4}, {:.4}]",
        points.len(),
        v.ratio,
        v.ci_low,
        v.ci_high
    );
    let legend = page.model_legend(&paired_models(page, &paired), |_| String::new());
    Some(format!(
        r#"<figure><figcaption>{}</figcaption>{}{legend}<p class="note">Dots: each round's {} (a host's pairs of that round); line: the verdict's ratio; band: its {level} interval; dashed: 1, no difference.</p></figure>"#,
        esc(&title),
        plot.finish(&format!("chart-ratio-{n}"), &title, &desc),
        esc(ratio_name)
    ))
}

/// How the ratio chart names what it shows: the ratio ("B/A") and the interval's level ("95%").
struct RatioNames {
    ratio: String,
    level: String,
}

/// One dot of the ratio chart: a host's ratio in one round.
struct RatioPoint<'p> {
    /// The host's index among the paired hosts (for its sideways offset).
    index: usize,
    host: &'p str,
    round: u32,
    ratio: f64,
}

/// Every paired round's ratio, host by host, leaving out those that are not finite.
fn ratio_points(paired: &PairedRounds) -> Vec<RatioPoint<'_>> {
    paired
        .hosts
        .iter()
        .enumerate()
        .flat_map(|(index, h)| {
            h.rounds
                .iter()
                .zip(&h.log_ratios)
                .map(move |(r, l)| RatioPoint {
                    index,
                    host: h.host.as_str(),
                    round: *r,
                    ratio: l.exp(),
                })
        })
        .filter(|p| p.ratio.is_finite())
        .collect()
}

/// The verdict's interval as a band across the plot, its figures in the band's tooltip.
fn interval_band(plot: &mut Plot, y: &Scale, v: &Verdict, names: &RatioNames) {
    let (top, bottom) = (y.at(v.ci_high), y.at(v.ci_low));
    plot.raw(&format!(
        r#"<rect class="ci" x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}"><title>{} interval of {}: [{:.4}, {:.4}]</title></rect>"#,
        plot.left,
        plot.right - plot.left,
        (bottom - top).max(1.0),
        names.level,
        esc(&names.ratio),
        v.ci_low,
        v.ci_high
    ));
}

/// The lines across the plot at 1 (dashed) and at the verdict's ratio, and the labels to their
/// right: the ratio's always, the interval's ends where they clear it.
fn reference_lines(plot: &mut Plot, y: &Scale, v: &Verdict, names: &RatioNames) {
    let RatioNames {
        ratio: ratio_name,
        level,
    } = names;
    let (left, right) = (plot.left, plot.right);
    let across = |value: f64| [(left, y.at(value)), (right, y.at(value))];
    plot.line(&across(1.0), "#777777", 1.2, true, "1: no difference");
    plot.line(
        &across(v.ratio),
        "#1b1b1b",
        2.0,
        false,
        &format!("{ratio_name} = {:.4}", v.ratio),
    );
    let label = |text: String, value: f64| {
        format!(
            r#"<text class="label" x="{:.1}" y="{:.1}">{}</text>"#,
            right + 8.0,
            y.at(value) + 4.0,
            esc(&text)
        )
    };
    // Side labels only where they do not overlap the ratio's (a narrow interval): the band's
    // tooltip and the tiles above carry the figures anyway.
    let (ratio_y, high_y, low_y) = (y.at(v.ratio), y.at(v.ci_high), y.at(v.ci_low));
    plot.raw(&label(format!("{ratio_name} {:.4}", v.ratio), v.ratio));
    if ratio_y - high_y >= 13.0 {
        plot.raw(&label(
            format!("{level} CI high {:.4}", v.ci_high),
            v.ci_high,
        ));
    }
    if low_y - ratio_y >= 13.0 {
        plot.raw(&label(format!("{level} CI low {:.4}", v.ci_low), v.ci_low));
    }
}

/// A dot per host and round, in the host's CPU-model colour; `hosts` is how many hosts paired.
fn ratio_dots(
    page: &Page<'_>,
    plot: &mut Plot,
    (x, y): (&Scale, &Scale),
    points: &[RatioPoint<'_>],
    hosts: usize,
    ratio_name: &str,
) {
    for p in points {
        let index = page.run.hosts.iter().position(|h| h.address == p.host);
        let colour = index.map_or(super::UNKNOWN_MODEL_COLOUR, |i| page.host_colour(i));
        // A small sideways offset per host so their dots do not hide each other.
        let offset = (p.index as f64 - (hosts as f64 - 1.0) / 2.0) * (0.5 / hosts as f64);
        plot.dot(
            x.at(f64::from(p.round) + offset),
            y.at(p.ratio),
            3.5,
            colour,
            false,
            &format!(
                "{}, round {}: {ratio_name} = {:.4}",
                p.host, p.round, p.ratio
            ),
        );
    }
}

/// The CPU models of the hosts that paired, each once, in model order.
fn paired_models(page: &Page<'_>, paired: &PairedRounds) -> Vec<usize> {
    let mut models: Vec<usize> = (0..page.run.hosts.len())
        .filter(|i| {
            paired
                .hosts
                .iter()
                .any(|h| h.host == page.run.hosts[*i].address)
        })
        .map(|i| page.model_of_host(i))
        .collect();
    models.sort_unstable();
    models.dedup();
    models
}
