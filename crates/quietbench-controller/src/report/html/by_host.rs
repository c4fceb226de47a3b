//! (a) of the HTML report: per-host results coloured by CPU model.

use std::fmt::Write;

use super::svg::{Plot, Scale, linear_labels, linear_ticks, value_label};
use super::{Page, WIDTH, axis_title, esc, mean, truncate};
use crate::record::queries::counted;

/// Host labels longer than this are cut (the full name is in their tooltip).
const LABEL_LEN: usize = 22;
/// The gap between CPU-model groups, in host slots.
const GAP: f64 = 0.8;

/// (a) Per-host results: one panel per variant, a dot per counted trial, hosts on x grouped by
/// CPU model, each model's mean of host means dashed across its group.
pub(super) fn per_host(page: &Page<'_>, out: &mut String) {
    let run = page.run;
    out.push_str(
        r#"<section id="per-host"><h2>Results per host, by CPU model</h2><p class="note">One dot per measured trial (warm-up left out), a black tick at each host's mean, a dashed line at each CPU model's mean of host means. Instances of one type that drew different CPUs split into groups here.</p>"#,
    );
    let mut drawn = 0;
    for (variant, probe) in &page.variants {
        let Some((metric, unit)) = page.headline(variant) else {
            continue;
        };
        // (host, round, value) of the counted trials.
        let points: Vec<(usize, u32, f64)> = counted(&run.trials, variant)
            .filter_map(|t| {
                let m = t.metrics.iter().find(|m| m.name == metric)?;
                Some((t.host, t.round, m.value?))
            })
            .filter(|p| p.2.is_finite())
            .collect();
        if points.is_empty() {
            continue;
        }
        let mut hosts: Vec<usize> = points.iter().map(|p| p.0).collect();
        hosts.sort_by_key(|&h| (page.model_of_host(h), page.host_name(h)));
        hosts.dedup();
        let host_values =
            |h: usize| -> Vec<f64> { points.iter().filter(|p| p.0 == h).map(|p| p.2).collect() };
        // Consecutive runs of one model, as (model, first slot, last slot).
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        for (slot, &h) in hosts.iter().enumerate() {
            let m = page.model_of_host(h);
            match groups.last_mut() {
                Some(g) if g.0 == m => g.2 = slot,
                _ => groups.push((m, slot, slot)),
            }
        }
        let lo = points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(|p| p.2).fold(f64::NEG_INFINITY, f64::max);
        let pad = (hi - lo) * 0.05;
        let (y0, y1, step, ticks) = linear_ticks(lo - pad, hi + pad, 6);
        // Host labels run down at 40°: room for the longest.
        let longest = hosts
            .iter()
            .map(|&h| page.host_name(h).chars().count().min(LABEL_LEN))
            .max()
            .unwrap_or(0);
        let label_room = 22.0 + longest as f64 * 6.2 * 0.643;
        let mut plot = Plot::new(WIDTH, 270.0 + label_room, [78.0, 14.0, 14.0, label_room]);
        let y = Scale::new(y0, y1, plot.bottom, plot.top, false);
        plot.y_axis(
            &y,
            &linear_labels(&ticks, step, &unit),
            &axis_title(&metric, &unit, false),
        );
        // Hosts sit in slots, with a gap between models.
        let slot_pos = |slot: usize| {
            let group = groups.iter().position(|g| slot <= g.2).unwrap_or(0);
            slot as f64 + group as f64 * GAP + 0.5
        };
        let total = hosts.len() as f64 + (groups.len() as f64 - 1.0) * GAP;
        let x = Scale::new(0.0, total, plot.left + 6.0, plot.right - 6.0, false);
        let band = (x.at(1.0) - x.at(0.0)).max(1.0);
        // Each model's mean of host means (every host weighs the same, however many trials it
        // ran) and its host count, in group order.
        let group_means: Vec<(usize, f64, usize)> = groups
            .iter()
            .map(|&(m, first, last)| {
                let means: Vec<f64> = hosts[first..=last]
                    .iter()
                    .map(|&h| mean(&host_values(h)))
                    .collect();
                (m, mean(&means), means.len())
            })
            .collect();
        for (&(m, first, last), &(_, gm, count)) in groups.iter().zip(&group_means) {
            let colour = page.model_colour(m);
            let (gx0, gx1) = (x.at(slot_pos(first) - 0.5), x.at(slot_pos(last) + 0.5));
            plot.raw(&format!(
                r#"<rect x="{gx0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.07"/>"#,
                plot.top,
                gx1 - gx0,
                plot.bottom - plot.top
            ));
            plot.line(
                &[(gx0, y.at(gm)), (gx1, y.at(gm))],
                colour,
                1.5,
                true,
                &format!(
                    "{}: mean of {count} host means {}",
                    page.models[m],
                    value_label(gm, &unit)
                ),
            );
        }
        for (slot, &h) in hosts.iter().enumerate() {
            let cx = x.at(slot_pos(slot));
            let values: Vec<(u32, f64)> = points
                .iter()
                .filter(|p| p.0 == h)
                .map(|p| (p.1, p.2))
                .collect();
            let spread = (band * 0.22).min(9.0);
            for (k, (round, v)) in values.iter().enumerate() {
                // Golden-ratio jitter: deterministic, and spreads any count evenly.
                let jitter = ((k as f64 * 0.618_034) % 1.0 - 0.5) * 2.0 * spread;
                plot.dot(
                    cx + jitter,
                    y.at(*v),
                    3.8,
                    page.host_colour(h),
                    false,
                    &format!(
                        "{} round {round}: {}",
                        page.host_name(h),
                        value_label(*v, &unit)
                    ),
                );
            }
            // The host's mean, drawn over its dots.
            let m = mean(&values.iter().map(|v| v.1).collect::<Vec<_>>());
            let half = (band * 0.34).min(15.0);
            plot.line(
                &[(cx - half, y.at(m)), (cx + half, y.at(m))],
                "#222222",
                2.5,
                false,
                &format!(
                    "{}: mean {} over {} trials",
                    page.host_name(h),
                    value_label(m, &unit),
                    values.len()
                ),
            );
            let name = page.host_name(h);
            plot.raw(&format!(
                r#"<text class="label" transform="translate({cx:.1} {:.1}) rotate(-40)" text-anchor="end">{}<title>{}</title></text>"#,
                plot.bottom + 12.0,
                esc(&truncate(&name, LABEL_LEN)),
                esc(&name)
            ));
        }
        plot.frame();
        let title = format!(
            "{} — {metric} per host, coloured by CPU model",
            page.variant_label(variant, probe)
        );
        let desc = format!(
            "{} trials on {} hosts with {} CPU models",
            points.len(),
            hosts.len(),
            groups.len()
        );
        let lowest = group_means
            .iter()
            .map(|g| g.1)
            .fold(f64::INFINITY, f64::min);
        let used: Vec<usize> = group_means.iter().map(|g| g.0).collect();
        let legend = page.model_legend(&used, |m| {
            let Some(&(_, gm, count)) = group_means.iter().find(|g| g.0 == m) else {
                return String::new();
            };
            let rel = if used.len() > 1 && lowest != 0.0 {
                if gm == lowest {
                    ", the lowest".to_string()
                } else {
                    format!(", {:+.1}% vs the lowest", (gm / lowest - 1.0) * 100.0)
                }
            } else {
                String::new()
            };
            format!(
                " — {count} host{}, mean {}{rel}",
                if count == 1 { "" } else { "s" },
                value_label(gm, &unit)
            )
        });
        let _ = write!(
            out,
            "<figure><figcaption>{}</figcaption>{}{legend}</figure>",
            esc(&title),
            plot.finish(&format!("chart-per-host-{drawn}"), &title, &desc)
        );
        drawn += 1;
    }
    if drawn == 0 {
        out.push_str(r#"<p class="note">No measured values.</p>"#);
    }
    out.push_str("</section>");
}
