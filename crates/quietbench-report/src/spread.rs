//! The terminal's section on where a multi-host run's spread comes from: per-CPU-model rows,
//! the difference between models, the variance split and outlier hosts
//! ([`quietbench_record::verdicts::spread`] computes them).

use std::fmt::Write;

use quietbench_record::verdicts::spread::{FleetSpread, signed_pct};

use super::units::format_value;

/// Every variant's section, each after a blank line; empty for a single-host run.
pub fn render(spreads: &[FleetSpread]) -> String {
    let mut out = String::new();
    for s in spreads {
        out.push('\n');
        section(s, &mut out);
    }
    out
}

fn section(s: &FleetSpread, out: &mut String) {
    let label = if s.variant == s.probe {
        s.probe.clone()
    } else {
        format!("{}: {}", s.variant, s.probe)
    };
    let models = match s.models.as_slice() {
        [one] => format!("one CPU model ({})", one.cpu_model),
        many => format!("{} CPU models", many.len()),
    };
    let _ = writeln!(
        out,
        "across hosts: {label} {}, {} hosts, {models}",
        s.metric, s.hosts
    );
    if s.models.len() > 1 {
        model_table(s, out);
        for d in &s.differences {
            let _ = writeln!(out, "  {}", d.sentence);
        }
    }
    if let Some(split) = &s.split {
        let _ = writeln!(
            out,
            "  where the spread comes from (one trial on a host of this fleet varies by {} SD):",
            quietbench_stats::pct(split.total_sd)
        );
        for sentence in &split.sentences {
            let _ = writeln!(out, "    {sentence}");
        }
    }
    if s.outliers.is_empty() {
        let _ = writeln!(
            out,
            "  no outlier host (robust z over each model's hosts, |z| > {})",
            s.outlier_threshold
        );
    } else {
        let _ = writeln!(
            out,
            "  outlier hosts (robust z over each model's hosts, |z| > {}):",
            s.outlier_threshold
        );
        for o in &s.outliers {
            let _ = writeln!(
                out,
                "    {} ({}): {} {}, {} against its model's median host, z = {:.1}",
                o.address,
                o.cpu_model,
                s.metric,
                format_value(o.mean, &s.unit),
                signed_pct(o.off),
                o.z
            );
        }
    }
    for note in &s.notes {
        let _ = writeln!(out, "  note: {note}");
    }
}

/// One row per CPU model: hosts, trials, mean, median, CV within the model.
fn model_table(s: &FleetSpread, out: &mut String) {
    let header = ["CPU model", "hosts", "trials", "mean", "median", "CV"].map(String::from);
    let rows: Vec<[String; 6]> = s
        .models
        .iter()
        .map(|m| {
            [
                m.cpu_model.clone(),
                m.hosts.to_string(),
                m.trials.to_string(),
                format_value(m.mean, &s.unit),
                format_value(m.median, &s.unit),
                m.cv.map_or("-".into(), |cv| format!("{:.2}%", cv * 100.0)),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = " ".repeat(w.saturating_sub(c.chars().count()));
                if i == 0 {
                    format!("{c}{pad}")
                } else {
                    format!("{pad}{c}")
                }
            })
            .collect();
        let _ = writeln!(out, "  {}", cells.join("  "));
    }
}
