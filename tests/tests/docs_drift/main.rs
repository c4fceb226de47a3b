//! Prose cannot drift from the code unnoticed. Each list below is read from the code, never typed
//! here, and compared with the page that promises to document it:
//!
//! - every field the JSON report emits (the types of quietbench-report's `src/json/schema.rs`
//!   and those they name, read from their source, and the proto messages they embed) is in
//!   docs/json-report.md;
//! - every key a plan file takes (asked of the plan parser itself) is in docs/plans.md;
//! - every member crate of the root Cargo.toml is in docs/architecture.md;
//! - every command's `--help`, found by walking `quietbench help`, matches its snapshot in
//!   tests/snapshots/help/ (`QUIETBENCH_BLESS=1` rewrites them);
//! - README.md gives the test command .ci/run runs; the security page's tests exist; links
//!   between the pages (and the docs pages the code cites) resolve.
//!
//! Why read the schema's source rather than serialize a report: a report built from a sample run
//! shows only the fields its data reaches (a null `caps`, an empty `bottlenecks`, one warning
//! kind), and a new field nested there would pass unseen. The reader understands what the schema
//! types use (named-field structs, internally tagged and unit enums, `flatten`, `rename`,
//! `skip`) and fails, naming the type, on anything else, so a new shape is taught to it rather
//! than silently skipped.

#[path = "../common/mod.rs"]
mod common;
mod help;
mod json;
mod pages;
mod plans;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace root")
        .to_path_buf()
}

pub(crate) fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` whose name ends with `suffix`, skipping build output.
pub(crate) fn files_under(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules" | "corpus") {
                files_under(&path, suffix, out);
            }
        } else if name.ends_with(suffix) {
            out.push(path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Markdown: sections, table rows and backticked names.

/// The contents of each `code span` in `text`.
pub(crate) fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Identifier-like words (`a_b`, `x1`) in `text`.
pub(crate) fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

pub(crate) struct Row {
    /// The first cell's code spans, as written but for a trailing `[]`.
    pub(crate) first: Vec<String>,
    /// Those of them that are one identifier (`models[]` as `models`).
    pub(crate) names: Vec<String>,
    /// Every identifier-like word in the row's code spans.
    pub(crate) mentions: BTreeSet<String>,
    /// The first cell of its table's header row, e.g. "field".
    pub(crate) header: String,
}

pub(crate) struct Section {
    pub(crate) heading: String,
    pub(crate) rows: Vec<Row>,
    pub(crate) text: String,
}

/// The page's sections (one per heading; text before the first is a section with an empty
/// heading), each with its table rows. Fenced code blocks are left out.
pub(crate) fn sections(markdown: &str) -> Vec<Section> {
    let mut out = vec![Section {
        heading: String::new(),
        rows: Vec::new(),
        text: String::new(),
    }];
    let mut fenced = false;
    let mut header: Option<String> = None;
    for line in markdown.lines() {
        if !line.trim_start().starts_with('|') {
            header = None;
        }
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            out.push(Section {
                heading: line.trim_start_matches('#').trim().to_string(),
                rows: Vec::new(),
                text: String::new(),
            });
            continue;
        }
        let section = out.last_mut().expect("one section at least");
        section.text.push_str(line);
        section.text.push('\n');
        if let Some(rest) = line.trim_start().strip_prefix('|') {
            // Cells end at an unescaped `|` (`\|z\|` is text).
            let mut first = String::new();
            let mut chars = rest.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => first.push(chars.next().unwrap()),
                    '|' => break,
                    _ => first.push(c),
                }
            }
            let first: Vec<String> = code_spans(&first)
                .into_iter()
                .map(|s| s.trim_end_matches("[]").to_string())
                .collect();
            let names = first
                .iter()
                .filter(|s| words(s).next() == Some(s.as_str()))
                .cloned()
                .collect();
            let mentions = code_spans(line)
                .iter()
                .flat_map(|s| words(s).map(str::to_string).collect::<Vec<_>>())
                .collect();
            let header = header
                .get_or_insert_with(|| words(&line.to_lowercase()).next().unwrap_or("").into())
                .clone();
            section.rows.push(Row {
                header,
                first,
                names,
                mentions,
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The JSON report's schema, read from its Rust source and the proto messages it embeds.

/// The non-empty lists, each under its title, for an assertion's message.
pub(crate) fn drift_report(lists: &[(&str, Vec<String>)]) -> String {
    lists
        .iter()
        .filter(|(_, items)| !items.is_empty())
        .map(|(title, items)| format!("\n{title}:\n  {}\n", items.join("\n  ")))
        .collect()
}

/// The workspace's members (paths) and each one's package name.
fn workspace_members() -> Vec<(String, String)> {
    let manifest = read("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the root Cargo.toml has a members list");
    members
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().trim_end_matches(','))
        .filter(|l| !l.is_empty())
        .map(|quoted| {
            let path = quoted.trim_matches('"').to_string();
            let own = read(&format!("{path}/Cargo.toml"));
            let name = own
                .split("[package]")
                .nth(1)
                .and_then(|p| p.lines().find_map(|l| l.trim().strip_prefix("name")))
                .and_then(|v| v.split('"').nth(1))
                .unwrap_or_else(|| panic!("{path}/Cargo.toml has no package name"))
                .to_string();
            (path, name)
        })
        .collect()
}

#[test]
fn every_crate_is_on_the_architecture_page() {
    let members = workspace_members();
    assert!(members.len() > 5, "members: {members:?}");
    let page = read("docs/architecture.md");
    let named: BTreeSet<String> = sections(&page)
        .iter()
        .flat_map(|s| s.rows.iter())
        .flat_map(|r| r.first.iter().cloned())
        .collect();
    let missing: Vec<String> = members
        .iter()
        .filter(|(_, name)| !named.contains(name))
        .map(|(path, name)| format!("{name} ({path})"))
        .collect();
    let names: BTreeSet<&String> = members.iter().map(|(_, n)| n).collect();
    let stale: Vec<&String> = named
        .iter()
        .filter(|n| n.starts_with("quietbench-") && !names.contains(n))
        .collect();
    let problems = drift_report(&[
        (
            "Members it does not name (give each a row whose first cell is `PACKAGE-NAME`, with \
             one line on why the crate exists)",
            missing,
        ),
        (
            "Rows naming a crate that is no member",
            stale.into_iter().cloned().collect(),
        ),
    ]);
    assert!(
        problems.is_empty(),
        "docs/architecture.md's crate table has drifted from the root Cargo.toml's members.\n\
         {problems}"
    );
}

// ---------------------------------------------------------------------------------------------
// `--help` of every command.

/// The first lines of README.md: where a newcomer looks for what to type.
const README_TOP_LINES: usize = 40;

#[test]
fn the_readme_gives_the_test_command_ci_runs() {
    let ci = read(".ci/run");
    let test_command = ci
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cargo test --workspace"))
        .expect(".ci/run runs `cargo test --workspace ...`");
    let readme = read("README.md");
    let top: String = readme
        .lines()
        .take(README_TOP_LINES)
        .collect::<Vec<_>>()
        .join("\n");
    for command in [
        test_command,
        "cargo run --release --bin quietbench -- run --local",
        "bash .ci/run",
    ] {
        assert!(
            top.contains(command),
            "README.md's first {README_TOP_LINES} lines do not give `{command}` (the command \
             .ci/run runs, or the one that builds and runs the main job): keep them in agreement"
        );
    }
}
