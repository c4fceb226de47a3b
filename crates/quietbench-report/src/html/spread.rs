//! The section on where a multi-host run's spread comes from: rows per CPU model in their
//! colours, the difference between models, the variance split as a bar with its sentences, and
//! outlier hosts ([`quietbench_record::verdicts::spread`] computes them). It comes right after
//! the verdicts: a fleet split in two by its CPU models is what the reader must see first.

use std::fmt::Write;

use quietbench_record::verdicts::spread::{FleetSpread, SpreadSplit, signed_pct};

use super::super::units::format_value;
use super::{Page, WIDTH, esc};

/// Colours of the split's parts: CPU model, host, round (greys and a blue, so they are not
/// read as CPU models or variants).
const SHARE_COLOURS: [&str; 3] = ["#3A5A80", "#8FA8C8", "#D5DEEA"];

/// `<section id="spread">`, or nothing for a single-host run.
pub(super) fn spread(page: &Page<'_>, spreads: &[FleetSpread], out: &mut String) {
    if spreads.is_empty() {
        return;
    }
    out.push_str(
        r#"<section id="spread"><h2>Where the spread comes from</h2><p class="note">Across hosts, on the figure each variant's verdicts compare (its headline rate; for exec, each trial's median time per invocation): one row per CPU model, each model against the one most hosts drew (interval over hosts), the variance of ln(value) split between CPU models, hosts of one model and rounds on one host, and hosts far from their model's others (robust z).</p>"#,
    );
    for (i, s) in spreads.iter().enumerate() {
        section(page, i, s, out);
    }
    out.push_str("</section>");
}

fn section(page: &Page<'_>, index: usize, s: &FleetSpread, out: &mut String) {
    let _ = write!(
        out,
        "<h3>{} · {} ({}), {} hosts, {} trials</h3>",
        esc(&page.variant_label(&s.variant, &s.probe)),
        esc(&s.metric),
        esc(&s.unit),
        s.hosts,
        s.trials
    );
    let _ = write!(
        out,
        r#"<table id="spread-models-{index}"><thead><tr><th>CPU model</th><th class="num">hosts</th><th class="num">trials</th><th class="num">mean</th><th class="num">median</th><th class="num">CV within the model</th></tr></thead><tbody>"#
    );
    for m in &s.models {
        let colour = page
            .models
            .iter()
            .position(|name| *name == m.cpu_model)
            .map_or(super::UNKNOWN_MODEL_COLOUR, |i| page.model_colour(i));
        let _ = write!(
            out,
            r#"<tr><td>{}{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            Page::swatch(colour),
            esc(&m.cpu_model),
            m.hosts,
            m.trials,
            esc(&format_value(m.mean, &s.unit)),
            esc(&format_value(m.median, &s.unit)),
            m.cv.map_or("-".into(), |cv| format!("{:.2}%", cv * 100.0)),
        );
    }
    out.push_str("</tbody></table>");
    for d in &s.differences {
        let _ = write!(out, r#"<p class="difference">{}</p>"#, esc(&d.sentence));
    }
    if let Some(split) = &s.split {
        share_bar(index, split, out);
        let _ = write!(
            out,
            r#"<p class="note">One trial on a host of this fleet varies by {} (SD of ln value).</p><ul class="split">"#,
            esc(&quietbench_stats::pct(split.total_sd))
        );
        for sentence in &split.sentences {
            let _ = write!(out, "<li>{}</li>", esc(sentence));
        }
        out.push_str("</ul>");
    }
    if s.outliers.is_empty() {
        let _ = write!(
            out,
            r#"<p class="note">No outlier host (|robust z| over each model's hosts above {}).</p>"#,
            s.outlier_threshold
        );
    } else {
        let _ = write!(
            out,
            r#"<table id="spread-outliers-{index}"><thead><tr><th>outlier host</th><th>CPU model</th><th class="num">mean</th><th class="num">against its model's median host</th><th class="num">robust z</th></tr></thead><tbody>"#
        );
        for o in &s.outliers {
            let _ = write!(
                out,
                r#"<tr><td>{}</td><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{:.1}</td></tr>"#,
                esc(&o.address),
                esc(&o.cpu_model),
                esc(&format_value(o.mean, &s.unit)),
                esc(&signed_pct(o.off)),
                o.z
            );
        }
        out.push_str("</tbody></table>");
    }
    if !s.notes.is_empty() {
        out.push_str(r#"<ul class="note">"#);
        for n in &s.notes {
            let _ = write!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul>");
    }
}

/// The shares as one stacked bar, each part labelled with its name and percentage.
fn share_bar(index: usize, split: &SpreadSplit, out: &mut String) {
    let parts = [
        ("CPU model", split.between_models),
        ("hosts of one model", Some(split.between_hosts)),
        ("rounds on one host", Some(split.within_host)),
    ];
    let (height, bar_y, bar_h) = (64.0, 8.0, 26.0);
    let label = parts
        .iter()
        .filter_map(|(name, share)| share.map(|s| format!("{name} {:.0}%", s * 100.0)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        out,
        r#"<svg id="chart-spread-{index}" class="chart" role="img" aria-labelledby="chart-spread-{index}-title" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}"><title id="chart-spread-{index}-title">Share of the spread: {}</title>"#,
        esc(&label)
    );
    let mut x = 0.0;
    for (i, (name, share)) in parts.iter().enumerate() {
        let Some(share) = share else { continue };
        let w = share * WIDTH;
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="{bar_y}" width="{w:.1}" height="{bar_h}" fill="{}"><title>{name}: {:.1}%</title></rect>"#,
            SHARE_COLOURS[i],
            share * 100.0
        );
        // Labels under the bar, left-aligned at each part's start, for parts wide enough.
        if w >= 90.0 {
            let _ = write!(
                out,
                r#"<text class="label" x="{:.1}" y="{}">{name} {:.0}%</text>"#,
                x + 2.0,
                bar_y + bar_h + 16.0,
                share * 100.0
            );
        }
        x += w;
    }
    out.push_str("</svg>");
}
