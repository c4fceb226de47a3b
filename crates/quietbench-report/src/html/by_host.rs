//! (a) of the HTML report: per-host results coloured by CPU model.

use quietbench_record::record::queries::counted;

use super::svg::{Plot, Scale, linear_labels, linear_ticks, value_label};
use super::{Page, WIDTH, axis_title, esc, mean, truncate};

/// Host labels longer than this are cut (the full name is in their tooltip).
const LABEL_LEN: usize = 22;
/// The gap between CPU-model groups, in host slots.
const GAP: f64 = 0.8;

/// (a) Per-host results: one panel per variant, a dot per counted trial, hosts on x grouped by
/// CPU model, each model's mean of host means dashed across its group.
pub(super) fn per_host(page: &Page<'_>, out: &mut String) {
    out.push_str(
        r#"<section id="per-host"><h2>Results per host, by CPU model</h2><p class="note">One dot per measured trial (warm-up left out), a black tick at each host's mean, a dashed line at each CPU model's mean of host means. Instances of one type that drew different CPUs split into groups here.</p>"#,
    );
    let mut drawn = 0;
    for (variant, probe) in &page.variants {
        if let Some(figure) = panel(page, variant, probe, drawn) {
            out.push_str(&figure);
            drawn += 1;
        }
    }
    if drawn == 0 {
        out.push_str(r#"<p class="note">No measured values.</p>"#);
    }
    out.push_str("</section>");
}

/// One variant's panel, the `n`th drawn, as a `<figure>`; `None` when it has no headline
/// metric or no counted values of it.
fn panel(page: &Page<'_>, variant: &str, probe: &str, n: usize) -> Option<String> {
    let (metric, unit) = page.headline(variant)?;
    let slots = Slots::new(page, counted_points(page, variant, &metric));
    if slots.points.is_empty() {
        return None;
    }
    let lo = slots
        .points
        .iter()
        .map(|p| p.2)
        .fold(f64::INFINITY, f64::min);
    let hi = slots
        .points
        .iter()
        .map(|p| p.2)
        .fold(f64::NEG_INFINITY, f64::max);
    let pad = (hi - lo) * 0.05;
    let (y0, y1, step, ticks) = linear_ticks(lo - pad, hi + pad, 6);
    // Host labels run down at 40°: room for the longest.
    let longest = slots
        .hosts
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
    let x = Scale::new(0.0, slots.width(), plot.left + 6.0, plot.right - 6.0, false);
    let axes = Axes { x, y, unit: &unit };
    let group_means = slots.group_means();
    draw_groups(page, &mut plot, &axes, &slots, &group_means);
    draw_hosts(page, &mut plot, &axes, &slots);
    plot.frame();
    let title = format!(
        "{} — {metric} per host, coloured by CPU model",
        page.variant_label(variant, probe)
    );
    let desc = format!(
        "{} trials on {} hosts with {} CPU models",
        slots.points.len(),
        slots.hosts.len(),
        slots.groups.len()
    );
    let legend = legend(page, &group_means, &unit);
    Some(format!(
        "<figure><figcaption>{}</figcaption>{}{legend}</figure>",
        esc(&title),
        plot.finish(&format!("chart-per-host-{n}"), &title, &desc)
    ))
}

/// (host, round, value) of the variant's counted trials that have a finite `metric`.
fn counted_points(page: &Page<'_>, variant: &str, metric: &str) -> Vec<(usize, u32, f64)> {
    counted(&page.run.trials, variant)
        .filter_map(|t| {
            let m = t.metrics.iter().find(|m| m.name == metric)?;
            Some((t.host, t.round, m.value?))
        })
        .filter(|p| p.2.is_finite())
        .collect()
}

/// Where a panel's hosts sit on x: one slot each, sorted by CPU model then name, a gap
/// between models.
struct Slots {
    /// (host, round, value) of the counted trials.
    points: Vec<(usize, u32, f64)>,
    /// The hosts in slot order.
    hosts: Vec<usize>,
    /// Consecutive runs of one model, as (model, first slot, last slot).
    groups: Vec<(usize, usize, usize)>,
}

impl Slots {
    fn new(page: &Page<'_>, points: Vec<(usize, u32, f64)>) -> Self {
        let mut hosts: Vec<usize> = points.iter().map(|p| p.0).collect();
        hosts.sort_by_key(|&h| (page.model_of_host(h), page.host_name(h)));
        hosts.dedup();
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        for (slot, &h) in hosts.iter().enumerate() {
            let m = page.model_of_host(h);
            match groups.last_mut() {
                Some(g) if g.0 == m => g.2 = slot,
                _ => groups.push((m, slot, slot)),
            }
        }
        Self {
            points,
            hosts,
            groups,
        }
    }

    /// The x of a slot's centre, in slots, counting the gaps before it.
    fn position(&self, slot: usize) -> f64 {
        let group = self.groups.iter().position(|g| slot <= g.2).unwrap_or(0);
        slot as f64 + group as f64 * GAP + 0.5
    }

    /// The width of all slots and gaps, in slots.
    fn width(&self) -> f64 {
        self.hosts.len() as f64 + (self.groups.len() as f64 - 1.0) * GAP
    }

    /// (round, value) of a host's trials.
    fn host_values(&self, host: usize) -> Vec<(u32, f64)> {
        self.points
            .iter()
            .filter(|p| p.0 == host)
            .map(|p| (p.1, p.2))
            .collect()
    }

    /// Each model's mean of host means (every host weighs the same, however many trials it
    /// ran) and its host count, as (model, mean, hosts) in group order.
    fn group_means(&self) -> Vec<(usize, f64, usize)> {
        self.groups
            .iter()
            .map(|&(m, first, last)| {
                let means: Vec<f64> = self.hosts[first..=last]
                    .iter()
                    .map(|&h| {
                        let values: Vec<f64> = self.host_values(h).iter().map(|v| v.1).collect();
                        mean(&values)
                    })
                    .collect();
                (m, mean(&means), means.len())
            })
            .collect()
    }
}

/// A panel's scales and the unit of its values.
struct Axes<'u> {
    x: Scale,
    y: Scale,
    unit: &'u str,
}

impl Axes<'_> {
    /// The width of one host slot in pixels, at least 1.
    fn band(&self) -> f64 {
        (self.x.at(1.0) - self.x.at(0.0)).max(1.0)
    }
}

/// Each CPU model's group: a tinted band behind its hosts and its mean of host means dashed
/// across it.
fn draw_groups(
    page: &Page<'_>,
    plot: &mut Plot,
    axes: &Axes<'_>,
    slots: &Slots,
    group_means: &[(usize, f64, usize)],
) {
    let (x, y) = (&axes.x, &axes.y);
    for (&(m, first, last), &(_, gm, count)) in slots.groups.iter().zip(group_means) {
        let colour = page.model_colour(m);
        let (gx0, gx1) = (
            x.at(slots.position(first) - 0.5),
            x.at(slots.position(last) + 0.5),
        );
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
                value_label(gm, axes.unit)
            ),
        );
    }
}

/// Each host's slot: a dot per trial, its mean as a tick over them, its name below.
fn draw_hosts(page: &Page<'_>, plot: &mut Plot, axes: &Axes<'_>, slots: &Slots) {
    let (x, y, unit) = (&axes.x, &axes.y, axes.unit);
    let band = axes.band();
    for (slot, &h) in slots.hosts.iter().enumerate() {
        let cx = x.at(slots.position(slot));
        let values = slots.host_values(h);
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
                    value_label(*v, unit)
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
                value_label(m, unit),
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
}

/// The CPU-model legend: each model's host count and mean, and how far it sits above the
/// lowest model's when there are several.
fn legend(page: &Page<'_>, group_means: &[(usize, f64, usize)], unit: &str) -> String {
    let lowest = group_means
        .iter()
        .map(|g| g.1)
        .fold(f64::INFINITY, f64::min);
    let used: Vec<usize> = group_means.iter().map(|g| g.0).collect();
    page.model_legend(&used, |m| {
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
            value_label(gm, unit)
        )
    })
}
