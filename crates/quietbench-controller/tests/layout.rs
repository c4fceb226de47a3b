//! The controller's layout stays readable: no source file grows past 600 lines, and no
//! process-wide state carries a command's options, here and in the crates split off it. Read
//! from the source files, so a change that breaks either rule fails here, by name, rather than
//! in a review months later. (No two modules import each other: tests/tests/module_cycles.rs
//! holds that for every crate, at any depth.)

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The sources of the crates that were this crate's modules once (split off along its layers),
/// which keep its rules on file length and process-wide state.
const SPLIT_OFF: &[&str] = &["quietbench-record", "quietbench-service", "quietbench-cli"];

fn split_off_sources(out: &mut Vec<PathBuf>) {
    for name in SPLIT_OFF {
        sources(&src().join("../..").join(name).join("src"), out);
    }
}

/// Test code may reach anywhere: files named tests.rs or under a tests/ folder, the record
/// crate's records for tests (under `record/test_records/`, built only for tests and the
/// `test-records` feature), and inline `#[cfg(test)]` modules (by convention the end of a file).
fn without_tests(path: &Path, text: &str) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    if name == "tests.rs"
        || path
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "test_records")
    {
        return None;
    }
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    // Comments name modules in doc links without importing them.
    Some(
        code.lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[test]
fn no_source_file_passes_600_lines() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    split_off_sources(&mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).unwrap().lines().count();
            (lines > 600).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}

/// No process-wide state carries a command's options: what a flag or a plan sets travels in
/// the command's context (`context::CommandContext`) to where it is read. A `static` holding a
/// lock, a once-cell or an atomic in the controller or its EC2 crate is such state (five of
/// them once held the TLS identity, the pre-warm policy, the caps lookup's target and source,
/// and the EC2 launcher); the crates split off from this one are read too; test code may keep
/// its own.
#[test]
fn no_process_wide_state_carries_options() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    sources(&src().join("../../quietbench-ec2/src"), &mut files);
    split_off_sources(&mut files);
    let mut found = Vec::new();
    for path in &files {
        let Some(code) = without_tests(path, &std::fs::read_to_string(path).unwrap()) else {
            continue;
        };
        for line in code.lines() {
            let line = line.trim();
            let is_static = line.starts_with("static ") || line.starts_with("pub static ");
            let mutable = ["OnceLock", "RwLock", "Mutex", "LazyLock", "Atomic", "Cell"]
                .iter()
                .any(|kind| line.contains(kind));
            if is_static && (mutable || line.starts_with("static mut")) {
                found.push(format!("{}: {line}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "process-wide state (hand it down in the command's context instead): {found:#?}"
    );
}
