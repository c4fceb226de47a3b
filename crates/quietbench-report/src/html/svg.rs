//! The little charting the HTML report needs, as SVG text: scales, tick choice, axes and marks.
//! Hand-written rather than a plotting crate: the page must stand alone (no scripts, no fetches),
//! and the four charts need only dots, lines, bands and labelled axes.

use std::fmt::Write;

use super::esc;

/// Maps data values to pixels, linearly or by log10.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
    log: bool,
}

impl Scale {
    /// `lo..hi` onto `from..to` pixels; `log` needs `lo > 0`.
    pub fn new(lo: f64, hi: f64, from: f64, to: f64, log: bool) -> Self {
        Self {
            lo,
            hi,
            from,
            to,
            log,
        }
    }

    /// The pixel of `v`.
    pub fn at(&self, v: f64) -> f64 {
        let f = |x: f64| {
            if self.log {
                x.max(f64::MIN_POSITIVE).log10()
            } else {
                x
            }
        };
        let (lo, hi) = (f(self.lo), f(self.hi));
        let t = if hi > lo {
            (f(v) - lo) / (hi - lo)
        } else {
            0.5
        };
        self.from + t * (self.to - self.from)
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `range`.
fn nice_step(range: f64, target: usize) -> f64 {
    let raw = (range / target.max(1) as f64).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    let n = raw / magnitude;
    let nice = if n < 1.5 {
        1.0
    } else if n < 3.0 {
        2.0
    } else if n < 7.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Ticks for a linear axis over data in `lo..=hi`: the domain widened to whole steps, the step,
/// and the tick values. A flat range is opened around its value.
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> (f64, f64, f64, Vec<f64>) {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    if hi <= lo {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.01 };
        lo -= pad;
        hi += pad;
    }
    let step = nice_step(hi - lo, target);
    let start = (lo / step).floor() * step;
    let end = (hi / step).ceil() * step;
    let count = ((end - start) / step).round() as usize;
    let ticks = (0..=count).map(|i| start + i as f64 * step).collect();
    (start, end, step, ticks)
}

/// Ticks for a log axis over `lo..=hi` (both > 0): 1, 2 and 5 times powers of ten, thinned to
/// powers of ten alone over wide ranges.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let mantissas: &[f64] = if last - first > 4 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut ticks = Vec::new();
    for e in first..=last {
        for m in mantissas {
            let v = m * 10f64.powi(e);
            if v >= lo * 0.999 && v <= hi * 1.001 {
                ticks.push(v);
            }
        }
    }
    ticks
}

/// Drops trailing zeros of a decimal: "1.50" → "1.5", "2.00" → "2".
fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Decimals that tell ticks `step` apart.
fn decimals(step: f64) -> usize {
    if step <= 0.0 || !step.is_finite() {
        return 0;
    }
    (-(step.log10()) + 0.999).clamp(0.0, 6.0) as usize
}

/// A divisor and suffix for a unit's axis labels: nanoseconds as ns/µs/ms/s, large counts with
/// k/M/G, percentages and the rest plain.
pub fn unit_scale(max_abs: f64, unit: &str) -> (f64, &'static str) {
    if unit == "ns" {
        if max_abs >= 1e9 {
            (1e9, " s")
        } else if max_abs >= 1e6 {
            (1e6, " ms")
        } else if max_abs >= 1e3 {
            (1e3, " µs")
        } else {
            (1.0, " ns")
        }
    } else if unit == "%" {
        (1.0, "%")
    } else if max_abs >= 1e9 {
        (1e9, "G")
    } else if max_abs >= 1e6 {
        (1e6, "M")
    } else if max_abs >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

/// Ticks for an axis of rounds `first..=last`: each round, or every k-th from `first` so that
/// at most 24 are labelled.
pub fn round_ticks(first: u32, last: u32) -> Vec<(f64, String)> {
    let rounds = if last < first {
        0
    } else {
        (last - first) as usize + 1
    };
    let every = rounds.div_ceil(24).max(1);
    (first..=last)
        .filter(|r| ((r - first) as usize).is_multiple_of(every))
        .map(|r| (f64::from(r), r.to_string()))
        .collect()
}

/// Labels for linear ticks `step` apart, in `unit`.
pub fn linear_labels(ticks: &[f64], step: f64, unit: &str) -> Vec<(f64, String)> {
    let max_abs = ticks.iter().fold(0.0f64, |m, t| m.max(t.abs()));
    let (div, suffix) = unit_scale(max_abs, unit);
    let d = decimals(step / div);
    ticks
        .iter()
        .map(|&t| (t, format!("{:.d$}{suffix}", t / div)))
        .collect()
}

/// Labels for log ticks, each scaled on its own (500 µs, 1 ms, 2 ms).
pub fn log_labels(ticks: &[f64], unit: &str) -> Vec<(f64, String)> {
    ticks
        .iter()
        .map(|&t| {
            let (div, suffix) = unit_scale(t.abs(), unit);
            (t, format!("{}{suffix}", trim(format!("{:.3}", t / div))))
        })
        .collect()
}

/// Formats one value for a tooltip: 4 significant digits in the axis' way.
pub fn value_label(v: f64, unit: &str) -> String {
    let (div, suffix) = unit_scale(v.abs(), unit);
    let scaled = v / div;
    let d = if scaled.abs() >= 1000.0 {
        0
    } else if scaled.abs() >= 100.0 {
        1
    } else if scaled.abs() >= 10.0 {
        2
    } else {
        3
    };
    let unit_tail = if unit == "ns" || unit == "%" || unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    format!("{}{suffix}{unit_tail}", trim(format!("{scaled:.d$}")))
}

/// An SVG chart under construction: a plot area inside margins, and the marks drawn so far.
pub struct Plot {
    /// Width of the whole SVG, px.
    pub width: f64,
    /// Height of the whole SVG, px.
    pub height: f64,
    /// The plot area: left, top, right, bottom edges, px.
    pub left: f64,
    /// Top edge of the plot area.
    pub top: f64,
    /// Right edge of the plot area.
    pub right: f64,
    /// Bottom edge of the plot area.
    pub bottom: f64,
    body: String,
}

impl Plot {
    /// A `width`×`height` chart with margins left, top, right, bottom.
    pub fn new(width: f64, height: f64, margins: [f64; 4]) -> Self {
        let [l, t, r, b] = margins;
        Self {
            width,
            height,
            left: l,
            top: t,
            right: width - r,
            bottom: height - b,
            body: String::new(),
        }
    }

    /// Appends raw SVG (already escaped).
    pub fn raw(&mut self, s: &str) {
        self.body.push_str(s);
    }

    /// Horizontal grid lines and labels at `ticks` (mapped by `y`), and the axis title.
    pub fn y_axis(&mut self, y: &Scale, ticks: &[(f64, String)], title: &str) {
        for (v, label) in ticks {
            let py = y.at(*v);
            let _ = write!(
                self.body,
                r##"<line class="grid" x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                self.left,
                self.right,
                self.left - 6.0,
                py + 4.0,
                esc(label)
            );
        }
        let cy = (self.top + self.bottom) / 2.0;
        let _ = write!(
            self.body,
            r##"<text class="axis-title" transform="translate(14 {cy:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
            esc(title)
        );
    }

    /// Vertical grid lines and labels at `ticks` (mapped by `x`), and the axis title.
    pub fn x_axis(&mut self, x: &Scale, ticks: &[(f64, String)], title: &str) {
        for (v, label) in ticks {
            let px = x.at(*v);
            let _ = write!(
                self.body,
                r##"<line class="grid" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}"/><text class="tick" x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                self.top,
                self.bottom,
                self.bottom + 16.0,
                esc(label)
            );
        }
        let _ = write!(
            self.body,
            r##"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            (self.left + self.right) / 2.0,
            self.height - 6.0,
            esc(title)
        );
    }

    /// A frame around the plot area.
    pub fn frame(&mut self) {
        let _ = write!(
            self.body,
            r##"<rect class="frame" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"##,
            self.left,
            self.top,
            self.right - self.left,
            self.bottom - self.top
        );
    }

    /// A filled dot with a tooltip.
    pub fn dot(&mut self, x: f64, y: f64, r: f64, colour: &str, hollow: bool, tip: &str) {
        let (fill, stroke) = if hollow {
            ("#ffffff", colour)
        } else {
            (colour, "#ffffff")
        };
        let _ = write!(
            self.body,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{fill}" stroke="{stroke}" stroke-width="1.2"><title>{}</title></circle>"##,
            esc(tip)
        );
    }

    /// A polyline through `points` (px), with a tooltip.
    pub fn line(&mut self, points: &[(f64, f64)], colour: &str, width: f64, dash: bool, tip: &str) {
        if points.len() < 2 {
            return;
        }
        let d: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let dash = if dash {
            r##" stroke-dasharray="6 4""##
        } else {
            ""
        };
        let _ = write!(
            self.body,
            r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{width}" stroke-linejoin="round"{dash}><title>{}</title></polyline>"##,
            d.join(" "),
            esc(tip)
        );
    }

    /// The finished `<svg>`: `id`, an accessible `<title>` and description, and the marks.
    pub fn finish(self, id: &str, title: &str, desc: &str) -> String {
        format!(
            r##"<svg id="{id}" class="chart" role="img" aria-label="{t}" aria-labelledby="{id}-title {id}-desc" viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg"><title id="{id}-title">{t}</title><desc id="{id}-desc">{d}</desc>{body}</svg>"##,
            id = esc(id),
            t = esc(title),
            d = esc(desc),
            w = self.width,
            h = self.height,
            body = self.body
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_ticks_cover_the_data_in_nice_steps() {
        let (lo, hi, step, ticks) = linear_ticks(981.0, 1093.0, 6);
        assert_eq!(step, 20.0);
        assert_eq!((lo, hi), (980.0, 1100.0));
        assert_eq!(ticks.len(), 7);
        let (lo, hi, _, _) = linear_ticks(5.0, 5.0, 5);
        assert!(lo < 5.0 && hi > 5.0);
    }

    #[test]
    fn log_ticks_are_one_two_five() {
        assert_eq!(log_ticks(0.8e6, 6e6), vec![1e6, 2e6, 5e6]);
        assert_eq!(log_ticks(1.0, 1e7).len(), 8);
    }

    #[test]
    fn labels_scale_to_the_unit() {
        let l = linear_labels(&[1_000_000.0, 1_500_000.0], 500_000.0, "ns");
        assert_eq!(l[1].1, "1.5 ms");
        let l = linear_labels(&[980.0, 1000.0], 20.0, "events/s");
        assert_eq!(l[0].1, "980");
        let l = linear_labels(&[2e6, 4e6], 2e6, "loads/s");
        assert_eq!(l[1].1, "4M");
        let l = log_labels(&[500_000.0, 2e6], "ns");
        assert_eq!((l[0].1.as_str(), l[1].1.as_str()), ("500 µs", "2 ms"));
        assert_eq!(value_label(1_234_567.0, "ns"), "1.235 ms");
        assert_eq!(value_label(1061.24, "events/s"), "1061 events/s");
    }

    #[test]
    fn scales_map_both_ways() {
        let s = Scale::new(0.0, 10.0, 100.0, 0.0, false);
        assert_eq!(s.at(5.0), 50.0);
        let l = Scale::new(1.0, 100.0, 0.0, 200.0, true);
        assert!((l.at(10.0) - 100.0).abs() < 1e-9);
    }
}
