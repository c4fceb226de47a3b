//! `quietbench changes --csv FILE`: the detector of `history --change-points`, with the same
//! settings, on any series a user brings: the columns of a CSV file or of standard input
//! ([`crate::series_csv`] reads them, [`crate::verdicts::changes_csv`] judges them), as
//! a table or JSON, and `--fail-on-change` for CI as `history` has it.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use quietbench_stats::{ChangePointConfig, Direction};

use super::history_changes::EXIT_REGRESSION;
use crate::series_csv::{IndexColumn, MAX_BYTES, parse_series_csv};
use crate::verdicts::changes::{p_label, runs_to_detect_text};
use crate::verdicts::changes_csv::{ColumnChanges, CsvChanges, LabelledChange};

/// Exit code when the input cannot be read as series: 2, as for a bad flag (bad usage).
pub const EXIT_BAD_INPUT: u8 = 2;

/// The most points in one series the detector is run on. The default mean-shift detector takes
/// under a second at 10,000 (benches/changepoints/tcpd.sh's cost table), but `--method
/// e-divisive` is O(n²) per shuffle (about a minute there, issue 31), so a longer series is
/// refused at once rather than left to run for hours.
pub const MAX_POINTS: usize = 10_000;

/// What `changes` was asked for.
pub struct ChangesRequest<'a> {
    /// The CSV file, or "-" for standard input.
    pub csv: &'a Path,
    /// Which column labels the points.
    pub index: IndexColumn,
    /// The detector's settings, as `history --change-points` takes them.
    pub config: ChangePointConfig,
    /// Which way is better, if the user says.
    pub better: Option<Direction>,
    /// Print JSON instead of a table.
    pub json: bool,
    /// Exit with [`EXIT_REGRESSION`] when the newest row brings a change to light.
    pub fail_on_change: bool,
}

/// Runs `changes`.
pub fn changes(req: &ChangesRequest<'_>) -> anyhow::Result<ExitCode> {
    let source = req.csv.to_string_lossy().into_owned();
    let shown = if source == "-" {
        "standard input".to_string()
    } else {
        source.clone()
    };
    let table = match read_input(req.csv)
        .and_then(|text| parse_series_csv(&text, &req.index).map_err(|e| e.to_string()))
    {
        Ok(table) => table,
        Err(why) => return Ok(bad_input(&shown, &why)),
    };
    if table.rows > MAX_POINTS {
        return Ok(bad_input(
            &shown,
            &format!(
                "{} rows: give at most {MAX_POINTS} rows (the newest); the default detector \
                 takes under a second there, but --method e-divisive takes O(n²) time per \
                 shuffle, about a minute",
                table.rows
            ),
        ));
    }
    let found = CsvChanges::detect(&table, &source, &req.config, req.better)
        .map_err(|e| anyhow::anyhow!("cannot search {shown} for change points: {e}"))?;
    if req.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print_text(&found);
    }
    if req.fail_on_change && found.new_changes().next().is_some() {
        for (s, c) in found.new_changes() {
            eprintln!(
                "quietbench: the newest row brings a {} to light in {:?}: {}",
                c.kind.name(),
                s.name,
                change_text(c)
            );
        }
        return Ok(ExitCode::from(EXIT_REGRESSION));
    }
    Ok(ExitCode::SUCCESS)
}

/// Says why the input was refused, and gives the exit code for it.
fn bad_input(shown: &str, why: &str) -> ExitCode {
    eprintln!("quietbench: error: {shown}: {why}");
    ExitCode::from(EXIT_BAD_INPUT)
}

/// The text of the file, or of standard input for "-", read to its end or to the bound.
fn read_input(path: &Path) -> Result<String, String> {
    let too_large = || {
        format!(
            "the input is larger than {MAX_BYTES} bytes (64 MiB), the most `changes` reads: keep the newest rows"
        )
    };
    if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read it: {e}"))?;
        if bytes.len() > MAX_BYTES {
            return Err(too_large());
        }
        return String::from_utf8(bytes)
            .map_err(|_| "it is not UTF-8 text (is it a CSV file?)".to_string());
    }
    quietbench_host::input::read_text(path, MAX_BYTES as u64).map_err(|e| match e {
        quietbench_host::input::InputError::TooLarge { .. } => too_large(),
        quietbench_host::input::InputError::NotText => {
            "it is not UTF-8 text (is it a CSV file?)".to_string()
        }
        quietbench_host::input::InputError::Io(e) => format!("cannot read it: {e}"),
    })
}

/// "change +20.0% (100 → 120) at r30, p = 0.005".
fn change_text(c: &LabelledChange) -> String {
    format!(
        "{} {} ({} → {}) at {}, p = {}",
        c.kind.name(),
        c.percent(),
        number(c.point.before_median),
        number(c.point.after_median),
        place(c),
        p_label(c.point.p_value)
    )
}

/// "row 30 (r30)", or "row 30" without an index column.
fn place(c: &LabelledChange) -> String {
    match &c.label {
        Some(label) => format!("row {} ({label})", c.point.index),
        None => format!("row {}", c.point.index),
    }
}

/// A value with the digits that tell levels apart.
fn number(x: f64) -> String {
    let magnitude = x.abs();
    if magnitude != 0.0 && !(1e-3..1e9).contains(&magnitude) {
        format!("{x:.4e}")
    } else {
        let text = format!("{x:.4}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn print_text(found: &CsvChanges) {
    for (i, s) in found.series.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_series(found, s);
    }
    let total: usize = found.series.iter().map(|s| s.change_points.len()).sum();
    let m = &found.method;
    println!();
    println!(
        "{total} change point{} in {} series of {} points ({}, permutation test: p ≤ {} over {} \
         shuffles, segments of at least {} points, seed {})",
        if total == 1 { "" } else { "s" },
        found.series.len(),
        found.rows,
        m.name,
        m.significance,
        m.permutations,
        m.min_segment,
        m.seed
    );
    let mut news = found.new_changes().peekable();
    if news.peek().is_none() {
        println!("the newest row brings no change to light");
    }
    for (s, c) in news {
        println!(
            "the newest row brings a {} to light in {}: {}",
            c.kind.name(),
            s.name,
            change_text(c)
        );
    }
}

fn print_series(found: &CsvChanges, s: &ColumnChanges) {
    let n = s.change_points.len();
    println!(
        "{}: {} points, median {}, {}",
        s.name,
        found.rows,
        number(s.median),
        match n {
            0 => "no change point".to_string(),
            1 => "1 change point".to_string(),
            _ => format!("{n} change points"),
        }
    );
    let reach = runs_to_detect_text(&s.runs_to_detect, "row");
    if !reach.is_empty() {
        println!("  {reach}");
    }
    if n == 0 {
        return;
    }
    let labels: Vec<&str> = s
        .change_points
        .iter()
        .map(|c| c.label.as_deref().unwrap_or("-"))
        .collect();
    let width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(1);
    let title = found.index_column.as_deref().unwrap_or("label");
    let width = width.max(title.chars().count()).min(40);
    println!(
        "  {:>7}  {:<width$}  {:>12}  {:>12}  {:>8}  {:>7}  kind",
        "row", title, "before", "after", "change", "p"
    );
    for (c, label) in s.change_points.iter().zip(labels) {
        let label: String = label.chars().take(40).collect();
        println!(
            "  {:>7}  {:<width$}  {:>12}  {:>12}  {:>8}  {:>7}  {}",
            c.point.index,
            label,
            number(c.point.before_median),
            number(c.point.after_median),
            c.percent(),
            p_label(c.point.p_value),
            c.kind.name()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_the_digits_that_matter() {
        assert_eq!(number(100.0), "100");
        assert_eq!(number(120.35), "120.35");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1.5e-6), "1.5000e-6");
        assert_eq!(number(-2.25), "-2.25");
    }

    #[test]
    fn a_missing_file_is_bad_input_naming_it() {
        let err = read_input(Path::new("/nonexistent/q.csv")).unwrap_err();
        assert!(err.starts_with("cannot read it"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("b.csv");
        std::fs::write(&binary, [0xff, 0xfe]).unwrap();
        assert!(read_input(&binary).unwrap_err().contains("not UTF-8"));
    }
}
