//! The history page of `history --change-points --html FILE`: one chart per CPU model and
//! variant (`chart-history-N`), a dot per run, each segment's median as a level line, and each
//! change point as a dashed vertical line labelled with its change and p-value; regressions in
//! the verdicts' red, improvements in their green.

use std::fmt::Write;

use quietbench_record::verdicts::changes::{
    ChangeKind, HistoryChanges, SeriesChanges, p_label, runs_to_detect_text,
};

use super::svg::{Plot, Scale, linear_labels, linear_ticks, value_label};
use super::{CPU_MODEL_COLOURS, VERDICT_COLOURS, esc};
use crate::json::rfc3339;

/// Renders the history and its change points as one self-contained HTML page.
pub fn render_history_html(found: &HistoryChanges) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("quietbench history of {} {}", found.probe, found.metric);
    super::page_head(&title, "", &mut out);
    let _ = write!(
        out,
        r#"<h1>{t}</h1>
<p class="meta">{filter}change points by the {method} detector with a permutation test (p ≤ {sig} over {perms} shuffles, segments of at least {min} runs, seed {seed}); one series per CPU model and variant, one point per run (the median of its trials).</p>
"#,
        t = esc(&title),
        filter = found
            .cpu_model_filter
            .as_ref()
            .map(|m| format!("CPU models matching “{}”; ", esc(m)))
            .unwrap_or_default(),
        method = found.method.name,
        sig = found.method.significance,
        perms = found.method.permutations,
        min = found.method.min_segment,
        seed = found.method.seed,
    );
    if found.series.is_empty() {
        out.push_str(r#"<p class="note">No stored run has this metric.</p>"#);
    }
    for (i, s) in found.series.iter().enumerate() {
        chart(found, s, i, &mut out);
        let reach = runs_to_detect_text(&s.runs_to_detect, "run");
        if !reach.is_empty() {
            let _ = writeln!(
                out,
                r#"<p class="meta">{} ({}): {}.</p>"#,
                esc(&s.cpu_model),
                esc(&s.variant),
                esc(&reach)
            );
        }
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

fn kind_colour(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Regression => VERDICT_COLOURS[1],
        ChangeKind::Improvement => VERDICT_COLOURS[2],
        ChangeKind::Change => VERDICT_COLOURS[0],
    }
}

fn chart(found: &HistoryChanges, s: &SeriesChanges, i: usize, out: &mut String) {
    let colour = CPU_MODEL_COLOURS[i % CPU_MODEL_COLOURS.len()];
    let n = s.points.len();
    if n == 0 {
        return;
    }
    let lo = s
        .points
        .iter()
        .map(|p| p.value)
        .fold(f64::INFINITY, f64::min);
    let hi = s
        .points
        .iter()
        .map(|p| p.value)
        .fold(f64::NEG_INFINITY, f64::max);
    let pad = (hi - lo) * 0.08;
    let (y0, y1, step, ticks) = linear_ticks(lo - pad, hi + pad, 6);
    let mut plot = Plot::new(super::WIDTH, 320.0, [78.0, 28.0, 24.0, 44.0]);
    let y = Scale::new(y0, y1, plot.bottom, plot.top, false);
    let x = Scale::new(-0.5, n as f64 - 0.5, plot.left, plot.right, false);
    plot.y_axis(
        &y,
        &linear_labels(&ticks, step, &s.unit),
        &format!("{} ({})", found.metric, s.unit),
    );
    let every = n.div_ceil(20).max(1);
    let xticks: Vec<(f64, String)> = (0..n)
        .filter(|r| r.is_multiple_of(every))
        .map(|r| (r as f64, (r + 1).to_string()))
        .collect();
    plot.x_axis(&x, &xticks, "run, oldest first");
    for (a, b, m) in s.segments() {
        plot.line(
            &[
                (x.at(a as f64 - 0.4), y.at(m)),
                (x.at(b as f64 - 0.6), y.at(m)),
            ],
            "#555555",
            1.5,
            false,
            &format!(
                "median of runs {}–{}: {}",
                a + 1,
                b,
                value_label(m, &s.unit)
            ),
        );
    }
    for c in &s.change_points {
        let px = x.at(c.point.index as f64 - 0.5);
        let pct = c.percent();
        let mark = format!(
            r##"<line class="change" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{}" stroke-width="1.5" stroke-dasharray="5 3"><title>{}</title></line><text class="label" x="{:.1}" y="{:.1}" fill="{}">{}</text>"##,
            plot.top,
            plot.bottom,
            kind_colour(c.kind),
            esc(&format!(
                "change point at run {}: {pct}, p = {}",
                c.run_id,
                p_label(c.point.p_value)
            )),
            px + 4.0,
            plot.top - 8.0,
            kind_colour(c.kind),
            esc(&format!("{pct} p={}", p_label(c.point.p_value))),
        );
        plot.raw(&mark);
    }
    let line: Vec<(f64, f64)> = s
        .points
        .iter()
        .enumerate()
        .map(|(k, p)| (x.at(k as f64), y.at(p.value)))
        .collect();
    plot.line(&line, colour, 1.2, false, "one point per run");
    for (k, p) in s.points.iter().enumerate() {
        plot.dot(
            x.at(k as f64),
            y.at(p.value),
            3.5,
            colour,
            false,
            &format!(
                "run {} ({}): {} over {} trials",
                p.run_id,
                rfc3339(p.started_at),
                value_label(p.value, &s.unit),
                p.trials
            ),
        );
    }
    plot.frame();
    let caption = format!("{} ({})", s.cpu_model, s.variant);
    let desc = format!(
        "{n} runs of {} {} on {}, {} change points",
        found.probe,
        found.metric,
        s.cpu_model,
        s.change_points.len()
    );
    let _ = write!(
        out,
        "<figure><figcaption>{}</figcaption>{}</figure>",
        esc(&caption),
        plot.finish(&format!("chart-history-{i}"), &caption, &desc)
    );
}
